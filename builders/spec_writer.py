"""A new pipeline's spec written as TOML with its comments (``new-pipeline --from yolo``), by ``tomlkit``.

The families (:mod:`builders.families`) say what goes in as :class:`Table` values; this module is the one writer of
a ``pipeline.toml``. What it writes is parsed back by :func:`builders.spec.load` before the folder is generated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import tomlkit
from tomlkit.items import Array, InlineTable
from tomlkit.items import Table as TomlTable


@dataclass(frozen=True)
class Entry:
    """One key of a table: its value (a scalar, a list, a table of scalars, or a list of such tables) and a comment
    above it ("" for none)."""

    key: str
    value: Any
    comment: str = ""


@dataclass(frozen=True)
class Table:
    """A ``[name]`` table (``name`` "" for the document's top), the comment lines above its keys, and its keys."""

    name: str
    entries: Sequence[Entry] = ()
    comments: Sequence[str] = field(default_factory=tuple)


def _inline(values: Mapping[str, Any]) -> InlineTable:
    table = tomlkit.inline_table()
    for key, value in values.items():
        table[key] = _inline(value) if isinstance(value, Mapping) else value
    return table


def _value(value: Any) -> Any:
    if isinstance(value, Mapping):
        return _inline(value)
    if isinstance(value, list | tuple) and value and all(isinstance(item, Mapping) for item in value):
        array: Array = tomlkit.array()
        array.multiline(len(value) > 1)
        for item in value:
            array.append(_inline(item))
        return array
    if isinstance(value, tuple):
        return list(value)
    return value


def _fill(container: Any, table: Table) -> None:
    for line in table.comments:
        container.add(tomlkit.comment(line))
    for entry in table.entries:
        if entry.comment:
            container.add(tomlkit.comment(entry.comment))
        container.add(entry.key, _value(entry.value))


def render(header: Sequence[str], tables: Sequence[Table]) -> str:
    """The spec's text: ``header`` comment lines, then each table in order."""
    document = tomlkit.document()
    for line in header:
        document.add(tomlkit.comment(line))
    for table in tables:
        if not table.name:
            _fill(document, table)
            continue
        document.add(tomlkit.nl())
        made: TomlTable = tomlkit.table()
        _fill(made, table)
        document.add(table.name, made)
    return tomlkit.dumps(document)
