"""The precision ladder: serve INT8 when it passes the task's gate, else FP16, else FP32.

``python -m builders select-precision --pipeline NAME`` (run by ``all``) walks
the recipe's ``precisions`` (default int8 -> fp16 -> fp32). Each rung's model
is built (INT8: :mod:`builders.quantize`, ModelOpt Q/DQ calibrated through the
served preprocessing; FP16: onnxconverter-common's float16 conversion with FP32
inputs and outputs) and compared with FP32 on the recipe's held-out photos and
seeded augmentations of them, through the served decoding and preprocessing,
with the task's own metric:

- classification: top-1 agreement, top-5 overlap and logit cosine (``[gate]
  min_top1 / min_top5 / min_cosine``);
- segmentation: mean over images of the person/background IoU of the masks at
  the photo's own size, thresholded as served (``[gate] min_mean_iou``);
- detection: the faces both models find through the served postprocessing
  (boxes in pixels of the photo), matched one to one by box IoU >= 0.5:
  agreement ``2 * matched / (FP32 faces + candidate faces)`` and the mean IoU
  of the matched boxes (``[gate] min_detection_agreement / min_matched_iou``).

INT8 runs on onnxruntime with graph optimizations disabled (Q -> DQ -> float
ops, close to TensorRT's INT8; onnxruntime's fused CPU int8 kernels are wrong
on AVX2-only CPUs: docs/design.md). The first rung that passes is recorded in
``<pipeline>_core/1/served_precision.json`` with every rung's numbers;
``build-engine`` builds that ONNX, and a report goes to ``.build/reports/<pipeline>/``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from builders import BuildError, Log, stderr_logger
from builders import recipe as recipes
from builders.artifacts import atomic_write_bytes, sha256_file
from vision_serving import detection, model_config, segmentation
from vision_serving.layout import Pipeline

log_to_stderr = stderr_logger("select-precision")
AUGMENTED_PER_PHOTO = 24


# A model's outputs on the held-out batch, in the ONNX's output order.
Outputs = list[np.ndarray]
# Faces count as the same face when their boxes overlap this much (the detection gate's matching).
MATCH_IOU = 0.5


def _run(path: Path, batch: np.ndarray, graph_optimization: str, chunk: int = 8) -> Outputs:
    from vision_serving.onnx_core import create_session

    session = create_session(path, graph_optimization)
    name = session.get_inputs()[0].name
    parts = [session.run(None, {name: batch[i : i + chunk]}) for i in range(0, len(batch), chunk)]
    return [np.concatenate([part[k] for part in parts]) for k in range(len(parts[0]))]


class HeldOut:
    """The held-out images through the served decode + preprocessing, and their original sizes."""

    def __init__(self, pipeline: Pipeline, augmented_per_photo: int = AUGMENTED_PER_PHOTO) -> None:
        from builders import calibration
        from vision_serving import image_codec

        spec, limits = calibration.served_preprocessing(pipeline.repository)
        sources = calibration.evaluation_sources(pipeline.repository)
        count = len(sources) * (1 + augmented_per_photo)
        self.samples = calibration.make_samples(sources, count, calibration.EVALUATION_SEED, calibration.EVALUATION_PROFILE, limits)
        self.batch = calibration.preprocess_samples(self.samples, spec, limits)
        self.sizes = np.array([image_codec.decode_rgb(s.data, limits).shape[:2] for s in self.samples], dtype=np.int32)
        self.photos = [s.source for s in self.samples]


def classification_metrics(recipe: recipes.Recipe, reference: Outputs, candidate: Outputs, _: HeldOut) -> dict[str, Any]:
    from builders import evaluate

    metrics = evaluate.compare_logits(reference[0], candidate[0])
    gate = recipe.gate
    checks = {
        "top1_agreement": (metrics["top1_agreement"], gate.min_top1),
        "top5_overlap": (metrics["top5_overlap"], gate.min_top5),
        "cosine_mean": (metrics["cosine_mean"], gate.min_cosine),
    }
    return {"metrics": metrics, "checks": {k: {"value": v, "min": m, "pass": v >= m} for k, (v, m) in checks.items()}}


def segmentation_masks(probabilities: np.ndarray, sizes: np.ndarray, spec: segmentation.MaskSpec) -> list[np.ndarray]:
    """Served-style masks at each image's own size (upsample, then threshold)."""
    return [
        segmentation.mask_from_probabilities(segmentation.upsample(p, int(h), int(w)), spec)[0] for p, (h, w) in zip(probabilities, sizes)
    ]


def mask_spec(pipeline: Pipeline) -> segmentation.MaskSpec:
    config = model_config.load_config(pipeline.model_dir("postprocess"))
    return segmentation.MaskSpec("threshold", float(model_config.parameter(config, "threshold")))


def segmentation_metrics(recipe: recipes.Recipe, reference: Outputs, candidate: Outputs, held_out: HeldOut) -> dict[str, Any]:
    spec = mask_spec(recipe.pipeline)
    first = segmentation_masks(reference[0], held_out.sizes, spec)
    second = segmentation_masks(candidate[0], held_out.sizes, spec)
    mean_iou = segmentation.mean_iou(first, second)
    person_iou = [segmentation.iou(a, b) for a, b in zip(first, second)]
    metrics = {
        "count": len(first),
        "mean_iou": mean_iou,
        "person_iou_min": float(np.min(person_iou)),
        "person_iou_mean": float(np.mean(person_iou)),
        "max_abs_probability_diff": float(np.abs(reference[0] - candidate[0]).max()),
    }
    return {
        "metrics": metrics,
        "checks": {"mean_iou": {"value": mean_iou, "min": recipe.gate.min_mean_iou, "pass": mean_iou >= recipe.gate.min_mean_iou}},
    }


def served_detections(pipeline: Pipeline, outputs: Outputs, sizes: np.ndarray) -> detection.Detections:
    """Raw detector outputs -> faces in pixels of each image, as the served postprocess model finds them."""
    spec = detection.DetectorSpec.from_config(model_config.load_config(pipeline.model_dir("postprocess")))
    by_width = {int(output.shape[-1]): output for output in outputs}
    raw_boxes, raw_scores = by_width[spec.decode.num_coords], by_width[spec.num_classes]
    return detection.detect(raw_boxes, raw_scores, sizes, spec, anchors=detection.ssd_anchors(spec.decode.anchors))


def detection_metrics(recipe: recipes.Recipe, reference: Outputs, candidate: Outputs, held_out: HeldOut) -> dict[str, Any]:
    first = served_detections(recipe.pipeline, reference, held_out.sizes)
    second = served_detections(recipe.pipeline, candidate, held_out.sizes)
    ious: list[float] = []
    keypoint_errors: list[float] = []
    score_errors: list[float] = []
    same_count = 0
    for index in range(len(first)):
        boxes, keypoints, scores = first.image(index)
        other_boxes, other_keypoints, other_scores = second.image(index)
        same_count += len(boxes) == len(other_boxes)
        for i, j, iou in detection.match_boxes(boxes, other_boxes, MATCH_IOU):
            ious.append(iou)
            face = max(float(boxes[i, 2] - boxes[i, 0]), 1e-6)
            keypoint_errors.append(float(np.linalg.norm(keypoints[i] - other_keypoints[j], axis=-1).max()) / face)
            score_errors.append(abs(float(scores[i] - other_scores[j])))
    found = int(first.counts.sum()) + int(second.counts.sum())
    agreement = 2.0 * len(ious) / found if found else 1.0
    matched_iou = float(np.mean(ious)) if ious else 1.0
    metrics = {
        "images": len(first),
        "faces_fp32": int(first.counts.sum()),
        "faces_candidate": int(second.counts.sum()),
        "matched": len(ious),
        "detection_agreement": agreement,
        "images_with_the_same_count": same_count / len(first),
        "matched_iou_mean": matched_iou,
        "matched_iou_min": float(np.min(ious)) if ious else 1.0,
        "keypoint_error_max_of_face_width": float(np.max(keypoint_errors)) if keypoint_errors else 0.0,
        "score_abs_diff_max": float(np.max(score_errors)) if score_errors else 0.0,
    }
    gate = recipe.gate
    checks = {
        "detection_agreement": (agreement, gate.min_detection_agreement),
        "matched_iou_mean": (matched_iou, gate.min_matched_iou),
    }
    return {"metrics": metrics, "checks": {k: {"value": v, "min": m, "pass": v >= m} for k, (v, m) in checks.items()}}


TASK_METRICS: dict[str, Callable[[recipes.Recipe, Outputs, Outputs, HeldOut], dict[str, Any]]] = {
    "classification": classification_metrics,
    "segmentation": segmentation_metrics,
    "detection": detection_metrics,
}


def build_fp16(pipeline: Pipeline, log: Log) -> Path:
    """FP32 ONNX -> FP16 ONNX with FP32 inputs/outputs (skipped when up to date)."""
    import onnx
    from onnxconverter_common import float16

    from builders import provenance
    from builders.artifacts import input_hash, package_versions

    source, output = pipeline.onnx("fp32"), pipeline.onnx("fp16")
    inputs = {
        "onnx": sha256_file(source),
        "converter": "onnxconverter-common float16, keep_io_types",
        "tools": package_versions(["onnxconverter-common", "onnx"]),
    }
    expected = input_hash(inputs)
    if provenance.is_current(output, expected):
        return output
    log(f"converting {source.name} to FP16 (inputs and outputs stay FP32)...")
    data = float16.convert_float_to_float16(onnx.load(str(source)), keep_io_types=True).SerializeToString()
    atomic_write_bytes(output, data)
    record = provenance.Provenance.for_bytes(
        "fp16", expected, output, data, input_hashes={"onnx": inputs["onnx"]}, tools=inputs["tools"], inputs=inputs
    )
    record.write(provenance.path_for(output))
    return output


def build_rung(pipeline: Pipeline, precision: str, log: Log) -> tuple[Path, str]:
    """The rung's ONNX and the onnxruntime graph optimization to evaluate it with."""
    if precision == "int8":
        from builders import quantize

        result = quantize.quantize(pipeline.repository, quantize.recipe_options(pipeline.repository))
        return result.onnx_path, "disable_all"
    if precision == "fp16":
        return build_fp16(pipeline, log), "all"
    return pipeline.onnx("fp32"), "all"


def select_precision(repository: Path | str, log: Log = log_to_stderr) -> dict[str, Any]:
    """Walk the ladder; write served_precision.json and the report; return the record."""
    started = time.perf_counter()
    pipeline = Pipeline.at(repository)
    recipe = recipes.load(pipeline)
    fp32 = pipeline.onnx("fp32")
    if not fp32.is_file():
        raise BuildError(f"{fp32} does not exist; run `python -m builders export --pipeline {pipeline.name}` first")
    held_out = HeldOut(pipeline)
    log(f"{len(held_out.samples)} held-out images ({len(set(held_out.photos))} photos + augmentations)")
    reference = _run(fp32, held_out.batch, "all")
    metric = TASK_METRICS[recipe.task]
    rungs: list[dict[str, Any]] = []
    served: dict[str, Any] | None = None
    for precision in recipe.precisions:
        path, optimization = build_rung(pipeline, precision, log)
        if precision == "fp32":
            result: dict[str, Any] = {"metrics": {}, "checks": {}}
            passed = True
        else:
            result = metric(recipe, reference, _run(path, held_out.batch, optimization), held_out)
            passed = all(check["pass"] for check in result["checks"].values())
        rung = {"precision": precision, "onnx": path.name, "sha256": sha256_file(path), "pass": passed, **result}
        rungs.append(rung)
        summary = ", ".join(f"{k} {c['value']:.4f} (min {c['min']})" for k, c in result["checks"].items()) or "the reference"
        log(f"{precision}: {'PASS' if passed else 'fail'}: {summary}")
        if passed:
            served = rung
            break
    assert served is not None  # the ladder ends with fp32
    record = {
        "pipeline": pipeline.name,
        "task": recipe.task,
        "precision": served["precision"],
        "onnx": served["onnx"],
        "onnx_sha256": served["sha256"],
        "fp32_sha256": sha256_file(fp32),
        "held_out": {"photos": sorted(set(held_out.photos)), "images": len(held_out.samples), "augmented_per_photo": AUGMENTED_PER_PHOTO},
        "gate": vars(recipe.gate),
        "rungs": rungs,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": round(time.perf_counter() - started, 1),
    }
    atomic_write_bytes(pipeline.served_precision, (json.dumps(record, indent=2) + "\n").encode())
    pipeline.reports_dir.mkdir(parents=True, exist_ok=True)
    (pipeline.reports_dir / "precision.md").write_text(render_markdown(record))
    log(f"serves {served['precision']} ({served['onnx']}); report: {pipeline.reports_dir / 'precision.md'}")
    return record


def served_onnx(pipeline: Pipeline) -> Path | None:
    """The ONNX the ladder chose, if it ran and the file is still the one it measured (read as the CPU cores read it)."""
    return pipeline.served_onnx()


def render_markdown(record: dict[str, Any]) -> str:
    lines = [
        f"# Precision ladder: {record['pipeline']} ({record['task']})",
        "",
        f"Serves **{record['precision']}** (`{record['onnx']}`). Held out: {record['held_out']['images']} images "
        f"({', '.join(record['held_out']['photos'])} and seeded augmentations), never used for calibration.",
        "",
        "| rung | result | checks |",
        "|---|---|---|",
    ]
    for rung in record["rungs"]:
        checks = "; ".join(f"{k} {c['value']:.4f} (min {c['min']})" for k, c in rung["checks"].items()) or "reference"
        lines.append(f"| {rung['precision']} | {'pass' if rung['pass'] else 'fail'} | {checks} |")
    return "\n".join(lines) + "\n"


def add_arguments(parser: Any) -> None:
    del parser  # the recipe holds the options


def run_from_args(args: Any) -> int:
    select_precision(args.repository)
    return 0
