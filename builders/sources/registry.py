"""The source kinds a recipe may name (``[source] kind``): the one place that lists them.

Adding a kind: its module here (a :class:`builders.sources.base.SourceKind` as ``KIND``) and one line in
:data:`KINDS`.
"""

from __future__ import annotations

from builders.sources import efficientnet_lite0, onnx_file, tflite
from builders.sources.base import RecipeError, SourceKind

KINDS: dict[str, SourceKind] = {
    kind.key: kind
    for kind in (
        efficientnet_lite0.KIND,
        tflite.KIND,
        onnx_file.KIND,
    )
}


def kind(name: str, where: str) -> SourceKind:
    """The kind a source names; an unknown one is a one-line :class:`RecipeError` starting with ``where``."""
    if name not in KINDS:
        raise RecipeError(f"{where}: kind must be one of {', '.join(KINDS)}, got {name!r}")
    return KINDS[name]


def stage_kind(name: str, where: str) -> SourceKind:
    """The kind a second stage's source names: one a second stage may come from."""
    found = kind(name, where)
    if not found.stage_source:
        allowed = ", ".join(key for key, item in KINDS.items() if item.stage_source)
        raise RecipeError(f"{where}: a second stage's source must be of a kind it may come from ({allowed}), got {name!r}")
    return found
