"""What the drift statistics cost, in-process: feature extraction per image and per batch of 8, and one test update.

    .venv/bin/python -m benchmarks.drift_cost [--repeats 30]

Images: the classifier's held-out photos and seeded augmentations, decoded as the classifier's
preprocess model decodes them (reduced JPEG decode) and as the segmenter's does (full decode).
Outputs: random logits / probability maps / face scores of the served shapes (the features'
cost does not depend on the values). Update: one test of every feature of a full default window
(512) against the classifier's reference. Times are CPU seconds of this process (median of
``--repeats``), with OpenCV on one thread as the served preprocess models run it
(``opencv_threads`` 1), so other load on a shared machine counts little.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from builders import calibration, drift_reference, loaded
from vision_serving import drift, image_codec, layout, model_config, preprocessing
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.served import ServedPipeline


def cpu_ms(call: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.process_time()
        call()
        times.append(time.process_time() - started)
    return 1000 * statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.drift_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args(argv)
    preprocessing.set_threads(1)
    classifier = layout.pipeline("image_classifier")
    classifier_configs = PipelineConfigs.load(classifier)
    spec, limits = classifier_configs.spec, classifier_configs.limits
    sources = calibration.evaluation_sources(loaded.load(classifier))
    samples = calibration.make_samples(sources, 64, 1, calibration.EVALUATION_PROFILE, limits)
    payloads = [sample.data for sample in samples]
    results: dict[str, float] = {}
    for name, minimum in (("reduced decode (classifier)", preprocessing.decode_minimum(spec)), ("full decode (segmenter, detector)", None)):
        decoded = [image_codec.decode(payload, limits, minimum) for payload in payloads[:8]]
        images = [item.image for item in decoded]
        sizes = preprocessing.original_sizes(decoded)
        facts = drift.payload_facts(payloads[:8])
        batch = partial(drift.image_features, images, sizes, *facts)
        single = partial(drift.image_features, images[:1], sizes[:1], facts[0][:1], facts[1][:1])
        results[f"image features, batch of 8, {name}"] = cpu_ms(batch, args.repeats)
        results[f"image features, 1 image, {name}"] = cpu_ms(single, args.repeats)
        results[f"preprocess_batch (the model's own work), batch of 8, {name}"] = cpu_ms(
            partial(preprocessing.preprocess_batch, images, spec), args.repeats
        )
    rng = np.random.default_rng(0)
    for pipeline in layout.pipelines():
        served = ServedPipeline.load(PipelineConfigs.load(pipeline))
        result = served.run(payloads[:8])
        results[f"{pipeline.name} postprocess features ({served.configs.task.name}), batch of 8"] = cpu_ms(result.features, args.repeats)
    logits = rng.normal(0, 3, (8, 1000)).astype(np.float32)
    results["non-finite check, logits batch of 8"] = cpu_ms(lambda: drift.finite_rows(logits), args.repeats)

    path = drift_reference.build(loaded.load(classifier), log=lambda message: None)
    settings = drift.DriftSettings.from_config(model_config.load_config(classifier.model_dir("preprocess")), drift.IMAGE_FEATURES)
    for model in (classifier.model_name("preprocess"), classifier.model_name("postprocess")):
        reference = drift.load_reference(path, model)
        monitor = drift.DriftMonitor(reference, settings, background=False)
        stream = drift.Features(
            {name: rng.choice(values, settings.window) for name, values in reference.numeric.items()},
            {name: list(rng.choice(sorted(counts_), settings.window)) for name, counts_ in reference.categorical.items()},
        )
        monitor.observe(stream)
        numeric = {name: buffer.snapshot() for name, buffer in monitor.numeric.items()}
        categorical = {name: buffer.snapshot() for name, buffer in monitor.categorical.items()}
        update = cpu_ms(partial(drift.compare, numeric, categorical, monitor.reference, settings.min_samples), args.repeats)
        results[f"one update ({len(numeric)} KS + {len(categorical)} chi-square, window {settings.window}), {model}"] = update
        one = drift.Features({k: v[:8] for k, v in stream.numeric.items()}, {k: v[:8] for k, v in stream.categorical.items()})
        appender = drift.DriftMonitor(
            reference, drift.DriftSettings(window=settings.window, min_samples=settings.min_samples, update_every=10**9), background=False
        )
        results[f"append a batch of 8 to the windows (request thread), {model}"] = cpu_ms(partial(appender.observe, one), args.repeats)
    for name, value in results.items():
        print(f"{value:8.3f} ms  {name}")
    print(json.dumps({name: round(value, 4) for name, value in results.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
