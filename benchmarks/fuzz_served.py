"""The served fuzz benchmark: mutated uploads of every format mixed with valid photos, 4 at a time, to every
pipeline of a running server (``./scripts/serve``), against a clean run of the valid photos alone.

Uploads: real photos as JPEG, PNG and WebP (benchmarks/decode_cost.py's) and the committed HEIC/AVIF seeds,
and their mutants (devtools/upload_mutants.py: the formats' own length and size fields, truncation, bit flips,
runs, splices). Each request carries one upload to one pipeline, the pipelines taken in turn. Two runs:

1. clean: the valid photos alone, ``--clean`` requests;
2. mixed: ``--cases`` requests, a valid photo with probability ``--valid-share``, else a mutant.

Reported, as JSON and a Markdown table (docs/operations.md records a run):

- the answer classes of each kind of upload (``OK``, ``INVALID_ARGUMENT``, anything else), with what else;
- each refused upload's served time over the median valid photo's of its pipeline (clean run): median, p99,
  max, and how many are over 5 times;
- the valid photos' p99 in the mixed run against the clean run's, per pipeline;
- every process of the server (tritonserver and its stubs) before and after: the same PIDs, and it is ready.

The targets: no answer other than OK or INVALID_ARGUMENT, no upload over 5 times a valid photo's served time,
the valid p99 within 1.5 times the clean run's.

    ./scripts/serve --http-port 18100 --grpc-port 18101 --metrics-port 18102 &
    .venv/bin/python -m benchmarks.fuzz_served --url localhost:18101 [--cases 2000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from benchmarks import cpu, decode_cost
from devtools import upload_mutants
from devtools.loadgen import stub_processes
from vision_serving import layout

CONCURRENCY = 4
TIMEOUT_S = 120.0
TARGET_COST_RATIO = 5.0
TARGET_P99_RATIO = 1.5


@dataclass(frozen=True)
class Answer:
    pipeline: str
    kind: str  # "valid" or "mutant"
    format: str
    mutations: str
    status: str  # OK, INVALID_ARGUMENT, or another gRPC status
    message: str
    seconds: float


def server_pid(grpc_port: int) -> int | None:
    """The tritonserver serving ``grpc_port`` (its command line names the port)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"tritonserver") and f"--grpc-port={grpc_port}".encode() in argv:
            return int(entry.name)
    return None


def processes(pid: int | None) -> dict[str, int]:
    return {} if pid is None else {"tritonserver": pid, **stub_processes(pid)}


class Sender:
    """One gRPC client per worker thread; each request one upload to one pipeline, timed."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._local = threading.local()

    def client(self) -> grpcclient.InferenceServerClient:
        if not hasattr(self._local, "client"):
            self._local.client = grpcclient.InferenceServerClient(self.url)
        return self._local.client

    def send(self, pipeline: str, payload: bytes) -> tuple[str, str, float]:
        tensor = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[payload]], dtype=object))
        started = time.perf_counter()
        try:
            self.client().infer(pipeline, [tensor], client_timeout=TIMEOUT_S)
            status, message = "OK", ""
        except InferenceServerException as error:
            status, message = str(error.status()).removeprefix("StatusCode."), (error.message() or "")[:160]
        return status, message, time.perf_counter() - started


def run(sender: Sender, jobs: list[tuple[str, str, str, str, bytes]]) -> list[Answer]:
    def one(job: tuple[str, str, str, str, bytes]) -> Answer:
        pipeline, kind, image_format, mutations, payload = job
        status, message, seconds = sender.send(pipeline, payload)
        return Answer(pipeline, kind, image_format, mutations, status, message, seconds)

    with ThreadPoolExecutor(CONCURRENCY) as pool:
        return list(pool.map(one, jobs))


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def measure(url: str, cases: int, clean: int, valid_share: float, seed: int, pipelines: list[str]) -> dict:
    uploads = decode_cost.seed_uploads()
    formats = [upload_mutants.sniffed(data) for data in uploads]
    sender = Sender(url)
    pid = server_pid(int(url.rsplit(":", 1)[1]))
    before = processes(pid)
    for pipeline in pipelines:  # warm-up: every pipeline once per format
        for data in dict(zip(formats, uploads)).values():
            sender.send(pipeline, data)
    rng = random.Random(seed)

    def valid_job(index: int) -> tuple[str, str, str, str, bytes]:
        choice = rng.randrange(len(uploads))
        return pipelines[index % len(pipelines)], "valid", formats[choice], "none", uploads[choice]

    clean_jobs = [valid_job(index) for index in range(clean)]
    mixed_jobs = []
    for index in range(cases):
        if rng.random() < valid_share:
            mixed_jobs.append(valid_job(index))
        else:
            case = upload_mutants.mutant(uploads, seed, index)
            mixed_jobs.append((pipelines[index % len(pipelines)], "mutant", case.format, case.mutations, case.data))
    started = time.monotonic()
    clean_answers = run(sender, clean_jobs)
    mixed_answers = run(sender, mixed_jobs)
    elapsed = time.monotonic() - started
    after = processes(pid)
    client = grpcclient.InferenceServerClient(url)
    return report(clean_answers, mixed_answers, pipelines, before, after, client.is_server_ready(), elapsed, seed)


def report(
    clean: list[Answer], mixed: list[Answer], pipelines: list[str], before: dict, after: dict, ready: bool, seconds: float, seed: int
) -> dict:
    valid_median = {
        p: statistics.median([a.seconds for a in clean if a.pipeline == p and a.status == "OK"] or [float("nan")]) for p in pipelines
    }
    classes = Counter(f"{a.kind} {a.status}" for a in clean + mixed)
    unexpected = [a for a in clean + mixed if a.status not in ("OK", "INVALID_ARGUMENT")]
    refused = [a for a in mixed if a.status == "INVALID_ARGUMENT"]
    ratios = [a.seconds / valid_median[a.pipeline] for a in refused]
    per_pipeline = {pipeline: pipeline_row(pipeline, clean, mixed, refused, valid_median[pipeline]) for pipeline in pipelines}
    slowest = sorted(((a.seconds / valid_median[a.pipeline], a) for a in mixed if a.kind == "mutant"), key=lambda pair: -pair[0])[:8]
    clean_all = [a.seconds for a in clean if a.status == "OK"]
    mixed_all = [a.seconds for a in mixed if a.kind == "valid" and a.status == "OK"]
    return {
        "machine": cpu.describe(cpu.machine()),
        "load_average": round(os.getloadavg()[0], 1),
        "seed": seed,
        "seconds": round(seconds, 1),
        "requests": {"clean": len(clean), "mixed": len(mixed), "mutants": sum(a.kind == "mutant" for a in mixed)},
        "classes": dict(sorted(classes.items())),
        "unexpected": [vars(a) for a in unexpected[:20]],
        "refused_cost_over_valid": {
            "median": round(statistics.median(ratios), 3) if ratios else None,
            "p99": round(percentile(ratios, 99), 3) if ratios else None,
            "max": round(max(ratios), 3) if ratios else None,
            "over_5x": sum(ratio > TARGET_COST_RATIO for ratio in ratios),
        },
        "mutants_over_5x": sum(ratio > TARGET_COST_RATIO for ratio, _ in slowest),
        "slowest_mutants": [
            {
                "ratio": round(ratio, 2),
                "pipeline": a.pipeline,
                "format": a.format,
                "mutations": a.mutations,
                "status": a.status,
                "ms": round(a.seconds * 1000, 1),
            }
            for ratio, a in slowest
        ],
        "valid_p99_ms": {"clean": round(percentile(clean_all, 99) * 1000, 1), "mixed": round(percentile(mixed_all, 99) * 1000, 1)},
        "valid_p99_ratio": round(percentile(mixed_all, 99) / percentile(clean_all, 99), 2),
        "per_pipeline": per_pipeline,
        "processes_unchanged": before == after and bool(before),
        "processes": len(before),
        "ready_after": ready,
    }


def pipeline_row(pipeline: str, clean: list[Answer], mixed: list[Answer], refused: list[Answer], valid_median: float) -> dict:
    """One pipeline's valid photos (clean and mixed p99, their spread) and refused uploads over its valid median."""
    clean_valid = [a.seconds for a in clean if a.pipeline == pipeline and a.status == "OK"]
    mixed_valid = [a.seconds for a in mixed if a.pipeline == pipeline and a.kind == "valid" and a.status == "OK"]
    ratios = [a.seconds / valid_median for a in refused if a.pipeline == pipeline]
    return {
        "valid_median_ms": round(valid_median * 1000, 1),
        "clean_p99_ms": round(percentile(clean_valid, 99) * 1000, 1),
        "mixed_p99_ms": round(percentile(mixed_valid, 99) * 1000, 1),
        "p99_ratio": round(percentile(mixed_valid, 99) / percentile(clean_valid, 99), 2),
        # The valid photos' own spread (the queueing a refused upload waits through too): clean p99 over median.
        "clean_p99_over_median": round(percentile(clean_valid, 99) / valid_median, 2),
        "refused": len(ratios),
        "refused_cost_median": round(statistics.median(ratios), 3) if ratios else None,
        "refused_cost_p99": round(percentile(ratios, 99), 3) if ratios else None,
        "refused_cost_max": round(max(ratios), 3) if ratios else None,
    }


def markdown(result: dict) -> str:
    lines = [
        f"Served fuzz benchmark ({result['machine']}, load average {result.get('load_average')}; seed {result['seed']}, "
        f"{result['requests']['mixed']} mixed requests of which "
        f"{result['requests']['mutants']} mutants, {result['requests']['clean']} clean, {CONCURRENCY} at a time, {result['seconds']} s)",
        "",
        "| pipeline | valid median ms | clean p99 ms (/ median) | mixed p99 ms | p99 ratio | refused | refused / valid: median | p99 | max |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for pipeline, row in result["per_pipeline"].items():
        lines.append(
            f"| {pipeline} | {row['valid_median_ms']} | {row['clean_p99_ms']} ({row['clean_p99_over_median']}) | {row['mixed_p99_ms']} "
            f"| {row['p99_ratio']} | {row['refused']} "
            f"| {row['refused_cost_median']} | {row['refused_cost_p99']} | {row['refused_cost_max']} |"
        )
    classes = ", ".join(f"{name}: {count}" for name, count in result["classes"].items())
    lines += [
        "",
        f"Answers: {classes}. Other than OK or INVALID_ARGUMENT: {len(result['unexpected'])}.",
        f"Refused uploads over {TARGET_COST_RATIO:g}x a valid photo's served time: {result['refused_cost_over_valid']['over_5x']}; "
        f"valid p99 mixed/clean: {result['valid_p99_ratio']}; processes unchanged ({result['processes']}): "
        f"{result['processes_unchanged']}; ready after: {result['ready_after']}.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fuzz_served", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="localhost:8001", help="the server's gRPC address")
    parser.add_argument("--cases", type=int, default=2000, help="requests of the mixed run")
    parser.add_argument("--clean", type=int, default=400, help="requests of the clean run")
    parser.add_argument("--valid-share", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--pipelines", nargs="*", help="default: every pipeline of the model repository")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args(argv)
    pipelines = options.pipelines or [pipeline.name for pipeline in layout.pipelines()]
    result = measure(options.url, options.cases, options.clean, options.valid_share, options.seed, pipelines)
    if options.json:
        options.json.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))
    targets = (
        not result["unexpected"] and result["refused_cost_over_valid"]["over_5x"] == 0 and result["valid_p99_ratio"] <= TARGET_P99_RATIO
    )
    return 0 if targets and result["processes_unchanged"] and result["ready_after"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
