"""Which precision each model serves, as its precision ladder chose it: the one committed record the docs read.

    python -m builders select-precision --pipeline NAME    # each pipeline, niced: it is CPU-heavy
    python -m benchmarks.served_precision                   # writes benchmarks/results/served_precision.json

It gathers every model's ``served_precision.json`` (each core's and each second stage's, written by
``select-precision``; build artifacts, never committed) into ``benchmarks/results/served_precision.json``: per model
the precision it serves and the ONNX, the gate's thresholds and each rung's checks on the held-out images, the INT8
rung's quantizer (ModelOpt's version and the dtype its unquantized layers are in), and the machine that judged them.
``benchmarks/results/gpu_memory.json`` (``python -m benchmarks.capacity --gpu-memory``) estimates each plan at the
precision recorded here; ``tests/unit/benchmarks/test_served_precision.py`` holds the docs' tables and that estimate
to it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import cpu
from builders import provenance
from builders.tensorrt import models
from vision_serving import layout

RESULT = layout.REPOSITORY_ROOT / "benchmarks" / "results" / "served_precision.json"


def model_record(pipeline: layout.Pipeline, role: str) -> dict[str, Any]:
    """One model's ladder: what it serves, its gate and every rung's checks (not their raw metrics)."""
    version_dir = models.model_dir(pipeline, role) / str(models.MODEL_VERSION)
    path = version_dir / layout.SERVED_PRECISION
    if not path.is_file():
        raise FileNotFoundError(f"{path}: run python -m builders select-precision --pipeline {pipeline.name}")
    ladder = json.loads(path.read_text())
    rungs = [{"precision": r["precision"], "onnx": r["onnx"], "pass": r["pass"], "checks": r["checks"]} for r in ladder["rungs"]]
    record: dict[str, Any] = {
        "model": models.load_core_config(pipeline, role).name,
        "pipeline": pipeline.name,
        "role": role,
        "precision": ladder["precision"],
        "onnx": ladder["onnx"],
        "onnx_sha256": ladder["onnx_sha256"],
        "held_out": ladder["held_out"],
        "gate": ladder["gate"],
        "rungs": rungs,
        "judged_at": ladder["created_at"],
    }
    int8 = next((r for r in ladder["rungs"] if r["precision"] == "int8"), None)
    if int8 is not None:
        made = provenance.Provenance.read(provenance.path_for(version_dir / int8["onnx"]))
        quantizer = made.extra.get("quantizer", {}) if made is not None else {}
        record["int8_quantizer"] = {key: quantizer.get(key) for key in ("tool", "version", "high_precision_dtype", "calibration_method")}
    return record


def gather(repository: Path = layout.MODEL_REPOSITORY) -> list[dict[str, Any]]:
    """Every model served from a plan, across the repository's pipelines, with its ladder."""
    return [model_record(pipeline, role) for pipeline in layout.pipelines(repository) for role in models.engine_roles(pipeline)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.served_precision", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-repository", type=Path, default=layout.MODEL_REPOSITORY, help="the pipelines (default: %(default)s)")
    parser.add_argument("--output", type=Path, default=RESULT, help="where to write (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        gathered = gather(args.model_repository)
    except FileNotFoundError as error:
        print(f"served_precision: error: {error}", file=sys.stderr)
        return 2
    result = {
        "command": "python -m builders select-precision --pipeline NAME (each), then python -m benchmarks.served_precision",
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "judged_on": "onnxruntime on this CPU through the served pipeline; INT8 with graph optimizations disabled (Q -> DQ -> float)",
        "machine": cpu.machine(),
        "models": gathered,
    }
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    for model in gathered:
        print(f"{model['model']}: {model['precision']} ({model['onnx']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
