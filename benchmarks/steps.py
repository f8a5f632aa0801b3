"""Per-step CPU costs, in-process, one thread: what each image costs each step of the served computation.

    .venv/bin/python -m benchmarks.steps [--parts pipelines,runtimes,detection,drift,text_reading,text_canvas,decode] [--pipelines NAME,... | all]
        [--mixes web,phone] [--decoders served,opencv] [--repeats 3] [--output DIR] [--render-only]

CPU time (``time.process_time``) per image, best of ``--repeats`` passes after a warm-up, so other
load on a shared machine inflates it less than wall time. One thread throughout (OpenCV's pool and
the runtimes), as each served instance runs. Every figure goes through the served code
(``benchmarks.inprocess``: :class:`vision_serving.served.ServedPipeline`). Parts:

- ``pipelines``: per pipeline, upload mix and decoder, the steps: decode (``served``: JPEGs at the
  DCT scale the resize needs; ``full``: the served decoder at full size; ``opencv``: ``cv2.imdecode``
  at full size, the decoder before reduced decoding); preprocess (resize, crop, normalize and layout
  of what the decoder gave: a smaller decode is also a cheaper resize); the core at batch 8 on its
  served CPU config and on OpenVINO (``cpu_openvino``); postprocess (batch 8); the drift statistics
  each Python step computes per image (the preprocess model's image features, the postprocess
  model's output features);
- ``runtimes``: each pipeline's core alone, batch 8, on onnxruntime and OpenVINO at FP32 and INT8
  (INT8 on onnxruntime with graph optimizations off, ``configs/cpu_int8.pbtxt``: its fused int8 kernels
  are wrong on AVX2-only CPUs, docs/design.md), wall and CPU ms per image, and the logits' cosine
  similarity with FP32 onnxruntime on real preprocessed photos;
- ``detection``: the YOLO postprocessing a pipeline ``new-pipeline --from yolo`` writes (80 classes at
  640x640: heads ``yolo`` [N, 84, 8400], ``yolo_v5`` [N, 25200, 85], ``end2end`` [N, 300, 6]) on raw
  outputs with exactly 0, 10 or 100 candidates above the score threshold per image, spread over the
  image and the classes (NMS keeps most: the expensive case);
- ``text_reading``: the text reader's steps per photo at 0, 5 and 50 lines of text (``benchmarks.text_reading``);
- ``text_canvas``: the text detector's input padded to a canvas (so photos of different sizes could batch) against
  each photo's own size: the detector's cost and how far the lines read agree (``benchmarks.text_reading``);
- ``decode``: the decoder alone on the same 12 MP phone photos as JPEG, HEIC and AVIF (upload mixes
  ``phone``, ``heic``, ``avif``), as the classifier's preprocess decodes them (``served``: a JPEG at the
  DCT scale its center crop needs; HEIC and AVIF have no reduced decode) and at full size (``full``:
  what the exact-resize pipelines decode);
- ``drift``: the drift statistics apart: image features per batch of 8 and per image, reduced vs full
  decode; one test update of a full window against the classifier's reference (every feature: KS and
  chi-square); appending a batch to the windows (the request thread's share).

Results: ``steps.json`` and ``steps.md`` in ``--output`` (benchmarks/results by default).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import CLASSIFIER, images, inprocess, report
from benchmarks.cpu import TimedStage, cpu_ms
from vision_serving import core_model, cpu_runtimes, drift, image_codec, layout, model_config, preprocessing

BENCHMARK = "steps"
PARTS = ("pipelines", "runtimes", "detection", "drift", "text_reading", "text_canvas", "decode")
# The decode part: the same 12 MP photos in each format (benchmarks/images.py).
DECODE_MIXES = ("phone", "heic", "avif")
CORE_BATCH = 8
OPENVINO_CONFIG = "cpu_openvino"
# name -> (core config, parameters) of the runtimes part: every CPU runtime at the precisions it is measured at.
RUNTIMES = {
    f"{runtime.name} {variant.precision}": (variant.config, variant.parameters)
    for runtime in cpu_runtimes.RUNTIMES.values()
    for variant in runtime.measured
}


def wall_and_cpu_ms(function: Callable[[], object], count: int, repeats: int) -> tuple[float, float]:
    """(wall ms, CPU ms) per item, each the best of ``repeats`` after a warm-up."""
    function()
    wall, used = float("inf"), float("inf")
    for _ in range(repeats):
        started, cpu_started = time.perf_counter(), time.process_time()
        function()
        wall, used = min(wall, time.perf_counter() - started), min(used, time.process_time() - cpu_started)
    return wall * 1e3 / count, used * 1e3 / count


def one_thread() -> None:
    preprocessing.set_threads(1)


def _drift_enabled(config: model_config.ModelConfig) -> bool:
    return all(key in config.parameters for key in drift.PARAMETERS) and drift.DriftSettings.from_config(config).enabled


def served_costs(served: inprocess.BenchedPipeline, payloads: list[bytes], repeats: int, core: bool = True) -> dict[str, float]:
    """CPU ms per image of each step of ``served`` on ``payloads``: decode, preprocess, core (batch 8; ``core``),
    postprocess, and the drift statistics the configs enable (preprocess_drift, postprocess_drift). The
    postprocess is its own code: the second-stage models a two-stage pipeline's postprocess calls (on a GPU,
    TensorRT plans like the core) are ``stages`` (with ``core``)."""
    stages = {role: TimedStage(stage.run) for role, stage in served.stage_cores.items()}
    if stages:
        served.postprocessor.use_stages(stages)

    def stage_ms() -> float:
        return sum(stage.ms for stage in stages.values())

    decoded = [served.decode(data) for data in payloads]
    tensors = served.preprocessed(decoded)
    answered = served.with_core(tensors)
    result = served.postprocess(answered)
    count = len(payloads)
    costs = {
        "decode": cpu_ms(lambda: [served.decode(data) for data in payloads], count, repeats),
        "preprocess": cpu_ms(lambda: served.preprocess(decoded), count, repeats),
    }
    if core:
        chosen = (decoded * CORE_BATCH)[:CORE_BATCH]
        feeds = served.core_feeds(served.preprocessed(chosen))
        costs["core"] = cpu_ms(lambda: served.run_core(feeds), CORE_BATCH, repeats)
    costs["postprocess"] = cpu_ms(lambda: served.postprocess(answered).outputs(), count, max(repeats, 10), excluded=stage_ms)
    if core and stages:
        passes = []
        for _ in range(repeats):
            before = stage_ms()
            served.postprocess(answered)
            passes.append(stage_ms() - before)
        costs["stages"] = min(passes) / count
    if _drift_enabled(served.configs.preprocess):
        costs["preprocess_drift"] = cpu_ms(lambda: served.image_features(payloads, decoded), count, repeats)
    if _drift_enabled(served.configs.postprocess):
        costs["postprocess_drift"] = cpu_ms(result.features, count, max(repeats, 10))
    return costs


# ---------------------------------------------------------------------------- parts


def measure_pipelines(
    result: dict, pipelines: list[layout.Pipeline], mixes: tuple[str, ...], decoders: tuple[str, ...], repeats: int
) -> None:
    report.table(
        result,
        "pipelines",
        "CPU ms per image, per step",
        {"pipeline": "pipeline", "mix": "mix", "decoder": "decoder", "decode": "decode", "preprocess": "preprocess"}
        | {"core": "core (batch 8)", "core_openvino": "core on OpenVINO", "postprocess": "postprocess", "stages": "second stages"}
        | {"preprocess_drift": "preprocess drift", "postprocess_drift": "postprocess drift", "total": "total", "decoded_mp": "decoded MP"},
        "One thread; CPU time, best of the passes. core: the served CPU config (configs/cpu.pbtxt); total: decode + "
        "preprocess + core + postprocess + second stages (the models a two-stage pipeline's postprocess calls) + the drift "
        "statistics the configs enable. decoded MP: mean megapixels the decoder gave.",
    )
    for pipeline in pipelines:
        openvino = inprocess.load(pipeline, inprocess.Variant(core_config=OPENVINO_CONFIG, threads=1))
        for mix in mixes:
            payloads = [p.data for p in images.upload_mix(mix)]
            for decoder in decoders:
                report.log(BENCHMARK, f"{pipeline.name}, {mix}, {decoder} decode")
                served = inprocess.load(pipeline, inprocess.Variant(threads=1, decode=decoder))
                one_thread()
                costs = served_costs(served, payloads, repeats)
                feeds = inprocess.core_input(served, (payloads * CORE_BATCH)[:CORE_BATCH])
                costs["core_openvino"] = cpu_ms(partial(openvino.run_core, feeds), CORE_BATCH, repeats)
                steps = ("decode", "preprocess", "core", "postprocess", "stages", "preprocess_drift", "postprocess_drift")
                pixels = np.mean([decoded.image.shape[0] * decoded.image.shape[1] for decoded in map(served.decode, payloads)])
                report.add(
                    result,
                    "pipelines",
                    pipeline=pipeline.name,
                    mix=mix,
                    decoder=decoder,
                    **costs,
                    total=sum(costs.get(step, 0.0) for step in steps),
                    decoded_mp=round(float(pixels) / 1e6, 2),
                )


def measure_runtimes(result: dict, pipelines: list[layout.Pipeline], repeats: int) -> None:
    report.table(
        result,
        "runtimes",
        "The core alone: runtime and precision (batch 8, one thread)",
        {"pipeline": "pipeline", "runtime": "runtime, precision", "config": "core config", "wall_ms": "wall ms/img"}
        | {"cpu_ms": "CPU ms/img", "cosine": "logits cosine vs onnxruntime fp32"},
        "Inputs: 8 web photos through the served decode and preprocessing. cosine: mean over the batch of the first output's "
        "cosine similarity with FP32 onnxruntime's.",
    )
    payloads = [p.data for p in images.upload_mix("web")][:CORE_BATCH]
    for pipeline in pipelines:
        reference: list[np.ndarray] | None = None
        for name, (config, parameters) in RUNTIMES.items():
            report.log(BENCHMARK, f"{pipeline.name}: core on {name}")
            try:
                served = inprocess.load(pipeline, inprocess.Variant(core_config=config, threads=1, parameters=parameters))
            except Exception as error:  # an INT8 model not built, a runtime not installed: the row says so
                report.add(result, "runtimes", pipeline=pipeline.name, runtime=name, config=config, error=str(error)[:200])
                continue
            served_file = core_model.onnx_filename(served.core_config, pipeline.core_version_dir)
            if "int8" in name and served_file != layout.INT8_ONNX:  # a pipeline whose ladder has no INT8 rung
                report.add(result, "runtimes", pipeline=pipeline.name, runtime=name, config=config, error=f"{config} serves {served_file}")
                continue
            one_thread()
            feeds = inprocess.core_input(served, payloads)
            wall, used = wall_and_cpu_ms(partial(served.run_core, feeds), len(payloads), repeats)
            # One row per image (ragged where each photo has its own size: a text detector's maps).
            output = [np.asarray(item, np.float64).reshape(-1) for item in next(iter(served.run_core(feeds).values()))]
            reference = output if reference is None else reference
            cosine = np.array([np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)) for a, b in zip(reference, output)])
            report.add(
                result,
                "runtimes",
                pipeline=pipeline.name,
                runtime=name,
                config=config,
                wall_ms=wall,
                cpu_ms=used,
                cosine=float(cosine.mean()),
            )


def measure_detection(result: dict, repeats: int, batch: int = 8) -> None:
    from benchmarks import detection

    report.table(
        result,
        "detection",
        "YOLO postprocessing by candidates above the score threshold (80 classes at 640x640)",
        {
            "head": "head",
            "raw_output": "raw output per image",
            "candidates": "candidates",
            "ms_per_image": "CPU ms/img",
            "kept_per_image": "kept per image",
        },
        f"Batches of {batch}, one thread: parse + threshold + class-aware hard NMS + the map back to the photo + the response tensors.",
    )
    with tempfile.TemporaryDirectory() as scratch:
        for head, shapes in detection.heads().items():
            report.log(BENCHMARK, f"detection postprocess, {head}")
            for candidates in detection.CANDIDATES:
                measured = detection.measure(head, candidates, batch, repeats, Path(scratch))
                report.add(
                    result,
                    "detection",
                    head=head,
                    raw_output=" + ".join(str(list(dims)) for dims in shapes),
                    candidates=candidates,
                    **measured,
                )


def measure_text_canvas(result: dict) -> None:
    from benchmarks import text_reading

    report.table(
        result,
        "text_canvas",
        "The text detector's input padded to a canvas, against each photo's own size (the text mix)",
        {
            "canvas": "canvas",
            "photos": "photos",
            "left_out": "larger than the canvas",
            "detector_ms": "detector CPU ms/photo",
            "megapixels": "input MP/photo",
            "exact_lines": "lines as at own size",
            "cer": "CER",
            "box_iou_mean": "box IoU mean",
            "box_iou_min": "box IoU min",
        },
        "One thread, onnxruntime FP32, batch 1; padding black. Lines paired with the own-size reading by box IoU (what is "
        "served: RapidOCR's own answers on 59 of 60 test lines).",
    )
    report.log(BENCHMARK, "text reader, detector canvases")
    for row in text_reading.canvas_costs():
        report.add(result, "text_canvas", **row)


def measure_text_reading(result: dict, repeats: int) -> None:
    from benchmarks import text_reading

    report.table(
        result,
        "text_reading",
        "The text reader: CPU ms per photo of each step, by lines of text",
        {
            "lines_drawn": "lines drawn",
            "crops": "crops",
            "lines_read": "lines read",
            "preprocess": "preprocess",
            "detector": "detector",
            "postprocess_python": "postprocess (Python)",
            "classifier": "classifier",
            "recognizer": "recognizer",
            "total": "total",
        },
        f"A 640x480 photo, one thread, onnxruntime; the second stages in the served postprocess's chunks of {text_reading.CROP_BATCH}. "
        "postprocess (Python): DB boxes, crops, the models' inputs and CTC decoding.",
    )
    report.log(BENCHMARK, "text reader, by lines of text")
    for row in text_reading.measure(repeats):
        report.add(result, "text_reading", **row)


def measure_decode(result: dict, repeats: int) -> None:
    from builders import loaded

    report.table(
        result,
        "decode",
        "Decoding a 12 MP phone photo: JPEG, HEIC and AVIF of the same pixels",
        {"mix": "mix", "format": "format", "decoder": "decode", "cpu_ms": "CPU ms/img", "decoded_mp": "decoded MP", "megabytes": "MB/file"},
        "One thread, the image_classifier's preprocess limits, the decoder alone (no resize). served: as the classifier decodes "
        "(a JPEG at the DCT scale its center crop needs; HEIC and AVIF have no reduced decode); full: the whole image, as the "
        "text reader decodes every format (and every pipeline with decode_oversampling 0). Half the photos are portraits stored sideways (JPEG: Exif "
        "orientation 6; HEIC, AVIF: irot): the orientation step is in the figure.",
    )
    one_thread()
    classifier = loaded.load(CLASSIFIER)
    spec, limits = classifier.configs.spec, classifier.configs.limits
    for mix in DECODE_MIXES:
        payloads = [p.data for p in images.upload_mix(mix)]
        image_format = str(image_codec.sniff_format(payloads[0][: image_codec.SNIFF_BYTES]))
        for decoder, minimum in (("served", preprocessing.decode_minimum(spec)), ("full", None)):
            report.log(BENCHMARK, f"decode, {mix}, {decoder}")

            def decode_all(
                minimum: image_codec.MinimumSize | None = minimum, payloads: list[bytes] = payloads
            ) -> list[image_codec.Decoded]:
                return [image_codec.decode(data, limits, minimum) for data in payloads]

            pixels = np.mean([item.image.shape[0] * item.image.shape[1] for item in decode_all()])
            report.add(
                result,
                "decode",
                mix=mix,
                format=image_format,
                decoder=decoder,
                cpu_ms=cpu_ms(decode_all, len(payloads), repeats),
                decoded_mp=round(float(pixels) / 1e6, 2),
                megabytes=round(float(np.mean([len(data) for data in payloads])) / 1e6, 2),
            )


def measure_drift(result: dict, repeats: int) -> None:
    from builders import calibration, drift_reference, loaded

    report.table(
        result,
        "drift",
        "Drift statistics apart (in-process)",
        {"measure": "measure", "cpu_ms": "CPU ms"},
        "Images: the classifier's held-out photos and seeded augmentations; outputs: the served pipelines' own on them. "
        "One update: every feature of a full default window against the classifier's reference.",
    )
    one_thread()
    classifier = loaded.load(CLASSIFIER)
    spec, limits = classifier.configs.spec, classifier.configs.limits
    samples = calibration.make_samples(calibration.evaluation_sources(classifier), 64, 1, calibration.EVALUATION_PROFILE, limits)
    payloads = [sample.data for sample in samples][:8]

    def add(name: str, function: Callable[[], object]) -> None:
        report.add(result, "drift", measure=name, cpu_ms=cpu_ms(function, 1, repeats))

    for name, minimum in (("reduced decode (classifier)", preprocessing.decode_minimum(spec)), ("full decode (segmenter, detector)", None)):
        decoded = [image_codec.decode(payload, limits, minimum) for payload in payloads]
        pictures, sizes = [item.image for item in decoded], preprocessing.original_sizes(decoded)
        facts = drift.payload_facts(payloads)
        add(f"image features, batch of 8, {name}", partial(drift.image_features, pictures, sizes, *facts))
        add(f"image features, 1 image, {name}", partial(drift.image_features, pictures[:1], sizes[:1], facts[0][:1], facts[1][:1]))
        add(f"preprocess_batch (the model's own work), batch of 8, {name}", partial(preprocessing.preprocess_batch, pictures, spec))
    logits = np.random.default_rng(0).normal(0, 3, (8, 1000)).astype(np.float32)
    add("non-finite check, logits batch of 8", lambda: drift.finite_rows(logits))
    reference_path = drift_reference.build(classifier, log=lambda message: None)
    settings = drift.DriftSettings.from_config(classifier.configs.preprocess, drift.IMAGE_FEATURES)
    rng = np.random.default_rng(0)
    for model in (CLASSIFIER.model_name("preprocess"), CLASSIFIER.model_name("postprocess")):
        reference = drift.load_reference(reference_path, model)
        monitor = drift.DriftMonitor(reference, settings, background=False)
        stream = drift.Features(
            {name: rng.choice(values, settings.window) for name, values in reference.numeric.items()},
            {name: list(rng.choice(sorted(counts), settings.window)) for name, counts in reference.categorical.items()},
        )
        monitor.observe(stream)
        numeric = {name: buffer.snapshot() for name, buffer in monitor.numeric.items()}
        categorical = {name: buffer.snapshot() for name, buffer in monitor.categorical.items()}
        tests = f"{len(numeric)} KS + {len(categorical)} chi-square, window {settings.window}"
        add(f"one update ({tests}), {model}", partial(drift.compare, numeric, categorical, monitor.reference, settings.min_samples))
        batch = drift.Features({k: v[:8] for k, v in stream.numeric.items()}, {k: v[:8] for k, v in stream.categorical.items()})
        appender = drift.DriftMonitor(
            reference, drift.DriftSettings(window=settings.window, min_samples=settings.min_samples, update_every=10**9), background=False
        )
        add(f"append a batch of 8 to the windows (request thread), {model}", partial(appender.observe, batch))


# ---------------------------------------------------------------------------- the command line


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.steps", description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", type=report.names(PARTS, "parts"), default=PARTS, help=f"default {','.join(PARTS)}")
    parser.add_argument("--pipelines", default="all", help="comma-separated pipelines of the pipelines and runtimes parts (default all)")
    parser.add_argument("--mixes", type=report.names(images.MIXES, "mixes"), default=("web", "phone"), help="default web,phone")
    parser.add_argument("--decoders", type=report.names(inprocess.DECODES, "decoders"), default=("served", "opencv"))
    parser.add_argument("--repeats", type=int, default=3, help="passes per figure (the best counts; default 3)")
    parser.add_argument("--model-repository", type=Path, default=layout.MODEL_REPOSITORY)
    report.add_output_arguments(parser, BENCHMARK)
    args = parser.parse_args(argv)
    known = [p.name for p in layout.pipelines(args.model_repository)]
    chosen = known if args.pipelines == "all" else report.names(known, "pipelines")(args.pipelines)
    args.chosen = [layout.pipeline(name, args.model_repository) for name in chosen]
    args.output = args.output or report.RESULTS_DIR
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if report.rendered_only(args, BENCHMARK):
        return 0
    settings: dict[str, Any] = {"parts": list(args.parts), "pipelines": [p.name for p in args.chosen], "mixes": list(args.mixes)}
    settings |= {"decoders": list(args.decoders), "repeats": args.repeats}
    result = report.new(
        BENCHMARK, "Steps: CPU ms per image of each step, one thread", report.command_line("benchmarks.steps", argv), settings
    )
    result["notes"].append(
        "CPU time (process_time), best of the passes; photos from benchmarks/images.py. decoder opencv = the decoder before "
        "reduced decoding (cv2.imdecode at full size); served = DCT-reduced JPEG decode (decode_oversampling of the preprocess config)."
    )
    if "pipelines" in args.parts:
        measure_pipelines(result, args.chosen, args.mixes, args.decoders, args.repeats)
    if "runtimes" in args.parts:
        measure_runtimes(result, args.chosen, max(args.repeats, 5))
    if "detection" in args.parts:
        measure_detection(result, max(args.repeats, 5))
    if "drift" in args.parts:
        measure_drift(result, max(args.repeats, 10))
    if "text_reading" in args.parts:
        measure_text_reading(result, max(args.repeats, 3))
    if "text_canvas" in args.parts:
        measure_text_canvas(result)
    if "decode" in args.parts:
        measure_decode(result, args.repeats)
    written = report.write(report.finish(result), args.output)
    report.log(BENCHMARK, f"after {result['elapsed_s']:.0f} s: {', '.join(map(str, written))}")
    print(report.markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
