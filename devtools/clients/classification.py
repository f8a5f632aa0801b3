"""``./scripts/classify``: each image's top-k labels, scores and class ids (``--top-k``: the request's k)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

import numpy as np

from .base import ClientReport, TaskClient, positive_int, text


class ClassificationClient(TaskClient):
    script = "classify"
    pipeline = "image_classifier"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--top-k", type=positive_int, help="number of predictions per image (default: the model's)")

    def request_inputs(self, args: argparse.Namespace, count: int) -> dict[str, np.ndarray]:
        top_k = getattr(args, "top_k", None)
        return {} if top_k is None else {"top_k": np.full((count, 1), top_k, dtype=np.int32)}

    def report(self, name: str, outputs: Mapping[str, np.ndarray], image: bytes, args: argparse.Namespace) -> ClientReport:
        labels = [text(label) for label in np.asarray(outputs["labels"]).reshape(-1)]
        scores = [float(score) for score in np.asarray(outputs["scores"]).reshape(-1)]
        ids = [int(class_id) for class_id in np.asarray(outputs["class_ids"]).reshape(-1)]
        width = max([len("label"), *(len(label) for label in labels)])
        lines = [name, f"  {'rank':>4}  {'label':<{width}}  {'score':>7}  {'class id':>8}"]
        lines += [
            f"  {rank:>4}  {label:<{width}}  {score * 100:>6.2f}%  {class_id:>8}"
            for rank, (label, score, class_id) in enumerate(zip(labels, scores, ids), start=1)
        ]
        predictions = [{"label": label, "score": score, "class_id": class_id} for label, score, class_id in zip(labels, scores, ids)]
        return ClientReport(lines, {"file": name, "predictions": predictions})


CLIENT = ClassificationClient()
