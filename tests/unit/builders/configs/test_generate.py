"""builders.configs.generate: every config of a pipeline folder from its spec, and the command that writes them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from builders import cli, model_configs, spec
from builders.configs import generate, header_line
from builders.sources.base import RecipeError
from vision_serving import consistency, cpu_runtimes, layout, model_config, preprocessing
from vision_serving.model_config import ConfigError
from vision_serving.tasks import classification, registry
from vision_serving.tasks.base import Role

CLASSIFIER = layout.pipeline("image_classifier")
TEXT_READER = layout.pipeline("text_reader")
SHIPPED = [p.name for p in layout.pipelines()]


def copy(source: layout.Pipeline, tmp_path: Path) -> layout.Pipeline:
    """A pipeline folder's spec and generated files, without the built artifacts."""
    shutil.copytree(source.repository, tmp_path / source.name, ignore=shutil.ignore_patterns("*.onnx", "*.json", "__pycache__"))
    return layout.pipeline(source.name, tmp_path)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def configs(repository: Path, *options: str) -> int:
    return cli.main(["configs", *options, "--model-repository", str(repository)])


# --------------------------------------------------------------------------- the shipped pipelines


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_file_is_its_generation_and_says_so_on_its_first_line(name):
    pipeline = layout.pipeline(name)
    files = generate.files(spec.load(pipeline))
    assert [str(path.relative_to(pipeline.repository)) for path, text in files.items() if path.read_text() != text] == []
    for path, text in files.items():
        assert text.splitlines()[0] == header_line(name, "#"), path
    every = {
        path
        for path in pipeline.repository.rglob("*")
        if path.is_file() and path.suffix in (".pbtxt", ".py", "") and "__pycache__" not in path.parts
    }
    hand = sorted(str(path.relative_to(pipeline.repository)) for path in every - set(files))
    assert hand in ([], [f"{name}_postprocess/labels.txt"]), "every config and entry point is generated"
    # Every core and second stage has every CPU variant.
    cores = [pipeline.model_name("core"), *(pipeline.stage_name(role) for role in spec.load(pipeline).stages)]
    for core in cores:
        assert {p.stem for p in (pipeline.repository / core / "configs").glob("*.pbtxt")} == {
            v.name for v in cpu_runtimes.config_variants()
        }


@pytest.mark.parametrize("name", SHIPPED)
def test_the_generated_folder_passes_the_consistency_check(name):
    assert consistency.check_pipeline(layout.pipeline(name).repository) == []


def test_the_text_reader_s_wiring_profiles_and_stage_parameters_are_derived():
    made = generate.configs(spec.load(TEXT_READER))
    (pre, core, post) = made.ensemble.ensemble_scheduling.step
    assert dict(pre.output_map) == {"DET_INPUT": "det_input", "DET_IMAGE": "det_image", "DET_TRANSFORM": "det_transform"}
    assert dict(core.input_map) == {"images": "det_input"} and dict(core.output_map) == {"probability": "probability"}
    assert dict(post.input_map) == {"PROBABILITY": "probability", "DET_IMAGE": "det_image", "DET_TRANSFORM": "det_transform"}
    parameters = {key: value.string_value for key, value in made.postprocess.parameters.items()}
    assert parameters["recognizer_model"] == "text_reader_core_recognizer" and parameters["recognizer_output"] == "indices,scores"
    assert parameters["classifier_max_batch"] == "16" and parameters["classifier_input"] == "images"
    # One profile per recognizer width: listed by the instance group, each warmed up at opt and max.
    recognizer = made.stages["recognizer"]
    assert list(recognizer.instance_group[0].profile) == [str(i) for i in range(6)]
    assert [w.name for w in recognizer.model_warmup][:2] == ["width_320_opt", "width_320_max"]
    assert recognizer.parameters["execution_context_allocation_strategy"].string_value == "ON_PROFILE_CHANGE"
    assert [w.name for w in made.core.model_warmup] == ["photo_opt", "photo_max", "wide_opt", "wide_max", "tall_opt", "tall_max"]


def test_a_step_states_the_library_s_defaults_unless_its_spec_says_otherwise(tmp_path):
    pipeline = copy(CLASSIFIER, tmp_path)
    made = generate.configs(spec.load(pipeline))
    stated = {key: value.string_value for key, value in made.preprocess.parameters.items()}
    assert {key: stated[key] for key in preprocessing.LIMIT_DEFAULTS} == preprocessing.LIMIT_DEFAULTS
    assert stated["drift_window"] == "512" and stated["cpu_share"] == "1.0" and stated["decode_threads"] == "1"
    assert made.postprocess.parameters["cpu_share"].string_value == "0.5"  # the spec's
    edit(pipeline.recipe, "[preprocess]\n", "[preprocess]\nmax_image_bytes = 1048576\ndrift_enabled = false\n")
    made = generate.configs(spec.load(pipeline))
    assert made.preprocess.parameters["max_image_bytes"].string_value == "1048576"
    assert made.preprocess.parameters["drift_enabled"].string_value == "false"


# --------------------------------------------------------------------------- one edit, one command


def test_a_new_input_size_and_class_count_is_one_edit_of_the_spec_and_one_command(tmp_path):
    pipeline = copy(CLASSIFIER, tmp_path)
    edit(pipeline.recipe, "dims = [3, 224, 224] }]", "dims = [3, 256, 256] }]")
    edit(pipeline.recipe, "dims = [1000] }]", "dims = [10] }]")
    assert configs(tmp_path, "--pipeline", pipeline.name, "--check") == 1
    written = model_configs.write(pipeline, log=lambda _: None)
    assert sorted(path.relative_to(pipeline.repository).as_posix() for path in written) == sorted(
        [
            "image_classifier_core/config.pbtxt",
            *(f"image_classifier_core/configs/{variant.name}.pbtxt" for variant in cpu_runtimes.config_variants()),
            "image_classifier_preprocess/config.pbtxt",
            "image_classifier_postprocess/config.pbtxt",
        ]
    )
    core = model_config.load_config(pipeline.core_dir)
    assert [list(sample.inputs["images"].dims) for sample in core.model_warmup] == [[3, 256, 256], [3, 256, 256]]
    for variant in cpu_runtimes.config_variants():
        config = model_config.load_config(pipeline.core_dir, variant.name)
        assert list(config.input[0].dims) == [3, 256, 256] and list(config.output[0].dims) == [10], variant.name
    assert list(model_config.tensor(model_config.load_config(pipeline.model_dir("preprocess")), "PIXELS", "output").dims) == [3, 256, 256]
    assert list(model_config.tensor(model_config.load_config(pipeline.model_dir("postprocess")), "LOGITS").dims) == [10]
    assert model_configs.write(pipeline, log=lambda _: None) == []  # nothing left to do
    assert configs(tmp_path, "--pipeline", pipeline.name, "--check") == 0


def test_a_tiling_table_makes_a_detection_pipeline_tiled(tmp_path):
    """The face detector with ``[tiling]``: no core step (the postprocess reaches the core by BLS), the request's
    optional TILING, the tiles preprocessor's outputs, the settings in both Python steps, and a core queue and timeout
    for a photo's ceil(max_tiles / max_batch_size) core requests."""
    pipeline = copy(layout.pipeline("face_detector"), tmp_path)
    untiled = model_config.load_config(pipeline.core_dir).dynamic_batching.default_queue_policy
    pipeline.recipe.write_text(pipeline.recipe.read_text() + '\n[tiling]\nmax_tiles = 32\nmerge = "nms"\n')
    assert model_configs.write(pipeline, log=lambda _: None)
    ensemble = model_config.load_config(pipeline.repository / pipeline.name)
    assert [step.model_name for step in ensemble.ensemble_scheduling.step] == ["face_detector_preprocess", "face_detector_postprocess"]
    assert "TILING" in [tensor.name for tensor in ensemble.input]
    preprocess = model_config.load_config(pipeline.model_dir("preprocess"))
    assert [tensor.name for tensor in preprocess.output] == ["TILES", "TILE_BOXES", "TILE_TRANSFORMS", "IMAGE_SIZE"]
    postprocess = model_config.load_config(pipeline.model_dir("postprocess"))
    parameters = {key: value.string_value for key, value in postprocess.parameters.items()}
    assert parameters["core_model"] == "face_detector_core" and parameters["core_max_batch"] == "16"
    for config in (preprocess, postprocess):
        stated = {key: value.string_value for key, value in config.parameters.items()}
        assert (stated["max_tiles"], stated["tile_merge"], stated["tile_overlap"], stated["tile_size"]) == ("32", "nms", "0.2", "input")
    core = model_config.load_config(pipeline.core_dir)
    policy = core.dynamic_batching.default_queue_policy
    assert policy.default_timeout_microseconds == 2 * untiled.default_timeout_microseconds  # ceil(32 / 16) requests
    assert policy.max_queue_size >= 2 * untiled.max_queue_size
    assert consistency.check_pipeline(pipeline.repository) == []


def test_a_hand_edited_generated_file_is_named_with_its_field_by_the_check(tmp_path, capsys):
    pipeline = copy(CLASSIFIER, tmp_path)
    variant = pipeline.core_dir / "configs" / "cpu_openvino.pbtxt"
    edit(variant, "max_queue_size: 16", "max_queue_size: 17")
    (pipeline.model_dir("preprocess") / "1" / "model.py").unlink()
    capsys.readouterr()
    assert configs(tmp_path, "--all", "--check") == 1
    out = capsys.readouterr().out
    assert f"differs from its generation: {variant}: dynamic_batching.default_queue_policy.max_queue_size is 17, generated 16" in out
    assert f"{pipeline.model_dir('preprocess') / '1' / 'model.py'}: missing" in out
    assert "2 file(s) to regenerate: edit pipeline.toml, not a generated file" in out
    assert configs(tmp_path, "--all") == 0 and configs(tmp_path, "--all", "--check") == 0


def test_a_stage_whose_dims_its_profiles_do_not_fit_is_refused_in_one_line(tmp_path):
    pipeline = copy(TEXT_READER, tmp_path)
    edit(
        pipeline.recipe,
        '{ name = "images", datatype = "FP32", dims = [3, 48, -1] }',
        '{ name = "images", datatype = "FP32", dims = [3, 32, -1] }',
    )
    with pytest.raises(
        ConfigError, match=r"model 'text_reader_core_recognizer': profile 'width 320' \[3, 48, 320\]\.\.\[3, 48, 320\] does not fit"
    ):
        generate.configs(spec.load(pipeline))


def test_a_pipeline_must_be_chosen(tmp_path, capsys):
    copy(CLASSIFIER, tmp_path)
    copy(TEXT_READER, tmp_path)
    assert configs(tmp_path) == 2
    assert "error: choose a pipeline with --pipeline NAME, or --all (pipelines: image_classifier, text_reader)" in capsys.readouterr().err
    assert configs(tmp_path, "--all", "--pipeline", "text_reader") == 2
    assert configs(tmp_path, "--pipeline", "nothing") == 2


# --------------------------------------------------------------------------- a spec's mistakes


@pytest.mark.parametrize(
    "old, new, message",
    [
        ('task = "classification"', 'task = "captioning"', "task 'captioning' is not one of classification, "),
        ('task = "classification"\n', "", "task is missing"),
        ('datatype = "UINT8"', 'datatype = "UINT9"', r"\[core\]: inputs: tensor 'images': datatype 'UINT9' is not one of"),
        ("dims = [3, 224, 224]", "dims = [3, 0, 224]", r"tensor 'images': dims must be a list of sizes \(-1: any\)"),
        ("max_queue_delay_microseconds = 500", "max_queue_delays = 500", r"\[core\]: unknown key\(s\) max_queue_delays"),
        ("top_k = 5", "top_k = { a = 1 }", r"\[postprocess\]: top_k must be a string, a number"),
        ("instances = 2", "instances = 0", r"\[preprocess\]: instances must be an integer >= 1, got 0"),
        ("max_queue_size = 16\n\n[core]", "max_queue_size = 16\n\n[cores]", r"unknown key\(s\) cores"),
    ],
)
def test_a_spec_s_mistake_is_one_line_naming_the_file_and_the_key(tmp_path, old, new, message):
    pipeline = copy(CLASSIFIER, tmp_path)
    edit(pipeline.recipe, old, new)
    with pytest.raises(RecipeError, match=message) as raised:
        spec.load(pipeline)
    assert str(raised.value).startswith(str(pipeline.recipe)) and "\n" not in str(raised.value)


def test_a_task_s_parameter_mistake_names_the_model(tmp_path):
    pipeline = copy(layout.pipeline("face_detector"), tmp_path)
    edit(pipeline.recipe, 'head = "mediapipe_ssd"', 'head = "mediapipe_ssdd"')
    with pytest.raises(ConfigError, match="face_detector_postprocess"):
        generate.configs(spec.load(pipeline))


# --------------------------------------------------------------------------- a new task: its module, one registry line, a spec


class CountTask(classification.ClassificationTask):
    """A throwaway task (what a new task's module holds): the core's one FP32 output in, a COUNT out, and an optional
    request input; registered by one line (the monkeypatch below)."""

    name = "count"

    def config_roles(self, config):
        inputs = (Role("values", "FP32", (None,), name="VALUES", from_core=True), Role("limit", "INT32", (1,), optional=True, name="LIMIT"))
        return inputs, (Role("count", "INT32", (1,), name="COUNT"),)


SPEC = """
description = "a throwaway pipeline of a new task"
task = "count"
max_batch_size = 4

[preprocess]
mean = [0.0, 0.0, 0.0]
std = [255.0, 255.0, 255.0]
interpolation = "bilinear"
resize_shorter_side = 64

[core]
inputs = [{ name = "images", datatype = "UINT8", dims = [3, 64, 64] }]
outputs = [{ name = "values", datatype = "FP32", dims = [7] }]

[source]
kind = "onnx"
path = "model.onnx"
sha256 = "%s"
""" % ("0" * 64)


def test_a_new_task_is_its_module_one_registry_line_and_a_spec(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.TASKS, "count", CountTask())
    pipeline = layout.Pipeline("counter", tmp_path / "counter")
    pipeline.repository.mkdir()
    pipeline.recipe.write_text(SPEC)
    written = model_configs.write(pipeline, log=lambda _: None)
    assert {path.relative_to(pipeline.repository).parts[0] for path in written} == {"counter", *(f"counter_{r}" for r in layout.ROLES)}
    made = generate.configs(spec.load(pipeline))
    assert [(t.name, list(t.dims)) for t in made.ensemble.input] == [("IMAGE", [1]), ("LIMIT", [1])]
    assert [(t.name, list(t.dims)) for t in made.ensemble.output] == [("COUNT", [1])]
    assert [(t.name, list(t.dims)) for t in made.postprocess.input] == [("VALUES", [7]), ("LIMIT", [1])]
    assert made.postprocess.parameters["task"].string_value == "count"
    assert [(t.name, list(t.dims)) for t in made.preprocess.output] == [("PIXELS", [3, 64, 64])]
    assert model_configs.stale(pipeline) == {}
