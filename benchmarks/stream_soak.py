"""The stream service's memory over a long run: ``--streams`` 720p H.264 streams at 10 fps (the capacity benchmark's
20 s clip, read in real time; each end is a reconnect, so sessions, tracks and zone exits come and go all along)
for ``--minutes``, its resident memory (RSS, /proc) sampled every ``--every`` seconds with its streams' counters.
Flat means the last third's RSS stays within ``--tolerance-mib`` of the first third's after warm-up.

    python -m benchmarks.stream_soak --url localhost:18301 --minutes 30      # by hand: not in CI
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import report
from benchmarks.stream_capacity import RESULTS, ROOT, get, scene
from devtools.loadgen import free_port


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="localhost:8001")
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=30.0)
    parser.add_argument("--tolerance-mib", type=float, default=20.0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    arguments = parser.parse_args(argv)
    command = "python -m benchmarks.stream_soak " + " ".join(sys.argv[1:] if argv is None else argv)
    settings = vars(arguments) | {"output": str(arguments.output)}
    result = report.new("stream_soak", f"Stream service memory over {arguments.minutes:g} minutes", command, settings)
    columns = {"minute": "minute", "rss_mib": "RSS MiB", "answered": "frames answered", "dropped": "dropped", "reconnects": "reconnects"}
    report.table(result, "memory", "The service's resident memory and its streams' counters (sums)", columns)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        clip = scene(20.0).write(work / "clip.mp4")
        config = work / "soak.toml"
        streams = [f'[[streams]]\nname = "cam{i}"\nurl = "{clip}"\nlines = [{{ name = "middle", start = [640, 0], end = [640, 720] }}]\n'
                   f'zones = [{{ name = "right", polygon = [[800, 0], [1280, 0], [1280, 720], [800, 720]] }}]\n'
                   "tracker = { high_score = 0.4, new_track_score = 0.45 }\n" for i in range(arguments.streams)]  # fmt: skip
        config.write_text('[service]\njsonl = ""\n\n' + "\n".join(streams))
        port = free_port()
        service = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vision_streams",
                "--config",
                str(config),
                "--port",
                str(port),
                "--host",
                "127.0.0.1",
                "--triton",
                arguments.url,
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        try:
            while time.monotonic() - started < arguments.minutes * 60:
                time.sleep(arguments.every)
                states = get(base + "/streams")["streams"]
                row = report.add(
                    result,
                    "memory",
                    minute=round((time.monotonic() - started) / 60, 1),
                    rss_mib=round(rss_mib(service.pid), 1),
                    answered=sum(s["answered"] for s in states),
                    dropped=sum(s["dropped"] for s in states),
                    reconnects=sum(s["reconnects"] for s in states),
                )
                print(row, flush=True)
        finally:
            service.terminate()
            service.wait(timeout=30)
    samples = [r["rss_mib"] for r in report.rows(result, "memory")]
    third = max(len(samples) // 3, 1)
    first, last = float(np.mean(samples[:third])), float(np.mean(samples[-third:]))
    result["notes"].append(
        f"RSS first third {first:.1f} MiB, last third {last:.1f} MiB (growth {last - first:+.1f} MiB; flat within "
        f"{arguments.tolerance_mib:g} MiB: {'yes' if abs(last - first) <= arguments.tolerance_mib else 'no'})"
    )
    report.write(report.finish(result), arguments.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
