"""The ``evaluate`` step: the task's precision gate for one candidate, FP32 against it on held-out photos.

The held-out set is the recipe's ``[quantize] evaluation_photos`` (never used for calibration),
as shipped, plus seeded augmentations of them (a milder profile and another seed than
calibration's), all sent through the served pipeline (:class:`vision_serving.served.ServedPipeline`).
FP32 (onnxruntime, every graph optimization) is the reference; the candidate is

- an ONNX model (default: the INT8 Q/DQ model; ``--candidate PATH``), run on onnxruntime with
  graph optimizations disabled for a Q/DQ model (Q -> DQ -> float ops, close to TensorRT's INT8
  numerics; the fused CPU int8 kernels of AVX2-only machines are not, docs/design.md), or
- with ``--server-url``, the pipeline's ensemble on a running server (gRPC): its answers, so what
  is served is what is measured (the task compares what a response holds: a classifier's
  response has no logits, so no cosine).

The task's own gate (:mod:`vision_serving.tasks`) judges it, on the raw photos and on all images,
with the recipe's ``[gate]`` thresholds (``--gate KEY=VALUE`` overrides one). Writes
``.build/reports/<pipeline>/evaluation[_server].{json,md}``; a failed gate exits 1.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from builders import BuildError, CheckFailed, Log, calibration, precision, stderr_logger
from builders.artifacts import atomic_write_bytes, sha256_file
from builders.loaded import LoadedPipeline
from vision_serving import model_config
from vision_serving.served import ServedPipeline, ensemble_steps
from vision_serving.tasks.base import TaskResult, thresholds

# 48 x 11 + 11 = 539 images (~30 s for the classifier). With 24 per photo (275 images) one model read
# 96.4 % top-1 agreement where 1067 images read 95.3 %: the larger set is the steadier gate.
DEFAULT_AUGMENTED_PER_PHOTO = 48

log_to_stderr = stderr_logger("evaluate")


class GateFailed(CheckFailed):
    """The candidate departs from FP32 more than the thresholds allow."""


@dataclass(frozen=True)
class EvaluationSet:
    raw: list[calibration.Sample]
    augmented: list[calibration.Sample]
    seed: int

    @property
    def all(self) -> list[calibration.Sample]:
        return self.raw + self.augmented


def evaluation_set(
    pipeline: LoadedPipeline, augmented_per_photo: int = DEFAULT_AUGMENTED_PER_PHOTO, seed: int = calibration.EVALUATION_SEED
) -> EvaluationSet:
    """The held-out photos as shipped, and ``augmented_per_photo`` augmentations of each."""
    limits = pipeline.configs.limits
    sources = calibration.evaluation_sources(pipeline)
    raw = calibration.make_samples(sources, len(sources), seed, calibration.EVALUATION_PROFILE, limits)
    augmented = (
        calibration.make_samples(
            sources, len(sources) * augmented_per_photo, seed, calibration.EVALUATION_PROFILE, limits, include_originals=False
        )
        if augmented_per_photo > 0
        else []
    )
    return EvaluationSet(raw, augmented, seed)


def gate_overrides(items: Sequence[str] | None) -> dict[str, float]:
    """``KEY=VALUE`` command-line thresholds -> a mapping (``BuildError`` for a malformed one)."""
    values = {}
    for item in items or ():
        key, _, value = item.partition("=")
        try:
            values[key.strip()] = float(value)
        except ValueError:
            raise BuildError(f"--gate {item!r}: expected KEY=NUMBER, e.g. min_top1=0.9") from None
    return values


def _local(served: ServedPipeline, pipeline: LoadedPipeline, samples: Sequence[calibration.Sample], candidate: Path) -> TaskResult:
    optimization = "disable_all" if _is_qdq(candidate) else "all"
    rung = pipeline.served(parameters=precision.rung_parameters(candidate, optimization))
    decoded = calibration.decode_samples(samples, served)
    return rung.postprocess(rung.with_core(served.preprocessed(decoded, served.offline_request(len(decoded)))))


def _is_qdq(path: Path) -> bool:
    import onnx

    return any(node.op_type == "QuantizeLinear" for node in onnx.load(str(path), load_external_data=False).graph.node)


def served_result(server_url: str, pipeline: LoadedPipeline, samples: Sequence[calibration.Sample]) -> TaskResult:
    """The pipeline's ensemble on a running server (gRPC) answering ``samples``, as a result the task's gate compares."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException, np_to_triton_dtype

    configs = pipeline.configs
    post = configs.postprocessor()
    step = ensemble_steps(configs)["postprocess"]
    # Ensemble names: the image input, the optional inputs the gate asks for, every output by the task's role.
    image_name = model_config.image_input_name(configs.ensemble)
    extra = {step.inputs[post.inputs[role] or ""]: value for role, value in pipeline.task.gate_request(len(samples)).items()}
    outputs = {role: step.outputs[name] for role, name in post.outputs.items() if name is not None}
    client = grpcclient.InferenceServerClient(server_url)
    try:
        if not client.is_model_ready(pipeline.name):
            raise BuildError(f"{pipeline.name} is not ready on {server_url}")
        max_batch = int(client.get_model_config(pipeline.name).config.max_batch_size) or 1
    except InferenceServerException as error:
        raise BuildError(f"cannot reach the server at {server_url}: {error.message()}") from None
    parts: dict[str, list[np.ndarray]] = {role: [] for role in outputs}
    for start in range(0, len(samples), max_batch):
        part = samples[start : start + max_batch]
        image = grpcclient.InferInput(image_name, [len(part), 1], "BYTES")
        image.set_data_from_numpy(np.array([sample.data for sample in part], dtype=np.object_).reshape(-1, 1))
        inputs = [image]
        for name, value in extra.items():
            tensor = grpcclient.InferInput(name, list(value[start : start + len(part)].shape), np_to_triton_dtype(value.dtype))
            tensor.set_data_from_numpy(value[start : start + len(part)])
            inputs.append(tensor)
        try:
            response = client.infer(pipeline.name, inputs)
        except InferenceServerException as error:
            raise BuildError(f"{pipeline.name} on {server_url} failed: {error.message()}") from None
        for role, name in outputs.items():
            parts[role].append(response.as_numpy(name))
    return pipeline.task.response_result(post, {role: _stack(values) for role, values in parts.items()})


def _stack(values: list[np.ndarray]) -> np.ndarray:
    """Per-request arrays [n, k, ...] padded to one k (detections) and concatenated."""
    width = max((value.shape[1] if value.ndim > 1 else 0) for value in values)
    padded = []
    for value in values:
        if value.ndim > 1 and value.shape[1] < width:
            pad = [(0, 0), (0, width - value.shape[1])] + [(0, 0)] * (value.ndim - 2)
            value = np.pad(value, pad, constant_values=b"" if value.dtype == np.object_ else 0)
        padded.append(value)
    return np.concatenate(padded)


def render_markdown(report: dict[str, Any]) -> str:
    verdict = "PASS" if report["gate"]["pass"] else "FAIL"
    lines = [
        f"# Precision gate of {report['pipeline']} ({report['task']}): {verdict}",
        "",
        (
            f"FP32 `{report['fp32']['file']}` (onnxruntime) vs {report['candidate']['description']}, on held-out photos never "
            f"used for calibration ({', '.join(report['evaluation_set']['photos'])}) and {report['evaluation_set']['augmented_per_photo']} "
            f"seeded augmentations of each (seed {report['evaluation_set']['seed']}), through the served pipeline."
        ),
        "",
        "| set | check | value | minimum | |",
        "|---|---|---|---|---|",
    ]
    for name, part in report["sets"].items():
        for check, value in part["checks"].items():
            lines.append(f"| {name} | {check} | {value['value']:.4f} | {value['min']} | {'pass' if value['pass'] else '**FAIL**'} |")
    lines += ["", f"Gated on `{report['gate']['set']}`. Every metric is in the JSON report beside this one."]
    return "\n".join(lines) + "\n"


def _report(
    pipeline: LoadedPipeline,
    server_url: str | None,
    record: Mapping[str, Any],
    augmented_per_photo: int,
    results: dict[str, dict[str, Any]],
    gate: dict[str, Any],
    limits: Mapping[str, float],
    started: float,
) -> dict[str, Any]:
    """The evaluation's JSON report: what was compared, on which images, and every check."""
    fp32, candidate, samples = record["fp32"], record["candidate"], record["samples"]
    return {
        "step": "evaluate",
        "pipeline": pipeline.name,
        "task": pipeline.task.name,
        "mode": "server" if server_url else "local",
        "server_url": server_url,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "fp32": {"file": fp32.name, "sha256": sha256_file(fp32)},
        "candidate": {
            "description": record["description"],
            **({} if server_url else {"file": candidate.name, "sha256": sha256_file(candidate)}),
        },
        "evaluation_set": {
            "photos": [s.source for s in samples.raw],
            "augmented_per_photo": augmented_per_photo,
            "seed": record["seed"],
            "profile": asdict(calibration.EVALUATION_PROFILE),
            "calibration_photos_excluded": list(calibration.photo_split(pipeline)[0]),
        },
        "sets": results,
        "gate": gate,
        "thresholds": dict(limits),
        "seconds": round(time.perf_counter() - started, 1),
    }


def evaluate(
    pipeline: LoadedPipeline,
    candidate: Path | None = None,
    fp32: Path | None = None,
    augmented_per_photo: int = DEFAULT_AUGMENTED_PER_PHOTO,
    seed: int = calibration.EVALUATION_SEED,
    overrides: Mapping[str, float] | None = None,
    server_url: str | None = None,
    reports_dir: Path | None = None,
    log: Log = log_to_stderr,
) -> dict[str, Any]:
    """Measure, write the reports, return the report; raises ``GateFailed`` when the gate fails."""
    started = time.perf_counter()
    task, folder = pipeline.task, pipeline.layout
    fp32 = Path(fp32) if fp32 else folder.onnx("fp32")
    candidate = Path(candidate) if candidate else folder.onnx("int8")
    for path, step in ((fp32, "export"), *(() if server_url else ((candidate, "quantize"),))):
        if not path.is_file():
            raise BuildError(f"{path} does not exist; run `python -m builders {step}` first")
    try:
        limits = thresholds(pipeline.recipe.gate, overrides or {}, "--gate")
    except ValueError as error:
        raise BuildError(str(error)) from None
    samples = evaluation_set(pipeline, augmented_per_photo, seed)
    description = f"served `{pipeline.name}` at {server_url}" if server_url else f"`{candidate.name}` (onnxruntime)"
    log(f"{len(samples.raw)} held-out photos + {len(samples.augmented)} augmentations (seed {seed}); candidate {description}")
    reference = pipeline.served(parameters=precision.rung_parameters(fp32, "all"))
    sets = {"raw": samples.raw, "all": samples.all}
    results: dict[str, dict[str, Any]] = {}
    for name, part in sets.items():
        decoded = calibration.decode_samples(part, reference)
        expected = reference.postprocess(reference.with_core(reference.preprocessed(decoded, reference.offline_request(len(decoded)))))
        measured = served_result(server_url, pipeline, part) if server_url else _local(reference, pipeline, part, candidate)
        results[name] = task.gate(expected, measured, limits)
    gate = {"set": "all", "pass": all(check["pass"] for check in results["all"]["checks"].values()), "checks": results["all"]["checks"]}
    record = {"fp32": fp32, "candidate": candidate, "description": description, "samples": samples, "seed": seed}
    report = _report(pipeline, server_url, record, augmented_per_photo, results, gate, limits, started)
    reports = reports_dir or folder.reports_dir
    stem = "evaluation_server" if server_url else "evaluation"
    reports.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(reports / f"{stem}.json", (json.dumps(report, indent=2, default=float) + "\n").encode())
    atomic_write_bytes(reports / f"{stem}.md", render_markdown(report).encode())
    summary = "; ".join(
        f"{name}: " + ", ".join(f"{k} {c['value']:.4f}" for k, c in part["checks"].items()) for name, part in results.items()
    )
    log(f"{summary} ({report['seconds']} s); report: {reports / (stem + '.md')}")
    if not gate["pass"]:
        failed = [f"{name} {c['value']:.4f} < {c['min']}" for name, c in gate["checks"].items() if not c["pass"]]
        raise GateFailed(
            f"the precision gate failed on {len(samples.all)} held-out images: {', '.join(failed)}; see {reports / (stem + '.md')}"
        )
    log("gate passed")
    return report


def add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--dataset", type=Path, metavar="DIR", help="your labelled images: the task's metric of FP32 and of the served precision"
    )
    parser.add_argument("--candidate", type=Path, metavar="PATH", help="the ONNX judged against FP32 (default: core/1/model_int8_qdq.onnx)")
    parser.add_argument("--fp32", type=Path, metavar="PATH", help="FP32 reference ONNX (default: core/1/model.onnx)")
    parser.add_argument(
        "--augmented-per-photo",
        type=int,
        default=DEFAULT_AUGMENTED_PER_PHOTO,
        metavar="N",
        help="augmentations of each held-out photo (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=calibration.EVALUATION_SEED, help="augmentation seed (default: %(default)s)")
    parser.add_argument(
        "--gate",
        action="append",
        metavar="KEY=VALUE",
        help="override one of the recipe's [gate] thresholds (repeatable), e.g. min_top1=0.9",
    )
    parser.add_argument(
        "--server-url",
        metavar="HOST:PORT",
        help="judge the pipeline's ensemble on a running server (gRPC, e.g. localhost:8001) against the local FP32 reference",
    )
    parser.add_argument("--reports-dir", type=Path, metavar="DIR", help="where the reports go (default: .build/reports/<pipeline>)")


def run_from_args(args: Any) -> int:
    if args.dataset is not None:
        from builders import dataset_eval

        dataset_eval.evaluate_dataset(args.loaded, args.dataset)
        return 0
    evaluate(
        args.loaded,
        candidate=args.candidate,
        fp32=args.fp32,
        augmented_per_photo=args.augmented_per_photo,
        seed=args.seed,
        overrides=gate_overrides(args.gate),
        server_url=args.server_url,
        reports_dir=args.reports_dir,
    )
    return 0
