"""Triton configs as text: :func:`render` writes a ``ModelConfig`` with ``google.protobuf.text_format`` in the
layout a reader expects, and :func:`differences` names the fields where two configs differ (for the check that
a generated file was not edited by hand)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from typing import Any

from google.protobuf import text_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from vision_serving import model_config
from vision_serving.model_config import ModelConfig

WIDTH = 118  # an element of a repeated field longer than this is written as a block; comment lines wrap here


def wrapped_comment(text: str) -> list[str]:
    """``text`` as comment lines of at most :data:`WIDTH` characters."""
    wrap = textwrap.TextWrapper(WIDTH, initial_indent="# ", subsequent_indent="# ", break_long_words=False, break_on_hyphens=False)
    return wrap.wrap(text)


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
