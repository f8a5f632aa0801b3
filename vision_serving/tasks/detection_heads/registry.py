"""Every detection head, by the name a postprocess config's ``head`` parameter gives it."""

from __future__ import annotations

from . import end2end, end2end_obb, end2end_pose, end2end_segment, mediapipe_ssd, rtdetr, yolo, yolo_obb, yolo_pose, yolo_segment, yolo_v5
from .base import Head

HEADS: dict[str, type[Head]] = {
    head.name: head
    for head in (
        mediapipe_ssd.HEAD,
        yolo.HEAD,
        yolo_v5.HEAD,
        end2end.HEAD,
        yolo_pose.HEAD,
        yolo_segment.HEAD,
        yolo_obb.HEAD,
        end2end_segment.HEAD,
        end2end_pose.HEAD,
        end2end_obb.HEAD,
        rtdetr.HEAD,
    )
}


def head_class(name: str) -> type[Head]:
    if name not in HEADS:
        raise ValueError(f"head {name!r} is not one of {', '.join(sorted(HEADS))}")
    return HEADS[name]
