"""``python -m builders configs``: write the configs generated from each core's ``config.pbtxt``.

Per pipeline (``--pipeline NAME``, or ``--all``): every core's (and second stage's) ``configs/<variant>.pbtxt``,
the tensors of the preprocess, postprocess and ensemble configs that the ensemble maps to and from the core
(their dtype and dims), and ``config.pbtxt``'s own warm-up dims: what :func:`vision_serving.config_variants.pipeline_files`
gives, from the core's ``config.pbtxt``, the CPU runtimes' registry and the core's ``configs/variants.toml``.
Every text is made before any file is written; a file whose text is unchanged is not touched. ``--check``
writes nothing and exits 1 when a file would change (what ``python -m vision_serving.consistency`` reports).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from builders import BuildError, Log, stderr_logger
from vision_serving import config_variants, layout

log_to_stderr = stderr_logger("configs")


def stale(pipeline: layout.Pipeline) -> dict[Path, str]:
    """The files of ``pipeline`` whose text differs from their generation (missing ones included), with that text."""
    return {path: text for path, text in config_variants.pipeline_files(pipeline).items() if not path.is_file() or path.read_text() != text}


def write(pipeline: layout.Pipeline, log: Log = log_to_stderr) -> list[Path]:
    """Write the generated configs of ``pipeline``; returns the files written."""
    changed = stale(pipeline)
    for path, text in changed.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    names = ", ".join(str(path.relative_to(pipeline.repository)) for path in changed)
    log(f"{pipeline.name}: wrote {names}" if changed else f"{pipeline.name}: up to date")
    return list(changed)


def chosen(args: argparse.Namespace) -> list[layout.Pipeline]:
    """``--all``, ``--pipeline NAME``, or the repository's only pipeline."""
    if args.all and args.pipeline:
        raise BuildError("--all and --pipeline: choose one")
    if args.all:
        return layout.pipelines(args.model_repository)
    if args.pipeline:
        return [layout.pipeline(args.pipeline, args.model_repository)]
    found = layout.pipelines(args.model_repository)
    if len(found) != 1:
        raise BuildError(f"choose a pipeline with --pipeline NAME, or --all (pipelines: {', '.join(p.name for p in found) or 'none'})")
    return found


def run_from_args(args: argparse.Namespace) -> int:
    pipelines = chosen(args)
    if not args.check:
        for pipeline in pipelines:
            write(pipeline)
        return 0
    differing = [path for pipeline in pipelines for path in stale(pipeline)]
    for path in differing:
        print(f"differs from its generation: {path}")
    if differing:
        print(f"{len(differing)} file(s) to regenerate: run python -m builders configs {'--all' if args.all else '--pipeline NAME'}")
    return 1 if differing else 0


def add_step(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "configs",
        parents=[common],
        help="write each core's configs/*.pbtxt and the dims that mirror its tensors, from its config.pbtxt",
        description=(
            "Generate every core's (and second stage's) CPU config variants, configs/<variant>.pbtxt, from its "
            "config.pbtxt (name, max_batch_size, inputs, outputs, queue policy, warm-up), the CPU runtimes' registry "
            "(vision_serving/cpu_runtimes.py: each variant's backend, parameters, instances, batcher delay) and the "
            "core's configs/variants.toml (what it measured or chose otherwise); and set the dtype and dims of the "
            "preprocess outputs and postprocess inputs the ensemble maps to and from the core, and of config.pbtxt's "
            "warm-up samples. A new input size or class count: edit the core's config.pbtxt, then run this."
        ),
    )
    parser.add_argument("--all", action="store_true", help="every pipeline of the model repository")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file differs from its generation")
    parser.set_defaults(run=run_from_args)
