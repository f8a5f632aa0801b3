"""Synthetic camera scenes for the stream tests and benchmarks: faces moving on straight paths, with their truth.

A :class:`Scene` is a list of :class:`Mover` (a face crop of the package photos, tests/support/faces.py, gliding at
constant velocity), rendered frame by frame onto a mid-grey ground and encoded as H.264 by PyAV (libx264, a key frame
every second, yuv420p) into an MP4. The truth comes from the same paths: which movers cross a line and in which
direction (:func:`line_truth`), and which are inside a zone at their first frame or enter it later
(:func:`zone_truth`), judged by each crop's centre, where its face is.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import av
import cv2
import numpy as np

from tests.support import faces
from vision_streams.config import StreamConfig
from vision_streams.source import FrameSource, SourceStats

BACKGROUND = 96


@dataclass(frozen=True)
class Mover:
    photo: str  # a photo of tests.support.faces.ONE_FACE, or a shape of SHAPES
    side: int  # the crop's side, pixels
    start: tuple[float, float]  # centre at t = 0
    velocity: tuple[float, float]  # pixels per second

    def center(self, t: float) -> tuple[float, float]:
        return self.start[0] + self.velocity[0] * t, self.start[1] + self.velocity[1] * t


@dataclass(frozen=True)
class Scene:
    width: int
    height: int
    fps: int
    seconds: float
    movers: tuple[Mover, ...]

    @property
    def frames(self) -> int:
        return round(self.seconds * self.fps)

    def frame(self, index: int) -> np.ndarray:
        image = np.full((self.height, self.width, 3), BACKGROUND, np.uint8)
        for mover in self.movers:
            crop = _crop(mover.photo, mover.side)
            cx, cy = mover.center(index / self.fps)
            left, top = round(cx - mover.side / 2), round(cy - mover.side / 2)
            x0, y0 = max(left, 0), max(top, 0)
            x1, y1 = min(left + mover.side, self.width), min(top + mover.side, self.height)
            if x1 > x0 and y1 > y0:
                image[y0:y1, x0:x1] = crop[y0 - top : y1 - top, x0 - left : x1 - left]
        return image

    def write(self, path: Path, first_frame: int = 0) -> Path:
        """The scene from ``first_frame`` on as an H.264 MP4 (its timestamps start at 0)."""
        with av.open(str(path), "w") as container:
            stream = container.add_stream("libx264", rate=self.fps)
            stream.width, stream.height, stream.pix_fmt = self.width, self.height, "yuv420p"
            stream.options = {"g": str(self.fps), "preset": "ultrafast", "tune": "zerolatency", "crf": "20"}
            for index in range(first_frame, self.frames):
                frame = av.VideoFrame.from_ndarray(self.frame(index), format="rgb24")
                for packet in stream.encode(frame):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        return path


SHAPES = {"circle": (40, 200, 60), "square": (200, 60, 40), "triangle": (60, 80, 220)}


@cache
def _crop(photo: str, side: int) -> np.ndarray:
    """A face crop of a package photo, or one of the tests' YOLO detector's shapes (SHAPES) drawn on the ground."""
    if photo not in SHAPES:
        return faces.face_crop(photo, side)
    image = np.full((side, side, 3), BACKGROUND, np.uint8)
    color, margin = SHAPES[photo], side // 10
    if photo == "circle":
        cv2.circle(image, (side // 2, side // 2), side // 2 - margin, color, -1, cv2.LINE_AA)
    elif photo == "square":
        cv2.rectangle(image, (margin, margin), (side - margin, side - margin), color, -1)
    else:
        corners = np.array([[side // 2, margin], [margin, side - margin], [side - margin, side - margin]], np.int32)
        cv2.fillPoly(image, [corners], color, cv2.LINE_AA)
    return image


def _side(start: tuple[float, float], end: tuple[float, float], point: tuple[float, float]) -> float:
    return (end[0] - start[0]) * (point[1] - start[1]) - (end[1] - start[1]) * (point[0] - start[0])


def line_truth(scene: Scene, start: tuple[float, float], end: tuple[float, float]) -> dict[str, int]:
    """Crossings of the segment start -> end by the movers' centres over the scene: {"in": n, "out": n} (the service's
    convention: "in" onto the right-hand side of start -> end as the frame shows it)."""
    counts = {"in": 0, "out": 0}
    for mover in scene.movers:
        sides = [_side(start, end, mover.center(i / scene.fps)) for i in range(scene.frames)]
        sides = [side for side in sides if side != 0]  # a point on the line: judged by the next one
        for before, after in itertools.pairwise(sides):
            if (before > 0) != (after > 0):
                counts["in" if after > 0 else "out"] += 1
    return counts


def zone_truth(scene: Scene, polygon: list[tuple[float, float]]) -> dict[str, int]:
    """Entries into and exits from the polygon by the movers' centres: {"enter": n, "exit": n} (an exit is a mover
    leaving before the scene ends)."""
    contour = np.array(polygon, np.float32).reshape(-1, 1, 2)
    counts = {"enter": 0, "exit": 0}
    for mover in scene.movers:
        inside = [cv2.pointPolygonTest(contour, mover.center(i / scene.fps), False) >= 0 for i in range(scene.frames)]
        counts["enter"] += int(inside[0]) + sum(1 for a, b in itertools.pairwise(inside) if b and not a)
        counts["exit"] += sum(1 for a, b in itertools.pairwise(inside) if a and not b)
    return counts


def crossing_scene(seconds: float = 12.0, fps: int = 10) -> Scene:
    """Two faces on two rows of a 480x270 frame, one gliding right and one left at 25 px/s: each crosses the vertical
    line x = 240 once (about 5.6 s and 7.2 s in), one leaves the zone x >= 300 and the other enters it."""
    return Scene(
        480,
        270,
        fps,
        seconds,
        (Mover("astronaut", 130, (102.0, 72.0), (25.0, 0.0)), Mover("grace_hopper", 130, (418.0, 198.0), (-25.0, 0.0))),
    )


LINE = ((240.0, 0.0), (240.0, 270.0))
ZONE = [(300.0, 0.0), (480.0, 0.0), (480.0, 270.0), (300.0, 270.0)]


def corrupt_mp4(source: Path, target: Path, share: float = 0.02, seed: int = 0) -> Path:
    """A copy of an MP4 whose coded frames (the ``mdat`` box) have ``share`` of their bytes overwritten with noise in
    16-byte runs; its boxes and timestamps stay intact, so it still demuxes and streams, and the decoder meets the
    damage."""
    data = bytearray(source.read_bytes())
    start = data.index(b"mdat") + 4
    size = int.from_bytes(data[start - 8 : start - 4], "big")
    rng = np.random.default_rng(seed)
    for offset in rng.integers(start + 64, start + size - 16, int(size * share / 16)):
        data[offset : offset + 16] = rng.integers(0, 256, 16, dtype=np.uint8).tobytes()
    target.write_bytes(bytes(data))
    return target


def read_source(config: StreamConfig, seconds: float) -> tuple[SourceStats, list, list[dict]]:
    """A stream's source (vision_streams.source.FrameSource) run for ``seconds``: its stats, the frames it handed on and
    the events it reported."""
    frames: list = []
    events: list[dict] = []
    stats, stop = SourceStats(), threading.Event()
    source = FrameSource(config, frames.append, stats, stop, events.append)
    source.start()
    time.sleep(seconds)
    stop.set()
    source.join(timeout=10)
    return stats, frames, events
