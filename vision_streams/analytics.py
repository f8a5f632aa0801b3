"""Line crossings and zone occupancy of one stream's tracks, as its config declares them.

A track's position is one **anchor** point of its box (``center``, the default, or ``bottom_center``: where a person
stands). A **line** is a segment from ``start`` to ``end`` (pixels of the frame); a track crosses it when its anchor
moves from one side of the segment's line to the other between two frames it is seen on, and the path between those
two points meets the segment itself. ``in`` is a crossing onto the right-hand side of the direction start -> end as
the frame shows it (y down: a line drawn left to right counts downward motion as ``in``), ``out`` the other way.
Counts are kept per class label.

A **zone** is a polygon; a track is in it while its anchor is inside (OpenCV's ``pointPolygonTest``, the edge
counted as inside). A track entering makes an ``enter`` event, leaving (or its track ending inside) an ``exit`` event
with its dwell time (seconds from the first frame it was seen inside to the last). Occupancy is the tracks inside on
the latest frame, per class.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import cv2
import numpy as np

from .tracking import TrackedObject

ANCHORS = ("center", "bottom_center")


@dataclass(frozen=True)
class LineSpec:
    name: str
    start: tuple[float, float]
    end: tuple[float, float]

    def __post_init__(self) -> None:
        if self.start == self.end:
            raise ValueError(f"line {self.name!r}: start and end are the same point")


@dataclass(frozen=True)
class ZoneSpec:
    name: str
    polygon: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        if len(self.polygon) < 3:
            raise ValueError(f"zone {self.name!r}: a polygon needs at least 3 points, got {len(self.polygon)}")


def anchor_point(track: TrackedObject, anchor: str) -> tuple[float, float]:
    x0, y0, x1, y1 = track.box
    return ((x0 + x1) / 2, y1) if anchor == "bottom_center" else ((x0 + x1) / 2, (y0 + y1) / 2)


def _side(line: LineSpec, point: tuple[float, float]) -> float:
    (ax, ay), (bx, by) = line.start, line.end
    return (bx - ax) * (point[1] - ay) - (by - ay) * (point[0] - ax)


def _segments_meet(p: tuple[float, float], q: tuple[float, float], line: LineSpec) -> bool:
    """Whether the path p -> q (which changes side of the line) meets the segment start -> end."""
    a, b = line.start, line.end

    def cross(o, u, v):
        return (u[0] - o[0]) * (v[1] - o[1]) - (u[1] - o[1]) * (v[0] - o[0])

    d1, d2 = cross(p, q, a), cross(p, q, b)
    return d1 * d2 <= 0


@dataclass
class LineCounter:
    spec: LineSpec
    anchor: str = "center"
    counts_in: Counter = field(default_factory=Counter)
    counts_out: Counter = field(default_factory=Counter)
    last: dict[int, tuple[float, float]] = field(default_factory=dict)

    def update(self, tracks: list[TrackedObject], removed: list[int], timestamp: float) -> list[dict]:
        events = []
        for track in tracks:
            point = anchor_point(track, self.anchor)
            previous = self.last.get(track.track_id)
            self.last[track.track_id] = point
            if previous is None:
                continue
            before, after = _side(self.spec, previous), _side(self.spec, point)
            if before == 0 or after == 0 or (before > 0) == (after > 0) or not _segments_meet(previous, point, self.spec):
                if after == 0:
                    self.last[track.track_id] = previous  # on the line: judged by the next point
                continue
            direction = "in" if after > 0 else "out"
            (self.counts_in if direction == "in" else self.counts_out)[track.label] += 1
            events.append(
                {"event": "line_crossing", "line": self.spec.name, "direction": direction, "track_id": track.track_id,
                 "label": track.label, "class_id": track.class_id, "timestamp": timestamp}
            )  # fmt: skip
        for track_id in removed:
            self.last.pop(track_id, None)
        return events

    def state(self) -> dict:
        return {"in": dict(self.counts_in), "out": dict(self.counts_out)}


@dataclass
class ZoneMonitor:
    spec: ZoneSpec
    anchor: str = "center"
    inside: dict[int, tuple[float, float, str]] = field(default_factory=dict)  # track -> (entered, last seen inside, label)
    occupancy: Counter = field(default_factory=Counter)
    entries: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.contour = np.array(self.spec.polygon, dtype=np.float32).reshape(-1, 1, 2)

    def contains(self, point: tuple[float, float]) -> bool:
        return cv2.pointPolygonTest(self.contour, (float(point[0]), float(point[1])), False) >= 0

    def update(self, tracks: list[TrackedObject], removed: list[int], timestamp: float) -> list[dict]:
        events = []
        occupancy: Counter = Counter()
        seen = set()
        for track in tracks:
            seen.add(track.track_id)
            if self.contains(anchor_point(track, self.anchor)):
                occupancy[track.label] += 1
                entered = self.inside.get(track.track_id, (timestamp, timestamp, track.label))[0]
                if track.track_id not in self.inside:
                    self.entries[track.label] += 1
                    events.append(self._event("zone_enter", track.track_id, track.label, timestamp))
                self.inside[track.track_id] = (entered, timestamp, track.label)
            elif track.track_id in self.inside:
                events.append(self._exit(track.track_id, timestamp))
        for track_id in removed:
            if track_id in self.inside and track_id not in seen:
                events.append(self._exit(track_id, self.inside[track_id][1]))
        self.occupancy = occupancy
        return events

    def _event(self, kind: str, track_id: int, label: str, timestamp: float, **extra) -> dict:
        return {"event": kind, "zone": self.spec.name, "track_id": track_id, "label": label, "timestamp": timestamp, **extra}

    def _exit(self, track_id: int, timestamp: float) -> dict:
        entered, last_inside, label = self.inside.pop(track_id)
        return self._event("zone_exit", track_id, label, timestamp, dwell_s=round(last_inside - entered, 3))

    def dwell(self, now: float) -> dict[int, float]:
        return {track_id: round(last - entered, 3) for track_id, (entered, last, _) in self.inside.items()}

    def state(self, now: float) -> dict:
        return {"occupancy": dict(self.occupancy), "entries": dict(self.entries), "dwell_s": self.dwell(now)}


class Analytics:
    """The lines and zones of one stream, updated with each frame's tracks."""

    def __init__(self, lines: list[LineSpec], zones: list[ZoneSpec], anchor: str = "center") -> None:
        if anchor not in ANCHORS:
            raise ValueError(f"anchor {anchor!r} is not one of {', '.join(ANCHORS)}")
        self.lines = [LineCounter(line, anchor) for line in lines]
        self.zones = [ZoneMonitor(zone, anchor) for zone in zones]

    def update(self, tracks: list[TrackedObject], removed: list[int], timestamp: float) -> list[dict]:
        events = []
        for counter in self.lines:
            events += counter.update(tracks, removed, timestamp)
        for zone in self.zones:
            events += zone.update(tracks, removed, timestamp)
        return events

    def state(self, now: float) -> dict:
        return {
            "lines": {counter.spec.name: counter.state() for counter in self.lines},
            "zones": {zone.spec.name: zone.state(now) for zone in self.zones},
        }
