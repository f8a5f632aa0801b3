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

from benchmarks import images
from builders import recipe as recipes
from devtools import loadgen
from devtools.triton_server import LocalTritonServer
from vision_serving import classification, core_model, detection, image_codec, layout, model_config, preprocessing, segmentation

RESULTS_DIR = Path(__file__).resolve().parent / "results"
BATCH = 8


class InProcess:
    """One pipeline's served computation in this process."""

    def __init__(self, pipeline: layout.Pipeline) -> None:
        self.task = recipes.load(pipeline).task
        preprocess = model_config.load_config(pipeline.model_dir("preprocess"))
        self.spec = preprocessing.PreprocessSpec.from_config(preprocess)
        self.limits = preprocessing.limits_from_config(preprocess)
        preprocessing.set_threads(model_config.int_parameter(preprocess, "opencv_threads", 0))
        self.core = core_model.load(model_config.load_config(pipeline.core_dir, "cpu"), pipeline.core_version_dir)  # as served
        postprocess = model_config.load_config(pipeline.model_dir("postprocess"))
        if self.task == "classification":
            logits = model_config.tensors_by_role(postprocess).required_input("FP32")
            classes = int(model_config.tensor(postprocess, logits).dims[-1])
            self.top_k = model_config.int_parameter(postprocess, "top_k")
            self.labels = classification.load_labels(
                pipeline.model_dir("postprocess") / model_config.parameter(postprocess, "labels_file"), classes
            )
        elif self.task == "segmentation":
            self.mask_spec = segmentation.MaskSpec(
                model_config.parameter(postprocess, "mask_mode"), float(model_config.parameter(postprocess, "threshold"))
            )
        elif self.task == "detection":
            self.detector = detection.DetectorSpec.from_config(postprocess)
            self.anchors = detection.ssd_anchors(self.detector.decode.anchors)
        else:
            raise ValueError(f"no in-process postprocessing for task {self.task!r}")

    def __call__(self, payloads: list[bytes]) -> int:
        decoded = [image_codec.decode_rgb(data, self.limits) for data in payloads]
        batch = preprocessing.preprocess_batch(decoded, self.spec)
        outputs = self.core.run({self.core.input_names[0]: batch})
        if self.task == "classification":
            classification.top_k(outputs[0], [self.top_k] * len(decoded), self.labels)
        elif self.task == "detection":
            by_width = {int(output.shape[-1]): output for output in outputs}  # regressors, logits: by their last dim
            raw_boxes, raw_scores = by_width[self.detector.decode.num_coords], by_width[self.detector.num_classes]
            detection.detect(raw_boxes, raw_scores, preprocessing.image_sizes(decoded), self.detector, anchors=self.anchors)
        else:
            segmentation.masks(outputs[0], preprocessing.image_sizes(decoded), self.mask_spec)
        return len(decoded)


def _limit_worker(name: str, repository: str, payloads: list[bytes], duration_s: float, queue: Any) -> None:
    run = InProcess(layout.pipeline(name, Path(repository)))
    run(payloads[:BATCH])  # warm-up
    done, start, position = 0, time.perf_counter(), 0
    while time.perf_counter() - start < duration_s:
        chunk = [payloads[(position + i) % len(payloads)] for i in range(BATCH)]
        position += BATCH
        done += run(chunk)
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
        f"Run: {result['created_at']}; {result['cpus']} CPUs; load average at start {result['load_average']}.  ",
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
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measured window")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    chosen = [layout.pipeline(name) for name in args.pipeline] if args.pipeline else layout.pipelines()
    payloads = [p.data for p in images.jpeg_payloads()]
    processes = os.cpu_count() or 1
    result: dict[str, Any] = {
        "command": " ".join(["python -m benchmarks.pipelines", *(argv if argv is not None else sys.argv[1:])]),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": processes,
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
        http_port=loadgen.free_port(), grpc_port=loadgen.free_port(), metrics_port=loadgen.free_port(), log_file=Path("/dev/null")
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
