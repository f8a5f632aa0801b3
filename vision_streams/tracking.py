"""Multi-object trackers of one stream: ByteTrack (the default) and SORT, on boxes in the frame's pixels.

**ByteTrack** (Zhang et al., "ByteTrack: Multi-Object Tracking by Associating Every Detection Box", ECCV 2022) as its
authors' code runs it: a constant-velocity Kalman filter on (centre x, centre y, aspect ratio, height) per track, and
three assignments per frame (Hungarian, ``scipy.optimize.linear_sum_assignment`` on 1 - IoU):

1. the **high-score** detections (score >= ``high_score``) against every confirmed track, lost ones included
   (IoU >= ``match_iou``);
2. the **low-score** detections (``low_score`` <= score < ``high_score``: an occluded object's weak box) against the
   confirmed tracks still unmatched that were seen on the previous frame (IoU >= ``low_match_iou``); a track matched in
   neither becomes *lost*;
3. the remaining high-score detections against the *tentative* tracks (new last frame; IoU >= ``tentative_match_iou``).

A remaining high-score detection of score >= ``new_track_score`` starts a tentative track; a tentative track matched on
``min_hits`` consecutive frames is confirmed and gets the stream's next ID (IDs are never reused), one missed frame
ends it. A lost track is kept for ``lost_seconds`` (time, not frames: a stream that drops frames keeps its tracks as
long), then removed.

**SORT** (Bewley et al., 2016) is the same filter and the first assignment alone, of every detection of score >=
``high_score``: cheaper, and the better choice where a detector's low scores are noise rather than occluded objects
(there ByteTrack's second stage can keep a track alive on clutter).

Time: :meth:`Tracker.update` takes each frame's timestamp in seconds; the filter predicts by the time elapsed in units
of ``frame_interval`` (the stream's target interval), so dropped frames are predicted over, not ignored.
:meth:`Tracker.excuse` keeps a gap from counting towards ``lost_seconds`` (a reconnect within the stream's timeout):
the tracks are predicted over it as over dropped frames, and keep their IDs when they are found where their motion
says.

This module is plain numpy and scipy (no library tracker: Roboflow's ``trackers`` needs numpy 2 and ``opencv-python``,
which the serving pins exclude); its grouping is compared with ``trackers``' ByteTrack on synthetic scenes in
tests/unit/vision_streams/test_tracking_parity.py.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields

import numpy as np
from scipy.optimize import linear_sum_assignment

KINDS = ("bytetrack", "sort")
# The Kalman filter's noise, relative to the box height (the ByteTrack and DeepSORT values).
STD_POSITION = 1.0 / 20
STD_VELOCITY = 1.0 / 160


@dataclass(frozen=True)
class TrackerParameters:
    """A stream's tracker settings (its config's ``[tracker]`` table); defaults are ByteTrack's published ones."""

    kind: str = "bytetrack"
    high_score: float = 0.5
    low_score: float = 0.1
    new_track_score: float = 0.6
    match_iou: float = 0.2
    low_match_iou: float = 0.5
    tentative_match_iou: float = 0.3
    min_hits: int = 2
    lost_seconds: float = 1.0
    # Trails drawn and reported per track (points).
    trail_length: int = 32

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"tracker kind {self.kind!r} is not one of {', '.join(KINDS)}")
        for name in ("high_score", "low_score", "new_track_score", "match_iou", "low_match_iou", "tentative_match_iou"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"tracker {name} must be in [0, 1], got {value}")
        if self.low_score > self.high_score:
            raise ValueError(f"tracker low_score {self.low_score} is above high_score {self.high_score}")
        if self.min_hits < 1:
            raise ValueError(f"tracker min_hits must be at least 1, got {self.min_hits}")
        if not self.lost_seconds >= 0:
            raise ValueError(f"tracker lost_seconds must be >= 0, got {self.lost_seconds}")
        if self.trail_length < 1:
            raise ValueError(f"tracker trail_length must be at least 1, got {self.trail_length}")

    @classmethod
    def from_mapping(cls, values: dict) -> TrackerParameters:
        known = {item.name for item in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown tracker parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**values)


def iou_matrix(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """[N, 4] x [M, 4] xyxy boxes -> [N, M] intersection over union."""
    if len(first) == 0 or len(second) == 0:
        return np.zeros((len(first), len(second)))
    top_left = np.maximum(first[:, None, :2], second[None, :, :2])
    bottom_right = np.minimum(first[:, None, 2:], second[None, :, 2:])
    inter = np.prod(np.clip(bottom_right - top_left, 0, None), axis=2)
    area_first = np.prod(first[:, 2:] - first[:, :2], axis=1)
    area_second = np.prod(second[:, 2:] - second[:, :2], axis=1)
    union = area_first[:, None] + area_second[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def assign(similarity: np.ndarray, minimum: float) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """Optimal one-to-one matches of rows to columns with similarity >= ``minimum`` (matched, unmatched rows, columns)."""
    rows, columns = similarity.shape
    if rows == 0 or columns == 0:
        return [], list(range(rows)), list(range(columns))
    cost = np.where(similarity >= minimum, 1.0 - similarity, 1e6)
    matched = [(int(r), int(c)) for r, c in zip(*linear_sum_assignment(cost)) if similarity[r, c] >= minimum]
    used_rows, used_columns = {r for r, _ in matched}, {c for _, c in matched}
    return matched, [r for r in range(rows) if r not in used_rows], [c for c in range(columns) if c not in used_columns]


class KalmanBox:
    """A constant-velocity Kalman filter on (cx, cy, aspect, height) and their velocities per frame interval."""

    def __init__(self, box: np.ndarray) -> None:
        measurement = _to_xyah(box)
        height = measurement[3]
        self.mean = np.concatenate([measurement, np.zeros(4)])
        std = [2 * STD_POSITION * height] * 2 + [1e-2, 2 * STD_POSITION * height] + [10 * STD_VELOCITY * height] * 2
        std += [1e-5, 10 * STD_VELOCITY * height]
        self.covariance = np.diag(np.square(std))

    def predict(self, steps: float) -> None:
        if steps <= 0:
            return
        height = self.mean[3]
        motion = np.eye(8)
        motion[:4, 4:] = np.eye(4) * steps
        std = [STD_POSITION * height, STD_POSITION * height, 1e-2, STD_POSITION * height]
        std += [STD_VELOCITY * height, STD_VELOCITY * height, 1e-5, STD_VELOCITY * height]
        self.mean = motion @ self.mean
        self.covariance = motion @ self.covariance @ motion.T + np.diag(np.square(std)) * steps

    def update(self, box: np.ndarray) -> None:
        height = self.mean[3]
        noise = np.diag(np.square([STD_POSITION * height, STD_POSITION * height, 1e-1, STD_POSITION * height]))
        projected_covariance = self.covariance[:4, :4] + noise
        gain = np.linalg.solve(projected_covariance, self.covariance[:4, :]).T
        self.mean = self.mean + gain @ (_to_xyah(box) - self.mean[:4])
        self.covariance = self.covariance - gain @ projected_covariance @ gain.T

    def box(self) -> np.ndarray:
        cx, cy, aspect, height = self.mean[:4]
        width = aspect * height
        return np.array([cx - width / 2, cy - height / 2, cx + width / 2, cy + height / 2])


def _to_xyah(box: np.ndarray) -> np.ndarray:
    x0, y0, x1, y1 = (float(v) for v in box)
    height = max(y1 - y0, 1e-6)
    return np.array([(x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / height, height])


@dataclass
class _Track:
    filter: KalmanBox
    box: np.ndarray
    score: float
    label: str
    class_id: int
    first_seen: float
    last_seen: float
    hits: int = 1
    track_id: int = 0  # 0 until confirmed
    lost: bool = False
    classes: Counter = field(default_factory=Counter)
    trail: list[tuple[float, float]] = field(default_factory=list)

    def observe(self, box: np.ndarray, score: float, class_id: int, label: str, now: float, trail_length: int) -> None:
        self.filter.update(box)
        self.box, self.score, self.last_seen, self.lost = box, score, now, False
        self.hits += 1
        self.classes[(class_id, label)] += 1
        self.class_id, self.label = self.classes.most_common(1)[0][0]
        self.trail.append(((box[0] + box[2]) / 2, (box[1] + box[3]) / 2))
        del self.trail[:-trail_length]


@dataclass(frozen=True)
class TrackedObject:
    """One confirmed track seen on this frame: its detection's box, score and index, the track's class (its most
    frequent one) and trail (centres, oldest first)."""

    track_id: int
    box: tuple[float, float, float, float]
    score: float
    class_id: int
    label: str
    detection: int
    first_seen: float
    trail: tuple[tuple[float, float], ...]

    @property
    def center(self) -> tuple[float, float]:
        return ((self.box[0] + self.box[2]) / 2, (self.box[1] + self.box[3]) / 2)

    def as_json(self) -> dict:
        return {
            "id": self.track_id,
            "box": [round(v, 2) for v in self.box],
            "score": round(self.score, 4),
            "class_id": self.class_id,
            "label": self.label,
        }


@dataclass(frozen=True)
class Update:
    """What one frame did to the tracks: the confirmed ones seen on it, and the IDs removed (lost too long)."""

    tracks: list[TrackedObject]
    removed: list[int]


class Tracker:
    """ByteTrack or SORT over one stream's frames (:class:`TrackerParameters`)."""

    def __init__(self, parameters: TrackerParameters, frame_interval: float) -> None:
        if not frame_interval > 0:
            raise ValueError(f"frame_interval must be positive, got {frame_interval}")
        self.parameters, self.frame_interval = parameters, frame_interval
        self.tracks: list[_Track] = []
        self.next_id = 1
        self.last_time: float | None = None

    def excuse(self, seconds: float) -> None:
        """A gap of ``seconds`` (a reconnect's) does not count towards any track's ``lost_seconds``."""
        for track in self.tracks:
            track.last_seen += max(seconds, 0.0)

    @property
    def alive(self) -> int:
        """Confirmed tracks, lost ones included (they may still be found again)."""
        return sum(1 for track in self.tracks if track.track_id)

    def update(self, boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray, labels: list[str], timestamp: float) -> Update:
        """One frame's detections ([N, 4] xyxy pixels, [N] scores, class ids and labels) at ``timestamp`` seconds."""
        p = self.parameters
        now = timestamp
        steps = 1.0 if self.last_time is None else max(now - self.last_time, 0.0) / self.frame_interval
        self.last_time = now
        for track in self.tracks:
            track.filter.predict(steps)
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        high = [i for i in range(len(boxes)) if scores[i] >= p.high_score]
        low = [i for i in range(len(boxes)) if p.low_score <= scores[i] < p.high_score] if p.kind == "bytetrack" else []
        seen: list[tuple[_Track, int]] = []

        def observe(track: _Track, index: int) -> None:
            track.observe(boxes[index], float(scores[index]), int(class_ids[index]), labels[index], now, p.trail_length)
            seen.append((track, index))

        confirmed = [track for track in self.tracks if track.track_id]
        tentative = [track for track in self.tracks if not track.track_id]
        matched, unmatched_tracks, unmatched_high = self._match(confirmed, boxes, high, p.match_iou)
        for track, index in matched:
            observe(track, index)
        # Stage 2: weak boxes keep the tracks that were seen last frame (an occlusion), never a lost one.
        recent = [track for track in unmatched_tracks if not track.lost]
        matched, still_unmatched, _ = self._match(recent, boxes, low, p.low_match_iou)
        for track, index in matched:
            observe(track, index)
        for track in still_unmatched:
            track.lost = True
        # Stage 3: tentative tracks take the remaining strong boxes; a miss ends them.
        matched, missed, unmatched_high = self._match(tentative, boxes, unmatched_high, p.tentative_match_iou)
        for track, index in matched:
            observe(track, index)
            if track.hits >= p.min_hits:
                self._confirm(track)
        dropped = {id(track) for track in missed}
        for index in unmatched_high:
            if scores[index] >= p.new_track_score:
                track = _Track(KalmanBox(boxes[index]), boxes[index], float(scores[index]), labels[index], int(class_ids[index]), now, now)
                track.classes[(track.class_id, track.label)] += 1
                track.trail.append(((boxes[index][0] + boxes[index][2]) / 2, (boxes[index][1] + boxes[index][3]) / 2))
                self.tracks.append(track)
                if p.min_hits <= 1:
                    self._confirm(track)
                    seen.append((track, index))
        removed = [t.track_id for t in self.tracks if t.track_id and t.lost and now - t.last_seen > p.lost_seconds]
        self.tracks = [
            t for t in self.tracks if id(t) not in dropped and not (t.track_id and t.lost and now - t.last_seen > p.lost_seconds)
        ]
        objects = [self._object(track, index) for track, index in seen if track.track_id]
        return Update(sorted(objects, key=lambda o: o.track_id), removed)

    def _match(self, tracks: list[_Track], boxes: np.ndarray, indices: list[int], minimum: float):
        if not tracks or not indices:
            return [], list(tracks), list(indices)
        predicted = np.array([track.filter.box() for track in tracks])
        pairs, rows, columns = assign(iou_matrix(predicted, boxes[indices]), minimum)
        return [(tracks[r], indices[c]) for r, c in pairs], [tracks[r] for r in rows], [indices[c] for c in columns]

    def _confirm(self, track: _Track) -> None:
        track.track_id = self.next_id
        self.next_id += 1

    def _object(self, track: _Track, index: int) -> TrackedObject:
        x0, y0, x1, y1 = (float(v) for v in track.box)
        return TrackedObject(
            track.track_id, (x0, y0, x1, y1), track.score, track.class_id, track.label, index, track.first_seen, tuple(track.trail)
        )

    def reset(self) -> list[int]:
        """Forget every track (a gap longer than the stream's timeout); IDs continue. Returns the confirmed IDs removed."""
        removed = [track.track_id for track in self.tracks if track.track_id]
        self.tracks, self.last_time = [], None
        return removed
