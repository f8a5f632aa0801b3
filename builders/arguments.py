"""What every step's command line shares: the pipeline options, their resolution, one-line errors.

Used by ``builders.cli`` (every step) and by ``builders.tensorrt_engine``'s own entry point (the
server image's ``verify-plan``), so neither imports the other's parser.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from builders import BuildError
from vision_serving import layout
from vision_serving.model_config import ConfigError


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


def resolve_pipeline(args: argparse.Namespace) -> None:
    """Set ``args.repository`` to the chosen pipeline's folder (its own Triton model repository) and
    ``args.loaded`` to the pipeline loaded once (configs, task, recipe) for the steps that build it."""
    args.loaded = None
    if args.step in ("all", "new-pipeline", "same-tensorrt", "configs"):  # configs chooses its own (--pipeline or --all)
        return
    if args.step == "check" and args.model is not None and not args.pipeline:
        args.repository = None  # an explicit model file: no pipeline is read
        return
    explicit_files = any(getattr(args, name, None) for name in ("onnx", "output", "plan"))
    if args.step in ("build-engine", "verify-plan") and not args.pipeline and not explicit_files:
        args.repository = None  # every pipeline, in turn (one init container builds them all)
        return
    if args.pipeline:
        args.repository = layout.pipeline(args.pipeline, args.model_repository).repository
    else:
        found = layout.pipelines(args.model_repository)
        if len(found) != 1:
            names = ", ".join(item.name for item in found) or "none"
            raise BuildError(f"choose a pipeline with --pipeline NAME (pipelines: {names})")
        args.repository = found[0].repository
    if args.step not in ("build-engine", "verify-plan"):  # those read the configs alone (the serving image runs verify-plan)
        from builders import loaded

        args.loaded = loaded.load(args.repository)


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


def run(args: argparse.Namespace) -> int:
    """Run a parsed step: one ``error:`` line and an exit code instead of a traceback."""
    try:
        resolve_pipeline(args)
        return int(args.run(args))
    except BuildError as error:
        print(f"error: {one_line(error)}", file=sys.stderr)
        return error.exit_code
    except (ConfigError, layout.LayoutError, OSError) as error:
        print(f"error: {one_line(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
