"""The shape every Python-backend model here shares: parse each request, compute them together, answer each.

A subclass implements ``_parse`` (one request -> its inputs; raising fails only that request),
``_compute`` (all parsed requests -> one result each, as one vectorized batch) and ``_respond``
(one result -> an ``InferenceResponse``); ``execute`` is the same for every model. Its ``initialize`` calls
:meth:`BatchedModel.start_heartbeat`: each ``execute`` then says since when it runs, for the liveness check
(:mod:`vision_serving.step_heartbeat`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import triton_python_backend_utils as pb_utils

from .. import step_heartbeat
from .batching import run_requests
from .errors import triton_error


class BatchedModel:
    # How the requests of a batch are parsed: one after the other, unless a model sets a pool's map.
    map_requests: Callable[[Callable[[Any], Any], Sequence[Any]], Iterable[Any]] = map
    heartbeat: step_heartbeat.StepHeartbeat | None = None

    def start_heartbeat(self, args: dict[str, Any]) -> None:
        self.heartbeat = start_heartbeat(args)

    def _parse(self, request: Any) -> Any:
        raise NotImplementedError

    def _compute(self, parsed: list[Any]) -> Sequence[Any]:
        raise NotImplementedError

    def _respond(self, result: Any) -> Any:
        raise NotImplementedError

    def _fail(self, error: BaseException) -> Any:
        return pb_utils.InferenceResponse(error=triton_error(pb_utils, error))

    def execute(self, requests: list[Any]) -> list[Any]:
        with step_heartbeat.busy(self.heartbeat):
            return run_requests(requests, self._parse, self._compute, self._respond, self._fail, self.map_requests)


def start_heartbeat(args: dict[str, Any]) -> step_heartbeat.StepHeartbeat | None:
    """This instance's busy-since file (None, logged, where it cannot be written)."""
    name = args.get("model_instance_name") or args.get("model_name", "model")
    return step_heartbeat.open_or_none(name, pb_utils.Logger.log_warn)
