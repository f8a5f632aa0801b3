"""Side-by-side A/B of serving configurations: several servers at once, measurements interleaved.

    .venv/bin/python -m benchmarks.ab [--concurrency 16] [--rounds 3] [--window 5] VARIANT [VARIANT ...]

A VARIANT is ``name=EDITS`` where EDITS are ``;``-separated ``role.key=value``
changes (role: preprocess, core or postprocess of the image_classifier pipeline)
applied to a private copy of the pipeline (core edits go to
``configs/cpu.pbtxt``, the config the CPU server loads), or ``name=@PATH`` for
a prepared model repository holding the pipeline. Keys: ``instances``, ``delay_us`` (max queue delay),
``preferred`` (preferred batch sizes, ``/``-separated, empty for none),
``max_batch``, and ``param.NAME`` (a string parameter, e.g.
``core.param.intra_op_threads=1``). ``name=`` with no edits is the repository
as it is.

Every variant's server runs for the whole comparison and the variants are
measured in turn, round after round, so drifting background load on a shared
machine hits them alike; each round's numbers are kept and the median
reported. Example:

    python -m benchmarks.ab base= "c2x1=core.instances=2;core.param.intra_op_threads=1"
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import sys
from pathlib import Path

from google.protobuf import text_format

from benchmarks import CLASSIFIER, cpu, images, systems, triton_stats
from benchmarks.run import STAT_MODELS, WORK_DIR
from devtools import loadgen
from devtools.triton_server import MODEL_REPOSITORY, LocalTritonServer
from vision_serving import layout, model_config

AB_DIR = WORK_DIR / "ab"


def _config_file(repository: Path, role: str) -> Path:
    """``role`` (preprocess, core, postprocess) of the classifier in the model repository ``repository``."""
    return model_config.config_path(layout.pipeline(CLASSIFIER.name, repository).model_dir(role), "cpu")


def apply_edit(repository: Path, edit: str) -> None:
    target, _, value = edit.partition("=")
    role, _, key = target.strip().partition(".")
    path = _config_file(repository, role)
    config = model_config.parse_config_text(path.read_text(), str(path))
    if key == "instances":
        config.instance_group[0].count = int(value)
    elif key == "delay_us":
        config.dynamic_batching.max_queue_delay_microseconds = int(value)
    elif key == "preferred":
        del config.dynamic_batching.preferred_batch_size[:]
        config.dynamic_batching.preferred_batch_size.extend(int(v) for v in value.split("/") if v)
    elif key == "max_batch":
        config.max_batch_size = int(value)
    elif key.startswith("param."):
        config.parameters[key[len("param.") :]].string_value = value
    else:
        raise SystemExit(f"unknown key {key!r} in {edit!r}")
    path.write_text(text_format.MessageToString(config))


def prepare(name: str, spec: str) -> Path:
    if spec.startswith("@"):
        return Path(spec[1:]).resolve()
    destination = AB_DIR / name
    if destination.exists():
        shutil.rmtree(destination)
    # A model repository holding a copy of the classifier pipeline only (the only one measured).
    source = layout.pipeline(CLASSIFIER.name, MODEL_REPOSITORY)
    shutil.copytree(source.repository, destination / source.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for edit in filter(None, (item.strip() for item in spec.split(";"))):
        apply_edit(destination, edit)
    return destination


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("variants", nargs="+", help="name=EDITS or name=@REPOSITORY")
    parser.add_argument("--concurrency", default="16", help="comma-separated levels (default 16)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=5.0, help="measurement window, seconds")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    variants = dict(item.partition("=")[::2] for item in args.variants)
    payloads = [p.data for p in images.jpeg_payloads()]
    results: dict[str, dict[int, list[dict]]] = {name: {c: [] for c in levels} for name in variants}
    with contextlib.ExitStack() as stack:
        servers = {}
        for name, spec in variants.items():
            repository = prepare(name, spec)
            server = LocalTritonServer(
                http_port=systems.free_port(),
                grpc_port=systems.free_port(),
                metrics_port=systems.free_port(),
                model_repository=repository,
                log_file=AB_DIR / f"{name}.log",
            )
            AB_DIR.mkdir(parents=True, exist_ok=True)
            server.start()
            stack.callback(server.stop)
            servers[name] = server
        for server in servers.values():
            server.wait_ready(timeout_s=240)
        for round_index in range(args.rounds):
            for concurrency in levels:
                for name, server in servers.items():
                    url = server.grpc_url if args.protocol == "grpc" else server.http_url
                    window = triton_stats.WindowStats(server.grpc_url, STAT_MODELS)
                    usage = cpu.WindowCPU(server.process.pid if server.process else None)

                    def window_start(window: triton_stats.WindowStats = window, usage: cpu.WindowCPU = usage) -> None:
                        window.start()
                        usage.start()

                    def window_end(window: triton_stats.WindowStats = window, usage: cpu.WindowCPU = usage) -> None:
                        usage.end()
                        window.end()

                    row = loadgen.closed_loop(
                        systems.ensemble_sender(args.protocol, url, payloads, 5),
                        concurrency,
                        args.warmup,
                        args.window,
                        on_window_start=window_start,
                        on_window_end=window_end,
                    )
                    row.add_cpu(usage.server_s, usage.client_s)
                    core = window.result.get(systems.CORE, {})
                    results[name][concurrency].append({**row.as_dict(), "core_batch": core.get("avg_batch")})
                    print(
                        f"round {round_index + 1} c={concurrency:<3d} {name:24s} {row.throughput:7.1f} req/s  "
                        f"p50 {row.p50_ms or 0:7.1f}  p99 {row.p99_ms or 0:7.1f} ms  errors {row.errors}  "
                        f"core batch {core.get('avg_batch')}  core queue {core.get('queue_ms')} ms  "
                        f"server CPU {row.server_cpu_ms_per_request} ms/req ({row.server_cpus_used} CPUs)",
                        file=sys.stderr,
                        flush=True,
                    )
    print(
        "\n| variant | c | median req/s | rounds req/s | median p50 ms | median p99 ms | core batch | server CPU ms/req | errors |\n"
        "|---|---:|---:|---|---:|---:|---:|---:|---:|"
    )
    summary: dict[str, dict[int, dict]] = {}
    for name in variants:
        for concurrency in levels:
            rows = results[name][concurrency]
            throughput = statistics.median(r["throughput"] for r in rows)
            p50 = statistics.median(r["p50_ms"] or 0 for r in rows)
            p99 = statistics.median(r["p99_ms"] or 0 for r in rows)
            batch = statistics.median(r["core_batch"] or 0 for r in rows)
            cpu_ms = statistics.median(r["server_cpu_ms_per_request"] or 0 for r in rows)
            errors = sum(r["errors"] for r in rows)
            summary.setdefault(name, {})[concurrency] = {
                "throughput": throughput,
                "p50_ms": p50,
                "p99_ms": p99,
                "core_batch": batch,
                "server_cpu_ms": cpu_ms,
                "errors": errors,
            }
            rounds = " / ".join(f"{r['throughput']:.1f}" for r in rows)
            print(
                f"| {name} | {concurrency} | {throughput:.1f} | {rounds} | {p50:.1f} | {p99:.0f} | {batch:.2f} | {cpu_ms:.1f} | {errors} |"
            )
    (AB_DIR / "last.json").write_text(json.dumps({"variants": variants, "summary": summary, "rounds": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
