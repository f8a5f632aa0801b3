"""``python -m builders all``: every CPU build step of every pipeline, in order, with its recipe's options.

Per pipeline: export -> check (FP32) -> select-precision (quantize + check of
the INT8 model + the task's gate, FP16 if INT8 fails, FP32 last) -> check of the
served model -> drift-reference (the drift monitors' reference sample; one built
from the user's ``--photos`` is kept, with a warning line once the model changed). Each step
skips itself when its recorded inputs are unchanged, so a second run is quick.
The first failing step stops the run with its exit code (1: a check failed,
2: a usage or configuration error). ``build-engine`` is not part of it: it
needs TensorRT and a GPU.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from builders import CheckFailed, Log, loaded, stderr_logger
from builders.loaded import LoadedPipeline
from vision_serving import layout
from vision_serving.layout import Pipeline

log_to_stderr = stderr_logger("all")


def check_step(path: Path, log: Log) -> None:
    from builders import trt_compat

    report = trt_compat.check_file(path)
    if report.blocking:
        raise CheckFailed(f"{path.name} would not build with TensorRT:\n{report.format_text()}")
    log(f"check {path.parent.parent.name}/{path.parent.name}/{path.name}: nothing blocks a TensorRT build")


def check_all(paths: tuple[Path, ...], log: Log) -> None:
    """The core's and every second stage's FP32 ONNX."""
    for path in paths:
        check_step(path, log)


Step = tuple[str, Callable[[Log], object]]


def named_steps(pipeline: LoadedPipeline, force: bool) -> dict[str, Callable[[Log], object]]:
    """Every build step of one pipeline, by name, as calls with typed options: the one place the sequences below
    (``all``'s and the local server's) take them from."""
    from builders import drift_reference, export, precision, quantize

    def reference(log: Log) -> None:
        try:
            drift_reference.build(pipeline, force=force, log=log)
        except drift_reference.StaleUserReference as error:  # the user's data: kept, never rebuilt from test photos
            log(f"warning: {error}")

    def check_served(log: Log) -> None:
        served = [(pipeline.layout.served_onnx(), pipeline.layout.onnx("fp32"))]
        served += [(layout.served_onnx(path.parent), path) for path in stage_onnx]
        for chosen, fp32 in served:
            if chosen is not None and chosen != fp32:
                check_step(chosen, log)

    stage_onnx = [pipeline.layout.stage_onnx(role) for role in pipeline.recipe.stages]
    return {
        "export": lambda log: export.export(pipeline, force=force, log=log),
        "check": lambda log: check_all((pipeline.layout.onnx("fp32"), *stage_onnx), log),
        "quantize": lambda log: quantize.quantize(pipeline, quantize.recipe_options(pipeline), force=force, log=log),
        "select-precision": lambda log: precision.select_precision(pipeline, log=log),
        "check-served": check_served,
        "drift-reference": reference,
    }


ALL_STEPS = ("export", "check", "select-precision", "check-served", "drift-reference")


def steps(pipeline: LoadedPipeline, force: bool) -> list[Step]:
    """``all``'s sequence: the ladder chooses the served precision, every model is checked."""
    calls = named_steps(pipeline, force)
    return [(name, calls[name]) for name in ALL_STEPS]


def serving_steps(pipeline: LoadedPipeline, config_name: str | None) -> list[Step]:
    """What serving the core config ``config_name`` on this machine needs, and no more (``./scripts/serve``, the
    tests' and the benchmarks' servers): the export; the INT8 model when that config serves it (``cpu_int8``;
    quantize, without the ladder's gate); the drift reference. ``all`` is the full sequence."""
    from vision_serving import model_config

    calls = named_steps(pipeline, force=False)
    core = pipeline.configs.core(config_name)
    serves_int8 = "onnx_file" in core.parameters and model_config.parameter(core, "onnx_file") == layout.INT8_ONNX
    names = ("export", "quantize", "drift-reference") if serves_int8 else ("export", "drift-reference")
    return [(name, calls[name]) for name in names]


def run_all(pipelines: list[Pipeline], force: bool = False, log: Log = log_to_stderr) -> int:
    started = time.perf_counter()
    for folder in pipelines:
        pipeline = loaded.load(folder)
        plan = steps(pipeline, force)
        for position, (name, call) in enumerate(plan, 1):
            prefix = f"[{pipeline.name} {position}/{len(plan)}] {name}"
            step_started = time.perf_counter()
            log(f"{prefix}...")
            call(stderr_logger(f"{pipeline.name} {name}"))
            log(f"{prefix}: done in {time.perf_counter() - step_started:.0f} s")
    log(f"done in {time.perf_counter() - started:.0f} s")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``python -m builders all``'s options."""
    parser.add_argument("--force", action="store_true", help="rebuild every step even if up to date")


def run_from_args(args: argparse.Namespace) -> int:
    chosen = [layout.pipeline(args.pipeline, args.model_repository)] if args.pipeline else layout.pipelines(args.model_repository)
    return run_all(chosen, force=args.force)
