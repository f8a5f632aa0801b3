"""``python -m builders all``: every CPU build step in order, each with its defaults.

export -> fix -> check -> quantize -> evaluate. ``fix`` and ``check`` (graph
surgery and the TensorRT-compatibility check, ``builders/fix_onnx.py``,
``builders/graph_fixes.py``, ``builders/trt_compat.py``) run when their module
imports and their subcommand is registered; otherwise they are skipped with a
note. Each step skips itself when its recorded inputs are unchanged, so a
second run is quick. The first failing step stops the run with its exit code
(1: a check or the accuracy gate failed, 2: a usage or configuration error).
``build-engine`` is not part of it: it needs TensorRT and a GPU.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Callable

# step -> modules that must import for it to run (the optional ones are someone else's).
STEPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("export", ("builders.export_onnx",)),
    ("fix", ("builders.fix_onnx", "builders.graph_fixes")),
    ("check", ("builders.trt_compat",)),
    ("quantize", ("builders.quantize",)),
    ("evaluate", ("builders.evaluate",)),
)
FORCE_STEPS = ("export", "quantize")  # fix --force means "rewrite even if unchanged", not "rebuild"

Log = Callable[[str], None]


def log_to_stderr(message: str) -> None:
    print(f"all: {message}", file=sys.stderr, flush=True)


def _missing_module(modules: tuple[str, ...]) -> str | None:
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as error:
            return f"{module} ({error})"
    return None


def _registered_steps() -> set[str]:
    from builders import cli

    parser = cli.build_parser()
    for action in parser._actions:  # argparse keeps subcommands here
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()


def run_all(repository: str, force: bool = False, log: Log = log_to_stderr) -> int:
    from builders import cli

    registered = _registered_steps()
    started = time.perf_counter()
    ran: list[str] = []
    for position, (step, modules) in enumerate(STEPS, 1):
        prefix = f"[{position}/{len(STEPS)}] {step}"
        if step not in registered:
            log(f"{prefix}: skipped (no `{step}` subcommand in this checkout)")
            continue
        missing = _missing_module(modules)
        if missing:
            log(f"{prefix}: skipped ({missing} is not importable)")
            continue
        argv = [step, "--repository", str(repository)]
        if force and step in FORCE_STEPS:
            argv.append("--force")
        log(f"{prefix}: python -m builders {' '.join(argv)}")
        step_started = time.perf_counter()
        try:
            code = cli.main(argv)
        except SystemExit as error:  # argparse: the step needs arguments `all` cannot guess
            code = error.code if isinstance(error.code, int) else 2
        if code != 0:
            log(f"{prefix}: failed with exit code {code} after {time.perf_counter() - step_started:.0f} s; stopping")
            return code
        ran.append(step)
        log(f"{prefix}: done in {time.perf_counter() - step_started:.0f} s")
    log(f"ran {', '.join(ran) or 'nothing'} in {time.perf_counter() - started:.0f} s")
    return 0


def run_from_args(args: argparse.Namespace) -> int:
    return run_all(str(args.repository), force=args.force)
