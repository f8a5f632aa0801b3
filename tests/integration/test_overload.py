"""Three times the saturating load on the classifier (CPU config): bounded queues fail fast, accepted requests stay bounded.

    .venv/bin/python -m pytest tests/integration/test_overload.py -s    # prints the figures

Every composing model bounds its queue (``default_queue_policy``, sizes from
``python -m benchmarks.systems --service-rates``, docs/design.md "Queues and overload"). Here
``OVERLOAD_CONCURRENCY`` clients send back to back with the raw tritonclient (no
retries) for ``DURATION_S`` while a low-rate client sends one request every
``TRICKLE_PERIOD_S``. Rejected requests must be UNAVAILABLE "Exceeds maximum queue
size" and come back within the first step's full-queue wait and execution;
accepted requests' p99 within every step's full-queue wait plus its execution;
the low-rate client keeps being served throughout. A step's full-queue wait is
its max_queue_size over its service rate, both measured by Triton over the same
run (instances x images / busy time): the budget the sizes were derived for
(250 ms at the service rates the systems benchmark measured), as fast as this shared machine
runs now. The bounds carry a factor ``NOISE`` for client threads and scheduling. The unbounded comparison (previous
behaviour) is in the benchmark, not here: ``python -m benchmarks.whatif --overload 36``.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
import tritonclient.grpc as grpcclient

from devtools.loadgen import GOLDEN_LABELS, LoadGenerator, Outcome, classify, percentiles, status_of
from vision_serving import layout, model_config, queue_policy

pytestmark = pytest.mark.integration

CLASSIFIER = layout.pipeline("image_classifier")
# The classifier's throughput stops growing at about 12 clients on the CPU config (measured: 27 req/s
# at 1, 52 at 4, 60 at 12; docs/design.md "Queues and overload").
SATURATING_CONCURRENCY = 12
OVERLOAD_CONCURRENCY = 3 * SATURATING_CONCURRENCY
DURATION_S = 20.0
TRICKLE_PERIOD_S = 0.5
# Client threads, gRPC and scheduling on a shared 2-CPU machine, on top of the design's bound.
NOISE = 3.0
STEPS = [CLASSIFIER.model_name(role) for role in layout.ROLES]


def step_counters(client: grpcclient.InferenceServerClient) -> dict[str, tuple[int, int, int]]:
    """Cumulative (executions, images, compute ns) per step, from Triton's statistics."""
    stats = client.get_inference_statistics(as_json=True)
    result = {}
    for entry in stats["model_stats"]:
        if entry["name"] in STEPS:
            rows = entry.get("batch_stats", [])
            executions = sum(int(row["compute_infer"]["count"]) for row in rows)
            images = sum(int(row["batch_size"]) * int(row["compute_infer"]["count"]) for row in rows)
            ns = sum(int(row[stage]["ns"]) for row in rows for stage in ("compute_input", "compute_infer", "compute_output"))
            result[entry["name"]] = (executions, images, ns)
    return result


def step_times_s(before: dict, after: dict, configs: dict[str, model_config.ModelConfig]) -> dict[str, dict[str, float]]:
    """Per step over the run: one execution (s), and the wait a full queue means at the step's
    service rate (max_queue_size / (instances x images / busy s)): the budget as this machine runs now."""
    times = {}
    for name, config in configs.items():
        executions, images, ns = (a - b for a, b in zip(after[name], before[name], strict=True))
        busy_s = ns / 1e9
        rate = queue_policy.instance_count(config) * images / busy_s if busy_s else float("inf")
        times[name] = {
            "execution": busy_s / max(1, executions),
            "full_queue_wait": config.dynamic_batching.default_queue_policy.max_queue_size / rate,
        }
    return times


def trickle(url: str, payload: bytes, stop: threading.Event, outcomes: list[Outcome]) -> None:
    client = grpcclient.InferenceServerClient(url)
    while not stop.is_set():
        started = time.monotonic()
        try:
            label, error = classify(client, payload, timeout_s=60), None
        except Exception as exc:
            label, error = None, f"{status_of(exc)}: {exc}"
        outcomes.append(Outcome(started, time.monotonic(), "trickle", label, error))
        stop.wait(TRICKLE_PERIOD_S)


def test_three_times_overload_is_rejected_fast_and_accepted_latency_stays_bounded(triton_server, photo_bytes):
    configs = {name: model_config.load_config(CLASSIFIER.model_dir(role), "cpu") for role, name in zip(layout.ROLES, STEPS, strict=True)}
    assert all(config.dynamic_batching.default_queue_policy.max_queue_size > 0 for config in configs.values())
    images = {name: photo_bytes[name] for name in GOLDEN_LABELS}
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    classify(client, images["chelsea"])  # the server is up and answers

    before = step_counters(client)
    stop = threading.Event()
    trickled: list[Outcome] = []
    low_rate = threading.Thread(target=trickle, args=(triton_server.grpc_url, images["coffee"], stop, trickled), daemon=True)
    load = LoadGenerator(triton_server.grpc_url, images, concurrency=OVERLOAD_CONCURRENCY, timeout_s=60).start()
    low_rate.start()
    started = time.monotonic()
    time.sleep(DURATION_S)
    report = load.stop()
    stop.set()
    low_rate.join(timeout=70)
    times = step_times_s(before, step_counters(client), configs)

    accepted = [o for o in report.outcomes if o.ok]
    rejected = [o for o in report.outcomes if not o.ok]
    accepted_ms = percentiles([o.latency_s for o in accepted])
    rejected_ms = percentiles([o.latency_s for o in rejected])
    # Accepted: at most a full queue's wait and one execution per step. Rejected: a full queue answers
    # at once; the latest a request meets one is after the step before the slowest (the core on CPU).
    accepted_bound_ms = 1e3 * NOISE * sum(step["full_queue_wait"] + step["execution"] for step in times.values())
    first = times[STEPS[0]]
    rejected_bound_ms = 1e3 * NOISE * (first["full_queue_wait"] + first["execution"])
    thirds = [
        [o for o in trickled if o.ok and started + i * DURATION_S / 3 <= o.started < started + (i + 1) * DURATION_S / 3] for i in range(3)
    ]
    figures = {
        "concurrency": OVERLOAD_CONCURRENCY,
        "max_queue_size": {name: config.dynamic_batching.default_queue_policy.max_queue_size for name, config in configs.items()},
        "requests": len(report.outcomes),
        "accepted_rps": round(len(accepted) / report.duration_s, 1),
        "accepted_p50_ms": round(accepted_ms["p50_ms"] or 0, 1),
        "accepted_p99_ms": round(accepted_ms["p99_ms"] or 0, 1),
        "accepted_bound_ms": round(accepted_bound_ms),
        "rejected_share": round(len(rejected) / max(1, len(report.outcomes)), 3),
        "rejected_p50_ms": round(rejected_ms["p50_ms"] or 0, 1),
        "rejected_p99_ms": round(rejected_ms["p99_ms"] or 0, 1),
        "rejected_bound_ms": round(rejected_bound_ms),
        "step_ms": {name: {key: round(1e3 * value, 1) for key, value in step.items()} for name, step in times.items()},
        "low_rate": {"sent": len(trickled), "served": sum(o.ok for o in trickled), "served_by_third": [len(t) for t in thirds]},
        "errors": report.summary()["errors"],
    }
    print("overload:", json.dumps(figures, indent=1))

    assert not report.wrong_answers, json.dumps(figures)
    assert accepted, json.dumps(figures)
    assert rejected, f"{OVERLOAD_CONCURRENCY} clients were not enough to fill a queue: {json.dumps(figures)}"
    assert all(status_of_outcome(o) == "UNAVAILABLE" and "Exceeds maximum queue size" in (o.error or "") for o in rejected), json.dumps(
        figures
    )
    assert accepted_ms["p99_ms"] <= accepted_bound_ms, json.dumps(figures)
    assert rejected_ms["p99_ms"] <= rejected_bound_ms, json.dumps(figures)
    assert all(thirds), f"the low-rate client went unserved for a third of the run: {json.dumps(figures)}"
    assert sum(o.ok for o in trickled) >= len(trickled) / 2, json.dumps(figures)
    assert triton_server.is_ready()


def status_of_outcome(outcome: Outcome) -> str:
    return (outcome.error or "").split(":", 1)[0]
