"""A core's CPU config variants (``configs/<variant>.pbtxt``, one per :func:`vision_serving.cpu_runtimes.config_variants`,
``tritonserver --model-config-name``), generated from its production config and the CPU runtimes' registry.

Each variant has the core's name, ``max_batch_size``, inputs, outputs and ``dynamic_batching`` (its queue policy), with
the variant's own backend, parameters, ``KIND_CPU`` instances, batcher delay and model file from the runtime registry,
and the production config's warm-up samples where the variant keeps them (``cpu``). Where a core was measured or chose
otherwise (its CPU queue size, a delay, an instance count, a variant's precision), its spec's ``cpu`` table says so
(:class:`CoreSettings`: ``[core.cpu]``, ``[stages.<role>.cpu]``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vision_serving import cpu_runtimes
from vision_serving.model_config import ConfigError, ModelConfig
from vision_serving.protos import model_config_pb2

KIND_CPU = model_config_pb2.ModelInstanceGroup.KIND_CPU
SETTINGS_TABLE = "cpu"  # a core's table in the spec: [core.cpu], [stages.<role>.cpu]


@dataclass(frozen=True)
class WarmupSample:
    """A warm-up sample of zeros: ``inputs`` maps an input name ("" for the model's only input) to its dims."""

    name: str
    batch_size: int
    inputs: Mapping[str, tuple[int, ...]]


@dataclass(frozen=True)
class VariantSettings:
    """One variant's settings in a core's ``cpu`` table (its ``<variant>`` table), over the registry's."""

    like: str | None = None  # another variant's backend, parameters, instances, delay and model file
    about: str | None = None  # what it is, when not what the registry says
    parameters: Mapping[str, str] = field(default_factory=dict)  # added to (or replacing) the registry's
    default_model_filename: str | None = None
    max_queue_delay_microseconds: int | None = None
    instances: int | None = None
    warmup: tuple[WarmupSample, ...] | None = None  # its own samples instead of config.pbtxt's ([] : none)

    def summary(self) -> list[str]:
        said = [f"as {self.like}"] if self.like else []
        said += [f"{key} {json.dumps(value)}" for key, value in self.parameters.items()]
        if self.default_model_filename is not None:
            said.append(f"default_model_filename {json.dumps(self.default_model_filename)}")
        if self.max_queue_delay_microseconds is not None:
            said.append(f"max_queue_delay_microseconds {self.max_queue_delay_microseconds}")
        if self.instances is not None:
            said.append(f"instances {self.instances}")
        if self.warmup is not None:
            said.append(f"its own warm-up ({', '.join(sample.name for sample in self.warmup) or 'none'})")
        return said


@dataclass(frozen=True)
class CoreSettings:
    """A core's ``cpu`` table in its spec: what its CPU variants set differently from the registry's defaults and
    from ``config.pbtxt`` (top-level keys: every variant; a ``[<variant>]`` table: that one). Absent: no file."""

    max_queue_size: int | None = None  # the CPU cores' queue, measured (else config.pbtxt's)
    max_queue_delay_microseconds: int | None = None
    instances: int | None = None
    variants: Mapping[str, VariantSettings] = field(default_factory=dict)
    present: bool = False  # read from a file

    TOP_LEVEL = ("max_queue_size", "max_queue_delay_microseconds", "instances")
    PER_VARIANT = ("like", "about", "parameters", "default_model_filename", "max_queue_delay_microseconds", "instances", "warmup")

    @classmethod
    def parse(cls, data: Mapping[str, Any], where: str = SETTINGS_TABLE) -> CoreSettings:
        registry = {variant.name for variant in cpu_runtimes.config_variants()}
        top: dict[str, int | None] = dict.fromkeys(cls.TOP_LEVEL)
        variants: dict[str, VariantSettings] = {}
        for key, value in data.items():
            if key in cls.TOP_LEVEL:
                top[key] = _integer(value, f"{where}: {key}", minimum=0 if key == "max_queue_delay_microseconds" else 1)
            elif key in registry and isinstance(value, dict):
                variants[key] = _variant_settings(value, f"{where}: [{key}]", registry - {key})
            else:
                raise ConfigError(
                    f"{where}: unknown key {key!r}: expected {', '.join(cls.TOP_LEVEL)} or a table named after a variant "
                    f"({', '.join(sorted(registry))})"
                )
        return cls(top["max_queue_size"], top["max_queue_delay_microseconds"], top["instances"], variants, present=True)

    def summary(self) -> list[str]:
        return [f"{key} {getattr(self, key)}" for key in self.TOP_LEVEL if getattr(self, key) is not None]


def _integer(value: object, where: str, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{where} must be an integer >= {minimum}, got {value!r}")
    return value


def _string(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a string, got {value!r}")
    return value


def _variant_settings(data: Mapping[str, Any], where: str, others: set[str]) -> VariantSettings:
    unknown = sorted(set(data) - set(CoreSettings.PER_VARIANT))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (expected {', '.join(CoreSettings.PER_VARIANT)})")
    like = data.get("like")
    if like is not None and like not in others:
        raise ConfigError(f"{where}: like {like!r} is not another variant ({', '.join(sorted(others))})")
    parameters = data.get("parameters", {})
    if not isinstance(parameters, dict):
        raise ConfigError(f"{where}: parameters must be a table of strings")
    warmup = data.get("warmup")
    return VariantSettings(
        like=like,
        about=None if data.get("about") is None else _string(data["about"], f"{where}: about"),
        parameters={key: _string(value, f"{where}: parameters.{key}") for key, value in parameters.items()},
        default_model_filename=None
        if data.get("default_model_filename") is None
        else _string(data["default_model_filename"], f"{where}: default_model_filename"),
        max_queue_delay_microseconds=None
        if data.get("max_queue_delay_microseconds") is None
        else _integer(data["max_queue_delay_microseconds"], f"{where}: max_queue_delay_microseconds", 0),
        instances=None if data.get("instances") is None else _integer(data["instances"], f"{where}: instances", 1),
        warmup=None if warmup is None else tuple(_warmup_sample(item, f"{where}: warmup") for item in _list(warmup, f"{where}: warmup")),
    )


def _list(value: object, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(f"{where} must be a list")
    return value


def _dims(value: object, where: str) -> tuple[int, ...]:
    items = _list(value, where)
    return tuple(_integer(item, where, 1) for item in items)


def _warmup_sample(item: object, where: str) -> WarmupSample:
    if not isinstance(item, dict) or set(item) - {"name", "batch_size", "dims", "inputs"} or ("dims" in item) == ("inputs" in item):
        raise ConfigError(
            f"{where}: each sample is {{ name, batch_size, dims }} (the only input) or {{ name, batch_size, inputs = {{ NAME = dims }} }}"
        )
    name = _string(item.get("name"), f"{where}: name")
    batch_size = _integer(item.get("batch_size"), f"{where} '{name}': batch_size", 1)
    if "dims" in item:
        inputs = {"": _dims(item["dims"], f"{where} '{name}': dims")}
    else:
        if not isinstance(item["inputs"], dict):
            raise ConfigError(f"{where} '{name}': inputs must be a table of input name = dims")
        inputs = {key: _dims(dims, f"{where} '{name}': inputs.{key}") for key, dims in item["inputs"].items()}
    return WarmupSample(name, batch_size, inputs)


def _registry() -> dict[str, cpu_runtimes.ConfigVariant]:
    return {variant.name: variant for variant in cpu_runtimes.config_variants()}


def synced_warmup(config: ModelConfig) -> ModelConfig:
    """``config`` with each zero/random warm-up sample's dtype the input's, and its dims the input's where those are
    fixed (-1: the sample's own). A sample of another rank, or read from a file, is left as it is."""
    synced = ModelConfig()
    synced.CopyFrom(config)
    inputs = {tensor.name: tensor for tensor in config.input}
    for sample in synced.model_warmup:
        for key in sample.inputs:
            data, tensor = sample.inputs[key], inputs.get(key)
            if (
                tensor is None
                or data.WhichOneof("input_data_type") not in ("zero_data", "random_data")
                or len(data.dims) != len(tensor.dims)
            ):
                continue
            data.data_type = tensor.data_type
            data.dims[:] = [given if fixed == -1 else fixed for given, fixed in zip(data.dims, tensor.dims)]
    return synced


def _warmups(samples: Iterable[WarmupSample], core: ModelConfig, where: str) -> list[model_config_pb2.ModelWarmup]:
    inputs = {tensor.name: tensor for tensor in core.input}
    made = []
    for sample in samples:
        warmup = model_config_pb2.ModelWarmup(name=sample.name, batch_size=sample.batch_size)
        for name, dims in sample.inputs.items():
            if name == "" and len(inputs) != 1:
                raise ConfigError(
                    f"{where}: warm-up '{sample.name}' gives dims, but the model has {len(inputs)} inputs: use inputs = {{ NAME = dims }}"
                )
            tensor = next(iter(inputs.values())) if name == "" else inputs.get(name)
            if tensor is None:
                raise ConfigError(f"{where}: warm-up '{sample.name}': '{name}' is not an input of the model ({', '.join(inputs)})")
            data = warmup.inputs[tensor.name]
            data.data_type = tensor.data_type
            data.dims.extend(dims)
            data.zero_data = True
        made.append(warmup)
    return made


def variant(core: ModelConfig, name: str, settings: CoreSettings | None = None) -> ModelConfig:
    """The ``configs/<name>.pbtxt`` of ``core`` (its ``config.pbtxt``): see the module docstring."""
    settings = settings or CoreSettings()
    registry = _registry()
    own = settings.variants.get(name, VariantSettings())
    base = registry[own.like or name]
    core = synced_warmup(core)
    config = ModelConfig(name=core.name, max_batch_size=core.max_batch_size, backend=base.backend)
    if core.HasField("version_policy"):
        config.version_policy.CopyFrom(core.version_policy)
    config.input.extend(core.input)
    config.output.extend(core.output)
    filename = own.default_model_filename if own.default_model_filename is not None else base.default_model_filename
    if filename:
        config.default_model_filename = filename
    for key, value in {**base.parameters, **own.parameters}.items():
        config.parameters[key].string_value = value
    if core.HasField("dynamic_batching"):
        config.dynamic_batching.CopyFrom(core.dynamic_batching)
        config.dynamic_batching.max_queue_delay_microseconds = _first(
            own.max_queue_delay_microseconds, settings.max_queue_delay_microseconds, base.max_queue_delay_microseconds
        )
        if settings.max_queue_size is not None:
            config.dynamic_batching.default_queue_policy.max_queue_size = settings.max_queue_size
    config.instance_group.add(kind=KIND_CPU, count=_first(own.instances, settings.instances, base.instances))
    if own.warmup is not None:
        config.model_warmup.extend(_warmups(own.warmup, core, f"{core.name}: [{SETTINGS_TABLE}.{name}]"))
    elif base.warmup:
        config.model_warmup.extend(core.model_warmup)
    return synced_warmup(config)


def _first(*values: int | None) -> int:
    return next(value for value in values if value is not None)


def variants(core: ModelConfig, settings: CoreSettings | None = None) -> dict[str, ModelConfig]:
    """Every ``configs/<name>.pbtxt`` of ``core`` (its ``config.pbtxt``), by variant name."""
    return {name: variant(core, name, settings) for name in _registry()}


def header(name: str, settings: CoreSettings | None = None, table: str = "[core.cpu]") -> list[str]:
    """What a generated variant's header says after its first line: what it is and why (``table``: where its
    core's spec says what it sets differently)."""
    settings = settings or CoreSettings()
    registry = _registry()
    own = settings.variants.get(name, VariantSettings())
    base = registry[own.like or name]
    about = own.about or (f"as {own.like}: {base.about}" if own.like else base.about)
    lines = [
        f"{name} (`tritonserver --model-config-name={name}`): {about}. The same name, tensors and max_batch_size as "
        "config.pbtxt, so the ensemble never changes; its runtime's settings from vision_serving/cpu_runtimes.py.",
    ]
    applied = settings.summary() + own.summary()
    if applied:
        lines.append(f"From pipeline.toml {table}: {', '.join(applied)}.")
    return [*lines, *base.notes]
