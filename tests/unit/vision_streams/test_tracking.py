"""The stream service's trackers (vision_streams.tracking) on synthetic detections with known objects."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support import track_scenes
from vision_streams.tracking import KalmanBox, Tracker, TrackerParameters, assign, iou_matrix


def run(frames, parameters: TrackerParameters | None = None, step: float = 0.1) -> list[dict[int, int]]:
    """Each frame's {detection index: track ID} of the confirmed tracks."""
    tracker = Tracker(parameters or TrackerParameters(), 1 / track_scenes.FPS)
    return [
        {o.detection: o.track_id for o in tracker.update(f.boxes, f.scores, f.class_ids, f.labels, i * step).tracks}
        for i, f in enumerate(frames)
    ]


def grouping_against_truth(frames, assigned) -> tuple[dict[int, set[int]], dict[int, set[int]]]:
    """object -> the IDs it got, ID -> the objects it was given to."""
    ids: dict[int, set[int]] = {}
    objects: dict[int, set[int]] = {}
    for frame, answer in zip(frames, assigned):
        for detection, track_id in answer.items():
            ids.setdefault(frame.truth[detection], set()).add(track_id)
            objects.setdefault(track_id, set()).add(frame.truth[detection])
    return ids, objects


@pytest.mark.parametrize("scene", sorted(track_scenes.SCENES))
def test_bytetrack_gives_each_object_one_id_through_crossings_and_occlusions(scene):
    frames = track_scenes.SCENES[scene]()
    ids, objects = grouping_against_truth(frames, run(frames))
    assert all(len(v) == 1 for v in ids.values()), ids
    assert all(len(v) == 1 for v in objects.values()), objects
    assert len(ids) == len({o for f in frames for o in f.truth})


def test_a_weakly_seen_object_keeps_its_id_with_bytetrack_and_loses_it_with_sort():
    """Object 2 of the occlusion scene is seen with score 0.3 for 8 frames: ByteTrack's second stage keeps it; SORT,
    which ignores weak boxes, loses it for longer than lost_seconds allows and gives it a new ID."""
    frames = track_scenes.occlusions()
    short = {"lost_seconds": 0.5}
    byte_ids, _ = grouping_against_truth(frames, run(frames, TrackerParameters(**short)))
    sort_ids, _ = grouping_against_truth(frames, run(frames, TrackerParameters(kind="sort", **short)))
    assert len(byte_ids[2]) == 1
    assert len(sort_ids[2]) == 2


def test_ids_are_never_reused_and_a_lost_track_ends_after_lost_seconds():
    tracker = Tracker(TrackerParameters(min_hits=1, lost_seconds=0.35), 0.1)
    box = np.array([[10.0, 10.0, 50.0, 90.0]])
    first = tracker.update(box, np.array([0.9]), np.array([0]), ["person"], 0.0)
    assert [o.track_id for o in first.tracks] == [1]
    for step in range(1, 4):  # not seen for 0.3 s: still alive (lost)
        assert tracker.update(np.empty((0, 4)), np.empty(0), np.empty(0), [], step * 0.1).removed == []
    assert tracker.alive == 1
    assert tracker.update(np.empty((0, 4)), np.empty(0), np.empty(0), [], 0.5).removed == [1]
    again = tracker.update(box, np.array([0.9]), np.array([0]), ["person"], 0.6)
    assert [o.track_id for o in again.tracks] == [2]


def test_an_excused_gap_keeps_the_tracks_and_ids():
    """A reconnect's 3 s gap: the moving object, found where its motion says, keeps its ID; without the excuse its
    track would have ended (lost_seconds 0.5)."""
    tracker = Tracker(TrackerParameters(lost_seconds=0.5), 0.1)
    box = np.array([[100.0, 100.0, 160.0, 220.0]])
    moved = np.array([[4.0, 0.0, 4.0, 0.0]])  # 4 px per frame to the right
    for i in range(10):
        ids = [o.track_id for o in tracker.update(box + i * moved, np.array([0.9]), np.array([0]), ["person"], i * 0.1).tracks]
    tracker.excuse(3.0)
    after = tracker.update(box + 40 * moved, np.array([0.9]), np.array([0]), ["person"], 4.0)
    assert [o.track_id for o in after.tracks] == ids == [1] and after.removed == []


def test_a_track_takes_its_most_frequent_class():
    tracker = Tracker(TrackerParameters(min_hits=1), 0.1)
    box = np.array([[0.0, 0.0, 40.0, 80.0]])
    for i, (class_id, label) in enumerate([(0, "person"), (1, "car"), (0, "person"), (0, "person")]):
        update = tracker.update(box + i, np.array([0.9]), np.array([class_id]), [label], i * 0.1)
    assert (update.tracks[0].class_id, update.tracks[0].label) == (0, "person")


def test_kalman_filter_follows_constant_velocity():
    kalman = KalmanBox(np.array([0.0, 0.0, 20.0, 40.0]))
    for step in range(1, 10):
        kalman.predict(1.0)
        kalman.update(np.array([5.0 * step, 0.0, 20.0 + 5.0 * step, 40.0]))
    kalman.predict(2.0)  # two intervals: a dropped frame predicted over
    assert kalman.box()[0] == pytest.approx(55.0, abs=1.5)


def test_iou_and_assignment():
    boxes = np.array([[0.0, 0.0, 10.0, 10.0], [5.0, 0.0, 15.0, 10.0]])
    assert iou_matrix(boxes, boxes)[0, 1] == pytest.approx(50 / 150)
    matched, rows, columns = assign(np.array([[0.9, 0.1], [0.8, 0.05]]), 0.2)
    assert matched == [(0, 0)] and rows == [1] and columns == [1]


@pytest.mark.parametrize(
    ("values", "message"),
    [({"kind": "deepsort"}, "not one of"), ({"high_score": 2}, r"in \[0, 1\]"), ({"min_hits": 0}, "at least 1"), ({"speed": 1}, "unknown")],
)
def test_bad_parameters_are_refused_by_name(values, message):
    with pytest.raises(ValueError, match=message):
        TrackerParameters.from_mapping(values)
