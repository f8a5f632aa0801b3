"""One stream at work: its source thread, its requests to Triton, its tracker, lines and zones, and its outputs.

Two coroutines per stream. The **sender** takes the newest frame from the source's mailbox once fewer than
``max_in_flight`` of the stream's requests are unanswered, encodes it and sends it; the **receiver** takes the answers
in the order the frames were sent (so the tracker sees the frames in order), updates the tracker and the analytics
and writes the frame's record and its events. A request that fails or times out is counted (``failed``) and its frame
is lost; the stream goes on with the next.

A new session of the source (a reconnect) within ``track_timeout_s`` of the last frame keeps the tracks and IDs:
the gap does not count towards their ``lost_seconds``, and they are predicted over it as over dropped frames. After
a longer gap the tracks end (zone exits are written) and new ones start; IDs never repeat within a stream.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .analytics import Analytics
from .config import ServiceConfig, StreamConfig
from .detector import Detections, Detector
from .outputs import Sink
from .source import Frame, FrameSource, Mailbox, SourceStats
from .tracking import TrackedObject, Tracker

LOG = logging.getLogger("vision_streams.worker")
LATENCY_WINDOW = 512  # the last frames whose latency the state's p50/p95 describe


@dataclass
class Shown:
    """The latest frame with its result, for the preview."""

    frame: Frame
    tracks: list[TrackedObject]
    sequence: int = 0


@dataclass
class WorkerStats:
    sent: int = 0
    answered: int = 0
    failed: int = 0
    last_failure: str = ""
    latencies: deque = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))
    handover_cpu_s: float = 0.0  # the JPEG encodes' CPU time, summed


class StreamWorker:
    def __init__(self, config: StreamConfig, service: ServiceConfig, detector: Detector, sink: Sink, observe_latency=None) -> None:
        self.config, self.service, self.detector, self.sink = config, service, detector, sink
        self.observe_latency = observe_latency or (lambda stream, seconds: None)
        self.source_stats = SourceStats()
        self.stats = WorkerStats()
        self.tracker = Tracker(config.tracker, 1.0 / config.fps)
        self.analytics = Analytics(list(config.lines), list(config.zones), config.anchor)
        self.stop_event = threading.Event()
        self.shown: Shown | None = None
        self.tasks: list[asyncio.Task] = []
        self.source: FrameSource | None = None
        self.last_session = 0
        self.last_clock: float | None = None
        self.started = time.time()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.mailbox = Mailbox(loop, self._dropped)
        self.slots = asyncio.Semaphore(self.service.max_in_flight)
        self.pending: asyncio.Queue[tuple[Frame, asyncio.Task]] = asyncio.Queue(self.service.max_in_flight)

        def report(event: dict) -> None:
            loop.call_soon_threadsafe(self._source_event, event)

        self.source = FrameSource(self.config, self.mailbox.put, self.source_stats, self.stop_event, report)
        self.source.start()
        self.tasks = [
            asyncio.create_task(self._send(), name=f"send {self.config.name}"),
            asyncio.create_task(self._receive(), name=f"receive {self.config.name}"),
        ]

    def _dropped(self) -> None:
        self.source_stats.dropped += 1

    async def stop(self) -> None:
        self.stop_event.set()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        while not self.pending.empty():
            _, request = self.pending.get_nowait()
            request.cancel()
        # The source thread ends at its next packet or timeout (read_timeout_s at most); it is a daemon.

    async def _send(self) -> None:
        while True:
            await self.slots.acquire()
            frame = await self.mailbox.get()
            request = asyncio.create_task(self._request(frame))
            self.stats.sent += 1
            await self.pending.put((frame, request))

    async def _request(self, frame: Frame) -> Detections:
        payload, cpu_s = await self.detector.encode(frame.pixels)
        self.stats.handover_cpu_s += cpu_s
        return await self.detector.detect(
            self.config.model, payload, self.config.name, frame.sequence, frame.wall_time, self.config.score_threshold
        )

    async def _receive(self) -> None:
        while True:
            frame, request = await self.pending.get()
            try:
                detections = await request
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the server refused or failed this frame: the stream goes on
                self.stats.failed += 1
                self.stats.last_failure = f"{type(error).__name__}: {error}"[:300]
                self.slots.release()
                continue
            self.slots.release()
            try:
                self._apply(frame, detections.only(self.config.labels))
            except Exception as error:  # a bug here must not stop the stream: logged, counted, the next frame goes on
                LOG.exception("stream %s: frame %d not applied", self.config.name, frame.sequence)
                self.stats.failed += 1
                self.stats.last_failure = f"{type(error).__name__}: {error}"[:300]

    def _apply(self, frame: Frame, detections: Detections) -> None:
        self._continue_session(frame)
        update = self.tracker.update(detections.boxes, detections.scores, detections.class_ids, detections.labels, frame.stream_time)
        events = self.analytics.update(update.tracks, update.removed, frame.stream_time)
        latency = time.monotonic() - frame.clock
        self.stats.answered += 1
        self.stats.latencies.append(latency)
        self.observe_latency(self.config.name, latency)
        stamp = round(frame.wall_time, 6)
        self.sink.frame(
            {
                "stream": self.config.name,
                "session": frame.session,
                "sequence": frame.sequence,
                "timestamp": stamp,
                "media_time": round(frame.media_time, 6),
                "latency_ms": round(latency * 1000, 2),
                "detections": len(detections),
                "tracks": [track.as_json() for track in update.tracks],
            }
        )
        for event in events:
            self.sink.event({"stream": self.config.name, "session": frame.session, "sequence": frame.sequence, **event, "timestamp": stamp})
        self.shown = Shown(frame, update.tracks, frame.sequence)

    def _continue_session(self, frame: Frame) -> None:
        """A frame of a new session: keep the tracks across a short gap, end them after a long one."""
        if self.last_clock is None or frame.session == self.last_session:
            self.last_session, self.last_clock = frame.session, frame.stream_time
            return
        gap = max(frame.stream_time - self.last_clock, 0.0)
        self.last_session, self.last_clock = frame.session, frame.stream_time
        if gap <= self.config.track_timeout_s:
            self.tracker.excuse(max(gap - 1.0 / self.config.fps, 0.0))
            self.sink.event({"stream": self.config.name, "session": frame.session, "event": "tracks_kept", "gap_s": round(gap, 3)})
            return
        removed = self.tracker.reset()
        events = self.analytics.update([], removed, frame.stream_time)
        self.sink.event({"stream": self.config.name, "session": frame.session, "event": "tracks_reset", "gap_s": round(gap, 3)})
        for event in events:
            self.sink.event({"stream": self.config.name, "session": frame.session, **event, "timestamp": round(frame.wall_time, 6)})

    def _source_event(self, event: dict) -> None:
        if not self.stop_event.is_set():
            self.sink.event({"stream": self.config.name, **event, "timestamp": round(time.time(), 6)})

    def latency_percentiles(self) -> dict[str, float | None]:
        values = np.array(self.stats.latencies)
        if len(values) == 0:
            return {"p50_ms": None, "p95_ms": None}
        return {"p50_ms": round(float(np.percentile(values, 50)) * 1000, 2), "p95_ms": round(float(np.percentile(values, 95)) * 1000, 2)}

    def state(self) -> dict:
        source = dict(vars(self.source_stats))
        shown = self.shown
        return {
            "name": self.config.name,
            "url": self.config.url,
            "model": self.config.model,
            "fps": self.config.fps,
            **source,
            "sent": self.stats.sent,
            "answered": self.stats.answered,
            "failed": self.stats.failed,
            "last_failure": self.stats.last_failure,
            "latency": self.latency_percentiles(),
            "handover_cpu_s": round(self.stats.handover_cpu_s, 3),
            "tracks_alive": self.tracker.alive,
            "tracks": [track.as_json() for track in shown.tracks] if shown else [],
            "analytics": self.analytics.state(time.time()),
        }
