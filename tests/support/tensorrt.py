"""A tiny TensorRT-core pipeline and the builders CLI runner, for the plan steps' tests (tests/unit/builders/tensorrt, tests/gpu)."""

from __future__ import annotations

from pathlib import Path

from builders import cli
from vision_serving import layout, model_config

TINY_CONFIG = """
name: "tiny_core"
platform: "tensorrt_plan"
max_batch_size: 4
input [ { name: "images" data_type: TYPE_FP32 dims: [ 3, 8, 8 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 10 ] } ]
"""


def core_config(text: str = TINY_CONFIG) -> model_config.ModelConfig:
    return model_config.parse_config_text(text)


# A minimal recipe: build-engine and verify-plan read only the core's config, but layout finds pipelines by their recipe.
TINY_RECIPE = """
[source]
kind = "onnx"
path = "tiny_core/1/model_int8_qdq.onnx"
"""


def tiny_pipeline(root: Path, name: str = "tiny") -> layout.Pipeline:
    """``root/<name>``: a pipeline whose core is TINY_CONFIG (named ``<name>_core``)."""
    pipeline = layout.Pipeline.at(root / name)
    pipeline.core_version_dir.mkdir(parents=True)
    pipeline.recipe.write_text(TINY_RECIPE)
    (pipeline.core_dir / "config.pbtxt").write_text(TINY_CONFIG.replace('"tiny_core"', f'"{name}_core"'))
    return pipeline


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    code = cli.main(argv)
    return code, capsys.readouterr().err
