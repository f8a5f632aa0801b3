"""vision_serving.config_variants: a core's CPU variants and the mirrored dims, generated from its config.pbtxt."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from builders import model_configs
from vision_serving import config_variants, consistency, cpu_runtimes, layout, model_config

CLASSIFIER = layout.pipeline("image_classifier")
TEXT_READER = layout.pipeline("text_reader")
CONFIGS_ONLY = shutil.ignore_patterns("1", "__pycache__")

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


@pytest.fixture
def pipeline(tmp_path) -> layout.Pipeline:
    """A model repository holding a copy of the classifier pipeline's configs (no version folders)."""
    shutil.copytree(CLASSIFIER.repository, tmp_path / CLASSIFIER.name, ignore=CONFIGS_ONLY)
    return layout.pipeline(CLASSIFIER.name, tmp_path)


def problems(pipeline: layout.Pipeline) -> list[str]:
    models, parse_problems = consistency.load_repository(pipeline.repository)
    assert parse_problems == []
    return config_variants.check(pipeline, models)


def edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, count))


# --------------------------------------------------------------------------- a core config + the registry -> the variants


def test_every_variant_of_the_registry_has_the_core_s_tensors_and_its_own_runtime_settings():
    made = config_variants.variants(core())
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
        assert [(group.kind, group.count) for group in config.instance_group] == [(config_variants.KIND_CPU, variant.instances)]
        assert config.dynamic_batching.max_queue_delay_microseconds == variant.max_queue_delay_microseconds
        assert config.dynamic_batching.default_queue_policy == core().dynamic_batching.default_queue_policy  # config.pbtxt's queue
        assert list(config.model_warmup) == (list(core().model_warmup) if variant.warmup else [])
        assert config.default_model_filename == variant.default_model_filename
    assert made["cpu_openvino_backend"].backend == "openvino" and made["cpu_openvino_backend"].default_model_filename == "model.onnx"


def test_a_core_s_settings_override_the_registry_s():
    settings = config_variants.CoreSettings.parse(
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
    made = config_variants.variants(core(), settings)
    assert {made[name].dynamic_batching.default_queue_policy.max_queue_size for name in made} == {19}
    assert {made[name].dynamic_batching.max_queue_delay_microseconds for name in made} == {2000}
    assert made["cpu_openvino"].instance_group[0].count == 3 and made["cpu"].instance_group[0].count == 1
    assert made["cpu_openvino"].parameters["precision"].string_value == "fp32"
    assert made["cpu_int8"].parameters == made["cpu_onnxruntime"].parameters
    assert made["cpu_openvino_backend"].default_model_filename == "model_fp16.onnx"
    # The sample's fixed dims are the input's: a warm-up follows the input's size.
    (sample,) = made["cpu"].model_warmup
    assert (sample.name, sample.batch_size, list(sample.inputs["images"].dims)) == ("big", 2, [3, 64, 64])
    header = config_variants.header("mine", "cpu_int8", settings)
    assert header[0] == "# Generated by `python -m builders configs --pipeline mine`: edit config.pbtxt, then run it."
    assert "no INT8 rung" in " ".join(header) and "as cpu_onnxruntime" in " ".join(header)


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
def test_a_settings_file_s_mistakes_name_the_file_and_the_key(data, message):
    with pytest.raises(model_config.ConfigError, match=rf"m_core/configs/variants.toml: .*{message}"):
        config_variants.CoreSettings.parse(data, "m_core/configs/variants.toml")


def test_rendering_is_text_format_that_parses_back_to_the_config():
    for config in config_variants.variants(core()).values():
        text = config_variants.render(config, ["# a header"])
        assert text.startswith('# a header\nname: "m_core"\n')
        assert model_config.parse_config_text(text) == config
        assert "dims: [3, 64, 64]" in text


# --------------------------------------------------------------------------- the shipped pipelines


@pytest.mark.parametrize("name", [p.name for p in layout.pipelines()])
def test_every_shipped_pipeline_s_files_are_their_generation(name):
    pipeline = layout.pipeline(name)
    files = config_variants.pipeline_files(pipeline)
    assert {path for path in files if path.parent.name == "configs"} == {
        pipeline.repository / core / "configs" / f"{variant.name}.pbtxt"
        for core in config_variants.core_names(pipeline, [p.name for p in pipeline.repository.iterdir()])
        for variant in cpu_runtimes.config_variants()
    }
    stale = [str(path.relative_to(pipeline.repository)) for path, text in files.items() if path.read_text() != text]
    assert stale == [], f"run `python -m builders configs --pipeline {name}`"
    assert problems(pipeline) == []


def test_the_ensemble_s_maps_say_which_tensors_mirror_the_core():
    models, _ = consistency.load_repository(TEXT_READER.repository)
    found = config_variants.mirrors(models["text_reader"][""], "text_reader_core")
    assert found == [
        config_variants.Mirror("text_reader_postprocess", "input", "PROBABILITY", "output", "probability"),
        config_variants.Mirror("text_reader_preprocess", "output", "DET_INPUT", "input", "images"),
    ]


# --------------------------------------------------------------------------- a change in config.pbtxt, one command


def test_a_new_input_size_and_class_count_is_one_edit_and_one_command(pipeline):
    core_config = pipeline.core_dir / "config.pbtxt"
    edit(core_config, "dims: [ 3, 224, 224 ]", "dims: [ 3, 256, 256 ]")  # the input only: not its warm-up samples
    edit(core_config, "dims: [ 1000 ]", "dims: [ 10 ]")
    assert len(problems(pipeline)) == 6 + 2  # six variants, the preprocess's output, the postprocess's input
    preprocess_comments = [line for line in (pipeline.model_dir("preprocess") / "config.pbtxt").read_text().splitlines() if "#" in line]
    written = model_configs.write(pipeline, log=lambda _: None)
    assert sorted(path.relative_to(pipeline.repository).as_posix() for path in written) == sorted(
        [
            "image_classifier_core/config.pbtxt",  # its warm-up samples
            *(f"image_classifier_core/configs/{variant.name}.pbtxt" for variant in cpu_runtimes.config_variants()),
            "image_classifier_preprocess/config.pbtxt",
            "image_classifier_postprocess/config.pbtxt",
        ]
    )
    assert problems(pipeline) == []
    core = model_config.load_config(pipeline.core_dir)
    assert [list(sample.inputs["images"].dims) for sample in core.model_warmup] == [[3, 256, 256], [3, 256, 256]]
    for variant in cpu_runtimes.config_variants():
        config = model_config.load_config(pipeline.core_dir, variant.name)
        assert list(config.input[0].dims) == [3, 256, 256] and list(config.output[0].dims) == [10], variant.name
    assert list(model_config.tensor(model_config.load_config(pipeline.model_dir("preprocess")), "PIXELS", "output").dims) == [3, 256, 256]
    assert list(model_config.tensor(model_config.load_config(pipeline.model_dir("postprocess")), "LOGITS").dims) == [10]
    # The hand-written configs keep their comments: only the dims changed.
    text = (pipeline.model_dir("preprocess") / "config.pbtxt").read_text()
    assert [line for line in text.splitlines() if "#" in line] == preprocess_comments
    assert "    dims: [ 3, 256, 256 ]\n" in text
    assert model_configs.write(pipeline, log=lambda _: None) == []  # nothing left to do


def test_a_second_stage_s_fixed_dims_reach_its_warm_up_samples(tmp_path):
    shutil.copytree(TEXT_READER.repository, tmp_path / TEXT_READER.name, ignore=CONFIGS_ONLY)
    copy = layout.pipeline(TEXT_READER.name, tmp_path)
    recognizer = copy.stage_dir("recognizer")
    edit(recognizer / "config.pbtxt", "dims: [ 3, 48, -1 ]", "dims: [ 3, 32, -1 ]")
    model_configs.write(copy, log=lambda _: None)
    assert problems(copy) == []
    for variant in ("", "cpu"):
        config = model_config.load_config(recognizer, variant or None)
        shapes = {tuple(sample.inputs["images"].dims) for sample in config.model_warmup}
        assert shapes and all(shape[:2] == (3, 32) for shape in shapes), (variant, shapes)
    # The CPU warm-up of configs/variants.toml kept its width (a dynamic dim).
    assert {tuple(s.inputs["images"].dims) for s in model_config.load_config(recognizer, "cpu").model_warmup} == {(3, 32, 320)}


# --------------------------------------------------------------------------- the drift check


def test_a_hand_edited_variant_is_one_line_naming_the_file_and_the_field(pipeline):
    edit(pipeline.core_dir / "configs" / "cpu_openvino.pbtxt", "max_queue_size: 16", "max_queue_size: 17")
    (problem,) = problems(pipeline)
    assert "\n" not in problem
    assert problem.startswith(
        "image_classifier_core/configs/cpu_openvino.pbtxt differs from what generation gives: "
        "dynamic_batching.default_queue_policy.max_queue_size is 17, generated 16: "
    )
    assert problem.endswith("then run `python -m builders configs --pipeline image_classifier`")


def test_a_variant_edited_where_its_settings_live_is_not_drift(pipeline):
    settings = pipeline.core_dir / "configs" / "variants.toml"
    edit(settings, "max_queue_size = 16", "max_queue_size = 17")
    assert [p.split(" differs")[0] for p in problems(pipeline)] == [
        f"image_classifier_core/configs/{variant.name}.pbtxt" for variant in cpu_runtimes.config_variants()
    ]
    model_configs.write(pipeline, log=lambda _: None)
    assert problems(pipeline) == []
    assert model_config.load_config(pipeline.core_dir, "cpu").dynamic_batching.default_queue_policy.max_queue_size == 17


def test_a_mirrored_dim_edited_by_hand_is_named(pipeline):
    edit(pipeline.model_dir("postprocess") / "config.pbtxt", "dims: [ 1000 ]", "dims: [ 1001 ]")
    assert problems(pipeline) == [
        "image_classifier_postprocess/config.pbtxt: input 'LOGITS' is TYPE_FP32[1001], but the ensemble maps it from "
        "image_classifier_core's output 'logits', TYPE_FP32[1000] in its config.pbtxt: run `python -m builders configs "
        "--pipeline image_classifier`"
    ]


def test_a_missing_variant_and_a_broken_settings_file_are_reported(pipeline):
    (pipeline.core_dir / "configs" / "cpu_openvino_fp32.pbtxt").unlink()
    assert problems(pipeline) == [
        "image_classifier_core/configs/cpu_openvino_fp32.pbtxt is missing (every core has every CPU variant): "
        "run `python -m builders configs --pipeline image_classifier`"
    ]
    (pipeline.core_dir / "configs" / "variants.toml").write_text("max_queue_size = 'sixteen'\n")
    assert problems(pipeline) == ["image_classifier_core/configs/variants.toml: max_queue_size must be an integer >= 1, got 'sixteen'"]


# --------------------------------------------------------------------------- editing hand-written configs in place


def test_in_place_edits_keep_comments_and_read_either_dims_form():
    text = '# top\nname: "m"\noutput [\n  {\n    name: "A"  # the a\n    data_type: TYPE_FP32\n    dims: 4 dims: 5\n  }\n]\n'
    expected = model_config.parse_config_text(text)
    expected.output[0].dims[:] = [7]
    expected.output[0].data_type = model_config.model_config_pb2.TYPE_FP16
    edited = config_variants.retyped_text(text, "m/config.pbtxt", expected, [("output", "A")])
    assert edited == '# top\nname: "m"\noutput [\n  {\n    name: "A"  # the a\n    data_type: TYPE_FP16\n    dims: [ 7 ]\n  }\n]\n'
    with pytest.raises(model_config.ConfigError, match=r"m/config\.pbtxt: output 'A': cannot update data_type and dims in place"):
        config_variants.retyped_text(text.replace("    data_type: TYPE_FP32\n", ""), "m/config.pbtxt", expected, [("output", "A")])
