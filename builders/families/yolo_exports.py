"""What Ultralytics' export of each detection head looks like, by the head's name: the facts ``new-pipeline --from yolo``
(:mod:`builders.families.yolo`) and the benchmarks read, which the served heads (:mod:`vision_serving.tasks.detection_heads`)
need not know.

Per head: the Ultralytics ``task`` whose exports carry it (its metadata's ``task``), its ``layout`` and who ``exports``
it (for the messages and the configs' comments), whether the model did the NMS (``nms_in_model``), :meth:`~YoloExport.fits`
(the outputs it reads, per image, for a class count), :meth:`~YoloExport.example_shapes` (the outputs of a model of some
input size), the head's config parameters from an export's metadata (:meth:`~YoloExport.parameters`: a pose model's
keypoints) and those of the model the example shapes describe (``example_parameters``). A head a YOLO export may carry
has its line in :data:`EXPORTS`; the others (MediaPipe's) have none.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vision_serving.tasks.detection_heads.end2end import COLUMNS
from vision_serving.tasks.detection_heads.yolo_segment import PROTO_STRIDE

Shapes = Sequence[tuple[int, ...]]

COCO_KEYPOINTS = (17, 3)  # Ultralytics' person pose models: 17 COCO keypoints, x, y, visibility
MASK_COEFFICIENTS = 32  # Ultralytics' Segment head: nm, the prototypes and each detection's coefficients
ANCHORS_PER_CELL = 3  # the original YOLOv5's anchor boxes per grid cell and stride
END2END_ROWS = 300  # Ultralytics' max_det: the rows its end-to-end exports give


def anchor_free_anchors(height: int, width: int, strides: Sequence[int] = (8, 16, 32)) -> int:
    """Anchors of an anchor-free YOLO head at that input size: one per cell of each stride's grid."""
    return sum((height // stride) * (width // stride) for stride in strides)


@dataclass(frozen=True)
class YoloExport:
    """One head's export: ``layout``, who ``exports`` it, its Ultralytics ``task``, whether ``nms_in_model``."""

    layout: str
    exports: str
    task: str = "detect"
    nms_in_model: bool = False
    example_parameters: Mapping[str, str] = field(default_factory=dict)
    # The metadata's ``head`` (Ultralytics' head module) that marks this export; such an export is taken only when the
    # metadata names it, and no other then.
    ultralytics_head: str = ""
    # The preprocess its predictor runs (Ultralytics' LetterBox, or with scale_fill: yolo_stretch) and whether it clips
    # the boxes to the photo.
    resize: str = "yolo_letterbox"
    clip_to_image: bool = True

    def fits(self, shapes: Shapes, classes: int | None) -> bool:
        """Whether the model's outputs (per-image dims, batch dim left out) are this head's, for ``classes`` classes
        (None: unknown, then the shape alone decides)."""
        raise NotImplementedError

    def example_shapes(self, classes: int, height: int, width: int) -> list[tuple[int, ...]]:
        """The per-image output dims a model of this head gives for ``classes`` classes at that input size."""
        raise NotImplementedError

    def parameters(self, metadata: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """The head's config parameters from the export's metadata (``ValueError`` where it lacks one)."""
        return ()


@dataclass(frozen=True)
class AnchorFree(YoloExport):
    """``[4 + C + extra_rows, A]``, one output; without a class count, fewer rows than anchors."""

    extra_rows: int = 0

    def fits(self, shapes: Shapes, classes: int | None) -> bool:
        if len(shapes) != 1 or len(shapes[0]) != 2:
            return False
        channels, anchors = shapes[0]
        rows = 4 + self.extra_rows
        return channels > rows and (channels == rows + classes if classes else channels < anchors)

    def example_shapes(self, classes: int, height: int, width: int) -> list[tuple[int, ...]]:
        return [(4 + classes + self.extra_rows, anchor_free_anchors(height, width))]


@dataclass(frozen=True)
class Pose(AnchorFree):
    """``[4 + C + P x D, A]``: the keypoint shape from the metadata (``kpt_shape``, and its ``kpt_names``)."""

    extra_rows: int = COCO_KEYPOINTS[0] * COCO_KEYPOINTS[1]

    def fits(self, shapes: Shapes, classes: int | None) -> bool:
        """Rows past the boxes and classes hold whole keypoints of 3 values (2 where 3 cannot divide them)."""
        if len(shapes) != 1 or len(shapes[0]) != 2 or classes is None:  # a pose export's metadata names its classes
            return False
        rest = shapes[0][0] - 4 - classes
        return rest > 0 and (rest % 3 == 0 or rest % 2 == 0)

    def parameters(self, metadata: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        shape = _literal(metadata.get("kpt_shape", ""))
        if not isinstance(shape, list | tuple) or len(shape) != 2:
            raise ValueError(f"a pose model's metadata must give kpt_shape [keypoints, 2 or 3], got {metadata.get('kpt_shape')!r}")
        parameters = [("keypoint_shape", f"{int(shape[0])},{int(shape[1])}")]
        names = _literal(metadata.get("kpt_names", "None"))
        if isinstance(names, dict):  # Ultralytics writes {class id: [names]}: one list for the keypoints of every class
            names = next(iter(names.values()), None)
        if isinstance(names, list | tuple) and len(names) == int(shape[0]):
            parameters.append(("keypoint_names", ",".join(str(name).replace(",", " ") for name in names)))
        return tuple(parameters)


@dataclass(frozen=True)
class Segment(YoloExport):
    """``[4 + C + M, A]`` predictions then ``[M, H/4, W/4]`` prototypes."""

    def fits(self, shapes: Shapes, classes: int | None) -> bool:
        """Predictions then prototypes, the rows past the boxes and classes as many as the prototypes."""
        if len(shapes) != 2 or len(shapes[0]) != 2 or len(shapes[1]) != 3:
            return False
        (channels, anchors), (coefficients, height, width) = shapes
        rest = channels - 4 - coefficients
        if min(coefficients, height, width, rest) < 1:
            return False
        return rest == classes if classes else channels < anchors

    def example_shapes(self, classes: int, height: int, width: int) -> list[tuple[int, ...]]:
        return [
            (4 + classes + MASK_COEFFICIENTS, anchor_free_anchors(height, width)),
            (MASK_COEFFICIENTS, height // PROTO_STRIDE, width // PROTO_STRIDE),
        ]


@dataclass(frozen=True)
class YoloV5(YoloExport):
    """``[A, 5 + C]``: objectness, then the classes; without a class count, more anchors than columns."""

    def fits(self, shapes: Shapes, classes: int | None) -> bool:
        if len(shapes) != 1 or len(shapes[0]) != 2:
            return False
        anchors, channels = shapes[0]
        return channels > 5 and (channels == 5 + classes if classes else anchors > channels)

    def example_shapes(self, classes: int, height: int, width: int) -> list[tuple[int, ...]]:
        return [(ANCHORS_PER_CELL * anchor_free_anchors(height, width), 5 + classes)]


@dataclass(frozen=True)
class EndToEndRows(YoloExport):
    """``[K, 6 + extra_columns]`` rows (:mod:`vision_serving.tasks.detection_heads.end2end`): YOLO26's NMS-free head
    (``nms=False``) or NMS in the graph (``nms=True``) of the task's one-to-many head."""

    nms_in_model: bool = True
    extra_columns: int = 0

    def fits(self, shapes: Shapes, classes: int | None) -> bool:
        return len(shapes) == 1 and len(shapes[0]) == 2 and shapes[0][1] == COLUMNS + self.extra_columns

    def example_shapes(self, classes: int, height: int, width: int) -> list[tuple[int, ...]]:
        return [(END2END_ROWS, COLUMNS + self.extra_columns)]


@dataclass(frozen=True)
class EndToEndPose(EndToEndRows, Pose):
    """``[K, 6 + P x D]``: the keypoint shape from the metadata, as :class:`Pose`'s."""

    extra_columns: int = COCO_KEYPOINTS[0] * COCO_KEYPOINTS[1]

    def fits(self, shapes: Shapes, classes: int | None) -> bool:
        """Columns past the six hold whole keypoints of 3 values (2 where 3 cannot divide them)."""
        if len(shapes) != 1 or len(shapes[0]) != 2:
            return False
        rest = shapes[0][1] - COLUMNS
        return rest > 0 and (rest % 3 == 0 or rest % 2 == 0)


@dataclass(frozen=True)
class EndToEndSegment(EndToEndRows):
    """``[K, 6 + M]`` rows then ``[M, H/4, W/4]`` prototypes."""

    def fits(self, shapes: Shapes, classes: int | None) -> bool:
        if len(shapes) != 2 or len(shapes[0]) != 2 or len(shapes[1]) != 3:
            return False
        (_, columns), (coefficients, height, width) = shapes
        return min(coefficients, height, width) >= 1 and columns == COLUMNS + coefficients

    def example_shapes(self, classes: int, height: int, width: int) -> list[tuple[int, ...]]:
        return [(END2END_ROWS, COLUMNS + MASK_COEFFICIENTS), (MASK_COEFFICIENTS, height // PROTO_STRIDE, width // PROTO_STRIDE)]


@dataclass(frozen=True)
class RtDetr(EndToEndRows):
    """``[K, 6]`` rows of normalized centre, size, score and class: the input size from the metadata's ``imgsz``."""

    def parameters(self, metadata: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        size = _literal(metadata.get("imgsz", ""))
        if isinstance(size, int):
            size = [size, size]
        if not isinstance(size, list | tuple) or len(size) != 2:
            raise ValueError(f"an RT-DETR model's metadata must give imgsz [height, width], got {metadata.get('imgsz')!r}")
        return (("input_size", f"{int(size[0])},{int(size[1])}"),)


# Head name -> its export, in the order the family tries them.
EXPORTS: dict[str, YoloExport] = {
    "yolo": AnchorFree("[4+C, A]", "YOLOv5u, v8, 11, 26"),
    "yolo_v5": YoloV5("[A, 5+C]", "the original YOLOv5"),
    "end2end": EndToEndRows("[K, 6]", "YOLO26 NMS-free, or nms=True"),
    "yolo_pose": Pose(
        "[4+C+PxD, A]",
        "YOLOv8, 11, 26 pose",
        task="pose",
        example_parameters={"keypoint_shape": f"{COCO_KEYPOINTS[0]},{COCO_KEYPOINTS[1]}"},
    ),
    "yolo_segment": Segment("[4+C+M, A], [M, H/4, W/4]", "YOLOv8, 11 segment", task="segment"),
    "yolo_obb": AnchorFree("[4+C+1, A]", "YOLOv8, 11, 26 obb", task="obb", extra_rows=1),
    "end2end_segment": EndToEndSegment("[K, 6+M], [M, H/4, W/4]", "YOLO26 segment NMS-free, or nms=True", task="segment"),
    "end2end_pose": EndToEndPose(
        "[K, 6+PxD]",
        "YOLO26 pose NMS-free, or nms=True",
        task="pose",
        example_parameters={"keypoint_shape": f"{COCO_KEYPOINTS[0]},{COCO_KEYPOINTS[1]}"},
    ),
    "end2end_obb": EndToEndRows("[K, 7]", "YOLO26 obb NMS-free, or nms=True", task="obb", extra_columns=1),
    "rtdetr": RtDetr(
        "[K, 6] (normalized cx, cy, w, h)",
        "RT-DETR",
        ultralytics_head="RTDETRDecoder",
        resize="yolo_stretch",
        clip_to_image=False,
        example_parameters={"input_size": "640,640"},
    ),
}


def heads(task: str | None = None) -> list[str]:
    """The heads a YOLO export's output may be: those of the Ultralytics ``task`` (its metadata's; None: every task's)."""
    return [name for name, export in EXPORTS.items() if task is None or export.task == task]


def tasks() -> list[str]:
    """The Ultralytics tasks some head serves."""
    return sorted({export.task for export in EXPORTS.values()})


def formats(task: str = "detect") -> str:
    """The output formats of ``task``'s heads, for a refusal."""
    return ", ".join(f"{name} [N, {EXPORTS[name].layout[1:]} ({EXPORTS[name].exports})" for name in heads(task))


def _literal(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
