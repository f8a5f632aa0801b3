"""A core's CPU config variants and the dims that mirror its tensors, generated from one source.

A core's ``config.pbtxt`` (the production TensorRT config; a second stage's too) is where its name, batch size,
inputs, outputs, queue policy and warm-up samples are written, once. From it, ``python -m builders configs``
(:mod:`builders.model_configs`) writes:

- ``configs/<variant>.pbtxt``, one per :func:`vision_serving.cpu_runtimes.config_variants` (``--model-config-name``):
  ``config.pbtxt``'s name, ``max_batch_size``, inputs, outputs and ``dynamic_batching`` (its queue policy), with the
  variant's own backend, parameters, ``KIND_CPU`` instances, batcher delay and model file from the runtime registry,
  and ``config.pbtxt``'s warm-up samples where the variant keeps them (``cpu``); where a core was measured or chose
  otherwise (its CPU queue size, a delay, an instance count, a variant's precision), the core's
  ``configs/variants.toml`` says so (:class:`CoreSettings`). Built with Triton's ``ModelConfig`` protobuf and
  written with ``google.protobuf.text_format`` (:func:`render`) under a header saying where it comes from.
- the dtype and dims of every tensor the ensemble hands to or takes from the core (``ensemble_scheduling``'s
  ``input_map``/``output_map``: the preprocess's pixels output, the postprocess's inputs; :func:`mirrors`),
  edited in place in those hand-written configs, their comments kept;
- in ``config.pbtxt`` itself, each zero/random warm-up sample's dtype and its dims where the input's are fixed.

So a new input size or class count is an edit of the core's ``config.pbtxt`` dims and one command.
``python -m vision_serving.consistency`` fails when a file differs from what generation gives (:func:`check`),
naming the file and the field.
"""

from __future__ import annotations

import json
import re
import textwrap
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from . import cpu_runtimes, layout, model_config
from .model_config import ConfigError, ModelConfig
from .protos import model_config_pb2

SETTINGS_FILE = "variants.toml"  # in a core's configs/ folder
COMMAND = "python -m builders configs"
KIND_CPU = model_config_pb2.ModelInstanceGroup.KIND_CPU
WIDTH = 118  # header comment lines; an element of a repeated field longer than this is written as a block


def command(pipeline: str) -> str:
    return f"{COMMAND} --pipeline {pipeline}"


# --------------------------------------------------------------------------- a core's own settings


@dataclass(frozen=True)
class WarmupSample:
    """A warm-up sample of zeros: ``inputs`` maps an input name ("" for the model's only input) to its dims."""

    name: str
    batch_size: int
    inputs: Mapping[str, tuple[int, ...]]


@dataclass(frozen=True)
class VariantSettings:
    """One variant's settings in ``configs/variants.toml`` (``[<variant>]``), over the registry's."""

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
    """A core's ``configs/variants.toml``: what its CPU variants set differently from the registry's defaults and
    from ``config.pbtxt`` (top-level keys: every variant; a ``[<variant>]`` table: that one). Absent: no file."""

    max_queue_size: int | None = None  # the CPU cores' queue, measured (else config.pbtxt's)
    max_queue_delay_microseconds: int | None = None
    instances: int | None = None
    variants: Mapping[str, VariantSettings] = field(default_factory=dict)
    present: bool = False  # read from a file

    TOP_LEVEL = ("max_queue_size", "max_queue_delay_microseconds", "instances")
    PER_VARIANT = ("like", "about", "parameters", "default_model_filename", "max_queue_delay_microseconds", "instances", "warmup")

    @classmethod
    def load(cls, core_dir: Path) -> CoreSettings:
        path = core_dir / "configs" / SETTINGS_FILE
        if not path.is_file():
            return cls()
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"{path}: {error}") from None
        return cls.parse(data, f"{core_dir.name}/configs/{SETTINGS_FILE}")

    @classmethod
    def parse(cls, data: Mapping[str, Any], where: str = SETTINGS_FILE) -> CoreSettings:
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


# --------------------------------------------------------------------------- generation


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
        config.model_warmup.extend(_warmups(own.warmup, core, f"{core.name}/configs/{SETTINGS_FILE} [{name}]"))
    elif base.warmup:
        config.model_warmup.extend(core.model_warmup)
    return synced_warmup(config)


def _first(*values: int | None) -> int:
    return next(value for value in values if value is not None)


def variants(core: ModelConfig, settings: CoreSettings | None = None) -> dict[str, ModelConfig]:
    """Every ``configs/<name>.pbtxt`` of ``core`` (its ``config.pbtxt``), by variant name."""
    return {name: variant(core, name, settings) for name in _registry()}


def header(pipeline: str, name: str, settings: CoreSettings | None = None) -> list[str]:
    """The comment lines a generated variant starts with: where it comes from, what it is, why."""
    settings = settings or CoreSettings()
    registry = _registry()
    own = settings.variants.get(name, VariantSettings())
    base = registry[own.like or name]
    about = own.about or (f"as {own.like}: {base.about}" if own.like else base.about)
    lines = [
        f"Generated by `{command(pipeline)}`: edit config.pbtxt, then run it.",
        "Also from vision_serving/cpu_runtimes.py" + (f" and configs/{SETTINGS_FILE}." if settings.present else "."),
        f"{name} (`tritonserver --model-config-name={name}`): {about}. The same name, tensors and max_batch_size as "
        "config.pbtxt, so the ensemble never changes.",
    ]
    applied = settings.summary() + own.summary()
    if applied:
        lines.append(f"From configs/{SETTINGS_FILE}: {', '.join(applied)}.")
    lines += base.notes
    wrap = textwrap.TextWrapper(WIDTH, initial_indent="# ", subsequent_indent="# ", break_long_words=False, break_on_hyphens=False)
    return [row for line in lines for row in wrap.wrap(line)]


def variant_files(core: ModelConfig, pipeline: str, settings: CoreSettings | None = None) -> dict[str, str]:
    """Each generated variant's text by its path in the core's folder (``configs/<name>.pbtxt``)."""
    return {f"configs/{name}.pbtxt": render(config, header(pipeline, name, settings)) for name, config in variants(core, settings).items()}


# --------------------------------------------------------------------------- text: written with text_format

# The order a reader looks for a model's fields in; any other field follows, by field number.
FIELD_ORDER = (
    "name",
    "platform",
    "backend",
    "default_model_filename",
    "max_batch_size",
    "version_policy",
    "input",
    "output",
    "parameters",
    "dynamic_batching",
    "instance_group",
    "model_warmup",
)


def _is_map(descriptor: FieldDescriptor) -> bool:
    return descriptor.message_type is not None and descriptor.message_type.GetOptions().map_entry


def _is_repeated(descriptor: FieldDescriptor) -> bool:
    return descriptor.label == FieldDescriptor.LABEL_REPEATED


def _part(message: Message, descriptor: FieldDescriptor, value: Any, key: Any = None) -> str:
    """One field (one map entry, one element of a repeated message field) of ``message`` in text format, on one line."""
    part = type(message)()
    target = getattr(part, descriptor.name)
    if _is_map(descriptor):
        entry_value = descriptor.message_type.fields_by_name["value"]
        if entry_value.message_type is not None:
            target[key].CopyFrom(value[key])
        else:
            target[key] = value[key]
    elif descriptor.message_type is not None and _is_repeated(descriptor):
        target.add().CopyFrom(value)
    elif descriptor.message_type is not None:
        target.CopyFrom(value)
    elif _is_repeated(descriptor):
        target.extend(value)
    else:
        setattr(part, descriptor.name, value)
    return text_format.MessageToString(part, as_one_line=True, use_short_repeated_primitives=True).strip()


def _fields(message: Message) -> list[tuple[FieldDescriptor, Any]]:
    order = {name: index for index, name in enumerate(FIELD_ORDER)}
    return sorted(message.ListFields(), key=lambda item: (order.get(item[0].name, len(order)), item[0].number))


def _block(message: Message, indent: int) -> list[str]:
    """The fields of ``message``, one a line at ``indent``: a sub-message as a block, a map entry or an element of
    a repeated message field on one line when it fits."""
    pad = " " * indent
    lines = []
    for descriptor, value in _fields(message):
        if descriptor.message_type is None:
            lines.append(pad + _part(message, descriptor, value))
        elif _is_map(descriptor):
            lines += [pad + _part(message, descriptor, value, key) for key in sorted(value)]
        elif _is_repeated(descriptor):
            for item in value:
                line = _part(message, descriptor, item)
                lines += [pad + line] if len(pad + line) <= WIDTH else [f"{pad}{descriptor.name} {{", *_block(item, indent + 2), pad + "}"]
        else:
            lines += [f"{pad}{descriptor.name} {{", *_block(value, indent + 2), pad + "}"]
    return lines


def render(config: ModelConfig, header_lines: Sequence[str] = ()) -> str:
    """``config`` as a ``.pbtxt``: the header's comment lines, then each field with ``text_format`` (repeated
    fields in Triton's list form: map entries one a line, tensors, instance groups and warm-up samples as
    blocks). Parsing the text gives ``config`` back (checked)."""
    lines = list(header_lines)
    for descriptor, value in _fields(config):
        if descriptor.message_type is None:
            lines.append(_part(config, descriptor, value))
        elif _is_map(descriptor):
            rows = [_part(config, descriptor, value, key).removeprefix(descriptor.name).strip() for key in sorted(value)]
            lines += [f"{descriptor.name} [", *(f"  {row}," for row in rows[:-1]), f"  {rows[-1]}", "]"]
        elif _is_repeated(descriptor):
            blocks = [["  {", *_block(item, 4), "  }"] for item in value]
            for block in blocks[:-1]:
                block[-1] += ","
            lines += [f"{descriptor.name} [", *(line for block in blocks for line in block), "]"]
        else:
            lines += [f"{descriptor.name} {{", *_block(value, 2), "}"]
    text = "\n".join(lines) + "\n"
    if model_config.parse_config_text(text, f"rendered {config.name}") != config:
        raise AssertionError(f"rendering {config.name} lost a field")  # a bug here, never a user error
    return text


# --------------------------------------------------------------------------- dims mirrored across the ensemble


@dataclass(frozen=True)
class Mirror:
    """A tensor of ``model`` (the ensemble, the preprocess, the postprocess) that the ensemble maps to or from the
    core's ``core_tensor``: it has the core tensor's dtype and dims."""

    model: str
    kind: str  # "input" or "output" of model
    tensor: str
    core_kind: str  # "input" or "output" of the core
    core_tensor: str


def mirrors(ensemble: ModelConfig, core: str) -> list[Mirror]:
    """What ``ensemble``'s steps hand to the core's inputs and take from its outputs (``input_map``/``output_map``)."""
    steps = list(ensemble.ensemble_scheduling.step)
    produced = {tensor: (step.model_name, output) for step in steps for output, tensor in step.output_map.items()}
    ensemble_inputs = {tensor.name for tensor in ensemble.input}
    found = []
    for step in (step for step in steps if step.model_name == core):
        for core_input, tensor in step.input_map.items():
            if tensor in produced and produced[tensor][0] != core:
                found.append(Mirror(produced[tensor][0], "output", produced[tensor][1], "input", core_input))
            elif tensor in ensemble_inputs:
                found.append(Mirror(ensemble.name, "input", tensor, "input", core_input))
        for core_output, tensor in step.output_map.items():
            for other in (other for other in steps if other.model_name != core):
                found += [
                    Mirror(other.model_name, "input", name, "output", core_output)
                    for name, value in other.input_map.items()
                    if value == tensor
                ]
            found += [Mirror(ensemble.name, "output", tensor, "output", core_output) for output in ensemble.output if output.name == tensor]
    return sorted(set(found), key=lambda m: (m.model, m.kind, m.tensor))


def _tensor(config: ModelConfig, kind: str, name: str) -> Any:
    return next((tensor for tensor in (config.input if kind == "input" else config.output) if tensor.name == name), None)


def _signature(tensor: Any) -> str:
    return f"{model_config_pb2.DataType.Name(tensor.data_type)}{[int(d) for d in tensor.dims]}"


# --------------------------------------------------------------------------- in-place edits of hand-written configs

_TOKENS = re.compile(r"""\s+|#[^\n]*|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|[{}\[\]<>:,;]|[^\s{}\[\]<>:,;#"']+""")


@dataclass
class _Node:
    """A value in a text-format file and where it is: a scalar's text, a message's fields, a list's items."""

    start: int
    end: int
    scalar: str | None = None
    fields: list[tuple[str, int, _Node]] | None = None  # (name, where the field's name starts, value)
    items: list[_Node] | None = None


class _Text:
    """Just enough of the text format to find a field's value in a file, to change it and keep the comments."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = [(m.start(), m.group()) for m in _TOKENS.finditer(text) if not m.group().isspace() and not m.group().startswith("#")]
        fields, _ = self._message(0, None)
        self.root = _Node(0, len(text), fields=fields)

    def _message(self, index: int, closing: str | None) -> tuple[list[tuple[str, int, _Node]], int]:
        fields = []
        while index < len(self.tokens) and self.tokens[index][1] != closing:
            start, name = self.tokens[index]
            index += 1
            if self.tokens[index][1] == ":":
                index += 1
            value, index = self._value(index)
            fields.append((name, start, value))
            if index < len(self.tokens) and self.tokens[index][1] in ",;":
                index += 1
        return fields, index

    def _value(self, index: int) -> tuple[_Node, int]:
        start, token = self.tokens[index]
        if token in ("{", "<"):
            fields, end = self._message(index + 1, "}" if token == "{" else ">")
            return _Node(start, self.tokens[end][0] + 1, fields=fields), end + 1
        if token == "[":
            items, index = [], index + 1
            while self.tokens[index][1] != "]":
                item, index = self._value(index)
                items.append(item)
                if self.tokens[index][1] == ",":
                    index += 1
            return _Node(start, self.tokens[index][0] + 1, items=items), index + 1
        end, index = start + len(token), index + 1
        while token[0] in "\"'" and index < len(self.tokens) and self.tokens[index][1][0] in "\"'":  # "a" "b" is "ab"
            end = self.tokens[index][0] + len(self.tokens[index][1])
            index += 1
        return _Node(start, end, scalar=self.text[start:end]), index


def _elements(node: _Node, name: str) -> list[_Node]:
    """The values of field ``name`` of a message node, a list's items one by one."""
    found: list[_Node] = []
    for field_name, _, value in node.fields or []:
        if field_name == name:
            found += value.items if value.items is not None else [value]
    return found


def _unquoted(node: _Node) -> str:
    return (node.scalar or "").strip("\"'")


def _named(node: _Node, kind: str, name: str) -> _Node | None:
    return next((item for item in _elements(node, kind) if any(_unquoted(value) == name for value in _elements(item, "name"))), None)


def _retyped(message: _Node, text: str, data_type: int, dims: Sequence[int], where: str) -> list[tuple[int, int, str]]:
    """The edits giving a tensor (or warm-up data) ``message`` node its ``data_type`` and ``dims``."""
    types = [value for name, _, value in message.fields or [] if name == "data_type"]
    dims_fields = [(start, value) for name, start, value in message.fields or [] if name == "dims"]
    if len(types) != 1 or not dims_fields:
        raise ConfigError(f"{where}: cannot update data_type and dims in place (write them as `data_type: ...` and `dims: [ ... ]`)")
    first = dims_fields[0][1]
    spaced = text[first.start : first.start + 2] == "[ " or first.items is None
    listed = ", ".join(str(d) for d in dims)
    edits = [
        (types[0].start, types[0].end, model_config_pb2.DataType.Name(data_type)),
        (first.start, first.end, f"[ {listed} ]" if spaced else f"[{listed}]"),
    ]
    edits += [_removal(text, start, value.end) for start, value in dims_fields[1:]]
    return edits


def _removal(text: str, start: int, end: int) -> tuple[int, int, str]:
    """The edit removing ``text[start:end]`` with the blanks before it (and its line, when nothing else is on it)."""
    while start > 0 and text[start - 1] in " \t":
        start -= 1
    if start == 0 or text[start - 1] == "\n":
        rest = re.match(r"[ \t]*\n?", text[end:])
        end += rest.end() if rest else 0
    return start, end, ""


def _edited(text: str, edits: list[tuple[int, int, str]]) -> str:
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


def retyped_text(text: str, where: str, expected: ModelConfig, tensors: Iterable[tuple[str, str]] = (), warmups: bool = False) -> str:
    """``text`` with the dtype and dims of its ``tensors`` ((kind, name)) and, with ``warmups``, of its warm-up
    samples' inputs, as ``expected`` has them; nothing else changes (comments kept). The result parses as
    ``expected`` (else ``ConfigError``: the file is written in a way this cannot edit)."""
    parsed = _Text(text)
    edits = []
    for kind, name in tensors:
        node, tensor = _named(parsed.root, kind, name), _tensor(expected, kind, name)
        if node is None or tensor is None:
            raise ConfigError(f"{where}: no {kind} '{name}'")
        edits += _retyped(node, text, tensor.data_type, tensor.dims, f"{where}: {kind} '{name}'")
    if warmups:
        nodes = _elements(parsed.root, "model_warmup")
        for node, sample in zip(nodes, expected.model_warmup):
            for entry in _elements(node, "inputs"):
                key = next((_unquoted(value) for value in _elements(entry, "key")), "")
                values = _elements(entry, "value")
                if key in sample.inputs and values:
                    data = sample.inputs[key]
                    edits += _retyped(values[0], text, data.data_type, data.dims, f"{where}: model_warmup '{sample.name}' '{key}'")
    result = _edited(text, edits)
    if model_config.parse_config_text(result, where) != expected:
        raise ConfigError(f"{where}: cannot update its dims in place; write its tensors as `name`, `data_type: ...`, `dims: [ ... ]`")
    return result


# --------------------------------------------------------------------------- a pipeline's generated files


def core_names(pipeline: layout.Pipeline, names: Iterable[str]) -> list[str]:
    """The cores among ``names``: ``<pipeline>_core`` and its second stages ``<pipeline>_core_<role>``."""
    core = pipeline.model_name("core")
    return sorted(name for name in names if name == core or name.startswith(core + "_"))


def _read(path: Path) -> tuple[str, ModelConfig]:
    if not path.is_file():
        raise ConfigError(f"{path}: no such model configuration")
    text = path.read_text()
    return text, model_config.parse_config_text(text, str(path))


def pipeline_files(pipeline: layout.Pipeline) -> dict[Path, str]:
    """Every file ``python -m builders configs`` writes for ``pipeline``, with its text: each core's
    ``config.pbtxt`` (warm-up dims) and ``configs/<variant>.pbtxt``, and the configs whose tensors mirror the core's."""
    files: dict[Path, str] = {}
    models = [p.name for p in pipeline.repository.iterdir() if (p / "config.pbtxt").is_file()]
    cores: dict[str, ModelConfig] = {}
    for name in core_names(pipeline, models):
        folder = pipeline.repository / name
        text, core = _read(folder / "config.pbtxt")
        synced = synced_warmup(core)
        files[folder / "config.pbtxt"] = text if synced == core else retyped_text(text, str(folder / "config.pbtxt"), synced, warmups=True)
        settings = CoreSettings.load(folder)
        for relative, variant_text in variant_files(synced, pipeline.name, settings).items():
            files[folder / relative] = variant_text
        cores[name] = synced
    core = cores.get(pipeline.model_name("core"))
    if core is not None and (pipeline.ensemble_dir / "config.pbtxt").is_file():
        _, ensemble = _read(pipeline.ensemble_dir / "config.pbtxt")
        targets: dict[str, list[Mirror]] = {}
        for mirror in mirrors(ensemble, core.name):
            if mirror.model not in cores:
                targets.setdefault(mirror.model, []).append(mirror)
        for name, found in sorted(targets.items()):
            path = pipeline.repository / name / "config.pbtxt"
            text, config = _read(path)
            expected = ModelConfig()
            expected.CopyFrom(config)
            for mirror in found:
                own, source = _tensor(expected, mirror.kind, mirror.tensor), _tensor(core, mirror.core_kind, mirror.core_tensor)
                if own is None or source is None:
                    raise ConfigError(
                        f"{path}: the ensemble maps {mirror.kind} '{mirror.tensor}' to the core's {mirror.core_kind} '{mirror.core_tensor}'; one is missing"
                    )
                own.data_type = source.data_type
                own.dims[:] = source.dims
            files[path] = text if expected == config else retyped_text(text, str(path), expected, [(m.kind, m.tensor) for m in found])
    return files


# --------------------------------------------------------------------------- the drift check


def _value(descriptor: FieldDescriptor, value: Any) -> str:
    """A scalar (or repeated scalar) field's value as the text format writes it: ``[3, 224, 224]``, ``"fp32"``, ``KIND_CPU``."""

    def one(item: Any) -> str:
        if descriptor.enum_type is not None:
            known = descriptor.enum_type.values_by_number.get(item)
            return known.name if known is not None else str(item)
        return json.dumps(item) if isinstance(item, (str, bool)) else str(item)

    return f"[{', '.join(one(item) for item in value)}]" if _is_repeated(descriptor) else one(value)


def differences(actual: Message, expected: Message, path: str = "") -> list[str]:
    """Where ``actual`` differs from ``expected``: ``field.path is X, generated Y``, first differences first."""
    found: list[str] = []
    descriptors = {d.name: d for d, _ in [*actual.ListFields(), *expected.ListFields()]}
    for descriptor in sorted(descriptors.values(), key=lambda d: d.number):
        mine, theirs = getattr(actual, descriptor.name), getattr(expected, descriptor.name)
        where = path + descriptor.name
        if mine == theirs:
            continue
        if _is_map(descriptor):
            messages = descriptor.message_type.fields_by_name["value"].message_type is not None
            for key in sorted(set(mine) | set(theirs)):
                label = f"{where}[{json.dumps(key) if isinstance(key, str) else key}]"
                if key not in theirs:
                    found.append(f"{label} is not generated")
                elif key not in mine:
                    found.append(f"{label} is missing")
                elif mine[key] != theirs[key]:
                    found += (
                        differences(mine[key], theirs[key], label + ".")
                        if messages
                        else [f"{label} is {mine[key]!r}, generated {theirs[key]!r}"]
                    )
        elif descriptor.message_type is not None and _is_repeated(descriptor):
            if len(mine) != len(theirs):
                found.append(f"{where} has {len(mine)} entries, generated {len(theirs)}")
                continue
            for index, (a, b) in enumerate(zip(mine, theirs)):
                label = getattr(b, "name", "") if "name" in b.DESCRIPTOR.fields_by_name else ""
                found += differences(a, b, f"{where}[{json.dumps(label) if label else index}].")
        elif descriptor.message_type is not None:
            found += differences(mine, theirs, where + ".")
        else:
            found.append(f"{where} is {_value(descriptor, mine)}, generated {_value(descriptor, theirs)}")
    return found


def check(pipeline: layout.Pipeline, models: Mapping[str, Mapping[str, ModelConfig]]) -> list[str]:
    """Each core's variants and each mirrored tensor as generation gives them (``models``: the pipeline's configs,
    ``{model: {variant ('' for config.pbtxt): config}}``); one line per file that differs, naming the fields."""
    problems = []
    fix = f"edit config.pbtxt (or configs/{SETTINGS_FILE}), not the generated file, then run `{command(pipeline.name)}`"
    for name in core_names(pipeline, models):
        core = models[name].get("")
        if core is None:
            continue  # unreadable: reported on its own
        try:
            expected = variants(core, CoreSettings.load(pipeline.repository / name))
        except ConfigError as error:
            problems.append(str(error))
            continue
        for variant_name, config in expected.items():
            where = f"{name}/configs/{variant_name}.pbtxt"
            actual = models[name].get(variant_name)
            if actual is None:
                problems.append(f"{where} is missing (every core has every CPU variant): run `{command(pipeline.name)}`")
                continue
            found = differences(actual, config)
            if found:
                more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
                problems.append(f"{where} differs from what generation gives: {'; '.join(found[:3])}{more}: {fix}")
    core = models.get(pipeline.model_name("core"), {}).get("")
    ensemble = models.get(pipeline.name, {}).get("")
    if core is None or ensemble is None:
        return problems
    for mirror in mirrors(ensemble, core.name):
        config = models.get(mirror.model, {}).get("")
        own = None if config is None else _tensor(config, mirror.kind, mirror.tensor)
        source = _tensor(core, mirror.core_kind, mirror.core_tensor)
        if own is None or source is None or (own.data_type == source.data_type and list(own.dims) == list(source.dims)):
            continue  # a missing tensor is the wiring check's
        problems.append(
            f"{mirror.model}/config.pbtxt: {mirror.kind} '{mirror.tensor}' is {_signature(own)}, but the ensemble maps it "
            f"{'to' if mirror.core_kind == 'input' else 'from'} {core.name}'s {mirror.core_kind} '{mirror.core_tensor}', "
            f"{_signature(source)} in its config.pbtxt: run `{command(pipeline.name)}`"
        )
    return problems
