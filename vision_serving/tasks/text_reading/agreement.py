"""How far two readings of the same photos agree: the text reader's gate metrics.

Lines are paired by box IoU (greedily, best first, at least :data:`MIN_PAIR_IOU`). A reference line is
*exact* when its pair reads the same text. The character error rate is the edit distance (Levenshtein,
``rapidfuzz``) summed over pairs, with every character of an unpaired line counted, over the reference's
characters. The boxes' IoU is that of the paired quadrilaterals. The same numbers judge a served reading
against RapidOCR (the tests) and a lower-precision core against FP32 (the precision ladder).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import cv2
import numpy as np
from rapidfuzz.distance import Levenshtein

from .reader import Line

MIN_PAIR_IOU = 0.5


def box_iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two quadrilaterals ``[4, 2]`` (of their convex hulls: the boxes are convex up to whole-pixel truncation)."""
    first = cv2.convexHull(np.asarray(a, np.float32).reshape(-1, 1, 2))
    second = cv2.convexHull(np.asarray(b, np.float32).reshape(-1, 1, 2))
    inter, _ = cv2.intersectConvexConvex(first, second)
    union = cv2.contourArea(first) + cv2.contourArea(second) - inter
    return float(inter / union) if union > 0 else 0.0


@dataclass
class Agreement:
    """Counts over photos: ``lines`` (the reference's, plus the candidate's it lacks), ``exact``, ``edits``
    and ``characters`` (the reference's), the paired boxes' IoUs and line-score differences, and the
    disagreements as sentences."""

    lines: int = 0
    exact: int = 0
    edits: int = 0
    characters: int = 0
    ious: list[float] = field(default_factory=list)
    score_deltas: list[float] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)

    @property
    def exact_rate(self) -> float:
        return self.exact / self.lines if self.lines else 1.0

    @property
    def cer(self) -> float:
        return self.edits / self.characters if self.characters else 0.0

    @property
    def mean_iou(self) -> float:
        return float(np.mean(self.ious)) if self.ious else 1.0

    @property
    def min_iou(self) -> float:
        return min(self.ious) if self.ious else 1.0

    def summary(self) -> str:
        scores = max(self.score_deltas) if self.score_deltas else 0.0
        return (
            f"{self.exact}/{self.lines} lines exact ({self.exact_rate:.1%}), CER {self.cer:.2%} "
            f"({self.edits}/{self.characters}), box IoU mean {self.mean_iou:.4f} min {self.min_iou:.4f}, "
            f"line score |diff| max {scores:.5f}"
        )

    def add(self, reference: Sequence[Line], candidate: Sequence[Line], name: str = "") -> Agreement:
        """One photo's two readings, added to the counts; returns self."""
        where = f"{name}: " if name else ""
        pairs = sorted(
            ((box_iou(ref.box, line.box), i, j) for i, ref in enumerate(reference) for j, line in enumerate(candidate)), reverse=True
        )
        matched: dict[int, int] = {}
        taken: set[int] = set()
        for iou, i, j in pairs:
            if iou >= MIN_PAIR_IOU and i not in matched and j not in taken:
                matched[i] = j
                taken.add(j)
                self.ious.append(iou)
        for i, ref in enumerate(reference):
            self.lines += 1
            self.characters += len(ref.text)
            if i not in matched:
                self.edits += len(ref.text)
                self.differences.append(f"{where}missing {ref.text!r} ({ref.score:.3f})")
                continue
            line = candidate[matched[i]]
            self.score_deltas.append(abs(ref.score - line.score))
            distance = Levenshtein.distance(ref.text, line.text)
            self.edits += distance
            self.exact += distance == 0
            if distance:
                self.differences.append(f"{where}{ref.text!r} ({ref.score:.3f}) read {line.text!r} ({line.score:.3f})")
        for j, line in enumerate(candidate):
            if j not in taken:
                self.lines += 1
                self.edits += len(line.text)
                self.differences.append(f"{where}extra {line.text!r} ({line.score:.3f})")
        return self
