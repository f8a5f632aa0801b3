"""CPU milliseconds per image for each step of the classifier, before and after reduced decoding, one thread.

    .venv/bin/python -m benchmarks.steps [--repeats 3] [--output benchmarks/results/steps.md]

Steps, on the benchmark's upload mixes (benchmarks/images.py: web photos and 12 MP phone photos):

- decode: before, OpenCV ``imdecode`` at full size (main at 79b1611); after, the served decoder
  (``image_codec.decode`` at the DCT scale the resize needs, EXIF orientation applied);
- resize: resize + centre crop + normalize of what the decoder gave (a smaller decode is also a
  cheaper resize);
- core: the FP32 core at batch 8, onnxruntime (the CPU default) and OpenVINO (cpu_openvino), one thread;
- postprocess: top-k and labels.

CPU time (``time.process_time``) per image, best of ``--repeats`` passes over the photos, so
other load on a shared machine inflates it less than wall time. One thread throughout
(OpenCV's pool and the runtimes), as each served instance runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np

from benchmarks import CLASSIFIER, images, report
from benchmarks.pipeline import Pipeline, opencv_decode
from vision_serving import image_codec, preprocessing

RESULTS = Path(__file__).resolve().parent / "results" / "steps.md"
CORE_BATCH = 8


def cpu_ms(function: Callable[[], object], count: int, repeats: int) -> float:
    """CPU ms per item of ``function`` (which handles ``count`` items), best of ``repeats`` after a warm-up."""
    function()
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        function()
        best = min(best, time.process_time() - started)
    return best * 1e3 / count


def measure(mix: str, repeats: int) -> dict[str, float]:
    payloads = [p.data for p in images.upload_mix(mix)]
    served = Pipeline(decode="served", intra_op_threads=1)
    openvino = Pipeline(core_config_name="cpu_openvino", intra_op_threads=1)
    preprocessing.set_threads(1)
    cv2.setNumThreads(1)
    limits, spec, minimum = served.limits, served.spec, served.minimum
    before = [opencv_decode(data) for data in payloads]
    after = [image_codec.decode(data, limits, minimum).image for data in payloads]
    count = len(payloads)
    without_gap = dataclasses.replace(spec, resize_reducing_gap=0.0)  # the anti-aliasing's own cost
    batch = preprocessing.preprocess_batch(after[:CORE_BATCH] * (CORE_BATCH // len(after[:CORE_BATCH]) or 1), spec)[:CORE_BATCH]
    chosen = (payloads * CORE_BATCH)[:CORE_BATCH]
    post = served.served.postprocessor
    parsed = post.parse(served.served.postprocess_inputs(served.served.with_core(served.preprocess(chosen))))
    return {
        "decode_before": cpu_ms(lambda: [opencv_decode(data) for data in payloads], count, repeats),
        "decode_after": cpu_ms(lambda: [image_codec.decode(data, limits, minimum) for data in payloads], count, repeats),
        "resize_before": cpu_ms(lambda: preprocessing.preprocess_batch(before, spec), count, repeats),
        "resize_after": cpu_ms(lambda: preprocessing.preprocess_batch(after, spec), count, repeats),
        "reducing_gap": spec.resize_reducing_gap,
        "resize_after_without_gap": cpu_ms(lambda: preprocessing.preprocess_batch(after, without_gap), count, repeats),
        "core_onnxruntime": cpu_ms(lambda: served.core.run({served.core_input: batch}), len(batch), repeats),
        "core_openvino": cpu_ms(lambda: openvino.core.run({openvino.core_input: batch}), len(batch), repeats),
        "postprocess": cpu_ms(lambda: post.run(parsed).outputs(), CORE_BATCH, max(repeats, 20)),
        "decoded_pixels_before": float(np.mean([image.shape[0] * image.shape[1] for image in before])),
        "decoded_pixels_after": float(np.mean([image.shape[0] * image.shape[1] for image in after])),
    }


def table(results: dict[str, dict[str, float]]) -> str:
    rows = []
    for mix, m in results.items():
        before_total = m["decode_before"] + m["resize_before"] + m["core_onnxruntime"] + m["postprocess"]
        after_total = m["decode_after"] + m["resize_after"] + m["core_onnxruntime"] + m["postprocess"]
        rows.append(
            [
                f"{mix}: before (OpenCV full decode)",
                m["decode_before"],
                m["resize_before"],
                m["core_onnxruntime"],
                m["postprocess"],
                before_total,
            ]
        )
        rows.append(
            [f"{mix}: after (served decode)", m["decode_after"], m["resize_after"], m["core_onnxruntime"], m["postprocess"], after_total]
        )
        rows.append([f"{mix}: after, core on OpenVINO", m["decode_after"], m["resize_after"], m["core_openvino"], m["postprocess"],
                     m["decode_after"] + m["resize_after"] + m["core_openvino"] + m["postprocess"]])  # fmt: skip
    rows = [[row[0], *(f"{value:.2f}" for value in row[1:])] for row in rows]
    return report._table(["upload mix, decoder", "decode", "resize+crop+normalize", "core (batch 8)", "postprocess", "total"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.steps", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mixes", default="web,phone")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    results = {}
    for mix in args.mixes.split(","):
        print(f"steps: {mix}...", file=sys.stderr, flush=True)
        results[mix] = measure(mix, args.repeats)
    text = (
        f"# CPU ms per image, per step ({CLASSIFIER.name}, one thread)\n\n"
        f"Command: `.venv/bin/python -m benchmarks.steps {' '.join(argv if argv is not None else sys.argv[1:])}`; "
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}. CPU time (process_time), best of {args.repeats} passes; "
        "photos from benchmarks/images.py. before = main at 79b1611 (OpenCV full-size decode); after = the served decoder "
        "(DCT-reduced JPEG decode, decode_oversampling 2). The core is the same FP32 model before and after.\n\n"
        + table(results)
        + "\nDecoded pixels per image (mean): "
        + "; ".join(
            f"{mix} {m['decoded_pixels_before'] / 1e6:.2f} MP before, {m['decoded_pixels_after'] / 1e6:.2f} MP after"
            for mix, m in results.items()
        )
        + ".\n\nThe served resize anti-aliases (resize_reducing_gap "
        + f"{max(m['reducing_gap'] for m in results.values())}); without it (0), resize+crop+normalize after: "
        + "; ".join(f"{mix} {m['resize_after_without_gap']:.2f} ms" for mix, m in results.items())
        + ".\n"
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
