"""The CPU core refuses an ONNX whose output does not match its config (it must fail to load, never serve)."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from vision_serving import model_config
from vision_serving.onnx_core import OnnxCore


def pooled_model(path, input_name: str, output_name: str) -> None:
    """images [N, 3, H, W] -> [N, 3]: the right names, the wrong number of classes."""
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", [input_name], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], [output_name]),
        ],
        "wrong_classes",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["batch", 3, 224, 224])],
        [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, ["batch", 3])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_wrong_output_shape_fails_at_load(tmp_path):
    config = model_config.load_config(model_config.MODEL_REPOSITORY / "core", "cpu")
    pooled_model(tmp_path / model_config.parameter(config, "onnx_file"), config.input[0].name, config.output[0].name)
    with pytest.raises(model_config.ConfigError, match=r"has shape \[3\] per image; the config declares \[1000\]"):
        OnnxCore(config, tmp_path)


def test_built_model_loads(built_repository):
    config = model_config.load_config(built_repository / "core", "cpu")
    core = OnnxCore(config, built_repository / "core" / "1")
    assert core.output.name == config.output[0].name
