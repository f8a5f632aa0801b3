"""``python -m builders <step>``: one subcommand per build step, each a :class:`builders.step.Step` in :data:`STEPS`.

A step's options and run are functions of its own module (``add_arguments``, ``run_from_args``, by convention; the
options of a step whose module imports onnx, here),
imported only when it is chosen, so ``--help`` stays instant; its run gets the chosen pipeline loaded once
(``args.loaded``: :class:`builders.loaded.LoadedPipeline`) unless it picks its own. Adding a step: its module's two
functions and one entry here.

Exit codes: 0 success, 1 a check failed, 2 user error (missing file, bad configuration, bad arguments). Errors
print one ``error: ...`` line to stderr, never a traceback; progress lines also go to stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from builders import arguments, step
from builders.step import Step
from vision_serving.layout import INT8_ONNX, PLAN


def export_arguments(parser: argparse.ArgumentParser) -> None:
    """``python -m builders export``'s options."""
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")


def check_arguments(parser: argparse.ArgumentParser) -> None:
    """``python -m builders check``'s options."""
    parser.add_argument(
        "model", type=Path, nargs="?", metavar="MODEL.onnx", help="the ONNX model to check (default: <pipeline>_core/1/model.onnx)"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--max-batch", type=arguments.positive_int, metavar="N", help="the max batch it will be built for (default: the range fix recorded)"
    )


def fix_arguments(parser: argparse.ArgumentParser) -> None:
    """``python -m builders fix``'s options."""
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


PROG = "python -m builders"
DESCRIPTION = "Build the model repository's artifacts."

STEPS: tuple[Step, ...] = (
    Step(
        "export",
        "make the pipeline's core ONNX from its recipe's source, verify it, write provenance",
        "Convert the recipe's source model (pipeline.toml [source]) to <pipeline>_core/1/model.onnx, apply the recipe's fix "
        "passes, and verify the result against the source runtime on real photos (names and dims from the core's "
        "config.pbtxt). Does nothing when the recorded input hash is unchanged.",
        "builders.cli:export_arguments",
        "builders.export:run_from_args",
    ),
    Step(
        "check",
        "report what TensorRT 10.x/11.x will not accept in an ONNX model (exit 1 when a build is blocked)",
        "Check an ONNX model against TensorRT's ONNX parser (the ops with an importer and the types each importer accepts, "
        "from onnx-tensorrt's importers; attribute restrictions), custom-domain ops, asymmetric/uint8 Q/DQ, I/O types, "
        "dynamic dims and the batch range, and shape subgraphs that constant folding removes. Each finding has a severity "
        "(error blocks a build), a code, the node and the fix pass that repairs it. Exit 1 when there is an error.",
        "builders.cli:check_arguments",
        "builders.trt_compat:run_from_args",
        pipelines=arguments.model_file_or_one,
    ),
    Step(
        "fix",
        "graph surgery for TensorRT: named passes, each verified on onnxruntime",
        "Rewrite an ONNX model with named onnx-graphsurgeon passes (default: all, in the order of "
        "builders.passes.registry.DEFAULT_PASSES). After each pass that changed something, the model before and after run "
        "on onnxruntime with the same random input; any output difference beyond the tolerance fails the step and nothing "
        "is written. Names, dims and max_batch_size come from <pipeline>_core/config.pbtxt. In place (OUT = IN), a model no "
        "pass changes is left untouched.",
        "builders.cli:fix_arguments",
        "builders.fix_onnx:run_from_args",
    ),
    Step(
        "quantize",
        "INT8 Q/DQ ONNX with NVIDIA ModelOpt, calibrated through the served preprocessing",
        f"Quantize <pipeline>_core/1/model.onnx to <pipeline>_core/1/{INT8_ONNX} (explicit INT8: symmetric Q/DQ, int8, "
        "per-channel weights; the layers it leaves unquantized in FP16) with ModelOpt on CPU, calibrated on augmented "
        "package photos (never the held-out evaluation photos) or --calibration-dir, decoded and preprocessed by the served "
        "code. Verifies the Q/DQ properties and writes a provenance JSON beside the model. Does nothing when the inputs are "
        "unchanged.",
        "builders.quantize:add_arguments",
        "builders.quantize:run_from_args",
    ),
    Step(
        "evaluate",
        "accuracy: your labelled --dataset (FP32 vs served precision), or the task's gate for INT8 (or --candidate)",
        "With --dataset DIR: the task's metric on your labelled images (classification: class-per-folder, top-1/top-5 "
        "accuracy; segmentation: image + <name>.mask.png pairs, mIoU; detection: images with YOLO labels, "
        "precision/recall/AP50) for FP32 and for the precision the ladder chose. Without: the task's precision gate, FP32 "
        "against the INT8 Q/DQ model (or --candidate; onnxruntime, graph optimizations disabled for Q/DQ) on held-out "
        "photos (classification: top-1 agreement, top-5 overlap, logit cosine; segmentation: mask IoU; detection: matched "
        "boxes); --server-url measures a running server instead. Reports go to .build/reports/<pipeline>/.",
        "builders.evaluate:add_arguments",
        "builders.evaluate:run_from_args",
    ),
    Step(
        "select-precision",
        "the precision ladder: INT8 if it passes the task's gate, else FP16, else FP32",
        "Build each rung of the recipe's precision ladder (INT8 Q/DQ, FP16, FP32) and compare it with FP32 on the recipe's "
        "held-out photos through the served preprocessing, with the task's metric (classification: top-1/top-5/cosine; "
        "segmentation: mean IoU of the served masks; detection: matched boxes). Writes served_precision.json beside the "
        "core's ONNX (what build-engine builds) and .build/reports/<pipeline>/precision.md.",
        "builders.precision:add_arguments",
        "builders.precision:run_from_args",
    ),
    Step(
        "drift-reference",
        "the drift monitors' reference: held-out photos (or --photos DIR: yours) through the served code path",
        "Run the precision ladder's held-out photos and their seeded augmentations through the served decode, "
        "preprocessing, core ONNX (as configs/cpu.pbtxt serves it) and postprocessing, in-process, and write the preprocess "
        "and postprocess models' drift features to <pipeline>_core/<version>/drift_reference.json (the highest version). "
        "With --photos DIR, your own representative photos (e.g. a sample of your traffic) instead, unaugmented; that "
        "reference is kept (never replaced by the held-out one) until you rebuild it or the model changes. Does nothing "
        "when the recorded input hash is unchanged.",
        "builders.drift_reference:add_arguments",
        "builders.drift_reference:run_from_args",
    ),
    Step(
        "build-engine",
        "build each core's TensorRT plan (strongly typed, at the precision the ladder chose) and its provenance",
        f"Build <pipeline>_core/1/{PLAN} (every pipeline's, without --pipeline) for this GPU and TensorRT (10.8+ or 11) from "
        "the ONNX the precision ladder chose (served_precision.json): a strongly typed network, batch profile "
        f"1..max_batch_size of <pipeline>_core/config.pbtxt, a timing cache, and {PLAN}.json beside the plan. Skips the "
        "build when the plan is current. Needs TensorRT (the builder image docker/builder.Dockerfile) and a GPU.",
        "builders.tensorrt.cli:build_engine_arguments",
        "builders.tensorrt.cli:run_build_engine",
        pipelines=arguments.every_or_one,
    ),
    Step(
        "verify-plan",
        "check a plan's provenance against this GPU and TensorRT (exit 1 on mismatch)",
        "Compare model.plan.json with the machine: the plan's sha256, the TensorRT release (major.minor.patch must match; "
        "the build number may differ) and the compute capability of every visible GPU. For a Kubernetes init container: "
        "one line and exit 1 on a mismatch, exit 0 when the plan can be served.",
        "builders.tensorrt.cli:verify_plan_arguments",
        "builders.tensorrt.cli:run_verify_plan",
        pipelines=arguments.every_or_one,
    ),
    Step(
        "same-tensorrt",
        "check that the builder image's TensorRT release is the server image's (exit 1 when not)",
        "Compare the builder image's tensorrt.__version__ with the server image's libnvinfer.so.X.Y.Z (major.minor.patch). "
        "docker/server.Dockerfile runs it while it builds, so a server image that could not load the builder's plans is "
        "never built; docker/check-tensorrt.sh runs it on the two upstream images before you build.",
        "builders.tensorrt.cli:same_tensorrt_arguments",
        "builders.tensorrt.cli:run_same_tensorrt",
        pipelines=arguments.its_own,
        common=False,
    ),
    Step(
        "all",
        "every pipeline (or --pipeline NAME): export -> check -> select-precision -> check -> drift-reference",
        "Run every CPU build step of every pipeline in order, with the options of its recipe; each step skips itself when "
        "up to date. The precision ladder then picks what the pipeline serves (INT8, else FP16, else FP32).",
        "builders.build_all:add_arguments",
        "builders.build_all:run_from_args",
        pipelines=arguments.its_own,
    ),
    Step(
        "new-pipeline",
        "start a pipeline folder: from an existing pipeline, or from your model file (--from yolo --model FILE)",
        "Copy model_repository/TEMPLATE's spec (pipeline.toml) and the files its build needs to model_repository/NAME "
        "(--from a pipeline), or write the spec of a model file of a family (--from yolo --model FILE.onnx: the head, input "
        "size and class names from Ultralytics' ONNX metadata, else the shapes and --labels); then generate every config "
        "from the spec.",
        "builders.scaffold:add_arguments",
        "builders.scaffold:run_from_args",
        pipelines=arguments.its_own,
        common=False,
    ),
    Step(
        "configs",
        "write every Triton config of a pipeline folder (and its Python models' entry points) from its pipeline.toml",
        "Generate every model's config.pbtxt (the ensemble, the preprocess, the core, the postprocess, the second stages), "
        "each core's CPU variants (configs/<variant>.pbtxt, from the CPU runtimes' registry and the spec's [core.cpu]) and "
        "the Python models' 1/model.py from the pipeline's pipeline.toml and the serving library's defaults. A new input "
        "size or class count: edit the core's tensors in pipeline.toml, then run this.",
        "builders.model_configs:add_arguments",
        "builders.model_configs:run_from_args",
        pipelines=arguments.its_own,
    ),
)


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The command line, with ``chosen``'s options (None: every step's)."""
    return step.parser(PROG, DESCRIPTION, STEPS, chosen)


def main(argv: Sequence[str] | None = None) -> int:
    return step.main(PROG, DESCRIPTION, STEPS, list(sys.argv[1:] if argv is None else argv))
