"""The YOLO postprocessing's CPU cost by the number of candidates above the score threshold
(``python -m benchmarks.steps --parts detection``).

The postprocess model of a pipeline ``new-pipeline --from yolo`` writes, for every head a YOLO
export may carry (``builders.families.yolo_exports``), in the common COCO case (80 classes at 640x640:
``yolo`` [N, 84, 8400], ``yolo_v5`` [N, 25200, 85], ``end2end`` [N, 300, 6]; each export's
``example_shapes``), on a batch of raw outputs in which each image has exactly 0, 10 or 100
candidates above the score threshold (0.25) and every other anchor below it: the whole
postprocessing as served (parse + threshold + class-aware hard NMS + the map back to the
photo + the response tensors), one thread. CPU time (``time.process_time``), best of
``repeats``, per image. Candidates are spread over the image and the classes, so NMS keeps
most of them (the expensive case for the kept-box loop).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from builders.families import yolo as yolo_family
from builders.families import yolo_exports
from vision_serving import model_config
from vision_serving.tasks.detection import DetectionPostprocessor
from vision_serving.tasks.detection_heads import registry as detection_heads
from vision_serving.tasks.detection_heads.anchor_free import AnchorFreeHead
from vision_serving.tasks.detection_heads.base import xywh_to_xyxy
from vision_serving.tasks.detection_heads.end2end import EndToEnd

CLASSES = 80
SIZE = 640
CANDIDATES = (0, 10, 100)
Shapes = Sequence[tuple[int, ...]]


def heads() -> dict[str, list[tuple[int, ...]]]:
    """Every head a YOLO export may carry (builders.families.yolo_exports), with its outputs for 80 classes at 640x640."""
    return {name: export.example_shapes(CLASSES, SIZE, SIZE) for name, export in yolo_exports.EXPORTS.items()}


def postprocessor(head: str, folder: Path) -> DetectionPostprocessor:
    """The postprocess model new-pipeline writes for such a model (its config and labels), loaded."""
    shapes = heads()[head]
    export = yolo_exports.EXPORTS[head]
    model = yolo_family.YoloModel(
        input_name="images",
        height=SIZE,
        width=SIZE,
        output_names=tuple(f"output{index}" for index in range(len(shapes))),
        output_shapes=tuple((1, *shape) for shape in shapes),
        head=head,
        names=tuple(f"class_{i}" for i in range(CLASSES)),
        static_batch=False,
        ultralytics=True,
        task=export.task,
        head_parameters=tuple(export.example_parameters.items()),
    )
    files = yolo_family.files("bench", model, "bench.onnx", "0" * 64, ["stable_io_names"], 16)
    (folder / yolo_family.LABELS_FILE).write_text(files[f"bench_postprocess/{yolo_family.LABELS_FILE}"])
    config = model_config.parse_config_text(files["bench_postprocess/config.pbtxt"])
    return DetectionPostprocessor(config, folder)


def measure(head: str, candidates: int, batch: int, repeats: int, folder: Path) -> dict[str, Any]:
    post = postprocessor(head, folder)
    rng = np.random.default_rng([candidates, len(head)])
    raw = synthetic_outputs(head, heads()[head], CLASSES, batch, candidates, (SIZE, SIZE), rng)
    roles = [role.role for role in post.settings.head.input_roles() if role.from_core]
    tensors = {
        **{role.upper(): value for role, value in zip(roles, raw)},  # the names the family writes
        "IMAGE_SIZE": np.tile(np.array([[480, 640]], np.int32), (batch, 1)),
        "IMAGE_TRANSFORM": np.tile(np.array([[1.0, 1.0, 0.0, 80.0]], np.float32), (batch, 1)),
    }

    def once() -> Any:
        return post.run(post.parse(tensors)).outputs()

    outputs = once()
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        once()
        best = min(best, time.process_time() - started)
    return {"ms_per_image": best * 1e3 / batch, "kept_per_image": float(np.mean(outputs["COUNT"]))}


# --------------------------------------------------------------------------- synthetic raw outputs


def synthetic_outputs(
    head: str, shapes: Shapes, classes: int, batch: int, candidates: int, size: tuple[int, int], rng: np.random.Generator
) -> list[np.ndarray]:
    """Raw outputs ``[batch, *shape]`` (float32, C order) of ``head`` for ``classes`` classes in which every image has
    exactly ``candidates`` anchors (rows) above a score threshold of 0.25 and every other one below it, boxes spread
    over a ``size`` (height, width) input: the head's own (:data:`SYNTHETIC`), else, for an anchor-free head,
    :func:`anchor_free_outputs`."""
    if head in SYNTHETIC:
        return SYNTHETIC[head](shapes, classes, batch, candidates, size, rng)
    if issubclass(detection_heads.head_class(head), EndToEnd):
        return end_to_end_outputs(head, shapes, classes, batch, candidates, size, rng)
    if issubclass(detection_heads.head_class(head), AnchorFreeHead):
        return anchor_free_outputs(head, shapes, classes, batch, candidates, size, rng)
    raise ValueError(f"benchmarks.detection makes no synthetic outputs of head {head!r}: add its own to SYNTHETIC")


def synthetic_boxes(anchors: int, size: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """``[anchors, 4]`` boxes (centre x, y, width, height) of 8 to 60 pixels spread over a ``size`` input."""
    height, width = size
    centres = [rng.uniform(20, width - 20, anchors), rng.uniform(20, height - 20, anchors)]
    return np.stack([*centres, rng.uniform(8, 60, anchors), rng.uniform(8, 60, anchors)], axis=-1).astype(np.float32)


def synthetic_scores(anchors: int, classes: int, candidates: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``[anchors, classes]`` scores below 0.2 but for ``candidates`` anchors with one class in 0.3 .. 0.99, and those anchors."""
    scores = rng.uniform(0.0, 0.2, size=(anchors, classes)).astype(np.float32)
    chosen = rng.choice(anchors, size=candidates, replace=False)
    scores[chosen, rng.integers(0, classes, candidates)] = rng.uniform(0.3, 0.99, candidates)
    return scores, chosen.astype(np.int32)


def keypoint_rows(anchors: int, rows: int, size: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """A pose model's keypoints of 3 values: x and y over the input, a score in [0, 1)."""
    height, width = size
    keypoints = rows // 3
    points = [
        rng.uniform(0, width, (anchors, keypoints)),
        rng.uniform(0, height, (anchors, keypoints)),
        rng.uniform(0, 1, (anchors, keypoints)),
    ]
    return np.stack(points, axis=-1).reshape(anchors, rows)


def angle_rows(anchors: int, rows: int, size: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """An oriented box's angle in [-pi/4, 3pi/4), as the export decodes it."""
    return rng.uniform(-np.pi / 4, 3 * np.pi / 4, (anchors, rows))


def normal_rows(anchors: int, rows: int, size: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Values of a standard normal (a segmenter's mask coefficients)."""
    return rng.standard_normal((anchors, rows))


def uniform_rows(anchors: int, rows: int, size: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(0, 1, (anchors, rows))


# What an anchor-free head's rows past the classes hold, by head name; a head not listed: values in [0, 1).
EXTRA_ROWS: dict[str, Callable[[int, int, tuple[int, int], np.random.Generator], np.ndarray]] = {
    "yolo_pose": keypoint_rows,
    "yolo_segment": normal_rows,
    "yolo_obb": angle_rows,
    "end2end_pose": keypoint_rows,
    "end2end_segment": normal_rows,
    "end2end_obb": angle_rows,
}


def anchor_free_outputs(
    head: str, shapes: Shapes, classes: int, batch: int, candidates: int, size: tuple[int, int], rng: np.random.Generator
) -> list[np.ndarray]:
    """``[4 + classes + extra, A]`` predictions (the extra rows as :data:`EXTRA_ROWS` says), then each other output of
    a standard normal (a segmenter's prototypes)."""
    (channels, anchors), *others = shapes
    fill = EXTRA_ROWS.get(head, uniform_rows)
    images = []
    for _ in range(batch):
        boxes = synthetic_boxes(anchors, size, rng)
        scores = synthetic_scores(anchors, classes, candidates, rng)[0]
        images.append(np.concatenate([boxes, scores, fill(anchors, channels - 4 - classes, size, rng)], axis=1).T)
    # C order, as Triton hands a model's outputs over (stacking the transposed images would keep them anchor-major).
    predictions = np.ascontiguousarray(np.stack(images), dtype=np.float32)
    return [predictions, *(rng.standard_normal((batch, *shape)).astype(np.float32) for shape in others)]


def yolo_v5_outputs(
    shapes: Shapes, classes: int, batch: int, candidates: int, size: tuple[int, int], rng: np.random.Generator
) -> list[np.ndarray]:
    """``[A, 5 + classes]``: objectness 1 for the candidates, 0.2 for the rest: the product is what the threshold sees."""
    ((anchors, _),) = shapes
    boxes = synthetic_boxes(anchors, size, rng)
    images = []
    for _ in range(batch):
        scores, chosen = synthetic_scores(anchors, classes, candidates, rng)
        objectness = np.full((anchors, 1), 0.2, np.float32)
        objectness[chosen] = 1.0
        images.append(np.concatenate([boxes, objectness, scores], axis=1))
    return [np.stack(images).astype(np.float32)]


def end_to_end_outputs(
    head: str, shapes: Shapes, classes: int, batch: int, candidates: int, size: tuple[int, int], rng: np.random.Generator
) -> list[np.ndarray]:
    """``[K, 6 + extra]`` rows of scores below 0.2 but ``candidates`` of them, class ids out of ``classes``, the extra
    columns as :data:`EXTRA_ROWS` says; then each other output of a standard normal (a segmenter's prototypes)."""
    (rows_per_image, columns), *others = shapes
    corners = xywh_to_xyxy(synthetic_boxes(rows_per_image, size, rng))
    fill = EXTRA_ROWS.get(head, uniform_rows)
    images = []
    for _ in range(batch):
        rows = np.zeros((rows_per_image, columns), np.float32)
        rows[:, :4] = corners
        rows[:, 4] = rng.uniform(0.0, 0.2, rows_per_image)
        rows[rng.choice(rows_per_image, size=candidates, replace=False), 4] = rng.uniform(0.3, 0.99, candidates)
        rows[:, 5] = rng.integers(0, classes, rows_per_image)
        rows[:, 6:] = fill(rows_per_image, columns - 6, size, rng)
        images.append(rows)
    return [np.stack(images), *(rng.standard_normal((batch, *shape)).astype(np.float32) for shape in others)]


# The heads whose synthetic outputs are their own (the end-to-end ones share end_to_end_outputs, the anchor-free ones anchor_free_outputs).
SYNTHETIC: dict[str, Callable[[Shapes, int, int, int, tuple[int, int], np.random.Generator], list[np.ndarray]]] = {
    "yolo_v5": yolo_v5_outputs,
}
