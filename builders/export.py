"""``python -m builders export --pipeline NAME``: the recipe's source model -> the core's FP32 ONNX.

The recipe's ``[source] kind`` is looked up in :mod:`builders.sources.registry` (one module per
kind). Every kind hands this module its model file converted to an unfixed ONNX model
(``efficientnet_lite0``: PyTorch's dynamo exporter, checked against PyTorch; ``tflite``: tf2onnx in
its own environment; ``onnx``: the file itself). The one path then applies the recipe's fix passes
(each verified on onnxruntime), verifies the fixed graph on
real photos through the served preprocessing (against the unfixed graph run with a reference
implementation of its custom ops, ``builders.passes.reference_ops``, when it has any), folds the
preprocess's normalization in when it hands uint8, and checks the I/O against the core's config.
Each ``[stages.<role>]`` (an ``onnx`` source) is built the same way into its own model folder.

Every export writes its ``model.onnx`` and its provenance record atomically, and skips the work
when its recorded input hash is unchanged.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builders import BuildError, CheckFailed, Log, normalization, provenance, stage_decode, stderr_logger
from builders import recipe as recipes
from builders.artifacts import atomic_write_bytes, input_hash, package_versions, sha256_file
from builders.loaded import LoadedPipeline
from builders.sources import registry as source_kinds
from builders.sources.base import SourceKind
from vision_serving import layout, preprocessing, preprocessors
from vision_serving.model_config import ModelConfig
from vision_serving.served import ServedInputs

log_to_stderr = stderr_logger("export")


@dataclass(frozen=True)
class ExportResult:
    status: str  # "exported" or "up to date"
    onnx_path: Path
    provenance: dict[str, Any]


# A rewrite of a custom op must match the op's reference implementation this closely on real photos.
REFERENCE_ATOL = 1e-4
VERIFY_PHOTOS = ("astronaut", "grace_hopper", "coffee", "chelsea")
CODE_FILES = (
    "builders/export.py",
    "builders/fix_onnx.py",
    "builders/passes/graph.py",
    "builders/passes/cleanup.py",
    "builders/passes/batch.py",
    "builders/passes/einsum.py",
    "builders/passes/custom_ops.py",
    "builders/passes/registry.py",
    "builders/passes/onnx_io.py",
    "builders/normalization.py",
    "builders/stage_decode.py",
    "builders/sources/base.py",
)  # and the module of the source's kind (_code)


def export(pipeline: LoadedPipeline, force: bool = False, log: Log = log_to_stderr) -> ExportResult:
    """Build the pipeline's FP32 ONNX from its recipe's source."""
    from builders.passes import registry

    recipe = pipeline.recipe
    registry.check_names(recipe.fix.passes, f"{recipe.path} [fix] passes")
    for stage in recipe.stages.values():
        registry.check_names(stage.fix.passes, f"{recipe.path} [stages.{stage.role}] passes")
    kind = source_kinds.kind(recipe.source.kind, f"{recipe.path} [source]")
    result = _export_converted(pipeline, kind, force, log)
    for stage in recipe.stages.values():
        export_stage(pipeline, stage, force, log)
    return result


def _code(kind: SourceKind) -> dict[str, str]:
    """The sha256 of the shared path's code and of the module of the source's kind."""
    root = layout.REPOSITORY_ROOT
    module = Path(inspect.getfile(type(kind))).resolve()
    names = (*CODE_FILES, *kind.code_files, *([module.relative_to(root).as_posix()] if module.is_relative_to(root) else []))
    return {name: sha256_file(root / name) for name in names if (root / name).is_file()}


def _record(loaded: LoadedPipeline, kind: SourceKind, source_file: Path) -> dict[str, Any]:
    recipe, pipeline = loaded.recipe, loaded.layout
    return {
        "source": {"kind": recipe.source.kind, "file": source_file.name, "sha256": sha256_file(source_file), "opset": recipe.source.opset},
        "passes": list(recipe.fix.passes),
        "core_config_sha256": sha256_file(pipeline.core_dir / "config.pbtxt"),
        "preprocess_config_sha256": sha256_file(pipeline.model_dir("preprocess") / "config.pbtxt"),
        "code": _code(kind),
        "packages": package_versions(["onnx", "onnxruntime", "onnx-graphsurgeon", "numpy", *kind.packages]),
        "converter_requirements": kind.converter_sha256(),
    }


def _served_batch(pipeline: LoadedPipeline, names: tuple[str, ...]) -> np.ndarray:
    """Real photos through the served decode and preprocessing: what verification feeds the model."""
    from builders import calibration

    sources = calibration.package_sources(names)
    if not sources:
        raise BuildError(f"none of the verification photos {', '.join(names)} is installed")
    served = ServedInputs(pipeline.configs)
    samples = calibration.make_samples(sources, len(sources), 0, calibration.EVALUATION_PROFILE, served.limits)
    return calibration.core_inputs(samples, served)


def _verify_against_reference(unfixed: Any, fixed: Any, batch: np.ndarray, log: Log) -> float:
    """Max |Δ| between the fixed graph on onnxruntime and the unfixed graph with reference custom ops."""
    import onnx

    from builders.passes import reference_ops
    from vision_serving.onnx_core import create_session

    with _temporary_model(fixed) as fixed_path:
        session = create_session(fixed_path)
        input_name = session.get_inputs()[0].name
        worst = 0.0
        for index in range(len(batch)):
            image = batch[index : index + 1]
            actual = session.run(None, {input_name: image})
            unfixed_input = unfixed.graph.input[0].name
            expected = reference_ops.run_unfixed_with_reference(
                onnx.ModelProto.FromString(unfixed.SerializeToString()), {unfixed_input: image}
            )
            for a, e in zip(actual, expected):
                worst = max(
                    worst, float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(e, dtype=np.float64).reshape(np.shape(a))).max())
                )
    log(f"fixed graph vs the unfixed graph with the reference custom op, {len(batch)} real photos: max |Δ| {worst:.1e}")
    if worst > REFERENCE_ATOL:
        raise CheckFailed(
            f"the rewritten graph differs from the custom op's reference by {worst:.2e} > {REFERENCE_ATOL:g}; nothing written"
        )
    return worst


def _verify_batch(model: Any, batch: np.ndarray, log: Log) -> float:
    """The images as one batch give what they give one by one: the batch dim really is dynamic."""
    from vision_serving.onnx_core import create_session

    with _temporary_model(model) as path:
        session = create_session(path)
        name = session.get_inputs()[0].name
        try:
            together = session.run(None, {name: batch})
        except Exception as error:
            raise CheckFailed(f"the model does not run at batch {len(batch)}: {str(error).splitlines()[0]}") from None
        alone = [session.run(None, {name: batch[i : i + 1]}) for i in range(len(batch))]
    worst = max(float(np.abs(together[k][i : i + 1] - alone[i][k]).max()) for i in range(len(batch)) for k in range(len(together)))
    log(f"batch of {len(batch)} vs one by one: max |Δ| {worst:.1e}")
    if worst > REFERENCE_ATOL:
        raise CheckFailed(f"batched outputs differ from single-image outputs by {worst:.2e}; the batch dim is not clean")
    return worst


class _temporary_model:
    def __init__(self, model: Any) -> None:
        import tempfile

        self._directory = tempfile.TemporaryDirectory(dir=layout.BUILD_DIR if layout.BUILD_DIR.is_dir() else None)
        self.path = Path(self._directory.name) / "model.onnx"
        self.path.write_bytes(model.SerializeToString())

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *_: object) -> None:
        self._directory.cleanup()


def _export_converted(loaded: LoadedPipeline, kind: SourceKind, force: bool, log: Log) -> ExportResult:
    """The shared path: the kind's model file converted, the recipe's passes, verified, written with its provenance."""
    from builders import fix_onnx

    started = time.perf_counter()
    recipe, pipeline = loaded.recipe, loaded.layout
    output = pipeline.onnx("fp32")
    source_file = kind.model_file(recipe.source, pipeline.repository, f"{recipe.path} [source]", log)
    inputs = _record(loaded, kind, source_file)
    expected = input_hash(inputs)
    if not force and provenance.is_current(output, expected):
        log(f"{output.relative_to(layout.REPOSITORY_ROOT) if output.is_relative_to(layout.REPOSITORY_ROOT) else output} is up to date")
        return ExportResult("up to date", output, json.loads(layout.provenance_path(output).read_text()))
    converted = kind.convert(recipe.source, source_file, pipeline.build_dir, loaded.configs.core(), log)
    unfixed = converted.model
    options = fix_onnx.options_for_core(loaded.configs.core(), None, None, fix_onnx.DEFAULT_ATOL, fix_onnx.DEFAULT_RTOL)
    result = fix_onnx.fix_model(unfixed, list(recipe.fix.passes), options, log)
    conversion = kind.check_converted(unfixed, source_file, lambda: _served_floats(loaded), log)
    model, checks = _verified(loaded, unfixed, result.model, log)
    labels = _labels(loaded, converted.labels)
    record = _write(
        output,
        model,
        expected,
        inputs,
        {"source": inputs["source"]["sha256"], "core_config": inputs["core_config_sha256"]},
        {
            "pipeline": pipeline.name,
            "nodes": {"before": result.nodes_before, "after": len(model.graph.node)},
            "op_counts": fix_onnx.op_counts(model),
            "passes": [vars(item) for item in result.passes],
            **converted.provenance,
            **conversion,
            **checks,
            "seconds": round(time.perf_counter() - started, 1),
        },
        log,
        labels,
    )
    return ExportResult("exported", output, record.to_dict())


def _served_floats(loaded: LoadedPipeline) -> np.ndarray:
    """The verification photos through the served preprocessing, normalized: what the unfixed graph takes."""
    pixel_normalization = preprocessors.pixel_normalization(loaded.configs.preprocess)
    pixels = _served_batch(loaded, VERIFY_PHOTOS)
    return pixel_normalization.apply(pixels) if pixel_normalization is not None else pixels


def _labels(loaded: LoadedPipeline, labels: tuple[str, ...] | None) -> tuple[Path, bytes] | None:
    """The class names the source carries, as the postprocess's ``labels_file`` (one a line)."""
    if labels is None:
        return None
    from vision_serving import model_config

    name = Path(model_config.parameter(loaded.configs.postprocess, "labels_file"))
    if name.is_absolute() or ".." in name.parts or not name.name:
        raise BuildError(f"postprocess labels_file {str(name)!r} must be a path inside the model folder")
    return loaded.layout.model_dir("postprocess") / name, ("\n".join(labels) + "\n").encode()


def _write(
    output: Path,
    model: Any,
    expected: str,
    inputs: dict[str, Any],
    input_hashes: dict[str, str],
    extra: dict[str, Any],
    log: Log,
    companion: tuple[Path, bytes] | None = None,
) -> provenance.Provenance:
    """``model`` written to ``output``, a companion file (the labels) and the provenance record beside it, each
    atomically, the record last."""
    data = model.SerializeToString()
    record = provenance.Provenance.for_bytes(
        "export", expected, output, data, input_hashes=input_hashes, tools=dict(inputs["packages"]), inputs=inputs, extra=extra
    )
    atomic_write_bytes(output, data)
    if companion is not None:
        record.add_companion(output, *companion)
        atomic_write_bytes(*companion)
        lines = companion[1].count(b"\n")
        log(f"wrote {companion[0]} ({lines} lines)")
    record.write(layout.provenance_path(output))
    log(f"wrote {output} ({len(data) / 1e6:.1f} MB, {len(model.graph.node)} nodes) in {extra['seconds']} s")
    return record


def _verified(loaded: LoadedPipeline, unfixed: Any, fixed: Any, log: Log) -> tuple[Any, dict[str, Any]]:
    """The fixed model checked on photos through the served preprocessing (against the custom ops'
    reference implementation, with the normalization folded in when the preprocess hands uint8,
    batched against one by one) and its I/O against the core config: the model to write, and the
    checks' numbers for the provenance."""
    from builders.passes import reference_ops

    checks: dict[str, Any] = {}
    if preprocessors.custom(loaded.configs.preprocess) is not None:
        return _verified_ragged(loaded, fixed, log)
    pixel_normalization = preprocessors.pixel_normalization(loaded.configs.preprocess)
    pixels = _served_batch(loaded, VERIFY_PHOTOS)  # what the preprocess hands the core: float32, or uint8 to normalize in it
    floats = pixel_normalization.apply(pixels) if pixel_normalization is not None else pixels
    if any(node.op_type in reference_ops.CUSTOM_OP_TYPES for node in unfixed.graph.node):
        checks["reference_max_abs_diff"] = _verify_against_reference(unfixed, fixed, floats, log)
    model = _normalized(fixed, pixel_normalization, pixels, checks, log)
    _check_io(model, loaded.configs.core(), loaded.layout.core_dir.name)
    if loaded.configs.core().max_batch_size > 1:
        checks["batch_max_abs_diff"] = _verify_batch(model, pixels[: loaded.configs.core().max_batch_size], log)
    else:
        log("max_batch_size 1: one image per run, no batch to verify")
    return model, checks


def _normalized(model: Any, pixel_normalization: Any, pixels: Any, checks: dict[str, Any], log: Log) -> Any:
    """``model`` with the normalization folded in when the preprocess hands uint8 (checked on ``pixels``, photo by
    photo when they are ragged), else itself."""
    if pixel_normalization is None or not normalization.needed(model, pixel_normalization):
        return model
    folded = normalization.fold(model, pixel_normalization)
    batches = [np.asarray(image)[np.newaxis] for image in pixels] if preprocessing.is_ragged(pixels) else [pixels]
    checks["normalization_max_abs_diff"] = max(
        normalization.check_fold(model, folded, batch, pixel_normalization, lambda message: None) for batch in batches
    )
    log(f"normalization in the graph (uint8 pixels in): {len(pixels)} real photos, max |Δ| {checks['normalization_max_abs_diff']:.1e}")
    return folded


def _verified_ragged(loaded: LoadedPipeline, model: Any, log: Log) -> tuple[Any, dict[str, Any]]:
    """A core whose preprocessor sizes each photo (``vision_serving.preprocessors``): the normalization folded in when
    it hands uint8, its I/O against its config, and each verification photo's input run alone and as a batch of two
    (with its mirror image). The model to write and the checks' numbers."""
    checks: dict[str, Any] = {}
    pixels = _served_batch(loaded, VERIFY_PHOTOS)
    model = _normalized(model, preprocessors.pixel_normalization(loaded.configs.preprocess), pixels, checks, log)
    _check_io(model, loaded.configs.core(), loaded.layout.core_dir.name)
    worst = 0.0
    for image in pixels:
        image = np.asarray(image)
        worst = max(worst, _verify_batch(model, np.stack([image, image[..., ::-1]]), lambda message: None))
    log(f"{len(pixels)} photos, each at its own size: batch of 2 vs one by one: max |Δ| {worst:.1e}")
    return model, {**checks, "batch_max_abs_diff": worst}


def _check_io(model: Any, core: ModelConfig, model_name: str) -> None:
    """The ONNX's inputs and outputs are the model config's, by name and per-image dims (-1: any size). The
    config may fix a size the ONNX leaves dynamic (the served model then takes only that size), not the reverse."""

    def dims(value: Any) -> list[int]:
        return [d.dim_value if d.HasField("dim_value") else -1 for d in value.type.tensor_type.shape.dim]

    def fits(onnx_dims: list[int], config_dims: list[int]) -> bool:
        return len(onnx_dims) == len(config_dims) and all(o == c or (o == -1 and c > 0) for o, c in zip(onnx_dims, config_dims))

    expected = {t.name: list(t.dims) for t in [*core.input, *core.output]}
    actual = {v.name: dims(v)[1:] for v in [*model.graph.input, *model.graph.output]}
    if set(expected) != set(actual) or not all(fits(actual[name], expected[name]) for name in expected):
        raise CheckFailed(f"the ONNX's I/O {actual} does not match {model_name}'s config {expected}")


# --------------------------------------------------------------------------- second stages


def export_stage(loaded: LoadedPipeline, stage: recipes.Stage, force: bool = False, log: Log = log_to_stderr) -> Path:
    """A second-stage model (``[stages.<role>]``) -> ``<pipeline>_<role>/1/model.onnx``: its source (of a kind a
    second stage may come from, :func:`builders.sources.registry.stage_kind`: an ONNX file), the recipe's passes,
    its I/O checked against that model's config; and the ``metadata_lists`` files beside the postprocess config."""
    from builders import fix_onnx
    from vision_serving import model_config

    pipeline = loaded.layout
    section = f"{loaded.recipe.path} [stages.{stage.role}]"
    kind = source_kinds.stage_kind(stage.source.kind, section)
    folder = pipeline.stage_dir(stage.role)
    config_file = folder / "config.pbtxt"
    if not config_file.is_file():
        raise recipes.RecipeError(f"{section}: no model {folder.name} in {pipeline.repository} (its config.pbtxt)")
    config = model_config.load_config(folder)
    output = pipeline.stage_onnx(stage.role)
    source_file = kind.model_file(stage.source, pipeline.repository, section, log)
    source_sha256 = sha256_file(source_file)
    inputs: dict[str, Any] = {
        "source": {"file": source_file.name, "sha256": source_sha256},
        "passes": list(stage.fix.passes),
        "decode": stage.decode,
        "config_sha256": sha256_file(config_file),
        "code": _code(kind),
        "packages": package_versions(["onnx", "onnx-graphsurgeon", "numpy"]),
    }
    expected = input_hash(inputs)
    if force or not provenance.is_current(output, expected):
        started = time.perf_counter()
        options = fix_onnx.options_for_core(config, None, None, fix_onnx.DEFAULT_ATOL, fix_onnx.DEFAULT_RTOL)
        if stage.decode is not None:  # the passes see the model before its decoding: one output, named for what it is
            options = dataclasses.replace(options, output_names=(stage_decode.UNDECODED_OUTPUT,), output_dims=None)
        converted = kind.convert(stage.source, source_file, pipeline.build_dir / stage.role, config, log)
        result = fix_onnx.fix_model(converted.model, list(stage.fix.passes), options, log)
        kind.check_converted(converted.model, source_file, _no_photos, log)
        model = result.model
        if stage.decode is not None:
            model = _decoded(model, stage.decode, config, log)
        _check_io(model, config, folder.name)
        _write(
            output,
            model,
            expected,
            inputs,
            {"source": source_sha256, "config": inputs["config_sha256"]},
            {"pipeline": pipeline.name, "stage": stage.role, **converted.provenance, "seconds": round(time.perf_counter() - started, 1)},
            log,
        )
    else:
        log(f"{folder.name}/1/{output.name} is up to date")
    _write_metadata_lists(output, stage, pipeline.model_dir("postprocess"), log)
    return output


def _no_photos() -> np.ndarray:
    raise BuildError("a second stage takes what its postprocess cuts from photos, not photos: its kind cannot check it on photos")


def _decoded(model: Any, decode: str, config: ModelConfig, log: Log) -> Any:
    """``model`` with the stage's decoding in its graph (:mod:`builders.stage_decode`), its outputs named as the
    config names them, checked against the model's own outputs on seeded random inputs of every width."""
    from vision_serving import model_config
    from vision_serving.onnx_core import create_session

    decoded = stage_decode.apply(model, decode, [t.name for t in config.output])
    (image,) = config.input
    rng = np.random.default_rng(0)
    dtype = model_config.numpy_dtype(image.data_type)
    # Two sizes for each dynamic dim (a recognizer's width): 320 and 96.
    batches = [rng.normal(0.0, 1.0, (2, *(d if d > 0 else size for d in image.dims))).astype(dtype) for size in (320, 96)]

    def run(candidate: Any, batch: np.ndarray) -> list[np.ndarray]:
        with _temporary_model(candidate) as path:
            session = create_session(path)
            return session.run(None, {session.get_inputs()[0].name: batch})

    steps = stage_decode.verify(model, decoded, batches, run)
    log(f"{decode} in the graph: its outputs equal the decoding of the probabilities at {steps} steps")
    return decoded


def _write_metadata_lists(model_path: Path, stage: recipes.Stage, postprocess_dir: Path, log: Log) -> None:
    """Each ``metadata_lists`` key's value, one item a line (``str.splitlines``), as a JSON list file."""
    if not stage.metadata_lists:
        return
    import onnx

    metadata = {prop.key: prop.value for prop in onnx.load(str(model_path), load_external_data=False).metadata_props}
    for key, filename in stage.metadata_lists.items():
        if key not in metadata:
            raise CheckFailed(
                f"{model_path.name} of stage {stage.role} carries no metadata {key!r} (its keys: {', '.join(metadata) or 'none'})"
            )
        data = json.dumps(metadata[key].splitlines(), ensure_ascii=False).encode("utf-8")
        target = postprocess_dir / filename
        if not target.is_file() or target.read_bytes() != data:
            atomic_write_bytes(target, data)
            log(f"wrote {target} ({len(metadata[key].splitlines())} items of metadata {key!r})")


def run_from_args(args: argparse.Namespace) -> int:
    export(args.loaded, force=args.force)
    return 0
