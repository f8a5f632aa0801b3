"""devtools.loadgen: the one load generator, with fake senders (no server)."""

from __future__ import annotations

import time

import pytest

from devtools import loadgen


def sleeper(seconds: float, fail_every: int = 0, wrong_every: int = 0) -> loadgen.SenderFactory:
    def factory(worker: int) -> loadgen.Sender:
        def send(request: int) -> str:
            time.sleep(seconds)
            if fail_every and request % fail_every == fail_every - 1:
                raise ConnectionError("refused")
            if wrong_every and request % wrong_every == wrong_every - 1:
                raise loadgen.WrongAnswer(f"{loadgen.WRONG_LABEL}: {request}")
            return "ok"

        return send

    return factory


def test_closed_loop_measures_the_window_only():
    result = loadgen.closed_loop(sleeper(0.01), concurrency=2, warmup_s=0.2, duration_s=0.5)
    # Two workers, ~10 ms per request: at most about 200 req/s (fewer on a loaded machine), each request >= 10 ms.
    assert 0 < result.throughput < 250
    assert result.completed == pytest.approx(result.throughput * result.duration_s, abs=0.5)
    assert result.p50_ms >= 9 and result.errors == 0


def test_closed_loop_counts_every_error():
    result = loadgen.closed_loop(sleeper(0.005, fail_every=4), concurrency=2, warmup_s=0.05, duration_s=0.3)
    assert result.errors > 0 and result.error_samples == ["ConnectionError: refused"]


def test_load_generator_separates_errors_from_wrong_answers():
    generator = loadgen.LoadGenerator(concurrency=2, make_sender=sleeper(0.002, fail_every=5, wrong_every=3), error_pause_s=0.0)
    with generator:
        generator.wait_for(60, timeout_s=10)
    report = generator.stop()
    assert report.errors and report.wrong_answers
    assert all(o.error.startswith("ConnectionError") for o in report.errors)
    assert len(report.outcomes) == len(report.failures) + sum(o.ok for o in report.outcomes)


def test_a_sender_that_cannot_start_is_reported():
    def broken(worker: int) -> loadgen.Sender:
        raise OSError("no route")

    with pytest.raises(RuntimeError, match="could not start: no route"):
        loadgen.closed_loop(broken, concurrency=2, warmup_s=0.05, duration_s=0.05)
