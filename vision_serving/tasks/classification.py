"""The classification task: logits (or probabilities) -> top-k labels, scores and class ids.

Postprocess config (``task: "classification"``): ``top_k`` (the default k), ``labels_file``
(one label per line in class-id order, beside the config), ``scores`` (what the core outputs:
``logits``, the default, which the softmax here makes probabilities; ``probabilities``, a core with
the softmax in its graph, as Ultralytics' classify exports, whose values are the scores as they
are). Tensors by role: the required FP32 ``[C]`` core output, an optional INT32 ``[1]`` per-request
k; outputs BYTES labels, FP32 scores (probabilities) and INT32 class ids, each ``[k]``, best first.

Drift features: ``confidence`` (top-1 probability), ``entropy`` (nats), categorical
``predicted_class``. Precision gate (recipe ``[gate]``): top-1 agreement, top-5 overlap and
mean cosine of the core outputs (logits or probabilities) against FP32. Labelled dataset:
``DIR/<label or class id>/<image>``, top-1 and top-5 accuracy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from .. import drift, model_config
from ..model_config import ModelConfig
from .base import LabelledSample, Postprocessor, Role, Task, TaskResult, gate_report, rows

TOP_K = 5  # the gate's and the dataset metric's k (top-5)
INPUTS = (
    Role("logits", "FP32", (None,), name="LOGITS", from_core=True),
    Role("top_k", "INT32", (1,), optional=True, name="TOP_K"),
)
OUTPUTS = (
    Role("labels", "BYTES", (-1,), name="LABELS"),
    Role("scores", "FP32", (-1,), name="SCORES"),
    Role("class_ids", "INT32", (-1,), name="CLASS_IDS"),
)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
# The postprocess config's ``scores``: what the core outputs (logits: softmax here; probabilities: as they are).
SCORE_KINDS = ("logits", "probabilities")


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


def ranked(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(class ids int32 [N, k], their scores [N, k]) of the k largest scores per row, best first."""
    k = min(k, scores.shape[-1])
    # argpartition is O(C); only the k largest are then sorted.
    candidates = np.argpartition(-scores, k - 1, axis=-1)[:, :k]
    candidate_scores = np.take_along_axis(scores, candidates, axis=-1)
    order = np.argsort(-candidate_scores, axis=-1, kind="stable")
    return np.take_along_axis(candidates, order, axis=-1).astype(np.int32), np.take_along_axis(candidate_scores, order, axis=-1)


def probabilities_of(values: np.ndarray, scores: str) -> np.ndarray:
    """The core's outputs [N, C] as probabilities in float32: the softmax of logits, probabilities as they are."""
    values = np.asarray(values, dtype=np.float32)
    return values if scores == "probabilities" else softmax(values)


@dataclass(frozen=True)
class Settings:
    num_classes: int
    default_k: int
    labels: np.ndarray | None  # None: the labels file is not built yet (consistency check only)
    scores: str = "logits"  # what the core outputs (SCORE_KINDS)


class TopKResult(TaskResult):
    """A batch's ranked class ids and scores (``[N, k]``, for the largest k), each image's k, and the
    core outputs they came from, ``logits`` (logits or probabilities, as the postprocess's ``scores`` says; None for
    a served response, which has only the top k)."""

    def __init__(
        self, post: ClassificationPostprocessor, class_ids: np.ndarray, scores: np.ndarray, ks: np.ndarray, logits: np.ndarray | None = None
    ) -> None:
        self.post, self.class_ids, self.scores, self.ks, self.logits = post, class_ids, scores, np.asarray(ks, dtype=np.int64), logits

    @classmethod
    def of_logits(cls, post: ClassificationPostprocessor, logits: np.ndarray, ks: np.ndarray) -> TopKResult:
        logits = np.asarray(logits, dtype=np.float32)
        class_ids, scores = ranked(probabilities_of(logits, post.settings.scores), int(np.max(ks, initial=1)))
        return cls(post, class_ids, scores, ks, logits)

    def __len__(self) -> int:
        return rows(self.class_ids)

    def top(self, k: int) -> np.ndarray:
        """Class ids [N, k] of the k best (from the logits when there are any)."""
        return ranked(self.logits, k)[0] if self.logits is not None else self.class_ids[:, :k]

    def outputs(self, start: int = 0, stop: int | None = None) -> dict[str, np.ndarray]:
        stop = len(self) if stop is None else stop
        k = int(self.ks[start]) if stop > start else 0  # one k per request
        ids = np.ascontiguousarray(self.class_ids[start:stop, :k])
        scores = np.ascontiguousarray(self.scores[start:stop, :k])
        return self.post.named({"labels": self.post.labels()[ids], "scores": scores, "class_ids": ids})

    def features(self) -> drift.Features:
        if self.logits is None:
            raise ValueError("a served response has no logits: no drift features")
        return features(self.logits, self.post.settings.scores)


class ClassificationPostprocessor(Postprocessor):
    def __init__(self, config: ModelConfig, model_dir: Path, require_labels: bool = True) -> None:
        super().__init__(config, INPUTS, OUTPUTS)
        logits = model_config.tensor(config, self.inputs["logits"] or "")
        num_classes = int(logits.dims[-1])
        labels_path = model_dir / model_config.parameter(config, "labels_file")
        labels = load_labels(labels_path, num_classes) if require_labels or labels_path.is_file() else None
        scores = model_config.parameter(config, "scores", "logits")
        if scores not in SCORE_KINDS:
            raise model_config.ConfigError(f"model '{config.name}': scores {scores!r} is not one of {', '.join(SCORE_KINDS)}")
        self.settings = Settings(num_classes, validate_k(model_config.int_parameter(config, "top_k"), num_classes), labels, scores)

    def labels(self) -> np.ndarray:
        if self.settings.labels is None:
            raise FileNotFoundError(f"model '{self.config.name}': no labels file; build it with `python -m builders export`")
        return self.settings.labels

    def parse_roles(self, values: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray]:
        logits = values["logits"]
        assert logits is not None
        k = self.settings.default_k
        top_k = values.get("top_k")
        if top_k is not None:
            unique = np.unique(top_k)
            if len(unique) != 1:
                raise ValueError(f"TOP_K must be one value per request, got {unique.tolist()}")
            k = validate_k(int(unique[0]), self.settings.num_classes)
        return {"logits": logits, "top_k": np.full((rows(logits),), k, dtype=np.int32)}

    def run(self, batch: Mapping[str, np.ndarray]) -> TopKResult:
        logits = batch["logits"]
        ks = batch.get("top_k")
        return TopKResult.of_logits(self, logits, np.full((rows(logits),), self.settings.default_k) if ks is None else ks)


def features(logits: np.ndarray, scores: str = "logits") -> drift.Features:
    """Logits [N, C] (or probabilities, ``scores`` ``"probabilities"``) -> top-1 probability, entropy (nats), predicted
    class id."""
    logits = np.asarray(logits, dtype=np.float64).reshape(len(logits), -1)
    if scores == "probabilities":
        probabilities = logits
        entropy = -(probabilities * np.log(np.where(probabilities > 0, probabilities, 1.0))).sum(axis=1)  # 0 log 0 = 0
    else:
        shifted = logits - logits.max(axis=1, keepdims=True)
        exp = np.exp(shifted)
        total = exp.sum(axis=1, keepdims=True)
        probabilities = exp / total
        entropy = np.log(total[:, 0]) - (probabilities * shifted).sum(axis=1)
    predicted = logits.argmax(axis=1)
    return drift.Features(
        {"confidence": probabilities.max(axis=1), "entropy": entropy},
        {"predicted_class": [str(int(index)) for index in predicted]},
    )


def compare_top_k(reference_top: np.ndarray, candidate_top: np.ndarray) -> dict[str, float]:
    """Top-1 agreement and mean top-5 overlap (top-k for k < 5 classes) of two [N, k] class-id arrays."""
    k = min(TOP_K, reference_top.shape[1])
    overlap = [len(set(r[:k]) & set(c[:k])) / k for r, c in zip(reference_top, candidate_top)]
    return {
        "count": len(reference_top),
        "top1_agreement": float(np.mean(reference_top[:, 0] == candidate_top[:, 0])),
        "top5_overlap": float(np.mean(overlap)),
        "top1_in_reference_top5": float(np.mean([c[0] in r[:TOP_K] for r, c in zip(reference_top, candidate_top)])),
    }


def compare_logits(reference: np.ndarray, candidate: np.ndarray) -> dict[str, float]:
    """Top-k agreement and the logit vectors' cosine similarity (mean, min) and largest difference."""
    metrics: dict[str, float] = compare_top_k(ranked(reference, TOP_K)[0], ranked(candidate, TOP_K)[0])
    norms = np.linalg.norm(reference, axis=1) * np.linalg.norm(candidate, axis=1)
    cosine = (reference * candidate).sum(axis=1) / np.maximum(norms, 1e-12)
    metrics["cosine_mean"] = float(cosine.mean())
    metrics["cosine_min"] = float(cosine.min())
    metrics["max_abs_logit_diff"] = float(np.abs(reference - candidate).max())
    return metrics


class ClassificationTask(Task):
    name = "classification"
    drift_features = ("confidence", "entropy", "predicted_class")
    gate_defaults: ClassVar[dict[str, float]] = {"min_top1": 0.95, "min_top5": 0.90, "min_cosine": 0.98}
    dataset_layout = "DIR/<label>/<image> (a folder per class, named by a label of the model or a class id)"

    def output_roles(self) -> tuple[Role, ...]:
        return OUTPUTS

    def request_roles(self) -> tuple[Role, ...]:
        return INPUTS[1:]

    def config_roles(self, config: ModelConfig) -> tuple[tuple[Role, ...], tuple[Role, ...]]:
        return INPUTS, OUTPUTS

    def postprocessor(self, config: ModelConfig, model_dir: Path) -> ClassificationPostprocessor:
        return ClassificationPostprocessor(config, model_dir)

    def check(self, config: ModelConfig, model_dir: Path, preprocess: Any) -> list[str]:
        try:
            ClassificationPostprocessor(config, model_dir, require_labels=False)
        except (model_config.ConfigError, ValueError) as error:
            return [str(error)]
        return []

    def gate(self, reference: TaskResult, candidate: TaskResult, limits: Mapping[str, float]) -> dict[str, Any]:
        """Top-1 agreement and top-5 overlap; the logits' cosine when both sides have logits (not a served response)."""
        reference, candidate = _top_k(reference), _top_k(candidate)
        checks = {}
        if reference.logits is not None and candidate.logits is not None:
            metrics = compare_logits(reference.logits, candidate.logits)
            checks["cosine_mean"] = (metrics["cosine_mean"], limits["min_cosine"])
        else:
            metrics = compare_top_k(reference.top(TOP_K), candidate.top(TOP_K))
        return gate_report(
            metrics,
            {
                "top1_agreement": (metrics["top1_agreement"], limits["min_top1"]),
                "top5_overlap": (metrics["top5_overlap"], limits["min_top5"]),
                **checks,
            },
        )

    def gate_request(self, count: int) -> dict[str, np.ndarray]:
        return {"top_k": np.full((count, 1), TOP_K, dtype=np.int32)}

    def response_result(self, postprocessor: Postprocessor, outputs: Mapping[str, np.ndarray]) -> TopKResult:
        assert isinstance(postprocessor, ClassificationPostprocessor)
        ids = np.asarray(outputs["class_ids"], dtype=np.int32)
        return TopKResult(postprocessor, ids, np.asarray(outputs["scores"], dtype=np.float32), np.full((len(ids),), ids.shape[1]))

    def dataset(self, directory: Path, postprocessor: Postprocessor) -> list[LabelledSample]:
        assert isinstance(postprocessor, ClassificationPostprocessor)
        labels = [label.decode() for label in postprocessor.labels()]
        index = {label: i for i, label in enumerate(labels)}
        samples = []
        for folder in sorted(p for p in directory.iterdir() if p.is_dir()):
            if folder.name in index:
                class_id = index[folder.name]
            elif folder.name.isdigit() and int(folder.name) < len(labels):
                class_id = int(folder.name)
            else:
                raise ValueError(f"{folder}: the folder name is neither a label of the model nor a class id")
            samples += [
                LabelledSample(path, class_id)
                for path in sorted(folder.iterdir())
                if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES
            ]
        return samples

    def dataset_metrics(self, runs: Sequence[tuple[TaskResult, Sequence[LabelledSample]]]) -> dict[str, float]:
        targets = np.array([sample.target for _, samples in runs for sample in samples])
        top = np.concatenate([_top_k(result).top(TOP_K) for result, _ in runs])
        return {
            "top1_accuracy": float(np.mean(top[:, 0] == targets)),
            "top5_accuracy": float(np.mean([target in row for target, row in zip(targets, top)])),
        }


def _top_k(result: TaskResult) -> TopKResult:
    assert isinstance(result, TopKResult)
    return result


TASK = ClassificationTask()
