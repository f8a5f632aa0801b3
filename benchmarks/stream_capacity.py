"""How many 720p H.264 streams at 10 fps one stream service and the local server sustain (< 1 % of the frames
dropped), and what a frame costs, against a plain loop (decode, the same model in process, the same tracker), side by
side in one run.

Streams: ``--streams`` counts (default 1, 2, 4, 6, 8), each an H.264 file of moving faces on a photo (1280x720,
10 fps, a key frame a second; tests/support/stream_scenes.py) read in real time (FFmpeg's pace as a camera's),
``--seconds`` measured after ``--warmup``. For each count, one after the other on the same files:

- **service**: ``python -m vision_streams`` with that many streams, Triton at ``--url`` (its process tree's CPU read
  from /proc with ``--server-pid``). Its own CPU per frame is split by thread: ``source-*`` (demux, decode, pacing,
  RGB conversion), ``encode*`` (the JPEG hand-over) and the rest (the event loop: gRPC, tracking, outputs); the
  server's is "served".
- **plain loop**: one thread per stream in this process doing what a script would: decode (PyAV, same pacing),
  the pipeline's preprocess, core and postprocess in process (``vision_serving.served.ServedPipeline`` on the raw
  pixels: no JPEG, no gRPC), the same tracker. A frame is dropped when the loop reaches it more than 0.4 s late (the
  service's tolerance: 4 requests in flight at 10 fps).

Latency: from a frame's decoding to its tracked result, p50/p95 over the window.

    python -m benchmarks.stream_capacity --url localhost:18301 --server-pid $(pgrep -f 'tritonserver.*18301')
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import av
import numpy as np

from benchmarks import cpu, report
from devtools.loadgen import free_port
from tests.support import stream_scenes
from vision_serving import image_codec, layout
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.served import ServedPipeline
from vision_streams.config import ServiceConfig
from vision_streams.source import Pacer
from vision_streams.tracking import Tracker, TrackerParameters

RESULTS = Path(__file__).resolve().parent / "results" / "streams"
ROOT = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")
MAX_DROPPED = 0.01
# The plain loop drops a frame it reaches this late: the service's own tolerance (its default max_in_flight, 4
# requests in flight per stream, at 10 fps), so both drop only when they fall behind for good.
LATE_S = ServiceConfig().max_in_flight / 10


# What moves in the streams, for each detector: its objects, and the tracker's thresholds for its scores.
SCENES = {
    "faces": (("astronaut", "grace_hopper"), {"high_score": 0.4, "new_track_score": 0.45}),
    "shapes": (("circle", "square"), {"high_score": 0.3, "new_track_score": 0.35}),  # the tests' YOLO detector
}


def scene(seconds: float, width: int = 1280, height: int = 720, fps: int = 10, objects: str = "faces") -> stream_scenes.Scene:
    side = height // 3
    first, second = SCENES[objects][0]
    return stream_scenes.Scene(
        width,
        height,
        fps,
        seconds,
        (
            stream_scenes.Mover(first, side, (side, height * 0.3), (width / seconds * 0.6, 0.0)),
            stream_scenes.Mover(second, side, (width - side, height * 0.7), (-width / seconds * 0.6, 0.0)),
        ),
    )


def service_cpu(pid: int, streams: list[dict]) -> dict[str, float]:
    """CPU seconds of the service: its sources' threads (decode), its JPEG encodes (hand-over), and the rest of the
    process (the event loop: gRPC, tracking, outputs), from its streams' state and /proc."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    total = (int(fields[11]) + int(fields[12])) / TICKS
    source = sum(s["cpu_s"] for s in streams)
    encode = sum(s["handover_cpu_s"] for s in streams)
    return {"source": source, "encode": encode, "loop": total - source - encode}


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def run_service(files: list[Path], arguments: argparse.Namespace, work: Path) -> dict:
    url, server_pid, warmup, seconds = arguments.url, arguments.server_pid, arguments.warmup, arguments.seconds
    config = work / "capacity.toml"
    tracker = ", ".join(f"{key} = {value}" for key, value in SCENES[arguments.scene][1].items())
    lines = ['[service]\njsonl = ""\n']
    for index, file in enumerate(files):
        lines.append(
            f'[[streams]]\nname = "cam{index}"\nurl = "{file}"\nmodel = "{arguments.model}"\nfps = 10\ntracker = {{ {tracker} }}\n'
        )
    config.write_text("\n".join(lines))
    port = free_port()
    service = subprocess.Popen(
        [sys.executable, "-m", "vision_streams", "--config", str(config), "--port", str(port), "--host", "127.0.0.1", "--triton", url],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                get(base + "/healthz")
                break
            except OSError:
                time.sleep(0.2)
        time.sleep(warmup)
        before = get(base + "/streams")["streams"]
        threads_before = service_cpu(service.pid, before)
        server_before = cpu.tree_cpu_seconds(server_pid) if server_pid else None
        time.sleep(seconds)
        after = get(base + "/streams")["streams"]
        threads_after = service_cpu(service.pid, after)
        server_after = cpu.tree_cpu_seconds(server_pid) if server_pid else None
    finally:
        service.terminate()
        service.wait(timeout=30)
    kept = sum(a["kept"] - b["kept"] for a, b in zip(after, before))
    dropped = sum(a["dropped"] - b["dropped"] for a, b in zip(after, before))
    answered = sum(a["answered"] - b["answered"] for a, b in zip(after, before))
    failed = sum(a["failed"] - b["failed"] for a, b in zip(after, before))
    per_frame = {group: (threads_after[group] - threads_before[group]) / max(answered, 1) * 1000 for group in threads_after}
    served = None if server_before is None or server_after is None else (server_after - server_before) / max(answered, 1) * 1000
    p50 = float(np.median([s["latency"]["p50_ms"] or 0 for s in after]))
    p95 = float(np.max([s["latency"]["p95_ms"] or 0 for s in after]))
    return {
        "fps_in": round(kept / seconds, 1),
        "fps_out": round(answered / seconds, 1),
        "dropped_pct": round(100 * (dropped + failed) / max(kept, 1), 2),
        "p50_ms": round(p50, 1),
        "p95_ms": round(p95, 1),
        "decode_ms": round(per_frame["source"], 2),
        "handover_ms": round(per_frame["encode"], 2),
        "loop_ms": round(per_frame["loop"], 2),
        "served_ms": None if served is None else round(served, 2),
    }


class PlainLoop(threading.Thread):
    """decode -> in-process model -> tracker, one frame after the other, for one file read in real time."""

    def __init__(self, file: Path, pipeline: ServedPipeline, stop: threading.Event, tracker: dict) -> None:
        super().__init__(daemon=True)
        self.file, self.pipeline, self.stop, self.tracker_parameters = file, pipeline, stop, tracker
        self.kept = self.dropped = self.answered = 0
        self.latencies: list[float] = []
        self.decode_s = self.model_s = self.track_s = 0.0
        self.measuring = False

    def run(self) -> None:
        tracker = Tracker(TrackerParameters(**self.tracker_parameters), 0.1)
        while not self.stop.is_set():
            with av.open(str(self.file)) as container:
                started, pacer = time.monotonic(), Pacer(10)
                decode_started = time.thread_time()
                for frame in container.decode(video=0):
                    if self.stop.is_set():
                        return
                    due = started + float(frame.time or 0.0)
                    wait = due - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                    if not pacer.due(float(frame.time or 0.0)):
                        continue
                    if time.monotonic() - due > LATE_S:  # a camera's frame is gone (the service's tolerance, below)
                        self.count(dropped=1)
                        decode_started = time.thread_time()
                        continue
                    pixels = frame.to_ndarray(format="rgb24")
                    decoded_at, model_started = time.monotonic(), time.thread_time()
                    result = self.pipeline.run_decoded([image_codec.Decoded(pixels, pixels.shape[0], pixels.shape[1])]).outputs()
                    track_started = time.thread_time()
                    count = int(result["COUNT"].reshape(-1)[0])
                    labels = [str(x) for x in result["LABELS"].reshape(-1)[:count]]
                    tracker.update(
                        result["BOXES"][0][:count], result["SCORES"][0][:count], result["CLASS_IDS"][0][:count], labels, decoded_at
                    )
                    done = time.thread_time()
                    if self.measuring:
                        self.kept += 1
                        self.answered += 1
                        self.latencies.append(time.monotonic() - decoded_at)
                        self.decode_s += model_started - decode_started
                        self.model_s += track_started - model_started
                        self.track_s += done - track_started
                    decode_started = time.thread_time()

    def count(self, dropped: int) -> None:
        if self.measuring:
            self.kept += dropped
            self.dropped += dropped


def run_plain_loop(files: list[Path], arguments: argparse.Namespace) -> dict:
    warmup, seconds = arguments.warmup, arguments.seconds
    pipeline = ServedPipeline.load(PipelineConfigs.load(layout.pipeline(arguments.model, arguments.model_repository)))
    pipeline.use_served_threads()
    stop = threading.Event()
    loops = [PlainLoop(file, pipeline, stop, SCENES[arguments.scene][1]) for file in files]
    for loop in loops:
        loop.start()
    time.sleep(warmup)
    for loop in loops:
        loop.measuring = True
    time.sleep(seconds)
    for loop in loops:
        loop.measuring = False
    stop.set()
    for loop in loops:
        loop.join(timeout=10)
    kept, answered = sum(x.kept for x in loops), sum(x.answered for x in loops)
    latencies = [v for x in loops for v in x.latencies] or [0.0]
    per = max(answered, 1)
    return {
        "fps_in": round(kept / seconds, 1),
        "fps_out": round(answered / seconds, 1),
        "dropped_pct": round(100 * sum(x.dropped for x in loops) / max(kept, 1), 2),
        "p50_ms": round(float(np.percentile(latencies, 50)) * 1000, 1),
        "p95_ms": round(float(np.percentile(latencies, 95)) * 1000, 1),
        "decode_ms": round(sum(x.decode_s for x in loops) / per * 1000, 2),
        "handover_ms": 0.0,
        "loop_ms": round(sum(x.track_s for x in loops) / per * 1000, 2),
        "served_ms": round(sum(x.model_s for x in loops) / per * 1000, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="localhost:8001")
    parser.add_argument("--server-pid", type=int)
    parser.add_argument("--model", default="face_detector", help="the detection pipeline (served at --url, and in process)")
    parser.add_argument("--model-repository", type=Path, default=layout.MODEL_REPOSITORY, help="where the plain loop finds --model")
    parser.add_argument("--scene", choices=sorted(SCENES), default="faces", help="what moves: faces, or the tests' YOLO shapes")
    parser.add_argument("--name", default="stream_capacity", help="the result's file name (one per detector)")
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 2, 4, 6, 8])
    parser.add_argument("--warmup", type=float, default=6.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    arguments = parser.parse_args(argv)
    command = "python -m benchmarks.stream_capacity " + " ".join(sys.argv[1:] if argv is None else argv)
    settings = vars(arguments) | {"output": str(arguments.output), "model_repository": str(arguments.model_repository)}
    result = report.new(arguments.name, "Streams of 720p H.264 at 10 fps: the stream service vs a plain loop", command, settings)
    columns = {
        "system": "system",
        "streams": "streams",
        "fps_in": "fps in",
        "fps_out": "fps out",
        "dropped_pct": "dropped %",
        "sustained": "< 1 % dropped",
        "p50_ms": "p50 ms",
        "p95_ms": "p95 ms",
        "decode_ms": "decode CPU ms/frame",
        "handover_ms": "hand-over CPU ms/frame",
        "loop_ms": "loop (gRPC, tracking) CPU ms/frame",
        "served_ms": "served CPU ms/frame",
    }
    report.table(result, "capacity", f"Streams at 10 fps, side by side ({arguments.model})", columns,
                 "served: the server's process tree (service) or the in-process model (plain loop), per answered frame.")  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        clip = scene(20.0, objects=arguments.scene).write(work / "clip.mp4")
        for count in arguments.streams:
            files = [clip] * count
            for system in ("service", "plain loop"):
                measured = run_service(files, arguments, work) if system == "service" else run_plain_loop(files, arguments)
                row = report.add(
                    result, "capacity", system=system, streams=count, sustained=measured["dropped_pct"] < 100 * MAX_DROPPED, **measured
                )
                print(row, flush=True)
    report.write(report.finish(result), arguments.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
