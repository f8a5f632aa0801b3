"""The served computation in one Python process, no server, with the benchmarks' variants.

:class:`Pipeline` is :class:`vision_serving.served.ServedPipeline` (the same decode ->
preprocess -> core -> postprocess from the same library and model-repository configs: the
preprocess config, a core config variant with its session options, the postprocess config),
so the in-process limit and the naive service do exactly the served work; the variants:

``library_defaults=True`` keeps the served computation but not the served thread settings: the
core with its runtime's default thread count (onnxruntime: one intra-op thread per CPU,
spinning) and OpenCV's default thread pool, which is what a service written without tuning
gets (the naive baseline).

``decode``: ``served`` decodes as the preprocess model does (JPEGs at the DCT scale the resize
needs); ``opencv`` is the decoder before that (``cv2.imdecode`` at full size, EXIF applied:
main at 79b1611), the reference of the in-process limit before reduced decoding.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np

from benchmarks import CLASSIFIER
from vision_serving import core_model, image_codec, layout, preprocessing
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.served import SERVED_CORE_CONFIG, ServedPipeline
from vision_serving.tasks.base import TaskResult

CORE_CONFIG_NAME = SERVED_CORE_CONFIG
DECODERS = ("served", "opencv")


def opencv_decode(data: bytes) -> np.ndarray:
    """The decoder before reduced decoding: OpenCV, full size, EXIF orientation applied, RGB."""
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if image is None:
        raise image_codec.ImageError("OpenCV could not decode the image")
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


class Pipeline:
    def __init__(
        self,
        repository: Path = layout.MODEL_REPOSITORY,
        core_config_name: str = CORE_CONFIG_NAME,
        library_defaults: bool = False,
        pipeline: str = CLASSIFIER.name,
        decode: str = "served",
        intra_op_threads: int | None = None,
    ):
        """``repository``: the model repository holding the pipelines (what the server is given)."""
        if decode not in DECODERS:
            raise ValueError(f"decode {decode!r} is not one of {DECODERS}")
        self.decode = decode
        configs = PipelineConfigs.load(layout.pipeline(pipeline, Path(repository)))
        self.runtime = core_model.runtime(configs.core_variant(core_config_name))
        threads = "intra_op_threads" if self.runtime == "onnxruntime" else "inference_threads"
        parameters: dict[str, str] = {}
        if intra_op_threads is not None:  # e.g. one single request on 2 threads
            parameters[threads] = str(intra_op_threads)
        if library_defaults:  # the naive baseline: the runtime's own thread count (onnxruntime: spinning, too)
            parameters[threads] = "0"
            if self.runtime == "onnxruntime":
                parameters["allow_spinning"] = "1"
        self.served = ServedPipeline.load(configs, core_config_name, parameters)
        if library_defaults:
            preprocessing.set_threads(0)
        else:
            self.served.use_served_threads()  # OpenCV's pool as the preprocess model sets it
        self.spec, self.limits, self.minimum = self.served.spec, self.served.limits, self.served.minimum
        self.core = self.served.core
        (self.core_input,) = self.core.input_names

    def decode_all(self, payloads: list[bytes]) -> list[image_codec.Decoded]:
        if self.decode == "opencv":
            images = [opencv_decode(data) for data in payloads]
            return [image_codec.Decoded(image, image.shape[0], image.shape[1]) for image in images]
        return [self.served.decode(data) for data in payloads]

    def preprocess(self, payloads: list[bytes]) -> dict[str, np.ndarray]:
        """The ensemble tensors after the preprocess step."""
        return self.served.preprocessed(self.decode_all(payloads))

    def core_batch(self, payloads: list[bytes]) -> np.ndarray:
        """The core's (one) input for these uploads, as the ensemble feeds it."""
        return self.served.core_feeds(self.preprocess(payloads))[self.core_input]

    def finish(self, tensors: Mapping[str, np.ndarray]) -> TaskResult:
        return self.served.postprocess(self.served.with_core(tensors))

    def run(self, payloads: list[bytes]) -> TaskResult:
        return self.finish(self.preprocess(payloads))


def _batches(payloads: list[bytes], batch_size: int):
    index = 0
    while True:
        yield [payloads[(index + offset) % len(payloads)] for offset in range(batch_size)]
        index += batch_size


def measure_sequential(pipeline: Pipeline, payloads: list[bytes], batch_size: int, duration_s: float) -> dict:
    """One thread: decode+preprocess a batch, run the core on it, top-k; repeat."""
    batches = _batches(payloads, batch_size)
    pipeline.run(next(batches))  # warm-up (first run allocates)
    latencies, images = [], 0
    start = time.perf_counter()
    while time.perf_counter() - start < duration_s:
        began = time.perf_counter()
        results = pipeline.run(next(batches))
        latencies.append(time.perf_counter() - began)
        images += len(results)
    elapsed = time.perf_counter() - start
    return {
        "mode": "sequential",
        "batch_size": batch_size,
        "images": images,
        "throughput": images / elapsed,
        "batch_ms_p50": float(np.percentile(latencies, 50) * 1e3),
    }


def measure_pipelined(pipeline: Pipeline, payloads: list[bytes], batch_size: int, duration_s: float) -> dict:
    """Two stages overlapped: one thread decodes+preprocesses batch i+1 while the core runs batch i.

    OpenCV and onnxruntime release the GIL, so this is what one process can
    reach when preprocessing does not wait for the core (Triton's ensemble
    overlaps its steps the same way).
    """
    batches = _batches(payloads, batch_size)
    pipeline.run(next(batches))
    images = 0
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(pipeline.preprocess, next(batches))
        start = time.perf_counter()
        while time.perf_counter() - start < duration_s:
            batch = pending.result()
            pending = pool.submit(pipeline.preprocess, next(batches))
            images += len(pipeline.finish(batch))
        elapsed = time.perf_counter() - start
        pending.result()
    return {"mode": "pipelined", "batch_size": batch_size, "images": images, "throughput": images / elapsed}


def measure_parallel(pipeline: Pipeline, payloads: list[bytes], batch_size: int, duration_s: float, workers: int) -> dict:
    """``workers`` threads, each running the whole pipeline on its own batches (one shared session)."""
    pipeline.run(payloads[:batch_size])
    counts = [0] * workers
    deadline = time.perf_counter() + duration_s

    def work(worker: int) -> None:
        batches = _batches(payloads[worker:] + payloads[:worker], batch_size)
        while time.perf_counter() < deadline:
            counts[worker] += len(pipeline.run(next(batches)))

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(work, range(workers)))
    elapsed = time.perf_counter() - start
    return {"mode": f"parallel x{workers}", "batch_size": batch_size, "images": sum(counts), "throughput": sum(counts) / elapsed}


MODES = ("sequential", "pipelined", "parallel")


def measure(
    repository: Path, payloads: list[bytes], batch_sizes: list[int], duration_s: float, modes=MODES, **pipeline_options
) -> list[dict]:
    """The in-process limit: every mode at every batch size; the best row is the limit.

    sequential: one thread. pipelined: preprocessing of the next batch overlaps
    the core. parallel: one thread per CPU, each doing everything. The served
    session options are used throughout; which mode wins depends on them (a
    single-threaded session needs parallel threads to use the machine). ``pipeline_options``:
    :class:`Pipeline`'s (core config, decoder).
    """
    pipeline = Pipeline(repository, **pipeline_options)
    workers = max(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2))
    rows = []
    for size in batch_sizes:
        if "sequential" in modes:
            rows.append(_with_cpu(measure_sequential, pipeline, payloads, size, duration_s))
        if "pipelined" in modes:
            rows.append(_with_cpu(measure_pipelined, pipeline, payloads, size, duration_s))
        if "parallel" in modes:
            rows.append(_with_cpu(measure_parallel, pipeline, payloads, size, duration_s, workers))
    return rows


def _with_cpu(function, *args) -> dict:
    """Also report this process's CPU ms per image (includes the one warm-up batch)."""
    before = os.times()
    row = function(*args)
    after = os.times()
    used = (after.user + after.system) - (before.user + before.system)
    row["cpu_ms_per_image"] = round(used * 1e3 / row["images"], 2) if row["images"] else None
    return row


def measure_again(repository: Path, payloads: list[bytes], row: dict, duration_s: float, **pipeline_options) -> dict:
    """The same mode and batch size as ``row`` once more (drift check at the end of a run)."""
    mode = row["mode"].split()[0]
    return measure(repository, payloads, [row["batch_size"]], duration_s, modes=(mode,), **pipeline_options)[0]


def measure_single_request(repository: Path, payloads: list[bytes], duration_s: float, threads: int = 2) -> dict:
    """One request at a time, batch 1, the served decoder, onnxruntime FP32 on ``threads`` intra-op threads:
    the latency a request could have with nothing else to do (the c=1 reference)."""
    pipeline = Pipeline(repository, core_config_name="cpu_onnxruntime", intra_op_threads=threads)
    row = _with_cpu(measure_sequential, pipeline, payloads, 1, duration_s)
    row["mode"] = f"single request, {threads} threads"
    return row
