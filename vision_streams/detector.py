"""A frame to a detection pipeline and its answer back: one async gRPC request per frame (``tritonclient.grpc.aio``).

The frame goes as the pipeline's ``IMAGE`` input, ``[1, 1]`` BYTES: the frame encoded as JPEG (libjpeg-turbo through
simplejpeg, 4:2:0, in a worker thread: the encoder releases the GIL). docs/streams.md ("How a frame reaches Triton")
gives the measurements behind that choice. The request's ID is ``<stream>:<sequence>`` and its parameters carry the
stream's name and the frame's time (``stream``, ``timestamp_ns``), so the server's trace and log lines name the frame;
Triton's dynamic batcher puts the frames of all streams that arrive together into one batch.

Every detection pipeline answers ``BOXES`` ``[1, K, 4]`` (x_min, y_min, x_max, y_max in the frame's pixels),
``SCORES``, ``CLASS_IDS``, ``LABELS`` ``[1, K]`` and ``COUNT`` ``[1, 1]`` (rows past COUNT are padding); a head's own
extra outputs (keypoints, masks, rotated boxes) are not requested. Any detection pipeline works unchanged.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np
import simplejpeg
import tritonclient.grpc.aio as grpcclient

OUTPUTS = ("BOXES", "SCORES", "CLASS_IDS", "LABELS", "COUNT")


@dataclass(frozen=True)
class Detections:
    boxes: np.ndarray  # [N, 4] float32, frame pixels
    scores: np.ndarray  # [N]
    class_ids: np.ndarray  # [N] int32
    labels: list[str]

    def __len__(self) -> int:
        return len(self.scores)

    def only(self, labels: tuple[str, ...]) -> Detections:
        """The detections of these labels (all when empty)."""
        if not labels:
            return self
        keep = [i for i, label in enumerate(self.labels) if label in labels]
        return Detections(self.boxes[keep], self.scores[keep], self.class_ids[keep], [self.labels[i] for i in keep])


def encode_jpeg(pixels: np.ndarray, quality: int) -> bytes:
    return simplejpeg.encode_jpeg(pixels, quality=quality, colorspace="RGB", colorsubsampling="420")


def timed_jpeg(pixels: np.ndarray, quality: int) -> tuple[bytes, float]:
    """The JPEG and the CPU seconds its encoding took (this thread's)."""
    started = time.thread_time()
    return encode_jpeg(pixels, quality), time.thread_time() - started


def parse_answer(result) -> Detections:
    """A pipeline's answer to a one-frame request -> its detections (padding rows dropped)."""
    count = int(result.as_numpy("COUNT").reshape(-1)[0])
    boxes = result.as_numpy("BOXES").reshape(-1, 4)[:count].astype(np.float32)
    scores = result.as_numpy("SCORES").reshape(-1)[:count].astype(np.float32)
    class_ids = result.as_numpy("CLASS_IDS").reshape(-1)[:count].astype(np.int32)
    labels = [item.decode() if isinstance(item, bytes) else str(item) for item in result.as_numpy("LABELS").reshape(-1)[:count]]
    return Detections(boxes, scores, class_ids, labels)


class Detector:
    """The Triton client the service's streams share (one gRPC channel: HTTP/2 multiplexes their requests)."""

    def __init__(self, url: str, executor: Executor, jpeg_quality: int = 90, timeout_s: float = 10.0) -> None:
        self.url, self.executor, self.jpeg_quality, self.timeout_s = url, executor, jpeg_quality, timeout_s
        self.client = grpcclient.InferenceServerClient(url)
        self.requested = [grpcclient.InferRequestedOutput(name) for name in OUTPUTS]

    async def encode(self, pixels: np.ndarray) -> tuple[bytes, float]:
        """The frame as JPEG, encoded in the executor, and its encoding's CPU seconds."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, timed_jpeg, pixels, self.jpeg_quality)

    async def detect(
        self, model: str, payload: bytes, stream: str, sequence: int, wall_time: float, score_threshold: float | None = None
    ) -> Detections:
        image = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
        image.set_data_from_numpy(np.array([[payload]], dtype=np.object_))
        inputs = [image]
        if score_threshold is not None:
            threshold = grpcclient.InferInput("SCORE_THRESHOLD", [1, 1], "FP32")
            threshold.set_data_from_numpy(np.array([[score_threshold]], dtype=np.float32))
            inputs.append(threshold)
        result = await self.client.infer(
            model,
            inputs,
            outputs=self.requested,
            request_id=f"{stream}:{sequence}",
            client_timeout=self.timeout_s,
            parameters={"stream": stream, "timestamp_ns": int(wall_time * 1e9)},
        )
        return parse_answer(result)

    async def ready(self, model: str) -> bool:
        try:
            return bool(await self.client.is_model_ready(model))
        except Exception:
            return False

    async def close(self) -> None:
        await self.client.close()
