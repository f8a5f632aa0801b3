"""Crops of many photos to a second model: one request per chunk, answers put back by crop index.

A served ``text_reader`` postprocess holds the crops of every photo of its Triton batch. It sends
them to the recognizer (and the direction classifier) as BLS requests: crops of one width bucket
together, at most the model's ``max_batch_size`` per request, all requests at once, each request
then batched by that model's own scheduler with other photos' and other clients' chunks. A photo
with more lines than a batch is several requests, never a refused one; a photo without lines sends
none. The answers arrive in any order and go back to their crops by index.

The same plan runs in process (``reader.read_photos``, the models as plain callables) and in the
Triton model (its ``infer`` sends a ``pb_utils.InferenceRequest`` and awaits ``async_exec``), so
the served answer and the in-process one batch crops the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Chunk:
    """One request: the crops ``members`` (indices into all crops), each padded to ``width``."""

    members: tuple[int, ...]
    width: int


def plan(widths: Sequence[int], max_batch: int) -> list[Chunk]:
    """The requests for crops whose padded widths are ``widths``: one width per request, in width order,
    crops in their own order, at most ``max_batch`` each."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be at least 1, got {max_batch}")
    by_width: dict[int, list[int]] = {}
    for index, width in enumerate(widths):
        by_width.setdefault(int(width), []).append(index)
    return [
        Chunk(tuple(members[start : start + max_batch]), width)
        for width, members in sorted(by_width.items())
        for start in range(0, len(members), max_batch)
    ]


# A model's outputs for one batch, in the order the postprocess names them (each [batch, ...]).
Outputs = tuple[np.ndarray, ...]
Infer = Callable[[np.ndarray], Awaitable[Outputs]]


async def run(chunks: Sequence[Chunk], count: int, batch_of: Callable[[Chunk], np.ndarray], infer: Infer) -> list[Outputs]:
    """Every chunk's batch (``batch_of``) sent at once through ``infer``; each of the ``count`` crops' rows of
    the outputs, in crop order. A chunk answered with another number of rows raises ValueError."""
    answers = await asyncio.gather(*(infer(batch_of(chunk)) for chunk in chunks))
    rows: list[Outputs | None] = [None] * count
    for chunk, outputs in zip(chunks, answers):
        outputs = tuple(np.asarray(output) for output in outputs)
        if any(output.shape[0] != len(chunk.members) for output in outputs):
            rows_given = ", ".join(str(output.shape[0]) for output in outputs)
            raise ValueError(f"a request of {len(chunk.members)} crops was answered with {rows_given} rows")
        for position, index in enumerate(chunk.members):
            rows[index] = tuple(output[position] for output in outputs)
    missing = [index for index, row in enumerate(rows) if row is None]
    if missing:
        raise ValueError(f"crops {missing[:5]} are in no chunk")
    return [row for row in rows if row is not None]


def run_sync(
    chunks: Sequence[Chunk], count: int, batch_of: Callable[[Chunk], np.ndarray], model: Callable[[np.ndarray], Outputs]
) -> list[Outputs]:
    """:func:`run` with a plain model (a batch in, its outputs out), in this thread."""

    async def infer(batch: np.ndarray) -> Outputs:
        return model(batch)

    return asyncio.run(run(chunks, count, batch_of, infer))
