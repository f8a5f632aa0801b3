"""RapidOCR's own pipeline as the reference the text_reader computation is compared with.

STANDALONE: runs inside the ``rapidocr`` build environment (``.build/envs/rapidocr``,
``requirements/rapidocr.txt``); it imports only rapidocr, its dependencies and the standard
library, never the project.

Usage::

    python tests/support/rapidocr_reference.py read --out OUT.json IMAGE...
    python tests/support/rapidocr_reference.py unclip --boxes BOXES.json --out OUT.json

``read`` runs ``RapidOCR()`` with the configuration its wheel ships (``rapidocr/config.yaml``:
PP-OCRv6 small detection and recognition, the PP-OCRv4 mobile direction classifier, the models
inside the wheel, nothing downloaded) on each image file, twice: the whole pipeline, and detection
alone (``use_cls=False, use_rec=False``: the boxes before recognition drops any). OUT.json holds
the versions it ran with and, per image in argument order, ``lines``: what RapidOCR answers, in
its order (``text``, ``score``, ``box``: 4 corners ``[x, y]`` in the photo's pixels, clockwise
from top-left), and ``detections``: detection's boxes and scores in the same order and frame.

``unclip`` runs RapidOCR's own ``DBPostProcess.unclip`` (pyclipper's rounded offset of a box by
``area * unclip_ratio / perimeter``, the ratio of ``config.yaml``) followed by its
``get_mini_boxes`` on each float32 box of BOXES.json (``[[x, y] x 4], ...``) and writes, per box,
the offset polygon's integer points and the fitted box: the record the project's own port of the
offset is checked against.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def _versions() -> dict[str, str]:
    from importlib import metadata

    return {name: metadata.version(name) for name in ("rapidocr", "onnxruntime", "opencv-python-headless", "numpy", "pyclipper", "shapely")}


def _boxes(boxes) -> list:
    return [] if boxes is None else np.asarray(boxes, dtype=np.float64).reshape(-1, 4, 2).tolist()


def read(images: list[str], out: Path) -> None:
    from rapidocr import RapidOCR

    engine = RapidOCR(params={"Global.log_level": "warning"})
    records = []
    for path in images:
        result = engine(path)
        texts = list(result.txts or ())
        lines = [
            {"text": text, "score": float(score), "box": box}
            for text, score, box in zip(texts, result.scores or (), _boxes(result.boxes) if texts else [])
        ]
        detected = engine(path, use_cls=False, use_rec=False)
        detections = {
            "boxes": _boxes(getattr(detected, "boxes", None)),
            "scores": [float(s) for s in (getattr(detected, "scores", None) or [])],
        }
        engine.update_params(use_cls=True, use_rec=True)
        records.append({"image": Path(path).name, "lines": lines, "detections": detections})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"versions": _versions(), "images": records}, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"rapidocr_reference: read {len(images)} image(s) -> {out}", file=sys.stderr)


def unclip(boxes_file: Path, out: Path) -> None:
    from omegaconf import OmegaConf
    from rapidocr.ch_ppocr_det.utils import DBPostProcess
    from rapidocr.main import DEFAULT_CFG_PATH

    settings = OmegaConf.load(DEFAULT_CFG_PATH).Det
    post = DBPostProcess(thresh=settings.thresh, box_thresh=settings.box_thresh, unclip_ratio=settings.unclip_ratio)
    records = []
    for box in json.loads(boxes_file.read_text()):
        points = np.asarray(box, dtype=np.float32)
        expanded = post.unclip(points)
        fitted, short_side = post.get_mini_boxes(expanded)
        records.append(
            {"points": expanded.reshape(-1, 2).tolist(), "box": np.asarray(fitted, np.float64).tolist(), "short_side": float(short_side)}
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"versions": _versions(), "unclip_ratio": float(settings.unclip_ratio), "boxes": records}) + "\n")
    print(f"rapidocr_reference: unclipped {len(records)} box(es) -> {out}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    reading = steps.add_parser("read")
    reading.add_argument("--out", type=Path, required=True)
    reading.add_argument("images", nargs="*")
    unclipping = steps.add_parser("unclip")
    unclipping.add_argument("--boxes", type=Path, required=True)
    unclipping.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.step == "read":
        read(args.images, args.out)
    else:
        unclip(args.boxes, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
