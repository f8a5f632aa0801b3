"""The detection task: a detector's raw outputs -> boxes, scores, classes and labels in the photo's pixels.

Postprocess config (``task: "detection"``):

- ``head``: the raw output format (:mod:`.detection_heads.registry`): ``mediapipe_ssd``
  (MediaPipe's SSD face detector), ``yolo`` (``[4 + C, A]``: YOLOv5u, v8, 11), ``yolo_v5``
  (``[A, 5 + C]``: the original YOLOv5), ``end2end`` (``[K, 6]``: NMS in the model), ``yolo_pose``
  (``[4 + C + P x D, A]``: Ultralytics' pose models), ``yolo_segment`` (``[4 + C + M, A]`` and the prototypes
  ``[M, H/4, W/4]``: its segment models), ``yolo_obb`` (``[4 + C + 1, A]``: its oriented-box models); the head's own
  parameters beside it;
- ``score_threshold``, ``iou_threshold``: the defaults of the per-image request inputs
  ``SCORE_THRESHOLD`` and ``IOU_THRESHOLD`` (FP32 ``[1]``, optional);
- ``max_detections``: at most this many detections per image (the best ones);
- ``class_agnostic``: ``true`` suppresses overlapping boxes whatever their classes (default
  ``false``: per class);
- ``clip_to_image``: clip boxes (and keypoints) to the photo (default ``true``);
- ``labels_file``: one label per line, in class-id order, beside the config.

Tensors by role. Inputs: the head's raw outputs; INT32 ``[2]`` the photo's (height, width) and
FP32 ``[4]`` the preprocess model's tensor transform (``tensor = image * scale + offset``,
:func:`vision_serving.preprocessing.tensor_transforms`), through which boxes are mapped back to
the photo; the optional thresholds. Outputs: FP32 ``[K, 4]`` boxes (x_min, y_min, x_max, y_max,
pixels), FP32 ``[K]`` scores, INT32 ``[K]`` class ids, BYTES ``[K]`` labels, INT32 ``[1]``
count, and for heads with keypoints FP32 ``[K, P, D]`` keypoints (x, y in the photo's pixels, and
the keypoint's score where D is 3), and what the head adds (:attr:`Head.extra_answers`: a segment head's
BYTES ``[K]`` masks and INT32 ``[K, 4]`` mask boxes, an oriented-box head's FP32 ``[K, 5]`` rotated boxes and
``[K, 4, 2]`` corners). ``K`` is the largest count in
the request (at most ``max_detections``); rows past an image's count are zero (labels empty).

Drift features: ``detections`` per image and ``confidence`` (mean score of the kept ones).
Precision gate (recipe ``[gate]``): detections of FP32 and the candidate matched one to one
within each class by box IoU >= 0.5; agreement ``2 matched / (FP32's + candidate's)`` (also per
class) and the mean IoU of the matched boxes. Labelled dataset: YOLO text labels (``class cx cy
w h``, normalized) beside each image or in the ``labels/`` folder beside ``images/``;
precision, recall and AP at IoU 0.5.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from .. import cpu_sizing, drift, tiling
from ..model_config import ConfigError, ModelConfig
from . import detection_tiles as tiles
from .base import LabelledSample, Postprocessor, Role, Task, TaskResult, gate_report, per_image_option, rows
from .classification import load_labels
from .detection_heads.base import Head, NmsSettings, boolean
from .detection_heads.registry import HEADS, head_class
from .detection_matching import MATCH_IOU as MATCH_IOU
from .detection_matching import average_precision as average_precision
from .detection_matching import box_iou as box_iou
from .detection_matching import match_boxes as match_boxes
from .detection_matching import match_by_class as match_by_class

KEYPOINT_TOLERANCE = 0.1  # a keypoint agrees within this fraction of its box's diagonal (the precision gate)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
# The task's own config parameters: parser, default (None: required). The rest but drift_* are the head's.
PARAMETERS: dict[str, tuple[Any, Any]] = {
    "task": (str, None),
    "head": (str, None),
    "score_threshold": (float, None),
    "iou_threshold": (float, None),
    "max_detections": (int, None),
    "class_agnostic": (boolean, False),
    "clip_to_image": (boolean, True),
    "labels_file": (str, None),
}


# A tiled pipeline's postprocess parameters (the tiling's, the core it reaches), none of the task's or the head's.
TILED_PARAMETERS = (*tiling.DEFAULTS, *tiles.CORE_PARAMETERS)
REQUEST_ROLES = (
    Role("score_threshold", "FP32", (1,), optional=True, name="SCORE_THRESHOLD"),
    Role("iou_threshold", "FP32", (1,), optional=True, name="IOU_THRESHOLD"),
)


def input_roles(head: Head, config: ModelConfig | None = None) -> tuple[Role, ...]:
    """The inputs of the postprocess with ``head``: the core outputs it reads, each photo's size and tensor transform
    (the preprocess's), and the per-request thresholds; in a tiled pipeline (``config`` says), each photo's views and
    the request's ``TILING`` instead of the core's outputs (:mod:`.detection_tiles`)."""
    if config is not None and tiling.is_tiled(config):
        return (tiles.tiles_role(config), *tiles.TILED_INPUTS, tiles.TILING_OPTION, *REQUEST_ROLES)
    return (
        *head.input_roles(),
        Role("image_size", "INT32", (2,), name="IMAGE_SIZE"),
        Role("transform", "FP32", (4,), name="IMAGE_TRANSFORM"),
        *REQUEST_ROLES,
    )


def answer_roles(head: Head) -> tuple[Role, ...]:
    """The outputs of the postprocess (and its ensemble) with ``head``: keypoints ``[K, P, D]`` where it has them, and
    what the head adds (:meth:`Head.extra_answers`)."""
    return (*_output_roles(head.num_keypoints, head.keypoint_values), *head.extra_answers)


def _output_roles(keypoints: int | None, values: int | None = None) -> tuple[Role, ...]:
    """The outputs; ``keypoints``: the head's count (0: none) and ``values`` per keypoint (x, y: 2; with a score: 3),
    None: either (a client reading an ensemble)."""
    roles = (
        Role("boxes", "FP32", (-1, 4), name="BOXES"),
        Role("scores", "FP32", (-1,), name="SCORES"),
        Role("class_ids", "INT32", (-1,), name="CLASS_IDS"),
        Role("labels", "BYTES", (-1,), name="LABELS"),
        Role("count", "INT32", (1,), name="COUNT"),
    )
    if keypoints is None:
        return (*roles, Role("keypoints", "FP32", (-1, None, values), optional=True, name="KEYPOINTS"))
    return (*roles, Role("keypoints", "FP32", (-1, keypoints, values or 2), name="KEYPOINTS")) if keypoints else roles


@dataclass(frozen=True)
class Settings:
    head: Head
    score_threshold: float
    iou_threshold: float
    max_detections: int
    class_agnostic: bool
    clip: bool
    labels_file: str

    @classmethod
    def from_config(cls, config: ModelConfig) -> Settings:
        """The task's and the head's parameters (drift_* and the CPU sizing's aside); unknown keys are errors."""
        given = {
            key: value.string_value
            for key, value in config.parameters.items()
            if not key.startswith("drift_") and key not in cpu_sizing.PARAMETERS and key not in TILED_PARAMETERS
        }
        if "head" not in given:
            raise ValueError(f"missing parameter 'head' (one of {', '.join(sorted(HEADS))})")
        head = head_class(given["head"])
        unknown = sorted(set(given) - set(PARAMETERS) - set(head.parameters))
        if unknown:
            raise ValueError(f"unknown parameter(s) {', '.join(unknown)} for head {head.name}")
        values: dict[str, Any] = {}
        for key, (parse, default) in PARAMETERS.items():
            if key not in given and default is None:
                raise ValueError(f"missing parameter '{key}'")
            try:
                values[key] = parse(given[key]) if key in given else default
            except ValueError as error:
                raise ValueError(f"parameter {key}: {error}") from None
        settings = cls(
            head.from_parameters({key: text for key, text in given.items() if key in head.parameters}),
            values["score_threshold"],
            values["iou_threshold"],
            values["max_detections"],
            values["class_agnostic"],
            values["clip_to_image"],
            values["labels_file"],
        )
        if not 0.0 <= settings.score_threshold <= 1.0:
            raise ValueError(f"score_threshold must be in [0, 1], got {settings.score_threshold}")
        if not 0.0 <= settings.iou_threshold <= 1.0:
            raise ValueError(f"iou_threshold must be in [0, 1], got {settings.iou_threshold}")
        if settings.max_detections < 1:
            raise ValueError(f"max_detections must be positive, got {settings.max_detections}")
        return settings


class DetectionResult(TaskResult):
    """A batch's detections in the photos' pixels: ``boxes [N, K, 4]``, ``scores``, ``class_ids``,
    ``counts [N]``, ``keypoints [N, K, P, 2]`` or None; rows past a count are zero."""

    def __init__(
        self,
        post: DetectionPostprocessor,
        boxes: np.ndarray,
        scores: np.ndarray,
        class_ids: np.ndarray,
        counts: np.ndarray,
        keypoints: np.ndarray | None,
        sizes: np.ndarray,
        extras: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        self.post, self.boxes, self.scores, self.class_ids = post, boxes, scores, class_ids
        self.counts, self.keypoints, self.sizes = counts, keypoints, sizes
        self.extras = dict(extras or {})  # the head's extra answers by role, [N, K, ...]

    def __len__(self) -> int:
        return rows(self.counts)

    def image_extras(self, index: int) -> dict[str, np.ndarray]:
        """One image's extra answers by role (the head's), without padding."""
        count = int(self.counts[index])
        return {role: array[index, :count] for role, array in self.extras.items()}

    def image(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """One image's (boxes, scores, class ids, keypoints), without padding."""
        count = int(self.counts[index])
        keypoints = None if self.keypoints is None else self.keypoints[index, :count]
        return self.boxes[index, :count], self.scores[index, :count], self.class_ids[index, :count], keypoints

    def outputs(self, start: int = 0, stop: int | None = None) -> dict[str, np.ndarray]:
        counts = self.counts[start:stop]
        k = int(counts.max()) if len(counts) else 0
        ids = np.ascontiguousarray(self.class_ids[start:stop, :k])
        labels = self.post.labels()[ids]
        labels[np.arange(k)[None, :] >= counts[:, None]] = b""
        values = {
            "boxes": np.ascontiguousarray(self.boxes[start:stop, :k]),
            "scores": np.ascontiguousarray(self.scores[start:stop, :k]),
            "class_ids": ids,
            "labels": labels,
            "count": counts.astype(np.int32).reshape(-1, 1),
        }
        if self.keypoints is not None:
            values["keypoints"] = np.ascontiguousarray(self.keypoints[start:stop, :k])
        for role, array in self.extras.items():
            values[role] = np.ascontiguousarray(array[start:stop, :k])
        return self.post.named(values)

    def features(self) -> drift.Features:
        counts = self.counts.astype(np.float64)
        kept = np.arange(self.scores.shape[1])[None, :] < counts[:, None]
        total = np.where(kept, self.scores, 0.0).sum(axis=1, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            confidence = np.where(counts > 0, total / counts, np.nan)
        return drift.Features({"detections": counts, "confidence": confidence})


def to_image(points: np.ndarray, transforms: np.ndarray) -> np.ndarray:
    """Model-input pixels ``[N, ..., 2]`` (x, y) -> the photos' pixels through each image's transform
    ``[N, 4]`` (``image = (tensor - offset) / scale``), computed in float64."""
    t = np.asarray(transforms, dtype=np.float64).reshape(len(transforms), *([1] * (points.ndim - 2)), 4)
    out = np.empty(points.shape, dtype=np.float64)
    out[..., 0] = (points[..., 0] - t[..., 2]) / t[..., 0]
    out[..., 1] = (points[..., 1] - t[..., 3]) / t[..., 1]
    return out


class DetectionPostprocessor(Postprocessor):
    def __init__(self, config: ModelConfig, model_dir: Path, require_labels: bool = True) -> None:
        try:
            self.settings = Settings.from_config(config)
        except ValueError as error:
            raise ConfigError(f"model '{config.name}': {error}") from None
        head = self.settings.head
        self.head_roles = head.input_roles()
        super().__init__(config, input_roles(head, config), answer_roles(head))
        # A tiled pipeline's postprocess sends each photo's views to the core by BLS (:mod:`.detection_tiles`).
        self.core: tiles.CoreLink | None = None
        if tiling.is_tiled(config):
            self.tiling = tiling.Tiling.from_config(config)
            if self.tiling.merge not in head.tile_merges:
                raise ConfigError(
                    f"model '{config.name}': tile_merge {self.tiling.merge!r} is not one of {', '.join(head.tile_merges)} for head {head.name}"
                )
            self.core = tiles.CoreLink.of(config, model_dir)
            self.stage_models = {"core": self.core.model}
            self.stage_tensors = {"core": (self.core.input, self.core.outputs)}
            self.stage_dtypes = {"core": self.core.dtype}
            self._infer: tiling.Infer | None = None
        head.bind(*((self.core.tensors, self.core.head_names(head)) if self.core is not None else (config, self.inputs)))
        labels_path = model_dir / self.settings.labels_file
        self._labels: np.ndarray | None = None
        if require_labels or labels_path.is_file():
            count = head.num_classes
            if count is None:  # the outputs do not say: the labels do
                count = len(load_labels_any(labels_path))
            self._labels = load_labels(labels_path, count)

    @property
    def num_classes(self) -> int:
        return len(self.labels())

    def labels(self) -> np.ndarray:
        if self._labels is None:
            raise FileNotFoundError(f"model '{self.config.name}': no labels file {self.settings.labels_file}")
        return self._labels

    def use_stages(self, models: Mapping[str, Any]) -> None:
        """The core a tiled postprocess calls (role ``core``: an async call, a batch of views in, its outputs out)."""
        if set(models) != set(self.stage_models):
            raise ConfigError(f"model '{self.config.name}' calls {sorted(self.stage_models) or 'no model'}, got {sorted(models)}")
        self._infer = models.get("core")

    def parse_roles(self, values: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray]:
        if self.core is not None:  # per photo (image_size first: the rows a request's answer has) and per view
            parsed = tiles.parse(values, self.tiling, self.settings.head)
        else:
            parsed = {role.role: np.asarray(values[role.role], dtype=np.float32) for role in self.head_roles}
            sizes, transform = values["image_size"], values["transform"]
            assert sizes is not None and transform is not None
            count = rows(next(iter(parsed.values())))
            parsed["image_size"] = np.asarray(sizes).reshape(count, 2)
            parsed["transform"] = np.asarray(transform, dtype=np.float32).reshape(count, 4)
        count = rows(parsed["image_size"])
        names = self.inputs
        parsed["score_threshold"] = per_image_option(
            values.get("score_threshold"), count, self.settings.score_threshold, names["score_threshold"] or "SCORE_THRESHOLD"
        )
        parsed["iou_threshold"] = per_image_option(
            values.get("iou_threshold"), count, self.settings.iou_threshold, names["iou_threshold"] or "IOU_THRESHOLD"
        )
        return parsed

    def run(self, batch: Mapping[str, np.ndarray]) -> DetectionResult:
        if self.core is not None:
            return asyncio.run(self.read(batch))
        return self.answers(batch, self.settings.clip)

    async def read(self, batch: Mapping[str, np.ndarray]) -> DetectionResult:
        """A tiled batch: every view to the core by BLS, each answered as a photo of its own, each photo's merged."""
        if self.core is None:
            return self.run(batch)
        if self._infer is None:
            raise RuntimeError(f"model '{self.config.name}': its core is not connected (use_stages)")
        head = self.settings.head
        outputs = await tiling.in_batches(np.asarray(batch["tiles"]), self.core.max_batch, self._infer)
        views = self.answers({**self.core.by_role(head, outputs), **tiles.per_view(batch)}, self.settings.clip and head.clips_to_tile)
        answers = tiles.Answers(views.boxes, views.scores, views.class_ids, views.counts, views.keypoints, views.extras)
        out = tiles.merge_photos(answers, batch, head, self.settings.max_detections, self.settings.clip)
        sizes = np.asarray(batch["image_size"], np.int32)
        return DetectionResult(self, out.boxes, out.scores, out.class_ids, out.counts, out.keypoints, sizes, out.extras)

    def answers(self, batch: Mapping[str, np.ndarray], clip: bool) -> DetectionResult:
        """A batch of photos' core outputs -> their detections (boxes and keypoints clipped to each photo where ``clip``)."""
        settings = NmsSettings(batch["score_threshold"], batch["iou_threshold"], self.settings.max_detections, self.settings.class_agnostic)
        found = self.settings.head.detect({role.role: batch[role.role] for role in self.head_roles}, settings)
        sizes = np.asarray(batch["image_size"]).reshape(-1, 2).astype(np.float64)
        boxes = self.settings.head.boxes_to_photo(found, np.asarray(batch["transform"]))
        if boxes is None:
            boxes = to_image(found.boxes.reshape(*found.boxes.shape[:2], 2, 2), batch["transform"]).reshape(found.boxes.shape)
        keypoints = None
        if found.keypoints is not None:  # x and y to the photo's pixels; a score passes through
            keypoints = found.keypoints.astype(np.float64)
            keypoints[..., :2] = to_image(found.keypoints[..., :2], batch["transform"])
        if clip:
            height, width = sizes[:, 0, None], sizes[:, 1, None]
            boxes[..., 0::2] = np.clip(boxes[..., 0::2], 0, width[..., None])
            boxes[..., 1::2] = np.clip(boxes[..., 1::2], 0, height[..., None])
            if keypoints is not None:
                keypoints[..., 0] = np.clip(keypoints[..., 0], 0, width[..., None])
                keypoints[..., 1] = np.clip(keypoints[..., 1], 0, height[..., None])
        padding = np.arange(found.scores.shape[1])[None, :] >= found.counts[:, None]
        boxes[padding] = 0
        if keypoints is not None:
            keypoints[padding] = 0
        raw = {role.role: batch[role.role] for role in self.head_roles}
        extras = self.settings.head.extras_to_photo(found, raw, np.asarray(batch["transform"]), sizes, boxes)
        return DetectionResult(
            self,
            boxes.astype(np.float32),
            found.scores,
            found.class_ids,
            found.counts,
            None if keypoints is None else keypoints.astype(np.float32),
            sizes.astype(np.int32),
            extras,
        )


def load_labels_any(path: Path) -> list[str]:
    """Every line of a labels file (for heads whose outputs do not give the class count)."""
    if not path.is_file():
        raise FileNotFoundError(f"label file {path} does not exist")
    return path.read_text(encoding="utf-8").splitlines()


# --------------------------------------------------------------------------- the task


class DetectionTask(Task):
    name = "detection"
    drift_features = ("detections", "confidence")
    # Detections matched one to one; keypoints (where the head has them) agree when within KEYPOINT_TOLERANCE of the
    # box's diagonal; each head may add its own checks on what it adds (a segmenter's masks, an oriented box's rotation).
    gate_defaults: ClassVar[dict[str, float]] = {
        "min_detection_agreement": 0.95,
        "min_matched_iou": 0.90,
        "min_keypoint_agreement": 0.90,
        **{key: value for head in HEADS.values() for key, value in head.gate_defaults.items()},
    }
    # Tiled inference (vision_serving.tiling): its preprocessor cuts each photo's views (detection_tiles).
    preprocessors = (tiles.PREPROCESSOR,)
    tiled_preprocessor = tiles.PREPROCESSOR.name
    dataset_layout = (
        "DIR/<image> with YOLO labels (one 'class cx cy w h' line per object, normalized) in <image stem>.txt beside it "
        "or in the labels/ folder beside images/; no labels file: no objects"
    )

    def postprocessor(self, config: ModelConfig, model_dir: Path) -> DetectionPostprocessor:
        return DetectionPostprocessor(config, model_dir)

    def output_roles(self) -> tuple[Role, ...]:
        """Every output a detection pipeline may have (a client reading an ensemble): the heads' extra answers optional."""
        extra: dict[str, Role] = {}
        for head in HEADS.values():
            for role in head.extra_answers:
                extra.setdefault(role.role, dataclasses.replace(role, optional=True))
        return (*_output_roles(None), *extra.values())

    def request_roles(self) -> tuple[Role, ...]:
        """The thresholds, and a tiled pipeline's ``TILING``."""
        return (*REQUEST_ROLES, tiles.TILING_OPTION)

    def config_roles(self, config: ModelConfig) -> tuple[tuple[Role, ...], tuple[Role, ...]]:
        """A tiled pipeline's inputs but its views' (the generator declares those: the core's input, per view)."""
        try:
            head = Settings.from_config(config).head
        except ValueError as error:
            raise ConfigError(f"model '{config.name}': {error}") from None
        return tuple(role for role in input_roles(head, config) if role.role != "tiles"), answer_roles(head)

    def check(self, config: ModelConfig, model_dir: Path, preprocess: Any) -> list[str]:
        try:
            post = DetectionPostprocessor(config, model_dir, require_labels=False)
        except (ConfigError, ValueError, FileNotFoundError) as error:
            return [str(error)]
        if preprocess is None:
            return []
        return [f"model '{config.name}': {problem}" for problem in post.settings.head.check(preprocess.height, preprocess.width)]

    def gate(self, reference: TaskResult, candidate: TaskResult, limits: Mapping[str, float]) -> dict[str, Any]:
        assert isinstance(reference, DetectionResult) and isinstance(candidate, DetectionResult)
        ious: list[float] = []
        keypoint_errors: list[float] = []
        score_errors: list[float] = []
        matched: dict[int, int] = {}
        found: dict[int, int] = {}
        same_count = 0
        head = reference.post.settings.head
        similarities: dict[str, list[float]] = {}
        for index in range(len(reference)):
            boxes, scores, classes, keypoints = reference.image(index)
            other_boxes, other_scores, other_classes, other_keypoints = candidate.image(index)
            extras, other_extras = reference.image_extras(index), candidate.image_extras(index)
            same_count += len(boxes) == len(other_boxes)
            for class_id in np.concatenate([classes, other_classes]).tolist():
                found[class_id] = found.get(class_id, 0) + 1
            for i, j, iou in match_by_class((boxes, classes), (other_boxes, other_classes)):
                ious.append(iou)
                matched[int(classes[i])] = matched.get(int(classes[i]), 0) + 1
                score_errors.append(abs(float(scores[i] - other_scores[j])))
                if keypoints is not None and other_keypoints is not None:
                    width = max(float(boxes[i, 2] - boxes[i, 0]), 1e-6)
                    distances = np.linalg.norm(keypoints[i][..., :2] - other_keypoints[j][..., :2], axis=-1)
                    keypoint_errors.append(float(distances.max()) / width)
                    diagonal = max(float(np.hypot(boxes[i, 2] - boxes[i, 0], boxes[i, 3] - boxes[i, 1])), 1e-6)
                    similarities.setdefault("keypoint_agreement", []).append(float(np.mean(distances <= KEYPOINT_TOLERANCE * diagonal)))
                for name, value in head.gate_similarities(extras, other_extras, i, j).items():
                    similarities.setdefault(name, []).append(value)
        total = sum(found.values())
        agreement = 2.0 * len(ious) / total if total else 1.0
        matched_iou = float(np.mean(ious)) if ious else 1.0
        labels = reference.post.labels()
        per_class = {labels[c].decode(): 2.0 * matched.get(c, 0) / found[c] for c in sorted(found)}
        metrics = {
            "images": len(reference),
            "detections_fp32": int(reference.counts.sum()),
            "detections_candidate": int(candidate.counts.sum()),
            "matched": len(ious),
            "detection_agreement": agreement,
            "agreement_by_class": per_class,
            "images_with_the_same_count": same_count / max(len(reference), 1),
            "matched_iou_mean": matched_iou,
            "matched_iou_min": float(np.min(ious)) if ious else 1.0,
            "score_abs_diff_max": float(np.max(score_errors)) if score_errors else 0.0,
        }
        if keypoint_errors:
            metrics["keypoint_error_max_of_box_width"] = float(np.max(keypoint_errors))
        checks = {
            "detection_agreement": (agreement, limits["min_detection_agreement"]),
            "matched_iou_mean": (matched_iou, limits["min_matched_iou"]),
        }
        for name, values in similarities.items():  # the mean over the matched detections, against min_<name>
            metrics[f"{name}_mean"], metrics[f"{name}_min"] = float(np.mean(values)), float(np.min(values))
            checks[name] = (float(np.mean(values)), limits[f"min_{name}"])
        return gate_report(metrics, checks)

    def response_result(self, postprocessor: Postprocessor, outputs: Mapping[str, np.ndarray]) -> DetectionResult:
        assert isinstance(postprocessor, DetectionPostprocessor)
        counts = np.asarray(outputs["count"], dtype=np.int32).reshape(-1)
        keypoints = outputs.get("keypoints")
        extras = {role.role: np.asarray(outputs[role.role]) for role in postprocessor.settings.head.extra_answers if role.role in outputs}
        return DetectionResult(
            postprocessor,
            np.asarray(outputs["boxes"], dtype=np.float32),
            np.asarray(outputs["scores"], dtype=np.float32),
            np.asarray(outputs["class_ids"], dtype=np.int32),
            counts,
            None if keypoints is None else np.asarray(keypoints, dtype=np.float32),
            np.zeros((len(counts), 2), np.int32),
            extras,
        )

    def dataset(self, directory: Path, postprocessor: Postprocessor) -> list[LabelledSample]:
        assert isinstance(postprocessor, DetectionPostprocessor)
        classes = postprocessor.num_classes
        samples = []
        for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES):
            labels = _label_file(directory, path)
            target = np.zeros((0, 5), np.float64)
            if labels is not None:
                try:
                    target = np.array([[float(v) for v in line.split()[:5]] for line in labels.read_text().splitlines() if line.strip()])
                except ValueError:
                    raise ValueError(f"{labels}: a line is not 'class cx cy w h' numbers") from None
                target = target.reshape(-1, 5)
                if target.size and (target[:, 0].min() < 0 or target[:, 0].max() >= classes or target[:, 0] % 1).any():
                    raise ValueError(f"{labels}: class ids must be integers in 0..{classes - 1}")
            samples.append(LabelledSample(path, target))
        return samples

    @staticmethod
    def _tally(
        result: DetectionResult, samples: Sequence[LabelledSample], hits: dict[int, list[tuple[float, bool]]], truths: dict[int, int]
    ) -> None:
        """Each detection's (score, whether it matched a labelled object of its class); labelled objects per class."""
        for index, sample in enumerate(samples):
            height, width = (float(v) for v in result.sizes[index])
            target = sample.target
            true_boxes = np.stack(
                [
                    (target[:, 1] - target[:, 3] / 2) * width,
                    (target[:, 2] - target[:, 4] / 2) * height,
                    (target[:, 1] + target[:, 3] / 2) * width,
                    (target[:, 2] + target[:, 4] / 2) * height,
                ],
                axis=-1,
            )
            true_classes = target[:, 0].astype(np.int64)
            for class_id in true_classes.tolist():
                truths[class_id] = truths.get(class_id, 0) + 1
            boxes, scores, classes, _ = result.image(index)
            matched = {i for i, _, _ in match_by_class((boxes, classes), (true_boxes, true_classes))}
            for i in range(len(boxes)):
                hits.setdefault(int(classes[i]), []).append((float(scores[i]), i in matched))

    def dataset_metrics(self, runs: Sequence[tuple[TaskResult, Sequence[LabelledSample]]]) -> dict[str, float]:
        hits: dict[int, list[tuple[float, bool]]] = {}
        truths: dict[int, int] = {}
        for result, samples in runs:
            assert isinstance(result, DetectionResult)
            self._tally(result, samples, hits, truths)
        true_positives = sum(hit for values in hits.values() for _, hit in values)
        predicted = sum(len(values) for values in hits.values())
        expected = sum(truths.values())
        aps = []
        for class_id, count in truths.items():
            ranked = sorted(hits.get(class_id, []), key=lambda item: -item[0])
            correct = np.cumsum([hit for _, hit in ranked])
            aps.append(average_precision(correct / count, correct / np.arange(1, len(ranked) + 1)) if ranked else 0.0)
        return {
            "precision": true_positives / predicted if predicted else 0.0,
            "recall": true_positives / expected if expected else 0.0,
            "map50": float(np.mean(aps)) if aps else 0.0,
        }


def _label_file(directory: Path, image: Path) -> Path | None:
    beside = image.with_suffix(".txt")
    if beside.is_file():
        return beside
    parts = list(image.relative_to(directory).parts)
    if "images" in parts:
        parts[len(parts) - 1 - parts[::-1].index("images")] = "labels"
        candidate = (directory / Path(*parts)).with_suffix(".txt")
        if candidate.is_file():
            return candidate
    return None


TASK = DetectionTask()
