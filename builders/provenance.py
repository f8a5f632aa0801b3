"""One provenance record for every built artifact, and one up-to-date check.

Each step (export, quantize, fp16, drift-reference, build-engine) writes ``<artifact>.json`` beside its artifact:

.. code-block:: json

    {
      "step": "quantize",
      "created_at": "2025-01-01T00:00:00+00:00",
      "input_hash": "<sha256 of the input record>",
      "output": {"file": "model_int8_qdq.onnx", "sha256": "...", "bytes": 123},
      "input_hashes": {"onnx": "...", "calibration": "..."},
      "companions": {"../../x_postprocess/1/labels.txt": "<sha256>"},
      "tools": {"nvidia-modelopt": "0.47.0"},
      "inputs": {"...": "the record input_hash is the hash of"},
      "<step-specific keys>": "..."
    }

``input_hash`` is :func:`builders.artifacts.input_hash` of everything the artifact is a function
of (files' sha256, package versions, options); ``input_hashes`` names the hashes other steps read
(build-engine reads the calibration hash of the ONNX it builds). ``companions`` are other files
the step wrote with the artifact (paths relative to the artifact's folder). :func:`is_current`
is the one up-to-date check: the record names the expected input hash and the artifact and its
companions are byte-for-byte the ones it recorded.

Only the standard library: ``verify-plan`` reads plan provenance in the server image.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builders.artifacts import atomic_write_bytes, sha256_bytes, sha256_file

_FIELDS = ("step", "created_at", "input_hash", "output", "input_hashes", "companions", "tools", "inputs")


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def path_for(artifact: Path) -> Path:
    """The provenance record beside ``artifact`` (``model.onnx`` -> ``model.onnx.json``): layout's rule."""
    from vision_serving.layout import provenance_path

    return provenance_path(artifact)


@dataclass
class Provenance:
    step: str
    input_hash: str
    output_file: str
    output_sha256: str
    output_bytes: int | None = None
    created_at: str = field(default_factory=now)
    input_hashes: dict[str, str | None] = field(default_factory=dict)
    companions: dict[str, str] = field(default_factory=dict)
    tools: dict[str, str | None] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # step-specific, written at the top level

    @classmethod
    def for_bytes(cls, step: str, input_hash: str, artifact: Path, data: bytes, **fields: Any) -> Provenance:
        """A record for ``data``, about to be written to ``artifact``."""
        return cls(step, input_hash, artifact.name, sha256_bytes(data), len(data), **fields)

    def add_companion(self, artifact: Path, companion: Path, data: bytes) -> None:
        """Record another file written with ``artifact`` (its sha256, by path relative to the artifact's folder)."""
        self.companions[Path(os.path.relpath(companion, artifact.parent)).as_posix()] = sha256_bytes(data)

    def to_dict(self) -> dict[str, Any]:
        clash = sorted(set(self.extra) & set(_FIELDS))
        if clash:
            raise ValueError(f"provenance extra keys {clash} clash with the record's own fields")
        output: dict[str, Any] = {"file": self.output_file, "sha256": self.output_sha256}
        if self.output_bytes is not None:
            output["bytes"] = self.output_bytes
        return {
            "step": self.step,
            "created_at": self.created_at,
            "input_hash": self.input_hash,
            "output": output,
            "input_hashes": dict(self.input_hashes),
            "companions": dict(self.companions),
            "tools": dict(self.tools),
            "inputs": self.inputs,
            **self.extra,
        }

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> Provenance:
        output = record.get("output") if isinstance(record.get("output"), Mapping) else {}
        assert isinstance(output, Mapping)
        return cls(
            step=str(record.get("step", "")),
            input_hash=str(record.get("input_hash") or ""),
            output_file=str(output.get("file", "")),
            output_sha256=str(output.get("sha256") or ""),
            output_bytes=output.get("bytes"),
            created_at=str(record.get("created_at", "")),
            input_hashes=dict(record.get("input_hashes") or {}),
            companions=dict(record.get("companions") or {}),
            tools=dict(record.get("tools") or {}),
            inputs=dict(record.get("inputs") or {}),
            extra={key: value for key, value in record.items() if key not in _FIELDS},
        )

    def write(self, path: Path) -> None:
        """Write atomically (after the artifact: a reader never sees a record for a file not yet there)."""
        atomic_write_bytes(path, (json.dumps(self.to_dict(), indent=2, default=str) + "\n").encode())

    @classmethod
    def read(cls, path: Path) -> Provenance | None:
        """The record at ``path``; None when it is missing, unreadable or not a JSON object."""
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return cls.from_dict(record) if isinstance(record, dict) else None


def read_for(artifact: Path) -> Provenance | None:
    return Provenance.read(path_for(artifact))


def is_current(artifact: Path, expected_input_hash: str) -> bool:
    """``artifact`` exists, its record names ``expected_input_hash``, and the artifact and its
    companions are the files the record hashed."""
    if not artifact.is_file():
        return False
    record = read_for(artifact)
    if record is None or not record.input_hash or record.input_hash != expected_input_hash:
        return False
    if record.output_sha256 != sha256_file(artifact):
        return False
    for relative, digest in record.companions.items():
        companion = artifact.parent / relative
        if not companion.is_file() or sha256_file(companion) != digest:
            return False
    return True
