"""``./scripts/segment``: each image's mask PNG written beside it (or into ``--out-dir``) and its coverage;
``--overlay`` also writes the image with the mask tinted over it."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

import cv2
import numpy as np

from vision_serving.tasks.segmentation import MASK_SUFFIX, decode_png

from . import drawing
from .base import ClientReport, TaskClient

OVERLAY_SUFFIX = ".overlay.jpg"
OVERLAY_COLOR = np.array([255, 64, 160], dtype=np.float32)  # BGR tint for foreground pixels
OVERLAY_OPACITY = 0.55  # of the tint where the mask is 255


def overlay(image: bytes, mask: np.ndarray) -> np.ndarray | None:
    """The upload with the mask tinted over it; None when OpenCV cannot read the upload or its size is not the mask's."""
    picture = drawing.decode(image)
    if picture is None or picture.shape[:2] != mask.shape[:2]:
        return None
    alpha = (mask.astype(np.float32) / 255.0 * OVERLAY_OPACITY)[..., None]
    return np.clip(picture * (1 - alpha) + OVERLAY_COLOR * alpha, 0, 255).astype(np.uint8)


class SegmentationClient(TaskClient):
    script = "segment"
    pipeline = "person_segmenter"
    sample = "astronaut.png"  # a person (it writes a mask beside each image it is sent)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--out-dir", type=Path, help="write masks here instead of next to each image")
        parser.add_argument("--overlay", action="store_true", help=f"also write <name>{OVERLAY_SUFFIX}")

    def output_suffixes(self) -> tuple[str, ...]:
        return (MASK_SUFFIX, OVERLAY_SUFFIX)

    def report(self, name: str, outputs: Mapping[str, np.ndarray], image: bytes, args: argparse.Namespace) -> ClientReport:
        png = bytes(np.asarray(outputs["mask"]).reshape(-1)[0])
        coverage = float(np.asarray(outputs["coverage"]).reshape(-1)[0])
        source = Path(name)
        folder = getattr(args, "out_dir", None) or source.parent
        folder.mkdir(parents=True, exist_ok=True)
        mask_path = folder / f"{source.stem}{MASK_SUFFIX}"
        mask_path.write_bytes(png)
        written = [str(mask_path)]
        overlay_file = None
        if getattr(args, "overlay", False):
            tinted = overlay(image, decode_png(png))
            if tinted is not None:
                overlay_path = folder / f"{source.stem}{OVERLAY_SUFFIX}"
                cv2.imwrite(str(overlay_path), tinted)
                overlay_file = str(overlay_path)
                written.append(overlay_file)
        line = f"{name}  coverage {coverage * 100:5.1f}%  -> {', '.join(written)}"
        record = {"file": name, "coverage": coverage, "mask_file": str(mask_path), "overlay_file": overlay_file}
        return ClientReport([line], record, written)


CLIENT = SegmentationClient()
