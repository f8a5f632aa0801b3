"""Benchmark the image_classifier ensemble against the in-process limit and a naive service, in one run.

    .venv/bin/python -m benchmarks.run [--quick] [--mixes web,phone,mix] [--concurrency 1,4,16] [--duration S]

Measured for each upload mix (benchmarks/images.py: web photos, 12 MP phone
photos, a mix with thumbnails), on the same real JPEG photos:

- inprocess: the in-process limit: decode (as served) + preprocess + core
  (onnxruntime FP32, the served session options) + top-k in this Python
  process, batched, no server; inprocess_reference: the same before reduced
  decoding (OpenCV full-size decode, batch 8, one thread per CPU: the issue's
  limit); inprocess_openvino: the same on OpenVINO (configs/cpu_openvino.pbtxt);
- single_request: one request at a time in-process, onnxruntime FP32 on two
  threads (the c=1 reference);
- ensemble_grpc (onnxruntime, the default cpu config) / ensemble_openvino (a
  second server with --model-config-name=cpu_openvino) / ensemble_http: a
  closed-loop concurrency sweep, with per-model batch size, queue and compute
  time from Triton's statistics API over each measurement window;
- naive: a FastAPI app (uvicorn, 1 worker) doing the same work per request,
  onnxruntime and OpenCV with their default thread settings (naive_openvino:
  the same on OpenVINO, compared with ensemble_openvino; naive_tuned: the
  same app with the served thread settings);
- core_grpc: the core model alone with preprocessed float tensors (transport
  vs compute);
- perf_analyzer: NVIDIA's load generator on the ensemble with the same JPEGs,
  as a cross-check of ours.

Concurrency levels are interleaved (for each level: every system), so slow
drift in background load on a shared machine hits all systems alike. A
Triton server is started on free ports unless --grpc-url/--http-url point at
one. Results: results.json, results.md and plot.png in --output
(benchmarks/results by default).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks import CLASSIFIER, cpu, images, pipeline, report, systems, triton_stats
from benchmarks import perf_analyzer as pa
from devtools import loadgen
from devtools.triton_server import BUILD_DIR, MODEL_REPOSITORY, LocalTritonServer

RESULTS_DIR = Path(__file__).resolve().parent / "results"
WORK_DIR = BUILD_DIR / "bench"
QUICK_DIR = WORK_DIR / "quick"
# Triton model names: the ensemble and its composing models (statistics are keyed by these).
STAT_MODELS = [CLASSIFIER.name, *(CLASSIFIER.model_name(role) for role in ("preprocess", "core", "postprocess"))]
ALL_SYSTEMS = (
    "inprocess",
    "inprocess_reference",
    "inprocess_openvino",
    "single_request",
    "ensemble_grpc",
    "ensemble_openvino",
    "ensemble_http",
    "naive",
    "naive_openvino",
    "naive_tuned",
    "core_grpc",
    "perf_analyzer",
)
NAIVE_SYSTEMS = ("naive", "naive_openvino", "naive_tuned")
OPENVINO_CONFIG = "cpu_openvino"  # OpenVINO at the served precision (FP32 for the classifier: docs/design.md)
REFERENCE_BATCH = 8  # the issue's in-process limit: batch 8, one worker per CPU


DEFAULT_SYSTEMS = tuple(name for name in ALL_SYSTEMS if name not in ("ensemble_http", "naive_tuned", "core_grpc"))


@dataclass
class Options:
    """Defaults: the full run (about 12 minutes on 2 CPUs): three upload mixes, three concurrency levels."""

    concurrencies: list[int] = field(default_factory=lambda: [1, 4, 16])
    duration_s: float = 6.0
    warmup_s: float = 2.0
    batch_sizes: list[int] = field(default_factory=lambda: [1, 8])
    inprocess_duration_s: float = 3.0
    # Concurrencies for the secondary systems (None: all of `concurrencies`).
    naive_concurrencies: list[int] | None = field(default_factory=lambda: [1, 16])
    http_concurrencies: list[int] | None = None
    core_concurrencies: list[int] | None = None
    naive_tuned_concurrencies: list[int] | None = field(default_factory=lambda: [4, 16])
    pa_concurrencies: list[int] | None = field(default_factory=lambda: [1, 16])
    pa_measurement_ms: int = 2500  # x 3 windows
    pa_max_trials: int = 3
    pa_mixes: tuple[str, ...] = ("web",)
    systems: tuple[str, ...] = DEFAULT_SYSTEMS
    mixes: tuple[str, ...] = ("web", "phone", "mix")
    sizes: tuple[int, ...] = images.SIZES
    quick: bool = False
    command: str = ""

    @classmethod
    def quick_mode(cls) -> Options:
        """Smoke run, about 3 minutes: two concurrencies, short windows, web and phone photos."""
        return cls(
            concurrencies=[1, 16],
            duration_s=2.5,
            warmup_s=1.0,
            batch_sizes=[8],
            inprocess_duration_s=1.5,
            http_concurrencies=[16],
            core_concurrencies=[16],
            naive_tuned_concurrencies=[16],
            pa_concurrencies=[16],
            pa_measurement_ms=1500,
            mixes=("web", "phone"),
            quick=True,
        )


def machine_description() -> dict:
    cpu_model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory_gib = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    from importlib import metadata

    import cv2
    import onnxruntime

    return {
        "cpu_model": cpu_model,
        "instruction_sets": cpu.machine()["instruction_sets"],
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gib": memory_gib,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "versions": {
            "numpy": np.__version__,
            "opencv": cv2.__version__,
            "onnxruntime": onnxruntime.__version__,
            "tritonclient": metadata.version("tritonclient"),
        },
    }


def _levels(requested: list[int] | None, concurrencies: list[int]) -> list[int]:
    if requested is None:
        return list(concurrencies)
    return [c for c in requested if c in concurrencies] or [max(concurrencies)]


def _log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def run_benchmark(options: Options, server, output_dir: Path | None = None, openvino_server=None, mix: str = images.DEFAULT_MIX) -> dict:
    """Measure every selected system on one upload mix; ``server`` (and ``openvino_server``, serving
    ``configs/cpu_openvino.pbtxt``, for ``ensemble_openvino``) has ``grpc_url``, ``http_url`` and ``model_repository``."""
    work_dir = Path(output_dir or WORK_DIR)
    work_dir.mkdir(parents=True, exist_ok=True)
    repository = Path(getattr(server, "model_repository", MODEL_REPOSITORY))
    started = time.time()
    load_start = os.getloadavg()
    payload_set = images.upload_mix(mix) if mix != "legacy" else images.jpeg_payloads(sizes=options.sizes)
    payloads = [p.data for p in payload_set]
    reference = pipeline.Pipeline(repository)
    post = reference.served.postprocessor
    top_k, num_classes = post.settings.default_k, post.settings.num_classes  # type: ignore[attr-defined]

    results: dict = {
        "schema": 1,
        "mix": mix,
        "command": options.command,
        "quick": options.quick,
        "started_at": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
        "machine": machine_description(),
        "load_average_start": [round(x, 2) for x in load_start],
        "settings": {
            "concurrencies": options.concurrencies,
            "duration_s": options.duration_s,
            "warmup_s": options.warmup_s,
            "inprocess_batch_sizes": options.batch_sizes,
            "inprocess_duration_s": options.inprocess_duration_s,
            "systems": list(options.systems),
            "request": "one image per request (BYTES [1, 1] for Triton, raw body for the naive service)",
        },
        "images": images.describe(payload_set),
        "model_configs": report.model_config_summary(repository),
        "inprocess": [],
        "systems": {},
        "skipped": {},
    }
    grpc_client = systems.grpcclient.InferenceServerClient(server.grpc_url)
    results["server"] = {"triton_version": grpc_client.get_server_metadata(as_json=True).get("version")}

    if "inprocess" in options.systems:
        _log(f"{mix}: in-process limit (served decoder, onnxruntime FP32), batch sizes {options.batch_sizes}")
        results["inprocess"] = pipeline.measure(repository, payloads, options.batch_sizes, options.inprocess_duration_s)
    if "inprocess_reference" in options.systems:
        _log(f"{mix}: in-process limit before reduced decoding (OpenCV full decode, onnxruntime FP32), batch {REFERENCE_BATCH}")
        results["inprocess_reference"] = pipeline.measure(
            repository, payloads, [REFERENCE_BATCH], options.inprocess_duration_s, modes=("parallel",), decode="opencv"
        )
    if "inprocess_openvino" in options.systems:
        _log(f"{mix}: in-process limit on OpenVINO ({OPENVINO_CONFIG}), batch {REFERENCE_BATCH}")
        results["inprocess_openvino"] = pipeline.measure(
            repository, payloads, [REFERENCE_BATCH], options.inprocess_duration_s, modes=("parallel",), core_config_name=OPENVINO_CONFIG
        )
    del reference

    naive_reason = systems.naive_service_available() if set(NAIVE_SYSTEMS) & set(options.systems) else None
    if naive_reason:
        for name in set(NAIVE_SYSTEMS) & set(options.systems):
            results["skipped"][name] = naive_reason
    if "ensemble_openvino" in options.systems and openvino_server is None:
        results["skipped"]["ensemble_openvino"] = "no server with --model-config-name=cpu_openvino was given"
    core_tensors = np.empty((0,), dtype=np.float32)
    if "core_grpc" in options.systems:
        core_tensors = pipeline.Pipeline(repository).core_batch(payloads[: min(8, len(payloads))])

    def wanted(name: str, levels: list[int] | None) -> list[int]:
        if name not in options.systems or name in results["skipped"]:
            return []
        return _levels(levels, options.concurrencies)

    plan = {
        "ensemble_grpc": wanted("ensemble_grpc", None),
        "ensemble_openvino": wanted("ensemble_openvino", None),
        "naive": wanted("naive", options.naive_concurrencies),
        "naive_openvino": wanted("naive_openvino", options.naive_concurrencies),
        "naive_tuned": wanted("naive_tuned", options.naive_tuned_concurrencies),
        "ensemble_http": wanted("ensemble_http", options.http_concurrencies),
        "core_grpc": wanted("core_grpc", options.core_concurrencies),
    }
    factories = {
        "ensemble_grpc": lambda: systems.ensemble_sender("grpc", server.grpc_url, payloads, top_k),
        "ensemble_http": lambda: systems.ensemble_sender("http", server.http_url, payloads, top_k),
        "core_grpc": lambda: systems.core_sender(server.grpc_url, core_tensors, num_classes),
    }
    if openvino_server is not None:
        factories["ensemble_openvino"] = lambda: systems.ensemble_sender("grpc", openvino_server.grpc_url, payloads, top_k)
    servers = {"ensemble_openvino": openvino_server}
    services = {
        name: systems.NaiveService(
            repository,
            work_dir / f"{name}_service.log",
            tuned=name == "naive_tuned",
            core_config=OPENVINO_CONFIG if name == "naive_openvino" else None,
        )
        for name in NAIVE_SYSTEMS
        if plan[name]
    }
    try:
        for name, service in services.items():
            _log(f"starting the {name} service (uvicorn, 1 worker)")
            service.start()
            factories[name] = functools.partial(systems.naive_sender, service.port, payloads, top_k)
        levels = sorted({c for wanted_levels in plan.values() for c in wanted_levels})
        if "single_request" in options.systems and 1 not in levels:
            levels.insert(0, 1)
        for concurrency in levels:
            if concurrency == 1 and "single_request" in options.systems:
                # Right before the c=1 rows, so that both see the same background load.
                _log(f"{mix}: one request at a time in-process (onnxruntime FP32, 2 threads)")
                results["single_request"] = pipeline.measure_single_request(repository, payloads, max(2.0, options.inprocess_duration_s))
            for name, wanted_levels in plan.items():
                if concurrency not in wanted_levels:
                    continue
                target = servers.get(name) or server
                window = triton_stats.WindowStats(target.grpc_url, STAT_MODELS) if name not in NAIVE_SYSTEMS else None
                usage = cpu.WindowCPU(_server_pid(services.get(name, target)))

                def window_start(window=window, usage=usage) -> None:
                    if window:
                        window.start()
                    usage.start()

                def window_end(window=window, usage=usage) -> None:
                    usage.end()
                    if window:
                        window.end()

                measured = loadgen.closed_loop(
                    factories[name](),
                    concurrency,
                    options.warmup_s,
                    options.duration_s,
                    on_window_start=window_start,
                    on_window_end=window_end,
                )
                if window:
                    measured.triton = window.result
                measured.add_cpu(usage.server_s, usage.client_s)
                row = measured.as_dict()
                results["systems"].setdefault(name, []).append(row)
                _log(
                    f"{mix}: {name:17s} c={concurrency:<3d} {row['throughput']:7.1f} req/s  "
                    f"p50 {row['p50_ms'] or 0:7.1f} ms  p99 {row['p99_ms'] or 0:7.1f} ms  errors {row['errors']}  "
                    f"server CPU {row.get('server_cpu_ms_per_request') or 0:5.1f} ms/req"
                    + (f"  core batch {window.result.get(systems.CORE, {}).get('avg_batch')}" if window else "")
                )
    finally:
        for service in services.values():
            service.stop()

    if "perf_analyzer" in options.systems and mix in options.pa_mixes:
        if pa.binary() is None:
            results["skipped"]["perf_analyzer"] = "perf_analyzer not found (tritonclient[all]==2.51.0 ships it)"
        else:
            data_file = pa.write_input_data(payloads, work_dir / "perf_analyzer_input.json")
            rows = []
            for concurrency in _levels(options.pa_concurrencies, options.concurrencies):
                _log(f"{mix}: perf_analyzer c={concurrency}")
                row = pa.measure(
                    server.grpc_url,
                    systems.ENSEMBLE,
                    data_file,
                    concurrency,
                    options.pa_measurement_ms,
                    work_dir,
                    max_trials=options.pa_max_trials,
                )
                rows.append(row)
                _log(f"perf_analyzer c={concurrency}: {row.get('throughput')} infer/s, p99 {row.get('p99_ms')} ms {row.get('error', '')}")
            results["systems"]["perf_analyzer"] = rows

    if "inprocess" in options.systems and results["inprocess"]:
        # The limit again at the end: drift in background load shows as a difference.
        best = max(results["inprocess"], key=lambda row: row["throughput"])
        _log(f"{mix}: in-process limit again ({best['mode']}, batch {best['batch_size']})")
        results["inprocess_end"] = pipeline.measure_again(repository, payloads, best, options.inprocess_duration_s)
    if results.get("inprocess_reference"):
        # And the issue's limit again: the targets take the higher of the two (the conservative ratio).
        _log(f"{mix}: in-process limit before reduced decoding, again")
        results["inprocess_reference"] += pipeline.measure(
            repository, payloads, [REFERENCE_BATCH], options.inprocess_duration_s, modes=("parallel",), decode="opencv"
        )

    results["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    results["elapsed_s"] = round(time.time() - started, 1)
    results["targets"] = report.targets(results)
    return results


def _server_pid(server) -> int | None:
    process = getattr(server, "process", None)
    return process.pid if process is not None else None


def _int_list(text: str) -> list[int]:
    try:
        values = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(value < 1 for value in values):
        raise argparse.ArgumentTypeError("values must be positive integers")
    return values


def parse_args(argv: list[str] | None) -> tuple[Options, argparse.Namespace]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run (< 90 s): concurrency 1 and 16, short windows")
    parser.add_argument("--concurrency", type=_int_list, help="closed-loop concurrency levels (default 1,2,4,8,16,32)")
    parser.add_argument("--duration", type=float, help="measurement window per level, seconds (default 10; quick 2.5)")
    parser.add_argument("--warmup", type=float, help="warm-up before each window, seconds (default 3; quick 1)")
    parser.add_argument("--batch-sizes", type=_int_list, help="in-process batch sizes (default 1,8,16,32)")
    parser.add_argument(
        "--systems", help=f"comma-separated subset of {','.join(ALL_SYSTEMS)} (default: all but ensemble_http, naive_tuned, core_grpc)"
    )
    parser.add_argument(
        "--mixes", help=f"comma-separated upload mixes, of {','.join(images.MIXES)} (default web,phone,mix; benchmarks/images.py)"
    )
    parser.add_argument(
        "--output",
        type=Path,
        help=f"where results.{{json,md}} and plot.png go (default {RESULTS_DIR.relative_to(RESULTS_DIR.parent.parent)}; "
        f"--quick: {QUICK_DIR.relative_to(RESULTS_DIR.parent.parent)}, so a smoke run never replaces the committed results)",
    )
    parser.add_argument("--model-repository", type=Path, default=MODEL_REPOSITORY, help="model repository to serve")
    parser.add_argument("--grpc-url", help="benchmark a running server (HOST:PORT) instead of starting one")
    parser.add_argument("--http-url", help="its HTTP endpoint (with --grpc-url)")
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="measure nothing: rewrite results.md and plot.png from the results.json in --output",
    )
    args = parser.parse_args(argv)
    options = Options.quick_mode() if args.quick else Options()
    if args.concurrency:
        options.concurrencies = args.concurrency
        for attribute in (
            "naive_concurrencies",
            "http_concurrencies",
            "core_concurrencies",
            "naive_tuned_concurrencies",
            "pa_concurrencies",
        ):
            wanted = getattr(options, attribute)
            if wanted is not None:
                setattr(options, attribute, [c for c in wanted if c in args.concurrency] or [max(args.concurrency)])
    if args.duration:
        options.duration_s = args.duration
        options.pa_measurement_ms = max(1000, int(args.duration * 1000 / 2.5))
    if args.warmup is not None:
        options.warmup_s = args.warmup
    if args.batch_sizes:
        options.batch_sizes = args.batch_sizes
    if args.systems:
        chosen = tuple(item.strip() for item in args.systems.split(",") if item.strip())
        unknown = set(chosen) - set(ALL_SYSTEMS)
        if unknown:
            parser.error(f"unknown systems {sorted(unknown)}; known: {', '.join(ALL_SYSTEMS)}")
        options.systems = chosen
    if args.mixes:
        chosen = tuple(item.strip() for item in args.mixes.split(",") if item.strip())
        unknown = set(chosen) - set(images.MIXES)
        if unknown:
            parser.error(f"unknown mixes {sorted(unknown)}; known: {', '.join(images.MIXES)}")
        options.mixes = chosen
    if bool(args.grpc_url) != bool(args.http_url):
        parser.error("--grpc-url and --http-url go together")
    if args.output is None:
        args.output = QUICK_DIR if args.quick else RESULTS_DIR
    options.command = shlex.join([".venv/bin/python", "-m", "benchmarks.run", *(sys.argv[1:] if argv is None else argv)])
    return options, args


@dataclass
class _RunningServer:
    grpc_url: str
    http_url: str
    model_repository: Path


def _status_bytes(pid: int, field: str) -> int | None:
    """A memory field of /proc/PID/status (VmRSS, VmHWM: peak RSS) in bytes."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def memory_per_instance(server: LocalTritonServer) -> dict:
    """RSS now and at its peak of tritonserver and each Python-backend stub (one per model instance), MiB."""
    if server.process is None:
        return {}
    pid = server.process.pid

    def entry(process: int) -> dict:
        return {key: round((_status_bytes(process, field) or 0) / 2**20, 1) for key, field in (("rss_mib", "VmRSS"), ("peak_mib", "VmHWM"))}

    return {"tritonserver": entry(pid), "instances": {name: entry(stub) for name, stub in sorted(loadgen.stub_processes(pid).items())}}


def _start_server(repository: Path, config_name: str, name: str) -> LocalTritonServer:
    log_file = WORK_DIR / f"tritonserver{name}.log"
    log_file.write_bytes(b"")
    server = LocalTritonServer(
        http_port=systems.free_port(),
        grpc_port=systems.free_port(),
        metrics_port=systems.free_port(),
        model_repository=repository,
        log_file=log_file,
        config_name=config_name,
    )
    _log(f"starting tritonserver (model config {config_name})")
    server.start()
    return server


def main(argv: list[str] | None = None) -> int:
    options, args = parse_args(argv)
    if args.render_only:
        results = json.loads((args.output / "results.json").read_text())
        if "runs" in results:  # targets from the measurements, as the current report defines them
            results["targets"] = report.issue_targets(results)
            (args.output / "results.json").write_text(json.dumps(results, indent=2) + "\n")
        (args.output / "results.md").write_text(report.markdown(results))
        report.plot(results, args.output / "plot.png")
        _log(f"rewrote {args.output}/results.md and plot.png")
        return 0
    _log(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    started = time.time()
    servers: list[LocalTritonServer] = []
    target: LocalTritonServer | _RunningServer
    openvino: LocalTritonServer | None = None
    runs: dict[str, dict] = {}
    memory: dict[str, dict] = {}
    try:
        if args.grpc_url:
            target = _RunningServer(args.grpc_url, args.http_url, args.model_repository.resolve())
        else:
            from devtools.triton_server import DEFAULT_CONFIG_NAME, build_artifacts

            if args.model_repository.resolve() == MODEL_REPOSITORY.resolve():
                build_artifacts()
                if "ensemble_openvino" in options.systems:
                    build_artifacts(OPENVINO_CONFIG)
            WORK_DIR.mkdir(parents=True, exist_ok=True)
            target = _start_server(args.model_repository.resolve(), DEFAULT_CONFIG_NAME, "")
            servers.append(target)
            if "ensemble_openvino" in options.systems:
                openvino = _start_server(args.model_repository.resolve(), OPENVINO_CONFIG, "_openvino")
                servers.append(openvino)
            for server in servers:
                server.wait_ready(timeout_s=240)
        for mix in options.mixes:
            runs[mix] = run_benchmark(options, target, openvino_server=openvino, mix=mix)
        memory = {config: memory_per_instance(server) for config, server in zip(("cpu", OPENVINO_CONFIG), servers, strict=False)}
    finally:
        for server in servers:
            server.stop()
    results = {
        "schema": 2,
        "command": options.command,
        "quick": options.quick,
        "started_at": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
        "elapsed_s": round(time.time() - started, 1),
        "runs": runs,
        "memory": memory,
    }
    results["targets"] = report.issue_targets(results)
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.output / "results.md").write_text(report.markdown(results))
    plot = report.plot(results, args.output / "plot.png")
    _log(f"results in {args.output}/ (results.md, results.json{', plot.png' if plot else ''}) after {results['elapsed_s']:.0f} s")
    print(report.summary(results))
    return 0 if results["targets"]["no_errors"]["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
