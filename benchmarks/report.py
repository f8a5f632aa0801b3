"""Targets, the Markdown report and the plot of a benchmark run."""

from __future__ import annotations

from pathlib import Path

from benchmarks import CLASSIFIER
from vision_serving import layout, model_config

OPTIMIZATION_LOG = Path(__file__).resolve().parent / "optimizations.md"
LABELS = {
    "ensemble_grpc": "ensemble (gRPC)",
    "ensemble_openvino": "ensemble on OpenVINO (gRPC)",
    "ensemble_http": "ensemble (HTTP)",
    "naive": "naive FastAPI",
    "naive_openvino": "naive FastAPI on OpenVINO",
    "naive_tuned": "naive FastAPI, served thread settings",
    "core_grpc": "core alone (gRPC, float tensors)",
    "perf_analyzer": "perf_analyzer (ensemble, gRPC)",
}
TARGET_RATIO_LIMIT = 0.8
TARGET_RATIO_NAIVE = 2.0
TARGET_CONCURRENCY_NAIVE = 16
BATCHING_FROM_CONCURRENCY = 4
STEP_ROLES = ("preprocess", "core", "postprocess")  # the ensemble's steps, models <pipeline>_<role>


def model_config_summary(repository: Path) -> dict:
    """The knobs that matter for speed, as served (core: configs/cpu.pbtxt), by Triton model name.

    ``repository`` is the model repository holding the classifier pipeline."""
    summary = {}
    served = layout.Pipeline.at(Path(repository) / CLASSIFIER.name)
    folders = [
        (served.model_dir("preprocess"), None),
        (served.core_dir, "cpu"),
        (served.model_dir("postprocess"), None),
        (served.ensemble_dir, None),
    ]
    for folder, variant in folders:
        name = folder.name
        try:
            config = model_config.load_config(folder, variant)
        except model_config.ConfigError:
            continue
        entry: dict = {"max_batch_size": config.max_batch_size}
        if config.HasField("dynamic_batching"):
            entry["max_queue_delay_us"] = config.dynamic_batching.max_queue_delay_microseconds
            entry["preferred_batch_size"] = list(config.dynamic_batching.preferred_batch_size)
        if config.instance_group:
            entry["instances"] = sum(int(group.count or 1) for group in config.instance_group)
        threads = {key: value.string_value for key, value in config.parameters.items() if "thread" in key or "spin" in key}
        if threads:
            entry["parameters"] = threads
        summary[name] = entry
    return summary


def _rows(results: dict, system: str) -> list[dict]:
    return [row for row in results.get("systems", {}).get(system, []) if row.get("throughput") is not None]


def _at(results: dict, system: str, concurrency: int) -> dict | None:
    return next((row for row in _rows(results, system) if row["concurrency"] == concurrency), None)


def inprocess_limit(results: dict) -> dict | None:
    rows = list(results.get("inprocess", []))
    if results.get("inprocess_end"):
        rows.append({**results["inprocess_end"], "at_end": True})
    return max(rows, key=lambda row: row["throughput"]) if rows else None


def targets(results: dict) -> dict:
    report: dict = {}
    limit = inprocess_limit(results)
    grpc = _rows(results, "ensemble_grpc")
    best = max(grpc, key=lambda row: row["throughput"]) if grpc else None
    if limit and best:
        ratio = best["throughput"] / limit["throughput"]
        report["vs_inprocess_limit"] = {
            "description": f"ensemble (gRPC) at its best concurrency >= {TARGET_RATIO_LIMIT} x in-process limit",
            "value": round(ratio, 3),
            "detail": f"{best['throughput']:.1f} req/s at c={best['concurrency']} vs {limit['throughput']:.1f} img/s "
            f"({limit['mode']}, batch {limit['batch_size']})",
            "met": ratio >= TARGET_RATIO_LIMIT,
        }
    ensemble_c, naive_c = _at(results, "ensemble_grpc", TARGET_CONCURRENCY_NAIVE), _at(results, "naive", TARGET_CONCURRENCY_NAIVE)
    if ensemble_c and naive_c and naive_c["throughput"] > 0:
        ratio = ensemble_c["throughput"] / naive_c["throughput"]
        report["vs_naive_c16"] = {
            "description": f"ensemble (gRPC) at c={TARGET_CONCURRENCY_NAIVE} >= {TARGET_RATIO_NAIVE} x naive service",
            "value": round(ratio, 3),
            "detail": f"{ensemble_c['throughput']:.1f} vs {naive_c['throughput']:.1f} req/s",
            "met": ratio >= TARGET_RATIO_NAIVE,
        }
    tuned_c = _at(results, "naive_tuned", TARGET_CONCURRENCY_NAIVE)
    if ensemble_c and tuned_c and tuned_c["throughput"] > 0:
        ratio = ensemble_c["throughput"] / tuned_c["throughput"]
        report["vs_naive_tuned_c16"] = {
            "description": f"(context, no target) ensemble (gRPC) at c={TARGET_CONCURRENCY_NAIVE} / naive service with the served thread settings",
            "value": round(ratio, 3),
            "detail": f"{ensemble_c['throughput']:.1f} vs {tuned_c['throughput']:.1f} req/s",
            "met": None,
        }

    # CPU cost per image: steadier than throughput on a shared machine (see benchmarks/cpu.py).
    def cpu_per_request(row: dict | None) -> float | None:
        if not row or row.get("server_cpu_ms_per_request") is None:
            return None
        return row["server_cpu_ms_per_request"] + (row.get("client_cpu_ms_per_request") or 0.0)

    ensemble_cpu = cpu_per_request(best)
    if limit and limit.get("cpu_ms_per_image") and ensemble_cpu:
        report["cpu_vs_inprocess"] = {
            "description": "(context, no target) CPU per image: in-process limit / ensemble (server + client) at its best concurrency",
            "value": round(limit["cpu_ms_per_image"] / ensemble_cpu, 3),
            "detail": f"{limit['cpu_ms_per_image']:.1f} vs {ensemble_cpu:.1f} ms: ≈ the throughput ratio on an otherwise idle machine, where both are CPU-bound",
            "met": None,
        }
    naive_cpu, ensemble_c_cpu = cpu_per_request(naive_c), cpu_per_request(ensemble_c)
    if naive_cpu and ensemble_c_cpu:
        report["cpu_vs_naive_c16"] = {
            "description": f"(context, no target) CPU per request at c={TARGET_CONCURRENCY_NAIVE}: naive service / ensemble (both server + client)",
            "value": round(naive_cpu / ensemble_c_cpu, 3),
            "detail": f"{naive_cpu:.1f} vs {ensemble_c_cpu:.1f} ms: ≈ the throughput ratio on an otherwise idle machine, where both are CPU-bound",
            "met": None,
        }
    batches = {
        row["concurrency"]: (row.get("triton") or {}).get(CLASSIFIER.model_name("core"), {}).get("avg_batch")
        for row in grpc
        if row["concurrency"] >= BATCHING_FROM_CONCURRENCY
    }
    if batches:
        report["dynamic_batching"] = {
            "description": f"average core batch > 1 at every concurrency >= {BATCHING_FROM_CONCURRENCY} (ensemble gRPC)",
            "value": batches,
            "met": all(value is not None and value > 1 for value in batches.values()),
        }
    errors = {
        system: sum(int(row.get("errors") or 0) for row in rows) + sum(1 for row in rows if row.get("error"))
        for system, rows in results.get("systems", {}).items()
    }
    report["no_errors"] = {
        "description": "no errors at any concurrency, any system",
        "value": errors,
        "met": all(count == 0 for count in errors.values()),
    }
    return report


def _fmt(value, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _table(header: list[str], rows: list[list]) -> str:
    numeric = [all(isinstance(row[i], (int, float)) or row[i] is None for row in rows) for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if is_number else "---" for is_number in numeric) + "|"]
    lines += ["| " + " | ".join(_fmt(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def results_table(results: dict) -> str:
    rows = []
    for system in LABELS:
        for row in results.get("systems", {}).get(system, []):
            if row.get("error"):
                rows.append([LABELS[system], row["concurrency"], None, None, None, None, f"failed: {row['error']}", None, None])
                continue
            rows.append(
                [
                    LABELS[system],
                    row["concurrency"],
                    row["throughput"],
                    row.get("p50_ms"),
                    row.get("p95_ms"),
                    row.get("p99_ms"),
                    row.get("errors", 0),
                    row.get("server_cpu_ms_per_request"),
                    row.get("client_cpu_ms_per_request"),
                ]
            )
    return _table(
        ["system", "concurrency", "throughput (req/s)", "p50 ms", "p95 ms", "p99 ms", "errors", "server CPU ms/req", "client CPU ms/req"],
        rows,
    )


def steps_table(results: dict) -> str:
    rows = []
    for row in _rows(results, "ensemble_grpc"):
        stats = row.get("triton") or {}
        cells: list = [row["concurrency"], (stats.get(CLASSIFIER.name) or {}).get("request_ms")]
        for role in STEP_ROLES:
            entry = stats.get(CLASSIFIER.model_name(role)) or {}
            cells += [entry.get("avg_batch"), entry.get("queue_ms"), entry.get("compute_ms")]
        rows.append(cells)
    header = ["c", "ensemble server ms"]
    for role in STEP_ROLES:
        header += [f"{role} batch", f"{role} queue ms", f"{role} compute ms"]
    return _table(header, rows)


def cross_check_table(results: dict) -> str:
    rows = []
    for theirs in results.get("systems", {}).get("perf_analyzer", []):
        ours = _at(results, "ensemble_grpc", theirs["concurrency"])
        if theirs.get("error") or ours is None:
            rows.append([theirs["concurrency"], ours and ours["throughput"], None, None, None, None, None, theirs.get("error", "")])
            continue
        rows.append(
            [
                theirs["concurrency"],
                ours["throughput"],
                theirs["throughput"],
                ours["throughput"] / theirs["throughput"],
                ours["p50_ms"],
                theirs.get("p50_ms"),
                ours["p99_ms"],
                theirs.get("p99_ms"),
            ]
        )
    return _table(
        ["c", "ours req/s", "perf_analyzer infer/s", "ours / theirs", "ours p50 ms", "theirs p50 ms", "ours p99 ms", "theirs p99 ms"],
        rows,
    )


def inprocess_table(results: dict) -> str:
    rows = [
        [row["mode"], row["batch_size"], row["throughput"], row.get("batch_ms_p50"), row.get("cpu_ms_per_image")]
        for row in results.get("inprocess", [])
    ]
    others = [
        ("inprocess_reference", "before: OpenCV full decode"),
        ("inprocess_openvino", "OpenVINO (cpu_openvino)"),
    ]
    for key, label in others:
        rows += [
            [f"{row['mode']}, {label}", row["batch_size"], row["throughput"], row.get("batch_ms_p50"), row.get("cpu_ms_per_image")]
            for row in results.get(key, [])
        ]
    single = results.get("single_request")
    if single:
        rows.append([single["mode"], 1, single["throughput"], single.get("batch_ms_p50"), single.get("cpu_ms_per_image")])
    end = results.get("inprocess_end")
    if end:
        rows.append(
            [
                f"{end['mode']} (again, at the end)",
                end["batch_size"],
                end["throughput"],
                end.get("batch_ms_p50"),
                end.get("cpu_ms_per_image"),
            ]
        )
    return _table(["mode", "batch size", "throughput (img/s)", "batch p50 ms", "CPU ms/img"], rows)


def _run_header(title: str, results: dict, machine: dict, run: dict) -> list[str]:
    """Title, command, run time and machine line (ends without a newline, so callers can continue it)."""
    quick = " (quick mode: smoke numbers only)" if results.get("quick") else ""
    return [
        title,
        f"Command: `{results['command']}`  \n",
        f"Run: {results['started_at']}, {results['elapsed_s']:.0f} s{quick}.\n",
        f"\nMachine: {machine['cpu_model']}, {machine['usable_cpus']} usable of {machine['logical_cpus']} logical CPUs, "
        f"{machine['memory_gib']} GiB, Linux {machine['kernel']}, Python {machine['python']}; "
        + ", ".join(f"{k} {v}" for k, v in machine["versions"].items())
        + f"; Triton {run.get('server', {}).get('triton_version')} (CPU, Python backend).",
    ]


def markdown(results: dict) -> str:
    if "runs" in results:
        return markdown_runs(results)
    machine = results["machine"]
    images = results["images"]
    out = _run_header("# Benchmark: image_classifier ensemble vs the in-process limit and a naive service\n", results, machine, results)
    out.append(
        "  \n"
        f"Load average (1/5/15 min) at start {results['load_average_start']}, at end {results['load_average_end']} "
        "(a shared machine: compare systems within this run, as ratios).\n"
    )
    out.append(
        f"\nRequests: {images['count']} real photos ({', '.join(images['photos'])}) re-encoded as {images['format']}, "
        f"longer side {'/'.join(map(str, images['longer_sides']))} px, {images['bytes_min'] // 1000}–{images['bytes_max'] // 1000} KB "
        f"(mean {images['bytes_mean'] // 1000} KB); {results['settings']['request']}. Closed loop: each of N workers keeps one request "
        f"in flight; {results['settings']['warmup_s']} s warm-up, then a {results['settings']['duration_s']} s window per level.\n"
    )
    if results.get("skipped"):
        out.append("\nSkipped: " + "; ".join(f"{k}: {v}" for k, v in results["skipped"].items()) + "\n")
    out.append("\n## Targets\n\n")
    target_rows = [
        [t["description"], _fmt_value(t["value"]), t.get("detail", ""), {True: "met", False: "**missed**", None: "–"}[t["met"]]]
        for t in results["targets"].values()
    ]
    out.append(_table(["target", "value", "detail", ""], target_rows))
    out.append("\n## Throughput and latency\n\n")
    out.append(results_table(results))
    out.append(
        "\nserver CPU ms/req: user+system CPU time of the server's whole process tree (tritonserver and its "
        "Python-backend stubs; the uvicorn process) per completed request over the window. Unlike throughput it "
        "hardly depends on other load on the machine, so it is the steadier measure of efficiency; on an idle "
        "machine throughput is bounded by CPUs x 1000 / (server + client CPU ms/req). client CPU ms/req: the load generator's own.\n"
    )
    out.append("\n![throughput and p99 latency vs concurrency](plot.png)\n")
    out.append("\n## Ensemble per step (Triton statistics over each window)\n\n")
    out.append(
        "batch = items per execution; queue = mean wait in the model's dynamic-batching queue per request; "
        "compute = mean input+infer+output time of the batch a request was in; ensemble server ms = mean server-side time of a request.\n\n"
    )
    out.append(steps_table(results))
    if results.get("systems", {}).get("perf_analyzer"):
        out.append("\n## Cross-check with perf_analyzer (same JPEGs, gRPC, same concurrencies)\n\n")
        out.append(cross_check_table(results))
    out.append("\n## In-process limit (one Python process, no server)\n\n")
    out.append(
        "decode + preprocess + core (onnxruntime, the served session options) + top-k on batches of the same JPEGs. "
        "sequential: one thread; pipelined: preprocessing of the next batch overlaps the core on this one (two threads); "
        "parallel xN: N threads (one per CPU), each running the whole pipeline. The best row is the limit.\n\n"
    )
    out.append(inprocess_table(results))
    out.append("\n## Served configuration\n\n")
    out.append(_table(["model", "settings"], [[name, _fmt_value(entry)] for name, entry in results.get("model_configs", {}).items()]))
    if OPTIMIZATION_LOG.is_file():
        out.append("\n" + OPTIMIZATION_LOG.read_text())
    return "".join(out)


def _fmt_value(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_fmt_value(v)}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def plot(results: dict, path: Path) -> Path | None:
    if "runs" in results:
        return plot_runs(results, path)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure, (left, middle, right) = plt.subplots(1, 3, figsize=(13, 3.9), dpi=80)
    levels: set[int] = set()
    for system, label in LABELS.items():
        rows = sorted(_rows(results, system), key=lambda row: row["concurrency"])
        if not rows:
            continue
        xs = [row["concurrency"] for row in rows]
        levels.update(xs)
        style = "--" if system == "perf_analyzer" else "-"
        left.plot(xs, [row["throughput"] for row in rows], style, marker="o", label=label)
        middle.plot(xs, [row.get("p99_ms") for row in rows], style, marker="o", label=label)
        cpu_rows = [row for row in rows if row.get("server_cpu_ms_per_request") is not None]
        if cpu_rows:
            right.plot(
                [row["concurrency"] for row in cpu_rows],
                [row["server_cpu_ms_per_request"] + (row.get("client_cpu_ms_per_request") or 0) for row in cpu_rows],
                style,
                marker="o",
                label=label,
            )
        else:  # keep the colours of the three panels in step
            right.plot([], [])
    limit = inprocess_limit(results)
    if limit:
        left.axhline(limit["throughput"], color="black", linestyle=":", label=f"in-process limit ({limit['throughput']:.0f} img/s)")
        if limit.get("cpu_ms_per_image"):
            right.axhline(limit["cpu_ms_per_image"], color="black", linestyle=":", label="in-process limit")
    left.set(xlabel="concurrency", ylabel="requests / s", title="throughput")
    middle.set(xlabel="concurrency", ylabel="ms", title="p99 latency", yscale="log")
    right.set(xlabel="concurrency", ylabel="ms per request", title="CPU per request (server + client)")
    from matplotlib.ticker import FixedLocator, NullLocator

    for axis in (left, middle, right):
        axis.set_xscale("log", base=2)
        axis.xaxis.set_major_locator(FixedLocator(sorted(levels)))
        axis.xaxis.set_minor_locator(NullLocator())
        axis.set_xticklabels([str(level) for level in sorted(levels)])
        axis.grid(alpha=0.3)
    left.set_ylim(bottom=0)
    right.set_ylim(bottom=0)
    left.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return path


def summary(results: dict) -> str:
    lines = [f"{mix}:\n{results_table(run)}" for mix, run in results["runs"].items()] if "runs" in results else [results_table(results)]
    lines.append("Targets:")
    for target in results["targets"].values():
        lines.append(
            f"  [{ {True: 'met', False: 'MISSED', None: 'info'}[target['met']] }] {target['description']}: {_fmt_value(target['value'])} {target.get('detail', '')}"
        )
    return "\n".join(lines)


# The speed targets, as ratios measured side by side in one run.
TARGET_WEB = 1.3  # web photos: ensemble throughput / in-process onnxruntime-FP32 limit (OpenCV full decode)
TARGET_PHONE = 2.5  # 12 MP phone photos: the same ratio
TARGET_SINGLE = 1.5  # c=1: ensemble p50 / one in-process request (onnxruntime FP32, 2 threads)
ENSEMBLES = ("ensemble_grpc", "ensemble_openvino")


def _best(run: dict, systems: tuple[str, ...]) -> dict | None:
    rows = [{**row, "system": system} for system in systems for row in _rows(run, system)]
    return max(rows, key=lambda row: row["throughput"]) if rows else None


def issue_targets(results: dict) -> dict:
    """Every target of the issue, met or not, from a multi-mix run (schema 2)."""
    runs = results.get("runs", {})
    report: dict = {}
    for mix, wanted in (("web", TARGET_WEB), ("phone", TARGET_PHONE), ("mix", None)):
        run = runs.get(mix)
        reference = max(run.get("inprocess_reference") or [{}], key=lambda row: row.get("throughput", 0)) if run else {}
        best = _best(run, ENSEMBLES) if run else None
        if not reference.get("throughput") or not best:
            continue
        ratio = best["throughput"] / reference["throughput"]
        # The same ratio from CPU time (limit's CPU ms per image / the ensemble's server + client CPU ms per request):
        # what the throughput ratio is on an otherwise idle machine, where both are CPU-bound; it moves far less with
        # other load than throughput does (the limit and the ensemble are measured minutes apart).
        ensemble_cpu = (best.get("server_cpu_ms_per_request") or 0) + (best.get("client_cpu_ms_per_request") or 0)
        cpu_ratio = reference["cpu_ms_per_image"] / ensemble_cpu if ensemble_cpu and reference.get("cpu_ms_per_image") else None
        per_runtime = "; ".join(
            f"{LABELS[system]} {row['throughput']:.1f} req/s at c={row['concurrency']}"
            for system in ENSEMBLES
            if (row := _best(run, (system,)))
        )
        report[f"{mix}_vs_reference"] = {
            "description": (
                f"{mix}: best ensemble throughput >= {wanted} x in-process onnxruntime-FP32 limit with full-size (OpenCV) decoding "
                "(and the same from CPU time)"
                if wanted
                else f"(context, no target) {mix}: best ensemble / the same limit"
            ),
            "value": round(ratio, 3),
            "detail": f"{per_runtime} vs {reference['throughput']:.1f} img/s ({reference['mode']}, batch {reference['batch_size']})"
            + (
                f"; from CPU time: {cpu_ratio:.2f} ({reference['cpu_ms_per_image']:.1f} CPU ms/img vs {ensemble_cpu:.1f} per request)"
                if cpu_ratio
                else ""
            ),
            "cpu_ratio": round(cpu_ratio, 3) if cpu_ratio else None,
            # Met only when both measures say so (on a loaded machine they can disagree).
            "met": (ratio >= wanted and (cpu_ratio is None or cpu_ratio >= wanted)) if wanted else None,
        }
    web = runs.get("web")
    if web:
        single = web.get("single_request")
        at_one = _at(web, "ensemble_grpc", 1)
        if single and at_one and single.get("batch_ms_p50"):
            ratio = at_one["p50_ms"] / single["batch_ms_p50"]
            report["c1_p50_vs_single"] = {
                "description": f"web: ensemble (gRPC, onnxruntime) p50 at c=1 <= {TARGET_SINGLE} x one in-process request (onnxruntime FP32, 2 threads)",
                "value": round(ratio, 3),
                "detail": f"{at_one['p50_ms']:.1f} vs {single['batch_ms_p50']:.1f} ms",
                "met": ratio <= TARGET_SINGLE,
            }
    errors: dict[str, int] = {}
    for mix, run in runs.items():
        for system, count in run.get("targets", {}).get("no_errors", {}).get("value", {}).items():
            errors[f"{mix}/{system}"] = count
    report["no_errors"] = {
        "description": "no errors at any concurrency, any system, any mix",
        "value": errors,
        "met": all(count == 0 for count in errors.values()),
    }
    return report


def _targets_table(targets_: dict) -> str:
    rows = [
        [t["description"], _fmt_value(t["value"]), t.get("detail", ""), {True: "met", False: "**missed**", None: "–"}[t["met"]]]
        for t in targets_.values()
    ]
    return _table(["target", "value", "detail", ""], rows)


def _run_section(mix: str, run: dict) -> str:
    images = run["images"]
    out = [f"\n## Upload mix: {mix}\n\n"]
    shares = ", ".join(f"{kind} {share:.0%}" for kind, share in images.get("shares", {}).items())
    out.append(
        f"{images['count']} requests' payloads ({shares}; {images.get('exif_rotated', 0)} with EXIF orientation 6), longer side "
        f"{'/'.join(map(str, images['longer_sides']))} px, {images['bytes_min'] // 1000}–{images['bytes_max'] // 1000} KB "
        f"(mean {images['bytes_mean'] // 1000} KB). Load average at start {run['load_average_start']}, at end {run['load_average_end']}.\n\n"
    )
    out.append(results_table(run))
    out.append(
        "\n### One request at c=1: where the time goes (ms, means per request; Triton statistics)\n\n"
        "queue: wait in the model's queue (dynamic batcher); in+out: the Python backend moving tensors in and out of the "
        "stub (compute_input + compute_output); execute: the model's execute() (compute_infer).\n\n"
    )
    out.append(c1_breakdown_table(run))
    out.append("\n### Ensemble per step (Triton statistics over each window, onnxruntime server)\n\n")
    out.append(steps_table(run))
    if run.get("systems", {}).get("perf_analyzer"):
        out.append("\n### Cross-check with perf_analyzer (same JPEGs, gRPC, onnxruntime server)\n\n")
        out.append(cross_check_table(run))
    out.append("\n### In-process (one Python process, no server)\n\n")
    out.append(inprocess_table(run))
    return "".join(out)


def c1_breakdown_table(run: dict) -> str:
    """Where one request's time goes at c=1 (Triton statistics, means per request over the window)."""
    rows = []
    for system in ENSEMBLES:
        at_one = _at(run, system, 1)
        stats = (at_one or {}).get("triton") or {}
        server = (stats.get(CLASSIFIER.name) or {}).get("request_ms")
        if not at_one or server is None:
            continue
        cells: list = [LABELS[system], at_one["p50_ms"], at_one.get("mean_ms"), server]
        in_steps = 0.0
        for role in STEP_ROLES:
            entry = stats.get(CLASSIFIER.model_name(role)) or {}
            queue, infer = entry.get("queue_ms") or 0.0, entry.get("compute_infer_ms") or 0.0
            io = (entry.get("compute_input_ms") or 0.0) + (entry.get("compute_output_ms") or 0.0)
            cells += [queue, io, infer]
            in_steps += queue + io + infer
        cells += [server - in_steps, (at_one.get("mean_ms") or at_one["p50_ms"]) - server]
        rows.append(cells)
    header = ["system", "client p50", "client mean", "ensemble server"]
    for role in STEP_ROLES:
        header += [f"{role} queue", f"{role} in+out", f"{role} execute"]
    header += ["ensemble hops (server - steps)", "gRPC + client (client mean - server)"]
    return _table(header, rows)


def markdown_runs(results: dict) -> str:
    runs = results["runs"]
    first = next(iter(runs.values()))
    machine = first["machine"]
    out = _run_header(
        "# Benchmark: image_classifier ensemble vs the in-process limit and a naive service, per upload mix\n\n", results, machine, first
    )
    out.append(" The CPUs are shared with other work: compare systems within this run, as ratios.\n")
    out.append(
        "\nRequests: one image per request (BYTES [1, 1] for Triton, raw body for the naive service), closed loop "
        f"(each of N workers keeps one request in flight), {first['settings']['warmup_s']} s warm-up, then a "
        f"{first['settings']['duration_s']} s window per level; levels interleaved across systems. Photos: the real photos "
        "of scikit-image, JPEG quality 90; 12 MP phone photos are those photos cropped to 4:3, upscaled to 4000 x 3000 "
        "with mild sensor-like noise so that they compress like phone photos (2.5–4 MB), every other one stored sideways "
        "with EXIF orientation 6 (benchmarks/images.py).\n"
    )
    out.append("\n## Targets\n\n")
    out.append(_targets_table(results["targets"]))
    out.append("\n![latency vs throughput](plot.png)\n")
    for mix, run in runs.items():
        out.append(_run_section(mix, run))
    if results.get("memory"):
        out.append("\n## Memory per model instance (after the last mix)\n\n")
        out.append(
            "RSS of each Python-backend stub process (one per model instance) and of tritonserver itself, now and at its peak "
            "(VmHWM), MiB; per server (its core config).\n\n"
        )
        out.append(memory_table(results["memory"]))
    out.append("\n## Served configuration\n\n")
    out.append(_table(["model", "settings"], [[name, _fmt_value(entry)] for name, entry in first.get("model_configs", {}).items()]))
    return "".join(out)


def memory_table(memory: dict) -> str:
    rows = []
    for config, entry in memory.items():
        if not entry:
            continue
        rows.append([config, "tritonserver", entry["tritonserver"]["rss_mib"], entry["tritonserver"]["peak_mib"]])
        rows += [[config, name, item["rss_mib"], item["peak_mib"]] for name, item in entry["instances"].items()]
    return _table(["server (core config)", "process (model instance)", "RSS MiB", "peak RSS MiB"], rows)


def plot_runs(results: dict, path: Path) -> Path | None:
    """Latency vs throughput, one panel per upload mix: p50 (solid) and p99 (dashed), one colour per system,
    points labelled with their concurrency; the in-process limits as vertical lines."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    runs = results["runs"]
    figure, axes = plt.subplots(1, len(runs), figsize=(5.2 * len(runs), 4.4), dpi=80, squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for axis, (mix, run) in zip(axes[0], runs.items(), strict=True):
        for index, (system, label) in enumerate(LABELS.items()):
            rows = sorted(_rows(run, system), key=lambda row: row["concurrency"])
            if not rows:
                continue
            colour = colours[index % len(colours)]
            xs = [row["throughput"] for row in rows]
            axis.plot(xs, [row.get("p50_ms") for row in rows], "-", marker="o", color=colour, label=f"{label} p50")
            axis.plot(xs, [row.get("p99_ms") for row in rows], "--", marker=".", color=colour, alpha=0.6)
            for row in rows:
                axis.annotate(
                    f"c{row['concurrency']}", (row["throughput"], row.get("p50_ms")), fontsize=7, xytext=(3, 3), textcoords="offset points"
                )
        reference = max(run.get("inprocess_reference") or [{}], key=lambda row: row.get("throughput", 0))
        if reference.get("throughput"):
            axis.axvline(reference["throughput"], color="black", linestyle=":", label="in-process limit, before (OpenCV decode)")
        served = inprocess_limit(run)
        if served:
            axis.axvline(served["throughput"], color="grey", linestyle="-.", label="in-process limit, served decode")
        axis.set(xlabel="throughput (requests / s)", ylabel="latency ms (p50 solid, p99 dashed)", title=mix, yscale="log")
        axis.set_xlim(left=0)
        axis.grid(alpha=0.3, which="both")
    axes[0][0].legend(fontsize=7, loc="upper left")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return path
