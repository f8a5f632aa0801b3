"""``./scripts/semantic``: each image's class map, an 8-bit PNG of class ids written beside it (or into ``--out-dir``),
and the classes in it with their shares of the photo; ``--overlay`` also writes the photo with each class tinted."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

import cv2
import numpy as np

from vision_serving.tasks.semantic_segmentation import CLASSES_SUFFIX, decode_png

from . import drawing
from .base import ClientReport, TaskClient, text

OVERLAY_SUFFIX = ".classes.jpg"
OVERLAY_OPACITY = 0.5


def palette() -> np.ndarray:
    """A BGR colour per class id (256): class 0 uncoloured (black), the others spread over hues."""
    hues = (np.arange(256) * 47 % 180).astype(np.uint8)
    colors = cv2.cvtColor(np.stack([hues, np.full(256, 200, np.uint8), np.full(256, 255, np.uint8)], axis=-1)[None], cv2.COLOR_HSV2BGR)[0]
    colors[0] = 0
    return colors


def overlay(image: bytes, classes: np.ndarray) -> np.ndarray | None:
    """The upload with every class but 0 tinted its palette colour; None when OpenCV cannot read it or its size differs."""
    picture = drawing.decode(image)
    if picture is None or picture.shape[:2] != classes.shape:
        return None
    tint = palette()[classes].astype(np.float32)
    alpha = np.where(classes > 0, OVERLAY_OPACITY, 0.0)[..., None]
    return np.clip(picture * (1 - alpha) + tint * alpha, 0, 255).astype(np.uint8)


class SemanticSegmentationClient(TaskClient):
    script = "semantic"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--out-dir", type=Path, help="write the class maps here instead of next to each image")
        parser.add_argument("--overlay", action="store_true", help=f"also write <name>{OVERLAY_SUFFIX}, the classes tinted")

    def output_suffixes(self) -> tuple[str, ...]:
        return (CLASSES_SUFFIX, OVERLAY_SUFFIX)

    def report(self, name: str, outputs: Mapping[str, np.ndarray], image: bytes, args: argparse.Namespace) -> ClientReport:
        png = bytes(np.asarray(outputs["class_map"]).reshape(-1)[0])
        count = int(np.asarray(outputs["count"]).reshape(-1)[0])
        ids = np.asarray(outputs["class_ids"]).reshape(-1)[:count]
        labels = np.asarray(outputs["labels"]).reshape(-1)[:count]
        shares = np.asarray(outputs["shares"]).reshape(-1)[:count]
        source = Path(name)
        folder = getattr(args, "out_dir", None) or source.parent
        folder.mkdir(parents=True, exist_ok=True)
        map_path = folder / f"{source.stem}{CLASSES_SUFFIX}"
        map_path.write_bytes(png)
        written = [str(map_path)]
        if getattr(args, "overlay", False):
            tinted = overlay(image, decode_png(png))
            if tinted is not None:
                overlay_path = folder / f"{source.stem}{OVERLAY_SUFFIX}"
                cv2.imwrite(str(overlay_path), tinted)
                written.append(str(overlay_path))
        classes = [{"class_id": int(c), "label": text(label), "share": float(share)} for c, label, share in zip(ids, labels, shares)]
        shown = ", ".join(f"{text(label)} {float(share) * 100:.1f}%" for label, share in zip(labels, shares))
        record = {"file": name, "classes": classes, "class_map_file": str(map_path), "files": written}
        return ClientReport([f"{name}  {shown}  -> {', '.join(written)}"], record, written)


CLIENT = SemanticSegmentationClient()
