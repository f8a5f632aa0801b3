"""Check a model repository before Triton sees it.

    python -m vision_serving.consistency [--repository model_repository]

Checks every pipeline folder of the model repository (each is a Triton model
repository of its own: its ensemble and composing models, see
``vision_serving.layout``): the ensemble named after the pipeline and its
``<pipeline>_preprocess/_core/_postprocess`` models exist, and model names
are unique across pipelines. Within each pipeline, it parses every ``config.pbtxt`` and ``configs/*.pbtxt`` with Triton's own
protobuf schema, then verifies what Triton only reports at load or request
time, often cryptically: each ensemble step's ``input_map``/``output_map``
names exist on the composing model with matching dtypes and dims, every
required input is fed, every ensemble output is produced, batch sizes fit;
the config variants of one model (TensorRT vs CPU) expose identical tensors;
built ONNX files match the config that serves them; a TensorRT config whose input dims are dynamic lists
every profile its input's code gives it in each instance group, reserves each profile's memory alone when they
share an instance, and warms each up (``vision_serving.engine_profiles``); preprocessing parameters,
each postprocess model's task parameters (its tensors by role, a detector's head
options and its input size, label files) agree with the tensors they describe. (That every config is what its
pipeline's spec generates is ``python -m builders configs --check``'s: the spec is not
served.)
Exit code 1 lists every problem found.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import drift, engine_profiles, layout, model_config, preprocessing, preprocessors, queue_policy
from .model_config import ConfigError, ModelConfig
from .tasks import registry

ONNX_DTYPES = {1: "TYPE_FP32", 10: "TYPE_FP16", 6: "TYPE_INT32", 7: "TYPE_INT64", 3: "TYPE_INT8", 2: "TYPE_UINT8", 9: "TYPE_BOOL"}


def _dims(item) -> list[int]:
    return [int(d) for d in item.dims]


def _dims_compatible(a: list[int], b: list[int]) -> bool:
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b))


def _type(item) -> str:
    return model_config.model_config_pb2.DataType.Name(item.data_type)


def load_repository(repository: Path) -> tuple[dict[str, dict[str, ModelConfig]], list[str]]:
    """{model name: {variant ('' for config.pbtxt, else the configs/ name): config}} and parse problems."""
    models: dict[str, dict[str, ModelConfig]] = {}
    problems: list[str] = []
    for model_dir in sorted(p for p in repository.iterdir() if p.is_dir() and not p.name.startswith(".")):
        files = [("", model_dir / "config.pbtxt")] + [(p.stem, p) for p in sorted(model_dir.glob("configs/*.pbtxt"))]
        for variant, path in files:
            if not path.is_file():
                problems.append(f"{model_dir.name}: no config.pbtxt")
                continue
            try:
                config = model_config.parse_config_text(path.read_text(), str(path.relative_to(repository.parent)))
            except ConfigError as error:
                problems.append(str(error))
                continue
            if config.name != model_dir.name:
                problems.append(f"{path}: name '{config.name}' differs from its folder '{model_dir.name}'")
            models.setdefault(model_dir.name, {})[variant] = config
    return models, problems


def check_variants(name: str, variants: dict[str, ModelConfig]) -> list[str]:
    """All configs of one model must expose the same tensors and batch size."""
    problems = []
    reference_variant, reference = next(iter(variants.items()))

    def signature(config: ModelConfig):
        return (
            config.max_batch_size,
            [(t.name, _type(t), _dims(t), t.optional) for t in config.input],
            [(t.name, _type(t), _dims(t)) for t in config.output],
        )

    for variant, config in variants.items():
        if signature(config) != signature(reference):
            problems.append(
                f"{name}: configs/{variant}.pbtxt and {reference_variant or 'config'}.pbtxt differ in "
                "inputs, outputs or max_batch_size; the ensemble needs them identical"
            )
    return problems


def check_ensemble(ensemble: ModelConfig, models: dict[str, ModelConfig]) -> list[str]:
    problems: list[str] = []
    where = f"ensemble '{ensemble.name}'"
    # Tensor name in the ensemble -> (dtype, dims) as declared by its producer.
    available = {t.name: (_type(t), _dims(t)) for t in ensemble.input}
    for index, step in enumerate(ensemble.ensemble_scheduling.step):
        step_where = f"{where} step {index} ('{step.model_name}')"
        model = models.get(step.model_name)
        if model is None:
            problems.append(f"{step_where}: no such model in the repository")
            continue
        if ensemble.max_batch_size > model.max_batch_size:
            problems.append(f"{step_where}: ensemble max_batch_size {ensemble.max_batch_size} exceeds the model's {model.max_batch_size}")
        model_inputs = {t.name: t for t in model.input}
        for model_input, ensemble_tensor in step.input_map.items():
            target = model_inputs.get(model_input)
            if target is None:
                problems.append(f"{step_where}: input_map key '{model_input}' is not an input of the model ({sorted(model_inputs)})")
                continue
            if ensemble_tensor not in available:
                problems.append(
                    f"{step_where}: input_map value '{ensemble_tensor}' is not produced by an earlier step or an ensemble input"
                )
                continue
            dtype, dims = available[ensemble_tensor]
            if dtype != _type(target) or not _dims_compatible(dims, _dims(target)):
                problems.append(
                    f"{step_where}: '{ensemble_tensor}' is {dtype}{dims} but input '{model_input}' expects {_type(target)}{_dims(target)}"
                )
        for name, target in model_inputs.items():
            if name not in step.input_map and not target.optional:
                problems.append(f"{step_where}: required input '{name}' is not mapped")
        model_outputs = {t.name: t for t in model.output}
        for model_output, ensemble_tensor in step.output_map.items():
            source = model_outputs.get(model_output)
            if source is None:
                problems.append(f"{step_where}: output_map key '{model_output}' is not an output of the model ({sorted(model_outputs)})")
                continue
            available[ensemble_tensor] = (_type(source), _dims(source))
    for output in ensemble.output:
        if output.name not in available:
            problems.append(f"{where}: output '{output.name}' is not produced by any step")
            continue
        dtype, dims = available[output.name]
        if dtype != _type(output) or not _dims_compatible(dims, _dims(output)):
            problems.append(f"{where}: output '{output.name}' is declared {_type(output)}{_dims(output)} but produced as {dtype}{dims}")
    return problems


def served_onnx_filename(config: ModelConfig, version_dir: Path) -> str | None:
    """The ONNX file a core config serves from ``version_dir``: ``onnx_file``/``precision``
    (Python-backend cores) or ``default_model_filename`` (Triton's openvino backend); None otherwise."""
    from . import core_model

    if config.backend == "openvino":
        return config.default_model_filename or None
    if "onnx_file" in config.parameters or "precision" in config.parameters:
        return core_model.onnx_filename(config, version_dir)
    return None


def check_onnx(config: ModelConfig, version_dirs: list[Path]) -> list[str]:
    """The ONNX a core config serves must have exactly the config's tensors (plus a batch dim). Where onnx cannot be
    imported (the unit tier's machine), the configs are checked and the ONNX files are not read."""
    try:
        import onnx
    except ImportError:
        return []
    problems = []
    for version_dir in version_dirs:
        try:
            filename = served_onnx_filename(config, version_dir)
        except ConfigError as error:
            problems.append(str(error))
            continue
        if filename is None:
            continue
        path = version_dir / filename
        if not path.is_file():
            continue  # not built yet: the server reports it at load time
        graph = onnx.load(str(path), load_external_data=False).graph
        initializers = {i.name for i in graph.initializer}
        for kind, declared, actual in (
            ("input", config.input, [v for v in graph.input if v.name not in initializers]),
            ("output", config.output, list(graph.output)),
        ):
            declared_sig = [(t.name, _type(t), ([-1] if config.max_batch_size > 0 else []) + _dims(t)) for t in declared]
            actual_sig = [
                (
                    v.name,
                    ONNX_DTYPES.get(v.type.tensor_type.elem_type, str(v.type.tensor_type.elem_type)),
                    [d.dim_value if d.HasField("dim_value") else -1 for d in v.type.tensor_type.shape.dim],
                )
                for v in actual
            ]
            if len(declared_sig) != len(actual_sig) or any(
                d[0] != a[0] or d[1] != a[1] or not _dims_compatible(d[2], a[2]) for d, a in zip(declared_sig, actual_sig)
            ):
                problems.append(f"{path}: ONNX {kind}s {actual_sig} do not match config '{config.name}' {declared_sig}")
    return problems


def check_model_parameters(config: ModelConfig, model_dir: Path, preprocess: preprocessing.PreprocessSpec | None = None) -> list[str]:
    """Preprocessing and postprocessing parameters agree with the tensors they describe; a postprocess
    model's with its task (and with ``preprocess``, its pipeline's preprocess spec, where known)."""
    if config.backend == "openvino":
        return check_openvino_backend(config, model_dir)
    problems = []
    try:
        if config.backend == "python" and ("onnx_file" in config.parameters or "precision" in config.parameters):
            check_python_core(config)
        if config.name.endswith("_preprocess"):
            problems += preprocessors.check(config)
        if config.name.endswith("_preprocess") and preprocessors.custom(config) is not None:
            preprocessing.limits_from_config(config)
            drift.DriftSettings.from_config(config, drift.IMAGE_FEATURES)
        elif config.name.endswith("_preprocess"):
            preprocessing.PreprocessSpec.from_config(config)
            preprocessing.PreprocessOutputs.from_config(config)
            preprocessing.limits_from_config(config)
            drift.DriftSettings.from_config(config, drift.IMAGE_FEATURES)  # present, positive, min_samples <= window
        if config.name.endswith("_postprocess"):
            task = registry.for_config(config)
            problems += task.check(config, model_dir, preprocess)
            drift.DriftSettings.from_config(config, task.drift_features)
    except (ConfigError, ValueError) as error:
        problems.append(f"{config.name}: {error}")
    return problems


def check_python_core(config: ModelConfig) -> None:
    """A Python-backend core's runtime, model and runtime settings (raises ``ConfigError``)."""
    from . import core_model, cpu_runtimes

    core_model.model_parameter(config)
    cpu_runtimes.of_config(config).check(config)


# Triton's openvino backend (src/openvino.cc): the parameters it reads, and the values it accepts.
# It ignores any other key, so a misspelt one would silently change nothing.
OPENVINO_BACKEND_PARAMETERS = {
    "PERFORMANCE_HINT": ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT"),
    "NUM_STREAMS": ("AUTO", "NUMA", "<number>"),
    "INFERENCE_NUM_THREADS": ("<number>",),
    "COMPILATION_NUM_THREADS": ("<number>",),
    "HINT_BF16": ("YES",),
    "CPU_EXTENSION_PATH": ("<path>",),
    "SKIP_OV_DYNAMIC_BATCHSIZE": ("YES", "NO"),
    "ENABLE_BATCH_PADDING": ("YES", "NO"),
    "RESHAPE_IO_LAYERS": ("YES", "NO"),
    "TARGET_DEVICE": ("CPU", "GPU", "NPU", "AUTO", "MULTI", "HETERO"),
}


def check_openvino_backend(config: ModelConfig, model_dir: Path) -> list[str]:
    """A core config for Triton's openvino backend: known parameters with accepted values, an ONNX
    model file, batch padding when batching (the backend fixes the batch at max_batch_size), and
    the precision the ladder chose."""
    where = f"{config.name} (backend openvino)"
    problems = []
    for key in config.parameters:
        value = config.parameters[key].string_value.upper()
        accepted = OPENVINO_BACKEND_PARAMETERS.get(key)
        if accepted is None:
            problems.append(f"{where}: parameter '{key}' is not read by the openvino backend ({sorted(OPENVINO_BACKEND_PARAMETERS)})")
        elif not (value in accepted or ("<number>" in accepted and value.isdigit()) or "<path>" in accepted):
            problems.append(f"{where}: parameter '{key}' is {value!r}; the backend accepts {', '.join(accepted)}")
    filename = config.default_model_filename
    if not filename.endswith((".onnx", ".xml")):
        problems.append(f"{where}: default_model_filename {filename!r} must name the model file (.onnx or .xml) in the version folder")
    if config.max_batch_size > 0 and model_config.parameter(config, "ENABLE_BATCH_PADDING", "NO").upper() != "YES":
        problems.append(
            f"{where}: the backend fixes the batch at max_batch_size {config.max_batch_size} and fails smaller batches "
            "unless ENABLE_BATCH_PADDING is YES"
        )
    for version_dir in sorted(p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()):
        record = layout.read_served_precision(version_dir)
        if record is not None and filename not in (record["onnx"], layout.FP32_ONNX):
            problems.append(
                f"{where}: default_model_filename {filename!r} is not {record['onnx']!r}, the precision the ladder chose "
                f"({version_dir / layout.SERVED_PRECISION})"
            )
    return problems


def _preprocess_spec(config: ModelConfig | None) -> preprocessing.PreprocessSpec | None:
    """The pipeline's preprocess spec for the postprocess checks; None when it is broken (reported on its own)."""
    if config is None:
        return None
    try:
        if preprocessors.kind(config) != preprocessors.IMAGE_TO_TENSOR:
            return None  # a preprocessor of its own: its outputs are checked on their own
        return preprocessing.PreprocessSpec.from_config(config)
    except (ConfigError, ValueError):
        return None


def check_repository(repository: Path) -> list[str]:
    """Every pipeline of a model repository, and model names unique across them."""
    problems: list[str] = []
    pipelines = layout.pipelines(repository)
    if not pipelines:
        return [f"{repository}: no pipeline (a folder with a {layout.RECIPE_FILENAME})"]
    owners: dict[str, str] = {}
    for pipeline in pipelines:
        for name in check_pipeline_layout(pipeline, problems):
            if name in owners:
                problems.append(f"model '{name}' is in both {owners[name]} and {pipeline.name}: Triton needs unique names")
            owners[name] = pipeline.name
        problems += [f"{pipeline.name}: {problem}" for problem in check_pipeline(pipeline.repository)]
    return list(dict.fromkeys(problems))


def check_pipeline_layout(pipeline: layout.Pipeline, problems: list[str]) -> list[str]:
    """The ensemble and the three role models exist; returns the pipeline's model names."""
    names = sorted(p.name for p in pipeline.repository.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    for expected in [pipeline.name, *(pipeline.model_name(role) for role in layout.ROLES)]:
        if expected not in names:
            problems.append(f"{pipeline.name}: no model folder '{expected}'")
    return names


def check_pipeline(repository: Path) -> list[str]:
    """One pipeline folder (a Triton model repository): configs, wiring, ONNX I/O, parameters."""
    models, problems = load_repository(repository)
    pipeline = layout.Pipeline.at(repository)
    preprocess = _preprocess_spec(models.get(pipeline.model_name("preprocess"), {}).get(""))
    for name, variants in models.items():
        problems += check_variants(name, variants)
        for config in variants.values():
            problems += check_model_parameters(config, repository / name, preprocess)
            if config.backend == "openvino" or "onnx_file" in config.parameters or "precision" in config.parameters:
                version_dirs = sorted(p for p in (repository / name).iterdir() if p.is_dir() and p.name.isdigit())
                problems += check_onnx(config, version_dirs)
    problems += queue_policy.check_pipeline(models, repository)
    problems += engine_profiles.check_pipeline(pipeline, models)
    # Every variant combination an ensemble can meet: each config name, falling back to config.pbtxt.
    variant_names = sorted({v for variants in models.values() for v in variants})
    for variants in models.values():
        for ensemble in variants.values():
            if ensemble.platform != "ensemble":
                continue
            for variant in variant_names:
                resolved = {m: vs.get(variant, vs.get("")) for m, vs in models.items() if vs.get(variant, vs.get(""))}
                for problem in check_ensemble(ensemble, resolved):
                    label = f" (with --model-config-name={variant})" if variant else ""
                    problems.append(problem + label)
    return list(dict.fromkeys(problems))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vision_serving.consistency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repository", type=Path, default=layout.MODEL_REPOSITORY)
    args = parser.parse_args(argv)
    if not args.repository.is_dir():
        print(f"error: {args.repository} is not a directory", file=sys.stderr)
        return 2
    problems = check_repository(args.repository)
    for problem in problems:
        print(f"problem: {problem}")
    if problems:
        print(f"{len(problems)} problem(s) in {args.repository}")
        return 1
    pipelines = layout.pipelines(args.repository)
    count = sum(len(load_repository(p.repository)[0]) for p in pipelines)
    print(
        f"ok: {len(pipelines)} pipelines ({', '.join(p.name for p in pipelines)}), {count} models in {args.repository}: "
        "configs, ensemble wiring and ONNX I/O agree"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
