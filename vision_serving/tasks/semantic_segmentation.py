"""The semantic segmentation task: a model's class map -> a class map at the photo's own size, and the classes in it.

As Ultralytics' ``SemanticSegmentationPredictor`` does it on an ONNX export (YOLO26-sem, whose graph ends in the
ArgMax: a uint8 class id per pixel of the letterboxed input): the letterbox's padding is cut away (``scale_masks``'
rule, from the photo's size and the map's alone) and what is left is resized to the photo by nearest neighbour, as
torch's ``interpolate(mode="nearest")`` picks the pixels (source index floor(i x in / out), in float32).

Postprocess config (``task: "semantic_segmentation"``): ``labels_file`` (one class name a line, in class-id order).
Tensors by role: the required UINT8 class map (``[H, W]`` or ``[1, H, W]``) and INT32 ``[2]`` image size; outputs
BYTES ``[1]`` ``CLASS_MAP`` (a one-channel 8-bit PNG at the photo's size: each pixel its class id) and, for the classes
present, largest share first, INT32 ``[-1]`` ``CLASS_IDS``, BYTES ``[-1]`` ``LABELS``, FP32 ``[-1]`` ``SHARES`` (the
fraction of the photo's pixels) and INT32 ``[1]`` ``COUNT`` (a response of several photos pads each list to the
longest: id -1, an empty label, share 0).

Drift features: ``class_count`` (classes present), ``dominant_share`` and categorical ``dominant_class``. Precision gate
(recipe ``[gate]``): ``min_pixel_agreement`` (the fraction of pixels where the class is FP32's) and ``min_mean_iou``
(per photo, the mean IoU over the classes either map has). Labelled dataset: ``DIR/<name>.jpg|png`` with
``DIR/<name>.classes.png`` (8-bit class ids, 255: not counted); pixel accuracy and mean IoU over the classes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import cv2
import numpy as np

from .. import drift, model_config
from ..model_config import ModelConfig
from .base import LabelledSample, Postprocessor, Role, Task, TaskResult, gate_report

CLASSES_SUFFIX = ".classes.png"  # a labelled dataset's class maps, and the ones the client writes
IGNORE = 255  # a labelled map's pixels that count for nothing (Ultralytics' ignore label)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
INPUTS = (Role("classes", "UINT8", None, name="CLASSES", from_core=True), Role("image_size", "INT32", (2,), name="IMAGE_SIZE"))
OUTPUTS = (
    Role("class_map", "BYTES", (1,), name="CLASS_MAP"),
    Role("class_ids", "INT32", (-1,), name="CLASS_IDS"),
    Role("labels", "BYTES", (-1,), name="LABELS"),
    Role("shares", "FP32", (-1,), name="SHARES"),
    Role("count", "INT32", (1,), name="COUNT"),
)


def map_2d(classes: np.ndarray) -> np.ndarray:
    """[h, w] uint8 from one image's map of [h, w] or [1, h, w]."""
    squeezed = np.asarray(classes)
    while squeezed.ndim > 2 and squeezed.shape[0] == 1:
        squeezed = squeezed[0]
    if squeezed.ndim != 2:
        raise ValueError(f"expected one class map per image, got shape {np.shape(classes)}")
    return squeezed


def content(map_height: int, map_width: int, height: int, width: int) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) of the photo in a letterboxed map, as Ultralytics' ``scale_masks`` finds them from the
    two sizes (the letterbox's gain, its padding halved and rounded as there)."""
    gain = min(map_height / height, map_width / width)
    content_h, content_w = max(round(height * gain), 1), max(round(width * gain), 1)
    top, left = round((map_height - content_h) / 2 - 0.1), round((map_width - content_w) / 2 - 0.1)
    return top, top + content_h, left, left + content_w


def _nearest(size_in: int, size_out: int) -> np.ndarray:
    """torch's nearest source index per output position: floor(i x (in / out)) in float32, at most in - 1."""
    scale = np.float32(size_in) / np.float32(size_out)
    return np.minimum(np.floor(np.arange(size_out, dtype=np.float32) * scale).astype(np.intp), size_in - 1)


def full_size(classes: np.ndarray, height: int, width: int) -> np.ndarray:
    """One letterboxed map -> uint8 [height, width] at the photo's size (see the module)."""
    if height < 1 or width < 1:
        raise ValueError(f"image size must be positive, got {height}x{width}")
    source = map_2d(classes)
    if source.shape == (height, width):
        return source.astype(np.uint8, copy=True)
    top, bottom, left, right = content(source.shape[0], source.shape[1], height, width)
    cut = source[top:bottom, left:right]
    return np.ascontiguousarray(cut[_nearest(cut.shape[0], height)][:, _nearest(cut.shape[1], width)], dtype=np.uint8)


def encode_png(classes: np.ndarray) -> bytes:
    """A one-channel 8-bit PNG of class ids (fast compression: class maps are runs)."""
    ok, encoded = cv2.imencode(".png", np.asarray(classes, dtype=np.uint8), [cv2.IMWRITE_PNG_COMPRESSION, 1])
    if not ok:
        raise RuntimeError("PNG encoding of the class map failed")
    return encoded.tobytes()


def decode_png(data: bytes) -> np.ndarray:
    """A class-map PNG back to uint8 [H, W]."""
    classes = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
    if classes is None or classes.ndim != 2 or classes.dtype != np.uint8:
        raise ValueError("not a one-channel 8-bit PNG class map")
    return classes


def shares(classes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The classes present (largest share first, then by id) and the fraction of pixels each covers."""
    counts = np.bincount(np.asarray(classes, dtype=np.uint8).ravel(), minlength=256)
    present = np.flatnonzero(counts)
    order = present[np.lexsort((present, -counts[present]))]
    return order.astype(np.int32), (counts[order] / max(int(classes.size), 1)).astype(np.float32)


def mean_iou(first: np.ndarray, second: np.ndarray) -> float:
    """The mean IoU over the classes either map has (1.0 for two empty maps)."""
    found = np.union1d(np.unique(first), np.unique(second))
    scores = [np.logical_and(first == c, second == c).sum() / np.logical_or(first == c, second == c).sum() for c in found]
    return float(np.mean(scores)) if scores else 1.0


def read_labels(path: Path) -> list[str]:
    """One class name a line, in class-id order."""
    if not path.is_file():
        raise FileNotFoundError(f"label file {path} does not exist")
    return path.read_text(encoding="utf-8").splitlines()


class SemanticResult(TaskResult):
    """A batch's model maps and photo sizes; full-size maps are computed once, on first use (or given: a served
    response's decoded maps)."""

    def __init__(self, post: SemanticPostprocessor, classes: np.ndarray | None, sizes: np.ndarray, maps: list[np.ndarray] | None = None):
        if classes is not None and len(classes) != len(sizes):
            raise ValueError(f"{len(classes)} class maps for {len(sizes)} image sizes")
        self.post = post
        self.classes = classes
        self.sizes = np.asarray(sizes).reshape(-1, 2)
        self._maps = maps

    def __len__(self) -> int:
        return len(self.sizes)

    def maps(self) -> list[np.ndarray]:
        """uint8 [H, W] class ids at each photo's size."""
        if self._maps is None:
            if self.classes is None:
                raise ValueError("a served response has no model maps")
            self._maps = [full_size(c, int(h), int(w)) for c, (h, w) in zip(self.classes, self.sizes)]
        return self._maps

    def outputs(self, start: int = 0, stop: int | None = None) -> dict[str, np.ndarray]:
        chosen = self.maps()[start:stop]
        found = [shares(m) for m in chosen]
        width = max((len(ids) for ids, _ in found), default=0)
        ids = np.full((len(chosen), width), -1, dtype=np.int32)
        fractions = np.zeros((len(chosen), width), dtype=np.float32)
        labels = np.full((len(chosen), width), b"", dtype=np.object_)
        for row, (present, share) in enumerate(found):
            ids[row, : len(present)] = present
            fractions[row, : len(present)] = share
            labels[row, : len(present)] = [self.post.label(int(c)) for c in present]
        values = {
            "class_map": np.array([[encode_png(m)] for m in chosen], dtype=np.object_).reshape(-1, 1),
            "class_ids": ids,
            "labels": labels,
            "shares": fractions,
            "count": np.array([[len(present)] for present, _ in found], dtype=np.int32).reshape(-1, 1),
        }
        return self.post.named(values)

    def features(self) -> drift.Features:
        found = [shares(map_2d(c)) for c in self.classes] if self.classes is not None else [shares(m) for m in self.maps()]
        numeric = {
            "class_count": np.array([len(ids) for ids, _ in found], dtype=np.float64),
            "dominant_share": np.array([share[0] if len(share) else np.nan for _, share in found], dtype=np.float64),
        }
        dominant = [self.post.label(int(ids[0])).decode("utf-8", "replace") if len(ids) else "" for ids, _ in found]
        return drift.Features(numeric, {"dominant_class": dominant})


class SemanticPostprocessor(Postprocessor):
    def __init__(self, config: ModelConfig, model_dir: Path) -> None:
        super().__init__(config, INPUTS, OUTPUTS)
        dims = [int(d) for d in model_config.tensor(config, self.inputs["classes"] or "").dims]
        if len([d for d in dims if d != 1]) != 2:
            raise model_config.ConfigError(f"model '{config.name}': the class map input {dims} is not one map per image")
        self.labels = [name.encode("utf-8") for name in read_labels(model_dir / model_config.parameter(config, "labels_file"))]

    def label(self, class_id: int) -> bytes:
        """The class's name (its id where the labels file has no line for it)."""
        return self.labels[class_id] if class_id < len(self.labels) else str(class_id).encode()

    def parse_roles(self, values: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray]:
        classes, sizes = values["classes"], values["image_size"]
        assert classes is not None and sizes is not None
        return {"classes": classes, "image_size": sizes}

    def run(self, batch: Mapping[str, np.ndarray]) -> SemanticResult:
        return SemanticResult(self, batch["classes"], batch["image_size"])


class SemanticSegmentationTask(Task):
    name = "semantic_segmentation"
    drift_features = ("class_count", "dominant_share", "dominant_class")
    gate_defaults: ClassVar[dict[str, float]] = {"min_pixel_agreement": 0.98, "min_mean_iou": 0.9}
    dataset_layout = f"DIR/<name>.jpg|png with its class map DIR/<name>{CLASSES_SUFFIX} (8-bit class ids, 255: not counted)"

    def output_roles(self) -> tuple[Role, ...]:
        return OUTPUTS

    def config_roles(self, config: ModelConfig) -> tuple[tuple[Role, ...], tuple[Role, ...]]:
        return INPUTS, OUTPUTS

    def postprocessor(self, config: ModelConfig, model_dir: Path) -> SemanticPostprocessor:
        return SemanticPostprocessor(config, model_dir)

    def gate(self, reference: TaskResult, candidate: TaskResult, limits: Mapping[str, float]) -> dict[str, Any]:
        assert isinstance(reference, SemanticResult) and isinstance(candidate, SemanticResult)
        pairs = list(zip(reference.maps(), candidate.maps()))
        agreement = [float(np.mean(a == b)) for a, b in pairs]
        ious = [mean_iou(a, b) for a, b in pairs]
        metrics = {
            "count": len(pairs),
            "pixel_agreement": float(np.mean(agreement)),
            "pixel_agreement_min": float(np.min(agreement)),
            "mean_iou": float(np.mean(ious)),
            "mean_iou_min": float(np.min(ious)),
        }
        checks = {
            "pixel_agreement": (metrics["pixel_agreement"], limits["min_pixel_agreement"]),
            "mean_iou": (metrics["mean_iou"], limits["min_mean_iou"]),
        }
        return gate_report(metrics, checks)

    def response_result(self, postprocessor: Postprocessor, outputs: Mapping[str, np.ndarray]) -> SemanticResult:
        assert isinstance(postprocessor, SemanticPostprocessor)
        maps = [decode_png(bytes(png)) for png in np.asarray(outputs["class_map"]).reshape(-1)]
        return SemanticResult(postprocessor, None, np.array([m.shape for m in maps], dtype=np.int32).reshape(-1, 2), maps)

    def dataset(self, directory: Path, postprocessor: Postprocessor) -> list[LabelledSample]:
        samples = []
        images = sorted(
            p for p in directory.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES and not p.name.endswith(CLASSES_SUFFIX)
        )
        for path in images:
            classes_path = path.with_name(path.stem + CLASSES_SUFFIX)
            if not classes_path.is_file():
                raise ValueError(f"{path}: no class map {classes_path.name} beside it")
            try:
                samples.append(LabelledSample(path, decode_png(classes_path.read_bytes())))
            except ValueError as error:
                raise ValueError(f"{classes_path}: {error}") from None
        return samples

    def dataset_metrics(self, runs: Sequence[tuple[TaskResult, Sequence[LabelledSample]]]) -> dict[str, float]:
        confusion = np.zeros((256, 256), dtype=np.int64)
        for result, part in runs:
            assert isinstance(result, SemanticResult)
            for predicted, sample in zip(result.maps(), part):
                if predicted.shape != sample.target.shape:
                    raise ValueError(
                        f"{sample.path}: map is {sample.target.shape[::-1]}, the image {predicted.shape[::-1]} (width x height)"
                    )
                counted = sample.target != IGNORE
                np.add.at(confusion, (sample.target[counted].astype(np.intp), predicted[counted].astype(np.intp)), 1)
        total = int(confusion.sum())
        if not total:
            raise ValueError("the dataset's class maps count no pixel (every pixel 255)")
        hits = np.diag(confusion)
        union = confusion.sum(axis=0) + confusion.sum(axis=1) - hits
        present = union > 0
        return {"pixel_accuracy": float(hits.sum() / total), "mean_iou": float(np.mean(hits[present] / union[present]))}


TASK = SemanticSegmentationTask()
