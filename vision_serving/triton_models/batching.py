"""Answer each request of a Triton batch on its own: one bad request never fails its neighbours."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import numpy as np


def parse_each(
    requests: Sequence[Any], parse: Callable[[Any], Any], map_requests: Callable[[Callable[[Any], Any], Sequence[Any]], Iterable[Any]] = map
) -> tuple[list[Any], list[BaseException | None]]:
    """(the parsed requests, each request's parse error or None): a request's exception is its own."""

    def parse_one(request: Any) -> tuple[Any, BaseException | None]:
        try:
            return parse(request), None
        except Exception as error:
            return None, error

    outcomes = list(map_requests(parse_one, requests))
    return [result for result, error in outcomes if error is None], [error for _, error in outcomes]


def run_requests(
    requests: Sequence[Any],
    parse: Callable[[Any], Any],
    compute: Callable[[list[Any]], Sequence[Any]],
    respond: Callable[[Any], Any],
    fail: Callable[[BaseException], Any],
    map_requests: Callable[[Callable[[Any], Any], Sequence[Any]], Iterable[Any]] = map,
) -> list[Any]:
    """``parse`` each request (its exception fails only that request), ``compute`` all parsed ones
    together (returns one result per parsed request), then ``respond`` or ``fail`` per request.
    ``map_requests`` runs the parses (a thread pool's ``map`` parses them in parallel)."""
    parsed, errors = parse_each(requests, parse, map_requests)
    results = iter(compute(parsed) if parsed else [])
    return [fail(error) if error is not None else respond(next(results)) for error in errors]


async def run_requests_async(
    requests: Sequence[Any],
    parse: Callable[[Any], Any],
    compute: Callable[[list[Any]], Awaitable[Sequence[Any]]],
    respond: Callable[[Any], Any],
    fail: Callable[[BaseException], Any],
) -> list[Any]:
    """:func:`run_requests` for a step whose computation awaits other models (BLS, ``async_exec``): a request
    that does not parse fails alone; a computation that raises (a second stage failed) fails every parsed request
    of the batch with its error, and the requests that did not parse keep their own."""
    parsed, errors = parse_each(requests, parse)
    try:
        results = iter(await compute(parsed) if parsed else [])
    except Exception as failure:
        return [fail(failure if error is None else error) for error in errors]
    return [fail(error) if error is not None else respond(next(results)) for error in errors]


def split_rows(batch: np.ndarray, counts: Sequence[int]) -> list[np.ndarray]:
    """Split a concatenated batch back into per-request arrays."""
    return np.split(batch, np.cumsum(counts)[:-1]) if counts else []
