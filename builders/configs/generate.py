"""A pipeline's Triton configs, generated from its spec (:class:`builders.spec.PipelineSpec`), and every other
generated file of its folder.

The rules, each in one place:

- **The core** (and each second stage) is a TensorRT plan: the spec's tensors and settings, one GPU instance by
  default, a bounded queue (:func:`vision_serving.queue_policy.bounded_queue`). A core whose input dims are fixed
  warms up on zeros at batch 1 and at its ``max_batch_size``; one whose dims are dynamic gets its TensorRT profiles
  from the code that makes its input (:mod:`vision_serving.engine_profiles`): every instance lists them, each
  context reserves its own profile's memory when there are several, and each profile warms up at its ``opt`` shape
  and batch and at its ``max`` shape and the largest batch.
- **The preprocess** takes the upload (``IMAGE``, BYTES ``[1]``) and hands the core its one input (the
  preprocessor's pixels output, with the core input's datatype and dims) and the postprocess what else it reads
  (its task's required inputs that are not the core's: a photo's size, its tensor transform). With
  ``pixel_device = "gpu"`` its ``config.pbtxt`` is the GPU preprocess and its ``configs/<variant>.pbtxt`` the CPU one
  (:mod:`.pixel_variants`).
- **The postprocess** takes each core output (named in capitals, with its datatype and dims), the preprocess's
  outputs and the request's options (its task's optional inputs), and answers with its task's outputs for its
  parameters (:meth:`vision_serving.tasks.base.Task.config_roles`). A postprocess that calls second stages is told
  each one's model, input, outputs and largest batch (``<role>_model``, ``<role>_input``, ``<role>_output``,
  ``<role>_max_batch``).
- **The ensemble** takes the upload and the request's options and answers the postprocess's outputs; a tensor
  between steps is named as its producer names it, in small letters.
- **A tiled pipeline** (a spec's ``[tiling]``, :mod:`vision_serving.tiling`) has no core step: its preprocess (its
  task's tiling preprocessor, reading the request's ``TILING`` too) hands the postprocess each photo's views
  (``TILES``, ``[-1, *core input]`` with the core input's datatype) and what else it reads; the postprocess reaches the
  core by BLS as a second stage of role ``core`` (``core_model``, ``core_input``, ``core_output``, ``core_max_batch``);
  both state the tiling's parameters. A photo costs up to ``ceil(max_tiles / core max_batch_size)`` core requests, so
  the core's queue holds that many for each photo the preprocess can hand over at once, and a request may wait that
  many times the spec's timeout.
- **Parameters** a step states without its spec saying so come from the serving library's defaults: every
  preprocess its decode limits and threads (:data:`vision_serving.preprocessing.LIMIT_DEFAULTS`,
  :data:`~vision_serving.preprocessing.THREAD_DEFAULTS`, its preprocessor's own), every Python step its CPU sizing
  (:data:`vision_serving.cpu_sizing.STEP_DEFAULTS`) and drift settings (:class:`vision_serving.drift.DriftSettings`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from builders import spec as specs
from builders.configs import header_line, pixel_variants, render, variants
from vision_serving import cpu_sizing, drift, engine_profiles, preprocessing, preprocessors, queue_policy
from vision_serving.model_config import ConfigError, ModelConfig, model_config_pb2
from vision_serving.tasks.base import EngineProfile, Role

KIND_CPU = model_config_pb2.ModelInstanceGroup.KIND_CPU
KIND_GPU = model_config_pb2.ModelInstanceGroup.KIND_GPU
IMAGE_INPUT = "IMAGE"
# The module every Python model of a role runs (its generated ``1/model.py`` imports it).
ENTRY_POINTS = {"preprocess": "preprocess", "gpu_preprocess": "gpu_preprocess", "core": "core", "postprocess": "postprocess"}


@dataclass(frozen=True)
class PipelineConfigs:
    """Every production ``config.pbtxt`` of a pipeline, by model name, and its cores (core and second stages)."""

    ensemble: ModelConfig
    preprocess: ModelConfig
    core: ModelConfig
    postprocess: ModelConfig
    stages: Mapping[str, ModelConfig]  # by role
    # The CPU preprocess by variant name when config.pbtxt is the GPU one (pixel_device "gpu": builders.configs.pixel_variants).
    preprocess_variants: Mapping[str, ModelConfig] = field(default_factory=dict)

    def by_model(self) -> dict[str, ModelConfig]:
        configs = [self.ensemble, self.preprocess, self.core, self.postprocess, *self.stages.values()]
        return {config.name: config for config in configs}


def _datatype(datatype: str) -> int:
    return specs.TensorSpec("", datatype, ()).data_type


def _tensor(kind: type, name: str, data_type: int, dims: Sequence[int], optional: bool = False) -> object:
    tensor = kind(name=name, data_type=data_type, dims=list(dims))
    if optional:
        tensor.optional = True
    return tensor


def _role_dims(role: Role, where: str) -> list[int]:
    if role.dims is None:
        raise ConfigError(f"{where}: the task's role '{role.role}' has no fixed rank: it cannot be declared")
    return [-1 if dim is None else dim for dim in role.dims]


def _role_name(role: Role) -> str:
    return role.name or role.role.upper()


def _batching(settings: specs.StepSettings) -> model_config_pb2.ModelDynamicBatching:
    return model_config_pb2.ModelDynamicBatching(
        max_queue_delay_microseconds=settings.max_queue_delay_microseconds or 0,
        default_queue_policy=queue_policy.bounded_queue(
            settings.max_queue_size or queue_policy.MIN_QUEUE_SIZE,
            settings.queue_timeout_microseconds or queue_policy.DEFAULT_TIMEOUT_MICROSECONDS,
        ),
    )


def _parameters(config: ModelConfig, *layers: Mapping[str, str]) -> None:
    for layer in layers:
        for key, value in layer.items():
            config.parameters[key].string_value = value


# --------------------------------------------------------------------------- the cores


def _warmups(core: ModelConfig, profiles: Sequence[EngineProfile]) -> list[model_config_pb2.ModelWarmup]:
    (tensor,) = core.input
    if not profiles:
        samples = [(f"zeros_batch_{size}", size, list(tensor.dims)) for size in sorted({1, core.max_batch_size})]
    else:
        samples = []
        for profile in profiles:
            name = profile.name.replace(" ", "_")
            samples.append((f"{name}_opt", profile.opt_batch, [*profile.opt]))
            samples.append((f"{name}_max", core.max_batch_size, [*profile.max]))
    made = []
    for name, batch, dims in samples:
        warmup = model_config_pb2.ModelWarmup(name=name, batch_size=batch)
        data = warmup.inputs[tensor.name]
        data.data_type, data.zero_data = tensor.data_type, True
        data.dims.extend(dims)
        made.append(warmup)
    return made


def core_config(name: str, core: specs.CoreSpec, max_batch_size: int, profiles: Sequence[EngineProfile]) -> ModelConfig:
    """A TensorRT core's production config (see the module docstring)."""
    settings = core.settings
    config = ModelConfig(name=name, platform="tensorrt_plan", max_batch_size=settings.max_batch_size or max_batch_size)
    config.input.extend(_tensor(model_config_pb2.ModelInput, t.name, t.data_type, t.dims) for t in core.inputs)
    config.output.extend(_tensor(model_config_pb2.ModelOutput, t.name, t.data_type, t.dims) for t in core.outputs)
    config.dynamic_batching.CopyFrom(_batching(settings))
    group = config.instance_group.add(kind=KIND_GPU, count=settings.instances or 1)
    if profiles:
        group.profile.extend(str(index) for index in range(len(profiles)))
        if len(profiles) > 1:
            _parameters(config, {engine_profiles.ALLOCATION_STRATEGY: engine_profiles.ON_PROFILE_CHANGE})
    if len(config.input) == 1:
        config.model_warmup.extend(_warmups(config, profiles))
    problems = engine_profiles.check_config(config, profiles) if profiles else []
    if problems:
        raise ConfigError(f"{problems[0]} (the profiles come from the code that makes its input; its spec must fit them)")
    return config


# --------------------------------------------------------------------------- the Python steps


def _preprocessor(spec: specs.PipelineSpec, where: str) -> str:
    """The preprocess's ``preprocessor``: the spec's, or a tiled pipeline's task's tiling preprocessor."""
    name = spec.preprocess.parameters.get("preprocessor", preprocessors.IMAGE_TO_TENSOR)
    if spec.tiling is None:
        return name
    tiled = spec.task.tiled_preprocessor
    if tiled is None or name not in (preprocessors.IMAGE_TO_TENSOR, tiled):
        raise ConfigError(f"{where}: a tiled pipeline's preprocess is its task's tiling preprocessor ({tiled}), not {name!r}")
    return tiled


def _views(core: ModelConfig) -> list[int]:
    """A tiled pipeline's views per photo: the core's input, any count of them."""
    return [-1, *core.input[0].dims]


def preprocess_config(spec: specs.PipelineSpec, core: ModelConfig, side: Sequence[Role]) -> ModelConfig:
    """The preprocess: the upload (and the options its preprocessor reads) in; the core's input (a tiled pipeline's
    views) and the postprocess's ``side`` inputs out."""
    step = spec.preprocess
    where = f"{spec.path} [preprocess]"
    name = _preprocessor(spec, where)
    if len(core.input) != 1:
        raise ConfigError(f"{where}: the preprocess feeds a core of one input; {core.name} has {len(core.input)}")
    config = ModelConfig(name=spec.layout.model_name("preprocess"), backend="python")
    config.max_batch_size = step.settings.max_batch_size or spec.max_batch_size
    config.input.append(_tensor(model_config_pb2.ModelInput, IMAGE_INPUT, model_config_pb2.TYPE_STRING, [1]))
    for role in preprocessors.options(name):
        config.input.append(_tensor(model_config_pb2.ModelInput, _role_name(role), _datatype(role.datatype), _role_dims(role, where), True))
    pixels = core.input[0]
    dims = _views(core) if spec.tiling is not None else pixels.dims
    config.output.append(_tensor(model_config_pb2.ModelOutput, preprocessors.pixels_output(name), pixels.data_type, dims))
    for role in side:
        config.output.append(_tensor(model_config_pb2.ModelOutput, _role_name(role), _datatype(role.datatype), _role_dims(role, where)))
    _parameters(
        config,
        preprocessors.stated_defaults(name),
        preprocessing.LIMIT_DEFAULTS,
        preprocessing.THREAD_DEFAULTS,
        cpu_sizing.THREADED_STEP_DEFAULTS,
        drift.DriftSettings().parameters(),
        pixel_variants.cpu_parameters(step),
        spec.tiling or {},
        {"preprocessor": name} if spec.tiling is not None else {},
    )
    config.dynamic_batching.CopyFrom(_batching(step.settings))
    config.instance_group.add(kind=KIND_CPU, count=step.settings.instances or 1)
    return config


def tiled_queue(core: ModelConfig, preprocess: ModelConfig, max_tiles: int) -> None:
    """A tiled pipeline's core queue (see the module docstring): each photo the preprocess hands over at once costs up to
    ``ceil(max_tiles / max_batch_size)`` core requests, and may wait as many times the timeout."""
    requests = math.ceil(max_tiles / max(core.max_batch_size, 1))
    policy = core.dynamic_batching.default_queue_policy
    policy.max_queue_size = max(policy.max_queue_size, queue_policy.burst(preprocess) * requests)
    policy.default_timeout_microseconds *= requests


def _stage_parameters(stages: Mapping[str, ModelConfig]) -> dict[str, str]:
    parameters = {}
    for role, stage in stages.items():
        parameters[f"{role}_model"] = stage.name
        parameters[f"{role}_input"] = ",".join(tensor.name for tensor in stage.input)
        parameters[f"{role}_output"] = ",".join(tensor.name for tensor in stage.output)
        parameters[f"{role}_max_batch"] = str(stage.max_batch_size)
    return parameters


def postprocess_config(spec: specs.PipelineSpec, core: ModelConfig, stages: Mapping[str, ModelConfig]) -> tuple[ModelConfig, list[Role]]:
    """The postprocess and the inputs it takes from the preprocess (its task's required inputs not the core's)."""
    step = spec.postprocess
    where = f"{spec.path} [postprocess]"
    config = ModelConfig(name=spec.layout.model_name("postprocess"), backend="python")
    config.max_batch_size = step.settings.max_batch_size or spec.max_batch_size
    tiled = spec.tiling is not None
    _parameters(
        config,
        {"task": spec.task.name},
        cpu_sizing.STEP_DEFAULTS,
        drift.DriftSettings().parameters(),
        _stage_parameters({**stages, **({"core": core} if tiled else {})}),
        step.parameters,
        spec.tiling or {},
    )
    inputs, outputs = spec.task.config_roles(config)
    side = [role for role in inputs if not role.from_core and not role.optional]
    options = [role for role in inputs if role.optional]
    if tiled:  # the views, which it sends to the core
        pixels = core.input[0]
        config.input.append(
            _tensor(model_config_pb2.ModelInput, preprocessors.pixels_output(_preprocessor(spec, where)), pixels.data_type, _views(core))
        )
    for tensor in core.output if not tiled else ():
        config.input.append(_tensor(model_config_pb2.ModelInput, tensor.name.upper(), tensor.data_type, tensor.dims))
    for role in (*side, *options):
        config.input.append(
            _tensor(model_config_pb2.ModelInput, _role_name(role), _datatype(role.datatype), _role_dims(role, where), role.optional)
        )
    for role in outputs:
        config.output.append(_tensor(model_config_pb2.ModelOutput, _role_name(role), _datatype(role.datatype), _role_dims(role, where)))
    config.dynamic_batching.CopyFrom(_batching(step.settings))
    config.instance_group.add(kind=KIND_CPU, count=step.settings.instances or 1)
    return config, side


def ensemble_config(spec: specs.PipelineSpec, preprocess: ModelConfig, core: ModelConfig, postprocess: ModelConfig) -> ModelConfig:
    """The model clients call: the upload and the request's options in, the postprocess's answers out (a tiled
    pipeline's: no core step, the preprocess's views to the postprocess)."""
    config = ModelConfig(name=spec.name, platform="ensemble", max_batch_size=spec.max_batch_size)
    options = [tensor for tensor in (*preprocess.input, *postprocess.input) if tensor.optional]
    options = [tensor for index, tensor in enumerate(options) if tensor.name not in [t.name for t in options[:index]]]
    config.input.extend([preprocess.input[0], *options])
    config.output.extend(postprocess.output)
    schedule = config.ensemble_scheduling
    step = schedule.step.add(model_name=preprocess.name, model_version=-1)
    for tensor in preprocess.input:
        step.input_map[tensor.name] = tensor.name
    for tensor in preprocess.output:
        step.output_map[tensor.name] = tensor.name.lower()
    tiled = spec.tiling is not None
    if not tiled:
        step = schedule.step.add(model_name=core.name, model_version=-1)
        step.input_map[core.input[0].name] = preprocess.output[0].name.lower()
        for tensor in core.output:
            step.output_map[tensor.name] = tensor.name
    step = schedule.step.add(model_name=postprocess.name, model_version=-1)
    for tensor in core.output if not tiled else ():
        step.input_map[tensor.name.upper()] = tensor.name
    for tensor in preprocess.output[0 if tiled else 1 :]:
        step.input_map[tensor.name] = tensor.name.lower()
    for tensor in options:
        step.input_map[tensor.name] = tensor.name
    for tensor in postprocess.output:
        step.output_map[tensor.name] = tensor.name
    return config


# --------------------------------------------------------------------------- the pipeline


def configs(spec: specs.PipelineSpec) -> PipelineConfigs:
    """Every production config of the pipeline (``ConfigError``/``RecipeError`` naming what cannot be generated)."""
    layout = spec.layout
    # The profiles of a core with dynamic dims come from its preprocess (and a stage's from its postprocess's task),
    # whose configs need the core's tensors first: the cores are made without profiles, then again with them.
    stages = {role: core_config(layout.stage_name(role), stage, spec.max_batch_size, ()) for role, stage in spec.stages.items()}
    core = core_config(layout.model_name("core"), spec.core, spec.max_batch_size, ())
    postprocess, side = postprocess_config(spec, core, stages)
    preprocess = preprocess_config(spec, core, side)
    if engine_profiles.has_dynamic_dims(core):
        core = core_config(core.name, spec.core, spec.max_batch_size, preprocessors.engine_profiles(preprocess))
    if spec.tiling is not None:
        tiled_queue(core, preprocess, int(spec.tiling["max_tiles"]))
    cpu_preprocess: dict[str, ModelConfig] = {}
    if pixel_variants.enabled(spec.preprocess, f"{spec.path} [preprocess]"):
        cpu_preprocess = pixel_variants.variants(preprocess)
        preprocess = pixel_variants.gpu_config(preprocess, spec.preprocess, f"{spec.path} [preprocess]")
    for role, stage in list(stages.items()):
        if engine_profiles.has_dynamic_dims(stage):
            profiles = spec.task.engine_profiles(postprocess, role)
            stages[role] = core_config(stage.name, spec.stages[role], spec.max_batch_size, profiles)
    return PipelineConfigs(ensemble_config(spec, preprocess, core, postprocess), preprocess, core, postprocess, stages, cpu_preprocess)


def _about(spec: specs.PipelineSpec, gpu_pixels: bool) -> dict[str, list[str]]:
    """The comment under each config's first line: what the model is."""
    layout = spec.layout
    preprocess = ["Decode and validate each upload, then hand the core its input (batched across requests)."]
    return {
        spec.name: [f"The ensemble clients call: {spec.recipe.description or spec.task.name}."],
        layout.model_name("preprocess"): pixel_variants.about_gpu() if gpu_pixels else preprocess,
        layout.model_name("core"): [
            "The production core: a TensorRT plan on the GPU, built on the node (`python -m builders build-engine`) from the "
            "precision the ladder chose. Without a GPU, `--model-config-name=cpu` serves configs/cpu.pbtxt (the same tensors).",
            *(["Tiled: the postprocess sends it each photo's views by BLS, in batches of its max_batch_size."] if spec.tiling else []),
        ],
        layout.model_name("postprocess"): [f"The {spec.task.name} task's answers from the core's outputs."],
        **{layout.stage_name(role): [f"The second stage '{role}' the postprocess calls by BLS: a TensorRT plan."] for role in spec.stages},
    }


def _comments(lines: Sequence[str]) -> list[str]:
    return [row for line in lines for row in render.wrapped_comment(line)]


def entry_point(pipeline: str, role: str) -> str:
    """A Python model's generated ``1/model.py``: it runs the serving library's model of its role."""
    module = ENTRY_POINTS[role]
    return (
        f"{header_line(pipeline)}\n"
        f'"""Triton entry point: the {role} model every pipeline shares (vision_serving.triton_models.{module})."""\n\n'
        f"from vision_serving.triton_models.{module} import TritonPythonModel  # noqa: F401\n"
    )


def files(spec: specs.PipelineSpec) -> dict[Path, str]:
    """Every generated file of the pipeline's folder, with its text."""
    made = configs(spec)
    layout = spec.layout
    pipeline = spec.name
    about = _about(spec, bool(made.preprocess_variants))
    written: dict[Path, str] = {}
    for name, config in made.by_model().items():
        written[layout.repository / name / "config.pbtxt"] = render.render(config, [header_line(pipeline), *_comments(about[name])])
    cores = {layout.model_name("core"): (made.core, spec.core.cpu, "[core.cpu]")}
    cores |= {stage.name: (stage, spec.stages[role].cpu, f"[stages.{role}.cpu]") for role, stage in made.stages.items()}
    for name, (core, settings, table) in cores.items():
        for variant, config in variants.variants(core, settings).items():
            lines = [header_line(pipeline), *_comments(variants.header(variant, settings, table))]
            written[layout.repository / name / "configs" / f"{variant}.pbtxt"] = render.render(config, lines)
    for name, config in pixel_variants.model_files(made.preprocess_variants).items():
        lines = [header_line(pipeline), *_comments(pixel_variants.header(name.removesuffix(".pbtxt")))]
        written[layout.repository / made.preprocess.name / "configs" / name] = render.render(config, lines)
    preprocess_role = "gpu_preprocess" if made.preprocess_variants else "preprocess"
    python_models = {made.preprocess.name: preprocess_role, made.postprocess.name: "postprocess", **dict.fromkeys(cores, "core")}
    for name, role in python_models.items():
        written[layout.repository / name / "1" / "model.py"] = entry_point(pipeline, role)
    written[layout.ensemble_dir / "1" / "README"] = (
        f"{header_line(pipeline)}\nAn ensemble holds no files; Triton needs its version folder.\n"
    )
    return written
