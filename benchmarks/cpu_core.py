"""Side by side, one process, one thread: JPEG decode of a 12 MP photo (full vs reduced to what the
resize needs) and the classifier core on onnxruntime vs OpenVINO, FP32 vs INT8 (ms per image).

    .venv/bin/python -m benchmarks.cpu_core [--repeats 5] [--batch 8]

Short on purpose (a few seconds per line). INT8 on onnxruntime runs with graph optimizations
disabled (its fused int8 kernels are wrong on AVX2-only CPUs: docs/design.md section 3).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import cv2
import numpy as np

from vision_serving import image_codec, layout, model_config, preprocessing
from vision_serving.onnx_core import create_session
from vision_serving.openvino_core import OpenVinoCore


def _ms(function: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(wall ms, CPU ms) per call, best of ``repeats`` after one warm-up."""
    function()
    best_wall, best_cpu = float("inf"), float("inf")
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        function()
        best_wall, best_cpu = min(best_wall, time.perf_counter() - wall), min(best_cpu, time.process_time() - cpu)
    return best_wall * 1000, best_cpu * 1000


def synthetic_12mp_jpeg() -> bytes:
    rng = np.random.default_rng(0)
    image = cv2.resize(rng.integers(0, 256, (60, 80, 3), dtype=np.uint8), (4000, 3000), interpolation=cv2.INTER_CUBIC)
    return cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cpu_core", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args(argv)
    cv2.setNumThreads(1)
    data = synthetic_12mp_jpeg()
    limits = image_codec.ImageLimits(max_bytes=50_000_000, max_pixels=50_000_000)
    buffer = np.frombuffer(data, np.uint8)
    classifier = layout.pipeline("image_classifier")
    spec = preprocessing.PreprocessSpec.from_config(model_config.load_config(classifier.model_dir("preprocess")))
    minimum = preprocessing.decode_minimum(spec)
    print(f"decode, 12 MP JPEG ({len(data) / 1e6:.1f} MB), ms per image (wall, cpu):")
    for name, function in [
        ("OpenCV imdecode, full (previous decoder)", lambda: cv2.imdecode(buffer, cv2.IMREAD_COLOR)),
        ("image_codec.decode, full", lambda: image_codec.decode(data, limits)),
        ("OpenCV IMREAD_REDUCED_COLOR_4", lambda: cv2.imdecode(buffer, cv2.IMREAD_REDUCED_COLOR_4)),
        (f"image_codec.decode, reduced ({minimum})", lambda: image_codec.decode(data, limits, minimum)),
    ]:
        print(f"  {name:70s} {_ms(function, args.repeats)[0]:7.1f} {_ms(function, 1)[1]:7.1f}")
    config = model_config.load_config(classifier.core_dir, "cpu")
    (image,) = config.input
    rng = np.random.default_rng(0)
    batch = rng.standard_normal((args.batch, *image.dims)).astype(np.float32)
    print(f"core {classifier.name}, batch {args.batch}, 1 thread, ms per image (wall, cpu):")
    outputs = {}
    for precision in ("fp32", "int8"):
        path = classifier.onnx(precision)
        session = create_session(path, "all" if precision == "fp32" else "disable_all", intra_op_threads=1)
        runs = {"onnxruntime": lambda s=session: s.run(None, {image.name: batch})[0]}
        variant = model_config.load_config(classifier.core_dir, "cpu_openvino_fp32")
        variant.parameters["precision"].string_value = precision
        core = OpenVinoCore(variant, classifier.core_version_dir)
        runs["openvino"] = lambda c=core: c.run({image.name: batch})[0]
        for runtime, function in runs.items():
            wall, cpu = _ms(function, args.repeats)
            outputs[runtime, precision] = function()
            print(f"  {runtime:12s} {precision}: {wall / args.batch:6.2f} {cpu / args.batch:6.2f}")
    reference = outputs["onnxruntime", "fp32"]
    for key, value in outputs.items():
        cosine = np.sum(reference * value, axis=1) / (np.linalg.norm(reference, axis=1) * np.linalg.norm(value, axis=1))
        print(f"  logits cosine vs onnxruntime fp32 (random inputs): {key[0]} {key[1]} {cosine.mean():.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
