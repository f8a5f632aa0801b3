"""The text_reading task: the postprocess config's parameters, the second stages it names, its outputs, drift
features, gate and dataset metrics (its client: tests/unit/devtools/test_clients.py). The reading itself is tested
against RapidOCR in the onnx and integration tiers; here the second stages are small stand-ins whose answers the
test states."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from vision_serving import layout, model_config, preprocessing, preprocessors
from vision_serving.model_config import ConfigError
from vision_serving.tasks import registry
from vision_serving.tasks.base import LabelledSample
from vision_serving.tasks.text_reading import preprocessor as text_preprocessor
from vision_serving.tasks.text_reading import reader, recognition, task

PIPELINE = layout.pipeline("text_reader")
POSTPROCESS = PIPELINE.model_dir("postprocess")
CHARACTERS = ["a", "b", "c"]


def config(**overrides: str) -> model_config.ModelConfig:
    parsed = model_config.load_config(POSTPROCESS)
    for key, value in overrides.items():
        if value:
            parsed.parameters[key].string_value = value
        else:
            del parsed.parameters[key]
    return parsed


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "text_reader_postprocess"
    folder.mkdir()
    (folder / "characters.json").write_text(json.dumps(CHARACTERS))
    return folder


def line(text: str, x: float, y: float, score: float = 0.9) -> reader.Line:
    box = np.array([[x, y], [x + 100, y], [x + 100, y + 20], [x, y + 20]], np.float32)
    return reader.Line(text, score, box, 0.8)


def test_the_task_is_registered_and_reads_the_shipped_config(model_dir):
    assert registry.for_config(config()) is task.TASK
    post = task.TASK.postprocessor(config(), model_dir)
    assert post.stage_models == {"classifier": "text_reader_core_classifier", "recognizer": "text_reader_core_recognizer"}
    assert post.max_batch == {"classifier": 16, "recognizer": 16}
    assert post.widths == recognition.DEFAULT_BUCKETS
    assert post.classes == [recognition.BLANK, *CHARACTERS, " "] and post.settings.use_classifier


def test_without_a_classifier_the_crops_are_read_as_cut(model_dir):
    post = task.TASK.postprocessor(config(classifier_model=""), model_dir)
    assert post.stage_models == {"recognizer": "text_reader_core_recognizer"} and not post.settings.use_classifier


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"recognizer_model": ""}, "no recognizer_model parameter"),
        ({"recognizer_max_batch": "0"}, "recognizer_max_batch must be a positive count"),
        ({"recognizer_widths": "320,300"}, "recognizer_widths must rise"),
        ({"recognizer_widths": "320,wide"}, "not a comma list of widths"),
    ],
)
def test_bad_parameters_are_one_line_naming_the_model(model_dir, overrides, message):
    with pytest.raises(ConfigError, match=message):
        task.TASK.postprocessor(config(**overrides), model_dir)


def test_the_check_names_a_stage_whose_batch_or_tensors_do_not_fit():
    assert task.TASK.check(config(), POSTPROCESS, None) == []
    (problem, *_) = task.TASK.check(config(recognizer_max_batch="64"), POSTPROCESS, None)
    assert "recognizer_max_batch 64 exceeds its max_batch_size 16" in problem
    missing = task.TASK.check(config(recognizer_output="logits,scores"), POSTPROCESS, None)
    assert any("has no output 'logits' of recognizer_output" in p for p in missing), missing
    with pytest.raises(ConfigError, match="must name 2 output"):
        task.TASK.postprocessor(config(recognizer_output="probabilities"), POSTPROCESS)
    assert "is not a model of" in task.TASK.check(config(classifier_model="nowhere"), POSTPROCESS, None)[0]


def test_a_batch_is_read_through_the_stages_and_padded_per_response(model_dir):
    post = task.TASK.postprocessor(config(classifier_model=""), model_dir)
    calls: list[tuple[int, ...]] = []

    async def recognizer(batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        calls.append(batch.shape)
        out = np.zeros((len(batch), batch.shape[-1] // 8, len(post.classes)), np.float32)
        out[:, 0, 1] = 1.0  # every crop reads "a"
        out[:, 1:, 0] = 1.0
        return recognition.greedy_steps(out)

    post.use_stages({"recognizer": recognizer})
    photo = np.full((64, 256, 3), 255, np.uint8)
    cv2.rectangle(photo, (20, 20), (200, 40), (0, 0, 0), -1)
    probability = np.zeros((1, 64, 256), np.float32)
    probability[0, 22:38, 22:198] = 0.9  # one line of text
    named = {
        "PROBABILITY": probability[np.newaxis],
        "DET_IMAGE": photo[np.newaxis],
        "DET_TRANSFORM": np.array([[1, 1, 0, 64, 256]], np.float32),
    }
    blank = {**named, "PROBABILITY": np.zeros_like(named["PROBABILITY"])}
    result = post.run(post.concatenate([post.parse(named), post.parse(blank)]))
    assert [[item.text for item in photo] for photo in result.lines] == [["a"], []]
    assert calls and all(shape[-1] in post.widths for shape in calls)
    first, second = result.split([1, 1])
    assert first["TEXTS"].tolist() == [[b"a"]] and first["COUNT"].tolist() == [[1]]
    assert second["TEXTS"].shape == (1, 0) and second["COUNT"].tolist() == [[0]]  # padded to its own count
    features = result.features()
    assert features.numeric["lines"].tolist() == [1.0, 0.0] and np.isnan(features.numeric["confidence"][1])


def test_a_non_finite_map_or_a_count_mismatch_fails_the_request(model_dir):
    post = task.TASK.postprocessor(config(), model_dir)
    named = {
        "PROBABILITY": np.full((1, 1, 32, 32), np.nan, np.float32),
        "DET_IMAGE": np.zeros((1, 32, 32, 3), np.uint8),
        "DET_TRANSFORM": np.zeros((1, 5), np.float32),
    }
    with pytest.raises(ValueError, match="NaN or Inf"):
        post.parse(named)
    with pytest.raises(ValueError, match="one of each per photo"):
        post.parse({**named, "DET_TRANSFORM": np.zeros((2, 5), np.float32)})


def test_without_connected_stages_the_postprocess_says_so(model_dir):
    post = task.TASK.postprocessor(config(), model_dir)
    with pytest.raises(RuntimeError, match="second stages are not connected"):
        post.stages()
    with pytest.raises(ConfigError, match="no recognizer model to call"):
        post.use_stages({"classifier": None})


def result_of(model_dir: Path, lines: list[list[reader.Line]]) -> task.TextReadingResult:
    return task.TextReadingResult(task.TASK.postprocessor(config(), model_dir), lines)


def test_the_gate_pairs_lines_by_box_and_counts_exact_lines_and_characters(model_dir):
    fp32 = result_of(model_dir, [[line("Gate", 0, 0), line("Road", 0, 50)], [line("Main", 0, 0)]])
    same = task.TASK.gate(fp32, fp32, task.TextReadingTask.gate_defaults)
    assert all(check["pass"] for check in same["checks"].values())
    other = result_of(model_dir, [[line("Gate", 1, 0), line("Rood", 0, 50)], []])
    report = task.TASK.gate(fp32, other, task.TextReadingTask.gate_defaults)
    metrics, checks = report["metrics"], report["checks"]
    assert metrics["exact_lines"] == pytest.approx(1 / 3)  # "Gate" read the same; "Road" misread; "Main" missing
    assert metrics["character_error_rate"] == pytest.approx(5 / 12)  # one substitution + 4 characters missing
    assert metrics["box_agreement"] == pytest.approx(2 * 2 / 5)
    assert not checks["exact_lines"]["pass"] and not checks["box_agreement"]["pass"]


def test_served_outputs_round_trip_to_lines(model_dir):
    original = result_of(model_dir, [[line("Gate", 0, 0), line("Rood", 0, 50)], [line("Main", 3, 4)]])
    by_role = {role: original.outputs()[name] for role, name in original.post.outputs.items() if name is not None}
    again = task.TASK.response_result(original.post, by_role)
    assert [[item.text for item in photo] for photo in again.lines] == [["Gate", "Rood"], ["Main"]]
    np.testing.assert_array_equal(again.lines[1][0].box, original.lines[1][0].box)


def test_a_dataset_is_images_with_their_lines_in_a_text_file_and_scored_by_exact_lines_and_cer(tmp_path, model_dir):
    ok, data = cv2.imencode(".png", np.zeros((8, 8, 3), np.uint8))
    assert ok
    for name, text in (("sign", "OPEN\nEXIT\n"), ("blank", None)):
        (tmp_path / f"{name}.png").write_bytes(data.tobytes())
        if text is not None:
            (tmp_path / f"{name}.txt").write_text(text)
    samples = task.TASK.dataset(tmp_path, task.TASK.postprocessor(config(), model_dir))
    assert [(s.path.name, s.target) for s in samples] == [("blank.png", []), ("sign.png", ["OPEN", "EXIT"])]
    read = result_of(model_dir, [[], [line("OPEN", 0, 0), line("EXTT", 0, 50)]])
    metrics = task.TASK.dataset_metrics([(read, samples)])
    assert metrics["exact_lines"] == pytest.approx(1 / 2)
    assert metrics["character_error_rate"] == pytest.approx(1 / len("OPEN\nEXIT"))
    assert task.TASK.dataset_metrics([(result_of(model_dir, [[]]), [LabelledSample(Path("x.png"), [])])])["exact_lines"] == 1.0


def test_ragged_batches_hold_photos_of_different_sizes():
    same = preprocessing.ragged([np.zeros((3, 32, 32)), np.ones((3, 32, 32))])
    assert same.shape == (2, 3, 32, 32) and not preprocessing.is_ragged(same)
    mixed = preprocessing.ragged([np.zeros((3, 32, 64)), np.ones((3, 64, 32))])
    assert mixed.shape == (2,) and preprocessing.is_ragged(mixed) and mixed[1].shape == (3, 64, 32)


def test_the_text_detection_preprocessor_is_named_by_the_config_and_checked():
    preprocess = model_config.load_config(PIPELINE.model_dir("preprocess"))
    assert preprocessors.kind(preprocess) == "text_detection" and preprocessors.check(preprocess) == []
    assert text_preprocessor.max_detector_side(preprocess) == 4096
    del preprocess.output[2]
    assert "the text_detection preprocessor writes" in preprocessors.check(preprocess)[0]
    preprocess.parameters["preprocessor"].string_value = "ocr"
    with pytest.raises(ConfigError, match="preprocessor 'ocr' is not one of image_to_tensor, text_detection"):
        preprocessors.kind(preprocess)


def test_the_recognizer_s_profiles_are_its_width_buckets_and_the_classifier_has_none():
    """One TensorRT profile per recognizer width bucket (each crop is padded to one), 48 px high, from the config the
    postprocess pads with: a bucket added there is a profile added to the plan."""
    widths = task.recognizer_widths(config())
    profiles = task.TASK.engine_profiles(config(), "recognizer")
    assert [item.max for item in profiles] == [(3, 48, width) for width in widths]
    assert all(item.min == item.opt == item.max and item.opt_batch == task.RECOGNIZER_OPT_BATCH for item in profiles)
    assert [item.max[-1] for item in task.TASK.engine_profiles(config(recognizer_widths="320,2560"), "recognizer")] == [320, 2560]
    assert task.TASK.engine_profiles(config(), "classifier") == ()
    production = model_config.load_config(PIPELINE.stage_dir("recognizer"))
    assert list(production.instance_group[0].profile) == [str(i) for i in range(len(widths))]
