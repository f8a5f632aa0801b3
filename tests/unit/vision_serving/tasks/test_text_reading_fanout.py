"""Crops to a second model in chunks: the plan (one width per request, at most a batch), all requests in
flight at once, answers back by crop index whatever order they arrive in."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from vision_serving.tasks.text_reading import fanout, reader
from vision_serving.tasks.text_reading.settings import DEFAULT


def test_the_plan_groups_crops_by_width_in_width_order_and_splits_at_the_batch():
    chunks = fanout.plan([320, 640, 320, 320, 960, 320, 320], max_batch=2)
    assert chunks == [
        fanout.Chunk((0, 2), 320),
        fanout.Chunk((3, 5), 320),
        fanout.Chunk((6,), 320),
        fanout.Chunk((1,), 640),
        fanout.Chunk((4,), 960),
    ]


def test_a_photo_with_a_thousand_lines_is_many_requests_none_over_the_batch():
    widths = [320 if index % 3 else 640 for index in range(1000)]
    chunks = fanout.plan(widths, max_batch=32)
    assert max(len(chunk.members) for chunk in chunks) == 32
    assert sorted(index for chunk in chunks for index in chunk.members) == list(range(1000))
    assert all(widths[index] == chunk.width for chunk in chunks for index in chunk.members)
    assert len(chunks) == -(-666 // 32) + -(-334 // 32)


def test_no_crops_no_requests_and_a_batch_must_hold_one():
    assert fanout.plan([], max_batch=8) == []
    with pytest.raises(ValueError, match="max_batch must be at least 1"):
        fanout.plan([320], max_batch=0)


def test_every_request_is_in_flight_at_once_and_answers_go_back_by_index():
    widths = [320, 640, 320, 960, 320]
    chunks = fanout.plan(widths, max_batch=2)
    in_flight = 0
    most = 0

    async def infer(batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        # The widest request answers first: arrival order is not the plan's order.
        await asyncio.sleep(0.01 * (1000 - batch[0, 1]) / 100)
        in_flight -= 1
        return batch[:, :1] * 10, batch[:, 1].astype(np.int32)

    def batch_of(chunk: fanout.Chunk) -> np.ndarray:
        return np.array([[index, chunk.width] for index in chunk.members], np.float32)

    rows = asyncio.run(fanout.run(chunks, len(widths), batch_of, infer))
    assert [float(first[0]) for first, _ in rows] == [0.0, 10.0, 20.0, 30.0, 40.0]
    assert [int(second) for _, second in rows] == widths  # every output's row goes back to its crop
    assert most == len(chunks)


def test_an_answer_with_the_wrong_number_of_rows_is_an_error():
    chunks = fanout.plan([320, 320], max_batch=2)
    with pytest.raises(ValueError, match="a request of 2 crops was answered with 1 rows"):
        fanout.run_sync(chunks, 2, lambda chunk: np.zeros((len(chunk.members), 1)), lambda batch: (batch[:1],))


def test_recognition_in_buckets_sends_one_width_per_call_and_at_most_max_batch():
    classes = ["blank", *"abcdefgh", " "]
    crops = [np.full((48, width, 3), 128, np.uint8) for width in (60, 700, 100, 90, 2000, 50, 40)]
    calls: list[tuple[int, int]] = []

    def recognizer(batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        calls.append((batch.shape[0], batch.shape[3]))
        steps = batch.shape[3] // 8
        output = np.zeros((batch.shape[0], steps, len(classes)), np.float32)
        output[:, :, 0] = 1.0
        output[:, 0, 0], output[:, 0, 1 + steps % 8] = 0.0, 0.9  # one character, from the width
        return reader.recognition.greedy_steps(output)

    results = reader.recognize(crops, recognizer, classes, DEFAULT, batching="buckets", max_batch=2)
    assert all(size <= 2 for size, _ in calls)
    widths = [width for _, width in calls]
    assert widths == sorted(widths) and len(set(widths)) >= 3
    assert sum(size for size, _ in calls) == len(crops)
    # Each crop's text is the one its own bucket's width spells: back in the crops' order.
    expected = [classes[1 + (reader.recognition.bucket_width(crop, DEFAULT.recognition) // 8) % 8] for crop in crops]
    assert [text for text, _ in results] == expected
