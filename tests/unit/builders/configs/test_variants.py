"""builders.configs.variants: a core's CPU variants, from its production config, the runtimes' registry and its spec's cpu table."""

from __future__ import annotations

import pytest

from builders.configs import render, variants
from vision_serving import cpu_runtimes, model_config

CORE = """
name: "m_core"
platform: "tensorrt_plan"
max_batch_size: 8
input [ { name: "images" data_type: TYPE_UINT8 dims: [ 3, 64, 64 ] } ]
output [ { name: "scores" data_type: TYPE_FP32 dims: [ 10 ] } ]
dynamic_batching {
  max_queue_delay_microseconds: 500
  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 1000000 allow_timeout_override: true max_queue_size: 24 }
}
instance_group [ { kind: KIND_GPU count: 1 } ]
parameters [ { key: "execution_context_allocation_strategy", value: { string_value: "ON_PROFILE_CHANGE" } } ]
model_warmup [
  { name: "zeros_batch_1" batch_size: 1 inputs { key: "images" value: { data_type: TYPE_UINT8 dims: [ 3, 64, 64 ] zero_data: true } } }
]
"""


def core() -> model_config.ModelConfig:
    return model_config.parse_config_text(CORE)


def test_every_variant_of_the_registry_has_the_core_s_tensors_and_its_own_runtime_settings():
    made = variants.variants(core())
    assert list(made) == [variant.name for variant in cpu_runtimes.config_variants()]
    for variant in cpu_runtimes.config_variants():
        config = made[variant.name]
        assert (config.name, config.max_batch_size, list(config.input), list(config.output)) == (
            "m_core",
            8,
            list(core().input),
            list(core().output),
        )
        assert config.backend == variant.backend and not config.platform
        assert {key: value.string_value for key, value in config.parameters.items()} == dict(variant.parameters)
        assert [(group.kind, group.count) for group in config.instance_group] == [(variants.KIND_CPU, variant.instances)]
        assert config.dynamic_batching.max_queue_delay_microseconds == variant.max_queue_delay_microseconds
        assert config.dynamic_batching.default_queue_policy == core().dynamic_batching.default_queue_policy
        assert list(config.model_warmup) == (list(core().model_warmup) if variant.warmup else [])
        assert config.default_model_filename == variant.default_model_filename
    assert made["cpu_openvino_backend"].backend == "openvino" and made["cpu_openvino_backend"].default_model_filename == "model.onnx"


def test_a_core_s_settings_override_the_registry_s():
    settings = variants.CoreSettings.parse(
        {
            "max_queue_size": 19,
            "max_queue_delay_microseconds": 2000,
            "instances": 1,
            "cpu_int8": {"like": "cpu_onnxruntime", "about": "no INT8 rung"},
            "cpu_openvino": {"parameters": {"precision": "fp32"}, "instances": 3},
            "cpu_openvino_backend": {"default_model_filename": "model_fp16.onnx"},
            "cpu": {"warmup": [{"name": "big", "batch_size": 2, "dims": [3, 128, 128]}]},
        }
    )
    made = variants.variants(core(), settings)
    assert {made[name].dynamic_batching.default_queue_policy.max_queue_size for name in made} == {19}
    assert {made[name].dynamic_batching.max_queue_delay_microseconds for name in made} == {2000}
    assert made["cpu_openvino"].instance_group[0].count == 3 and made["cpu"].instance_group[0].count == 1
    assert made["cpu_openvino"].parameters["precision"].string_value == "fp32"
    assert made["cpu_int8"].parameters == made["cpu_onnxruntime"].parameters
    assert made["cpu_openvino_backend"].default_model_filename == "model_fp16.onnx"
    # The sample's fixed dims are the input's: a warm-up follows the input's size.
    (sample,) = made["cpu"].model_warmup
    assert (sample.name, sample.batch_size, list(sample.inputs["images"].dims)) == ("big", 2, [3, 64, 64])
    said = " ".join(variants.header("cpu_int8", settings, "[stages.recognizer.cpu]"))
    assert (
        "no INT8 rung" in said and "as cpu_onnxruntime" in said and "From pipeline.toml [stages.recognizer.cpu]: max_queue_size 19" in said
    )


@pytest.mark.parametrize(
    "data, message",
    [
        ({"max_queue_sizes": 4}, "unknown key 'max_queue_sizes'"),
        ({"max_queue_size": 0}, "max_queue_size must be an integer >= 1"),
        ({"cpu_tvm": {}}, "unknown key 'cpu_tvm'"),
        ({"cpu": {"like": "cpu"}}, "like 'cpu' is not another variant"),
        ({"cpu": {"instance": 2}}, r"\[cpu\]: unknown key\(s\) instance"),
        ({"cpu": {"parameters": {"precision": 32}}}, "parameters.precision must be a string"),
        ({"cpu": {"warmup": [{"name": "a", "batch_size": 1}]}}, "each sample is"),
    ],
)
def test_a_cpu_table_s_mistakes_name_the_table_and_the_key(data, message):
    with pytest.raises(model_config.ConfigError, match=rf"\[core\] cpu: .*{message}"):
        variants.CoreSettings.parse(data, "[core] cpu")


def test_rendering_is_text_format_that_parses_back_to_the_config():
    for config in variants.variants(core()).values():
        text = render.render(config, ["# a header"])
        assert text.startswith('# a header\nname: "m_core"\n')
        assert model_config.parse_config_text(text) == config
        assert "dims: [3, 64, 64]" in text
