"""The TensorRT optimization profiles of a pipeline's models, from the code that makes their inputs, and what a
TensorRT config must say about them.

A model whose input has dynamic dims besides the batch (the text detector: each photo's own size; the text
recognizer: crops padded to a width bucket) gets its profiles from the one place that bounds what it is sent:
the core's from its pipeline's preprocessor (:func:`vision_serving.preprocessors.engine_profiles`), a second
stage's from the task whose postprocess calls it (:meth:`vision_serving.tasks.base.Task.engine_profiles`).
``build-engine`` builds those profiles, ``vision_serving.consistency`` holds the configs to them
(:func:`check_config`), and the capacity planner sizes their memory from them.

In Triton's TensorRT backend an instance keeps one execution context per profile its instance group lists
(``profile: [...]``; none listed: profile 0 alone) and runs each batch on the context whose profile fits it
with the nearest ``opt`` shape. The scheduler does not route by shape, so every instance group lists every
profile. With the backend's default allocation (``STATIC``) each context reserves the activation memory of
the largest profile; ``execution_context_allocation_strategy: ON_PROFILE_CHANGE`` lets each reserve its own
profile's only, so a config with several profiles sets it. Warm-up runs each profile once at load, at its
``opt`` shape and batch and at its ``max`` shape and the largest batch: the contexts' memory is reserved and
every shape a request can have has run before the first request.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import layout, model_config, preprocessors
from .model_config import ConfigError, ModelConfig
from .tasks import registry
from .tasks.base import EngineProfile

CORE = "core"
ALLOCATION_STRATEGY = "execution_context_allocation_strategy"
ON_PROFILE_CHANGE = "ON_PROFILE_CHANGE"

Sample = tuple[int, tuple[int, ...]]  # (batch, per-image dims) of a warm-up sample


def for_model(pipeline: layout.Pipeline, role: str) -> tuple[EngineProfile, ...]:
    """The profiles of the pipeline's core (``role`` "core") or second stage ``role``; () when its input dims are
    fixed. ``ConfigError`` when the configs that bound it are unreadable."""
    if role == CORE:
        return preprocessors.engine_profiles(model_config.load_config(pipeline.model_dir("preprocess")))
    postprocess = model_config.load_config(pipeline.model_dir("postprocess"))
    return registry.for_config(postprocess).engine_profiles(postprocess, role)


def role_of(pipeline: layout.Pipeline, model_name: str) -> str | None:
    """ "core" for the pipeline's core, the role of a second stage (``<pipeline>_core_<role>``), else None."""
    core = pipeline.model_name(CORE)
    if model_name == core:
        return CORE
    return model_name[len(core) + 1 :] if model_name.startswith(core + "_") else None


def is_tensorrt(config: ModelConfig) -> bool:
    return config.platform == "tensorrt_plan" or config.backend == "tensorrt"


def has_dynamic_dims(config: ModelConfig) -> bool:
    return any(int(d) < 0 for tensor in config.input for d in tensor.dims)


def warmup_samples(config: ModelConfig) -> list[Sample]:
    """Each ``model_warmup`` entry's batch and per-image dims of the model's one input."""
    samples = []
    for warmup in config.model_warmup:
        for name, value in warmup.inputs.items():
            if name == config.input[0].name:
                samples.append((int(warmup.batch_size), tuple(int(d) for d in value.dims)))
    return samples


def required_warmups(config: ModelConfig, profiles: Sequence[EngineProfile]) -> list[Sample]:
    """The warm-up samples a config of these profiles needs: each profile at (opt batch, opt) and (max batch, max)."""
    samples: list[Sample] = []
    for profile in profiles:
        for sample in ((profile.opt_batch, profile.opt), (int(config.max_batch_size), profile.max)):
            if sample not in samples:
                samples.append(sample)
    return samples


def check_config(config: ModelConfig, profiles: Sequence[EngineProfile]) -> list[str]:
    """Problems of a TensorRT config against its model's profiles (nothing to say of other backends)."""
    if not is_tensorrt(config):
        return []
    where = f"model '{config.name}'"
    if not has_dynamic_dims(config):
        return [f"{where}: its input dims are fixed, yet its input's code gives it TensorRT profiles"] if profiles else []
    if not profiles:
        return [f"{where}: its input dims are dynamic and nothing bounds them (no preprocessor or task gives it TensorRT profiles)"]
    if len(config.input) != 1:
        return [f"{where}: a model with dynamic dims takes one input here, it has {len(config.input)}"]
    problems = []
    dims = [int(d) for d in config.input[0].dims]
    for profile in profiles:
        fixed = len(profile.max) == len(dims) and all(d < 0 or lo == hi == d for d, lo, hi in zip(dims, profile.min, profile.max))
        if not fixed:
            problems.append(
                f"{where}: profile '{profile.name}' {list(profile.min)}..{list(profile.max)} does not fit its input dims {dims}"
            )
        if profile.opt_batch > config.max_batch_size:
            problems.append(
                f"{where}: profile '{profile.name}' is tuned for batch {profile.opt_batch}, past max_batch_size {config.max_batch_size}"
            )
    expected = [str(index) for index in range(len(profiles))]
    names = ", ".join(f"{index} {profile.name}" for index, profile in enumerate(profiles))
    if not config.instance_group:
        problems.append(f"{where}: no instance_group lists its profiles [{', '.join(expected)}] ({names})")
    for index, group in enumerate(config.instance_group):
        listed = sorted(group.profile, key=lambda item: int(item) if item.isdigit() else -1)
        if listed != expected:
            problems.append(
                f"{where}: instance_group {index} lists profiles {list(group.profile)}, not every one of [{', '.join(expected)}] ({names}): "
                "the scheduler does not route by shape, so an instance without the fitting profile fails the request"
            )
    strategy = model_config.parameter(config, ALLOCATION_STRATEGY, "STATIC")
    if len(profiles) > 1 and strategy != ON_PROFILE_CHANGE:
        problems.append(
            f"{where}: {len(profiles)} profiles share each instance, and {ALLOCATION_STRATEGY} is {strategy}: each context "
            f"would reserve the largest profile's activations; set it to {ON_PROFILE_CHANGE}"
        )
    samples = warmup_samples(config)
    for batch, sample in samples:
        if not 1 <= batch <= config.max_batch_size or not any(profile.fits(sample) for profile in profiles):
            problems.append(f"{where}: warm-up at batch {batch}, {list(sample)} fits no profile: the model would fail to load")
    for batch, sample in required_warmups(config, profiles):
        if (batch, sample) not in samples:
            owner = next(profile.name for profile in profiles if profile.fits(sample))
            problems.append(f"{where}: no warm-up of profile '{owner}' at batch {batch}, {list(sample)}")
    return problems


def check_pipeline(pipeline: layout.Pipeline, configs: dict[str, dict[str, ModelConfig]]) -> list[str]:
    """Every TensorRT config of the pipeline's core and second stages (``configs``: model name -> variant -> config)
    against its profiles."""
    problems = []
    for name, variants in configs.items():
        role = role_of(pipeline, name)
        tensorrt = [config for config in variants.values() if is_tensorrt(config)]
        if role is None or not tensorrt:
            continue
        try:
            profiles = for_model(pipeline, role)
        except (ConfigError, ValueError) as error:
            problems.append(f"model '{name}': its TensorRT profiles: {error}")
            continue
        for config in tensorrt:
            problems += check_config(config, profiles)
    return problems
