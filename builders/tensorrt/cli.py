"""The plan steps' options and runs: ``build-engine``, ``verify-plan`` and ``same-tensorrt``, steps of
``python -m builders`` (:mod:`builders.cli`). A step's options and run are imported only when it is chosen, so the
server image runs ``python -m builders verify-plan`` with only the serving requirements (no onnx, torch or cv2).
Without ``--pipeline`` a step runs on every pipeline in turn (:func:`each_pipeline`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from builders import BuildError, Log, arguments
from builders.tensorrt import build, discovery, models, verify
from builders.tensorrt.models import CORE_MODEL, PLAN_FILENAME
from vision_serving import layout


class PipelinesFailed(BuildError):
    """Some pipelines of a run over all of them failed (the first failure's exit code)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def each_pipeline(args: argparse.Namespace, step: Callable[[layout.Pipeline], object], log: Log = build.log_to_stderr) -> int:
    """``step`` on the chosen pipeline, or on every pipeline in turn: one failing does not stop the others, so one
    run names every pipeline that cannot be served; then the first failure's exit code, with all of them in one line.

    The pod is the unit that fails (docs/design.md, "One pipeline fails, the pod fails"): a pod that served only some
    pipelines would pass its readiness probe and let a rolling update replace the pods that still serve them all."""
    failures: list[tuple[str, BuildError]] = []
    repositories = arguments.chosen_repositories(args)
    for repository in repositories:
        pipeline = layout.Pipeline.at(repository)
        try:
            step(pipeline)
        except BuildError as error:
            if len(repositories) == 1:
                raise
            log(f"{pipeline.name}: {arguments.one_line(error)}")
            failures.append((pipeline.name, error))
    if failures:
        names = ", ".join(name for name, _ in failures)
        reasons = "; ".join(f"{name}: {arguments.one_line(error)}" for name, error in failures)
        raise PipelinesFailed(
            f"{len(failures)} of {len(repositories)} pipelines cannot be served ({names}), so this pod serves none: {reasons}",
            failures[0][1].exit_code,
        )
    return 0


def run_build_engine(args: argparse.Namespace) -> int:
    """The core's plan (--onnx / --output / --opt-batch apply to it), then each second stage's from its own default ONNX."""

    def build_pipeline(pipeline: layout.Pipeline) -> None:
        for role in models.engine_roles(pipeline):
            core = role == CORE_MODEL
            build.build_engine(
                build.BuildSettings(
                    pipeline=pipeline,
                    onnx=(args.onnx if core else None) or models.default_onnx(pipeline, role),
                    output=(args.output if core else None) or models.default_plan(pipeline, role),
                    role=role,
                    opt_batch=args.opt_batch if core else None,
                    workspace_mib=args.workspace_mib,
                    timing_cache=args.timing_cache,
                    cache_dir=args.cache_dir,
                    force=args.force,
                )
            )

    return each_pipeline(args, build_pipeline)


def build_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """``build-engine``'s options."""
    parser.add_argument(
        "--onnx", type=Path, metavar="PATH", help="the Q/DQ ONNX (default: the precision the ladder chose, served_precision.json)"
    )
    parser.add_argument("--output", type=Path, metavar="PATH", help=f"where to write the plan (default: <pipeline>_core/1/{PLAN_FILENAME})")
    parser.add_argument(
        "--opt-batch",
        type=arguments.positive_int,
        metavar="N",
        help="the core's profiles' optimal batch (default: a dynamic-shape model's own, else max_batch_size)",
    )
    parser.add_argument(
        "--workspace-mib",
        type=arguments.positive_int,
        default=build.DEFAULT_WORKSPACE_MIB,
        metavar="MIB",
        help="workspace memory-pool limit (default: %(default)s)",
    )
    parser.add_argument("--timing-cache", type=Path, metavar="PATH", help="timing cache file, loaded if present and saved after")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help="plan cache: build into DIR/trt<X.Y.Z>-sm<CC>[-<gpu model>]/<pipeline>/<inputs hash>/ (skipped when current there), "
        "then copy to --output",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")


def run_verify_plan(args: argparse.Namespace) -> int:
    def verify_pipeline(pipeline: layout.Pipeline) -> None:
        for role in models.engine_roles(pipeline):
            plan = (args.plan if role == CORE_MODEL else None) or models.default_plan(pipeline, role)
            verify.verify_plan(plan, pipeline, deserialize=args.deserialize, tensorrt_version=args.tensorrt_version, role=role)

    return each_pipeline(args, verify_pipeline, verify.log_to_stderr)


def verify_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """``verify-plan``'s options."""
    parser.add_argument("--plan", type=Path, metavar="PATH", help="the plan (default: <pipeline>_core/1/model.plan)")
    parser.add_argument(
        "--deserialize", action="store_true", help="also load it with trt.Runtime and compare its I/O with <pipeline>_core/config.pbtxt"
    )
    parser.add_argument(
        "--tensorrt-version", metavar="X.Y.Z", help="the serving TensorRT version (default: the tensorrt module, else libnvinfer.so.X.Y.Z)"
    )


def run_same_tensorrt(args: argparse.Namespace) -> int:
    if args.server_version:
        server, where = args.server_version, "--server-version"
    elif args.server_library is not None:
        server, where = discovery.tensorrt_version_from_names(args.server_library), "the server image's libnvinfer files"
    else:
        server, where = discovery.tensorrt_version_from_libraries(), f"{', '.join(discovery.library_dirs())}"
    if server is None:
        raise BuildError(f"no libnvinfer.so.X.Y.Z in {where}: run this in the server image, or pass --server-version or --server-library")
    problem = discovery.release_mismatch(args.builder_version, server)
    if problem is not None:
        raise verify.VerificationError(problem)
    print(
        f"same-tensorrt: builder {args.builder_version} and server {server}: TensorRT {discovery.release(server)} in both", file=sys.stderr
    )
    return 0


def same_tensorrt_arguments(parser: argparse.ArgumentParser) -> None:
    """``same-tensorrt``'s options (it reads no pipeline)."""
    parser.add_argument("--builder-version", required=True, metavar="X.Y.Z", help="tensorrt.__version__ in the builder image")
    parser.add_argument("--server-version", metavar="X.Y.Z", help="the server image's TensorRT (default: libnvinfer.so.X.Y.Z here)")
    parser.add_argument(
        "--server-library",
        action="append",
        metavar="NAME",
        help="a libnvinfer.so.* file name found in the server image (repeat for each; symlinks included): the release is "
        "read from the versioned one (docker/check-tensorrt.sh)",
    )
