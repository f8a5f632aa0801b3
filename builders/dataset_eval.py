"""``python -m builders evaluate --pipeline NAME --dataset DIR``: your labelled data, FP32 against what is served.

Per-sample agreement between two precisions can look fine while the metric on
the whole dataset drops; this measures the task's own metric on labelled images
for the FP32 model and for the precision the ladder chose (served_precision.json),
through the served decoding, preprocessing and postprocessing:

- classification: ``DIR/<label>/*.jpg|png`` (class per folder; the folder name is
  a label of the postprocess model's labels file, or a class id). Reports top-1
  and top-5 accuracy.
- segmentation: ``DIR/<name>.jpg|png`` with its mask ``DIR/<name>.mask.png``
  (8-bit, the image's size, person > 127). Reports mean IoU (person and
  background) and person IoU, on masks thresholded as served.

Reports: ``.build/reports/<pipeline>/dataset.{md,json}``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from builders import BuildError, Log, stderr_logger
from builders import recipe as recipes
from builders.calibration import IMAGE_SUFFIXES
from vision_serving import classification, image_codec, model_config, preprocessing, segmentation
from vision_serving.layout import Pipeline

log_to_stderr = stderr_logger("evaluate")
MASK_SUFFIX = ".mask.png"


@dataclass(frozen=True)
class Sample:
    path: Path
    target: Any  # class id (classification) or a boolean mask (segmentation)


def _images(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES and not p.name.endswith(MASK_SUFFIX))


def classification_samples(directory: Path, labels: list[str]) -> list[Sample]:
    index = {label: i for i, label in enumerate(labels)}
    samples = []
    for folder in sorted(p for p in directory.iterdir() if p.is_dir()):
        if folder.name in index:
            class_id = index[folder.name]
        elif folder.name.isdigit() and int(folder.name) < len(labels):
            class_id = int(folder.name)
        else:
            raise BuildError(f"{folder}: the folder name is neither a label of the model nor a class id")
        samples += [Sample(path, class_id) for path in _images(folder)]
    return samples


def segmentation_samples(directory: Path) -> list[Sample]:
    samples = []
    for path in _images(directory):
        mask_path = path.with_name(path.stem + MASK_SUFFIX)
        if not mask_path.is_file():
            raise BuildError(f"{path}: no mask {mask_path.name} beside it")
        mask = cv2.imread(str(mask_path), cv2.IMREAD_GRAYSCALE)
        if mask is None:
            raise BuildError(f"{mask_path}: not a readable 8-bit mask")
        samples.append(Sample(path, mask > 127))
    return samples


def _served(pipeline: Pipeline) -> tuple[str, Path]:
    from builders import precision

    served = precision.served_onnx(pipeline)
    if served is None:
        raise BuildError(f"{pipeline.name}: no served precision recorded; run `python -m builders all --pipeline {pipeline.name}` first")
    record = json.loads(pipeline.served_precision.read_text())
    return str(record["precision"]), served


def _outputs(path: Path, optimization: str, batch: np.ndarray, chunk: int = 8) -> np.ndarray:
    from vision_serving.onnx_core import create_session

    session = create_session(path, optimization)
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {name: batch[i : i + chunk]})[0] for i in range(0, len(batch), chunk)])


def evaluate_dataset(repository: Path | str, directory: Path, log: Log = log_to_stderr) -> dict[str, Any]:
    started = time.perf_counter()
    pipeline = Pipeline.at(repository)
    recipe = recipes.load(pipeline)
    directory = Path(directory)
    if not directory.is_dir():
        raise BuildError(f"--dataset {directory}: not a directory")
    preprocess = model_config.load_config(pipeline.model_dir("preprocess"))
    spec, limits = preprocessing.PreprocessSpec.from_config(preprocess), preprocessing.limits_from_config(preprocess)
    postprocess = model_config.load_config(pipeline.model_dir("postprocess"))
    if recipe.task == "classification":
        logits_name = model_config.tensors_by_role(postprocess).required_input("FP32")
        count = int(model_config.tensor(postprocess, logits_name).dims[-1])
        labels_path = pipeline.model_dir("postprocess") / model_config.parameter(postprocess, "labels_file")
        labels = [label.decode() for label in classification.load_labels(labels_path, count)]
        samples = classification_samples(directory, labels)
    elif recipe.task == "segmentation":
        samples = segmentation_samples(directory)
    else:
        raise BuildError(f"{pipeline.name}: evaluate --dataset does not support the task {recipe.task!r} yet")
    if not samples:
        raise BuildError(f"--dataset {directory}: no labelled images found (see `python -m builders evaluate --help`)")
    decoded = []
    for sample in samples:
        try:
            decoded.append(image_codec.decode(sample.path.read_bytes(), limits, preprocessing.decode_minimum(spec)))
        except image_codec.ImageError as error:
            raise BuildError(f"{sample.path}: {error}") from None
    batch = preprocessing.preprocess_batch([d.image for d in decoded], spec)
    served_precision, served_path = _served(pipeline)
    runs = {"fp32": (pipeline.onnx("fp32"), "all")}
    if served_precision != "fp32":
        runs[served_precision] = (served_path, "disable_all" if served_precision == "int8" else "all")
    log(f"{len(samples)} labelled images from {directory}; FP32 and the served {served_precision}")
    metrics: dict[str, dict[str, float]] = {}
    for name, (path, optimization) in runs.items():
        outputs = _outputs(path, optimization, batch)
        if recipe.task == "classification":
            targets = np.array([s.target for s in samples])
            top = np.argsort(-outputs, axis=1)[:, :5]
            metrics[name] = {
                "top1_accuracy": float(np.mean(top[:, 0] == targets)),
                "top5_accuracy": float(np.mean([t in row for t, row in zip(targets, top)])),
            }
        else:
            mask_spec = segmentation.MaskSpec("threshold", float(model_config.parameter(postprocess, "threshold")))
            predicted = [
                segmentation.mask_from_probabilities(segmentation.upsample(p, d.height, d.width), mask_spec)[0]
                for p, d in zip(outputs, decoded)
            ]
            truth = [s.target for s in samples]
            for mask, target, sample in zip(predicted, truth, samples):
                if mask.shape != target.shape:
                    raise BuildError(f"{sample.path}: mask is {target.shape[::-1]}, the image {mask.shape[::-1]} (width x height)")
            metrics[name] = {
                "mean_iou": segmentation.mean_iou(predicted, truth),
                "person_iou": float(np.mean([segmentation.iou(m, t) for m, t in zip(predicted, truth)])),
            }
        log(f"{name}: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics[name].items()))
    report = {
        "pipeline": pipeline.name,
        "task": recipe.task,
        "dataset": str(directory),
        "images": len(samples),
        "served_precision": served_precision,
        "metrics": metrics,
        "seconds": round(time.perf_counter() - started, 1),
    }
    pipeline.reports_dir.mkdir(parents=True, exist_ok=True)
    (pipeline.reports_dir / "dataset.json").write_text(json.dumps(report, indent=2) + "\n")
    rows = [f"| {name} | " + " | ".join(f"{v:.4f}" for v in values.values()) + " |" for name, values in metrics.items()]
    header = "| precision | " + " | ".join(next(iter(metrics.values()))) + " |"
    (pipeline.reports_dir / "dataset.md").write_text(
        f"# {pipeline.name} on {directory} ({len(samples)} images)\n\n{header}\n|---|"
        + "---:|" * len(next(iter(metrics.values())))
        + "\n"
        + "\n".join(rows)
        + "\n"
    )
    log(f"report: {pipeline.reports_dir / 'dataset.md'}")
    return report
