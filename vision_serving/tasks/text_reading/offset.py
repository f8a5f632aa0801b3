"""The outward offset of a closed polygon with round joins, as Clipper 6.4.2 computes it (integers in, integers out).

RapidOCR's DB postprocessing grows each text box with ``pyclipper.PyclipperOffset`` (pyclipper
1.4.0 wraps Clipper 6.4.2, Angus Johnson, Boost Software License): ``AddPath(box, JT_ROUND,
ET_CLOSEDPOLYGON)`` then ``Execute(distance)`` (``rapidocr/ch_ppocr_det/utils.py``,
``DBPostProcess.unclip``), and fits a rectangle around the result with ``cv2.minAreaRect``. This
module reproduces the points of that offset without pyclipper, so the serving image needs no
compiled geometry library for it. It follows ``clipper.cpp``:

* ``AddPath``: each coordinate converted to Clipper's integer ``cInt`` as pyclipper converts a
  Python float (truncation toward zero); consecutive duplicate points, and copies of the first
  point at the end, dropped; fewer than 3 points left: nothing is offset;
* ``FixOrientations``: the path reversed when its signed ``Area`` is negative;
* ``DoOffset``: ``ArcTolerance`` 0.25 (pyclipper's default; at most ``|delta| / 4``), ``steps =
  pi / acos(1 - tolerance / |delta|)`` at most ``|delta| pi``, a unit normal per edge
  (``GetUnitNormal``), then ``OffsetPoint`` at each vertex: a near-straight vertex (``|sin a x
  delta| < 1`` with ``cos a > 0``) gives one point (and leaves the previous-normal index where
  it was), a concave one three, a convex one ``DoRound``'s arc of ``max(Round(steps / 2pi x
  |a|), 1)`` points by rotation and its end point; every point rounded half away from zero
  (Clipper's ``Round``).

``Execute`` then unions that one polygon (``ctUnion``, ``pftPositive``), and its output is what
``cv2.minAreaRect`` reads: the point set *and* where it starts matter (``cv2.convexHull`` keeps
the input's order, and the rectangle's float corners follow it by a few 1e-5 px). For the convex
polygons a box grows into, the union leaves the points with duplicates and collinear ones removed
(``FixupOutPolygon``), clockwise in image coordinates (y down), starting after the top-most point
(least y, then greatest x): :func:`convex_union` gives that, and :func:`offset` the two together,
which the project's tests check point for point, in order, against pyclipper's own answers
(``tests/support/rapidocr_reference.py unclip``).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

# clipper.cpp: def_arc_tolerance; pyclipper.PyclipperOffset(arc_tolerance=0.25) passes the same value.
ARC_TOLERANCE = 0.25
_TWO_PI = 2.0 * math.pi


def clipper_round(value: float) -> int:
    """Clipper's ``Round``: half away from zero."""
    return int(value - 0.5) if value < 0 else int(value + 0.5)


def _integer_path(points: npt.ArrayLike) -> list[tuple[int, int]]:
    """``AddPath``'s contour: integers (truncated toward zero), duplicates dropped."""
    path = [(int(float(x)), int(float(y))) for x, y in np.asarray(points).reshape(-1, 2)]
    high = len(path) - 1
    while high > 0 and path[0] == path[high]:
        high -= 1
    contour = [path[0]] if path else []
    for point in path[1 : high + 1]:
        if point != contour[-1]:
            contour.append(point)
    return contour


def _area(path: list[tuple[int, int]]) -> float:
    """Clipper's signed ``Area``."""
    if len(path) < 3:
        return 0.0
    total = 0.0
    previous = path[-1]
    for point in path:
        total += (float(previous[0]) + point[0]) * (float(previous[1]) - point[1])
        previous = point
    return -total * 0.5


def _unit_normal(a: tuple[int, int], b: tuple[int, int]) -> tuple[float, float]:
    if a == b:
        return 0.0, 0.0
    dx, dy = float(b[0] - a[0]), float(b[1] - a[1])
    f = 1.0 / math.sqrt(dx * dx + dy * dy)
    return dy * f, -dx * f


def round_offset(points: npt.ArrayLike, delta: float) -> npt.NDArray[np.int32]:
    """The points ``[M, 2]`` (int32) of the closed polygon ``points`` offset by ``delta`` > 0 with round
    joins, as Clipper's ``DoOffset`` emits them; ``[0, 2]`` when fewer than 3 distinct points remain."""
    contour = _integer_path(points)
    if len(contour) < 3 or not delta > 0:
        return np.zeros((0, 2), np.int32)
    if _area(contour) < 0:
        contour.reverse()
    tolerance = min(ARC_TOLERANCE, abs(delta) * ARC_TOLERANCE)  # ArcTolerance, at most |delta| x def_arc_tolerance
    steps = math.pi / math.acos(1.0 - tolerance / abs(delta))
    steps = min(steps, abs(delta) * math.pi)
    sin_step, cos_step = math.sin(_TWO_PI / steps), math.cos(_TWO_PI / steps)
    steps_per_radian = steps / _TWO_PI
    count = len(contour)
    normals = [_unit_normal(contour[j], contour[(j + 1) % count]) for j in range(count)]
    out: list[tuple[int, int]] = []

    def emit(x: float, y: float) -> None:
        out.append((clipper_round(x), clipper_round(y)))

    k = count - 1
    for j in range(count):
        (kx, ky), (jx, jy) = normals[k], normals[j]
        px, py = contour[j]
        sin_a = kx * jy - jx * ky
        if abs(sin_a * delta) < 1.0:
            if kx * jx + jy * ky > 0:  # nearly straight: one point, k stays
                emit(px + kx * delta, py + ky * delta)
                continue
        else:
            sin_a = max(-1.0, min(1.0, sin_a))
        if sin_a * delta < 0:  # concave vertex
            emit(px + kx * delta, py + ky * delta)
            out.append((px, py))
            emit(px + jx * delta, py + jy * delta)
        else:  # DoRound
            angle = math.atan2(sin_a, kx * jx + ky * jy)
            arc_steps = max(int(clipper_round(steps_per_radian * abs(angle))), 1)
            x, y = kx, ky
            for _ in range(arc_steps):
                emit(px + x * delta, py + y * delta)
                x, y = x * cos_step - sin_step * y, x * sin_step + y * cos_step
            emit(px + jx * delta, py + jy * delta)
        k = j
    return np.asarray(out, np.int32).reshape(-1, 2)


def convex_union(points: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
    """What Clipper's union leaves of one convex polygon ``[M, 2]``: no duplicate or collinear points,
    clockwise with y down, the top-most point (least y, then greatest x) last."""
    kept = [(int(x), int(y)) for x, y in np.asarray(points).reshape(-1, 2)]
    index = 0
    while len(kept) >= 3 and index < len(kept):
        (ax, ay), (bx, by), (cx, cy) = kept[index - 1], kept[index], kept[(index + 1) % len(kept)]
        if (bx - ax) * (cy - by) - (by - ay) * (cx - bx) == 0:  # also a repeated point
            del kept[index]
            index = max(index - 1, 0)
        else:
            index += 1
    if len(kept) < 3:
        return np.zeros((0, 2), np.int32)
    if sum(kept[i - 1][0] * kept[i][1] - kept[i][0] * kept[i - 1][1] for i in range(len(kept))) < 0:
        kept.reverse()
    top = min(range(len(kept)), key=lambda i: (kept[i][1], -kept[i][0]))
    return np.asarray(kept[top + 1 :] + kept[: top + 1], np.int32)


def offset(points: npt.ArrayLike, delta: float) -> npt.NDArray[np.int32]:
    """``PyclipperOffset``: ``AddPath(points, JT_ROUND, ET_CLOSEDPOLYGON)``, ``Execute(delta)``, for the
    convex polygon a text box grows into: int32 ``[M, 2]`` in pyclipper's order (``[0, 2]`` for none)."""
    return convex_union(round_offset(points, delta))
