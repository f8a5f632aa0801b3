"""Answer each request of a Triton batch on its own: one bad request never fails its neighbours."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def run_requests(
    requests: Sequence[Any],
    parse: Callable[[Any], Any],
    compute: Callable[[list[Any]], Sequence[Any]],
    respond: Callable[[Any], Any],
    fail: Callable[[BaseException], Any],
) -> list[Any]:
    """``parse`` each request (its exception fails only that request), ``compute`` all parsed ones
    together (returns one result per parsed request), then ``respond`` or ``fail`` per request."""
    parsed: list[Any] = []
    errors: list[BaseException | None] = []
    for request in requests:
        try:
            parsed.append(parse(request))
            errors.append(None)
        except Exception as error:
            errors.append(error)
    results = iter(compute(parsed) if parsed else [])
    return [fail(error) if error is not None else respond(next(results)) for error in errors]


def split_rows(batch: np.ndarray, counts: Sequence[int]) -> list[np.ndarray]:
    """Split a concatenated batch back into per-request arrays."""
    return np.split(batch, np.cumsum(counts)[:-1]) if counts else []
