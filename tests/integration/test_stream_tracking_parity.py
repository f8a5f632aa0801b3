"""The stream service's ByteTrack against Roboflow's ``trackers`` ByteTrack (Apache-2.0), fed the same detections.

The reference runs in its own environment (.build/envs/trackers, requirements/trackers.in: it needs numpy 2 and
opencv-python, which the serving pins exclude; tests/support/trackers_reference.py), never imported here. On each
synthetic scene (tests/support/track_scenes.py: crossings, full and partial occlusions, a crowd entering and leaving)
both must give the same **grouping**: the same sets of detections share an ID (the ID numbers themselves may differ),
and each group is one true object.

The two are configured alike (the parameters below: ``trackers``' defaults, and ours set to the same thresholds).
Where they differ by design the scenes avoid it, and say so: ``trackers`` matches weak (low-score) boxes to lost
tracks too, ours (as ByteTrack's authors' code) only to tracks seen on the previous frame, so no scene has an object
that is first lost and then seen weakly; and assignment ties (two equal overlaps) are avoided by giving crossing
objects different sizes and rows.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from builders import build_envs
from tests.support import track_scenes
from vision_streams.tracking import Tracker, TrackerParameters

pytestmark = pytest.mark.integration

REFERENCE = Path(__file__).resolve().parents[1] / "support" / "trackers_reference.py"
# trackers' ByteTrackTracker defaults, at the scenes' 10 fps (lost_track_buffer counts 30 fps frames: one second).
REFERENCE_PARAMETERS = {
    "lost_track_buffer": 30,
    "frame_rate": track_scenes.FPS,
    "track_activation_threshold": 0.7,
    "minimum_consecutive_frames": 2,
    "minimum_iou_threshold": 0.1,
    "high_conf_det_threshold": 0.6,
}
OURS = TrackerParameters(
    high_score=0.6, new_track_score=0.7, match_iou=0.1, low_match_iou=0.1, tentative_match_iou=0.1, min_hits=2, lost_seconds=1.0
)


@pytest.fixture(scope="module")
def trackers_python() -> Path:
    return build_envs.ensure_env("trackers")


@pytest.fixture(scope="module")
def reference_answers(trackers_python) -> dict[str, list[dict[int, int]]]:
    """The reference's answers on every scene, from one run of its environment (its imports take seconds)."""
    names = sorted(track_scenes.SCENES)
    request = {"parameters": REFERENCE_PARAMETERS, "scenes": [[f.as_json() for f in track_scenes.SCENES[name]()] for name in names]}
    completed = subprocess.run(
        [str(trackers_python), str(REFERENCE)], input=json.dumps(request), capture_output=True, text=True, timeout=300, check=False
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    answers = json.loads(completed.stdout)
    return {name: [{i: t for i, t in frame if t >= 0} for frame in scene] for name, scene in zip(names, answers)}


def groups(assigned: list[dict[int, int]]) -> list[list[tuple[int, int]]]:
    """The sets of (frame, detection) that share an ID, as sorted lists (ID numbers left out)."""
    found: dict[int, list[tuple[int, int]]] = {}
    for frame, answer in enumerate(assigned):
        for detection, track_id in answer.items():
            found.setdefault(track_id, []).append((frame, detection))
    return sorted(sorted(members) for members in found.values())


def ours(frames: list[track_scenes.Frame]) -> list[dict[int, int]]:
    tracker = Tracker(OURS, 1 / track_scenes.FPS)
    return [
        {o.detection: o.track_id for o in tracker.update(f.boxes, f.scores, f.class_ids, f.labels, i / track_scenes.FPS).tracks}
        for i, f in enumerate(frames)
    ]


@pytest.mark.parametrize("scene", sorted(track_scenes.SCENES))
def test_same_grouping_as_trackers_bytetrack(reference_answers, scene):
    frames = track_scenes.SCENES[scene]()
    mine, theirs = groups(ours(frames)), groups(reference_answers[scene])
    assert mine == theirs
    objects = {o for f in frames for o in f.truth}
    assert len(mine) == len(objects), "one group per object"
    assert all(len({frames[f].truth[d] for f, d in group}) == 1 for group in mine), "each group is one object"
    assert sum(len(group) for group in mine) > 0.8 * sum(len(f.truth) for f in frames), "most detections are tracked"
