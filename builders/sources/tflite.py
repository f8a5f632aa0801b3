"""``kind = "tflite"``: a ``.tflite`` file inside a pinned wheel (``wheel`` and ``member``, pinned by its sha256),
converted by tf2onnx in its own environment (``requirements/tflite-convert.txt``); the transposed convolutions
of the fixed graph are checked against the TFLite operators' custom options, which tf2onnx drops."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builders import CheckFailed, Log
from builders.sources.base import Converted, PinnedFile, RecipeError, Source, wheel_member
from vision_serving.model_config import ModelConfig


@dataclass(frozen=True)
class TfliteFile(PinnedFile):
    def validate(self, source: Source, where: str) -> None:
        super().validate(source, where)
        if not source.wheel or not source.member:
            raise RecipeError(f"{where}: a tflite source in a wheel needs wheel and member")
        if source.path:
            raise RecipeError(f"{where}: a tflite source is a wheel and its member, not a path")

    def model_file(self, source: Source, folder: Path, where: str, log: Log) -> Path:
        return wheel_member(source, where, log)

    def convert(self, source: Source, model_file: Path, build_dir: Path, core: ModelConfig, log: Log) -> Converted:
        """tf2onnx in its own environment; the provenance records the TFLite custom options."""
        import onnx

        from builders import tflite as tflite_files

        converted = build_dir / "source.onnx"
        converted.parent.mkdir(parents=True, exist_ok=True)
        log(f"converting {model_file.name} with tf2onnx (opset {source.opset}) in its own environment...")
        tflite_files.convert_to_onnx(model_file, converted, source.opset, log)
        params = tflite_files.transpose_conv_params(model_file)
        return Converted(
            onnx.load(str(converted)),
            {"tflite_custom_options": [vars(item) if hasattr(item, "__dict__") else str(item) for item in params]},
        )

    def converter_sha256(self) -> str | None:
        from builders import build_envs
        from builders import tflite as tflite_files
        from builders.artifacts import sha256_file

        return sha256_file(build_envs.requirements_file(tflite_files.CONVERT_ENV))

    def check_converted(self, unfixed: Any, model_file: Path, photos: Callable[[], np.ndarray], log: Log) -> dict[str, Any]:
        """The transposed convolutions' stride and padding derived from the graph's shapes equal the TFLite
        operators' own custom options (which tf2onnx drops)."""
        import onnx
        import onnx_graphsurgeon as gs

        from builders import tflite as tflite_files
        from builders.passes import convolution_2d_transpose_bias as transpose_pass

        disagreements = transpose_pass.check_against_tflite(
            gs.import_onnx(onnx.shape_inference.infer_shapes(unfixed)), tflite_files.transpose_conv_params(model_file)
        )
        if disagreements:
            raise CheckFailed("the shapes and the TFLite custom options disagree: " + "; ".join(disagreements))
        return {}


KIND = TfliteFile(
    key="tflite",
    description="a .tflite file inside a pinned wheel, pinned by its sha256, converted by tf2onnx in its own environment",
    code_files=(
        "builders/tflite.py",
        *(f"builders/tflite_densify/{name}" for name in ("__init__.py", "__main__.py", "rewrite.py", "sparsity.py")),
    ),
)
