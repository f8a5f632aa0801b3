"""``python -m builders evaluate --pipeline NAME --dataset DIR``: your labelled data, FP32 against what is served.

Per-sample agreement between two precisions can look fine while the metric on the whole
dataset drops; this measures the task's own metric on labelled images for the FP32 model and
for the precision the ladder chose (``served_precision.json``), through the served pipeline
(:class:`vision_serving.served.ServedPipeline`: decoding, preprocessing, core, postprocessing).
The dataset's layout and the metric are the task's (``dataset`` and ``dataset_metrics`` of its
:mod:`vision_serving.tasks` module): class folders and top-1/top-5 accuracy, image + mask pairs
and mean IoU, images with YOLO labels and precision/recall/AP50.

Reports: ``.build/reports/<pipeline>/dataset.{md,json}``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from builders import BuildError, Log, precision, stderr_logger
from builders.loaded import LoadedPipeline
from vision_serving import image_codec

log_to_stderr = stderr_logger("evaluate")
CHUNK = 64


def _served(pipeline: LoadedPipeline) -> tuple[str, Path]:
    record = pipeline.layout.served_onnx()
    if record is None:
        raise BuildError(f"{pipeline.name}: no served precision recorded; run `python -m builders all --pipeline {pipeline.name}` first")
    return str(json.loads(pipeline.layout.served_precision.read_text())["precision"]), record


def evaluate_dataset(pipeline: LoadedPipeline, directory: Path, log: Log = log_to_stderr) -> dict[str, Any]:
    started = time.perf_counter()
    task = pipeline.task
    directory = Path(directory)
    if not directory.is_dir():
        raise BuildError(f"--dataset {directory}: not a directory")
    try:
        samples = task.dataset(directory, pipeline.configs.postprocessor())
    except ValueError as error:
        raise BuildError(str(error)) from None
    if not samples:
        raise BuildError(f"--dataset {directory}: no labelled images found; a {task.name} dataset is {task.dataset_layout}")
    served_precision, served_path = _served(pipeline)
    runs = {"fp32": (pipeline.layout.onnx("fp32"), "all")}
    if served_precision != "fp32":
        runs[served_precision] = (served_path, "disable_all" if served_precision == "int8" else "all")
    log(f"{len(samples)} labelled images from {directory}; FP32 and the served {served_precision}")
    metrics: dict[str, dict[str, float]] = {}
    for name, (path, optimization) in runs.items():
        served = pipeline.served(parameters=precision.rung_parameters(path, optimization))
        chunks = []
        for start in range(0, len(samples), CHUNK):
            part = samples[start : start + CHUNK]
            decoded = []
            for sample in part:
                try:
                    decoded.append(served.decode(sample.path.read_bytes()))
                except image_codec.ImageError as error:
                    raise BuildError(f"{sample.path}: {error}") from None
            chunks.append((served.run_decoded(decoded), part))
        try:
            metrics[name] = task.dataset_metrics(chunks)
        except ValueError as error:
            raise BuildError(str(error)) from None
        log(f"{name}: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics[name].items()))
    report = {
        "pipeline": pipeline.name,
        "task": task.name,
        "dataset": str(directory),
        "images": len(samples),
        "served_precision": served_precision,
        "metrics": metrics,
        "seconds": round(time.perf_counter() - started, 1),
    }
    reports = pipeline.layout.reports_dir
    reports.mkdir(parents=True, exist_ok=True)
    (reports / "dataset.json").write_text(json.dumps(report, indent=2) + "\n")
    columns = list(next(iter(metrics.values())))
    rows = [f"| {name} | " + " | ".join(f"{values[column]:.4f}" for column in columns) + " |" for name, values in metrics.items()]
    (reports / "dataset.md").write_text(
        f"# {pipeline.name} on {directory} ({len(samples)} images)\n\n| precision | "
        + " | ".join(columns)
        + " |\n|---|"
        + "---:|" * len(columns)
        + "\n"
        + "\n".join(rows)
        + "\n"
    )
    log(f"report: {reports / 'dataset.md'}")
    return report
