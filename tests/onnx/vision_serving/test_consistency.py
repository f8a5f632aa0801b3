"""The repository consistency check, on the real repository and on broken copies of a pipeline."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.pipelines import built_classifier
from vision_serving import consistency, layout

CLASSIFIER = layout.pipeline("image_classifier")
SEGMENTER = layout.pipeline("person_segmenter")
DETECTOR = layout.pipeline("face_detector")
# Built artifacts, never part of a copy (served_precision.json names an ONNX that is not copied).
IGNORED = shutil.ignore_patterns("*.onnx", "*.onnx.json", "*.plan", "*.plan.json", "served_precision.json", "__pycache__")


def copy_pipeline(source: layout.Pipeline, root: Path) -> layout.Pipeline:
    """A copy of one pipeline folder (without built artifacts) inside the model repository ``root``."""
    target = root / source.name
    shutil.copytree(source.repository, target, ignore=IGNORED)
    return layout.Pipeline.at(target)


@pytest.fixture
def root(tmp_path) -> Path:
    """A model repository holding a copy of the image_classifier pipeline only."""
    repository = tmp_path / "model_repository"
    copy_pipeline(CLASSIFIER, repository)
    return repository


@pytest.fixture
def copied(root) -> layout.Pipeline:
    return layout.pipeline(CLASSIFIER.name, root)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def model_file(pipeline: layout.Pipeline, model: str, file: str) -> Path:
    """``model`` is a role (preprocess, core, postprocess) or "ensemble"."""
    folder = pipeline.ensemble_dir if model == "ensemble" else pipeline.model_dir(model)
    return folder / file


def test_real_repository_is_consistent():
    assert {CLASSIFIER.name, SEGMENTER.name, DETECTOR.name} <= {p.name for p in layout.pipelines()}
    assert consistency.check_repository(layout.MODEL_REPOSITORY) == []


def test_copy_of_one_pipeline_is_consistent(root):
    assert consistency.check_repository(root) == []


def test_command_line_reports_ok():
    result = subprocess.run([sys.executable, "-m", "vision_serving.consistency"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    pipelines = layout.pipelines()
    # Each pipeline: its ensemble, three composing models and the second stages its recipe builds.
    models = sum(4 + len(tomllib.loads(p.recipe.read_text()).get("stages", {})) for p in pipelines)
    expected = f"ok: {len(pipelines)} pipelines ({', '.join(p.name for p in pipelines)}), {models} models"
    assert result.stdout.startswith(expected), result.stdout


def test_command_line_lists_problems_and_exits_1(root, copied):
    shutil.rmtree(copied.core_dir)
    result = subprocess.run(
        [sys.executable, "-m", "vision_serving.consistency", "--repository", str(root)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "problem: image_classifier: no model folder 'image_classifier_core'" in result.stdout
    assert f"problem(s) in {root}" in result.stdout


@pytest.mark.parametrize(
    "model, file, old, new, problem",
    [
        (
            "ensemble",
            "config.pbtxt",
            'output_map { key: "PIXELS" value: "pixels" }',
            'output_map { key: "PIXELS" value: "pixelz" }',
            "'pixels' is not produced by an earlier step",
        ),
        (
            "ensemble",
            "config.pbtxt",
            'input_map { key: "images"',
            'input_map { key: "image"',
            "input_map key 'image' is not an input of the model",
        ),
        ("core", "configs/cpu.pbtxt", "dims: [1000]", "dims: [1001]", "differ in inputs, outputs or max_batch_size"),
        ("core", "config.pbtxt", "dims: [3, 224, 224]", "dims: [3, 256, 256]", "expects TYPE_UINT8[3, 256, 256]"),
        (
            "core",
            "configs/cpu.pbtxt",
            "dims: [3, 224, 224] zero_data",
            "dims: [3, 256, 256] zero_data",
            "configs/cpu.pbtxt: model_warmup 'zeros_batch_1': 'images' dims [3, 256, 256] do not fit the input's [3, 224, 224]",
        ),
        (
            "core",
            "configs/cpu.pbtxt",
            "data_type: TYPE_UINT8 dims: [3, 224, 224] zero_data",
            "data_type: TYPE_FP32 dims: [3, 224, 224] zero_data",
            "model_warmup 'zeros_batch_1': 'images' is TYPE_FP32, the input is TYPE_UINT8",
        ),
        (
            "core",
            "configs/cpu.pbtxt",
            "batch_size: 1\n",
            "batch_size: 512\n",
            "model_warmup 'zeros_batch_1': batch_size 512 is not between 1 and max_batch_size",
        ),
        (
            "core",
            "configs/cpu.pbtxt",
            'inputs { key: "images"',
            'inputs { key: "image"',
            "model_warmup 'zeros_batch_1': 'image' is not an input of the model",
        ),
        (
            "postprocess",
            "config.pbtxt",
            "data_type: TYPE_FP32\n    dims: [1000]",
            "data_type: TYPE_FP16\n    dims: [1000]",
            "expects TYPE_FP16",
        ),
        ("preprocess", "config.pbtxt", 'string_value: "bicubic"', 'string_value: "lanczos"', "interpolation 'lanczos'"),
        (
            "preprocess",
            "config.pbtxt",
            'string_value: "NCHW"',
            'string_value: "NHWC"',
            "output dims [3, 224, 224] are not a 3-channel NHWC image",
        ),
        ("preprocess", "config.pbtxt", 'string_value: "2.0"', 'string_value: "0.5"', "resize_reducing_gap must be 0 (off) or >= 1"),
        ("preprocess", "config.pbtxt", 'string_value: "2.0"', 'string_value: "two"', "'resize_reducing_gap' must be a number"),
        ("postprocess", "config.pbtxt", 'string_value: "5"', 'string_value: "0"', "TOP_K must be between 1 and 1000"),
        (
            "postprocess",
            "config.pbtxt",
            'string_value: "128"',
            'string_value: "1024"',
            "drift_min_samples 1024 is larger than drift_window 512",
        ),
        ("preprocess", "config.pbtxt", 'string_value: "32" }', 'string_value: "0" }', "drift_update_every must be positive"),
        (
            "preprocess",
            "config.pbtxt",
            '{ key: "drift_window"',
            '{ key: "drift_windows"',
            "unknown parameter(s) drift_windows (its preprocessor",
        ),
        (
            "postprocess",
            "config.pbtxt",
            '{ key: "drift_window"',
            '{ key: "drift_features" value { string_value: "confidence,width" } },\n  { key: "drift_window"',
            "drift_features: unknown feature(s) width; this model's features: confidence, entropy, predicted_class",
        ),
        ("ensemble", "config.pbtxt", "max_batch_size: 32", "max_batch_size: 64", "ensemble max_batch_size 64 exceeds"),
        ("preprocess", "config.pbtxt", "data_type: TYPE_STRING", "data_type: TYPE_STRNG", "image_classifier_preprocess/config.pbtxt"),
        (
            "ensemble",
            "config.pbtxt",
            '    output_map { key: "CLASS_IDS" value: "CLASS_IDS" }\n',
            "",
            "output 'CLASS_IDS' is not produced by any step",
        ),
        (
            "ensemble",
            "config.pbtxt",
            'model_name: "image_classifier_core"',
            'model_name: "core"',
            "step 1 ('core'): no such model in the repository",
        ),
        (
            "core",
            "config.pbtxt",
            'name: "image_classifier_core"',
            'name: "core"',
            "name 'core' differs from its folder 'image_classifier_core'",
        ),
    ],
)
def test_broken_pipeline_is_reported(root, copied, model, file, old, new, problem):
    edit(model_file(copied, model, file), old, new)
    problems = consistency.check_repository(root)
    assert any(problem in p for p in problems), problems
    # Every problem names the pipeline it is in.
    assert all(p.startswith(f"{CLASSIFIER.name}: ") for p in problems), problems


def test_pipeline_missing_its_core_model(root, copied):
    shutil.rmtree(copied.core_dir)
    problems = consistency.check_repository(root)
    assert "image_classifier: no model folder 'image_classifier_core'" in problems, problems
    assert any("step 1 ('image_classifier_core'): no such model in the repository" in p for p in problems), problems


def test_pipeline_missing_its_ensemble(root, copied):
    shutil.rmtree(copied.ensemble_dir)
    assert consistency.check_repository(root) == ["image_classifier: no model folder 'image_classifier'"]


def test_duplicate_model_name_across_pipelines(root):
    segmenter = copy_pipeline(SEGMENTER, root)
    assert consistency.check_repository(root) == []
    # The same model in two pipelines: Triton refuses to load two models of one name
    # from its --model-repository folders.
    shutil.copytree(CLASSIFIER.model_dir("postprocess"), segmenter.repository / CLASSIFIER.model_name("postprocess"), ignore=IGNORED)
    problems = consistency.check_repository(root)
    assert "model 'image_classifier_postprocess' is in both image_classifier and person_segmenter: Triton needs unique names" in problems, (
        problems
    )


def test_repository_without_pipelines(tmp_path):
    (tmp_path / "image_classifier").mkdir()  # a folder without a recipe is not a pipeline
    assert consistency.check_repository(tmp_path) == [f"{tmp_path}: no pipeline (a folder with a pipeline.toml)"]


def test_onnx_io_must_match_the_core_config(root, copied):
    built = built_classifier()
    shutil.copy(built.onnx("fp32"), copied.onnx("fp32"))
    assert consistency.check_repository(root) == []
    for config in ("config.pbtxt", "configs/cpu.pbtxt"):
        edit(copied.core_dir / config, 'name: "logits"', 'name: "scores"')
    edit(copied.ensemble_dir / "config.pbtxt", 'key: "logits"', 'key: "scores"')
    problems = consistency.check_repository(root)
    assert any(f"{copied.onnx('fp32')}: ONNX outputs" in p for p in problems), problems


@pytest.fixture
def detector(tmp_path) -> tuple[Path, layout.Pipeline]:
    """A model repository holding a copy of the face_detector pipeline only."""
    repository = tmp_path / "model_repository"
    return repository, copy_pipeline(DETECTOR, repository)


PARAMETER = 'value: {{ string_value: "{}" }}'


@pytest.mark.parametrize(
    "model, file, old, new, problem",
    [
        # MediaPipe's options are all required, parsed, and must agree with each other and the tensors.
        ("postprocess", "config.pbtxt", '{ key: "num_layers" value { string_value: "4" } },\n', "", "head mediapipe_ssd: missing parameter(s) num_layers"),
        ("postprocess", "config.pbtxt", 'key: "min_scale"', 'key: "min_scael"', "unknown parameter(s) min_scael for head mediapipe_ssd"),
        ("postprocess", "config.pbtxt", 'key: "num_boxes" value { string_value: "896" }', 'key: "num_boxes" value { string_value: "897" }',
         "the anchor options give 896 anchors, num_boxes is 897"),
        ("postprocess", "config.pbtxt", 'key: "strides" value { string_value: "8,16,16,16" }', 'key: "strides" value { string_value: "8,16,16" }',
         "strides has 3 entries, num_layers is 4"),
        ("postprocess", "config.pbtxt", 'string_value: "WEIGHTED"', 'string_value: "DEFAULT"', "nms_algorithm 'DEFAULT' is not one of"),
        ("postprocess", "config.pbtxt", 'key: "max_detections" value { string_value: "100" }', 'key: "max_detections" value { string_value: "0" }',
         "max_detections must be positive"),
        ("postprocess", "config.pbtxt", 'key: "sigmoid_score" value { string_value: "true" }', 'key: "sigmoid_score" value { string_value: "yes" }',
         "head mediapipe_ssd: parameter sigmoid_score: expected true or false"),
        # Tensors by role: the keypoints output must have num_keypoints rows.
        ("postprocess", "config.pbtxt", "dims: [-1, 6, 2]", "dims: [-1, 5, 2]", "no output is FP32 [-1, 6, 2] (keypoints)"),
        # The anchors are laid on the input the preprocess makes.
        ("preprocess", "config.pbtxt", "dims: [128, 128, 3]", "dims: [192, 192, 3]",
         "head mediapipe_ssd lays its anchors on a 128x128 input, but the preprocess model makes 192x192"),
        # The letterbox is MediaPipe's own (aliasing) warp: no anti-aliased reduction.
        ("preprocess", "config.pbtxt", '{ key: "interpolation"', '{ key: "resize_reducing_gap" value { string_value: "2.0" } },\n  { key: "interpolation"',
         "resize_reducing_gap applies to resize center_crop only"),
        ("postprocess", "config.pbtxt", 'key: "input_size_height" value { string_value: "128" }',
         'key: "input_size_height" value { string_value: "256" }', "the anchor options give 1792 anchors, num_boxes is 896"),
        # Variable-size outputs: the ensemble declares them as the postprocess makes them.
        ("ensemble", "config.pbtxt", "dims: [-1, 4]", "dims: [4]", "output 'BOXES' is declared TYPE_FP32[4] but produced as TYPE_FP32[-1, 4]"),
    ],
)  # fmt: skip
def test_broken_detector_is_reported(detector, model, file, old, new, problem):
    root, copied = detector
    assert consistency.check_repository(root) == []
    edit(model_file(copied, model, file), old, new)
    problems = consistency.check_repository(root)
    assert any(problem in p for p in problems), problems
    assert all(p.startswith(f"{DETECTOR.name}: ") for p in problems), problems


def test_openvino_backend_config_is_checked_offline(copied):
    """configs/cpu_openvino_backend.pbtxt (Triton's openvino backend; not served by the local 2.51): the
    backend's parameters, batch padding, and the ladder's precision."""
    config = model_file(copied, "core", "configs/cpu_openvino_backend.pbtxt")
    text = config.read_text()
    edit(config, '"model.onnx"', '"model_int8_qdq.onnx"')
    edit(config, '"NUM_STREAMS"', '"NUM_STREAM"')
    edit(
        config,
        '{ key: "ENABLE_BATCH_PADDING" value { string_value: "YES" } }',
        '{ key: "ENABLE_BATCH_PADDING" value { string_value: "NO" } }',
    )
    copied.served_precision.parent.mkdir(parents=True, exist_ok=True)
    copied.served_precision.write_text('{"precision": "fp16", "onnx": "model_fp16.onnx", "onnx_sha256": "0"}')
    problems = "\n".join(consistency.check_pipeline(copied.repository))
    assert "parameter 'NUM_STREAM' is not read by the openvino backend" in problems
    assert "unless ENABLE_BATCH_PADDING is YES" in problems
    assert "default_model_filename 'model_int8_qdq.onnx' is not 'model_fp16.onnx'" in problems
    config.write_text(text)  # FP32, the exact reference, is always allowed
    assert not [p for p in consistency.check_pipeline(copied.repository) if "openvino" in p]
