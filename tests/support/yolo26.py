"""The tests' own YOLO26 models: a segmenter, a pose model and an oriented-box model with YOLO26's NMS-free head.

YOLO26 is built around its one-to-one head: exported with ``nms=False`` it gives rows of detections, no NMS left to do
(``[1, 300, 6 + extra]``); with ``nms`` unset, its one-to-many head as YOLOv8's. The same scenes as the YOLOv8 models
of each task (:mod:`tests.support.yolo_segment`, :mod:`.yolo_pose`, :mod:`.yolo_obb`), a YOLO26n at the detector's
width (``yolo.WIDTH``) trained by Ultralytics (``ultralytics_yolo.py train --family yolo26``): the segmenter from
scratch, the pose and oriented-box models from its weights (the same backbone and neck), and exported three ways
(``static.onnx``: nms unset; ``end2end.onnx``: nms=False; ``end2end_dynamic.onnx``: nms=False, dynamic=True). The models
only have to give real outputs: :func:`trained` trains all three (about two minutes of CPU), cached as every test
model is (:func:`tests.support.yolo.train_task`).
"""

from __future__ import annotations

from pathlib import Path

from tests.support import yolo, yolo_obb, yolo_pose, yolo_segment

FAMILY = "yolo26"
SEGMENT_EPOCHS = 30  # from scratch
EPOCHS = 15  # pose and obb, from the segmenter's weights


def trained_task(task: str, log=print) -> Path:
    """The folder of the YOLO26 model of ``task`` (segment, pose or obb): its exports, weights and training.json."""
    if task == "segment":
        return yolo.train_task("segment", yolo_segment.write_dataset, log, epochs=SEGMENT_EPOCHS, width=yolo.WIDTH, family=FAMILY)
    write = {"pose": yolo_pose.write_dataset, "obb": yolo_obb.write_dataset}[task]
    return yolo.train_task(task, write, log, epochs=EPOCHS, width=yolo.WIDTH, start_from=trained_task("segment", log), family=FAMILY)


def trained(log=print) -> Path:
    """All three trained (what a run trains in the background); the segmenter's folder."""
    for task in ("pose", "obb"):
        trained_task(task, log)
    return trained_task("segment", log)
