"""Answer each request of a Triton batch on its own: one bad request never fails its neighbours."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np


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

    def parse_one(request: Any) -> tuple[Any, BaseException | None]:
        try:
            return parse(request), None
        except Exception as error:
            return None, error

    outcomes = list(map_requests(parse_one, requests))
    parsed = [result for result, error in outcomes if error is None]
    errors = [error for _, error in outcomes]
    results = iter(compute(parsed) if parsed else [])
    return [fail(error) if error is not None else respond(next(results)) for error in errors]


def split_rows(batch: np.ndarray, counts: Sequence[int]) -> list[np.ndarray]:
    """Split a concatenated batch back into per-request arrays."""
    return np.split(batch, np.cumsum(counts)[:-1]) if counts else []
