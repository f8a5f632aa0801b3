"""The served computation in one Python process, no server: decode -> preprocess -> core -> top-k.

It is built from the same library and the same model-repository configs as
the Triton models (preprocess config, core ``configs/cpu.pbtxt`` with its
onnxruntime session options, postprocess labels and default k), so the
in-process limit and the naive service do exactly the served work.

``library_defaults=True`` keeps the served computation but not the served
thread settings: an onnxruntime session with default options (one intra-op
thread per CPU, spinning) and OpenCV's default thread pool, which is what a
service written without tuning gets (the naive baseline); with an OpenVINO
``core_config_name`` the same config with OpenVINO's default thread count.

``decode``: ``served`` decodes as the preprocess model does (JPEGs at the DCT
scale the resize needs); ``opencv`` is the decoder before that
(``cv2.imdecode`` at full size, EXIF applied: main at 79b1611), the reference
of the issue's in-process limit.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np

from benchmarks import CLASSIFIER
from vision_serving import classification, core_model, image_codec, layout, model_config, preprocessing
from vision_serving.onnx_core import OnnxCore

CORE_CONFIG_NAME = "cpu"
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
        served = layout.pipeline(pipeline, Path(repository))
        preprocess_config = model_config.load_config(served.model_dir("preprocess"))
        self.spec = preprocessing.PreprocessSpec.from_config(preprocess_config)
        self.limits = preprocessing.limits_from_config(preprocess_config)
        if decode not in DECODERS:
            raise ValueError(f"decode {decode!r} is not one of {DECODERS}")
        self.decode = decode
        self.minimum = preprocessing.decode_minimum(self.spec)
        # The served thread settings: OpenCV's pool as the preprocess model sets it.
        opencv_threads = 0 if library_defaults else model_config.int_parameter(preprocess_config, "opencv_threads", 0)
        preprocessing.set_threads(opencv_threads)
        core_config = model_config.load_config(served.core_dir, core_config_name)
        self.runtime = model_config.parameter(core_config, "runtime", "onnxruntime")
        if intra_op_threads is not None:  # e.g. one single request on 2 threads
            core_config.parameters["intra_op_threads" if self.runtime == "onnxruntime" else "inference_threads"].string_value = str(
                intra_op_threads
            )
        if library_defaults and self.runtime == "openvino":  # naive on OpenVINO: its default thread count
            core_config.parameters["inference_threads"].string_value = "0"
            self.core: core_model.Core = core_model.load(core_config, served.core_version_dir)
        elif library_defaults:  # the naive baseline: onnxruntime with its default session options
            core_config = model_config.load_config(served.core_dir, "cpu_onnxruntime")
            onnx_core = OnnxCore(core_config, served.core_version_dir)
            import onnxruntime

            onnx_path = core_model.onnx_path(core_config, served.core_version_dir)
            onnx_core.session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
            self.core = onnx_core
        else:  # the served core: its runtime and precision, as the config names them
            self.core = core_model.load(core_config, served.core_version_dir)
        (self.core_input,) = self.core.input_names
        postprocess_config = model_config.load_config(served.model_dir("postprocess"))
        logits = model_config.tensors_by_role(postprocess_config).required_input("FP32")
        num_classes = int(model_config.tensor(postprocess_config, logits, "input").dims[-1])
        self.top_k = model_config.int_parameter(postprocess_config, "top_k")
        self.labels = classification.load_labels(
            served.model_dir("postprocess") / model_config.parameter(postprocess_config, "labels_file"), num_classes
        )

    def decode_all(self, payloads: list[bytes]) -> list[np.ndarray]:
        if self.decode == "opencv":
            return [opencv_decode(data) for data in payloads]
        items = np.array(payloads, dtype=np.object_)
        return [item.image for item in preprocessing.decode_payloads_reduced(items, self.limits, self.minimum)]

    def preprocess(self, payloads: list[bytes]) -> np.ndarray:
        return preprocessing.preprocess_batch(self.decode_all(payloads), self.spec)

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
