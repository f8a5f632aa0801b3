"""The served computation in one Python process, no server: decode -> preprocess -> core -> top-k.

It is built from the same library and the same model-repository configs as
the Triton models (preprocess config, core ``configs/cpu.pbtxt`` with its
onnxruntime session options, postprocess labels and default k), so the
in-process limit and the naive service do exactly the served work.

``library_defaults=True`` keeps the served computation but not the served
thread settings: an onnxruntime session with default options (one intra-op
thread per CPU, spinning) and OpenCV's default thread pool, which is what a
service written without tuning gets (the naive baseline).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from benchmarks import CLASSIFIER
from vision_serving import classification, core_model, layout, model_config, preprocessing
from vision_serving.onnx_core import OnnxCore

CORE_CONFIG_NAME = "cpu"


class Pipeline:
    def __init__(
        self,
        repository: Path = layout.MODEL_REPOSITORY,
        core_config_name: str = CORE_CONFIG_NAME,
        library_defaults: bool = False,
        pipeline: str = CLASSIFIER.name,
    ):
        """``repository``: the model repository holding the pipelines (what the server is given)."""
        served = layout.pipeline(pipeline, Path(repository))
        preprocess_config = model_config.load_config(served.model_dir("preprocess"))
        self.spec = preprocessing.PreprocessSpec.from_config(preprocess_config)
        self.limits = preprocessing.limits_from_config(preprocess_config)
        # The served thread settings: OpenCV's pool as the preprocess model sets it.
        opencv_threads = 0 if library_defaults else model_config.int_parameter(preprocess_config, "opencv_threads", 0)
        preprocessing.set_threads(opencv_threads)
        if library_defaults:  # the naive baseline: onnxruntime with its default session options
            core_config = model_config.load_config(served.core_dir, "cpu_onnxruntime")
            onnx_core = OnnxCore(core_config, served.core_version_dir)
            import onnxruntime

            onnx_path = core_model.onnx_path(core_config, served.core_version_dir)
            onnx_core.session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
            self.core: core_model.Core = onnx_core
        else:  # the served core: its runtime and precision, as the cpu config names them
            self.core = core_model.load(model_config.load_config(served.core_dir, core_config_name), served.core_version_dir)
        (self.core_input,) = self.core.input_names
        postprocess_config = model_config.load_config(served.model_dir("postprocess"))
        logits = model_config.tensors_by_role(postprocess_config).required_input("FP32")
        num_classes = int(model_config.tensor(postprocess_config, logits, "input").dims[-1])
        self.top_k = model_config.int_parameter(postprocess_config, "top_k")
        self.labels = classification.load_labels(
            served.model_dir("postprocess") / model_config.parameter(postprocess_config, "labels_file"), num_classes
        )

    def preprocess(self, payloads: list[bytes]) -> np.ndarray:
        decoded = preprocessing.decode_payloads(np.array(payloads, dtype=np.object_), self.limits)
        return preprocessing.preprocess_batch(decoded, self.spec)

    def finish(self, batch: np.ndarray) -> list[classification.TopK]:
        (logits,) = self.core.run({self.core_input: batch})
        return classification.top_k(logits, [self.top_k] * len(batch), self.labels)

    def classify(self, payloads: list[bytes]) -> list[classification.TopK]:
        return self.finish(self.preprocess(payloads))


def _batches(payloads: list[bytes], batch_size: int):
    index = 0
    while True:
        yield [payloads[(index + offset) % len(payloads)] for offset in range(batch_size)]
        index += batch_size


def measure_sequential(pipeline: Pipeline, payloads: list[bytes], batch_size: int, duration_s: float) -> dict:
    """One thread: decode+preprocess a batch, run the core on it, top-k; repeat."""
    batches = _batches(payloads, batch_size)
    pipeline.classify(next(batches))  # warm-up (first run allocates)
    latencies, images = [], 0
    start = time.perf_counter()
    while time.perf_counter() - start < duration_s:
        began = time.perf_counter()
        results = pipeline.classify(next(batches))
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
    pipeline.classify(next(batches))
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
    pipeline.classify(payloads[:batch_size])
    counts = [0] * workers
    deadline = time.perf_counter() + duration_s

    def work(worker: int) -> None:
        batches = _batches(payloads[worker:] + payloads[:worker], batch_size)
        while time.perf_counter() < deadline:
            counts[worker] += len(pipeline.classify(next(batches)))

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(work, range(workers)))
    elapsed = time.perf_counter() - start
    return {"mode": f"parallel x{workers}", "batch_size": batch_size, "images": sum(counts), "throughput": sum(counts) / elapsed}


MODES = ("sequential", "pipelined", "parallel")


def measure(repository: Path, payloads: list[bytes], batch_sizes: list[int], duration_s: float, modes=MODES) -> list[dict]:
    """The in-process limit: every mode at every batch size; the best row is the limit.

    sequential: one thread. pipelined: preprocessing of the next batch overlaps
    the core. parallel: one thread per CPU, each doing everything. The served
    session options are used throughout; which mode wins depends on them (a
    single-threaded session needs parallel threads to use the machine).
    """
    pipeline = Pipeline(repository)
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


def measure_again(repository: Path, payloads: list[bytes], row: dict, duration_s: float) -> dict:
    """The same mode and batch size as ``row`` once more (drift check at the end of a run)."""
    mode = row["mode"].split()[0]
    return measure(repository, payloads, [row["batch_size"]], duration_s, modes=(mode,))[0]
