"""Line crossings and zones (vision_streams.analytics) on tracks with known paths."""

from __future__ import annotations

import pytest

from vision_streams.analytics import Analytics, LineSpec, ZoneSpec
from vision_streams.tracking import TrackedObject


def track(track_id: int, x: float, y: float, label: str = "person", half: float = 10.0) -> TrackedObject:
    return TrackedObject(track_id, (x - half, y - half, x + half, y + half), 0.9, 0, label, 0, 0.0, ())


def test_crossings_are_counted_per_direction_and_label():
    analytics = Analytics([LineSpec("door", (0.0, 100.0), (200.0, 100.0))], [])
    paths = {1: [(50, 60), (50, 90), (50, 110), (50, 130)], 2: [(150, 140), (150, 80)], 3: [(300, 60), (300, 140)]}
    events = []
    for step in range(4):
        tracks = [track(i, *path[step], label="car" if i == 2 else "person") for i, path in paths.items() if step < len(path)]
        events += analytics.update(tracks, [], step * 0.1)
    # Downward across a left-to-right line is "in"; track 3 passes beside the segment, not through it.
    assert [(e["track_id"], e["direction"], e["label"]) for e in events] == [(2, "out", "car"), (1, "in", "person")]
    assert analytics.state(0.0)["lines"]["door"] == {"in": {"person": 1}, "out": {"car": 1}}


def test_a_point_on_the_line_is_judged_by_the_next_one():
    analytics = Analytics([LineSpec("l", (0.0, 100.0), (200.0, 100.0))], [])
    events = [e for step, y in enumerate((90, 100, 100, 95, 110)) for e in analytics.update([track(1, 50, y)], [], step)]
    assert [e["direction"] for e in events] == ["in"]


def test_zone_entries_exits_dwell_and_occupancy():
    zone = ZoneSpec("desk", ((0.0, 0.0), (100.0, 0.0), (100.0, 100.0), (0.0, 100.0)))
    analytics = Analytics([], [zone])
    timeline = [
        (0.0, [track(1, 50, 50), track(2, 150, 50)]),
        (1.0, [track(1, 60, 50), track(2, 90, 50)]),
        (2.5, [track(1, 120, 50), track(2, 80, 50)]),
    ]
    events = []
    for t, tracks in timeline:
        events += analytics.update(tracks, [], t)
    assert [(e["event"], e["track_id"]) for e in events] == [("zone_enter", 1), ("zone_enter", 2), ("zone_exit", 1)]
    assert events[-1]["dwell_s"] == pytest.approx(1.0)
    state = analytics.state(2.5)["zones"]["desk"]
    assert state["occupancy"] == {"person": 1} and state["entries"] == {"person": 2} and state["dwell_s"] == {2: 1.5}
    # Track 2's track ends inside: its exit is written at the last time it was seen there.
    ended = analytics.update([], [2], 4.0)
    assert [(e["event"], e["track_id"], e["dwell_s"]) for e in ended] == [("zone_exit", 2, 1.5)]


def test_bottom_center_anchor():
    analytics = Analytics([LineSpec("floor", (0.0, 100.0), (200.0, 100.0))], [], anchor="bottom_center")
    # Centre stays above the line; the box's bottom edge crosses it.
    events = analytics.update([track(1, 50, 85)], [], 0) + analytics.update([track(1, 50, 95)], [], 1)
    assert [e["direction"] for e in events] == ["in"]


def test_bad_lines_and_zones_are_refused():
    with pytest.raises(ValueError, match="same point"):
        LineSpec("x", (1.0, 1.0), (1.0, 1.0))
    with pytest.raises(ValueError, match="at least 3 points"):
        ZoneSpec("z", ((0.0, 0.0), (1.0, 1.0)))
    with pytest.raises(ValueError, match="anchor"):
        Analytics([], [], anchor="top")
