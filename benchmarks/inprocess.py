"""The served computation in this process, no server, and the in-process measurements on it.

The one in-process implementation is :class:`vision_serving.served.ServedPipeline`: the same
decode -> preprocess -> core -> postprocess as the ensemble, from the same library and configs.
What the benchmarks vary is a :class:`Variant`, a parameter of :func:`load`:

- ``core_config``: the core's config variant (``cpu``: what the local server serves;
  ``cpu_onnxruntime``: FP32 onnxruntime; ``cpu_openvino`` ...), ``threads`` its intra-op
  (onnxruntime) or inference (OpenVINO) threads;
- ``library_defaults``: the runtime's and OpenCV's default thread settings instead of the served
  ones (onnxruntime: one spinning intra-op thread per CPU): what a service written without tuning
  gets, the naive baseline;
- ``decode``: ``served`` (JPEGs at the DCT scale the resize needs), ``full`` (the served decoder
  at full size) or ``opencv`` (``cv2.imdecode`` at full size, EXIF applied: the decoder before
  reduced decoding);
- ``decode_oversampling``, ``resize_reducing_gap``: another value than the preprocess config's;
- ``parameters``: other core parameters (e.g. ``(("precision", "int8"),)`` on an OpenVINO variant).

The measurements (:func:`limit`): batches of uploads through ``ServedPipeline.run`` and every
output tensor, as the server answers, in one of :data:`MODES`; the best row is the in-process limit.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from benchmarks import CLASSIFIER
from vision_serving import cpu_runtimes, image_codec, layout, preprocessing
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.served import SERVED_CORE_CONFIG, ServedPipeline

DECODES = ("served", "full", "opencv")
# sequential: one thread. pipelined: decode+preprocess of the next batch overlaps the core and
# postprocess of this one. threads: one thread per CPU, each doing everything (one shared session).
# processes: one process per CPU, each with its own pipeline (no GIL shared).
MODES = ("sequential", "pipelined", "threads", "processes")


@dataclass(frozen=True)
class Variant:
    core_config: str = SERVED_CORE_CONFIG
    threads: int | None = None
    library_defaults: bool = False
    decode: str = "served"
    decode_oversampling: float | None = None
    resize_reducing_gap: float | None = None
    parameters: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.decode not in DECODES:
            raise ValueError(f"decode {self.decode!r} is not one of {DECODES}")


SERVED = Variant()
# The in-process limit before reduced decoding: FP32 onnxruntime, OpenCV's full-size decode.
BEFORE_REDUCED_DECODING = Variant(core_config="cpu_onnxruntime", decode="opencv")


class BenchedPipeline(ServedPipeline):
    """:class:`ServedPipeline` with a decode mode (``Variant.decode``); everything else is the served code."""

    decode_mode = "served"
    runtime = "onnxruntime"

    def decode(self, data: bytes) -> image_codec.Decoded:
        if self.decode_mode == "full":
            return image_codec.decode(data, self.limits)
        if self.decode_mode == "opencv":
            image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
            if image is None:
                raise image_codec.ImageError("OpenCV could not decode the image")
            rgb = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
            return image_codec.Decoded(rgb, rgb.shape[0], rgb.shape[1])
        return super().decode(data)


def load(pipeline: layout.Pipeline = CLASSIFIER, variant: Variant = SERVED) -> BenchedPipeline:
    """``pipeline``'s served computation with ``variant``'s changes (thread settings are process-wide)."""
    configs = PipelineConfigs.load(pipeline)
    runtime = cpu_runtimes.of_config(configs.core_variant(variant.core_config))
    parameters = dict(variant.parameters)
    if variant.threads is not None:
        parameters[runtime.threads_parameter] = str(variant.threads)
    if variant.library_defaults:
        parameters |= {runtime.threads_parameter: "0", **runtime.untuned}
    served = BenchedPipeline.load(configs, variant.core_config, parameters)
    assert isinstance(served, BenchedPipeline)
    served.runtime = runtime.name
    served.decode_mode = variant.decode
    if variant.library_defaults:
        preprocessing.set_threads(0)
    else:
        served.use_served_threads()
    if served.custom is not None:  # a preprocessor of its own (text detection): no image-to-tensor spec to vary
        return served
    if variant.decode_oversampling is not None:
        served.spec = dataclasses.replace(served.spec, decode_oversampling=variant.decode_oversampling)
    if variant.resize_reducing_gap is not None:
        served.spec = dataclasses.replace(served.spec, resize_reducing_gap=variant.resize_reducing_gap)
    served.minimum = preprocessing.decode_minimum(served.spec)
    return served


def core_input(served: ServedPipeline, payloads: list[bytes]) -> dict[str, np.ndarray]:
    """The core's inputs for these uploads (by its names), as the ensemble feeds it."""
    return served.core_feeds(served.preprocessed([served.decode(data) for data in payloads]))


# ---------------------------------------------------------------------------- measuring


def _batches(payloads: list[bytes], batch_size: int, offset: int = 0) -> Iterator[list[bytes]]:
    index = offset
    while True:
        yield [payloads[(index + i) % len(payloads)] for i in range(batch_size)]
        index += batch_size


def _answer(served: ServedPipeline, batch: list[bytes]) -> int:
    served.run(batch).outputs()  # every output tensor, as the server answers
    return len(batch)


def _row(mode: str, batch_size: int, images: int, elapsed_s: float, cpu_s: float, latencies: list[float] | None = None) -> dict:
    return {
        "mode": mode,
        "batch_size": batch_size,
        "images": images,
        "throughput": images / elapsed_s,
        "batch_ms_p50": float(np.percentile(latencies, 50) * 1e3) if latencies else None,
        "cpu_ms_per_image": round(cpu_s * 1e3 / images, 2) if images else None,
    }


def _cpu_s() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def sequential(served: ServedPipeline, payloads: list[bytes], batch_size: int, duration_s: float) -> dict:
    """One thread: a batch through the whole pipeline, then the next."""
    batches = _batches(payloads, batch_size)
    _answer(served, next(batches))  # warm-up (the first run allocates)
    latencies, images = [], 0
    cpu, start = _cpu_s(), time.perf_counter()
    while time.perf_counter() - start < duration_s:
        began = time.perf_counter()
        images += _answer(served, next(batches))
        latencies.append(time.perf_counter() - began)
    return _row("sequential", batch_size, images, time.perf_counter() - start, _cpu_s() - cpu, latencies)


def pipelined(served: ServedPipeline, payloads: list[bytes], batch_size: int, duration_s: float) -> dict:
    """Two stages overlapped, as the ensemble overlaps its steps: one thread decodes and preprocesses
    batch i+1 while the core and postprocess run batch i (OpenCV and the runtimes release the GIL)."""
    batches = _batches(payloads, batch_size)
    _answer(served, next(batches))

    def first_stage(batch: list[bytes]) -> dict[str, np.ndarray]:
        return served.preprocessed([served.decode(data) for data in batch])

    images = 0
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(first_stage, next(batches))
        cpu, start = _cpu_s(), time.perf_counter()
        while time.perf_counter() - start < duration_s:
            tensors = pending.result()
            pending = pool.submit(first_stage, next(batches))
            result = served.postprocess(served.with_core(tensors))
            result.outputs()
            images += len(result)
        elapsed = time.perf_counter() - start
        pending.result()
    return _row("pipelined", batch_size, images, elapsed, _cpu_s() - cpu)


def threads(served: ServedPipeline, payloads: list[bytes], batch_size: int, duration_s: float, workers: int) -> dict:
    """``workers`` threads, each running the whole pipeline on its own batches (one shared session)."""
    _answer(served, payloads[:batch_size])
    counts = [0] * workers
    deadline = time.perf_counter() + duration_s

    def work(worker: int) -> None:
        batches = _batches(payloads, batch_size, offset=worker)
        while time.perf_counter() < deadline:
            counts[worker] += _answer(served, next(batches))

    cpu, start = _cpu_s(), time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(work, range(workers)))
    return _row(f"threads x{workers}", batch_size, sum(counts), time.perf_counter() - start, _cpu_s() - cpu)


def _process_worker(
    pipeline: layout.Pipeline, variant: Variant, payloads: list[bytes], batch_size: int, duration_s: float, queue: Any
) -> None:
    row = sequential(load(pipeline, variant), payloads, batch_size, duration_s)
    queue.put(row["images"])


def processes(pipeline: layout.Pipeline, variant: Variant, payloads: list[bytes], batch_size: int, duration_s: float, workers: int) -> dict:
    """``workers`` processes side by side, each with its own pipeline, one thread each."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    children = [
        context.Process(target=_process_worker, args=(pipeline, variant, payloads, batch_size, duration_s, queue)) for _ in range(workers)
    ]
    cpu, start = _cpu_s(), time.perf_counter()
    for child in children:
        child.start()
    images = sum(queue.get(timeout=duration_s + 300) for _ in children)
    for child in children:
        child.join()
    # The children's start-up (imports, session creation) is in the window: the rate is a lower bound.
    return _row(f"processes x{workers}", batch_size, images, time.perf_counter() - start, _cpu_s() - cpu)


def cpus() -> int:
    return max(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2))


def limit(
    pipeline: layout.Pipeline,
    payloads: list[bytes],
    batch_sizes: list[int],
    duration_s: float,
    modes: tuple[str, ...] = ("sequential", "pipelined", "threads"),
    variant: Variant = SERVED,
) -> list[dict]:
    """The in-process limit: every mode of ``modes`` at every batch size, one row each; the best row is the limit."""
    unknown = set(modes) - set(MODES)
    if unknown:
        raise ValueError(f"unknown modes {sorted(unknown)}; known: {', '.join(MODES)}")
    served = load(pipeline, variant) if set(modes) - {"processes"} else None
    workers = cpus()
    found = []
    for size in batch_sizes:
        for mode in modes:
            if mode == "processes":
                found.append(processes(pipeline, variant, payloads, size, duration_s, workers))
                continue
            assert served is not None
            if mode == "sequential":
                found.append(sequential(served, payloads, size, duration_s))
            elif mode == "pipelined":
                found.append(pipelined(served, payloads, size, duration_s))
            else:
                found.append(threads(served, payloads, size, duration_s, workers))
    return found


def single_request(pipeline: layout.Pipeline, payloads: list[bytes], duration_s: float, core_threads: int = 2) -> dict:
    """One request at a time, batch 1, the served decoder, FP32 onnxruntime on ``core_threads`` intra-op
    threads: the latency a request could have with nothing else to do (the c=1 reference)."""
    served = load(pipeline, Variant(core_config="cpu_onnxruntime", threads=core_threads))
    row = sequential(served, payloads, 1, duration_s)
    row["mode"] = f"single request, {core_threads} threads"
    return row
