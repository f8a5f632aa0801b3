"""Softmax, top-k and labels (no server)."""

from __future__ import annotations

import numpy as np
import pytest

from vision_serving import classification

LABELS = np.array([f"class {i}".encode() for i in range(10)], dtype=object)


def test_softmax_matches_definition_and_is_stable():
    logits = np.array([[1.0, 2.0, 3.0], [1000.0, 1000.0, 990.0]], dtype=np.float32)
    probabilities = classification.softmax(logits)
    expected = np.exp(logits[0] - 3) / np.exp(logits[0] - 3).sum()
    np.testing.assert_allclose(probabilities[0], expected, rtol=1e-6)
    assert np.isfinite(probabilities).all()
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-6)


def test_top_k_orders_by_score_with_labels_and_per_row_k():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(3, 10)).astype(np.float32)
    results = classification.top_k(logits, [3, 1, 10], LABELS)
    for row, (result, k) in enumerate(zip(results, [3, 1, 10])):
        expected_ids = np.argsort(-logits[row])[:k]
        assert result.class_ids.tolist() == expected_ids.tolist()
        assert result.class_ids.dtype == np.int32 and result.scores.dtype == np.float32
        assert list(result.labels) == [f"class {i}".encode() for i in expected_ids]
        assert np.all(np.diff(result.scores) <= 0)
    np.testing.assert_allclose(results[2].scores.sum(), 1.0, rtol=1e-6)


@pytest.mark.parametrize("k", [0, -1, 11])
def test_invalid_k_is_rejected(k):
    with pytest.raises(ValueError, match="TOP_K must be between 1 and 10"):
        classification.validate_k(k, 10)


def test_label_file_must_match_class_count(tmp_path):
    path = tmp_path / "labels.txt"
    path.write_text("a\nb\n")
    with pytest.raises(ValueError, match="has 2 labels, the model outputs 3 classes"):
        classification.load_labels(path, 3)
    assert list(classification.load_labels(path, 2)) == [b"a", b"b"]
    with pytest.raises(FileNotFoundError, match="builders export"):
        classification.load_labels(tmp_path / "missing.txt", 2)
