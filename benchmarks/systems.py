"""End-to-end systems per upload mix: the served ensembles against the in-process limit and a naive service.

    .venv/bin/python -m benchmarks.systems [--quick] [--pipelines image_classifier | all | NAME,...]
        [--mixes web,phone,mix] [--systems NAME,...] [--concurrency 1,4,16] [--duration S] [--warmup S]
        [--service-rates [--budget-ms 250]] [--output DIR] [--render-only]

For each upload mix (``benchmarks/images.py``: web photos, 12 MP phone photos, a mix with
thumbnails) and each pipeline, on the same real JPEG photos, one image per request:

- ``inprocess``: the in-process limit, the served computation in this process with no server
  (``benchmarks.inprocess``: decode, preprocess, the served core config, postprocess), batched, in
  each of ``--inprocess-modes``; ``inprocess_reference``: the same before reduced decoding (FP32
  onnxruntime, OpenCV's full-size decode, batch 8, one thread per CPU); ``inprocess_openvino``:
  the core on OpenVINO (``configs/cpu_openvino.pbtxt``);
- ``single_request``: one request at a time in-process, FP32 onnxruntime on two threads (the c=1 reference);
- ``ensemble_grpc`` (the served ``cpu`` config) / ``ensemble_openvino`` (a second server with
  ``--model-config-name=cpu_openvino``) / ``ensemble_http``: a closed-loop concurrency sweep, with
  each step's batch size, queue and compute time from Triton's statistics over each window;
- ``naive``: a FastAPI app (uvicorn, 1 worker, ``benchmarks/naive_service.py``) doing the same work
  per request with the libraries' default thread settings (``naive_openvino``: on OpenVINO;
  ``naive_tuned``: with the served thread settings);
- ``core_grpc``: the core model alone with preprocessed tensors (transport vs compute);
- ``perf_analyzer``: NVIDIA's load generator on the ensemble with the same JPEGs, as a cross-check.

``--service-rates``: each composing model's service rate over the ensemble's window at the highest
concurrency, and the queue sizes it implies (``benchmarks/queue_sizes.py``).

Concurrency levels are interleaved (for each level: every system), so slow drift in background load
on a shared machine hits all systems alike; the in-process limits are measured again at the end.
A Triton server is started on free ports unless ``--grpc-url``/``--http-url`` point at one.
Results: ``systems.json``, ``systems.md`` and ``systems.png`` (latency vs throughput) in ``--output``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import CLASSIFIER, cpu, images, inprocess, queue_sizes, report, senders, targets, triton_stats
from benchmarks import perf_analyzer as pa
from devtools import loadgen
from devtools.triton_server import BUILD_DIR, DEFAULT_CONFIG_NAME, MODEL_REPOSITORY, LocalTritonServer
from vision_serving import layout, model_config, queue_policy

BENCHMARK = "systems"
WORK_DIR = BUILD_DIR / "bench"
QUICK_DIR = WORK_DIR / "quick"
INPROCESS_SYSTEMS = ("inprocess", "inprocess_reference", "inprocess_openvino", "single_request")
SWEPT_SYSTEMS = ("ensemble_grpc", "ensemble_openvino", "naive", "naive_openvino", "naive_tuned", "ensemble_http", "core_grpc")
NAIVE_SYSTEMS = ("naive", "naive_openvino", "naive_tuned")
ALL_SYSTEMS = (*INPROCESS_SYSTEMS, *SWEPT_SYSTEMS, "perf_analyzer")
DEFAULT_SYSTEMS = tuple(name for name in ALL_SYSTEMS if name not in ("ensemble_http", "naive_tuned", "core_grpc"))
OPENVINO_CONFIG = "cpu_openvino"  # OpenVINO at the served precision (FP32 for the classifier: docs/design.md)
REFERENCE_BATCH = 8  # the limit before reduced decoding: batch 8, one thread per CPU


@dataclass
class Options:
    """Defaults: the full run of the classifier (about 9 minutes on 2 CPUs): three upload mixes, three concurrencies."""

    pipelines: tuple[str, ...] = (CLASSIFIER.name,)
    mixes: tuple[str, ...] = ("web", "phone", "mix")
    systems: tuple[str, ...] = DEFAULT_SYSTEMS
    concurrencies: list[int] = field(default_factory=lambda: [1, 4, 16])
    duration_s: float = 6.0
    warmup_s: float = 2.0
    batch_sizes: list[int] = field(default_factory=lambda: [1, 8])
    inprocess_modes: tuple[str, ...] = ("sequential", "pipelined", "threads")
    inprocess_duration_s: float = 3.0
    # Concurrencies of the secondary systems (None: all of `concurrencies`).
    levels: dict[str, list[int] | None] = field(
        default_factory=lambda: {"naive": [1, 4, 16], "naive_openvino": [1, 16], "naive_tuned": [4, 16], "perf_analyzer": [1, 16]}
    )
    pa_measurement_ms: int = 2500  # x 3 windows
    pa_max_trials: int = 3
    pa_mixes: tuple[str, ...] = ("web",)
    service_rates: bool = False
    budget_ms: float = 250.0
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
            levels={name: [16] for name in ("naive_tuned", "ensemble_http", "core_grpc", "perf_analyzer")},
            pa_measurement_ms=1500,
            mixes=("web", "phone"),
            quick=True,
        )

    def levels_of(self, system: str) -> list[int]:
        requested = self.levels.get(system)
        if requested is None:
            return list(self.concurrencies)
        return [c for c in requested if c in self.concurrencies] or [max(self.concurrencies)]


@dataclass
class Servers:
    """The server of the served configs (``main``) and, for ``ensemble_openvino``, one serving ``cpu_openvino``.
    Each has ``grpc_url``, ``http_url``, ``model_repository`` and, when started here, ``process``."""

    main: Any
    openvino: Any = None


def declare_tables(result: dict[str, Any]) -> None:
    report.table(result, "checks", "Targets", {"description": "target", "value": "value", "detail": "detail", "met": "met"})
    report.table(
        result,
        "throughput",
        "Throughput and latency",
        {"mix": "mix", "pipeline": "pipeline", "system": "system", "concurrency": "c", "throughput": "req/s", "p50_ms": "p50 ms"}
        | {"p95_ms": "p95 ms", "p99_ms": "p99 ms", "errors": "errors"}
        | {"server_cpu_ms_per_request": "server CPU ms/req", "client_cpu_ms_per_request": "client CPU ms/req"},
        "Closed loop: each of c workers keeps one request in flight; throughput counts the requests completed in the window. "
        "server CPU ms/req: user + system CPU time of the server's process tree (tritonserver and its Python-backend stubs; "
        "the uvicorn process) per request over the window: steadier than throughput on a shared machine; on an idle one "
        "throughput is bounded by CPUs x 1000 / (server + client CPU ms/req).",
    )
    report.table(
        result,
        "inprocess",
        "In-process (one Python process, no server)",
        {"mix": "mix", "pipeline": "pipeline", "system": "system", "when": "when", "mode": "mode", "batch_size": "batch"}
        | {"throughput": "img/s", "batch_ms_p50": "batch p50 ms", "cpu_ms_per_image": "CPU ms/img"},
        "The best row of a system is its limit; each limit is measured again at the end of the mix (when: end), "
        "so drift in background load shows as a difference.",
    )
    report.table(
        result,
        "steps",
        "Ensemble per step (Triton statistics over each window)",
        {"mix": "mix", "pipeline": "pipeline", "system": "system", "concurrency": "c", "step": "step", "avg_batch": "batch"}
        | {
            "items_per_s": "items/s",
            "queue_ms": "queue ms",
            "in_out_ms": "in+out ms",
            "execute_ms": "execute ms",
            "request_ms": "server ms/request",
        },
        "Means per request: batch = items per execution; items/s = images (a second stage: crops) it ran per second; "
        "queue = wait in the model's dynamic-batching queue; in+out = the "
        "Python backend moving tensors in and out of the stub; execute = the model's execute() (compute_infer); server "
        "ms/request = the step's (or the whole ensemble's) server-side time.",
    )
    report.table(
        result,
        "service_rates",
        "Service rates and the queue sizes they imply (--service-rates)",
        {"mix": "mix", "pipeline": "pipeline", "model": "model", "instances": "instances", "mean_batch": "mean batch"}
        | {"execution_ms": "execution ms"}
        | {"rate": "rate (img/s)", "rate_x_budget": "rate x budget", "floor": "floor", "max_queue_size": "max_queue_size (cpu)"}
        | {"production_max_queue_size": "max_queue_size (config.pbtxt)"},
        "rate = instances x images / busy time over the ensemble's window at the highest concurrency; a queue of "
        "rate x budget drains within the budget (benchmarks/queue_sizes.py).",
    )
    report.table(
        result,
        "memory",
        "Memory per model instance (after the last mix)",
        {"server": "server (core config)", "process": "process", "rss_mib": "RSS MiB", "peak_mib": "peak RSS MiB"},
    )
    report.table(result, "configs", "Served configuration", {"pipeline": "pipeline", "model": "model", "settings": "settings"})
    report.table(result, "skipped", "Skipped", {"mix": "mix", "pipeline": "pipeline", "system": "system", "reason": "reason"})


class MixRun:
    """One upload mix of one pipeline: every selected system, concurrency levels interleaved."""

    def __init__(self, result: dict[str, Any], options: Options, servers: Servers, pipeline: layout.Pipeline, mix: str, work_dir: Path):
        self.result, self.options, self.servers, self.mix, self.work_dir = result, options, servers, mix, work_dir
        self.pipeline = pipeline
        self.payloads = [p.data for p in images.upload_mix(mix)]
        self.models = [pipeline.name, *(pipeline.model_name(role) for role in layout.ROLES)]
        # Second stages (models the postprocess calls by BLS): their steps' statistics too.
        self.stages = sorted(p.name for p in pipeline.repository.iterdir() if (p / "config.pbtxt").is_file() and p.name not in self.models)
        self.windows: dict[tuple[str, int], dict] = {}
        self.skipped: dict[str, str] = {}
        if set(NAIVE_SYSTEMS) & set(options.systems) and (reason := senders.naive_service_available()):
            self.skipped.update(dict.fromkeys(NAIVE_SYSTEMS, reason))
        if servers.openvino is None:
            self.skipped["ensemble_openvino"] = f"no server with --model-config-name={OPENVINO_CONFIG} was given"
        if pa.binary() is None:
            self.skipped["perf_analyzer"] = "perf_analyzer not found (tritonclient[all]==2.51.0 ships it)"

    def log(self, message: str) -> None:
        report.log(BENCHMARK, f"{self.mix}, {self.pipeline.name}: {message}")

    def wanted(self, system: str) -> bool:
        return system in self.options.systems and system not in self.skipped

    def run(self) -> None:
        for system in self.options.systems:
            if system in self.skipped:
                report.add(self.result, "skipped", mix=self.mix, pipeline=self.pipeline.name, system=system, reason=self.skipped[system])
        self.inprocess_limits()
        self.sweep()
        if self.wanted("perf_analyzer") and self.mix in self.options.pa_mixes:
            self.perf_analyzer()
        self.inprocess_limits(when="end")
        if self.options.service_rates:
            self.service_rates()

    # ---- in-process

    def inprocess_limits(self, when: str = "start") -> None:
        """The in-process limits (at the end: the best mode and batch size again, drift in background load shows)."""
        variants = {
            "inprocess": (inprocess.SERVED, self.options.batch_sizes, self.options.inprocess_modes),
            "inprocess_reference": (inprocess.BEFORE_REDUCED_DECODING, [REFERENCE_BATCH], ("threads",)),
            "inprocess_openvino": (inprocess.Variant(core_config=OPENVINO_CONFIG), [REFERENCE_BATCH], ("threads",)),
        }
        for system, (variant, sizes, modes) in variants.items():
            if not self.wanted(system):
                continue
            if when == "end":
                earlier = report.rows(self.result, "inprocess", mix=self.mix, pipeline=self.pipeline.name, system=system)
                best = max(earlier, key=lambda r: r["throughput"])
                sizes, modes = [best["batch_size"]], (best["mode"].split()[0],)
            self.log(f"{system} ({when}): batch sizes {sizes}, modes {', '.join(modes)}")
            for row in inprocess.limit(self.pipeline, self.payloads, sizes, self.options.inprocess_duration_s, modes, variant):
                report.add(self.result, "inprocess", mix=self.mix, pipeline=self.pipeline.name, system=system, when=when, **row)

    def single_request(self) -> None:
        self.log("one request at a time in-process (FP32 onnxruntime, 2 threads)")
        row = inprocess.single_request(self.pipeline, self.payloads, max(2.0, self.options.inprocess_duration_s))
        report.add(self.result, "inprocess", mix=self.mix, pipeline=self.pipeline.name, system="single_request", when="start", **row)

    # ---- the sweep

    def sweep(self) -> None:
        """Every swept system at each of its levels, levels interleaved; single_request right before the c=1 rows."""
        plan = {name: self.options.levels_of(name) for name in SWEPT_SYSTEMS if self.wanted(name)}
        single = self.wanted("single_request")
        levels = sorted({c for wanted in plan.values() for c in wanted} | ({1} if single else set()))
        with self.naive_services(plan) as services:
            factories = self.factories(plan, services)
            for concurrency in levels:
                if concurrency == 1 and single:
                    self.single_request()  # right before the c=1 rows: both see the same background load
                for name, wanted in plan.items():
                    if concurrency in wanted:
                        service = services.get(name)
                        target = self.servers.openvino if name == "ensemble_openvino" else self.servers.main
                        self.window(name, factories[name], concurrency, service or target)

    @contextlib.contextmanager
    def naive_services(self, plan: dict[str, list[int]]) -> Iterator[dict[str, senders.NaiveService]]:
        services = {
            name: senders.NaiveService(
                self.pipeline,
                self.work_dir / f"{name}_{self.pipeline.name}.log",
                tuned=name == "naive_tuned",
                core_config=OPENVINO_CONFIG if name == "naive_openvino" else None,
            )
            for name in NAIVE_SYSTEMS
            if name in plan
        }
        try:
            for name, service in services.items():
                self.log(f"starting the {name} service (uvicorn, 1 worker)")
                service.start()
            yield services
        finally:
            for service in services.values():
                service.stop()

    def factories(self, plan: dict[str, list[int]], services: dict[str, senders.NaiveService]) -> dict[str, loadgen.SenderFactory]:
        main, pipeline, payloads = self.servers.main, self.pipeline, self.payloads
        found = {name: senders.naive_sender(service.port, pipeline, payloads) for name, service in services.items()}
        found["ensemble_grpc"] = senders.ensemble_sender(main.grpc_url, pipeline, payloads)
        found["ensemble_http"] = senders.ensemble_sender(main.http_url, pipeline, payloads, protocol="http")
        if self.servers.openvino is not None:
            found["ensemble_openvino"] = senders.ensemble_sender(self.servers.openvino.grpc_url, pipeline, payloads)
        if "core_grpc" in plan:
            feeds = inprocess.core_input(inprocess.load(pipeline), payloads[:8])
            found["core_grpc"] = senders.core_sender(main.grpc_url, pipeline, feeds)
        return found

    def window(self, name: str, factory: loadgen.SenderFactory, concurrency: int, target: Any) -> None:
        """One measured window: throughput and latency, CPU per request and (on Triton) each step's statistics."""
        stats = triton_stats.WindowStats(target.grpc_url, [*self.models, *self.stages]) if name not in NAIVE_SYSTEMS else None
        process = getattr(target, "process", None)
        usage = cpu.WindowCPU(process.pid if process is not None else None)

        def window_start() -> None:
            if stats:
                stats.start()
            usage.start()

        def window_end() -> None:
            usage.end()
            if stats:
                stats.end()

        options = self.options
        measured = loadgen.closed_loop(factory, concurrency, options.warmup_s, options.duration_s, window_start, window_end)
        measured.add_cpu(usage.server_s, usage.client_s)
        row = report.add(self.result, "throughput", mix=self.mix, pipeline=self.pipeline.name, system=name, **measured.as_dict())
        if stats:
            self.windows[name, concurrency] = stats.result
            self.step_rows(name, concurrency, stats.result)
        core = (stats.result if stats else {}).get(self.pipeline.model_name("core"), {})
        self.log(
            f"{name:17s} c={concurrency:<3d} {row['throughput']:7.1f} req/s  p50 {row['p50_ms'] or 0:7.1f} ms  "
            f"p99 {row['p99_ms'] or 0:7.1f} ms  errors {row['errors']}  server CPU {row.get('server_cpu_ms_per_request') or 0:5.1f} ms/req"
            + (f"  core batch {core.get('avg_batch')}" if stats else "")
        )

    def step_rows(self, system: str, concurrency: int, stats: dict[str, dict]) -> None:
        prefix = f"{self.pipeline.name}_core_"
        steps = [*zip(("ensemble", *layout.ROLES), self.models, strict=True), *((name.removeprefix(prefix), name) for name in self.stages)]
        for step, model in steps:
            entry = stats.get(model)
            if not entry or not entry.get("requests"):
                continue
            in_out = None if step == "ensemble" else (entry.get("compute_input_ms") or 0.0) + (entry.get("compute_output_ms") or 0.0)
            report.add(
                self.result,
                "steps",
                mix=self.mix,
                pipeline=self.pipeline.name,
                system=system,
                concurrency=concurrency,
                step=step,
                avg_batch=None if step == "ensemble" else entry.get("avg_batch"),
                items_per_s=round(entry.get("items", 0) / self.options.duration_s, 2),
                queue_ms=None if step == "ensemble" else entry.get("queue_ms"),
                in_out_ms=in_out,
                execute_ms=None if step == "ensemble" else entry.get("compute_infer_ms"),
                request_ms=entry.get("request_ms"),
            )

    # ---- perf_analyzer and service rates

    def perf_analyzer(self) -> None:
        image_name = model_config.image_input_name(model_config.load_config(self.pipeline.ensemble_dir))
        data_file = pa.write_input_data(self.payloads, self.work_dir / f"perf_analyzer_{self.pipeline.name}.json", image_name)
        for concurrency in self.options.levels_of("perf_analyzer"):
            self.log(f"perf_analyzer c={concurrency}")
            row = pa.measure(
                self.servers.main.grpc_url,
                self.pipeline.name,
                data_file,
                concurrency,
                self.options.pa_measurement_ms,
                self.work_dir,
                max_trials=self.options.pa_max_trials,
                input_name=image_name,
            )
            report.add(self.result, "throughput", mix=self.mix, pipeline=self.pipeline.name, system="perf_analyzer", **row)

    def service_rates(self) -> None:
        """Each composing model's service rate over the ensemble's window at the highest concurrency, and its queue sizes."""
        measured = sorted(c for name, c in self.windows if name == "ensemble_grpc")
        if not measured:
            return
        server = self.servers.main
        config_name = getattr(server, "config_name", DEFAULT_CONFIG_NAME)
        layouts = getattr(server, "step_layouts", {}) or {}
        configs = queue_sizes.composing_configs(self.pipeline, config_name)
        instances = {
            name: layouts[name].instances if name in layouts else queue_policy.instance_count(config) for name, config in configs.items()
        }
        window = self.windows["ensemble_grpc", measured[-1]]
        for row in queue_sizes.sized_rows(self.pipeline, config_name, window, instances, self.options.budget_ms / 1e3):
            report.add(self.result, "service_rates", mix=self.mix, **row)


def config_summary(pipeline: layout.Pipeline) -> list[dict[str, Any]]:
    """The knobs that matter for speed, as served (the core: configs/cpu.pbtxt), one row per model."""
    found = []
    for folder, variant in [
        (pipeline.model_dir("preprocess"), None),
        (pipeline.core_dir, "cpu"),
        (pipeline.model_dir("postprocess"), None),
        (pipeline.ensemble_dir, None),
    ]:
        config = model_config.load_config(folder, variant)
        entry: dict[str, Any] = {"max_batch_size": config.max_batch_size}
        if config.HasField("dynamic_batching"):
            entry["max_queue_delay_us"] = config.dynamic_batching.max_queue_delay_microseconds
            entry["preferred_batch_size"] = list(config.dynamic_batching.preferred_batch_size)
        if config.instance_group:
            entry["instances"] = sum(int(group.count or 1) for group in config.instance_group)
        entry |= {key: value.string_value for key, value in config.parameters.items() if "thread" in key or "spin" in key}
        found.append({"pipeline": pipeline.name, "model": folder.name, "settings": entry})
    return found


def memory_rows(name: str, server: Any) -> list[dict[str, Any]]:
    """RSS now and at its peak (VmHWM) of tritonserver and each Python-backend stub (one per model instance), MiB."""
    process = getattr(server, "process", None)
    if process is None:
        return []

    def entry(pid: int) -> dict[str, float]:
        fields = {}
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    fields[key] = round(int(value.split()[0]) / 1024, 1)
        except OSError:
            pass
        return {"rss_mib": fields.get("VmRSS"), "peak_mib": fields.get("VmHWM")}

    stubs = sorted(loadgen.stub_processes(process.pid).items())
    return [{"server": name, "process": "tritonserver", **entry(process.pid)}] + [
        {"server": name, "process": stub, **entry(pid)} for stub, pid in stubs
    ]


def measure(options: Options, servers: Servers, work_dir: Path = WORK_DIR) -> dict[str, Any]:
    """Every mix of every pipeline; the result (report format) with its targets."""
    work_dir.mkdir(parents=True, exist_ok=True)
    settings = {
        key: getattr(options, key)
        for key in ("pipelines", "mixes", "systems", "concurrencies", "duration_s", "warmup_s", "batch_sizes", "inprocess_modes")
    }
    settings |= {"inprocess_duration_s": options.inprocess_duration_s, "levels": options.levels, "quick": options.quick}
    result = report.new(BENCHMARK, "Systems: the served ensembles vs the in-process limit and a naive service", options.command, settings)
    result["notes"].append(
        "Requests: one image per request (BYTES [1, 1] for Triton, the raw body for the naive service), closed loop, "
        f"{options.warmup_s} s warm-up, then a {options.duration_s} s window per level; levels interleaved across systems. "
        "Photos: the real photos of scikit-image as JPEG quality 90; 12 MP phone photos are those photos upscaled to "
        "4000 x 3000 with mild sensor-like noise (2.5–4 MB), every other one stored sideways with EXIF orientation 6 "
        "(benchmarks/images.py). A shared machine: compare systems within this run, as ratios."
        + (" Quick mode: smoke numbers only." if options.quick else "")
    )
    declare_tables(result)
    pipelines = [layout.pipeline(name, Path(servers.main.model_repository)) for name in options.pipelines]
    for mix in options.mixes:
        for pipeline in pipelines:
            MixRun(result, options, servers, pipeline, mix, work_dir).run()
    for name, server in (("cpu", servers.main), (OPENVINO_CONFIG, servers.openvino)):
        for row in memory_rows(name, server):
            report.add(result, "memory", **row)
    for pipeline in pipelines:
        for row in config_summary(pipeline):
            report.add(result, "configs", **row)
    for check in targets.checks(result["rows"]):
        report.add(result, "checks", **check)
    return report.finish(result)


# ---------------------------------------------------------------------------- the command line


def parse_args(argv: list[str] | None) -> tuple[Options, argparse.Namespace]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.systems", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run (about 3 minutes): concurrency 1 and 16, short windows")
    parser.add_argument("--pipelines", help=f"comma-separated pipelines, or all (default {CLASSIFIER.name})")
    parser.add_argument("--mixes", type=report.names(images.MIXES, "mixes"), help="upload mixes (default web,phone,mix)")
    parser.add_argument(
        "--systems", type=report.names(ALL_SYSTEMS, "systems"), help="default: all but ensemble_http, naive_tuned, core_grpc"
    )
    parser.add_argument("--concurrency", type=report.int_list, help="closed-loop concurrency levels (default 1,4,16; quick 1,16)")
    parser.add_argument("--duration", type=float, help="measurement window per level, seconds (default 6; quick 2.5)")
    parser.add_argument("--warmup", type=float, help="warm-up before each window, seconds (default 2; quick 1)")
    parser.add_argument("--batch-sizes", type=report.int_list, help="in-process batch sizes (default 1,8)")
    parser.add_argument("--inprocess-modes", type=report.names(inprocess.MODES, "modes"), help="default sequential,pipelined,threads")
    parser.add_argument("--inprocess-duration", type=float, help="seconds per in-process row (default 3; quick 1.5)")
    parser.add_argument("--service-rates", action="store_true", help="also each step's service rate and the queue sizes it implies")
    parser.add_argument("--budget-ms", type=float, default=250.0, help="--service-rates: queue wait allowed per step (default 250)")
    parser.add_argument("--model-repository", type=Path, default=MODEL_REPOSITORY, help="model repository to serve")
    parser.add_argument("--grpc-url", help="benchmark a running server (HOST:PORT) instead of starting one")
    parser.add_argument("--http-url", help="its HTTP endpoint (with --grpc-url)")
    report.add_output_arguments(parser, BENCHMARK)
    args = parser.parse_args(argv)
    options = Options.quick_mode() if args.quick else Options()
    if args.pipelines == "all":
        options.pipelines = tuple(p.name for p in layout.pipelines(args.model_repository))
    elif args.pipelines:
        known = [p.name for p in layout.pipelines(args.model_repository)]
        options.pipelines = report.names(known, "pipelines")(args.pipelines)
    for key, value in (("mixes", args.mixes), ("systems", args.systems), ("batch_sizes", args.batch_sizes)):
        if value:
            setattr(options, key, value)
    if args.concurrency:
        options.concurrencies = args.concurrency
    if args.duration:
        options.duration_s = args.duration
        options.pa_measurement_ms = max(1000, int(args.duration * 1000 / 2.5))
    if args.warmup is not None:
        options.warmup_s = args.warmup
    if args.inprocess_modes:
        options.inprocess_modes = args.inprocess_modes
    if args.inprocess_duration:
        options.inprocess_duration_s = args.inprocess_duration
    options.service_rates, options.budget_ms = args.service_rates, args.budget_ms
    if bool(args.grpc_url) != bool(args.http_url):
        parser.error("--grpc-url and --http-url go together")
    if args.output is None:
        args.output = QUICK_DIR if args.quick else report.RESULTS_DIR
    options.command = report.command_line("benchmarks.systems", argv)
    return options, args


@dataclass
class RunningServer:
    grpc_url: str
    http_url: str
    model_repository: Path


def _start_server(repository: Path, pipelines: tuple[str, ...], config_name: str) -> LocalTritonServer:
    log_file = WORK_DIR / f"tritonserver_{config_name}.log"
    log_file.write_bytes(b"")
    server = LocalTritonServer(
        http_port=loadgen.free_port(),
        grpc_port=loadgen.free_port(),
        metrics_port=loadgen.free_port(),
        model_repository=repository,
        log_file=log_file,
        config_name=config_name,
        pipelines=list(pipelines),
    )
    report.log(BENCHMARK, f"starting tritonserver (model config {config_name})")
    server.start()
    return server


@contextlib.contextmanager
def started_servers(options: Options, args: argparse.Namespace) -> Iterator[Servers]:
    """The servers to measure: a running one (--grpc-url), or the CPU server (and the OpenVINO one) started here."""
    repository = args.model_repository.resolve()
    if args.grpc_url:
        yield Servers(RunningServer(args.grpc_url, args.http_url, repository))
        return
    from devtools.triton_server import build_artifacts

    configs = [DEFAULT_CONFIG_NAME] + ([OPENVINO_CONFIG] if "ensemble_openvino" in options.systems else [])
    if repository == MODEL_REPOSITORY.resolve():
        for config_name in configs:
            build_artifacts(config_name if config_name != DEFAULT_CONFIG_NAME else None, names=list(options.pipelines))
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    started: list[LocalTritonServer] = []
    try:
        for config_name in configs:
            started.append(_start_server(repository, options.pipelines, config_name))
        for server in started:
            server.wait_ready(timeout_s=240)
        yield Servers(*started)
    finally:
        for server in started:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    options, args = parse_args(argv)
    if report.rendered_only(args, BENCHMARK):
        return 0
    with started_servers(options, args) as servers:
        result = measure(options, servers)
    written = report.write(result, args.output, with_plot=True)
    report.log(BENCHMARK, f"after {result['elapsed_s']:.0f} s: {', '.join(str(path) for path in written)}")
    checks = report.rows(result, "checks")
    print(report.markdown_table(result["tables"]["checks"]["columns"], checks))
    return 0 if all(check["met"] is not False for check in checks if check["check"] == "no_errors") else 1


if __name__ == "__main__":
    sys.exit(main())
