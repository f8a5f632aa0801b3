"""benchmarks.cpu: best-of CPU time per item, and a second stage's calls timed apart from their caller."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from benchmarks.cpu import TimedStage, cpu_ms


def busy(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_stage_is_timed_apart_from_its_caller():
    stage = TimedStage(lambda batch: (busy(0.03), batch * 2)[1])

    def caller() -> np.ndarray:
        busy(0.01)
        return asyncio.run(stage(np.ones((3, 2), np.float32)))

    np.testing.assert_array_equal(asyncio.run(stage(np.ones((1, 2), np.float32))), np.full((1, 2), 2.0))
    whole = cpu_ms(caller, 1, 3)
    own = cpu_ms(caller, 1, 3, excluded=lambda: stage.ms)
    assert whole >= 40 and 10 <= own < 25, (whole, own)
    assert stage.items == 1 + 8 * 3 and stage.ms >= 9 * 30  # every call (of 3 items): two warm-ups, six passes
    assert cpu_ms(caller, 2, 1) < whole  # per item
