"""``python -m builders <step>``: one subcommand per build step.

Steps are added by writing an ``_add_<step>`` function that registers a
subparser whose ``run`` default returns an exit code, and listing it in
``STEPS`` (planned: check, fix, quantize, evaluate, build-engine). Heavy
imports (torch, onnx) happen inside ``run`` so ``--help`` stays instant.

Exit codes: 0 success, 1 a check failed, 2 user error (missing file, bad
configuration, bad arguments). Errors print one ``error: ...`` line to
stderr, never a traceback; progress lines also go to stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Sequence

from builders import BuildError
from vision_serving.model_config import MODEL_REPOSITORY, ConfigError

StepAdder = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]", argparse.ArgumentParser], None]


def _common_options() -> argparse.ArgumentParser:
    """Options every step accepts."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--repository",
        type=Path,
        default=MODEL_REPOSITORY,
        metavar="PATH",
        help="Triton model repository (default: %(default)s)",
    )
    return common


def _run_export(args: argparse.Namespace) -> int:
    from builders import export_onnx

    export_onnx.export(args.repository, force=args.force)
    return 0


def _add_export(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]", common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "export",
        parents=[common],
        help="export EfficientNet-Lite0 to ONNX, verify it, write labels and provenance",
        description=(
            "Export the PyTorch model to core/1/model.onnx (names and dims from core/config.pbtxt), "
            "verify it against PyTorch on sample photos and write the postprocess labels file. "
            "Does nothing when the recorded input hash is unchanged."
        ),
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.set_defaults(run=_run_export)


STEPS: tuple[StepAdder, ...] = (_add_export,)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m builders", description="Build the model repository's artifacts.")
    subparsers = parser.add_subparsers(title="steps", dest="step", required=True, metavar="STEP")
    common = _common_options()
    for add_step in STEPS:
        add_step(subparsers, common)
    return parser


def _one_line(error: BaseException) -> str:
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip()) or type(error).__name__


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except BuildError as error:
        print(f"error: {_one_line(error)}", file=sys.stderr)
        return error.exit_code
    except (ConfigError, OSError) as error:
        print(f"error: {_one_line(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
