"""The one result format of the benchmarks, and its one Markdown renderer.

Every entry point (``python -m benchmarks.systems``, ``.steps``, ``.whatif``) writes one JSON
result, ``<benchmark>.json``::

    {"schema": 3, "benchmark": "steps", "title": "...", "command": "...", "date": "<ISO 8601, UTC>",
     "elapsed_s": 61.2,
     "machine": {"cpu_model": ..., "instruction_sets": {"AVX2": true, "AVX-512": false, "VNNI": false, ...},
                 "usable_cpus": 2, ..., "load_average": [...], "software": {"onnxruntime": "1.20.1", ...}},
     "settings": {...}, "notes": ["..."],
     "tables": {"<table>": {"title": "...", "about": "...", "columns": {"<row key>": "<header>", ...}}},
     "rows": [{"table": "<table>", "<row key>": value, ...}, ...]}

and its Markdown, ``<benchmark>.md`` (:func:`markdown`): the title, command, date and machine, the
notes, then every table in the order declared, with its title, what it measures and the columns it
declares. A row may hold more keys than its table shows: the JSON is the record, the Markdown the
reading. ``python -m benchmarks.<benchmark> --render-only`` rewrites the Markdown from the JSON.

Nothing here imports onnxruntime or a server client: the unit tests read results with it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import sys
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks import cpu

SCHEMA = 3
RESULTS_DIR = Path(__file__).resolve().parent / "results"
SOFTWARE = ("numpy", "opencv-python-headless", "onnxruntime", "openvino", "tritonclient")
VERDICTS = {True: "yes", False: "**no**", None: "–"}


# ---------------------------------------------------------------------------- building a result


def machine() -> dict[str, Any]:
    """The machine block: :func:`benchmarks.cpu.machine`, the load average now and the library versions."""
    found = cpu.machine()
    found["load_average"] = [round(x, 2) for x in os.getloadavg()]
    versions = {}
    for name in SOFTWARE:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    found["software"] = versions
    return found


def new(benchmark: str, title: str, command: str, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """An empty result of ``benchmark`` (systems, steps, whatif), dated now, with the machine."""
    return {
        "schema": SCHEMA,
        "benchmark": benchmark,
        "title": title,
        "command": command,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "started": time.time(),
        "machine": machine(),
        "settings": settings or {},
        "notes": [],
        "tables": {},
        "rows": [],
    }


def table(result: dict[str, Any], name: str, title: str, columns: dict[str, str], about: str = "") -> None:
    """Declare a table: its title, what it measures, and which row keys it shows under which headers."""
    result["tables"][name] = {"title": title, "about": about, "columns": columns}


def add(result: dict[str, Any], table_name: str, **values: Any) -> dict[str, Any]:
    """Append a row to a declared table; returns it."""
    if table_name not in result["tables"]:
        raise KeyError(f"no table {table_name!r} declared")
    row = {"table": table_name, **values}
    result["rows"].append(row)
    return row


def rows(result: dict[str, Any], table_name: str, **where: Any) -> list[dict[str, Any]]:
    """The rows of a table whose keys have the values ``where`` names."""
    return [r for r in result["rows"] if r["table"] == table_name and all(r.get(k) == v for k, v in where.items())]


def finish(result: dict[str, Any]) -> dict[str, Any]:
    """Record the elapsed time and the load average at the end."""
    result["elapsed_s"] = round(time.time() - result.pop("started", time.time()), 1)
    result["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


# ---------------------------------------------------------------------------- rendering


def fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return VERDICTS[value]
    if isinstance(value, float):
        magnitude = abs(value)
        if value == 0 or (value.is_integer() and 10 <= magnitude < 1e6):
            return str(int(value))
        if magnitude < 0.001:
            return f"{value:.2g}"  # p-values, tiny costs: two significant digits
        return f"{value:.1f}" if magnitude >= 10 else f"{value:.2f}" if magnitude >= 1 else f"{value:.3f}"
    if isinstance(value, dict):
        return ", ".join(f"{key}: {fmt(item)}" for key, item in value.items())
    if isinstance(value, list | tuple):
        return "/".join(fmt(item) for item in value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(columns: dict[str, str], selected: list[dict[str, Any]]) -> str:
    """A Markdown table: one column per declared key, right-aligned where every value is a number."""
    numeric = {
        key: all((isinstance(r.get(key), int | float) and not isinstance(r.get(key), bool)) or r.get(key) is None for r in selected)
        for key in columns
    }
    lines = [
        "| " + " | ".join(columns.values()) + " |",
        "|" + "|".join("---:" if numeric[key] else "---" for key in columns) + "|",
    ]
    lines += ["| " + " | ".join(fmt(r.get(key)) for key in columns) + " |" for r in selected]
    return "\n".join(lines) + "\n"


def describe_machine(found: dict[str, Any]) -> str:
    """``AMD EPYC, 2 CPUs, AVX2 yes, ...; 23.5 GiB, Linux 6.1, Python 3.11.7; numpy 1.26.4, ...``."""
    text = cpu.describe(found)
    extra = [f"{found['memory_gib']} GiB" if found.get("memory_gib") else "", f"Linux {found['kernel']}" if found.get("kernel") else ""]
    if found.get("python"):
        extra.append(f"Python {found['python']}")
    text += "; " + ", ".join(item for item in extra if item)
    if found.get("software"):
        text += "; " + ", ".join(f"{name} {version}" for name, version in found["software"].items())
    return text


def markdown(result: dict[str, Any]) -> str:
    """The whole report of one result."""
    found = result["machine"]
    load = f"load average (1/5/15 min) {found.get('load_average')} at the start"
    if found.get("load_average_end"):
        load += f", {found['load_average_end']} at the end"
    elapsed = f", {result['elapsed_s']:.0f} s" if result.get("elapsed_s") is not None else ""
    out = [
        f"# {result['title']}\n",
        f"Command: `{result['command']}`  ",
        f"Date: {result['date']}{elapsed}.  ",
        f"Machine: {describe_machine(found)}; {load}.\n",
    ]
    out += [f"{note}\n" for note in result.get("notes", [])]
    for name, declared in result["tables"].items():
        selected = rows(result, name)
        if not selected:
            continue
        out.append(f"## {declared['title']}\n")
        if declared.get("about"):
            out.append(f"{declared['about']}\n")
        out.append(markdown_table(declared["columns"], selected))
    if result.get("plot"):
        out.append(f"![latency vs throughput]({result['plot']})\n")
    return "\n".join(out)


def plot(result: dict[str, Any], path: Path) -> Path | None:
    """Latency vs throughput of the ``throughput`` table, one panel per pipeline (rows) and upload mix (columns): p50 solid, p99
    dashed, one colour per system, points labelled with their concurrency; the in-process limits as vertical lines.
    None without matplotlib (requirements/dev.txt has it)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    measured = [r for r in rows(result, "throughput") if r.get("throughput")]
    pipelines = list(dict.fromkeys(r["pipeline"] for r in measured))
    mixes = list(dict.fromkeys(r["mix"] for r in measured))
    if not measured:
        return None
    figure, axes = plt.subplots(len(pipelines), len(mixes), figsize=(4.6 * len(mixes), 3.6 * len(pipelines)), dpi=72, squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    systems = list(dict.fromkeys(r["system"] for r in measured))
    for (row_index, pipeline), (column, mix) in itertools.product(enumerate(pipelines), enumerate(mixes)):
        axis = axes[row_index][column]
        for index, system in enumerate(systems):
            line = sorted(
                (r for r in measured if (r["pipeline"], r["mix"], r["system"]) == (pipeline, mix, system)), key=lambda r: r["concurrency"]
            )
            if not line:
                continue
            xs = [r["throughput"] for r in line]
            colour = colours[index % len(colours)]
            axis.plot(xs, [r.get("p50_ms") for r in line], "-", marker="o", color=colour, label=f"{system} p50")
            axis.plot(xs, [r.get("p99_ms") for r in line], "--", marker=".", color=colour, alpha=0.6)
            for r in line:
                axis.annotate(
                    f"c{r['concurrency']}", (r["throughput"], r.get("p50_ms")), fontsize=6, xytext=(3, 3), textcoords="offset points"
                )
        for system, style in (("inprocess_reference", ":"), ("inprocess", "-.")):
            limits = [r["throughput"] for r in rows(result, "inprocess", pipeline=pipeline, mix=mix, system=system) if r.get("throughput")]
            if limits:
                axis.axvline(max(limits), color="black", linestyle=style, label=f"{system} (best)")
        axis.set(xlabel="throughput (requests / s)", ylabel="latency ms (p50 solid, p99 dashed)", title=f"{pipeline}, {mix}", yscale="log")
        axis.set_xlim(left=0)
        axis.grid(alpha=0.3, which="both")
    axes[0][0].legend(fontsize=6, loc="upper left")
    figure.tight_layout()
    figure.savefig(path, dpi=72)
    plt.close(figure)
    return path


# ---------------------------------------------------------------------------- writing and the command line


def write(result: dict[str, Any], output_dir: Path, with_plot: bool = False) -> list[Path]:
    """``<benchmark>.json`` and ``<benchmark>.md`` (and ``<benchmark>.png`` with ``with_plot``) in ``output_dir``."""
    output_dir.mkdir(parents=True, exist_ok=True)
    name = result["benchmark"]
    written = []
    if with_plot:
        picture = plot(result, output_dir / f"{name}.png")
        result["plot"] = picture.name if picture else None
        if picture:
            written.append(picture)
    (output_dir / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    (output_dir / f"{name}.md").write_text(markdown(result))
    return [output_dir / f"{name}.json", output_dir / f"{name}.md", *written]


def render_only(output_dir: Path, benchmark: str) -> Path:
    """Rewrite ``<benchmark>.md`` (and its plot, if it has one) from the ``<benchmark>.json`` in ``output_dir``."""
    result = json.loads((output_dir / f"{benchmark}.json").read_text())
    if result.get("plot"):
        plot(result, output_dir / result["plot"])
    path = output_dir / f"{benchmark}.md"
    path.write_text(markdown(result))
    return path


def rendered_only(args: argparse.Namespace, benchmark: str) -> bool:
    """``--render-only``: the Markdown rewritten from the JSON in ``args.output`` (True: nothing to measure)."""
    if not args.render_only:
        return False
    log(benchmark, f"rewrote {render_only(args.output, benchmark)}")
    return True


def add_output_arguments(parser: argparse.ArgumentParser, benchmark: str) -> None:
    """``--output DIR`` and ``--render-only``, the same for every entry point."""
    parser.add_argument(
        "--output",
        type=Path,
        help=f"where {benchmark}.json and {benchmark}.md go (default benchmarks/results; --quick: .build/bench/quick)",
    )
    parser.add_argument("--render-only", action="store_true", help=f"measure nothing: rewrite {benchmark}.md from {benchmark}.json")


def command_line(module: str, argv: list[str] | None) -> str:
    """The command as run, for the result (``argv``: None for sys.argv)."""
    return shlex.join([".venv/bin/python", "-m", module, *(sys.argv[1:] if argv is None else argv)])


def int_list(text: str) -> list[int]:
    """argparse type: ``1,4,16``."""
    try:
        values = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(value < 1 for value in values):
        raise argparse.ArgumentTypeError("values must be positive integers")
    return values


def names(known: tuple[str, ...] | list[str], what: str):
    """argparse type: a comma-separated subset of ``known``."""

    def parse(text: str) -> tuple[str, ...]:
        chosen = tuple(item.strip() for item in text.split(",") if item.strip())
        unknown = sorted(set(chosen) - set(known))
        if unknown or not chosen:
            raise argparse.ArgumentTypeError(f"unknown {what} {unknown}; known: {', '.join(known)}")
        return chosen

    return parse


def log(benchmark: str, message: str) -> None:
    print(f"{benchmark}: {message}", file=sys.stderr, flush=True)
