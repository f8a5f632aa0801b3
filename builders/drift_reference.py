"""``python -m builders drift-reference --pipeline NAME``: the drift monitors' reference sample.

The precision ladder's held-out photos and their seeded augmentations (the same set and seed as
``select-precision``: :class:`builders.precision.HeldOut`), encoded as a client would send them,
go through the served code path in-process: the preprocess model's decode and preprocessing, the
core ONNX as the CPU default config (``configs/cpu.pbtxt``) serves it on onnxruntime, and the
postprocess model's task computation. :mod:`vision_serving.drift` extracts the served models'
features from each batch, and the values are written to
``<pipeline>_core/<version>/drift_reference.json`` (the highest numeric version, what Triton
serves), one entry per model, beside its provenance record. Rebuilt when the ONNX, the configs,
the photos, the feature code or the libraries change; otherwise skipped.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from builders import BuildError, Log, provenance, stderr_logger
from builders import recipe as recipes
from builders.artifacts import atomic_write_bytes, input_hash, package_versions, sha256_file
from vision_serving import core_model, drift, image_codec, layout, model_config, preprocessing, segmentation
from vision_serving.layout import Pipeline

log_to_stderr = stderr_logger("drift-reference")
STEP = "drift-reference"
# The core config whose runtime and ONNX the reference is computed with: the CPU default.
CORE_CONFIG = "cpu"
CHUNK = 8
CODE_FILES = ("vision_serving/drift.py", "vision_serving/preprocessing.py", "vision_serving/image_codec.py")
PACKAGES = ("numpy", "opencv-python-headless", "onnxruntime", "simplejpeg", "scipy")

OutputFeatures = Callable[[list[np.ndarray], np.ndarray], drift.Features]


def output_features(pipeline: Pipeline, task: str) -> OutputFeatures:
    """The postprocess model's features from the core's outputs and the images' sizes, computed as it serves them."""
    config = model_config.load_config(pipeline.model_dir("postprocess"))
    if task == "classification":
        return lambda outputs, sizes: drift.classification_features(outputs[0])
    if task == "segmentation":
        spec = segmentation.MaskSpec(model_config.parameter(config, "mask_mode"), float(model_config.parameter(config, "threshold")))

        def segmented(outputs: list[np.ndarray], sizes: np.ndarray) -> drift.Features:
            masks = segmentation.masks(outputs[0], sizes, spec)
            return drift.segmentation_features(outputs[0], [mask.coverage for mask in masks])

        return segmented
    if task == "detection":
        from builders import precision

        def detected(outputs: list[np.ndarray], sizes: np.ndarray) -> drift.Features:
            found = precision.served_detections(pipeline, outputs, sizes)
            return drift.detection_features(found.scores, found.counts)

        return detected
    raise BuildError(f"{pipeline.recipe}: no drift features for task {task!r}")


def _inputs(pipeline: Pipeline, task: str, onnx: Path, sources: Sequence[Any], count: int) -> dict[str, Any]:
    from builders import calibration

    root = layout.REPOSITORY_ROOT
    return {
        "task": task,
        "onnx": {"file": onnx.name, "sha256": sha256_file(onnx)},
        "configs": {
            role: sha256_file(model_config.config_path(pipeline.model_dir(role), CORE_CONFIG if role == "core" else None))
            for role in layout.ROLES
        },
        "photos": [{"name": source.name, "sha256": source.sha256} for source in sources],
        "images": count,
        "seed": calibration.EVALUATION_SEED,
        "profile": calibration.EVALUATION_PROFILE.name,
        "code": {name: sha256_file(root / name) for name in CODE_FILES},
        "packages": package_versions(PACKAGES),
    }


def build(repository: Path | str, force: bool = False, log: Log = log_to_stderr) -> Path:
    """Write (or keep, when up to date) the pipeline's drift reference; returns its path."""
    from tqdm import tqdm

    from builders import calibration, precision

    pipeline = Pipeline.at(repository)
    task = recipes.load(pipeline).task
    core_config = model_config.load_config(pipeline.core_dir, CORE_CONFIG)
    version_dir = drift.served_version_dir(pipeline.core_dir)
    if version_dir is None:
        raise BuildError(f"{pipeline.core_dir}: no version folder; run `python -m builders export --pipeline {pipeline.name}` first")
    onnx = core_model.onnx_path(core_config, version_dir)
    if not onnx.is_file():
        raise BuildError(f"{onnx} does not exist; run `python -m builders export --pipeline {pipeline.name}` first")
    preprocess_config = model_config.load_config(pipeline.model_dir("preprocess"))
    filename = drift.DriftSettings.from_config(preprocess_config).reference
    output = layout.drift_reference_path(version_dir, filename)
    spec, limits = calibration.served_preprocessing(pipeline.repository)
    sources = calibration.evaluation_sources(pipeline.repository)
    count = len(sources) * (1 + precision.AUGMENTED_PER_PHOTO)
    inputs = _inputs(pipeline, task, onnx, sources, count)
    expected = input_hash(inputs)
    if not force and provenance.is_current(output, expected):
        log(f"{output} is up to date")
        return output

    samples = calibration.make_samples(sources, count, calibration.EVALUATION_SEED, calibration.EVALUATION_PROFILE, limits)
    core = core_model.load(core_config, version_dir)
    features_of_outputs = output_features(pipeline, task)
    minimum = preprocessing.decode_minimum(spec)
    image_batches: list[drift.Features] = []
    output_batches: list[drift.Features] = []
    for start in tqdm(range(0, len(samples), CHUNK), desc=f"{pipeline.name} drift reference", unit="batch", file=sys.stderr):
        payloads = [sample.data for sample in samples[start : start + CHUNK]]
        try:
            decoded = [image_codec.decode(payload, limits, minimum) for payload in payloads]
        except image_codec.ImageError as error:
            raise BuildError(f"a held-out image was rejected by the served decoder: {error}") from None
        images = [item.image for item in decoded]
        sizes = preprocessing.original_sizes(decoded)
        batch = preprocessing.preprocess_batch(images, spec)
        image_batches.append(drift.image_features(images, sizes, *drift.payload_facts(payloads)))
        output_batches.append(features_of_outputs(core.run({core.input_names[0]: batch}), sizes))
    references = {
        pipeline.model_name("preprocess"): drift.Reference.from_features(image_batches),
        pipeline.model_name("postprocess"): drift.Reference.from_features(output_batches),
    }
    record = {
        "pipeline": pipeline.name,
        "core_version": version_dir.name,
        "onnx": onnx.name,
        "runtime": core_model.runtime(core_config),
        "images": len(samples),
        "photos": sorted({sample.source for sample in samples}),
        "models": {name: reference.to_json() for name, reference in references.items()},
    }
    data = (json.dumps(record, indent=1) + "\n").encode()
    atomic_write_bytes(output, data)
    built = provenance.Provenance.for_bytes(
        STEP, expected, output, data, input_hashes={"onnx": inputs["onnx"]["sha256"]}, tools=inputs["packages"], inputs=inputs
    )
    built.write(provenance.path_for(output))
    for name, reference in references.items():
        means = ", ".join(f"{feature} {value:.3g}" for feature, value in reference.means.items())
        log(f"{name}: {means}")
    log(f"wrote {output} ({len(samples)} held-out images through {onnx.name} on {core_model.runtime(core_config)})")
    return output


def add_arguments(parser: Any) -> None:
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")


def run_from_args(args: Any) -> int:
    build(args.repository, force=args.force)
    return 0
