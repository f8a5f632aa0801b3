"""The ``evaluate`` step: the INT8 accuracy gate, FP32 vs INT8 on held-out photos.

The held-out set is the recipe's ``[quantize] evaluation_photos`` (never used for
calibration), as shipped, plus seeded augmentations of them (a milder profile
and another seed than calibration's), all sent through the served decoder and
preprocessing. Reported separately for the raw photos and the augmented ones,
and gated on all of them together:

- top-1 agreement: INT8's top-1 class equals FP32's;
- top-5 overlap: |top-5(INT8) ∩ top-5(FP32)| / 5, averaged;
- cosine similarity of the logit vectors, averaged.

Locally the INT8 Q/DQ model runs on onnxruntime with graph optimizations
disabled (Q -> DQ -> float ops, close to TensorRT's INT8 numerics; the fused
CPU int8 kernels of these AVX2 machines are not, docs/design.md §3) and FP32 with
all optimizations. With ``--server-url`` the encoded images go to a running
server's ``image_classifier`` ensemble instead, and its top-1/top-5 class ids
are compared with the local FP32 reference, so what is served is what is
measured (no cosine: the ensemble returns top-k only).

Writes ``.build/reports/int8_evaluation[_server].{json,md}``; a failed gate
exits 1.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from builders import BuildError, CheckFailed, Log, calibration, stderr_logger
from builders.artifacts import atomic_write_bytes, sha256_file
from builders.export_onnx import PROJECT_ROOT
from builders.quantize import fp32_path, int8_path
from vision_serving import model_config
from vision_serving.layout import Pipeline

REPORTS_DIR = PROJECT_ROOT / ".build" / "reports"
# 48 x 11 + 11 = 539 images (~30 s). With 24 per photo (275 images) one model read 96.4 % top-1
# agreement where 1067 images read 95.3 %: the larger set is the steadier gate.
DEFAULT_AUGMENTED_PER_PHOTO = 48
DEFAULT_MIN_TOP1 = 0.95
DEFAULT_MIN_TOP5 = 0.90
DEFAULT_MIN_COSINE = 0.98
TOP_K = 5


class GateFailed(CheckFailed):
    """INT8 departs from FP32 more than the thresholds allow."""


log_to_stderr = stderr_logger("evaluate")


@dataclass(frozen=True)
class Thresholds:
    top1_agreement: float = DEFAULT_MIN_TOP1
    top5_overlap: float = DEFAULT_MIN_TOP5
    cosine: float = DEFAULT_MIN_COSINE


@dataclass(frozen=True)
class EvaluationSet:
    raw: list[calibration.Sample]
    augmented: list[calibration.Sample]
    seed: int

    @property
    def all(self) -> list[calibration.Sample]:
        return self.raw + self.augmented


def evaluation_set(
    repository: Path, augmented_per_photo: int = DEFAULT_AUGMENTED_PER_PHOTO, seed: int = calibration.EVALUATION_SEED
) -> EvaluationSet:
    """The held-out photos as shipped, and ``augmented_per_photo`` augmentations of each."""
    _, limits = calibration.served_preprocessing(repository)
    sources = calibration.evaluation_sources(repository)
    raw = calibration.make_samples(sources, len(sources), seed, calibration.EVALUATION_PROFILE, limits)
    augmented = (
        calibration.make_samples(
            sources, len(sources) * augmented_per_photo, seed, calibration.EVALUATION_PROFILE, limits, include_originals=False
        )
        if augmented_per_photo > 0
        else []
    )
    return EvaluationSet(raw, augmented, seed)


def top_k(logits: np.ndarray, k: int = TOP_K) -> np.ndarray:
    """Class ids of the k largest logits per row (all of them when there are fewer classes), best first."""
    k = min(k, logits.shape[1])
    part = np.argpartition(-logits, k - 1, axis=1)[:, :k]
    order = np.take_along_axis(logits, part, axis=1).argsort(axis=1)[:, ::-1]
    return np.take_along_axis(part, order, axis=1)


def compare_top_k(reference_top: np.ndarray, candidate_top: np.ndarray) -> dict[str, float]:
    """Top-1 agreement and mean top-5 overlap (top-k for k < 5 classes) of two [N, k] class-id arrays."""
    k = min(TOP_K, reference_top.shape[1])
    overlap = [len(set(r[:k]) & set(c[:k])) / k for r, c in zip(reference_top, candidate_top)]
    return {
        "count": len(reference_top),
        "top1_agreement": float(np.mean(reference_top[:, 0] == candidate_top[:, 0])),
        "top5_overlap": float(np.mean(overlap)),
        "top1_in_reference_top5": float(np.mean([c[0] in r[:TOP_K] for r, c in zip(reference_top, candidate_top)])),
    }


def compare_logits(reference: np.ndarray, candidate: np.ndarray) -> dict[str, float]:
    metrics: dict[str, float] = compare_top_k(top_k(reference), top_k(candidate))
    norms = np.linalg.norm(reference, axis=1) * np.linalg.norm(candidate, axis=1)
    cosine = (reference * candidate).sum(axis=1) / np.maximum(norms, 1e-12)
    metrics["cosine_mean"] = float(cosine.mean())
    metrics["cosine_min"] = float(cosine.min())
    metrics["max_abs_logit_diff"] = float(np.abs(reference - candidate).max())
    return metrics


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def run_onnx(path: Path, graph_optimization: str, batch: np.ndarray, chunk: int = 16) -> np.ndarray:
    from vision_serving.onnx_core import create_session

    session = create_session(path, graph_optimization)
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {name: batch[i : i + chunk]})[0] for i in range(0, len(batch), chunk)])


def gate(metrics: dict[str, float], thresholds: Thresholds, with_cosine: bool = True) -> dict[str, Any]:
    checks = {
        "top1_agreement": (metrics["top1_agreement"], thresholds.top1_agreement),
        "top5_overlap": (metrics["top5_overlap"], thresholds.top5_overlap),
    }
    if with_cosine:
        checks["cosine_mean"] = (metrics["cosine_mean"], thresholds.cosine)
    results = {
        name: {"value": round(value, 6), "min": minimum, "pass": bool(value >= minimum)} for name, (value, minimum) in checks.items()
    }
    return {"checks": results, "pass": all(r["pass"] for r in results.values())}


def _labels(repository: Path) -> list[str]:
    from vision_serving import classification

    config = model_config.load_config(Pipeline.at(repository).model_dir("postprocess"))
    path = Pipeline.at(repository).model_dir("postprocess") / model_config.parameter(config, "labels_file")
    if not path.is_file():
        return [str(i) for i in range(1000)]
    return [item.decode() if isinstance(item, bytes) else str(item) for item in classification.load_labels(path, 1000)]


def _provenance(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.with_name(path.name + ".json").read_text())
    except (OSError, ValueError):
        return {}


def _quantizer_summary(int8: Path) -> dict[str, Any]:
    record = _provenance(int8)
    quantizer = record.get("quantizer", {})
    return {
        "file": int8.name,
        "sha256": sha256_file(int8) if int8.is_file() else None,
        "calibration_method": quantizer.get("calibration_method"),
        "high_precision_dtype": quantizer.get("high_precision_dtype"),
        "excluded": quantizer.get("exclusions", {}),
        "calibration": {k: record.get("calibration", {}).get(k) for k in ("samples", "sha256", "source", "photos")},
        "modelopt": quantizer.get("version"),
        "defaults_rationale": quantizer.get("defaults_rationale"),
    }


def _write_reports(report: dict[str, Any], stem: str, markdown: str, reports_dir: Path) -> tuple[Path, Path]:
    json_path, md_path = reports_dir / f"{stem}.json", reports_dir / f"{stem}.md"
    atomic_write_bytes(json_path, (json.dumps(report, indent=2) + "\n").encode())
    atomic_write_bytes(md_path, markdown.encode())
    return json_path, md_path


def _metric_rows(sets: dict[str, dict[str, float]], with_cosine: bool) -> list[str]:
    header = "| set | images | top-1 agreement | top-5 overlap | top-1 in FP32 top-5 |" + (
        " cosine mean | cosine min |" if with_cosine else ""
    )
    rows = [header, "|" + "---|" * (header.count("|") - 1)]
    for name, m in sets.items():
        row = f"| {name} | {m['count']} | {m['top1_agreement']:.4f} | {m['top5_overlap']:.4f} | {m['top1_in_reference_top5']:.4f} |"
        if with_cosine:
            row += f" {m['cosine_mean']:.5f} | {m['cosine_min']:.5f} |"
        rows.append(row)
    return rows


def render_markdown(report: dict[str, Any]) -> str:
    with_cosine = report["mode"] == "local"
    candidate = (
        "INT8 Q/DQ (onnxruntime, optimizations disabled)" if with_cosine else f"served `{report['pipeline']}` at {report['server_url']}"
    )
    verdict = "PASS" if report["gate"]["pass"] else "FAIL"
    lines = [
        f"# INT8 accuracy gate: {verdict}",
        "",
        (
            f"FP32 `{report['fp32']['file']}` (onnxruntime) vs {candidate}, on held-out photos never used for calibration "
            f"({', '.join(report['evaluation_set']['photos'])}) and {report['evaluation_set']['augmented_per_photo']} seeded "
            f"augmentations of each (seed {report['evaluation_set']['seed']}), through the served preprocessing."
        ),
        "",
        *_metric_rows(report["metrics"], with_cosine),
        "",
        f"Gate on `{report['gate']['set']}`:",
        "",
        "| check | value | minimum | |",
        "|---|---|---|---|",
    ]
    for name, check in report["gate"]["checks"].items():
        lines.append(f"| {name} | {check['value']:.4f} | {check['min']} | {'pass' if check['pass'] else '**FAIL**'} |")
    quantizer = report.get("int8", {})
    if quantizer.get("calibration_method"):
        excluded = quantizer.get("excluded", {})
        lines += [
            "",
            (
                f"INT8 model: `{quantizer['file']}`, ModelOpt {quantizer['modelopt']}, {quantizer['calibration_method']} calibration, "
                f"{quantizer['calibration']['samples']} samples (sha256 {str(quantizer['calibration']['sha256'])[:12]}…), "
                f"high precision {quantizer['high_precision_dtype']}, excluded groups {excluded.get('layer_groups') or 'none'}, "
                f"op types {excluded.get('op_types') or 'none'}, {len(excluded.get('nodes', []))} nodes by name."
            ),
        ]
        if quantizer.get("defaults_rationale"):
            lines += ["", f"Why these defaults: {quantizer['defaults_rationale']}"]
    lines += ["", "Raw held-out photos:", "", "| photo | FP32 top-1 | p | candidate top-1 | p | agree |", "|---|---|---|---|---|---|"]
    for row in report["photos"]:
        lines.append(
            f"| {row['photo']} | {row['fp32']} | {row['fp32_p']:.2f} | {row['candidate']} | "
            f"{row['candidate_p'] if row['candidate_p'] is not None else float('nan'):.2f} | {'yes' if row['agree'] else '**no**'} |"
        )
    return "\n".join(lines) + "\n"


def evaluate(
    repository: Path | str,
    int8: Path | None = None,
    fp32: Path | None = None,
    augmented_per_photo: int = DEFAULT_AUGMENTED_PER_PHOTO,
    seed: int = calibration.EVALUATION_SEED,
    thresholds: Thresholds = Thresholds(),
    server_url: str | None = None,
    reports_dir: Path = REPORTS_DIR,
    log: Log = log_to_stderr,
) -> dict[str, Any]:
    """Measure, write the reports, return the report; raises ``GateFailed`` when the gate fails."""
    started = time.perf_counter()
    repository = Path(repository)
    fp32 = Path(fp32) if fp32 else fp32_path(repository)
    int8 = Path(int8) if int8 else int8_path(repository)
    for path, step in ((fp32, "export"), *(() if server_url else ((int8, "quantize"),))):
        if not path.is_file():
            raise BuildError(f"{path} does not exist; run `python -m builders {step}` first")
    spec, limits = calibration.served_preprocessing(repository)
    samples = evaluation_set(repository, augmented_per_photo, seed)
    log(
        f"{len(samples.raw)} held-out photos + {len(samples.augmented)} augmentations (seed {seed}); "
        f"{'server ' + server_url if server_url else 'INT8 on onnxruntime, optimizations disabled'}"
    )
    batch = calibration.preprocess_samples(samples.all, spec, limits)
    reference = run_onnx(fp32, "all", batch)
    raw_count = len(samples.raw)
    labels = _labels(repository)
    with_cosine = server_url is None
    parts = {"raw": slice(0, raw_count), "augmented": slice(raw_count, None), "all": slice(None)}
    if not samples.augmented:
        del parts["augmented"]
    metrics: dict[str, dict[str, float]]
    if server_url:
        candidate_top, candidate_p = served_top_k(server_url, [s.data for s in samples.all], repository)
        metrics = {name: compare_top_k(top_k(reference[part]), candidate_top[part]) for name, part in parts.items()}
    else:
        candidate = run_onnx(int8, "disable_all", batch)
        candidate_top, candidate_p = top_k(candidate), softmax(candidate).max(axis=1)
        metrics = {name: compare_logits(reference[part], candidate[part]) for name, part in parts.items()}
    reference_p = softmax(reference)
    reference_top = top_k(reference)
    photos_table = [
        {
            "photo": sample.source,
            "fp32": labels[reference_top[i, 0]],
            "fp32_p": round(float(reference_p[i, reference_top[i, 0]]), 4),
            "candidate": labels[candidate_top[i, 0]],
            "candidate_p": None if candidate_p is None else round(float(candidate_p[i]), 4),
            "agree": bool(reference_top[i, 0] == candidate_top[i, 0]),
        }
        for i, sample in enumerate(samples.raw)
    ]
    # Disagreements are mostly where FP32 itself is unsure: report agreement by FP32 confidence.
    confident = reference_p.max(axis=1) >= 0.5
    by_confidence = {
        "fp32_p>=0.5": {
            "count": int(confident.sum()),
            "top1_agreement": float(np.mean(reference_top[confident, 0] == candidate_top[confident, 0])) if confident.any() else None,
        },
        "fp32_p<0.5": {
            "count": int((~confident).sum()),
            "top1_agreement": float(np.mean(reference_top[~confident, 0] == candidate_top[~confident, 0])) if (~confident).any() else None,
        },
    }
    result = gate(metrics["all"], thresholds, with_cosine)
    result["set"] = "all"
    report = {
        "step": "evaluate",
        "pipeline": Pipeline.at(repository).name,
        "mode": "server" if server_url else "local",
        "server_url": server_url,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "fp32": {"file": fp32.name, "sha256": sha256_file(fp32), "runtime": "onnxruntime, graph optimizations all"},
        "int8": _quantizer_summary(int8) if int8.is_file() else {"file": int8.name},
        "evaluation_set": {
            "photos": [s.source for s in samples.raw],
            "augmented_per_photo": augmented_per_photo,
            "seed": seed,
            "profile": asdict(calibration.EVALUATION_PROFILE),
            "calibration_photos_excluded": list(calibration.photo_split(repository)[0]),
        },
        "metrics": metrics,
        "top1_agreement_by_fp32_confidence": by_confidence,
        "gate": result,
        "thresholds": asdict(thresholds),
        "photos": photos_table,
        "seconds": round(time.perf_counter() - started, 1),
    }
    stem = "int8_evaluation_server" if server_url else "int8_evaluation"
    json_path, md_path = _write_reports(report, stem, render_markdown(report), reports_dir)
    summary = ", ".join(
        f"{name}: top-1 {m['top1_agreement']:.3f} top-5 {m['top5_overlap']:.3f}" + (f" cos {m['cosine_mean']:.4f}" if with_cosine else "")
        for name, m in metrics.items()
    )
    log(f"{summary} ({report['seconds']} s)")
    log(f"report: {md_path} and {json_path.name}")
    if not result["pass"]:
        failed = [f"{name} {c['value']:.4f} < {c['min']}" for name, c in result["checks"].items() if not c["pass"]]
        raise GateFailed(f"INT8 accuracy gate failed on {metrics['all']['count']} held-out images: {', '.join(failed)}; see {md_path}")
    log("gate passed")
    return report


def served_top_k(server_url: str, images: Sequence[bytes], repository: Path) -> tuple[np.ndarray, np.ndarray]:
    """Top-5 class ids and top-1 scores from a running server's ensemble (gRPC)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    pipeline = Pipeline.at(repository)
    ensemble_name = pipeline.name
    ensemble = model_config.load_config(pipeline.ensemble_dir)
    roles = model_config.tensors_by_role(ensemble)
    image_name, k_name = model_config.image_input_name(ensemble), roles.optional_input("INT32")
    ids_name, scores_name = roles.output("INT32"), roles.output("FP32")
    client = grpcclient.InferenceServerClient(server_url)
    try:
        if not client.is_model_ready(ensemble_name):
            raise BuildError(f"{ensemble_name} is not ready on {server_url}")
        max_batch = int(client.get_model_config(ensemble_name).config.max_batch_size) or 1
    except InferenceServerException as error:
        raise BuildError(f"cannot reach the server at {server_url}: {error.message()}") from None
    ids, scores = [], []
    for start in range(0, len(images), max_batch):
        part = images[start : start + max_batch]
        image_input = grpcclient.InferInput(image_name, [len(part), 1], "BYTES")
        image_input.set_data_from_numpy(np.array(part, dtype=np.object_).reshape(-1, 1))
        k_input = grpcclient.InferInput(k_name, [len(part), 1], "INT32")
        k_input.set_data_from_numpy(np.full((len(part), 1), TOP_K, dtype=np.int32))
        try:
            result = client.infer(ensemble_name, [image_input, k_input])
        except InferenceServerException as error:
            raise BuildError(f"{ensemble_name} on {server_url} failed: {error.message()}") from None
        ids.append(result.as_numpy(ids_name))
        scores.append(result.as_numpy(scores_name)[:, 0])
    return np.concatenate(ids).astype(np.int64), np.concatenate(scores)


def add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--dataset",
        type=Path,
        metavar="DIR",
        help="your labelled images: accuracy (classification: DIR/<label>/*.jpg) or mIoU (segmentation: DIR/x.jpg + "
        "DIR/x.mask.png) of FP32 and of the served precision (builders/dataset_eval.py)",
    )
    parser.add_argument("--int8", type=Path, metavar="PATH", help="INT8 Q/DQ ONNX (default: core/1/model_int8_qdq.onnx)")
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
        "--min-top1", type=float, default=DEFAULT_MIN_TOP1, metavar="X", help="minimum top-1 agreement (default: %(default)s)"
    )
    parser.add_argument(
        "--min-top5", type=float, default=DEFAULT_MIN_TOP5, metavar="X", help="minimum mean top-5 overlap (default: %(default)s)"
    )
    parser.add_argument(
        "--min-cosine",
        type=float,
        default=DEFAULT_MIN_COSINE,
        metavar="X",
        help="minimum mean logit cosine similarity (default: %(default)s)",
    )
    parser.add_argument(
        "--server-url",
        metavar="HOST:PORT",
        help="measure the pipeline's ensemble on a running server (gRPC, e.g. localhost:8001) against the local FP32 reference",
    )
    parser.add_argument(
        "--reports-dir", type=Path, default=REPORTS_DIR, metavar="DIR", help="where the reports go (default: .build/reports)"
    )


def run_from_args(args: Any) -> int:
    if args.dataset is not None:
        from builders import dataset_eval

        dataset_eval.evaluate_dataset(args.repository, args.dataset)
        return 0
    evaluate(
        args.repository,
        int8=args.int8,
        fp32=args.fp32,
        augmented_per_photo=args.augmented_per_photo,
        seed=args.seed,
        thresholds=Thresholds(args.min_top1, args.min_top5, args.min_cosine),
        server_url=args.server_url,
        reports_dir=args.reports_dir,
    )
    return 0
