"""The precision ladder: serve INT8 when it passes the task's gate, else FP16, else FP32.

``python -m builders select-precision --pipeline NAME`` (run by ``all``) walks
the recipe's ``precisions`` (default int8 -> fp16 -> fp32). Each rung's model
is built (INT8: :mod:`builders.quantize`, ModelOpt Q/DQ calibrated through the
served preprocessing; FP16: onnxconverter-common's float16 conversion with FP32
inputs and outputs) and compared with FP32 on the recipe's held-out photos and
seeded augmentations of them, through the served pipeline
(:class:`vision_serving.served.ServedPipeline`: the served decoding, preprocessing and
postprocessing), with the task's own gate (``gate`` of its :mod:`vision_serving.tasks`
module, thresholds from the recipe's ``[gate]``): classification compares top-1, top-5
and logit cosine; segmentation the masks' mean IoU; detection the per-class matched
agreement and box IoU.

INT8 runs on onnxruntime with graph optimizations disabled (Q -> DQ -> float
ops, close to TensorRT's INT8; onnxruntime's fused CPU int8 kernels are wrong
on AVX2-only CPUs: docs/design.md). The first rung that passes is recorded in
``<pipeline>_core/1/served_precision.json`` with every rung's numbers;
``build-engine`` builds that ONNX, and a report goes to ``.build/reports/<pipeline>/``.

A two-stage pipeline's second stages (the recipe's ``[stages.<role>]``) have ladders of their own
(``precisions``: FP16 then FP32) and gates of their own (``gate``: the task's thresholds): each rung
lowers that model alone, the core and the other stages FP32, and the whole pipeline's answers are
compared with FP32's. The choice is recorded in ``<pipeline>_<role>/1/served_precision.json``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from builders import BuildError, Log, calibration, quantize, stderr_logger
from builders import recipe as recipes
from builders.artifacts import atomic_write_bytes, sha256_file
from builders.loaded import LoadedPipeline
from vision_serving.layout import FP16_ONNX, SERVED_PRECISION, Pipeline
from vision_serving.served import ServedPipeline
from vision_serving.tasks.base import TaskResult

log_to_stderr = stderr_logger("select-precision")


@dataclass(frozen=True)
class Rung:
    """One rung of a ladder: its ONNX, and the onnxruntime graph optimization it is judged at."""

    precision: str
    onnx: Path
    graph_optimization: str = "all"


# --------------------------------------------------------------------------- the ladder, top to bottom


def select_precision(pipeline: LoadedPipeline, log: Log = log_to_stderr) -> dict[str, Any]:
    """The core's ladder, then each second stage's: build the rungs, measure them in order on the held-out images
    until one passes the task's gate, serve that one. Writes each model's served_precision.json and the report;
    returns the core's record (with the stages' under ``stages``)."""
    started = time.perf_counter()
    recipe, folder = pipeline.recipe, pipeline.layout
    fp32 = folder.onnx("fp32")
    if not fp32.is_file():
        raise BuildError(f"{fp32} does not exist; run `python -m builders export --pipeline {pipeline.name}` first")
    served = pipeline.served(parameters=rung_parameters(fp32, "all"))
    held_out = HeldOut(pipeline, served)
    log(f"{len(held_out.samples)} held-out images ({len(set(held_out.photos))} photos + augmentations)")
    reference = Reference(served, held_out)

    # 1. Build: every rung's ONNX (each skipped when up to date).
    rungs = [build_rung(pipeline, precision, log) for precision in recipe.precisions]
    # 2. Measure and 3. decide: each rung against FP32 through the served pipeline, the first that passes.
    chosen, measured = decide(rungs, lambda rung: measure_core_rung(pipeline, held_out, reference, rung), log)
    record = ladder_record(pipeline, chosen, measured, fp32, held_out, recipe.gate)
    record["stages"] = {stage.role: select_stage_precision(pipeline, stage, held_out, reference, log) for stage in recipe.stages.values()}
    record["seconds"] = round(time.perf_counter() - started, 1)
    atomic_write_bytes(folder.served_precision, (json.dumps(record, indent=2) + "\n").encode())
    folder.reports_dir.mkdir(parents=True, exist_ok=True)
    (folder.reports_dir / "precision.md").write_text(render_markdown(record))
    log(f"serves {chosen['precision']} ({chosen['onnx']}); report: {folder.reports_dir / 'precision.md'}")
    return record


def select_stage_precision(
    pipeline: LoadedPipeline, stage: recipes.Stage, held_out: HeldOut, reference: Reference, log: Log
) -> dict[str, Any]:
    """A second stage's ladder: each rung of that model alone (the core and the other stages FP32), the
    pipeline's answers against FP32's."""
    fp32 = pipeline.layout.stage_onnx(stage.role)
    if not fp32.is_file():
        raise BuildError(f"{fp32} does not exist; run `python -m builders export --pipeline {pipeline.name}` first")
    rungs = [build_stage_rung(fp32, precision, log) for precision in stage.precisions]
    chosen, measured = decide(rungs, lambda rung: measure_stage_rung(pipeline, stage, reference, rung), log, prefix=f"{stage.role}: ")
    record = {**ladder_record(pipeline, chosen, measured, fp32, held_out, stage.gate), "stage": stage.role}
    atomic_write_bytes(fp32.with_name(SERVED_PRECISION), (json.dumps(record, indent=2) + "\n").encode())
    log(f"{stage.role}: serves {chosen['precision']} ({chosen['onnx']})")
    return record


# --------------------------------------------------------------------------- 1. build


def build_rung(pipeline: LoadedPipeline, precision: str, log: Log) -> Rung:
    """A core rung's ONNX: INT8 Q/DQ by ModelOpt (judged with graph optimizations off: TensorRT's arithmetic),
    FP16 by conversion, FP32 as exported."""
    if precision == "int8":
        return Rung(precision, quantize.quantize(pipeline, quantize.recipe_options(pipeline)).onnx_path, "disable_all")
    if precision == "fp16":
        return Rung(precision, build_fp16(pipeline.layout, log))
    return Rung(precision, pipeline.layout.onnx("fp32"))


def build_stage_rung(fp32: Path, precision: str, log: Log) -> Rung:
    """A second stage's rung: FP16 by conversion beside its FP32, or the FP32 itself."""
    return Rung(precision, build_fp16_file(fp32, fp32.with_name(FP16_ONNX), log) if precision == "fp16" else fp32)


def build_fp16(pipeline: Pipeline, log: Log) -> Path:
    """The core's FP32 ONNX -> FP16 ONNX with FP32 inputs/outputs (skipped when up to date)."""
    return build_fp16_file(pipeline.onnx("fp32"), pipeline.onnx("fp16"), log)


def build_fp16_file(source: Path, output: Path, log: Log) -> Path:
    """An FP32 ONNX -> its FP16 conversion with FP32 inputs/outputs (skipped when up to date)."""
    import onnx
    from onnxconverter_common import float16

    from builders import provenance
    from builders.artifacts import input_hash, package_versions

    inputs = {
        "onnx": sha256_file(source),
        "converter": "onnxconverter-common float16, keep_io_types, Cast targets retyped",
        "tools": package_versions(["onnxconverter-common", "onnx"]),
    }
    expected = input_hash(inputs)
    if provenance.is_current(output, expected):
        return output
    log(f"converting {source.name} to FP16 (inputs and outputs stay FP32)...")
    converted = float16.convert_float_to_float16(onnx.load(str(source)), keep_io_types=True)
    data = retype_float_casts(converted).SerializeToString()
    atomic_write_bytes(output, data)
    record = provenance.Provenance.for_bytes(
        "fp16", expected, output, data, input_hashes={"onnx": inputs["onnx"]}, tools=inputs["tools"], inputs=inputs
    )
    record.write(provenance.path_for(output))
    return output


def retype_float_casts(model: Any) -> Any:
    """The float16 converter retypes a ``Cast(to=FLOAT)``'s output to FP16 but not its ``to`` attribute, an
    invalid graph (Ultralytics' NMS has such Casts): point those Casts at FP16, as their outputs now are."""
    import onnx

    fp16 = {
        info.name for info in [*model.graph.value_info, *model.graph.output] if info.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    }
    for node in model.graph.node:
        if node.op_type == "Cast" and node.output[0] in fp16:
            for attribute in node.attribute:
                if attribute.name == "to" and attribute.i == onnx.TensorProto.FLOAT:
                    attribute.i = onnx.TensorProto.FLOAT16
    return model


# --------------------------------------------------------------------------- 2. measure


class HeldOut:
    """The held-out images and their seeded augmentations, through the served decode and preprocessing (once)."""

    def __init__(self, pipeline: LoadedPipeline, served: ServedPipeline) -> None:
        sources = calibration.evaluation_sources(pipeline)
        count = calibration.held_out_count(pipeline, sources)
        self.samples = calibration.make_samples(sources, count, calibration.EVALUATION_SEED, calibration.EVALUATION_PROFILE, served.limits)
        self.decoded = calibration.decode_samples(self.samples, served)
        self.tensors = served.preprocessed(self.decoded, served.offline_request(len(self.decoded)))
        self.photos = [s.source for s in self.samples]


def rung_parameters(path: Path, graph_optimization: str) -> dict[str, str]:
    """The core parameters a rung is measured with: its ONNX on onnxruntime (every CPU thread), and the
    graph optimization it is judged at (INT8 Q/DQ: ``disable_all``, the emulation of TensorRT's arithmetic)."""
    return {"runtime": "onnxruntime", "onnx_file": str(path), "graph_optimization": graph_optimization, "intra_op_threads": "0"}


def run_rung(pipeline: LoadedPipeline, held_out: HeldOut, path: Path, graph_optimization: str) -> TaskResult:
    """The served answers of the held-out images with this rung's core."""
    served = pipeline.served(parameters=rung_parameters(path, graph_optimization))
    return served.postprocess(served.with_core(held_out.tensors))


def measure_core_rung(pipeline: LoadedPipeline, held_out: HeldOut, reference: Reference, rung: Rung) -> dict[str, Any] | None:
    """The task's gate report of the served answers with this core against FP32's; None for FP32 (the reference)."""
    if rung.precision == "fp32":
        return None
    return pipeline.task.gate(reference.result(), run_rung(pipeline, held_out, rung.onnx, rung.graph_optimization), pipeline.recipe.gate)


def measure_stage_rung(pipeline: LoadedPipeline, stage: recipes.Stage, reference: Reference, rung: Rung) -> dict[str, Any] | None:
    """The gate report with this second-stage rung (on FP32's core outputs) against FP32's; None for FP32."""
    if rung.precision == "fp32":
        return None
    served = pipeline.served(
        parameters=rung_parameters(pipeline.layout.onnx("fp32"), "all"),
        stage_parameters={stage.role: rung_parameters(rung.onnx, rung.graph_optimization)},
    )
    return pipeline.task.gate(reference.result(), served.postprocess(reference.tensors()), stage.gate)


class Reference:
    """FP32's answers on the held-out images, computed once when a lower rung needs them; FP32's core outputs
    too (a second stage's rungs reuse them: the core stays FP32 there)."""

    def __init__(self, served: ServedPipeline, held_out: HeldOut) -> None:
        self.served, self.held_out = served, held_out
        self._tensors: dict[str, Any] | None = None
        self._result: TaskResult | None = None

    def tensors(self) -> dict[str, Any]:
        if self._tensors is None:
            self._tensors = self.served.with_core(self.held_out.tensors)
        return self._tensors

    def result(self) -> TaskResult:
        if self._result is None:
            self._result = self.served.postprocess(self.tensors())
        return self._result


# --------------------------------------------------------------------------- 3. decide


def decide(
    rungs: list[Rung], measure: Callable[[Rung], dict[str, Any] | None], log: Log, prefix: str = ""
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Each rung measured in order until one passes (FP32 always does: ``measure`` gives None for it, the
    reference). Returns the chosen rung's record and every measured rung's."""
    measured: list[dict[str, Any]] = []
    for rung in rungs:
        report = measure(rung)
        result: dict[str, Any] = report if report is not None else {"metrics": {}, "checks": {}}
        passed = all(check["pass"] for check in result["checks"].values())
        record = {"precision": rung.precision, "onnx": rung.onnx.name, "sha256": sha256_file(rung.onnx), "pass": passed, **result}
        measured.append(record)
        summary = ", ".join(f"{k} {c['value']:.4f} (min {c['min']})" for k, c in result["checks"].items()) or "the reference"
        log(f"{prefix}{rung.precision}: {'PASS' if passed else 'fail'}: {summary}")
        if passed:
            return record, measured
    raise BuildError(f"{prefix}the ladder {[rung.precision for rung in rungs]} does not end with fp32")


def ladder_record(
    pipeline: LoadedPipeline, chosen: dict[str, Any], rungs: list[dict[str, Any]], fp32: Path, held_out: HeldOut, gate: dict[str, float]
) -> dict[str, Any]:
    return {
        "pipeline": pipeline.name,
        "task": pipeline.task.name,
        "precision": chosen["precision"],
        "onnx": chosen["onnx"],
        "onnx_sha256": chosen["sha256"],
        "fp32_sha256": sha256_file(fp32),
        "held_out": {"photos": sorted(set(held_out.photos)), "images": len(held_out.samples)},
        "gate": dict(gate),
        "rungs": rungs,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


# --------------------------------------------------------------------------- the report


def render_markdown(record: dict[str, Any]) -> str:
    lines = [
        f"# Precision ladder: {record['pipeline']} ({record['task']})",
        "",
        f"Serves **{record['precision']}** (`{record['onnx']}`). Held out: {record['held_out']['images']} images "
        f"({', '.join(record['held_out']['photos'])} and seeded augmentations), never used for calibration.",
        "",
        "| rung | result | checks |",
        "|---|---|---|",
    ]
    lines += rung_rows(record["rungs"])
    for role, stage in record.get("stages", {}).items():
        lines += [
            "",
            f"## Second stage `{role}`: serves **{stage['precision']}** (`{stage['onnx']}`)",
            "",
            "| rung | result | checks |",
            "|---|---|---|",
        ]
        lines += rung_rows(stage["rungs"])
    return "\n".join(lines) + "\n"


def rung_rows(rungs: list[dict[str, Any]]) -> list[str]:
    """One table row per rung: its precision, verdict and each check."""
    rows = []
    for rung in rungs:
        checks = "; ".join(f"{k} {c['value']:.4f} (min {c['min']})" for k, c in rung["checks"].items()) or "reference"
        rows.append(f"| {rung['precision']} | {'pass' if rung['pass'] else 'fail'} | {checks} |")
    return rows


def add_arguments(parser: Any) -> None:
    del parser  # the recipe holds the options


def run_from_args(args: Any) -> int:
    select_precision(args.loaded)
    return 0
