"""Ultralytics' own YOLO: train the tests' small detector, export it, and predict with it as the reference.

STANDALONE: runs inside the ``ultralytics`` build environment (``.build/envs/ultralytics``,
``requirements/ultralytics.txt``; Ultralytics is AGPL-3.0 and never enters ``.venv`` or an image);
it imports only ultralytics, numpy and the standard library, never the project.

Usage::

    python tests/support/ultralytics_yolo.py train --data DATA.yaml --out DIR [--imgsz 128] [--wide 192] [--epochs 40] [--seed 0]
    python tests/support/ultralytics_yolo.py predict --model MODEL.onnx --imgsz H,W --out OUT.npz IMAGE...

``train`` trains a YOLOv8n from ``yolov8n.yaml`` (no pretrained weights: none can be installed
here) on the dataset the tests drew at ``imgsz`` x ``imgsz``, then exports it to ONNX (``EXPORTS``):
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
``"<i>_classes"`` [D] int, best first, and ``names`` (the model's class names in id order).
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


def EXPORTS(imgsz: int, wide: int) -> list[tuple[str, int | list[int], dict]]:  # noqa: N802 (a table, computed)
    """The exports: (file stem, imgsz, export options). Static files as Ultralytics exports by default, and the
    dynamic ones its Triton guide asks for (``dynamic=True``; with ``nms=True`` and the batch its NMS is unrolled for)."""
    return [
        ("yolo", [imgsz, wide], {"dynamic": False, "simplify": True, "opset": 17}),
        ("end2end", imgsz, {"dynamic": False, "simplify": True, "opset": 17, "nms": True}),
        ("dynamic", imgsz, {"dynamic": True, "simplify": False, "opset": 19}),
        ("dynamic_nms", imgsz, {"dynamic": True, "simplify": True, "opset": 20, "nms": True, "batch": 4}),
    ]


def train(data: Path, out: Path, imgsz: int, wide: int, epochs: int, seed: int) -> None:
    import torch
    import ultralytics
    from ultralytics import YOLO

    started = time.time()
    with tempfile.TemporaryDirectory() as runs:
        model = YOLO("yolov8n.yaml")
        results = model.train(
            data=str(data), imgsz=imgsz, epochs=epochs, batch=16, workers=0, device="cpu", seed=seed, deterministic=True,
            mosaic=0.0, warmup_epochs=1, val=False, plots=False, amp=False, verbose=False, project=runs, name="train",
        )  # fmt: skip
        weights = Path(runs) / "train" / "weights" / "last.pt"
        out.mkdir(parents=True, exist_ok=True)
        for name, size, options in EXPORTS(imgsz, wide):
            exported = YOLO(str(weights)).export(format="onnx", imgsz=size, **options)
            shutil.move(exported, out / f"{name}.onnx")
    record = {
        "ultralytics": ultralytics.__version__,
        "torch": torch.__version__,
        "architecture": "yolov8n.yaml (no pretrained weights)",
        "data": str(data),
        "imgsz": imgsz,
        "epochs": epochs,
        "seed": seed,
        "map50": float(results.box.map50) if results is not None else None,
        "seconds": round(time.time() - started, 1),
        "exports": {f"{name}.onnx": {"imgsz": size, **options} for name, size, options in EXPORTS(imgsz, wide)},
    }
    (out / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"ultralytics_yolo: trained {epochs} epochs in {record['seconds']} s, mAP50 {record['map50']}", file=sys.stderr)


def predict(model_path: Path, imgsz: list[int], out: Path, images: list[str]) -> None:
    from ultralytics import YOLO

    model = YOLO(str(model_path), task="detect")
    arrays: dict[str, np.ndarray] = {}
    for index, path in enumerate(images):
        (result,) = model.predict(source=path, imgsz=imgsz, conf=0.25, iou=0.7, max_det=300, rect=False, device="cpu", verbose=False)
        boxes = result.boxes
        arrays[f"{index}_boxes"] = boxes.xyxy.numpy().astype(np.float32).reshape(-1, 4)
        arrays[f"{index}_scores"] = boxes.conf.numpy().astype(np.float32).reshape(-1)
        arrays[f"{index}_classes"] = boxes.cls.numpy().astype(np.int64).reshape(-1)
        names = result.names
    arrays["names"] = np.array([names[key] for key in sorted(names)]) if images else np.array([])
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as file:
        np.savez(file, **arrays)  # type: ignore[arg-type]
    print(f"ultralytics_yolo: predicted {len(images)} image(s) with {model_path.name} -> {out}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    training = steps.add_parser("train")
    training.add_argument("--data", type=Path, required=True)
    training.add_argument("--out", type=Path, required=True)
    training.add_argument("--imgsz", type=int, default=128)
    training.add_argument("--wide", type=int, default=192, help="the width of the yolo export (its height is --imgsz)")
    training.add_argument("--epochs", type=int, default=40)
    training.add_argument("--seed", type=int, default=0)
    predicting = steps.add_parser("predict")
    predicting.add_argument("--model", type=Path, required=True)
    predicting.add_argument("--imgsz", type=lambda text: [int(v) for v in text.split(",")], required=True, help="H,W")
    predicting.add_argument("--out", type=Path, required=True)
    predicting.add_argument("images", nargs="*")
    args = parser.parse_args(argv)
    if args.step == "train":
        train(args.data, args.out, args.imgsz, args.wide, args.epochs, args.seed)
    else:
        predict(args.model, args.imgsz, args.out, args.images)
    return 0


if __name__ == "__main__":
    sys.exit(main())
