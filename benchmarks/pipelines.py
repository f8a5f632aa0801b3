"""Every pipeline's ensemble against its in-process limit, side by side in one run.

    .venv/bin/python -m benchmarks.pipelines [--duration 10] [--concurrency 16] [--pipeline NAME ...]

For each pipeline of the model repository, on the same real JPEG photos
(``benchmarks/images.py``: web sizes, 320 to 1024 px):

- **in-process limit**: the served computation with no server — the same
  decode → preprocess → core (onnxruntime with the ``cpu`` config's session
  options) → postprocess, from the same library and configs, in one process per
  CPU, batches of 8: images per second. What a server on this machine could at
  best approach.
- **ensemble (gRPC)**: the real tritonserver at concurrency C, one image per
  request, closed loop (``devtools.loadgen.closed_loop``): requests per second,
  p50 / p95, errors.

On a shared machine compare within one run: the ratio ensemble / limit is the
figure. Results: ``benchmarks/results/pipelines.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

from benchmarks import cpu, images
from devtools import loadgen
from devtools.triton_server import LocalTritonServer
from vision_serving import layout, model_config
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.served import ServedPipeline

RESULTS_DIR = Path(__file__).resolve().parent / "results"
BATCH = 8


def in_process(pipeline: layout.Pipeline) -> ServedPipeline:
    """One pipeline's served computation in this process, with its served core config and thread settings."""
    served = ServedPipeline.load(PipelineConfigs.load(pipeline))
    served.use_served_threads()
    return served


def _limit_worker(name: str, repository: str, payloads: list[bytes], duration_s: float, queue: Any) -> None:
    served = in_process(layout.pipeline(name, Path(repository)))
    served.run(payloads[:BATCH]).outputs()  # warm-up
    done, start, position = 0, time.perf_counter(), 0
    while time.perf_counter() - start < duration_s:
        chunk = [payloads[(position + i) % len(payloads)] for i in range(BATCH)]
        position += BATCH
        served.run(chunk).outputs()  # every output tensor, as the server answers
        done += len(chunk)
    queue.put(done / (time.perf_counter() - start))


def in_process_limit(pipeline: layout.Pipeline, payloads: list[bytes], duration_s: float, processes: int) -> float:
    """Images per second of ``processes`` in-process pipelines running side by side."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [
        context.Process(target=_limit_worker, args=(pipeline.name, str(pipeline.repository.parent), payloads, duration_s, queue))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    rates = [queue.get(timeout=duration_s + 300) for _ in workers]
    for worker in workers:
        worker.join()
    return float(sum(rates))


def ensemble_sender(url: str, pipeline: layout.Pipeline, payloads: list[bytes], timeout_s: float = 60.0) -> loadgen.SenderFactory:
    """One image per request to the pipeline's ensemble, raw tritonclient (no retries)."""
    model = pipeline.name
    image_name = model_config.image_input_name(model_config.load_config(pipeline.ensemble_dir))

    def factory(worker: int) -> loadgen.Sender:
        client = grpcclient.InferenceServerClient(url)

        def send(request: int) -> None:
            image = grpcclient.InferInput(image_name, [1, 1], "BYTES")
            image.set_data_from_numpy(np.array([[payloads[request % len(payloads)]]], dtype=np.object_))
            client.infer(model, [image], client_timeout=timeout_s)
            return None

        return send

    return factory


def render(result: dict[str, Any]) -> str:
    lines = [
        "# Pipelines: each ensemble against its in-process limit",
        f"Command: `{result['command']}`  ",
        f"Run: {result['created_at']}; {cpu.describe(result['machine']) if 'machine' in result else str(result['cpus']) + ' CPUs'}; "
        f"load average at start {result['load_average']}.  ",
        f"Requests: {result['images']} real photos as JPEG (longer side 320/640/1024 px), one per request; "
        f"closed loop at concurrency {result['concurrency']}, {result['warmup_s']} s warm-up + {result['duration_s']} s window.",
        "",
        "| pipeline | in-process limit (img/s) | ensemble gRPC (req/s) | ensemble / limit | p50 ms | p95 ms | errors |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in result["pipelines"].items():
        lines.append(
            f"| {name} | {row['limit']:.1f} | {row['ensemble']['throughput']:.1f} | {row['ratio']:.2f} | "
            f"{row['ensemble']['p50_ms']:.1f} | {row['ensemble']['p95_ms']:.1f} | {row['ensemble']['errors']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pipelines", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipeline", action="append", help="only these pipelines (default: every one)")
    parser.add_argument("--model-repository", type=Path, default=layout.MODEL_REPOSITORY, help="default: %(default)s")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measured window")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    chosen = (
        [layout.pipeline(name, args.model_repository) for name in args.pipeline]
        if args.pipeline
        else layout.pipelines(args.model_repository)
    )
    payloads = [p.data for p in images.jpeg_payloads()]
    processes = os.cpu_count() or 1
    result: dict[str, Any] = {
        "command": " ".join(["python -m benchmarks.pipelines", *(argv if argv is not None else sys.argv[1:])]),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": processes,
        "machine": cpu.machine(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "images": len(payloads),
        "concurrency": args.concurrency,
        "warmup_s": args.warmup,
        "duration_s": args.duration,
        "pipelines": {},
    }
    for pipeline in chosen:
        limit = in_process_limit(pipeline, payloads, args.duration, processes)
        print(f"{pipeline.name}: in-process limit {limit:.1f} img/s", file=sys.stderr, flush=True)
        result["pipelines"][pipeline.name] = {"limit": limit}
    server = LocalTritonServer(
        http_port=loadgen.free_port(),
        grpc_port=loadgen.free_port(),
        metrics_port=loadgen.free_port(),
        log_file=Path("/dev/null"),
        model_repository=args.model_repository,
        pipelines=[pipeline.name for pipeline in chosen],
    )
    server.start()
    try:
        server.wait_ready()
        for pipeline in chosen:
            measured = loadgen.closed_loop(
                ensemble_sender(server.grpc_url, pipeline, payloads), args.concurrency, args.warmup, args.duration
            )
            row = result["pipelines"][pipeline.name]
            row["ensemble"] = measured.as_dict()
            row["ratio"] = measured.throughput / row["limit"]
            print(f"{pipeline.name}: ensemble {measured.throughput:.1f} req/s = {row['ratio']:.2f} x the limit", file=sys.stderr)
    finally:
        server.stop()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "pipelines.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.output_dir / "pipelines.md").write_text(render(result))
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
