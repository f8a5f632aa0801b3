"""Synthetic detections for the trackers' tests: objects on known paths, with crossings, occlusions and noise.

Each scene is a list of frames, each frame the detector's answer as the stream service gets it ([N, 4] xyxy boxes,
[N] scores, class ids, labels) plus the true object behind each detection. Scenes avoid assignment ties (crossing
objects differ in size and row, so each one's own predicted box always overlaps it best): where two trackers' ties
break differently their IDs may differ for reasons that say nothing of either.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FPS = 10


@dataclass(frozen=True)
class Frame:
    boxes: np.ndarray
    scores: np.ndarray
    class_ids: np.ndarray
    labels: list[str]
    truth: list[int]  # the object of each detection

    def as_json(self) -> dict:
        return {"boxes": self.boxes.tolist(), "scores": self.scores.tolist(), "class_ids": self.class_ids.tolist()}


@dataclass(frozen=True)
class Path:
    obj: int
    start: tuple[float, float]
    velocity: tuple[float, float]  # pixels per frame
    size: tuple[float, float]
    class_id: int = 0
    first: int = 0
    last: int = 10**9
    hidden: tuple[int, ...] = ()  # frames without a detection (a full occlusion)
    weak: tuple[int, ...] = ()  # frames with a low score (a partial occlusion)


def render(paths: list[Path], frames: int, seed: int = 0, jitter: float = 1.0, score: float = 0.9, weak_score: float = 0.3) -> list[Frame]:
    rng = np.random.default_rng(seed)
    out = []
    for index in range(frames):
        boxes, scores, classes, truth = [], [], [], []
        for path in paths:
            if not path.first <= index <= path.last or index in path.hidden:
                continue
            t = index - path.first
            cx, cy = path.start[0] + path.velocity[0] * t, path.start[1] + path.velocity[1] * t
            w, h = path.size
            noise = rng.normal(0, jitter, 4)
            boxes.append([cx - w / 2 + noise[0], cy - h / 2 + noise[1], cx + w / 2 + noise[2], cy + h / 2 + noise[3]])
            scores.append(weak_score if index in path.weak else score + float(rng.uniform(-0.05, 0.05)))
            classes.append(path.class_id)
            truth.append(path.obj)
        order = rng.permutation(len(boxes))  # detectors answer in any order
        out.append(
            Frame(
                np.array(boxes, np.float64).reshape(-1, 4)[order],
                np.array(scores, np.float64)[order],
                np.array(classes, np.int32)[order],
                ["person" if classes[i] == 0 else "car" for i in order],
                [truth[i] for i in order],
            )
        )
    return out


def crossing(frames: int = 60) -> list[Frame]:
    """Two objects passing each other on nearly the same row (a large and a smaller one), a third crossing them
    vertically."""
    return render(
        [
            Path(1, (40, 200), (8, 0), (80, 160)),
            Path(2, (520, 215), (-8, 0), (60, 120)),
            Path(3, (300, 20), (0, 7), (50, 50), class_id=1),
        ],
        frames,
        seed=1,
    )


def occlusions(frames: int = 70) -> list[Frame]:
    """Objects hidden for a few frames (no detection) and objects seen with low scores (partly hidden)."""
    return render(
        [
            Path(1, (50, 100), (6, 1), (70, 140), hidden=tuple(range(20, 25))),
            Path(2, (600, 300), (-5, -1), (60, 120), weak=tuple(range(30, 38))),
            Path(3, (100, 400), (4, -2), (90, 60), class_id=1, hidden=(40, 41, 42), weak=(50, 51, 52, 53)),
        ],
        frames,
        seed=2,
    )


def crowd(frames: int = 80, objects: int = 8, seed: int = 3) -> list[Frame]:
    """Several objects entering and leaving at random times on random straight paths, with short occlusions."""
    rng = np.random.default_rng(seed)
    paths = []
    for obj in range(1, objects + 1):
        first = int(rng.integers(0, frames // 2))
        size = (float(rng.uniform(40, 90)), float(rng.uniform(60, 150)))
        start = (float(rng.uniform(60, 1220)), float(rng.uniform(80, 640)))
        velocity = (float(rng.uniform(-6, 6)), float(rng.uniform(-4, 4)))
        gap = int(rng.integers(first + 5, first + 25))
        paths.append(
            Path(obj, start, velocity, size, int(rng.integers(0, 2)), first, first + int(rng.integers(25, 50)), hidden=(gap, gap + 1))
        )
    return render(paths, frames, seed=seed, jitter=1.5)


SCENES = {"crossing": crossing, "occlusions": occlusions, "crowd": crowd}
