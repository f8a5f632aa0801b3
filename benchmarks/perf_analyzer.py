"""Drive NVIDIA's perf_analyzer against the ensemble with the benchmark's real JPEGs.

perf_analyzer ships in tritonclient 2.51's wheel (``.venv/bin/perf_analyzer``);
it needs ``libb64.so.0d`` and ``libcudart.so.12`` on the library path. Both
are bundled by nvidia-pytriton under hashed names, so plain-named symlinks
are made in ``.build/perf_analyzer_libs`` (docs/design.md, "The local server is the real tritonserver from a wheel").

Input data: ``--input-data`` JSON, one entry per JPEG, ``{"IMAGE": {"b64":
...}}``. For a BYTES tensor perf_analyzer sends the decoded ``b64`` as the
tensor's raw bytes, which for BYTES is the serialized form: a 4-byte
little-endian length, then the element (here one encoded image).
"""

from __future__ import annotations

import base64
import csv
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

from devtools.triton_server import BUILD_DIR

LIBRARY_DIR = BUILD_DIR / "perf_analyzer_libs"
NEEDED_LIBRARIES = {"libb64.so.0d": "libb64-*.so.0d", "libcudart.so.12": "libcudart-*.so.12*"}


def binary() -> Path | None:
    candidate = Path(sys.executable).parent / "perf_analyzer"
    if candidate.is_file():
        return candidate
    found = shutil.which("perf_analyzer")
    return Path(found) if found else None


def library_dir() -> Path:
    """A folder with the plain-named libraries perf_analyzer links against."""
    import pytriton

    bundled = Path(pytriton.__file__).resolve().parent.parent / "nvidia_pytriton.libs"
    LIBRARY_DIR.mkdir(parents=True, exist_ok=True)
    for plain, pattern in NEEDED_LIBRARIES.items():
        matches = sorted(bundled.glob(pattern))
        if not matches:
            raise FileNotFoundError(f"{pattern} not found in {bundled}")
        link = LIBRARY_DIR / plain
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(matches[0])
    return LIBRARY_DIR


def write_input_data(payloads: list[bytes], path: Path, input_name: str = "IMAGE") -> Path:
    entries = [{input_name: {"b64": base64.b64encode(struct.pack("<I", len(data)) + data).decode("ascii")}} for data in payloads]
    path.write_text(json.dumps({"data": entries}))
    return path


def _float(row: dict, key: str) -> float | None:
    value = row.get(key)
    return float(value) if value not in (None, "") else None


def measure(
    url: str,
    model: str,
    input_data: Path,
    concurrency: int,
    measurement_ms: int,
    work_dir: Path,
    max_trials: int = 3,
    stability_percentage: int = 1000,
    timeout_s: float = 300,
    input_name: str = "IMAGE",
) -> dict:
    """One perf_analyzer run at one concurrency; latencies in ms (its CSV is in µs).

    perf_analyzer repeats windows until the last three agree within
    ``stability_percentage``; on a shared machine they rarely agree within its
    default 10 %, so by default any three are accepted and it reports their
    average: 3 x ``measurement_ms`` of load.
    """
    executable = binary()
    if executable is None:
        return {"concurrency": concurrency, "error": "perf_analyzer not found"}
    csv_path = work_dir / f"perf_analyzer_c{concurrency}.csv"
    flags = {
        "-m": model,
        "-u": url,
        "-i": "grpc",
        "--input-data": str(input_data),
        "--shape": f"{input_name}:1",
        "--concurrency-range": f"{concurrency}:{concurrency}",
        "--measurement-interval": str(measurement_ms),
        "--max-trials": str(max_trials),
        "--stability-percentage": str(stability_percentage),
        "-f": str(csv_path),
    }
    command = [str(executable), *(part for flag in flags.items() for part in flag)]
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(library_dir()), env.get("LD_LIBRARY_PATH")]))
    result = {"concurrency": concurrency, "command": " ".join(command[1:])}
    try:
        completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {**result, "error": f"timed out after {timeout_s:.0f} s"}
    if completed.returncode != 0 or not csv_path.is_file():
        tail = (completed.stdout + completed.stderr).strip().splitlines()[-3:]
        return {**result, "error": f"exit {completed.returncode}: {' | '.join(tail)}"}
    parsed = _parse_csv(csv_path)
    if parsed is None:
        return {**result, "error": "empty CSV"}
    # perf_analyzer exits non-zero on any failed request ("Thread [i] had error"), so a CSV means none.
    return {**result, "errors": 0, **parsed}


def _parse_csv(path: Path) -> dict | None:
    """Throughput and latencies (ms; its CSV is in µs) of perf_analyzer's CSV, None when it is empty."""
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        return None
    row = rows[0]
    columns = {"p50_ms": "p50 latency", "p90_ms": "p90 latency", "p95_ms": "p95 latency", "p99_ms": "p99 latency", "mean_ms": "Avg latency"}
    columns |= {"server_queue_ms": "Server Queue", "server_compute_ms": "Server Compute Infer"}
    parsed = {key: (_float(row, column) or 0.0) / 1e3 for key, column in columns.items() if column in row}
    return {"throughput": _float(row, "Inferences/Second"), **parsed}
