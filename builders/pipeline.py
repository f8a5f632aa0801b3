"""``python -m builders all``: every CPU build step in order, each with its defaults.

export -> fix -> check -> quantize -> check (the INT8 Q/DQ model) -> evaluate.
Each step skips itself when its recorded inputs are unchanged, so a second run
is quick. The first failing step stops the run with its exit code (1: a check
or the accuracy gate failed, 2: a usage or configuration error).
``build-engine`` is not part of it: it needs TensorRT and a GPU.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from builders import Log, stderr_logger

FORCE_STEPS = ("export", "quantize")  # fix --force means "rewrite even if unchanged", not "rebuild"

log_to_stderr = stderr_logger("all")


def steps(repository: Path) -> list[list[str]]:
    """The command line of each step, in order."""
    from builders.export_onnx import MODEL_VERSION
    from builders.quantize import INT8_FILENAME

    int8_model = repository / "core" / str(MODEL_VERSION) / INT8_FILENAME
    return [["export"], ["fix"], ["check"], ["quantize"], ["check", str(int8_model)], ["evaluate"]]


def run_all(repository: str, force: bool = False, log: Log = log_to_stderr) -> int:
    from builders import cli

    started = time.perf_counter()
    plan = steps(Path(repository))
    for position, step in enumerate(plan, 1):
        argv = [*step, "--repository", str(repository)]
        if force and step[0] in FORCE_STEPS:
            argv.append("--force")
        prefix = f"[{position}/{len(plan)}] {step[0]}"
        log(f"{prefix}: python -m builders {' '.join(argv)}")
        step_started = time.perf_counter()
        code = cli.main(argv)
        if code != 0:
            log(f"{prefix}: failed with exit code {code} after {time.perf_counter() - step_started:.0f} s; stopping")
            return code
        log(f"{prefix}: done in {time.perf_counter() - step_started:.0f} s")
    log(f"done in {time.perf_counter() - started:.0f} s")
    return 0


def run_from_args(args: argparse.Namespace) -> int:
    return run_all(str(args.repository), force=args.force)
