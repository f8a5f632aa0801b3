"""Ultralytics' RT-DETR: the tests' own (untrained) model and its predictor as the reference.

STANDALONE: runs inside the ``ultralytics`` build environment (``.build/envs/ultralytics``; Ultralytics is AGPL-3.0 and
never enters ``.venv`` or an image); it imports only ultralytics, torch, numpy and the standard library, never the
project.

Usage::

    python tests/support/ultralytics_rtdetr.py export --out DIR [--imgsz 128] [--names a,b,c] [--width 0.25] [--seed 0]
    python tests/support/ultralytics_rtdetr.py predict --model MODEL.onnx --imgsz H,W --out OUT.npz [--model ...] IMAGE...

``export`` builds ``rtdetr-l.yaml`` at a quarter of its width and a third of its depth (15.7 M parameters, most of them
the decoder's), its weights drawn from ``--seed`` (no pretrained weights can be installed here, and training it on
these CPUs takes about ten minutes an epoch), and exports ``DIR/static.onnx`` (``[1, 300, 6]``: normalized centre and
size, score, class; metadata ``head: RTDETRDecoder``) and ``DIR/dynamic.onnx`` (``dynamic=True``). ``predict`` runs
``RTDETR(file).predict`` (conf 0.25, max_det 300: its ``LetterBox(scale_fill=True)``, no clipping) and writes, per image
i, ``"<i>_boxes"``, ``"<i>_scores"``, ``"<i>_classes"`` as ``tests/support/ultralytics_yolo.py`` does.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("YOLO_OFFLINE", "1")  # nothing downloads: no hub, no fonts, no telemetry

import numpy as np

ARCHITECTURE = "rtdetr-l.yaml"
EXPORTS = {"static": {"dynamic": False, "simplify": True, "opset": 17}, "dynamic": {"dynamic": True, "simplify": False, "opset": 19}}


def export(out: Path, imgsz: int, names: list[str], width: float, seed: int) -> None:
    import torch
    from ultralytics import RTDETR
    from ultralytics.nn.tasks import yaml_model_load
    from ultralytics.utils import YAML

    torch.manual_seed(seed)
    config = {key: value for key, value in yaml_model_load(ARCHITECTURE).items() if key not in ("scale", "yaml_file")}
    config["scales"] = {"l": [0.33, width, 1024]}
    config["nc"] = len(names)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        YAML.save(Path(scratch) / ARCHITECTURE, config)
        model = RTDETR(str(Path(scratch) / ARCHITECTURE))
        model.model.names = dict(enumerate(names))
        weights = Path(scratch) / "weights.pt"
        model.save(str(weights))
        for name, options in EXPORTS.items():
            exported = RTDETR(str(weights)).export(format="onnx", imgsz=imgsz, **options)
            shutil.move(exported, out / f"{name}.onnx")
    print(f"ultralytics_rtdetr: exported an untrained RT-DETR ({len(names)} classes, {imgsz} px) to {out}", file=sys.stderr)


def predict(models: list[tuple[Path, list[int], Path]], images: list[str]) -> None:
    from ultralytics import RTDETR

    for model_path, imgsz, out in models:
        model = RTDETR(str(model_path))
        arrays: dict[str, np.ndarray] = {}
        for index, path in enumerate(images):
            (result,) = model.predict(source=path, imgsz=imgsz, conf=0.25, max_det=300, device="cpu", verbose=False)
            arrays[f"{index}_boxes"] = result.boxes.xyxy.numpy().astype(np.float32).reshape(-1, 4)
            arrays[f"{index}_scores"] = result.boxes.conf.numpy().astype(np.float32).reshape(-1)
            arrays[f"{index}_classes"] = result.boxes.cls.numpy().astype(np.int64).reshape(-1)
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "wb") as file:
            np.savez(file, **arrays)  # type: ignore[arg-type]
        print(f"ultralytics_rtdetr: predicted {len(images)} image(s) with {model_path.name} -> {out}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    exporting = steps.add_parser("export")
    exporting.add_argument("--out", type=Path, required=True)
    exporting.add_argument("--imgsz", type=int, default=128)
    exporting.add_argument("--names", default="circle,square,triangle")
    exporting.add_argument("--width", type=float, default=0.25)
    exporting.add_argument("--seed", type=int, default=0)
    predicting = steps.add_parser("predict")
    predicting.add_argument("--model", type=Path, action="append", required=True)
    predicting.add_argument("--task", default="detect", choices=["detect"])
    predicting.add_argument("--imgsz", type=lambda text: [int(v) for v in text.split(",")], action="append", required=True)
    predicting.add_argument("--out", type=Path, action="append", required=True)
    predicting.add_argument("images", nargs="*")
    args = parser.parse_args(argv)
    if args.step == "export":
        export(args.out, args.imgsz, args.names.split(","), args.width, args.seed)
    elif not len(args.model) == len(args.imgsz) == len(args.out):
        parser.error("predict: one --imgsz and one --out per --model")
    else:
        predict(list(zip(args.model, args.imgsz, args.out)), args.images)
    return 0


if __name__ == "__main__":
    sys.exit(main())
