"""Ultralytics' own YOLO: train the tests' small models (a detector, and one of each other task), export them, and
predict with them as the reference.

STANDALONE: runs inside the ``ultralytics`` build environment (``.build/envs/ultralytics``,
``requirements/ultralytics.txt``; Ultralytics is AGPL-3.0 and never enters ``.venv`` or an image);
it imports only ultralytics, numpy and the standard library, never the project.

Usage::

    python tests/support/ultralytics_yolo.py train [--task detect] [--family yolov8] --data DATA --out DIR [--imgsz 128]
                                                   [--wide 192] [--epochs 40] [--seed 0] [--width 0.25] [--init WEIGHTS.pt]
    python tests/support/ultralytics_yolo.py predict [--task detect] --model MODEL.onnx --imgsz H,W --out OUT.npz [--model ...] IMAGE...

``train`` trains a YOLOv8n of the task (``ARCHITECTURES``: ``yolov8n.yaml``, ``yolov8n-seg.yaml``...), or with
``--family yolo26`` a YOLO26n (segment, pose, obb: ``yolo26n-seg.yaml``...; ``--width`` another width multiple of the
same layers, :func:`architecture`) on the dataset the tests drew at ``imgsz`` x ``imgsz``: from scratch (no pretrained
weights can be installed here), or from another of its trainings' weights (``--init DIR/weights.pt``: the layers whose
names and shapes match, Ultralytics' transfer), then keeps its weights (``DIR/weights.pt``) and exports it to ONNX
(:func:`exports`; a YOLOv8 task other than detect: ``static.onnx``, ``dynamic.onnx`` and ``nms.onnx``; a YOLO26 model:
``static.onnx``, ``end2end.onnx`` and ``end2end_dynamic.onnx``; its depth and semantic models: ``static.onnx``,
``wide.onnx`` at ``imgsz`` x ``wide`` and ``dynamic.onnx``). A detector's exports:
``DIR/yolo.onnx`` (static, the raw ``[1, 4 + C, A]`` head) at a landscape ``imgsz`` x ``wide``
input (the network is fully convolutional: a non-square export of square training, as Ultralytics
exports ``imgsz=(H, W)``), ``DIR/end2end.onnx`` (static, ``nms=True``: ``[1, 300, 6]``) at the square
size, and the two ``dynamic=True`` exports of Ultralytics' Triton guide, ``DIR/dynamic.onnx`` (every
dim symbolic, not simplified) and ``DIR/dynamic_nms.onnx`` (``nms=True, batch=4``), with
``DIR/training.json`` (versions, settings, the final validation mAP, seconds).

``predict`` runs Ultralytics' predictor on an ONNX file with its defaults (conf 0.25, iou 0.7,
max_det 300) and ``rect=False``: the full-size letterbox a fixed-size server computes, not the
smallest stride multiple it would use for a dynamic-shape model. The .npz holds, per image i,
``"<i>_boxes"`` [D, 4] (x_min, y_min, x_max, y_max, pixels of the image), ``"<i>_scores"`` [D],
``"<i>_classes"`` [D] int, best first, and ``names`` (the model's class names in id order); the other
tasks' answers as :func:`predict` lists them (masks at the image's size: ``retina_masks=True``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("YOLO_OFFLINE", "1")  # nothing downloads: no hub, no fonts, no telemetry

import numpy as np

# The model of each task Ultralytics trains and exports, by family (no pretrained weights): yolov8n's architecture, and
# YOLO26's (its NMS-free one-to-one head beside the one-to-many one).
ARCHITECTURES = {
    "yolov8": {"detect": "yolov8n.yaml", "segment": "yolov8n-seg.yaml", "pose": "yolov8n-pose.yaml", "obb": "yolov8n-obb.yaml",
               "classify": "yolov8n-cls.yaml"},
    "yolo26": {"segment": "yolo26n-seg.yaml", "pose": "yolo26n-pose.yaml", "obb": "yolo26n-obb.yaml", "depth": "yolo26n-depth.yaml",
               "semantic": "yolo26n-sem.yaml"},
}  # fmt: skip
TASKS = sorted({task for tasks in ARCHITECTURES.values() for task in tasks})
# An nms=True export's own score threshold (its in-graph NMSModel drops rows under it): low, so that a model trained for
# minutes keeps rows a test may raise (yolo_exports.surer); the served pipeline and the predictor apply 0.25 to the rows.
NMS_EXPORT_CONF = 0.01


def exports(task: str, imgsz: int, wide: int, family: str = "yolov8") -> list[tuple[str, int | list[int], dict]]:
    """The exports: (file stem, imgsz, export options). Static files as Ultralytics exports by default, and the
    dynamic ones its Triton guide asks for (``dynamic=True``; with ``nms=True`` and the batch its NMS is unrolled for).
    A detector's raw export is landscape; the other tasks' are square, static and dynamic, and ``nms.onnx`` (static,
    ``nms=True``: NMS in the graph). YOLO26's: ``static.onnx`` (``nms`` unset: the one-to-many head), ``end2end.onnx``
    (static, ``nms=False``: the NMS-free head) and ``end2end_dynamic.onnx`` (``dynamic=True, nms=False``)."""
    if task in ("depth", "semantic"):  # dense maps: no nms option (Ultralytics refuses it); square, landscape, dynamic
        return [
            ("static", imgsz, {"dynamic": False, "simplify": True, "opset": 17}),
            ("wide", [imgsz, wide], {"dynamic": False, "simplify": True, "opset": 17}),
            ("dynamic", imgsz, {"dynamic": True, "simplify": False, "opset": 19}),
        ]
    if family == "yolo26":
        return [
            ("static", imgsz, {"dynamic": False, "simplify": True, "opset": 17}),
            ("end2end", imgsz, {"dynamic": False, "simplify": True, "opset": 17, "nms": False}),
            ("end2end_dynamic", imgsz, {"dynamic": True, "simplify": False, "opset": 19, "nms": False}),
        ]
    if task != "detect":
        return [
            ("static", imgsz, {"dynamic": False, "simplify": True, "opset": 17}),
            ("dynamic", imgsz, {"dynamic": True, "simplify": False, "opset": 19}),
            *(
                [("nms", imgsz, {"dynamic": False, "simplify": True, "opset": 17, "nms": True, "conf": NMS_EXPORT_CONF})]
                if task != "classify"
                else []
            ),
        ]
    return [
        ("yolo", [imgsz, wide], {"dynamic": False, "simplify": True, "opset": 17}),
        ("end2end", imgsz, {"dynamic": False, "simplify": True, "opset": 17, "nms": True}),
        ("dynamic", imgsz, {"dynamic": True, "simplify": False, "opset": 19}),
        ("dynamic_nms", imgsz, {"dynamic": True, "simplify": True, "opset": 20, "nms": True, "batch": 4}),
    ]


def architecture(task: str, width: float, folder: Path, family: str = "yolov8") -> str:
    """The model to train: Ultralytics' n model of the family and task, or, at another width multiple than its own, the
    same layers (its depth, its channel limit) with ``width`` times the base channels: its yaml written in ``folder``,
    under the same name (Ultralytics reads the scale, n, from it)."""
    from ultralytics.nn.tasks import yaml_model_load
    from ultralytics.utils import YAML

    name = ARCHITECTURES[family][task]
    config = yaml_model_load(name)
    depth, base_width, channels = config["scales"]["n"]
    if width == base_width:
        return name
    config = {key: value for key, value in config.items() if key not in ("scale", "yaml_file")}
    config["scales"] = {"n": [depth, width, channels]}
    YAML.save(folder / name, config)
    return str(folder / name)


def train(
    task: str, data: Path, out: Path, imgsz: int, wide: int, epochs: int, seed: int, width: float, init: Path | None, family: str = "yolov8"
) -> None:
    import torch
    import ultralytics
    from ultralytics import YOLO

    started = time.time()
    exported_files = exports(task, imgsz, wide, family)
    with tempfile.TemporaryDirectory() as runs:
        model = YOLO(architecture(task, width, Path(runs), family), task=task)
        if init is not None:  # Ultralytics' transfer: every layer whose name and shape match is copied
            model.load(str(init))
        augment = {} if task == "classify" else {"mosaic": 0.0}
        results = model.train(
            data=str(data), imgsz=imgsz, epochs=epochs, batch=16, workers=0, device="cpu", seed=seed, deterministic=True,
            warmup_epochs=1, val=False, plots=False, amp=False, verbose=False, project=runs, name="train", **augment,
        )  # fmt: skip
        weights = Path(runs) / "train" / "weights" / "last.pt"
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(weights, out / "weights.pt")  # what another task's training may start from (--init)
        for name, size, options in exported_files:
            exported = YOLO(str(weights), task=task).export(format="onnx", imgsz=size, **options)
            shutil.move(exported, out / f"{name}.onnx")
    box = getattr(results, "box", None) if results is not None else None
    record = {
        "ultralytics": ultralytics.__version__,
        "torch": torch.__version__,
        "task": task,
        "architecture": f"{ARCHITECTURES[family][task]} at width {width:g}",
        "started_from": str(init) if init else "scratch (no pretrained weights)",
        "parameters": sum(parameter.numel() for parameter in model.model.parameters()),
        "data": str(data),
        "imgsz": imgsz,
        "epochs": epochs,
        "seed": seed,
        "map50": float(box.map50) if box is not None else None,
        "seconds": round(time.time() - started, 1),
        "exports": {f"{name}.onnx": {"imgsz": size, **options} for name, size, options in exported_files},
    }
    (out / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"ultralytics_yolo: trained {task} {epochs} epochs in {record['seconds']} s, mAP50 {record['map50']}", file=sys.stderr)


def predict(models: list[tuple[Path, list[int], Path]], task: str, images: list[str]) -> None:
    """Every answer the predictor gives for each (model file, imgsz, .npz to write) of ``models`` (one process for all
    of them: Ultralytics and torch load once), per image ``i`` (see the module): boxes, scores, classes; and, as the
    task has them, ``masks`` [K, H, W] uint8 in the image's pixels (``retina_masks=True``), ``keypoints`` [K, P, 3] (x,
    y, score), ``rotated`` [K, 5] (cx, cy, w, h, angle) and ``corners`` [K, 4, 2], ``probs`` [C], ``depth`` [H, W] float32
    metres and ``semantic`` [H, W] uint8 class ids at the image's size."""
    for model_path, imgsz, out in models:
        predict_one(model_path, task, imgsz, out, images)


def predict_one(model_path: Path, task: str, imgsz: list[int], out: Path, images: list[str]) -> None:
    from ultralytics import YOLO

    model = YOLO(str(model_path), task=task)
    arrays: dict[str, np.ndarray] = {}
    names: dict = {}
    for index, path in enumerate(images):
        (result,) = model.predict(
            source=path, imgsz=imgsz, conf=0.25, iou=0.7, max_det=300, rect=False, retina_masks=True, device="cpu", verbose=False
        )
        names = result.names
        boxes = result.obb if result.obb is not None else result.boxes
        if boxes is not None:
            arrays[f"{index}_boxes"] = boxes.xyxy.numpy().astype(np.float32).reshape(-1, 4)
            arrays[f"{index}_scores"] = boxes.conf.numpy().astype(np.float32).reshape(-1)
            arrays[f"{index}_classes"] = boxes.cls.numpy().astype(np.int64).reshape(-1)
        if result.obb is not None:
            arrays[f"{index}_rotated"] = result.obb.xywhr.numpy().astype(np.float32).reshape(-1, 5)
            arrays[f"{index}_corners"] = result.obb.xyxyxyxy.numpy().astype(np.float32).reshape(-1, 4, 2)
        if task == "segment":
            masks = result.masks
            height, width = result.orig_shape
            arrays[f"{index}_masks"] = masks.data.numpy().astype(np.uint8) if masks is not None else np.zeros((0, height, width), np.uint8)
        if task == "pose":
            keypoints = result.keypoints
            arrays[f"{index}_keypoints"] = keypoints.data.numpy().astype(np.float32) if keypoints is not None else np.zeros((0, 0, 3))
        if result.semantic_mask is not None:  # class ids at the image's size (the predictor's nearest resize)
            arrays[f"{index}_semantic"] = result.semantic_mask.data.numpy().astype(np.uint8)
        if result.depth is not None:  # metres at the image's size (the predictor's align_corners bilinear resize)
            arrays[f"{index}_depth"] = result.depth.data.numpy().astype(np.float32)
        if result.probs is not None:
            arrays[f"{index}_probs"] = result.probs.data.numpy().astype(np.float32).reshape(-1)
    arrays["names"] = np.array([names[key] for key in sorted(names)]) if images else np.array([])
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as file:
        np.savez(file, **arrays)  # type: ignore[arg-type]
    print(f"ultralytics_yolo: predicted {len(images)} image(s) with {model_path.name} -> {out}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    training = steps.add_parser("train")
    training.add_argument("--task", choices=TASKS, default="detect")
    training.add_argument(
        "--family", choices=sorted(ARCHITECTURES), default="yolov8", help="yolov8 (default) or yolo26 (no classify or detect)"
    )
    training.add_argument("--data", type=Path, required=True)
    training.add_argument("--out", type=Path, required=True)
    training.add_argument("--imgsz", type=int, default=128)
    training.add_argument("--wide", type=int, default=192, help="the width of the yolo export (its height is --imgsz)")
    training.add_argument("--epochs", type=int, default=40)
    training.add_argument("--seed", type=int, default=0)
    training.add_argument("--width", type=float, default=0.25, help="the width multiple of yolov8n's layers (yolov8n: 0.25)")
    training.add_argument("--init", type=Path, help="start from these weights (another training's weights.pt), not from scratch")
    predicting = steps.add_parser("predict")
    predicting.add_argument("--model", type=Path, action="append", required=True, help="a model file (repeat: one process for several)")
    predicting.add_argument("--task", choices=TASKS, default="detect")
    predicting.add_argument(
        "--imgsz", type=lambda text: [int(v) for v in text.split(",")], action="append", required=True, help="H,W (one per --model)"
    )
    predicting.add_argument("--out", type=Path, action="append", required=True, help="the .npz to write (one per --model)")
    predicting.add_argument("images", nargs="*")
    args = parser.parse_args(argv)
    if args.step == "train":
        if args.task not in ARCHITECTURES[args.family]:
            parser.error(f"train: no {args.family} {args.task} model here (the family's: {', '.join(sorted(ARCHITECTURES[args.family]))})")
        train(args.task, args.data, args.out, args.imgsz, args.wide, args.epochs, args.seed, args.width, args.init, args.family)
    elif not len(args.model) == len(args.imgsz) == len(args.out):
        parser.error("predict: one --imgsz and one --out per --model")
    else:
        predict(list(zip(args.model, args.imgsz, args.out)), args.task, args.images)
    return 0


if __name__ == "__main__":
    sys.exit(main())
