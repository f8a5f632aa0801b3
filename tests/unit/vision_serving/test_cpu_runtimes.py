"""vision_serving.cpu_runtimes: the one list of CPU runtimes, and what reads it."""

from __future__ import annotations

import pytest

from vision_serving import cpu_runtimes, layout, model_config


def core_config(parameters: dict[str, str]) -> model_config.ModelConfig:
    config = model_config.ModelConfig(name="m_core", backend="python")
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    return config


def test_every_runtime_s_configs_name_it():
    for runtime in cpu_runtimes.RUNTIMES.values():
        assert runtime.configs, runtime.name
        for variant in runtime.configs:
            assert cpu_runtimes.of_config(core_config(dict(variant.parameters))) is runtime, variant.name


def test_an_unknown_runtime_is_a_config_error_naming_the_known_ones():
    with pytest.raises(model_config.ConfigError, match="runtime 'tvm' is not one of onnxruntime, openvino"):
        cpu_runtimes.of_config(core_config({"runtime": "tvm"}))
    assert cpu_runtimes.of_config(core_config({})).name == cpu_runtimes.DEFAULT


def test_the_shipped_cores_have_every_runtime_s_configs():
    """Each shipped core offers every runtime's config variants and sets the parameters the registry gives new
    pipelines (their values may be tuned per pipeline: threads, the classifier's OpenVINO precision)."""
    for pipeline in layout.pipelines():
        for runtime in cpu_runtimes.RUNTIMES.values():
            for variant in runtime.configs:
                config = model_config.load_config(pipeline.model_dir("core"), variant.name)
                assert cpu_runtimes.of_config(config) is runtime, (pipeline.name, variant.name)
                assert set(variant.parameters) <= set(config.parameters), (pipeline.name, variant.name)


def test_the_measured_variants_are_configs_of_that_runtime():
    for runtime in cpu_runtimes.RUNTIMES.values():
        names = {variant.name for variant in runtime.configs}
        assert {variant.config for variant in runtime.measured} <= names, runtime.name


def test_every_core_config_variant_is_listed_once():
    """Each runtime's configs, then Triton's own openvino backend's (no ``runtime`` parameter: not a Python-backend runtime)."""
    names = [variant.name for variant in cpu_runtimes.config_variants()]
    assert len(names) == len(set(names))
    assert names == [variant.name for runtime in cpu_runtimes.RUNTIMES.values() for variant in runtime.configs] + ["cpu_openvino_backend"]
    assert cpu_runtimes.OPENVINO_BACKEND.backend == "openvino" and "runtime" not in cpu_runtimes.OPENVINO_BACKEND.parameters
    assert [variant.name for variant in cpu_runtimes.config_variants() if variant.warmup] == ["cpu"]
