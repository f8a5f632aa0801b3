"""The service's Prometheus metrics, read from the streams' live state at each scrape (``GET /metrics``).

Per stream (label ``stream``), as exposed:

- counters: ``vision_stream_frames_decoded_total``, ``vision_stream_frames_in_total`` (kept at the stream's rate),
  ``vision_stream_frames_out_total`` (answered), ``vision_stream_frames_skipped_total`` (above the rate),
  ``vision_stream_frames_dropped_total`` (behind), ``vision_stream_frames_failed_total`` (the request failed),
  ``vision_stream_corrupt_packets_total``, ``vision_stream_reconnects_total`` and
  ``vision_stream_line_crossings_total`` (labels ``line``, ``direction``, ``label``);
- gauges: ``vision_stream_up`` (1 while the source is streaming), ``vision_stream_last_frame_timestamp_seconds``,
  ``vision_stream_tracks_alive``, ``vision_stream_zone_occupancy`` (labels ``zone``, ``label``);
- the histogram ``vision_stream_latency_seconds``: from a frame's decoding to its tracked result.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

PREFIX = "vision_stream"
LATENCY_BUCKETS = (0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0)
COUNTERS = {
    "frames_decoded": ("decoded", "Frames the source decoded."),
    "frames_in": ("kept", "Frames kept at the stream's rate (fps in)."),
    "frames_skipped": ("skipped", "Frames above the stream's rate, not sent."),
    "frames_dropped": ("dropped", "Frames dropped because the previous one was still waiting (the server or the CPU is behind)."),
    "corrupt_packets": ("corrupt", "Packets skipped as corrupt."),
    "reconnects": ("reconnects", "Sessions of the source that ended (failed, ended or stalled) and were retried."),
}


class StreamCollector(Collector):
    def __init__(self, workers: Callable[[], Iterable]) -> None:
        self.workers = workers

    def collect(self):
        workers = list(self.workers())
        families = {name: CounterMetricFamily(f"{PREFIX}_{name}", text, labels=["stream"]) for name, (_, text) in COUNTERS.items()}
        out = CounterMetricFamily(f"{PREFIX}_frames_out", "Frames answered and tracked (fps out).", labels=["stream"])
        failed = CounterMetricFamily(f"{PREFIX}_frames_failed", "Frames whose request failed or timed out.", labels=["stream"])
        up = GaugeMetricFamily(f"{PREFIX}_up", "1 while the source is streaming, else 0.", labels=["stream"])
        last = GaugeMetricFamily(f"{PREFIX}_last_frame_timestamp_seconds", "Unix time of the last frame decoded.", labels=["stream"])
        alive = GaugeMetricFamily(f"{PREFIX}_tracks_alive", "Confirmed tracks, lost ones included.", labels=["stream"])
        lines = CounterMetricFamily(
            f"{PREFIX}_line_crossings", "Tracks crossing a line, per direction and label.", labels=["stream", "line", "direction", "label"]
        )
        zones = GaugeMetricFamily(f"{PREFIX}_zone_occupancy", "Tracks inside a zone, per label.", labels=["stream", "zone", "label"])
        for worker in workers:
            name, source = worker.config.name, worker.source_stats
            for metric, (attribute, _) in COUNTERS.items():
                families[metric].add_metric([name], getattr(source, attribute))
            out.add_metric([name], worker.stats.answered)
            failed.add_metric([name], worker.stats.failed)
            up.add_metric([name], 1.0 if source.state == "streaming" else 0.0)
            last.add_metric([name], source.last_frame_wall)
            alive.add_metric([name], worker.tracker.alive)
            for counter in worker.analytics.lines:
                for direction, counts in (("in", counter.counts_in), ("out", counter.counts_out)):
                    for label, count in counts.items():
                        lines.add_metric([name, counter.spec.name, direction, label], count)
            for zone in worker.analytics.zones:
                for label, count in zone.occupancy.items():
                    zones.add_metric([name, zone.spec.name, label], count)
        yield from (*families.values(), out, failed, up, last, alive, lines, zones)


class Metrics:
    def __init__(self, workers: Callable[[], Iterable]) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(StreamCollector(workers))
        self.latency = Histogram(
            f"{PREFIX}_latency_seconds",
            "From a frame's decoding to its tracked result.",
            ["stream"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def observe_latency(self, stream: str, seconds: float) -> None:
        self.latency.labels(stream).observe(seconds)

    def forget(self, stream: str) -> None:
        with contextlib.suppress(KeyError):
            self.latency.remove(stream)
