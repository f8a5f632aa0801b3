"""builders.precision.decide: the rungs measured in order, the first that passes served, FP32 the reference."""

from __future__ import annotations

import pytest

from builders import BuildError
from builders.precision import Rung, decide


def gate(passes: bool) -> dict:
    return {"metrics": {"iou": 0.9}, "checks": {"iou": {"value": 0.9, "min": 0.95 if not passes else 0.5, "pass": passes}}}


@pytest.fixture
def rungs(tmp_path):
    made = []
    for precision in ("int8", "fp16", "fp32"):
        path = tmp_path / f"{precision}.onnx"
        path.write_bytes(precision.encode())
        made.append(Rung(precision, path))
    return made


def test_the_first_passing_rung_is_served_and_the_rest_are_not_measured(rungs):
    measured: list[str] = []

    def measure(rung: Rung) -> dict | None:
        measured.append(rung.precision)
        return None if rung.precision == "fp32" else gate(rung.precision == "fp16")

    lines: list[str] = []
    chosen, records = decide(rungs, measure, lines.append)
    assert chosen["precision"] == "fp16" and chosen["onnx"] == "fp16.onnx" and chosen["pass"]
    assert measured == ["int8", "fp16"] and [r["precision"] for r in records] == ["int8", "fp16"]
    assert lines[0].startswith("int8: fail: iou 0.9000 (min 0.95)") and lines[1].startswith("fp16: PASS")


def test_fp32_is_the_reference_and_always_passes(rungs):
    chosen, records = decide(rungs, lambda rung: None if rung.precision == "fp32" else gate(False), lambda _: None)
    assert chosen["precision"] == "fp32" and len(records) == 3 and records[-1]["checks"] == {}


def test_a_ladder_that_does_not_end_with_fp32_is_refused(rungs):
    with pytest.raises(BuildError, match=r"the ladder \['int8', 'fp16'\] does not end with fp32"):
        decide(rungs[:2], lambda rung: gate(False), lambda _: None)
