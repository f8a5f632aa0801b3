"""vision_serving.triton_models.batching: each request answered on its own, parsed in order or in a pool."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from vision_serving.triton_models.batching import run_requests, run_requests_async


def parse(request: int) -> int:
    if request < 0:
        raise ValueError(f"bad request {request}")
    return request * 10


@pytest.mark.parametrize("pooled", [False, True])
def test_a_bad_request_fails_alone_and_the_answers_keep_their_order(pooled):
    pool = ThreadPoolExecutor(4) if pooled else None
    answers = run_requests(
        [1, -2, 3, 4, -5, 6],
        parse,
        lambda parsed: [value + 1 for value in parsed],
        lambda result: ("ok", result),
        lambda error: ("error", str(error)),
        pool.map if pool else map,
    )
    assert answers == [("ok", 11), ("error", "bad request -2"), ("ok", 31), ("ok", 41), ("error", "bad request -5"), ("ok", 61)]


def test_a_pool_parses_the_requests_of_a_batch_at_the_same_time():
    barrier = threading.Barrier(3, timeout=10)  # three parses must be running together to pass it

    def waiting_parse(request: int) -> int:
        barrier.wait()
        return request

    with ThreadPoolExecutor(3) as pool:
        answers = run_requests([1, 2, 3], waiting_parse, list, lambda r: r, lambda e: e, pool.map)
    assert answers == [1, 2, 3]


def test_the_async_form_answers_as_the_plain_one():
    async def compute(parsed: list[int]) -> list[int]:
        await asyncio.sleep(0)  # a BLS request awaited
        return [value + 1 for value in parsed]

    answers = asyncio.run(run_requests_async([1, -2, 3], parse, compute, lambda r: ("ok", r), lambda e: ("error", str(e))))
    assert answers == [("ok", 11), ("error", "bad request -2"), ("ok", 31)]


def test_a_failed_computation_fails_the_parsed_requests_and_each_bad_one_keeps_its_error():
    async def compute(parsed: list[int]) -> list[int]:
        raise RuntimeError("recognizer: out of memory")

    answers = asyncio.run(run_requests_async([1, -2, 3], parse, compute, lambda r: ("ok", r), lambda e: ("error", str(e))))
    assert answers == [("error", "recognizer: out of memory"), ("error", "bad request -2"), ("error", "recognizer: out of memory")]


def test_a_batch_of_bad_requests_computes_nothing():
    async def compute(parsed: list[int]) -> list[int]:
        raise AssertionError("nothing to compute")

    assert asyncio.run(run_requests_async([-1], parse, compute, lambda r: r, lambda e: str(e))) == ["bad request -1"]
