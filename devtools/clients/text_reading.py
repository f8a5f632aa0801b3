"""``./scripts/read-text``: each image's lines of text in reading order, with their scores (and corners in JSON);
``--draw OUT`` writes the image with each line's box drawn and numbered."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import cv2
import numpy as np

from vision_serving.tasks.text_reading.reader import Line
from vision_serving.tasks.text_reading.task import lines_from_outputs

from . import drawing
from .base import ClientReport, TaskClient

DRAWN_SUFFIX = ".lines.jpg"
BOX_COLOR = (0, 200, 255)  # BGR


def paint(lines: Sequence[Line]) -> Callable[[np.ndarray, int], None]:
    """What :func:`drawing.draw` paints: each line's four corners and its number."""

    def on(picture: np.ndarray, width: int) -> None:
        for number, line in enumerate(lines, start=1):
            corners = np.round(line.box).astype(np.int32).reshape(-1, 1, 2)
            cv2.polylines(picture, [corners], True, BOX_COLOR, width, cv2.LINE_AA)
            x, y = (int(v) for v in corners[0, 0])
            drawing.caption(picture, str(number), x, y, BOX_COLOR, width)

    return on


class TextReadingClient(TaskClient):
    script = "read-text"
    pipeline = "text_reader"
    sample = "page.png"  # the sample with text on it

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--draw",
            type=Path,
            metavar="OUT",
            help=f"write images with the lines' boxes drawn and numbered: OUT.jpg/.png for one image, else <name>{DRAWN_SUFFIX} in folder OUT",
        )

    def output_suffixes(self) -> tuple[str, ...]:
        return (DRAWN_SUFFIX,)

    def report(self, name: str, outputs: Mapping[str, np.ndarray], image: bytes, args: argparse.Namespace) -> ClientReport:
        batch = {role: np.asarray(value)[np.newaxis] for role, value in outputs.items()}
        lines = lines_from_outputs(batch)[0]
        drawn = drawing.draw(name, image, getattr(args, "draw", None), getattr(args, "single_image", True), DRAWN_SUFFIX, paint(lines))
        report = [f"{name}: {len(lines)} line{'' if len(lines) == 1 else 's'}" + (f" -> {drawn}" if drawn else "")]
        for number, line in enumerate(lines, start=1):
            report.append(f"  {number:>3}  {line.score:.3f}  {line.text}")
        record = {
            "file": name,
            "lines": [
                {"text": line.text, "score": round(line.score, 4), "box": [[round(float(x), 2), round(float(y), 2)] for x, y in line.box]}
                for line in lines
            ],
            **({"drawn": drawn} if drawn else {}),
        }
        return ClientReport(report, record, [drawn] if drawn else [])


CLIENT = TextReadingClient()
