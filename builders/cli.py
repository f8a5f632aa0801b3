"""``python -m builders <step>``: one subcommand per build step.

Steps are added by writing an ``_add_<step>`` function that registers a
subparser whose ``run`` default returns an exit code, and listing it in
``STEPS``. A step's ``run`` gets the chosen pipeline loaded once
(``args.loaded``: :class:`builders.loaded.LoadedPipeline`). Heavy imports
(torch, onnx) happen inside ``run`` so ``--help`` stays instant.

Exit codes: 0 success, 1 a check failed, 2 user error (missing file, bad
configuration, bad arguments). Errors print one ``error: ...`` line to
stderr, never a traceback; progress lines also go to stderr.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

from builders import arguments, model_configs, tensorrt_engine

StepAdder = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]", argparse.ArgumentParser], None]


def _run_export(args: argparse.Namespace) -> int:
    from builders import export

    export.export(args.loaded, force=args.force)
    return 0


def _add_export(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "export",
        parents=[common],
        help="make the pipeline's core ONNX from its recipe's source, verify it, write provenance",
        description=(
            "Convert the recipe's source model (pipeline.toml [source]) to <pipeline>_core/1/model.onnx, apply the "
            "recipe's fix passes, and verify the result against the source runtime on real photos (names and dims "
            "from the core's config.pbtxt). Does nothing when the recorded input hash is unchanged."
        ),
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.set_defaults(run=_run_export)


def _add_quantize(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    from builders import quantize

    parser = subparsers.add_parser(
        "quantize",
        parents=[common],
        help="INT8 Q/DQ ONNX with NVIDIA ModelOpt, calibrated through the served preprocessing",
        description=(
            f"Quantize <pipeline>_core/1/model.onnx to <pipeline>_core/1/{quantize.INT8_FILENAME} (explicit INT8: symmetric Q/DQ, int8, "
            "per-channel weights) with ModelOpt on CPU, calibrated on augmented package photos (never the held-out "
            "evaluation photos) or --calibration-dir, decoded and preprocessed by the served code. Verifies the Q/DQ "
            "properties and writes a provenance JSON beside the model. Does nothing when the inputs are unchanged."
        ),
    )
    quantize.add_arguments(parser)
    parser.set_defaults(run=quantize.run_from_args)


def _add_evaluate(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    from builders import evaluate

    parser = subparsers.add_parser(
        "evaluate",
        parents=[common],
        help="accuracy: your labelled --dataset (FP32 vs served precision), or the task's gate for INT8 (or --candidate)",
        description=(
            "With --dataset DIR: the task's metric on your labelled images (classification: class-per-folder, top-1/"
            "top-5 accuracy; segmentation: image + <name>.mask.png pairs, mIoU; detection: images with YOLO labels, "
            "precision/recall/AP50) for FP32 and for the precision the ladder chose. Without: the task's precision "
            "gate, FP32 against the INT8 Q/DQ model (or --candidate; onnxruntime, graph optimizations disabled for "
            "Q/DQ) on held-out photos (classification: top-1 agreement, top-5 overlap, logit cosine; segmentation: "
            "mask IoU; detection: matched boxes); --server-url measures a running server instead. Reports go to "
            ".build/reports/<pipeline>/."
        ),
    )
    evaluate.add_arguments(parser)
    parser.set_defaults(run=evaluate.run_from_args)


def _add_select_precision(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    from builders import precision

    parser = subparsers.add_parser(
        "select-precision",
        parents=[common],
        help="the precision ladder: INT8 if it passes the task's gate, else FP16, else FP32",
        description=(
            "Build each rung of the recipe's precision ladder (INT8 Q/DQ, FP16, FP32) and compare it with FP32 on the "
            "recipe's held-out photos through the served preprocessing, with the task's metric (classification: "
            "top-1/top-5/cosine; segmentation: mean IoU of the served masks; detection: matched boxes). Writes "
            "served_precision.json beside "
            "the core's ONNX (what build-engine builds) and .build/reports/<pipeline>/precision.md."
        ),
    )
    precision.add_arguments(parser)
    parser.set_defaults(run=precision.run_from_args)


def _add_drift_reference(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    from builders import drift_reference

    parser = subparsers.add_parser(
        "drift-reference",
        parents=[common],
        help="the drift monitors' reference: held-out photos (or --photos DIR: yours) through the served code path",
        description=(
            "Run the precision ladder's held-out photos and their seeded augmentations through the served decode, "
            "preprocessing, core ONNX (as configs/cpu.pbtxt serves it) and postprocessing, in-process, and write the "
            "preprocess and postprocess models' drift features to <pipeline>_core/<version>/drift_reference.json "
            "(the highest version). With --photos DIR, your own representative photos (e.g. a sample of your "
            "traffic) instead, unaugmented; that reference is kept (never replaced by the held-out one) until you "
            "rebuild it or the model changes. Does nothing when the recorded input hash is unchanged."
        ),
    )
    drift_reference.add_arguments(parser)
    parser.set_defaults(run=drift_reference.run_from_args)


def _add_new_pipeline(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    def run(args: argparse.Namespace) -> int:
        from builders import scaffold

        scaffold.new_pipeline(
            args.name, args.template, args.model_repository, model=args.model, labels=args.labels, head=args.head, imgsz=args.imgsz
        )
        return 0

    del common  # --pipeline names a pipeline to build: the new one is the positional NAME
    parser = subparsers.add_parser(
        "new-pipeline",
        help="start a pipeline folder: from an existing pipeline, or from your model file (--from yolo --model FILE)",
        description=(
            "Copy model_repository/TEMPLATE to model_repository/NAME, renaming its ensemble and models (--from a pipeline), "
            "or write a complete pipeline for a model file of a family (--from yolo --model FILE.onnx: the head, input size "
            "and class names from Ultralytics' ONNX metadata, else the shapes and --labels)."
        ),
    )
    parser.add_argument("name", help="the new pipeline (and ensemble) name: lower-case letters, digits, _")
    arguments.add_model_repository(parser, "the model repository to add it to")
    parser.add_argument("--from", dest="template", required=True, metavar="TEMPLATE", help="a pipeline to copy, or a model family: yolo")
    parser.add_argument("--model", type=Path, metavar="FILE", help="--from yolo: the ONNX export to serve (copied into the folder)")
    parser.add_argument("--labels", type=Path, metavar="FILE", help="--from yolo: class names, one per line (default: the export's names)")
    parser.add_argument("--head", metavar="HEAD", help="--from yolo: yolo, yolo_v5 or end2end, when the output's shape fits two")
    parser.add_argument("--imgsz", metavar="H,W", help="--from yolo: the input size when the export's is dynamic and has no imgsz metadata")
    parser.set_defaults(run=run)


def _run_all(args: argparse.Namespace) -> int:
    from builders import build_all

    return build_all.run_from_args(args)


def _add_all(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "all",
        parents=[common],
        help="every pipeline (or --pipeline NAME): export -> check -> select-precision -> check -> drift-reference",
        description=(
            "Run every CPU build step of every pipeline in order, with the options of its recipe; each step skips "
            "itself when up to date. The precision ladder then picks what the pipeline serves (INT8, else FP16, else FP32)."
        ),
    )
    parser.add_argument("--force", action="store_true", help="rebuild every step even if up to date")
    parser.set_defaults(run=_run_all)


def _core_onnx(args: argparse.Namespace) -> Path:
    """The export step's ONNX (<pipeline>_core/1/model.onnx): what check and fix work on by default."""
    return args.loaded.layout.onnx("fp32")


def _run_check(args: argparse.Namespace) -> int:
    import json

    from builders import trt_compat

    report = trt_compat.check_file(args.model or _core_onnx(args), max_batch=args.max_batch)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.format_text())
    return 1 if report.blocking else 0


def _add_check(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "check",
        parents=[common],
        help="report what TensorRT 10.x/11.x will not accept in an ONNX model (exit 1 when a build is blocked)",
        description=(
            "Check an ONNX model against TensorRT's ONNX operator support (onnx-tensorrt's table, attribute and "
            "type restrictions), custom-domain ops, asymmetric/uint8 Q/DQ, I/O types, dynamic dims and the batch "
            "range, and shape subgraphs that constant folding removes. Each finding has a severity (error blocks "
            "a build), a code, the node and the fix pass that repairs it. Exit 1 when there is an error."
        ),
    )
    parser.add_argument(
        "model", type=Path, nargs="?", metavar="MODEL.onnx", help="the ONNX model to check (default: <pipeline>_core/1/model.onnx)"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--max-batch", type=arguments.positive_int, metavar="N", help="the max batch it will be built for (default: the range fix recorded)"
    )
    parser.set_defaults(run=_run_check)


def _run_fix(args: argparse.Namespace) -> int:
    from builders import fix_onnx

    names = fix_onnx.parse_pass_list(args.passes)
    atol = fix_onnx.DEFAULT_ATOL if args.atol is None else args.atol
    rtol = fix_onnx.DEFAULT_RTOL if args.rtol is None else args.rtol
    options = fix_onnx.options_for_core(args.loaded.configs.core(), args.max_batch, args.opt_batch, atol, rtol)
    source = args.input or _core_onnx(args)
    fix_onnx.fix_file(source, args.output or source, names, options, force=args.force)
    return 0


def _add_fix(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "fix",
        parents=[common],
        help="graph surgery for TensorRT: named passes, each verified on onnxruntime",
        description=(
            "Rewrite an ONNX model with named onnx-graphsurgeon passes (default: all, in the order of "
            "builders.passes.registry.DEFAULT_PASSES). After each pass that changed something, the model before and after "
            "run on onnxruntime with the same random input; any output difference beyond the tolerance fails the "
            "step and nothing is written. Names, dims and max_batch_size come from <pipeline>_core/config.pbtxt. "
            "In place (OUT = IN), a model no pass changes is left untouched."
        ),
    )
    parser.add_argument("input", type=Path, nargs="?", metavar="IN.onnx", help="the model to fix (default: <pipeline>_core/1/model.onnx)")
    parser.add_argument("output", type=Path, nargs="?", metavar="OUT.onnx", help="where to write the fixed model (default: IN, in place)")
    parser.add_argument("--passes", metavar="A,B,...", help="comma-separated passes to run, in order (default: all, as above)")
    parser.add_argument(
        "--max-batch",
        type=arguments.positive_int,
        metavar="N",
        help="batch range max recorded by batch_dimension (default: max_batch_size)",
    )
    parser.add_argument("--opt-batch", type=arguments.positive_int, metavar="N", help="batch range opt (default: the max)")
    parser.add_argument("--atol", type=float, metavar="X", help="absolute output tolerance (default: 1e-4)")
    parser.add_argument("--rtol", type=float, metavar="X", help="relative output tolerance (default: 1e-4)")
    parser.add_argument("--force", action="store_true", help="rewrite OUT even when no pass changed anything in place")
    parser.set_defaults(run=_run_fix)


STEPS: tuple[StepAdder, ...] = (
    _add_export,
    _add_check,
    _add_fix,
    _add_quantize,
    _add_evaluate,
    _add_select_precision,
    _add_drift_reference,
    tensorrt_engine.add_build_engine_step,
    tensorrt_engine.add_verify_plan_step,
    _add_all,
    _add_new_pipeline,
    model_configs.add_step,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m builders", description="Build the model repository's artifacts.")
    subparsers = parser.add_subparsers(title="steps", dest="step", required=True, metavar="STEP")
    common = arguments.common_options()
    for add_step in STEPS:
        add_step(subparsers, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return arguments.run(build_parser().parse_args(argv))


run = arguments.run  # a parsed step: one ``error:`` line and an exit code instead of a traceback
