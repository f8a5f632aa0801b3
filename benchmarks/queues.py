"""Queue sizes from measurements: each composing model's service rate, and the bound it implies.

    .venv/bin/python -m benchmarks.queues [--pipeline NAME ...] [--budget-ms 250] [--concurrency 16]
                                          [--duration 10] [--overload 36] [--overload-duration 20]

1. **Service rates.** On the local tritonserver (``--model-config-name=cpu``), each
   pipeline's ensemble is driven at saturation (closed loop, ``--concurrency``
   requests in flight, the benchmark's real JPEG photos). Over the window, Triton's
   statistics give, per composing model and batch size, the executions and their
   compute time (input + infer + output). A step's service rate is what its
   instances complete while busy::

       rate = instances x images / sum(execution time)      (images per second)

   With every step sharing the same CPUs the execution times include that
   contention: the step whose rate is lowest is the bottleneck, and its rate is
   about the ensemble's throughput.

2. **Sizes.** A queue of ``rate x budget`` requests drains within the budget, so a
   request admitted to it waits at most about the budget before it executes::

       max_queue_size = max(ceil(rate x budget), floor)

   ``floor`` is ``vision_serving.queue_policy.MIN_QUEUE_SIZE`` (16: a burst of one request
   per client of the load tests' closed loops) and, after the first step, what the previous
   step can hand over at once (each instance completing one batch: ``instances x
   min(max_batch_size, its max_queue_size)``), except for the CPU core, which may be the
   slowest step (module docstring of ``vision_serving.queue_policy``). The production sizes
   (``config.pbtxt``: TensorRT on GPU, not measurable here) keep the CPU steps' measured rates
   and size the GPU core's queue and the next by the hand-over alone.

3. **Overload** (``--overload C``): the classifier-style comparison of the same
   repository with and without ``default_queue_policy`` (a copy with it removed:
   the previous, unbounded behaviour) at ``C`` clients, raw tritonclient, no
   retries: accepted p50/p99, rejected share and p99, and where the rejections
   happened (the requests each step completed: Triton counts a rejection as neither success nor failure).

Results: ``benchmarks/results/queues.{md,json}``. The sizes committed in the
configs come from this output (docs/design.md, "Queues and overload").
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import tritonclient.grpc as grpcclient
from google.protobuf import text_format
from tqdm import tqdm

from benchmarks import images
from benchmarks.pipelines import ensemble_sender
from devtools import loadgen
from devtools.triton_server import LocalTritonServer
from vision_serving import layout, model_config, queue_policy

RESULTS_DIR = Path(__file__).resolve().parent / "results"
STAGES = ("compute_input", "compute_infer", "compute_output")


def batch_snapshot(client: grpcclient.InferenceServerClient, models: list[str]) -> dict[str, dict[str, dict[int, int]]]:
    """{model: {"executions": {batch: count}, "ns": {batch: total compute ns}, "succeeded": {0: count}}}."""
    stats = client.get_inference_statistics(as_json=True)
    result: dict[str, dict[str, dict[int, int]]] = {}
    for entry in stats.get("model_stats", []):
        if entry.get("name") not in models:
            continue
        executions: dict[int, int] = {}
        busy: dict[int, int] = {}
        for row in entry.get("batch_stats", []):
            size = int(row["batch_size"])
            executions[size] = int(row.get("compute_infer", {}).get("count", 0))
            busy[size] = sum(int(row.get(stage, {}).get("ns", 0)) for stage in STAGES)
        # Triton counts a request rejected by a full queue neither as success nor as fail: the drop in
        # successes from one step to the next shows where rejections happened.
        succeeded = int(entry.get("inference_stats", {}).get("success", {}).get("count", 0))
        result[entry["name"]] = {"executions": executions, "ns": busy, "succeeded": {0: succeeded}}
    return result


def service_rates(
    before: dict[str, dict[str, dict[int, int]]], after: dict[str, dict[str, dict[int, int]]], instances: dict[str, int]
) -> dict[str, dict[str, float]]:
    """Per model over a window: images, executions, mean batch, mean execution ms, images/s while busy."""
    rates = {}
    for model, end in after.items():
        start = before.get(model, {"executions": {}, "ns": {}})
        executions = {b: n - start["executions"].get(b, 0) for b, n in end["executions"].items()}
        busy_ns = sum(n - start["ns"].get(b, 0) for b, n in end["ns"].items())
        count = sum(executions.values())
        items = sum(b * n for b, n in executions.items())
        if not count or not busy_ns:
            continue
        rates[model] = {
            "instances": instances[model],
            "images": items,
            "executions": count,
            "mean_batch": round(items / count, 2),
            "execution_ms": round(busy_ns / count / 1e6, 2),
            "rate": round(instances[model] * items / (busy_ns / 1e9), 1),
        }
    return rates


def derived_size(rate: float, budget_s: float, floor: int) -> int:
    """The queue that drains within ``budget_s`` at ``rate`` images/s, at least ``floor``."""
    return max(math.ceil(rate * budget_s), floor)


def instance_count(config: model_config.ModelConfig) -> int:
    return queue_policy.instance_count(config)


def handover(config: model_config.ModelConfig, size: int) -> int:
    """What a step with queue ``size`` can complete at once: one batch per instance."""
    return instance_count(config) * min(config.max_batch_size, size)


def sizes_along(configs: dict[str, model_config.ModelConfig], rates: dict[str, dict], budget_s: float, exempt_core: bool) -> dict:
    """{model: (size, floor)} in step order: rate x budget, at least MIN_QUEUE_SIZE and the previous
    step's hand-over (except the core of a CPU variant, vision_serving.queue_policy)."""
    sizes: dict[str, tuple[int, int]] = {}
    previous: tuple[model_config.ModelConfig, int] | None = None
    for name, config in configs.items():
        floor = queue_policy.MIN_QUEUE_SIZE
        if previous is not None and not (exempt_core and name.endswith("_core")):
            floor = max(floor, handover(*previous))
        rate = rates.get(name, {}).get("rate")
        size = derived_size(rate, budget_s, floor) if rate else floor
        sizes[name] = (size, floor)
        previous = (config, size)
    return sizes


def composing_configs(pipeline: layout.Pipeline, config_name: str) -> dict[str, model_config.ModelConfig]:
    """The composing models in step order, as the server loads them with ``config_name``."""
    return {pipeline.model_name(role): model_config.load_config(pipeline.model_dir(role), config_name) for role in layout.ROLES}


def measure_rates(server: LocalTritonServer, pipeline: layout.Pipeline, payloads: list[bytes], args: argparse.Namespace) -> dict:
    configs = composing_configs(pipeline, server.config_name)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    window: dict[str, Any] = {}
    measured = loadgen.closed_loop(
        ensemble_sender(server.grpc_url, pipeline, payloads),
        args.concurrency,
        args.warmup,
        args.duration,
        on_window_start=lambda: window.update(before=batch_snapshot(client, list(configs))),
        on_window_end=lambda: window.update(after=batch_snapshot(client, list(configs))),
    )
    rates = service_rates(window["before"], window["after"], {name: instance_count(c) for name, c in configs.items()})
    budget_s = args.budget_ms / 1e3
    for name, (size, floor) in sizes_along(configs, rates, budget_s, exempt_core=True).items():
        if name in rates:
            rates[name].update(floor=floor, max_queue_size=size, max_batch_size=configs[name].max_batch_size)
    # Production (config.pbtxt: the TensorRT core on GPU) cannot be measured here: the CPU steps
    # keep their measured rates (the same code, at least as many cores), the GPU core is taken as
    # faster than its preprocessing, so its queue and the next are sized by the hand-over.
    production = composing_configs(pipeline, "")
    cpu_rates = {name: row for name, row in rates.items() if not name.endswith("_core")}
    sized = sizes_along(production, cpu_rates, budget_s, exempt_core=False)
    return {
        "ensemble": measured.as_dict(),
        "models": {name: rates[name] for name in configs if name in rates},
        # Preprocess and postprocess have one config for both: the larger of the two sizes.
        "production": {
            name: size if name.endswith("_core") else max(size, rates.get(name, {}).get("max_queue_size", 0))
            for name, (size, _) in sized.items()
        },
    }


def without_queue_policy(source: Path, destination: Path) -> Path:
    """A copy of the model repository whose models have no ``default_queue_policy`` (unbounded queues)."""
    loadgen.copy_repository(source, destination)
    for path in [*destination.glob("*/*/config.pbtxt"), *destination.glob("*/*/configs/*.pbtxt")]:
        config = model_config.parse_config_text(path.read_text(), str(path))
        if config.HasField("dynamic_batching"):
            config.dynamic_batching.ClearField("default_queue_policy")
            path.write_text(text_format.MessageToString(config))
    return destination


def overload(server: LocalTritonServer, pipeline: layout.Pipeline, payloads: list[bytes], concurrency: int, duration_s: float) -> dict:
    """``concurrency`` clients sending back to back for ``duration_s``: accepted and rejected requests apart."""
    configs = composing_configs(pipeline, server.config_name)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    before = batch_snapshot(client, list(configs))
    # error_pause_s: a rejected client pauses 50 ms before its next request, as a client backing off
    # would; without it the rejected threads would spin and take the CPUs from the server.
    generator = loadgen.LoadGenerator(concurrency=concurrency, make_sender=ensemble_sender(server.grpc_url, pipeline, payloads))
    generator.start()
    time.sleep(duration_s)
    report = generator.stop()
    after = batch_snapshot(client, list(configs))
    return overload_summary(report, {name: after[name]["succeeded"][0] - before[name]["succeeded"][0] for name in configs})


def overload_summary(report: loadgen.LoadReport, succeeded_by_model: dict[str, int]) -> dict:
    accepted = [o.latency_s for o in report.outcomes if o.ok]
    rejected = [o for o in report.outcomes if not o.ok]
    statuses: dict[str, int] = {}
    for outcome in rejected:
        status = (outcome.error or "").split(":", 1)[0]
        statuses[status] = statuses.get(status, 0) + 1
    accepted_ms = loadgen.percentiles(accepted)
    rejected_ms = loadgen.percentiles([o.latency_s for o in rejected])
    return {
        "requests": len(report.outcomes),
        "duration_s": round(report.duration_s, 1),
        "accepted_rps": round(len(accepted) / report.duration_s, 1),
        "accepted_p50_ms": _round(accepted_ms["p50_ms"]),
        "accepted_p99_ms": _round(accepted_ms["p99_ms"]),
        "accepted_max_ms": round(1e3 * max(accepted), 1) if accepted else None,
        "rejected_share": round(len(rejected) / len(report.outcomes), 3) if report.outcomes else None,
        "rejected_p50_ms": _round(rejected_ms["p50_ms"]),
        "rejected_p99_ms": _round(rejected_ms["p99_ms"]),
        "statuses": statuses,
        "error_samples": sorted({(o.error or "")[:200] for o in rejected})[:3],
        "succeeded_by_model": succeeded_by_model,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def render(result: dict[str, Any]) -> str:
    lines = [
        "# Queue sizes from measured service rates",
        f"Command: `{result['command']}`  ",
        f"Run: {result['created_at']}; {result['cpus']} CPUs; load average at start {result['load_average']}.  ",
        f"Service rates at closed-loop concurrency {result['concurrency']} ({result['duration_s']} s window), "
        f"model config `{result['config_name']}`; budget {result['budget_ms']} ms of queue wait per step.",
        "",
        "| model | instances | mean batch | execution ms | rate (img/s) | rate x budget | floor | max_queue_size |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in result["pipelines"].items():
        for model, rate in row["rates"]["models"].items():
            lines.append(
                f"| {model} | {rate['instances']} | {rate['mean_batch']} | {rate['execution_ms']} | {rate['rate']} | "
                f"{rate['rate'] * result['budget_ms'] / 1e3:.1f} | {rate['floor']} | **{rate['max_queue_size']}** |"
            )
        ensemble = row["rates"]["ensemble"]
        lines.append(f"| *{name} ensemble* | | | | {ensemble['throughput']:.1f} req/s | | | p99 {ensemble['p99_ms']:.0f} ms |")
    lines += [
        "",
        "Production (`config.pbtxt`, TensorRT core on GPU): "
        + "; ".join(f"{model} {size}" for row in result["pipelines"].values() for model, size in row["rates"]["production"].items()),
    ]
    if result.get("overload"):
        lines += [
            "",
            f"## Overload: {result['overload_concurrency']} clients for {result['overload_duration_s']} s (raw tritonclient, no retries)",
            "",
            "| pipeline | queues | accepted req/s | accepted p50 ms | accepted p99 ms | rejected share | rejected p99 ms | "
            "statuses | requests each step completed |",
            "|---|---|---:|---:|---:|---:|---:|---|---|",
        ]
        for name, runs in result["overload"].items():
            for kind, run in runs.items():
                lines.append(
                    f"| {name} | {kind} | {run['accepted_rps']} | {run['accepted_p50_ms']} | {run['accepted_p99_ms']} | "
                    f"{run['rejected_share']} | {run['rejected_p99_ms']} | {run['statuses']} | "
                    f"{' -> '.join(str(n) for n in run['succeeded_by_model'].values())} |"
                )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.queues", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipeline", action="append", help="only these pipelines (default: every one)")
    parser.add_argument("--budget-ms", type=float, default=250.0, help="queue wait allowed per step (default 250)")
    parser.add_argument("--concurrency", type=int, default=16, help="closed-loop clients while measuring rates")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measured window")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--config-name", default="cpu")
    parser.add_argument("--overload", type=int, default=0, help="also compare bounded and unbounded queues at this many clients")
    parser.add_argument("--overload-duration", type=float, default=20.0)
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    known = {p.name for p in layout.pipelines()}
    for name in args.pipeline or []:
        if name not in known:
            print(f"error: no pipeline {name!r} (known: {', '.join(sorted(known))})", file=sys.stderr)
            return 2
    chosen = [layout.pipeline(name) for name in args.pipeline] if args.pipeline else layout.pipelines()
    payloads = [p.data for p in images.jpeg_payloads()]
    result: dict[str, Any] = {
        "command": " ".join(["python -m benchmarks.queues", *(argv if argv is not None else sys.argv[1:])]),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "config_name": args.config_name,
        "concurrency": args.concurrency,
        "duration_s": args.duration,
        "budget_ms": args.budget_ms,
        "pipelines": {},
    }
    repositories = {"bounded": layout.MODEL_REPOSITORY}
    scratch = Path(tempfile.mkdtemp(prefix="queues-"))
    if args.overload:
        result.update(overload_concurrency=args.overload, overload_duration_s=args.overload_duration, overload={})
        repositories["unbounded"] = without_queue_policy(layout.MODEL_REPOSITORY, scratch / "model_repository")
    steps = tqdm(total=len(chosen) * (1 + (2 if args.overload else 0)), desc="queues", unit="run", file=sys.stderr)
    try:
        for kind, repository in repositories.items():
            server = LocalTritonServer(
                http_port=loadgen.free_port(),
                grpc_port=loadgen.free_port(),
                metrics_port=loadgen.free_port(),
                config_name=args.config_name,
                model_repository=repository,
                log_file=scratch / f"{kind}.log",
            )
            server.start()
            try:
                server.wait_ready()
                for pipeline in chosen:
                    if kind == "bounded":
                        steps.set_postfix_str(f"{pipeline.name}: service rates")
                        result["pipelines"][pipeline.name] = {"rates": measure_rates(server, pipeline, payloads, args)}
                        steps.update()
                    if args.overload:
                        steps.set_postfix_str(f"{pipeline.name}: overload, {kind}")
                        served = layout.pipeline(pipeline.name, repository)
                        run = overload(server, served, payloads, args.overload, args.overload_duration)
                        result["overload"].setdefault(pipeline.name, {})[kind] = run
                        steps.update()
            finally:
                server.stop()
    finally:
        steps.close()
        shutil.rmtree(scratch, ignore_errors=True)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "queues.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.output_dir / "queues.md").write_text(render(result))
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
