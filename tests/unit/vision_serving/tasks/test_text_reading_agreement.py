"""The text reader's gate metrics on hand-made readings: pairing by box IoU, exact lines, CER, missing and extra lines."""

from __future__ import annotations

import numpy as np
import pytest

from vision_serving.tasks.text_reading.agreement import Agreement, box_iou
from vision_serving.tasks.text_reading.reader import Line


def line(text: str, x: float, y: float, width: float = 100, height: float = 20, score: float = 0.9) -> Line:
    box = np.array([[x, y], [x + width, y], [x + width, y + height], [x, y + height]], np.float32)
    return Line(text, score, box, 0.8)


def test_box_iou_of_quadrilaterals():
    a = line("", 0, 0).box
    assert box_iou(a, a) == pytest.approx(1.0)
    assert box_iou(a, line("", 50, 0).box) == pytest.approx(1 / 3)
    assert box_iou(a, line("", 500, 0).box) == 0.0


def test_the_same_reading_is_exact_everywhere():
    reading = [line("TOTAL 12.50", 10, 10), line("Thank you", 10, 40)]
    counts = Agreement().add(reading, reading, "receipt")
    assert (counts.lines, counts.exact, counts.edits, counts.characters) == (2, 2, 0, 20)
    assert counts.exact_rate == 1.0 and counts.cer == 0.0 and counts.min_iou == pytest.approx(1.0)
    assert counts.differences == []


def test_a_misread_a_missing_and_an_extra_line_are_counted_and_named():
    reference = [line("TOTAL", 0, 0), line("PAID", 0, 40), line("CASH", 0, 80)]
    candidate = [line("TOTA1", 2, 1, score=0.6), line("CASH", 0, 80), line("noise", 300, 300)]
    counts = Agreement().add(reference, candidate, "photo")
    # 3 reference lines + 1 extra; TOTAL/TOTA1 is 1 edit, PAID missing is 4, the extra "noise" 5.
    assert counts.lines == 4 and counts.exact == 1
    assert counts.edits == 1 + 4 + 5 and counts.characters == len("TOTALPAIDCASH")
    assert counts.cer == pytest.approx(10 / 13)
    assert counts.differences == [
        "photo: 'TOTAL' (0.900) read 'TOTA1' (0.600)",
        "photo: missing 'PAID' (0.900)",
        "photo: extra 'noise' (0.900)",
    ]
    assert max(counts.score_deltas) == pytest.approx(0.3)


def test_boxes_that_overlap_too_little_do_not_pair():
    counts = Agreement().add([line("A", 0, 0)], [line("A", 70, 0)])
    assert counts.ious == [] and counts.exact == 0 and counts.lines == 2


def test_no_lines_agree_fully():
    counts = Agreement().add([], [])
    assert counts.exact_rate == 1.0 and counts.cer == 0.0 and counts.mean_iou == 1.0
