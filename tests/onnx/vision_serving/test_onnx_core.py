"""The CPU core refuses an ONNX whose outputs do not match its config (it must fail to load, never serve)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.support.pipelines import built_classifier
from vision_serving import layout, model_config
from vision_serving.onnx_core import OnnxCore

CLASSIFIER = layout.pipeline("image_classifier")


def pooled_model(path, input_name: str, output_name: str) -> None:
    """images [N, 3, H, W] -> [N, 3]: the right names, the wrong number of classes."""
    graph = helper.make_graph(
        [
            helper.make_node("Cast", [input_name], ["pixels"], to=TensorProto.FLOAT),
            helper.make_node("GlobalAveragePool", ["pixels"], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], [output_name]),
        ],
        "wrong_classes",
        [helper.make_tensor_value_info(input_name, TensorProto.UINT8, ["batch", 3, 224, 224])],
        [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, ["batch", 3])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def renamed_model(path, input_name: str, output_name: str) -> None:
    """Identity-shaped [N, 1000] -> [N, 1000] whose names are not the config's."""
    graph = helper.make_graph(
        [helper.make_node("Identity", [input_name], [output_name])],
        "renamed",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["batch", 1000])],
        [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, ["batch", 1000])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.fixture(scope="module")
def cpu_config() -> model_config.ModelConfig:
    return model_config.load_config(CLASSIFIER.core_dir, "cpu_onnxruntime")


def test_wrong_output_shape_fails_at_load(tmp_path, cpu_config):
    pooled_model(tmp_path / model_config.parameter(cpu_config, "onnx_file"), cpu_config.input[0].name, cpu_config.output[0].name)
    with pytest.raises(model_config.ConfigError, match=r"has shape \[3\] per image; the config declares \[1000\]"):
        OnnxCore(cpu_config, tmp_path)


def test_wrong_io_names_fail_at_load(tmp_path, cpu_config):
    renamed_model(tmp_path / model_config.parameter(cpu_config, "onnx_file"), "pixels", "scores")
    with pytest.raises(model_config.ConfigError, match=r"ONNX I/O \['pixels'\] -> \['scores'\] does not match config"):
        OnnxCore(cpu_config, tmp_path)


def test_built_model_loads_and_runs_by_name(cpu_config):
    pipeline = built_classifier()
    core = OnnxCore(cpu_config, pipeline.core_version_dir)
    assert core.input_names == [item.name for item in cpu_config.input]
    assert core.output_names == [item.name for item in cpu_config.output]
    (image,) = cpu_config.input
    outputs = core.run({image.name: np.zeros((2, *image.dims), dtype=model_config.numpy_dtype(image.data_type))})
    assert isinstance(outputs, list) and len(outputs) == len(cpu_config.output)
    assert outputs[0].shape == (2, *cpu_config.output[0].dims)


def test_allow_spinning_parameter_reaches_the_session(tmp_path, cpu_config):
    """``allow_spinning`` "0" makes idle intra-op threads sleep; anything but 0/1 is refused at load."""
    config = model_config.ModelConfig()
    config.CopyFrom(cpu_config)
    config.output[0].dims[:] = [3]
    pooled_model(tmp_path / model_config.parameter(config, "onnx_file"), config.input[0].name, config.output[0].name)
    assert OnnxCore(config, tmp_path).session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning") == "1"
    config.parameters["allow_spinning"].string_value = "0"
    assert OnnxCore(config, tmp_path).session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning") == "0"
    config.parameters["allow_spinning"].string_value = "no"
    with pytest.raises(model_config.ConfigError, match="allow_spinning 'no' is not 0 or 1"):
        OnnxCore(config, tmp_path)
