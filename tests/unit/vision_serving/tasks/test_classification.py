"""The classification task: softmax, top-k, labels, per-request k, gate, dataset metric (no server; its client: tests/unit/devtools/test_clients.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vision_serving import layout, model_config
from vision_serving.tasks import classification, registry

LABELS = [f"class {i}" for i in range(10)]


def config(top_k: int = 3, scores: str | None = None, core_output: str = "LOGITS") -> model_config.ModelConfig:
    kind = "" if scores is None else f', {{ key: "scores", value: {{ string_value: "{scores}" }} }}'
    return model_config.parse_config_text(
        f"""name: "tiny_postprocess" backend: "python" max_batch_size: 8
input [ {{ name: "{core_output}" data_type: TYPE_FP32 dims: [ 10 ] }}, {{ name: "TOP_K" data_type: TYPE_INT32 dims: [ 1 ] optional: true }} ]
output [ {{ name: "LABELS" data_type: TYPE_STRING dims: [ -1 ] }}, {{ name: "SCORES" data_type: TYPE_FP32 dims: [ -1 ] }},
         {{ name: "CLASS_IDS" data_type: TYPE_INT32 dims: [ -1 ] }} ]
parameters [ {{ key: "task", value: {{ string_value: "classification" }} }}, {{ key: "top_k", value: {{ string_value: "{top_k}" }} }},
             {{ key: "labels_file", value: {{ string_value: "labels.txt" }} }}{kind} ]"""
    )


@pytest.fixture
def post(tmp_path: Path) -> classification.ClassificationPostprocessor:
    (tmp_path / "labels.txt").write_text("\n".join(LABELS) + "\n")
    return classification.ClassificationPostprocessor(config(), tmp_path)


def test_softmax_matches_definition_and_is_stable():
    logits = np.array([[1.0, 2.0, 3.0], [1000.0, 1000.0, 990.0]], dtype=np.float32)
    probabilities = classification.softmax(logits)
    expected = np.exp(logits[0] - 3) / np.exp(logits[0] - 3).sum()
    np.testing.assert_allclose(probabilities[0], expected, rtol=1e-6)
    assert np.isfinite(probabilities).all()
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-6)


def test_top_k_orders_by_score_with_labels_and_the_requests_own_k(post):
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(3, 10)).astype(np.float32)
    first = post.parse({"LOGITS": logits[:2], "TOP_K": np.array([[4], [4]], np.int32)})
    second = post.parse({"LOGITS": logits[2:], "TOP_K": None})  # the config's default k, 3
    result = post.run(post.concatenate([first, second]))
    answers = result.split([2, 1])
    assert answers[0]["CLASS_IDS"].shape == (2, 4) and answers[1]["CLASS_IDS"].shape == (1, 3)
    for row, ids in enumerate([*answers[0]["CLASS_IDS"], *answers[1]["CLASS_IDS"]]):
        assert ids.tolist() == np.argsort(-logits[row])[: len(ids)].tolist()
    labels, scores = answers[0]["LABELS"][0], answers[0]["SCORES"][0]
    assert labels.tolist() == [LABELS[i].encode() for i in answers[0]["CLASS_IDS"][0]]
    assert answers[0]["CLASS_IDS"].dtype == np.int32 and scores.dtype == np.float32 and np.all(np.diff(scores) <= 0)


@pytest.mark.parametrize("k", [0, -1, 11])
def test_invalid_k_is_rejected(post, k):
    with pytest.raises(ValueError, match="TOP_K must be between 1 and 10"):
        post.parse({"LOGITS": np.zeros((1, 10), np.float32), "TOP_K": np.array([[k]], np.int32)})


def test_one_k_per_request(post):
    with pytest.raises(ValueError, match=r"TOP_K must be one value per request, got \[2, 3\]"):
        post.parse({"LOGITS": np.zeros((2, 10), np.float32), "TOP_K": np.array([[2], [3]], np.int32)})


def test_label_file_must_match_class_count(tmp_path):
    path = tmp_path / "labels.txt"
    path.write_text("a\nb\n")
    with pytest.raises(ValueError, match="has 2 labels, the model outputs 3 classes"):
        classification.load_labels(path, 3)
    assert list(classification.load_labels(path, 2)) == [b"a", b"b"]
    with pytest.raises(FileNotFoundError, match="builders export"):
        classification.load_labels(tmp_path / "missing.txt", 2)


def test_the_served_config_is_the_classification_task():
    pipeline = layout.pipeline("image_classifier")
    served = model_config.load_config(pipeline.model_dir("postprocess"))
    assert registry.for_config(served) is classification.TASK
    assert classification.TASK.check(served, pipeline.model_dir("postprocess"), None) == []  # labels are built later


def test_gate_compares_top_k_and_logits(post):
    reference = np.array([[0.0, 5.0, 4.0, 3.0, 2.0, 1.0, -1.0, -2, -3, -4], [9.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, -1, -2, -3]], np.float32)
    swapped = reference.copy()
    swapped[0, [1, 2]] = swapped[0, [2, 1]]  # top-1 changes, same top-5 set
    swapped[1, 6] = -9.0  # second row: class 6 leaves the top-5
    limits = classification.TASK.gate_defaults
    same = classification.TASK.gate(post.run({"logits": reference}), post.run({"logits": reference}), limits)
    assert all(check["pass"] for check in same["checks"].values()) and same["metrics"]["cosine_mean"] == pytest.approx(1.0)
    report = classification.TASK.gate(post.run({"logits": reference}), post.run({"logits": swapped}), limits)
    assert report["metrics"]["top1_agreement"] == 0.5
    assert report["metrics"]["top5_overlap"] == pytest.approx((5 / 5 + 4 / 5) / 2)
    assert not report["checks"]["top1_agreement"]["pass"]
    # A served response has no logits: top-k only, no cosine check.
    served = post.run({"logits": swapped}).outputs()
    response = classification.TASK.response_result(post, {"class_ids": served["CLASS_IDS"], "scores": served["SCORES"]})
    assert "cosine_mean" not in classification.TASK.gate(post.run({"logits": reference}), response, limits)["checks"]


def test_dataset_folders_and_accuracy(post, tmp_path):
    data = tmp_path / "data"
    for folder, files in (("class 3", ["a.jpg"]), ("7", ["b.png", "c.jpg"])):
        (data / folder).mkdir(parents=True)
        for name in files:
            (data / folder / name).write_bytes(b"x")
    samples = classification.TASK.dataset(data, post)
    assert [(s.path.name, s.target) for s in samples] == [("b.png", 7), ("c.jpg", 7), ("a.jpg", 3)]
    logits = np.zeros((3, 10), np.float32)
    logits[0, 7] = logits[1, 2] = logits[2, 3] = 5
    logits[1, 7] = 4  # second: 7 is in its top-5, not its top-1
    metrics = classification.TASK.dataset_metrics([(post.run({"logits": logits}), samples)])
    assert metrics == {"top1_accuracy": pytest.approx(2 / 3), "top5_accuracy": 1.0}
    (data / "not a label").mkdir()
    with pytest.raises(ValueError, match="neither a label of the model nor a class id"):
        classification.TASK.dataset(data, post)


def test_drift_features():
    features = classification.features(np.array([[10.0, 0.0, 0.0], [1.0, 1.0, 1.0]]))
    assert features.numeric["confidence"][0] > 0.99
    assert features.numeric["confidence"][1] == pytest.approx(1 / 3)
    assert features.numeric["entropy"][1] == pytest.approx(np.log(3))
    assert features.numeric["entropy"][0] < 0.01
    assert features.categorical["predicted_class"] == ["0", "0"]


def test_a_core_that_outputs_probabilities_has_them_served_as_they_are(tmp_path):
    """``scores: probabilities`` (a softmax in the core's graph, as Ultralytics' classify exports): the scores are the core's
    values, no second softmax; the ranking and the drift features read them as probabilities."""
    (tmp_path / "labels.txt").write_text("\n".join(LABELS) + "\n")
    post = classification.ClassificationPostprocessor(config(scores="probabilities", core_output="PROBABILITIES"), tmp_path)
    assert post.settings.scores == "probabilities" and post.inputs["logits"] == "PROBABILITIES"
    probabilities = classification.softmax(np.random.default_rng(3).normal(size=(2, 10)).astype(np.float32))
    probabilities[1] = [0.5, 0.3, 0.2, 0, 0, 0, 0, 0, 0, 0]
    answers = post.run(post.parse({"PROBABILITIES": probabilities, "TOP_K": None})).outputs()
    ids = np.argsort(-probabilities, axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(answers["CLASS_IDS"], ids)
    np.testing.assert_array_equal(answers["SCORES"], np.take_along_axis(probabilities, ids, axis=1))
    features = post.run({"logits": probabilities}).features()
    np.testing.assert_allclose(features.numeric["confidence"], probabilities.max(axis=1), rtol=1e-6)
    np.testing.assert_allclose(features.numeric["entropy"][1], -(0.5 * np.log(0.5) + 0.3 * np.log(0.3) + 0.2 * np.log(0.2)), rtol=1e-6)
    assert features.categorical["predicted_class"][1] == "0"
    # The same values as logits would be softmaxed again: the default is unchanged.
    logits_post = classification.ClassificationPostprocessor(config(), tmp_path)
    assert logits_post.settings.scores == "logits"
    assert logits_post.run({"logits": probabilities}).outputs()["SCORES"][1, 0] == pytest.approx(
        classification.softmax(probabilities[1:])[0, 0]
    )


def test_an_unknown_scores_kind_is_refused(tmp_path):
    problems = classification.TASK.check(config(scores="percent"), tmp_path, None)
    assert problems == ["model 'tiny_postprocess': scores 'percent' is not one of logits, probabilities"]
