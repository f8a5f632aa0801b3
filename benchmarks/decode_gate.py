"""The served classifier's answers with reduced JPEG decoding vs FP32 with full-size decoding, on held-out photos.

    .venv/bin/python -m benchmarks.decode_gate [--per-photo 12] [--output benchmarks/results/decode_gate.md]

The held-out photos are the recipe's ``evaluation_photos`` (never used for calibration),
plus seeded augmentations of them (the evaluate step's profile), each sent at one of three sizes
in turn: a 12 MP phone photo (4000 x 3000, made as in benchmarks/images.py: upscaled with mild
sensor-like noise, every other one stored sideways with EXIF orientation 6), a 2048 px photo and
a 1280 px web photo. For each image:

- served: the served decode (JPEGs at the DCT scale the resize needs, ``decode_oversampling``)
  and the served CPU core (``configs/cpu.pbtxt``: its runtime and precision), in-process with the
  served library and configs (what the preprocess and core models run);
- reference: FP32 onnxruntime with the served decoder at full size (the issue's gate);
- context: the same full-size decode shrunk with area averaging (``cv2.INTER_AREA``) to the size the
  reduced decode gives, then the served preprocessing: a reference without the aliasing of a large
  bicubic downscale (bicubic from 4000 px to 256 px point-samples fine texture and noise; a DCT-reduced
  decode averages it first).

Gate: top-1 agreement >= 0.95 over all images (the issue's target); top-5 overlap reported.
Exits 1 when the gate fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import cv2
import numpy as np

from benchmarks import CLASSIFIER, images, report
from benchmarks.pipeline import Pipeline
from builders import calibration, loaded
from vision_serving import image_codec, preprocessing

RESULTS_DIR = Path(__file__).resolve().parent / "results"
MIN_TOP1 = 0.95
SIZES = ("12MP", "2048", "1280")


def held_out_images(per_photo: int) -> list[tuple[str, str, bytes]]:
    """(name, size kind, encoded bytes): the held-out photos and ``per_photo`` augmentations each, at the three sizes in turn."""
    classifier = loaded.load(CLASSIFIER)
    sources = calibration.evaluation_sources(classifier)
    limits = classifier.configs.limits
    samples = calibration.make_samples(
        sources, len(sources) * (per_photo + 1), calibration.EVALUATION_SEED, calibration.EVALUATION_PROFILE, limits
    )
    made = []
    for index, sample in enumerate(samples):
        rgb = image_codec.decode_rgb(sample.data, limits)
        bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
        kind = SIZES[index % len(SIZES)]
        if kind == "12MP":
            data = images.phone_photo(bgr, seed=index, rotated=(index // len(SIZES)) % 2 == 1)
        else:
            longer = int(kind)
            scale = longer / max(bgr.shape[:2])
            size = (round(bgr.shape[1] * scale), round(bgr.shape[0] * scale))
            resized = cv2.resize(bgr, size, interpolation=cv2.INTER_CUBIC)
            data = cv2.imencode(".jpg", resized, [cv2.IMWRITE_JPEG_QUALITY, images.JPEG_QUALITY])[1].tobytes()
        made.append((f"{sample.source}#{sample.index}", kind, data))
    return made


def top5(pipeline: Pipeline, pixels: np.ndarray) -> np.ndarray:
    (logits,) = pipeline.core.run({pipeline.core_input: pixels})
    return np.argsort(-logits, axis=1)[:, :5]


def top5_and_margin(pipeline: Pipeline, pixels: np.ndarray) -> tuple[np.ndarray, float]:
    """The first image's top-5 classes and its softmax probability margin between top-1 and top-2."""
    (logits,) = pipeline.core.run({pipeline.core_input: pixels})
    order = np.argsort(-logits[0])
    probabilities = np.exp(logits[0] - logits[0].max())
    probabilities /= probabilities.sum()
    return order[:5], float(probabilities[order[0]] - probabilities[order[1]])


def measure(per_photo: int, oversampling: float | None = None, reducing_gap: float | None = None) -> dict:
    """``oversampling``, ``reducing_gap``: another ``decode_oversampling`` or ``resize_reducing_gap``
    than the served config's (what-if; the reducing gap applies to served and reference alike)."""
    started = time.time()
    print("decode_gate: making the held-out images...", file=sys.stderr, flush=True)
    made = held_out_images(per_photo)
    served = Pipeline(core_config_name="cpu")
    if oversampling is not None:
        served.spec = dataclasses.replace(served.spec, decode_oversampling=oversampling)
        served.minimum = preprocessing.decode_minimum(served.spec)
    reference = Pipeline(core_config_name="cpu_onnxruntime")
    if reducing_gap is not None:
        served.spec = dataclasses.replace(served.spec, resize_reducing_gap=reducing_gap)
        reference.spec = dataclasses.replace(reference.spec, resize_reducing_gap=reducing_gap)
    rows = []
    for name, kind, data in made:
        reduced = image_codec.decode(data, served.limits, served.minimum)
        full = image_codec.decode(data, reference.limits)
        served_top = top5(served, preprocessing.preprocess_batch([reduced.image], served.spec))[0]
        reference_top, reference_margin = top5_and_margin(reference, preprocessing.preprocess_batch([full.image], reference.spec))
        shrunk = full.image
        if reduced.image.shape != full.image.shape:
            shrunk = cv2.resize(full.image, reduced.image.shape[1::-1], interpolation=cv2.INTER_AREA)
        area_top = top5(reference, preprocessing.preprocess_batch([shrunk], reference.spec))[0]
        rows.append(
            {
                "name": name,
                "kind": kind,
                "bytes": len(data),
                "decoded": list(reduced.image.shape[:2]),
                "full": list(full.image.shape[:2]),
                "top1_agrees": bool(served_top[0] == reference_top[0]),
                "top5_overlap": len(set(served_top.tolist()) & set(reference_top.tolist())) / 5,
                "top1_agrees_area": bool(served_top[0] == area_top[0]),
                "reference_agrees_area": bool(reference_top[0] == area_top[0]),
                "reference_top1_margin": round(reference_margin, 4),
            }
        )

    def summarize(selected: list[dict]) -> dict:
        return {
            "images": len(selected),
            "top1_agreement": round(float(np.mean([r["top1_agrees"] for r in selected])), 4),
            "top5_overlap": round(float(np.mean([r["top5_overlap"] for r in selected])), 4),
            "reduced_decodes": sum(1 for r in selected if r["decoded"] != r["full"]),
            "top1_vs_area_reference": round(float(np.mean([r["top1_agrees_area"] for r in selected])), 4),
            "full_vs_area_reference": round(float(np.mean([r["reference_agrees_area"] for r in selected])), 4),
        }

    by_kind = {kind: summarize([r for r in rows if r["kind"] == kind]) for kind in SIZES}
    overall = summarize(rows)
    return {
        "served_core_config": "cpu",
        "served_runtime": served.runtime,
        "decode_oversampling": served.spec.decode_oversampling,
        "resize_reducing_gap": served.spec.resize_reducing_gap,
        "all": overall,
        "by_size": by_kind,
        "gate": {"min_top1": MIN_TOP1, "pass": overall["top1_agreement"] >= MIN_TOP1},
        "elapsed_s": round(time.time() - started, 1),
        "finished_at": time.strftime("%Y-%m-%d %H:%M %Z"),
        "rows": rows,
    }


def markdown(result: dict, command: str) -> str:
    def cells(name: str, summary: dict) -> list:
        return [name, *(f"{value:.3f}" if isinstance(value, float) else value for value in summary.values())]

    table_rows = [cells("all", result["all"])] + [cells(kind, summary) for kind, summary in result["by_size"].items()]
    verdict = "PASS" if result["gate"]["pass"] else "FAIL"
    return (
        f"# Reduced decoding gate: {verdict}\n\n"
        f"Command: `{command}`; {result.get('finished_at', '')}, {result['elapsed_s']:.0f} s.\n\n"
        f"Served: configs/cpu.pbtxt ({result['served_runtime']}, its precision), JPEGs decoded at the DCT scale that keeps the "
        f"shorter side >= {result['decode_oversampling']} x the resize target; resize_reducing_gap "
        f"{result.get('resize_reducing_gap', 0.0)} (an image at least twice that x the target is box-averaged first, "
        "by the largest integer factor keeping it >= that x the target, both sides). "
        f"Reference: FP32 onnxruntime, full-size decode. "
        f"Held-out photos (the recipe's evaluation_photos) and augmentations, at 12 MP (phone-like, half with EXIF orientation 6), "
        f"2048 px and 1280 px. Gate: top-1 agreement >= {MIN_TOP1}.\n\n"
        + report._table(
            [
                "images",
                "count",
                "top-1 agreement (gate)",
                "top-5 overlap",
                "decoded reduced",
                "served vs area-shrunk full decode, top-1",
                "full decode vs area-shrunk, top-1",
            ],
            table_rows,
        )
        + disagreements(result)
    )


def disagreements(result: dict) -> str:
    """The images whose served top-1 differs, with the reference's top-1 vs top-2 probability margin."""
    rows = [row for row in result["rows"] if not row["top1_agrees"] and "reference_top1_margin" in row]
    if not rows:
        return ""
    margins = sorted(row["reference_top1_margin"] for row in result["rows"] if "reference_top1_margin" in row)
    listed = ", ".join(f"{row['name']} ({row['kind']}, {row['reference_top1_margin']:.3f})" for row in rows)
    return (
        f"\nServed top-1 differs on: {listed} (reference top-1 minus top-2 softmax probability; "
        f"median over all images {float(np.median(margins)):.3f}).\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.decode_gate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-photo", type=int, default=12, help="augmentations per held-out photo (default 12)")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "decode_gate.md")
    parser.add_argument("--oversampling", type=float, help="what-if: another decode_oversampling than the served config's")
    parser.add_argument("--reducing-gap", type=float, help="what-if: another resize_reducing_gap than the served config's (0: off)")
    parser.add_argument("--render-only", action="store_true", help="measure nothing: rewrite the .md from the .json next to it")
    args = parser.parse_args(argv)
    if args.render_only:
        result = json.loads(args.output.with_suffix(".json").read_text())
        args.output.write_text(markdown(result, result.get("command", "")))
        return 0 if result["gate"]["pass"] else 1
    if args.per_photo < 0:
        parser.error("--per-photo must be >= 0")
    command = " ".join([".venv/bin/python -m benchmarks.decode_gate", *(sys.argv[1:] if argv is None else argv)])
    result = measure(args.per_photo, args.oversampling, args.reducing_gap)
    result["command"] = command
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(markdown(result, command))
    args.output.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result, command))
    return 0 if result["gate"]["pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
