"""The batch range a model is built for, recorded in its ONNX ``metadata_props``.

TensorRT needs an optimization profile (min/opt/max shape) for every dynamic
input dimension. ``python -m builders fix`` (pass ``batch_dimension``) makes
dim 0 of every input and output the symbolic ``batch`` and records here the
range it should be built for; ``check`` and ``build-engine`` read it back.

The record is JSON under :data:`METADATA_KEY`::

    {"batch_dim": "batch", "min": 1, "opt": 32, "max": 32,
     "inputs": {"images": {"min": [1, 3, 224, 224], "opt": [32, 3, 224, 224], "max": [32, 3, 224, 224]}}}

``inputs`` lists the inputs whose other dims are all static.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

METADATA_KEY = "builders.batch_profile"


class ProfileError(ValueError):
    """A batch range that cannot be built (min > opt, max < 1, ...) or a malformed record."""


@dataclass(frozen=True)
class BatchProfile:
    min: int
    opt: int
    max: int
    batch_dim: str = "batch"
    inputs: Mapping[str, Mapping[str, list[int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 1 <= self.min <= self.opt <= self.max:
            raise ProfileError(f"batch range needs 1 <= min <= opt <= max, got min {self.min}, opt {self.opt}, max {self.max}")

    def to_json(self) -> str:
        record = {"batch_dim": self.batch_dim, "min": self.min, "opt": self.opt, "max": self.max, "inputs": dict(self.inputs)}
        return json.dumps(record, sort_keys=True)


def make_profile(
    max_batch: int,
    opt_batch: int | None = None,
    input_dims: Mapping[str, Sequence[int]] | None = None,
    batch_dim: str = "batch",
) -> BatchProfile:
    """min 1, opt ``opt_batch`` (default ``max_batch``), max ``max_batch``; per-input shapes from non-batch dims."""
    opt = max_batch if opt_batch is None else opt_batch
    shapes = {name: {"min": [1, *dims], "opt": [opt, *dims], "max": [max_batch, *dims]} for name, dims in (input_dims or {}).items()}
    return BatchProfile(min=1, opt=opt, max=max_batch, batch_dim=batch_dim, inputs=shapes)


def read_profile(model: Any) -> BatchProfile | None:
    """The record in an ``onnx.ModelProto``'s metadata, or None when there is none."""
    for entry in model.metadata_props:
        if entry.key == METADATA_KEY:
            try:
                record = json.loads(entry.value)
                return BatchProfile(
                    min=int(record["min"]),
                    opt=int(record["opt"]),
                    max=int(record["max"]),
                    batch_dim=str(record.get("batch_dim", "batch")),
                    inputs=record.get("inputs", {}),
                )
            except (ValueError, KeyError, TypeError) as error:
                raise ProfileError(f"metadata '{METADATA_KEY}' is not a valid batch profile: {error}") from None
    return None


def write_profile(model: Any, profile: BatchProfile) -> None:
    """Set (or replace) the record in an ``onnx.ModelProto``'s metadata."""
    set_metadata(model, METADATA_KEY, profile.to_json())


def set_metadata(model: Any, key: str, value: str) -> None:
    """Set one ``metadata_props`` entry, replacing an existing one with the same key."""
    for entry in model.metadata_props:
        if entry.key == key:
            entry.value = value
            return
    entry = model.metadata_props.add()
    entry.key, entry.value = key, value
