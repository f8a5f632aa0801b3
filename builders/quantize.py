"""The ``quantize`` step: FP32 ONNX -> INT8 Q/DQ ONNX with NVIDIA ModelOpt, calibrated on served-preprocessed photos.

Reads ``<pipeline>_core/1/model.onnx`` (the ``export`` step) and writes, beside it:

- ``model_int8_qdq.onnx``: explicit quantization, what TensorRT >= 10 builds an
  INT8 engine from and what ``configs/cpu_int8.pbtxt`` serves on onnxruntime:
  QuantizeLinear/DequantizeLinear pairs, symmetric (zero-point 0), int8,
  per-channel on weights (their op's output-channel axis), per-tensor on activations,
  only standard ONNX domains. Every one of these properties (:mod:`builders.qdq_rules`) is checked (``qdq_violations``)
  before anything is written; a violation fails the step.
- ``model_int8_qdq.onnx.json``: provenance (ModelOpt version, method,
  exclusions, calibration set hash, input ONNX hash, time, peak RSS).

Calibration data is made by ``builders.calibration``: the package calibration
photos (never the held-out evaluation photos) or ``--calibration-dir``, plus
seeded augmentations, through the served decoder and preprocessing with the
spec and limits of ``<pipeline>_preprocess/config.pbtxt``. The array is kept in
``.build/calibration/`` with its sha256. When the hash of all inputs matches
the provenance, the step does nothing.

The defaults are the configuration measured best on the held-out photos
(``python -m builders evaluate``; numbers in docs and the evaluation report).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import resource
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from builders import BuildError, CheckFailed, Log, calibration, layer_groups, provenance, qdq_rules, stderr_logger
from builders.artifacts import (
    atomic_write_bytes,
    input_hash,
    package_versions,
    sha256_bytes,
    sha256_file,
)
from builders.loaded import LoadedPipeline
from vision_serving import layout, model_config
from vision_serving.served import ServedInputs

INT8_FILENAME = layout.INT8_ONNX
PROJECT_ROOT = layout.REPOSITORY_ROOT
BUILD_DIR = layout.BUILD_DIR
CALIBRATION_DIR = BUILD_DIR / "calibration"
KEEP_CALIBRATION_SETS = 4
WORK_DIR = BUILD_DIR / "quantize"

METHODS = ("entropy", "max")
HIGH_PRECISION_DTYPES = ("fp32", "fp16")
DEFAULT_METHOD = "entropy"
DEFAULT_SAMPLES = 512
# Measured on the classifier's held-out photos (.build/reports/image_classifier/evaluation.md): quantizing everything gives
# ~88 % top-1 agreement with FP32; per-layer sensitivity put most of the error in the first layers
# (the stem output's activation quantization above all), then in the depthwise convs. Keeping the
# first 6 Convs in high precision gives 94.4-96.4 % depending on the evaluation set's size; adding
# the 16 depthwise convs gives 96.0-96.4 % on every size, with 80 % of the MACs still INT8.
DEFAULT_EXCLUDE: tuple[str, ...] = ("early", "depthwise")
DEFAULT_RATIONALE = (
    "Defaults chosen on held-out photos and their augmentations (275 / 539 / 1067 images): everything "
    "quantized gave 88.4 % top-1 agreement (entropy, 512 samples; max 88.7 %; 64 samples 87.6 %); per-layer "
    "sensitivity put the error in the first layers (above all the stem output's activation quantization), then "
    "the depthwise convs. Keeping the first 6 Convs in high precision gave 96.4 / 94.4 / 95.3 %; adding the 16 "
    "depthwise convs gave 96.0 / 96.1 / 96.4 % (cosine 0.998), 80 % of the MACs still INT8. Max calibration, "
    "another seed and 1024 samples changed nothing measurable; the classifier and head are not sensitive. "
    "Those trials kept the excluded layers in FP32; in FP16 (the default since) the ladder measured 96.7 % top-1 "
    "agreement, 95.9 % top-5 overlap and cosine 0.998 on the 275 images (benchmarks/results/served_precision.json)."
)
# The layers left unquantized (the exclusions above, and every op ModelOpt does not quantize) in FP16: ModelOpt's own
# default, its AutoCast conversion (modelopt.onnx.autocast.convert_to_f16) after the Q/DQ insertion, inputs and outputs
# kept FP32. A strongly typed TensorRT network (always, on 11) builds each tensor at its ONNX type, so "fp32" would
# build those layers in FP32 (TF32 at best). On onnxruntime's CPU the FP16 tensors are computed in FP32 between casts.
DEFAULT_HIGH_PRECISION = "fp16"
DEFAULT_CALIBRATION_BATCH = 16
STANDARD_DOMAINS = qdq_rules.STANDARD_DOMAINS
WEIGHT_OPS = qdq_rules.WEIGHT_OPS  # op -> weight input index

SOURCE_FILES = (
    "builders/__init__.py",
    "builders/quantize.py",
    "builders/calibration.py",
    "builders/photos.py",
    "vision_serving/model_config.py",
    "vision_serving/image_codec.py",
    "vision_serving/preprocessing.py",
)
# What the calibration array is a function of, besides the recipe: a cached .npy is reused only if unchanged.
CALIBRATION_CODE = (
    "builders/calibration.py",
    "vision_serving/image_codec.py",
    "vision_serving/preprocessing.py",
    "vision_serving/served.py",
)
PACKAGES = ("nvidia-modelopt", "onnx", "onnxruntime", "onnx-graphsurgeon", "numpy", "opencv-python-headless")
REQUIRED_MODULES = {"modelopt": "nvidia-modelopt==0.47.0 (requirements/modelopt.txt)", "onnx": "onnx", "onnxruntime": "onnxruntime"}


class VerificationError(CheckFailed):
    """The quantized graph violates a property the INT8 consumers rely on; nothing was written."""


log_to_stderr = stderr_logger("quantize")


@dataclass(frozen=True)
class QuantizeOptions:
    method: str = DEFAULT_METHOD
    samples: int = DEFAULT_SAMPLES
    seed: int = calibration.CALIBRATION_SEED
    calibration_dir: Path | None = None
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE  # layer_groups.GROUPS
    exclude_nodes: tuple[str, ...] = ()  # regular expressions (re.match) on node names
    exclude_op_types: tuple[str, ...] = ()
    high_precision: str = DEFAULT_HIGH_PRECISION
    calibration_batch: int = DEFAULT_CALIBRATION_BATCH

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise BuildError(f"calibration method {self.method!r} is not one of {', '.join(METHODS)}")
        if self.high_precision not in HIGH_PRECISION_DTYPES:
            raise BuildError(f"high-precision dtype {self.high_precision!r} is not one of {', '.join(HIGH_PRECISION_DTYPES)}")
        unknown = sorted(set(self.exclude) - set(layer_groups.GROUPS))
        if unknown:
            raise BuildError(f"unknown layer group(s) {', '.join(unknown)}; known: {', '.join(layer_groups.GROUPS)}")
        if self.samples < 1 or self.calibration_batch < 1:
            raise BuildError("--samples and --calibration-batch must be positive")
        for pattern in self.exclude_nodes:
            try:
                re.compile(pattern)
            except re.error as error:
                raise BuildError(f"--exclude-nodes {pattern!r}: {error}") from None

    def record(self) -> dict[str, Any]:
        record = asdict(self)
        record["calibration_dir"] = str(self.calibration_dir) if self.calibration_dir else None
        record["exclude"] = list(self.exclude)
        record["exclude_nodes"] = list(self.exclude_nodes)
        record["exclude_op_types"] = list(self.exclude_op_types)
        return record


@dataclass(frozen=True)
class QuantizeResult:
    status: str  # "quantized" or "up to date"
    onnx_path: Path
    provenance_path: Path
    provenance: dict[str, Any] = field(repr=False)


def _require_modules() -> None:
    missing = [pip for module, pip in REQUIRED_MODULES.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise BuildError(f"missing Python packages for quantize: {', '.join(missing)}")


# --------------------------------------------------------------------------- Q/DQ checks (builders/qdq_rules.py)

qdq_summary = qdq_rules.summary


def qdq_violations(model: Any) -> list[str]:
    """Every way ``model`` departs from TensorRT-style explicit INT8 (empty when it conforms).

    All of :mod:`builders.qdq_rules`, TensorRT's and the project's: only standard ONNX domains;
    every QuantizeLinear/DequantizeLinear int8 with a constant, positive, finite scale and an
    explicit int8 zero-point equal to 0; quantized weights per-channel on their op's
    output-channel axis; activations per-tensor; each Q feeds only DQs.
    """
    return qdq_rules.model_violations(model)


def check_io(quantized: Any, reference: Any) -> None:
    """The quantized graph keeps the FP32 graph's input and output names, dtypes and shapes."""

    def signature(model: Any) -> list[tuple[str, str]]:
        initializers = {init.name for init in model.graph.initializer}
        values = [v for v in model.graph.input if v.name not in initializers] + list(model.graph.output)
        return [(v.name, str(v.type.tensor_type).replace("\n", " ")) for v in values]

    if signature(quantized) != signature(reference):
        raise VerificationError(f"quantized I/O {signature(quantized)} differs from the FP32 model's {signature(reference)}")


# --------------------------------------------------------------------------- exclusions


def resolve_exclusions(model: Any, options: QuantizeOptions) -> dict[str, Any]:
    """Layer groups and name patterns -> the exact node names ModelOpt must leave in high precision."""
    groups = layer_groups.of(model)
    names: list[str] = []
    for group in options.exclude:
        if not groups[group]:
            raise BuildError(f"layer group {group!r} matches no node of this graph")
        names += groups[group]
    for pattern in options.exclude_nodes:
        matched = [node.name for node in model.graph.node if re.match(pattern, node.name)]
        if not matched:
            raise BuildError(f"--exclude-nodes {pattern!r} matches no node of this graph")
        names += matched
    op_types = {node.op_type for node in model.graph.node}
    unknown = sorted(set(options.exclude_op_types) - op_types)
    if unknown:
        raise BuildError(f"--exclude-op-types {', '.join(unknown)}: no such op in the graph ({', '.join(sorted(op_types))})")
    return {
        "layer_groups": list(options.exclude),
        "node_patterns": list(options.exclude_nodes),
        "op_types": list(options.exclude_op_types),
        "nodes": sorted(dict.fromkeys(names)),
    }


# --------------------------------------------------------------------------- calibration set


@dataclass(frozen=True)
class CalibrationSet:
    path: Path
    manifest_path: Path
    sha256: str
    count: int
    recipe_hash: str


def calibration_recipe(pipeline: LoadedPipeline, options: QuantizeOptions) -> tuple[dict[str, Any], list[calibration.Source]]:
    sources = calibration.calibration_sources(pipeline, options.calibration_dir)
    return calibration.recipe(sources, options.samples, options.seed, calibration.CALIBRATION_PROFILE, pipeline.configs.spec), sources


def build_calibration_set(
    pipeline: LoadedPipeline, options: QuantizeOptions, log: Log = log_to_stderr, directory: Path = CALIBRATION_DIR
) -> tuple[CalibrationSet, np.ndarray]:
    """The calibration array (the core's input as the ensemble feeds it, float32), saved as .npy with a
    manifest; reused when unchanged."""
    recipe, sources = calibration_recipe(pipeline, options)
    recipe["packages"] = package_versions(("numpy", "opencv-python-headless"))
    recipe["code"] = {name: sha256_file(PROJECT_ROOT / name) for name in CALIBRATION_CODE}
    recipe_hash = input_hash(recipe)
    stem = f"calibration-{recipe_hash[:12]}"
    path, manifest_path = directory / f"{stem}.npy", directory / f"{stem}.json"
    if path.is_file() and manifest_path.is_file():
        with contextlib.suppress(OSError, ValueError, KeyError):
            manifest = json.loads(manifest_path.read_text())
            if manifest["recipe_hash"] == recipe_hash and manifest["sha256"] == sha256_file(path):
                log(f"calibration set {path.name} is up to date ({manifest['count']} samples)")
                return CalibrationSet(path, manifest_path, manifest["sha256"], manifest["count"], recipe_hash), np.load(path)
    started = time.perf_counter()
    folder = options.calibration_dir or pipeline.recipe.quantize.calibration_dir
    origin = f"images of {folder}" if folder else "package photos"
    log(f"building {options.samples} calibration samples from {len(sources)} {origin} (seed {options.seed})")
    served = ServedInputs(pipeline.configs)
    samples = calibration.make_samples(sources, options.samples, options.seed, calibration.CALIBRATION_PROFILE, served.limits)
    batch = calibration.core_inputs(samples, served)
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=directory, prefix=f".{stem}.", suffix=".npy", delete=False) as file:
        np.save(file, batch)
    os.chmod(file.name, 0o644)
    Path(file.name).replace(path)
    digest = sha256_file(path)
    manifest = {
        "recipe_hash": recipe_hash,
        "recipe": recipe,
        "sha256": digest,
        "count": len(samples),
        "shape": list(batch.shape),
        "samples": [{"index": s.index, "source": s.source, "sha256": sha256_bytes(s.data), **s.transform} for s in samples],
    }
    atomic_write_bytes(manifest_path, (json.dumps(manifest, indent=1) + "\n").encode())
    _prune_calibration_sets(directory)
    log(
        f"calibration set {path.relative_to(PROJECT_ROOT) if path.is_relative_to(PROJECT_ROOT) else path} "
        f"({batch.nbytes / 1e6:.0f} MB, sha256 {digest[:12]}…) in {time.perf_counter() - started:.1f} s"
    )
    return CalibrationSet(path, manifest_path, digest, len(samples), recipe_hash), batch


def _prune_calibration_sets(directory: Path, keep: int = KEEP_CALIBRATION_SETS) -> None:
    """Delete all but the ``keep`` newest calibration sets (each default one is ~300 MB)."""
    arrays = sorted(directory.glob("calibration-*.npy"), key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in arrays[keep:]:
        for path in (stale, stale.with_suffix(".json")):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


# --------------------------------------------------------------------------- the step


def input_record(pipeline: LoadedPipeline, options: QuantizeOptions) -> dict[str, Any]:
    source = pipeline.layout.onnx("fp32")
    recipe, _ = calibration_recipe(pipeline, options)
    return {
        "input_onnx": {"file": source.name, "sha256": sha256_file(source)},
        "calibration_recipe": input_hash(recipe),
        "options": options.record(),
        "configs": {role: sha256_file(pipeline.layout.model_dir(role) / "config.pbtxt") for role in ("core", "preprocess")},
        "sources": {name: sha256_file(PROJECT_ROOT / name) for name in SOURCE_FILES},
        "packages": package_versions(PACKAGES),
    }


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def run_modelopt(
    source: Path,
    output: Path,
    data: np.ndarray,
    input_name: str,
    options: QuantizeOptions,
    exclusions: dict[str, Any],
    log_path: Path,
    max_batch: int,
) -> None:
    """ModelOpt INT8 PTQ on CPU, in a scratch folder (it writes intermediates beside its input); calibration
    batches of at most ``max_batch`` (the core's max_batch_size: a batch-1 export takes one image a run)."""
    from modelopt.onnx.quantization import quantize as modelopt_quantize

    WORK_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=WORK_DIR) as scratch:
        scratch_input = Path(scratch) / source.name
        shutil.copy2(source, scratch_input)
        scratch_output = Path(scratch) / output.name
        batch = max(1, min(options.calibration_batch, len(data), max_batch))
        usable = len(data) - len(data) % batch  # ModelOpt splits the array into equal batches
        shape = "x".join(str(d) for d in (batch, *data.shape[1:]))
        # ModelOpt logs to stdout and ORT's calibration draws tqdm bars on stderr: both go to the log file.
        with open(log_path, "w") as log_file, contextlib.redirect_stdout(log_file), contextlib.redirect_stderr(log_file):
            modelopt_quantize(
                str(scratch_input),
                quantize_mode="int8",
                calibration_data={input_name: data[:usable]},
                calibration_method=options.method,
                calibration_shapes=f"{input_name}:{shape}",
                calibration_eps=["cpu"],
                op_types_to_exclude=list(exclusions["op_types"]) or None,
                nodes_to_exclude=[f"{re.escape(name)}$" for name in exclusions["nodes"]] or None,
                high_precision_dtype=options.high_precision,
                output_path=str(scratch_output),
                log_level="INFO",
            )
        if not scratch_output.is_file():
            raise BuildError(f"ModelOpt wrote no model; see {log_path}")
        shutil.move(str(scratch_output), output)


# One function: the step as it reads (inputs, the cached set, ModelOpt, the checks, the record), each part a call.
def quantize(
    pipeline: LoadedPipeline,
    options: QuantizeOptions = QuantizeOptions(),
    force: bool = False,
    output: Path | None = None,
    log: Log = log_to_stderr,
) -> QuantizeResult:
    """Run the quantize step; returns what it did. Raises ``BuildError`` on failure."""
    started = time.perf_counter()
    source = pipeline.layout.onnx("fp32")
    if not source.is_file():
        raise BuildError(f"{source} does not exist; run `python -m builders export` first")
    output = Path(output) if output else pipeline.layout.onnx("int8")
    provenance_path = provenance.path_for(output)
    input_name = model_config.only_tensor(pipeline.configs.core(), "input").name

    record = input_record(pipeline, options)
    expected_hash = input_hash(record)
    if not force and provenance.is_current(output, expected_hash):
        log(f"up to date ({output.name})")
        return QuantizeResult("up to date", output, provenance_path, json.loads(provenance_path.read_text()))

    made = _quantize_verified(pipeline, options, source, input_name, output.name, log)
    summary = qdq_summary(made.model)
    opset = max(o.version for o in made.model.opset_import if o.domain in STANDARD_DOMAINS)
    built = provenance.Provenance.for_bytes(
        "quantize",
        expected_hash,
        output,
        made.data,
        input_hashes={
            "onnx": record["input_onnx"]["sha256"],
            "calibration": made.calibration.sha256,
            "calibration_recipe": made.calibration.recipe_hash,
        },
        tools=dict(record["packages"]),
        inputs=record,
        extra={
            "quantizer": _quantizer_record(options, made.exclusions),
            "calibration": _calibration_record(pipeline, options, made.calibration),
            "input_onnx": {"file": source.name, "sha256": record["input_onnx"]["sha256"]},
            "model": {
                "file": output.name,
                "opset": opset,
                "node_count": len(made.model.graph.node),
                "qdq": summary,
                "checks": qdq_rules.checks_description(),
            },
            "calibration_seconds": round(made.calibration_seconds, 1),
            "seconds": round(time.perf_counter() - started, 1),
            "peak_rss_mb": peak_rss_mb(),
        },
    )
    provenance_record = built.to_dict()
    atomic_write_bytes(output, made.data)
    built.write(provenance_path)
    log(
        f"wrote {output.name} ({len(made.data) / 1e6:.1f} MB, opset {opset}, {summary['quantize_linear']} Q / "
        f"{summary['dequantize_linear']} DQ; quantized {sum(summary['quantized_ops'].values())} ops) in "
        f"{built.extra['seconds']} s (ModelOpt {built.extra['calibration_seconds']} s), peak RSS {built.extra['peak_rss_mb']:.0f} MB"
    )
    return QuantizeResult("quantized", output, provenance_path, provenance_record)


@dataclass(frozen=True)
class _Quantized:
    model: Any  # the verified onnx.ModelProto
    data: bytes  # its serialization: what is written
    exclusions: dict[str, Any]  # resolve_exclusions
    calibration: CalibrationSet
    calibration_seconds: float  # ModelOpt's run


def _quantize_verified(
    pipeline: LoadedPipeline, options: QuantizeOptions, source: Path, input_name: str, output_name: str, log: Log
) -> _Quantized:
    """ModelOpt on the FP32 ``source``, calibrated on the pipeline's calibration set, in a scratch
    folder; the result verified (:func:`verify_quantized`) before anything is written."""
    import onnx

    _require_modules()
    reference = onnx.load(str(source))
    exclusions = resolve_exclusions(reference, options)
    calib, data = build_calibration_set(pipeline, options, log)
    described = ", ".join(options.exclude + options.exclude_nodes + options.exclude_op_types) or "none"
    log(
        f"ModelOpt {package_versions(['nvidia-modelopt'])['nvidia-modelopt']}: int8, {options.method} calibration on "
        f"{calib.count} samples, high precision {options.high_precision}, excluded: {described} "
        f"({len(exclusions['nodes'])} nodes)"
    )
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    log_path = WORK_DIR / "modelopt.log"
    calibration_started = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=WORK_DIR) as scratch:
        candidate = Path(scratch) / output_name
        try:
            run_modelopt(source, candidate, data, input_name, options, exclusions, log_path, pipeline.configs.core().max_batch_size)
        except Exception as error:  # ModelOpt's and onnxruntime's own errors: one line, the log for the rest
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise BuildError(f"ModelOpt failed: {first}; see {log_path}") from None
        calibration_seconds = time.perf_counter() - calibration_started
        del data
        quantized = onnx.load(str(candidate))
        verify_quantized(quantized, reference)
        return _Quantized(quantized, candidate.read_bytes(), exclusions, calib, calibration_seconds)


def verify_quantized(quantized: Any, reference: Any) -> None:
    """What is written is a valid ONNX model (onnx.checker, full check), TensorRT-style explicit
    INT8 (:func:`qdq_violations`) and keeps the FP32 model's I/O (:func:`check_io`); else
    ``VerificationError``."""
    import onnx

    try:
        onnx.checker.check_model(quantized, full_check=True)
    except onnx.checker.ValidationError as error:
        raise VerificationError(f"onnx.checker rejected the quantized graph: {str(error).strip().splitlines()[0]}") from None
    problems = qdq_violations(quantized)
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise VerificationError(f"the quantized graph is not TensorRT-style INT8: {'; '.join(problems[:5])}{more}")
    check_io(quantized, reference)


def _quantizer_record(options: QuantizeOptions, exclusions: dict[str, Any]) -> dict[str, Any]:
    """The provenance's ``quantizer``: the tool and every option it ran with."""
    return {
        "tool": "nvidia-modelopt",
        "version": package_versions(["nvidia-modelopt"])["nvidia-modelopt"],
        "api": "modelopt.onnx.quantization.quantize",
        "quantize_mode": "int8",
        "calibration_method": options.method,
        "high_precision_dtype": options.high_precision,
        "calibration_eps": ["cpu"],
        "calibration_batch": options.calibration_batch,
        "exclusions": exclusions,
        "defaults_rationale": DEFAULT_RATIONALE,
    }


def _calibration_record(pipeline: LoadedPipeline, options: QuantizeOptions, calib: CalibrationSet) -> dict[str, Any]:
    """The provenance's ``calibration``: the set, where its photos came from, and the held-out photos it avoided."""
    return {
        "file": calib.path.name,
        "sha256": calib.sha256,
        "samples": calib.count,
        "seed": options.seed,
        "source": str(options.calibration_dir or pipeline.recipe.quantize.calibration_dir or "package photos"),
        "photos": [s["name"] for s in calibration_recipe(pipeline, options)[0]["sources"]],
        "held_out_photos": list(calibration.photo_split(pipeline)[1]),
        "profile": calibration.CALIBRATION_PROFILE.name,
        "recipe_hash": calib.recipe_hash,
    }


def recipe_options(pipeline: LoadedPipeline, **overrides: Any) -> QuantizeOptions:
    """The pipeline recipe's [quantize] options; ``overrides`` that are not None win."""
    section = pipeline.recipe.quantize
    values: dict[str, Any] = {
        "method": section.method,
        "samples": section.samples,
        "exclude": tuple(item for item in section.exclude if item != "none"),
        "exclude_nodes": (section.exclude_nodes,) if section.exclude_nodes else (),
        "exclude_op_types": tuple(section.exclude_op_types),
    }
    values.update({key: value for key, value in overrides.items() if value is not None})
    return QuantizeOptions(**values)


def options_from_args(args: Any) -> QuantizeOptions:
    def split(values: Sequence[str] | None) -> tuple[str, ...]:
        items: list[str] = []
        for value in values or ():
            items += [item.strip() for item in value.split(",") if item.strip()]
        return tuple(items)

    return recipe_options(
        args.loaded,
        method=args.method,
        samples=args.samples,
        seed=args.seed,
        calibration_dir=args.calibration_dir,
        exclude=tuple(item for item in split(args.exclude) if item != "none") if args.exclude is not None else None,
        exclude_nodes=tuple(args.exclude_nodes) if args.exclude_nodes else None,
        exclude_op_types=split(args.exclude_op_types) if args.exclude_op_types else None,
        high_precision=args.high_precision,
        calibration_batch=args.calibration_batch,
    )


def add_arguments(parser: Any) -> None:
    parser.add_argument("--method", choices=METHODS, help="activation calibration (default: the recipe's, else entropy)")
    parser.add_argument("--samples", type=int, metavar="N", help="calibration samples (default: the recipe's)")
    parser.add_argument("--seed", type=int, default=calibration.CALIBRATION_SEED, help="augmentation seed (default: %(default)s)")
    parser.add_argument(
        "--calibration-dir",
        type=Path,
        metavar="DIR",
        help="calibrate on the JPEG/PNG images in DIR (plus augmentations up to --samples) instead of the package photos",
    )
    parser.add_argument(
        "--exclude",
        action="append",
        metavar="GROUPS",
        help=f"layer groups kept in high precision, comma-separated: {', '.join(layer_groups.GROUPS)}, or none "
        "(default: the recipe's [quantize] exclude)",
    )
    parser.add_argument(
        "--exclude-nodes", action="append", metavar="REGEX", help="node names kept in high precision (re.match; repeatable)"
    )
    parser.add_argument("--exclude-op-types", action="append", metavar="OPS", help="op types kept in high precision, comma-separated")
    parser.add_argument(
        "--high-precision",
        choices=HIGH_PRECISION_DTYPES,
        default=DEFAULT_HIGH_PRECISION,
        help="dtype of the layers left unquantized, as TensorRT builds them (default: %(default)s; onnxruntime's CPU computes fp16 in fp32 between casts)",
    )
    parser.add_argument(
        "--calibration-batch",
        type=int,
        default=DEFAULT_CALIBRATION_BATCH,
        metavar="N",
        help="images per calibration run (default: %(default)s)",
    )
    parser.add_argument("--output", type=Path, metavar="PATH", help=f"where to write (default: <pipeline>_core/1/{INT8_FILENAME})")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")


def run_from_args(args: Any) -> int:
    quantize(args.loaded, options_from_args(args), force=args.force, output=args.output)
    return 0
