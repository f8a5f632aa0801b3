"""Roboflow's ``trackers`` ByteTrack (Apache-2.0) on detections read as JSON: the tests' parity reference.

Runs in its own environment (.build/envs/trackers, requirements/trackers.in; numpy 2), never in .venv: stdin is
``{"parameters": {...}, "scenes": [[{"boxes", "scores", "class_ids"}, ...], ...]}``, stdout for each scene (a new
tracker each) one list per frame of ``[detection index, tracker id]`` (tracker id -1: not yet a confirmed track).
"""

from __future__ import annotations

import json
import sys

import numpy as np
import supervision as sv
from trackers import ByteTrackTracker


def main() -> int:
    request = json.load(sys.stdin)
    json.dump([scene(request["parameters"], frames) for frames in request["scenes"]], sys.stdout)
    return 0


def scene(parameters: dict, frames: list[dict]) -> list[list[list[int]]]:
    tracker = ByteTrackTracker(**parameters)
    answers = []
    for frame in frames:
        boxes = np.array(frame["boxes"], dtype=np.float64).reshape(-1, 4)
        detections = sv.Detections(
            xyxy=boxes,
            confidence=np.array(frame["scores"], dtype=np.float64),
            class_id=np.array(frame["class_ids"], dtype=int),
            data={"index": np.arange(len(boxes))},
        )
        result = tracker.update(detections)
        answers.append([[int(i), int(t)] for i, t in zip(result.data.get("index", []), result.tracker_id)])
    return answers


if __name__ == "__main__":
    sys.exit(main())
