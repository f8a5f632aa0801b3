"""The preprocess of a pipeline whose spec puts its pixels on the GPU (``[preprocess] pixel_device = "gpu"``:
:mod:`vision_serving.gpu_pixels`), generated as a core's variants are: ``config.pbtxt`` is the production (GPU)
model, each ``configs/<variant>.pbtxt`` the CPU one a server started with ``--model-config-name=<variant>`` loads.

- **The GPU preprocess** (``config.pbtxt``): the served preprocess's tensors, batching, limits and resize, plus
  ``pixel_device`` ``gpu`` and the mode's own parameters (:data:`vision_serving.gpu_pixels.settings.GPU_DEFAULTS`,
  the spec's where it says), one ``KIND_GPU`` instance group of ``gpu_instances`` (the spec's, else
  :data:`~vision_serving.gpu_pixels.settings.GPU_INSTANCES`), and no CPU sizing (``cpu_share``, ``max_instances``,
  ``decode_threads``: its CPU work per image is the checks alone, and the sizing rewrites KIND_CPU groups only).
  Its ``1/model.py`` runs :mod:`vision_serving.triton_models.gpu_preprocess`.
- **The CPU variants**: the served CPU preprocess itself, as without the mode, under every variant name a core has
  (:func:`vision_serving.cpu_runtimes.config_variants`), so that every CPU server of the repository serves it.

A preprocess of its own (``preprocessor``, e.g. the text reader's) is refused in one line: the GPU path is the
image-to-tensor resize's.
"""

from __future__ import annotations

from collections.abc import Mapping

from builders import spec as specs
from vision_serving import cpu_runtimes, cpu_sizing, preprocessors
from vision_serving.gpu_pixels import settings
from vision_serving.model_config import ConfigError, ModelConfig, model_config_pb2

# The spec's keys of the mode: never parameters of the CPU preprocess; gpu_instances is the GPU group's count.
GPU_KEYS = (settings.DEVICE_PARAMETER, *settings.GPU_DEFAULTS, settings.GPU_INSTANCES_KEY)


def enabled(step: specs.StepSpec, where: str) -> bool:
    """Whether the spec's ``[preprocess]`` puts the pixels on the GPU (``ConfigError``: a value that is not a device, or
    a GPU key without the mode)."""
    device = step.parameters.get(settings.DEVICE_PARAMETER, "cpu")
    if device not in settings.DEVICES:
        raise ConfigError(f"{where}: {settings.DEVICE_PARAMETER} {device!r} is not one of {', '.join(settings.DEVICES)}")
    stray = sorted(key for key in GPU_KEYS if key in step.parameters and key != settings.DEVICE_PARAMETER)
    if device == "cpu" and stray:
        raise ConfigError(f'{where}: {", ".join(stray)} apply to {settings.DEVICE_PARAMETER} = "gpu" only')
    return device == "gpu"


def cpu_parameters(step: specs.StepSpec) -> dict[str, str]:
    """The spec's parameters of the CPU preprocess (the mode's keys left out)."""
    return {key: value for key, value in step.parameters.items() if key not in GPU_KEYS}


def _instances(step: specs.StepSpec, where: str) -> int:
    text = step.parameters.get(settings.GPU_INSTANCES_KEY, str(settings.GPU_INSTANCES))
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"{where}: {settings.GPU_INSTANCES_KEY} must be an integer >= 1, got {text!r}")
    return int(text)


def gpu_config(cpu: ModelConfig, step: specs.StepSpec, where: str) -> ModelConfig:
    """The GPU preprocess from the CPU one (see the module docstring)."""
    name = preprocessors.kind(cpu)
    if name != preprocessors.IMAGE_TO_TENSOR:
        raise ConfigError(f'{where}: {settings.DEVICE_PARAMETER} = "gpu" takes the image-to-tensor resize, not preprocessor {name!r}')
    config = ModelConfig()
    config.CopyFrom(cpu)
    for key in cpu_sizing.PARAMETERS:
        if key in config.parameters:
            del config.parameters[key]
    mine = {settings.DEVICE_PARAMETER: "gpu", **settings.GPU_DEFAULTS}
    mine |= {key: value for key, value in step.parameters.items() if key in settings.GPU_DEFAULTS}
    for key, value in mine.items():
        config.parameters[key].string_value = value
    settings.GpuSettings.from_config(config)  # its values checked here, not at the first GPU start
    del config.instance_group[:]
    config.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.KIND_GPU, count=_instances(step, where))
    return config


def variants(cpu: ModelConfig) -> dict[str, ModelConfig]:
    """The CPU preprocess under every variant name of the cores (``configs/<name>.pbtxt``)."""
    return {variant.name: cpu for variant in cpu_runtimes.config_variants()}


def about_gpu() -> list[str]:
    """The GPU preprocess's header comment."""
    return [
        "Check each upload on the CPU, then decode, resize and lay out its JPEGs on the GPU with DALI (vision_serving/"
        "gpu_pixels), handing the core its input in GPU memory; other formats take the CPU decode. Without a GPU, "
        "`--model-config-name=cpu` serves configs/cpu.pbtxt, the CPU preprocess (the same tensors).",
    ]


def header(variant: str) -> list[str]:
    """A CPU variant's header comment."""
    return [
        f'{variant} (`tritonserver --model-config-name={variant}`): the CPU preprocess, as without pixel_device = "gpu" '
        "(the production config.pbtxt puts the pixels on the GPU). The same name, tensors and max_batch_size as config.pbtxt.",
    ]


def model_files(by_variant: Mapping[str, ModelConfig]) -> dict[str, ModelConfig]:
    """``configs/<variant>.pbtxt`` -> its config."""
    return {f"{variant}.pbtxt": config for variant, config in by_variant.items()}
