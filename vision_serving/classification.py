"""Classification postprocessing: softmax, top-k and label names for a batch of logits."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class TopK:
    """Top-k results of one image, best first."""

    class_ids: np.ndarray  # int32 [k]
    scores: np.ndarray  # float32 [k], softmax probabilities
    labels: np.ndarray  # object [k] of UTF-8 bytes


def load_labels(path: Path, expected_count: int) -> np.ndarray:
    """One label per line in class-id order, as an object array of UTF-8 bytes."""
    if not path.is_file():
        raise FileNotFoundError(f"label file {path} does not exist; build it with `python -m builders export`")
    names = path.read_text(encoding="utf-8").splitlines()
    if len(names) != expected_count:
        raise ValueError(f"label file {path} has {len(names)} labels, the model outputs {expected_count} classes")
    return np.array([name.encode("utf-8") for name in names], dtype=np.object_)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Numerically stable softmax over the last axis, in float32."""
    shifted = logits.astype(np.float32, copy=False) - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


def validate_k(k: int, num_classes: int) -> int:
    if not 1 <= k <= num_classes:
        raise ValueError(f"TOP_K must be between 1 and {num_classes}, got {k}")
    return k


def top_k(logits: np.ndarray, ks: list[int], labels: np.ndarray) -> list[TopK]:
    """Top-k of each row of ``logits`` [N, C]; ``ks[i]`` is row i's k (already validated)."""
    if logits.ndim != 2 or len(ks) != logits.shape[0]:
        raise ValueError(f"expected logits [N, C] and N values of k, got {logits.shape} and {len(ks)}")
    probabilities = softmax(logits)
    largest_k = max(ks, default=0)
    # argpartition is O(C); only the k largest are then sorted.
    candidates = np.argpartition(-probabilities, largest_k - 1, axis=-1)[:, :largest_k]
    candidate_scores = np.take_along_axis(probabilities, candidates, axis=-1)
    order = np.argsort(-candidate_scores, axis=-1, kind="stable")
    ranked_ids = np.take_along_axis(candidates, order, axis=-1).astype(np.int32)
    ranked_scores = np.take_along_axis(candidate_scores, order, axis=-1)
    return [
        TopK(class_ids=ranked_ids[row, :k], scores=ranked_scores[row, :k], labels=labels[ranked_ids[row, :k]]) for row, k in enumerate(ks)
    ]
