"""What differs between TensorRT 10.x and 11.x, decided in builders/tensorrt/interface.py, on the stand-in."""

from __future__ import annotations

import sys

import pytest

from builders import BuildError
from builders.tensorrt import interface
from tests.support.tensorrt_standin import OnnxParser, ParserError, StandIn


def test_network_flags_for_tensorrt_10_and_11():
    assert interface.network_creation_flags(StandIn("10.13.3.9")) == (1 << 1, ["STRONGLY_TYPED"])
    # 11: always strongly typed; STRONGLY_TYPED is deprecated and ignored, EXPLICIT_BATCH is gone: nothing is passed.
    assert interface.network_creation_flags(StandIn("11.1.0.4")) == (0, [])
    with pytest.raises(BuildError, match="too old"):
        interface.network_creation_flags(StandIn("10.7.0.23"))
    without = StandIn("10.9.0.1")
    del without.NetworkDefinitionCreationFlag.STRONGLY_TYPED
    with pytest.raises(BuildError, match=r"no NetworkDefinitionCreationFlag\.STRONGLY_TYPED"):
        interface.network_creation_flags(without)


def test_hardware_compatibility_where_the_bindings_have_it():
    new, old = StandIn("10.9.0.34"), StandIn("10.8.0.43")  # SAME_COMPUTE_CAPABILITY from 10.9
    assert interface.hardware_compatibility(new) == interface.SAME_COMPUTE_CAPABILITY
    assert interface.hardware_compatibility(old) == interface.GPU_MODEL_ONLY
    config = new.Builder(None).create_builder_config()
    interface.set_hardware_compatibility(new, config, interface.SAME_COMPUTE_CAPABILITY)
    assert config.hardware_compatibility_level == new.HardwareCompatibilityLevel.SAME_COMPUTE_CAPABILITY
    config = old.Builder(None).create_builder_config()
    interface.set_hardware_compatibility(old, config, interface.GPU_MODEL_ONLY)
    assert config.hardware_compatibility_level == old.HardwareCompatibilityLevel.NONE  # TensorRT's default, untouched


def test_parser_errors_are_listed_one_per_line():
    parser = OnnxParser(None, None)
    parser.errors = [ParserError(3, "/head/NMS", "EfficientNMS_TRT", "plugin not found"), ParserError(-1, "", "", "invalid graph")]
    parser.errors.append(ParserError(7, "", "", "no name"))
    assert interface.parser_errors(parser) == [
        "[UNSUPPORTED_NODE] node /head/NMS op EfficientNMS_TRT: plugin not found",
        "[UNSUPPORTED_NODE] invalid graph",
        "[UNSUPPORTED_NODE] node #7: no name",
    ]


@pytest.mark.parametrize("version", ["10.13.3.9", "11.1.0.4"])
def test_builder_flags_set_are_read_from_the_config(version):
    trt = StandIn(version)
    config = trt.Builder(None).create_builder_config()
    assert interface.builder_flags_set(trt, config) == ["TF32"]  # TensorRT's default: no FP16/INT8 on either


def test_a_missing_tensorrt_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # makes `import tensorrt` raise ImportError
    with pytest.raises(BuildError, match=r"^TensorRT is not installed \(use the builder image docker/builder.Dockerfile\)$"):
        interface.import_tensorrt()
