"""What every step's command line shares: the pipeline options, their resolution, one-line errors.

Used by every step of ``builders.cli`` (:mod:`builders.step`) and by ``builders.tensorrt``'s own entry point (the
server image's ``verify-plan``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from builders import BuildError
from vision_serving import layout


def common_options() -> argparse.ArgumentParser:
    """Options every step accepts."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--pipeline",
        metavar="NAME",
        help="the pipeline to build (a folder of the model repository with a pipeline.toml); "
        "required when the repository has more than one",
    )
    add_model_repository(common, "the model repository holding the pipelines")
    return common


def add_model_repository(parser: argparse.ArgumentParser, what: str) -> None:
    """``--model-repository PATH`` (default: the project's model_repository/), described as ``what``."""
    parser.add_argument(
        "--model-repository", type=Path, default=layout.MODEL_REPOSITORY, metavar="PATH", help=f"{what} (default: %(default)s)"
    )


def _chosen(args: argparse.Namespace) -> Path:
    """The chosen pipeline's folder (its own Triton model repository), or the repository's only one."""
    if args.pipeline:
        return layout.pipeline(args.pipeline, args.model_repository).repository
    found = layout.pipelines(args.model_repository)
    if len(found) != 1:
        names = ", ".join(item.name for item in found) or "none"
        raise BuildError(f"choose a pipeline with --pipeline NAME (pipelines: {names})")
    return found[0].repository


# How a step picks its pipelines (builders.step.Step.pipelines): each sets ``args.repository`` (None: every pipeline)
# and ``args.loaded`` (the pipeline loaded once, its configs, task and recipe, or None).


def load_one(args: argparse.Namespace) -> None:
    """The chosen (or only) pipeline, loaded."""
    from builders import loaded

    args.repository = _chosen(args)
    args.loaded = loaded.load(args.repository)


def model_file_or_one(args: argparse.Namespace) -> None:
    """An explicit model file (``args.model``) alone, else the chosen (or only) pipeline, loaded."""
    if args.model is not None and not args.pipeline:
        args.repository, args.loaded = None, None
    else:
        load_one(args)


def every_or_one(args: argparse.Namespace) -> None:
    """Every pipeline in turn (one init container builds them all), unless one is chosen or a file names a model;
    its configs alone are read (the serving image runs ``verify-plan``)."""
    explicit_files = any(getattr(args, name, None) for name in ("onnx", "output", "plan"))
    args.repository = _chosen(args) if args.pipeline or explicit_files else None
    args.loaded = None


def its_own(args: argparse.Namespace) -> None:
    """The step picks (``configs``: --pipeline or --all; ``all``: every pipeline; ``new-pipeline``: the one it makes)."""
    args.repository, args.loaded = None, None


def chosen_repositories(args: argparse.Namespace) -> list[Path]:
    """The chosen pipeline's folder, or every pipeline's when none was chosen."""
    if args.repository is not None:
        return [Path(args.repository)]
    return layout.model_repositories(args.model_repository)


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def one_line(error: BaseException) -> str:
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip()) or type(error).__name__
