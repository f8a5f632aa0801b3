"""``./scripts/depth``: each image's depth map, a 16-bit PNG written beside it (or into
``--out-dir``) with its scale and range; ``--float`` also writes the float32 map (``.depth.npy``), ``--overlay`` a
colour picture of the depth (near warm, far cool)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

import cv2
import numpy as np

from vision_serving.tasks.depth import DEPTH_SUFFIX, decode_float32, decode_png

from .base import ClientReport, TaskClient

FLOAT_SUFFIX = ".depth.npy"
OVERLAY_SUFFIX = ".depth.jpg"


def colored(depth: np.ndarray) -> np.ndarray:
    """A BGR picture of a depth map: its range spread over OpenCV's TURBO colour map, near red, far blue."""
    low, high = float(depth.min()), float(depth.max())
    nearness = (high - depth) / (high - low) if high > low else np.zeros_like(depth)
    return cv2.applyColorMap(np.rint(nearness * 255).astype(np.uint8), cv2.COLORMAP_TURBO)


class DepthClient(TaskClient):
    script = "depth"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--out-dir", type=Path, help="write the depth maps here instead of next to each image")
        parser.add_argument("--float", action="store_true", help=f"also get the float32 map and write <name>{FLOAT_SUFFIX}")
        parser.add_argument("--overlay", action="store_true", help=f"also write <name>{OVERLAY_SUFFIX}, the depth in colour")

    def request_inputs(self, args: argparse.Namespace, count: int) -> dict[str, np.ndarray]:
        return {"float_depth": np.ones((count, 1), dtype=bool)} if getattr(args, "float", False) else {}

    def output_suffixes(self) -> tuple[str, ...]:
        return (DEPTH_SUFFIX, FLOAT_SUFFIX, OVERLAY_SUFFIX)

    def report(self, name: str, outputs: Mapping[str, np.ndarray], image: bytes, args: argparse.Namespace) -> ClientReport:
        png = bytes(np.asarray(outputs["depth_png"]).reshape(-1)[0])
        scale = float(np.asarray(outputs["depth_scale"]).reshape(-1)[0])
        low, high = (float(v) for v in np.asarray(outputs["depth_range"]).reshape(-1)[:2])
        source = Path(name)
        folder = getattr(args, "out_dir", None) or source.parent
        folder.mkdir(parents=True, exist_ok=True)
        png_path = folder / f"{source.stem}{DEPTH_SUFFIX}"
        png_path.write_bytes(png)
        written = [str(png_path)]
        depth = decode_png(png, scale)
        raw = bytes(np.asarray(outputs.get("depth_float32", np.array([b""], dtype=object))).reshape(-1)[0])
        if raw:
            depth = decode_float32(raw, *depth.shape)
            float_path = folder / f"{source.stem}{FLOAT_SUFFIX}"
            np.save(float_path, depth)
            written.append(str(float_path))
        if getattr(args, "overlay", False):
            overlay_path = folder / f"{source.stem}{OVERLAY_SUFFIX}"
            cv2.imwrite(str(overlay_path), colored(depth))
            written.append(str(overlay_path))
        height, width = depth.shape
        line = f"{name}  {width}x{height}  depth {low:.3f} to {high:.3f}  (PNG: {scale:g} per unit)  -> {', '.join(written)}"
        record = {
            "file": name,
            "width": width,
            "height": height,
            "depth_range": [low, high],
            "depth_scale": scale,
            "depth_file": str(png_path),
            "files": written,
        }
        return ClientReport([line], record, written)


CLIENT = DepthClient()
