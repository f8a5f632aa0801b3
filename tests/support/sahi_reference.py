"""SAHI's sliced inference on the tests' YOLO exports: the reference the tiled pipelines are compared with.

STANDALONE: runs inside the ``ultralytics`` build environment (``.build/envs/ultralytics``, ``requirements/ultralytics.txt``; SAHI is MIT,
the Ultralytics it drives AGPL-3.0: neither enters ``.venv`` or an image); it imports only sahi, ultralytics, numpy and
the standard library, never the project.

Usage::

    python tests/support/sahi_reference.py predict --model MODEL.onnx --imgsz H,W --tile H,W [--overlap 0.2]
        [--no-full-view] [--merge GREEDYNMM] [--match IOS] [--threshold 0.5] [--conf 0.25] --out OUT.npz IMAGE...

``predict`` runs SAHI 0.12.8's ``get_sliced_prediction`` on each image, its model ``AutoDetectionModel`` of type
``ultralytics`` on the ONNX file (Ultralytics' predictor: letterbox to ``imgsz``, conf, iou 0.7, max_det 300), with the
tile, overlap, full view (``perform_standard_pred``) and merge given. The .npz holds, per image i, ``"<i>_boxes"`` [D, 4]
(x_min, y_min, x_max, y_max in the image's pixels), ``"<i>_scores"`` [D] and ``"<i>_classes"`` [D], in SAHI's order;
an oriented-box model's ``"<i>_corners"`` [D, 4, 2] too (its polygon, shifted and clipped as SAHI does), a segment
model's ``"<i>_masks"`` [D, H, W] (bool, each ``ObjectPrediction.mask.bool_mask``). SAHI gives a segment model's
prediction the box of its mask's polygons (``ObjectAnnotation``), not the model's box.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("YOLO_OFFLINE", "1")  # nothing downloads: no hub, no fonts, no telemetry

import numpy as np


def size(text: str) -> tuple[int, int]:
    height, width = (int(part) for part in text.split(","))
    return height, width


def sliced(path: Path, model: Any, tile: tuple[int, int], overlap: float, full_view: bool = True, merge: str = "GREEDYNMM",
           match: str = "IOS", threshold: float = 0.5) -> dict[str, np.ndarray]:  # fmt: skip
    """SAHI's sliced prediction of the image file ``path`` with ``model``: boxes [D, 4], scores [D], classes [D]."""
    from sahi.predict import get_sliced_prediction

    result = get_sliced_prediction(
        str(path),
        model,
        slice_height=tile[0],
        slice_width=tile[1],
        overlap_height_ratio=overlap,
        overlap_width_ratio=overlap,
        perform_standard_pred=full_view,
        postprocess_type=merge,
        postprocess_match_metric=match,
        postprocess_match_threshold=threshold,
        postprocess_class_agnostic=False,
        verbose=0,
    )
    found = result.object_prediction_list
    answers = {
        "boxes": np.array([item.bbox.to_xyxy() for item in found], np.float64).reshape(-1, 4),
        "scores": np.array([item.score.value for item in found], np.float64),
        "classes": np.array([item.category.id for item in found], np.int64),
    }
    if model.has_mask:  # each mask rasterized from its polygons in the image's pixels, as SAHI's Mask.bool_mask does
        masks = [item.mask.bool_mask for item in found]
        answers["masks"] = np.array(masks, bool).reshape(-1, result.image_height, result.image_width)
    elif found and all(item.mask is not None and [len(part) for part in item.mask.segmentation] == [8] for item in found):
        answers["corners"] = np.array([item.mask.segmentation[0] for item in found], np.float64).reshape(-1, 4, 2)  # OBB's
    return answers


def predict(arguments: argparse.Namespace) -> None:
    from sahi import AutoDetectionModel

    model = AutoDetectionModel.from_pretrained(
        model_type="ultralytics",
        model_path=str(arguments.model),
        confidence_threshold=arguments.conf,
        image_size=list(arguments.imgsz),
        device="cpu",
    )
    out: dict[str, np.ndarray] = {}
    for index, path in enumerate(arguments.images):
        found = sliced(
            path,
            model,
            arguments.tile,
            arguments.overlap,
            not arguments.no_full_view,
            arguments.merge,
            arguments.match,
            arguments.threshold,
        )
        out.update({f"{index}_{key}": value for key, value in found.items()})
    partial = arguments.out.with_suffix(".partial.npz")
    np.savez_compressed(partial, **out)
    partial.replace(arguments.out)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser("predict")
    command.add_argument("--model", type=Path, required=True)
    command.add_argument("--imgsz", type=size, required=True)
    command.add_argument("--tile", type=size, required=True)
    command.add_argument("--overlap", type=float, default=0.2)
    command.add_argument("--no-full-view", action="store_true")
    command.add_argument("--merge", default="GREEDYNMM")
    command.add_argument("--match", default="IOS")
    command.add_argument("--threshold", type=float, default=0.5)
    command.add_argument("--conf", type=float, default=0.25)
    command.add_argument("--out", type=Path, required=True)
    command.add_argument("images", type=Path, nargs="+")
    arguments = parser.parse_args(argv)
    predict(arguments)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
