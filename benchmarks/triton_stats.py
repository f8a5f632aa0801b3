"""Per-model deltas of Triton's statistics API over a measurement window.

``get_inference_statistics`` returns cumulative counters per model: requests
(``inference_stats.success.count``), batch executions (``execution_count``),
batch items (``inference_count``) and cumulative durations in ns for queue
and compute (input, infer, output), summed over requests: each request of a
batch is charged the batch's compute time. Over a window the deltas give:

- ``avg_batch``: items per execution (1 image per request here, so requests per batch);
- ``queue_ms``: mean time a request waited in the model's queue (dynamic batcher);
- ``compute_ms``: mean compute (input + infer + output) of the batch a request was in;
- ``request_ms``: mean server time of a request in this model (success ns / count);
- ``busy_s``: the executions' own compute time (input + infer + output of each batch, once per batch,
  from ``batch_stats``): ``instances x items / busy_s`` is the model's service rate, what its
  instances complete while busy (``benchmarks.queue_sizes``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tritonclient.grpc as grpcclient

BATCH_STAGES = ("compute_input", "compute_infer", "compute_output")
DURATION_KEYS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")


def _int(value) -> int:
    return int(value) if value not in (None, "") else 0


def snapshot(client: grpcclient.InferenceServerClient, models: list[str]) -> dict[str, dict[str, int]]:
    """Cumulative counters of each model (latest version) right now."""
    stats = client.get_inference_statistics(as_json=True)
    result: dict[str, dict[str, int]] = {}
    for entry in stats.get("model_stats", []):
        name = entry.get("name")
        if name not in models:
            continue
        inference = entry.get("inference_stats", {})
        counters = {
            "inference_count": _int(entry.get("inference_count")),
            "execution_count": _int(entry.get("execution_count")),
        }
        for key in DURATION_KEYS:
            counters[f"{key}_count"] = _int(inference.get(key, {}).get("count"))
            counters[f"{key}_ns"] = _int(inference.get(key, {}).get("ns"))
        counters["busy_ns"] = sum(_int(row.get(stage, {}).get("ns")) for row in entry.get("batch_stats", []) for stage in BATCH_STAGES)
        # Several versions would be summed; this repository serves one per model.
        previous = result.get(name)
        result[name] = counters if previous is None else {k: previous[k] + v for k, v in counters.items()}
    return result


def delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, dict]:
    """Window statistics per model from two snapshots."""
    report = {}
    for name, end in after.items():
        start = before.get(name, dict.fromkeys(end, 0))
        d = {key: end[key] - start.get(key, 0) for key in end}
        requests = d["success_count"]
        executions = d["execution_count"]

        def per_request(key: str, d: dict[str, int] = d, requests: int = requests) -> float | None:
            return round(d[f"{key}_ns"] / requests / 1e6, 3) if requests else None

        compute_ns = d["compute_input_ns"] + d["compute_infer_ns"] + d["compute_output_ns"]
        report[name] = {
            "requests": requests,
            "failed": d["fail_count"],
            "executions": executions,
            "items": d["inference_count"],
            "avg_batch": round(d["inference_count"] / executions, 2) if executions else None,
            "request_ms": per_request("success"),
            "queue_ms": per_request("queue"),
            "compute_input_ms": per_request("compute_input"),
            "compute_infer_ms": per_request("compute_infer"),
            "compute_output_ms": per_request("compute_output"),
            "compute_ms": round(compute_ns / requests / 1e6, 3) if requests else None,
            "busy_s": round(d["busy_ns"] / 1e9, 4),
        }
    return report


@dataclass
class WindowStats:
    """Hooks for ``loadgen.closed_loop``: snapshot at window start and end."""

    url: str
    models: list[str]
    before: dict = field(default_factory=dict)
    result: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.client = grpcclient.InferenceServerClient(self.url)

    def start(self) -> None:
        self.before = snapshot(self.client, self.models)

    def end(self) -> None:
        self.result = delta(self.before, snapshot(self.client, self.models))
