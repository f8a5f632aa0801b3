"""The depth task: a model's depth map -> a depth map at the photo's own size, as a 16-bit PNG with its scale stated.

As Ultralytics' ``DepthPredictor`` does it (YOLO26-depth): the model sees the whole photo stretched onto its input
(the ``yolo_stretch`` resize), its export answers one map the size of that input, and the map is resized to the photo
with bilinear interpolation on **aligned corners** (torch's ``align_corners=True``, the depth head's own upsampling):
the map's corner pixels land on the photo's corner pixels. The values are the model's (metres for a metric model).

Postprocess config (``task: "depth"``): ``depth_scale``, the PNG's values per unit of depth (default ``DEPTH_SCALE``,
1000: millimetres, up to 65.535 m, as Ultralytics' depth datasets store them; 256 for outdoor ranges to 256 m).
Tensors by role: the required FP32 depth map (``[H, W]``, ``[1, H, W]`` or ``[H, W, 1]``), INT32 ``[2]`` image size
(height, width) and an optional BOOL ``[1]`` ``FLOAT_DEPTH`` a request sends to also get the map as float32; outputs
BYTES ``[1]`` ``DEPTH_PNG`` (one-channel 16-bit PNG at the photo's size: round(depth x scale), 1 to 65535: 0 never
appears, as 0 means "no value" in depth PNGs), FP32 ``[1]`` ``DEPTH_SCALE`` (the PNG's values per unit), FP32 ``[2]``
``DEPTH_RANGE`` (the smallest and largest depth of the photo's map) and BYTES ``[1]`` ``DEPTH_FLOAT32`` (the map's
float32 values, little-endian, row by row: height x width x 4 bytes; empty unless the request asked).

Drift features: ``median_depth`` and ``depth_spread`` (log of the 90th over the 10th percentile). Precision gate
(recipe ``[gate]``): over every pixel of every photo's full-size map, ``min_delta1`` (the fraction whose ratio to
FP32's is under 1.25, the depth literature's delta < 1.25) and ``min_within_range`` (the fraction within
``RANGE_TOLERANCE`` of the FP32 map's range). Labelled dataset: ``DIR/<name>.jpg|png`` with ``DIR/<name>.depth.png``
(16-bit, the pipeline's ``depth_scale`` per unit, 0: no value); abs rel, RMSE and delta < 1.25 over the valued pixels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import cv2
import numpy as np

from .. import drift, model_config
from ..model_config import ModelConfig
from .base import LabelledSample, Postprocessor, Role, Task, TaskResult, gate_report

DEPTH_SCALE = 1000.0  # PNG values per unit of depth: millimetres (Ultralytics' depth_scale default)
PNG_MAX = 65535
DEPTH_SUFFIX = ".depth.png"  # a labelled dataset's depth maps, and the ones the depth client writes
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
DELTA = 1.25  # the gate's and the dataset metric's ratio threshold
RANGE_TOLERANCE = 0.02  # the gate's closeness: 2 % of the FP32 map's range
INPUTS = (
    Role("depth", "FP32", None, name="DEPTH", from_core=True),
    Role("image_size", "INT32", (2,), name="IMAGE_SIZE"),
    Role("float_depth", "BOOL", (1,), optional=True, name="FLOAT_DEPTH"),
)
OUTPUTS = (
    Role("depth_png", "BYTES", (1,), name="DEPTH_PNG"),
    Role("depth_scale", "FP32", (1,), name="DEPTH_SCALE"),
    Role("depth_range", "FP32", (2,), name="DEPTH_RANGE"),
    Role("depth_float32", "BYTES", (1,), name="DEPTH_FLOAT32"),
)


def depth_2d(depth: np.ndarray) -> np.ndarray:
    """[h, w] float32 from one image's map of [h, w], [1, h, w] or [h, w, 1]."""
    squeezed = np.asarray(depth, dtype=np.float32)
    while squeezed.ndim > 2 and 1 in (squeezed.shape[0], squeezed.shape[-1]):
        squeezed = squeezed[0] if squeezed.shape[0] == 1 else squeezed[..., 0]
    if squeezed.ndim != 2:
        raise ValueError(f"expected one depth map per image, got shape {np.shape(depth)}")
    return squeezed


def _aligned(size_in: int, size_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The two source indices and the weight of the second, per output position, of a 1-D linear resize on aligned
    corners (torch's ``align_corners=True``: output i samples input i (in - 1) / (out - 1); one output samples 0)."""
    scale = (size_in - 1) / (size_out - 1) if size_out > 1 else 0.0
    source = np.arange(size_out, dtype=np.float64) * scale
    first = np.minimum(np.floor(source).astype(np.intp), size_in - 1)
    second = np.minimum(first + 1, size_in - 1)
    return first, second, (source - first).astype(np.float32)


def resize_aligned(depth: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize of one [h, w] map to [height, width] on aligned corners, as ``torch.nn.functional.interpolate(
    mode="bilinear", align_corners=True)`` computes it (float32; columns first, then rows)."""
    if height < 1 or width < 1:
        raise ValueError(f"image size must be positive, got {height}x{width}")
    source = depth_2d(depth)
    left, right, across = _aligned(source.shape[1], width)
    columns = source[:, left] + (source[:, right] - source[:, left]) * across
    top, bottom, down = _aligned(source.shape[0], height)
    return columns[top] + (columns[bottom] - columns[top]) * down[:, None]


def png_values(depth: np.ndarray, scale: float) -> np.ndarray:
    """uint16 PNG values of a map: round(depth x scale), held in 1..65535 (0 means no value in a depth PNG)."""
    return np.clip(np.rint(np.asarray(depth, dtype=np.float32) * np.float32(scale)), 1, PNG_MAX).astype(np.uint16)


def encode_png(values: np.ndarray) -> bytes:
    """A one-channel 16-bit PNG of uint16 values (fast compression: depth maps are smooth)."""
    ok, encoded = cv2.imencode(".png", np.asarray(values, dtype=np.uint16), [cv2.IMWRITE_PNG_COMPRESSION, 1])
    if not ok:
        raise RuntimeError("PNG encoding of the depth map failed")
    return encoded.tobytes()


def decode_png(data: bytes, scale: float) -> np.ndarray:
    """A depth PNG back to float32 [H, W] depth (its values / ``scale``; 0 stays 0: no value)."""
    values = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
    if values is None or values.ndim != 2 or values.dtype != np.uint16:
        raise ValueError("not a one-channel 16-bit PNG depth map")
    return values.astype(np.float32) / np.float32(scale)


def decode_float32(data: bytes, height: int, width: int) -> np.ndarray:
    """``DEPTH_FLOAT32``'s bytes back to float32 [height, width]."""
    if len(data) != height * width * 4:
        raise ValueError(f"{len(data)} bytes of float32 depth for a {width}x{height} photo (expected {height * width * 4})")
    return np.frombuffer(data, dtype="<f4").reshape(height, width).astype(np.float32)


def delta1(candidate: np.ndarray, reference: np.ndarray) -> float:
    """The fraction of pixels whose ratio max(c / r, r / c) is under ``DELTA`` (pixels where either is not positive:
    not counted; 1.0 when none is left)."""
    c, r = np.asarray(candidate, np.float64).ravel(), np.asarray(reference, np.float64).ravel()
    valid = (c > 0) & (r > 0)
    if not valid.any():
        return 1.0
    ratio = np.maximum(c[valid] / r[valid], r[valid] / c[valid])
    return float(np.mean(ratio < DELTA))


class DepthResult(TaskResult):
    """A batch's model maps and photo sizes; full-size maps are computed once, on first use (or given: a served
    response's decoded maps)."""

    def __init__(
        self,
        post: DepthPostprocessor,
        depth: np.ndarray | None,
        sizes: np.ndarray,
        floats: np.ndarray | None = None,
        maps: list[np.ndarray] | None = None,
    ) -> None:
        if depth is not None and len(depth) != len(sizes):
            raise ValueError(f"{len(depth)} depth maps for {len(sizes)} image sizes")
        self.post = post
        self.depth = None if depth is None else np.asarray(depth, dtype=np.float32)
        self.sizes = np.asarray(sizes).reshape(-1, 2)
        self.floats = np.zeros(len(self.sizes), dtype=bool) if floats is None else np.asarray(floats, dtype=bool).reshape(-1)
        self._maps = maps

    def __len__(self) -> int:
        return len(self.sizes)

    def maps(self) -> list[np.ndarray]:
        """float32 [H, W] depth at each photo's size."""
        if self._maps is None:
            if self.depth is None:
                raise ValueError("a served response has no model maps")
            self._maps = [resize_aligned(d, int(h), int(w)) for d, (h, w) in zip(self.depth, self.sizes)]
        return self._maps

    def outputs(self, start: int = 0, stop: int | None = None) -> dict[str, np.ndarray]:
        chosen = self.maps()[start:stop]
        scale = self.post.scale
        png = np.array([[encode_png(png_values(d, scale))] for d in chosen], dtype=np.object_).reshape(-1, 1)
        floats = self.floats[start:stop]
        raw = np.array([[d.astype("<f4").tobytes() if want else b""] for d, want in zip(chosen, floats)], dtype=np.object_)
        ranges = np.array([[d.min(), d.max()] for d in chosen], dtype=np.float32).reshape(-1, 2)
        values = {
            "depth_png": png,
            "depth_scale": np.full((len(chosen), 1), scale, dtype=np.float32),
            "depth_range": ranges,
            "depth_float32": raw.reshape(-1, 1),
        }
        return self.post.named(values)

    def features(self) -> drift.Features:
        maps = self.maps() if self.depth is None else [depth_2d(d) for d in self.depth]  # the model's maps: cheaper
        percentiles = np.array([np.percentile(d, (10, 50, 90)) for d in maps], dtype=np.float64).reshape(-1, 3)
        low = np.maximum(percentiles[:, 0], 1e-6)
        spread = np.log(np.maximum(percentiles[:, 2], 1e-6) / low)
        return drift.Features({"median_depth": percentiles[:, 1], "depth_spread": spread})


class DepthPostprocessor(Postprocessor):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config, INPUTS, OUTPUTS)
        self.scale = model_config.float_parameter(config, "depth_scale", DEPTH_SCALE)
        if not (np.isfinite(self.scale) and self.scale > 0):
            raise model_config.ConfigError(f"model '{config.name}': depth_scale must be a positive number, got {self.scale}")
        dims = [int(d) for d in model_config.tensor(config, self.inputs["depth"] or "").dims]
        if len([d for d in dims if d != 1]) != 2:
            raise model_config.ConfigError(f"model '{config.name}': the depth input {dims} is not one map per image")

    def parse_roles(self, values: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray]:
        depth, sizes, wanted = values["depth"], values["image_size"], values["float_depth"]
        assert depth is not None and sizes is not None
        count = len(sizes)
        if wanted is None:
            floats = np.zeros(count, dtype=bool)
        else:
            floats = np.asarray(wanted).reshape(-1)
            if floats.shape != (count,) or floats.dtype != np.bool_:
                raise ValueError(f"FLOAT_DEPTH must be one boolean per image ({count}), got {floats.size} {floats.dtype}")
        return {"depth": depth, "image_size": sizes, "float_depth": floats}

    def run(self, batch: Mapping[str, np.ndarray]) -> DepthResult:
        return DepthResult(self, batch["depth"], batch["image_size"], batch["float_depth"])


class DepthTask(Task):
    name = "depth"
    drift_features = ("median_depth", "depth_spread")
    gate_defaults: ClassVar[dict[str, float]] = {"min_delta1": 0.99, "min_within_range": 0.9}
    dataset_layout = f"DIR/<name>.jpg|png with its depth DIR/<name>{DEPTH_SUFFIX} (16-bit, the pipeline's depth_scale per unit, 0: none)"

    def output_roles(self) -> tuple[Role, ...]:
        return OUTPUTS

    def request_roles(self) -> tuple[Role, ...]:
        return INPUTS[2:]

    def config_roles(self, config: ModelConfig) -> tuple[tuple[Role, ...], tuple[Role, ...]]:
        return INPUTS, OUTPUTS

    def postprocessor(self, config: ModelConfig, model_dir: Path) -> DepthPostprocessor:
        return DepthPostprocessor(config)

    def gate(self, reference: TaskResult, candidate: TaskResult, limits: Mapping[str, float]) -> dict[str, Any]:
        assert isinstance(reference, DepthResult) and isinstance(candidate, DepthResult)
        first, second = reference.maps(), candidate.maps()
        ratios = [delta1(b, a) for a, b in zip(first, second)]
        close = []
        for a, b in zip(first, second):
            tolerance = RANGE_TOLERANCE * max(float(a.max() - a.min()), 1e-6)
            close.append(float(np.mean(np.abs(b - a) <= tolerance)))
        difference = max(float(np.abs(b - a).max()) for a, b in zip(first, second))
        metrics = {
            "count": len(first),
            "delta1": float(np.mean(ratios)),
            "delta1_min": float(np.min(ratios)),
            "within_range": float(np.mean(close)),
            "within_range_min": float(np.min(close)),
            "max_abs_depth_diff": difference,
        }
        return gate_report(
            metrics,
            {"delta1": (metrics["delta1"], limits["min_delta1"]), "within_range": (metrics["within_range"], limits["min_within_range"])},
        )

    def gate_request(self, count: int) -> dict[str, np.ndarray]:
        return {"float_depth": np.ones((count, 1), dtype=bool)}  # the gate compares the maps, not their PNG rounding

    def response_result(self, postprocessor: Postprocessor, outputs: Mapping[str, np.ndarray]) -> DepthResult:
        assert isinstance(postprocessor, DepthPostprocessor)
        pngs = np.asarray(outputs["depth_png"]).reshape(-1)
        scales = np.asarray(outputs["depth_scale"], dtype=np.float32).reshape(-1)
        raws = np.asarray(outputs["depth_float32"]).reshape(-1) if "depth_float32" in outputs else [b""] * len(pngs)
        maps = []
        for png, scale, raw in zip(pngs, scales, raws):
            from_png = decode_png(bytes(png), float(scale))
            maps.append(decode_float32(bytes(raw), *from_png.shape) if len(raw) else from_png)
        sizes = np.array([d.shape for d in maps], dtype=np.int32).reshape(-1, 2)
        return DepthResult(postprocessor, None, sizes, maps=maps)

    def dataset(self, directory: Path, postprocessor: Postprocessor) -> list[LabelledSample]:
        assert isinstance(postprocessor, DepthPostprocessor)
        samples = []
        images = sorted(
            p for p in directory.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES and not p.name.endswith(DEPTH_SUFFIX)
        )
        for path in images:
            depth_path = path.with_name(path.stem + DEPTH_SUFFIX)
            if not depth_path.is_file():
                raise ValueError(f"{path}: no depth map {depth_path.name} beside it")
            try:
                truth = decode_png(depth_path.read_bytes(), postprocessor.scale)
            except ValueError as error:
                raise ValueError(f"{depth_path}: {error}") from None
            samples.append(LabelledSample(path, truth))
        return samples

    def dataset_metrics(self, runs: Sequence[tuple[TaskResult, Sequence[LabelledSample]]]) -> dict[str, float]:
        predicted: list[np.ndarray] = []
        truths: list[np.ndarray] = []
        for result, part in runs:
            assert isinstance(result, DepthResult)
            for depth, sample in zip(result.maps(), part):
                if depth.shape != sample.target.shape:
                    raise ValueError(f"{sample.path}: depth is {sample.target.shape[::-1]}, the image {depth.shape[::-1]} (width x height)")
                valid = sample.target > 0
                predicted.append(depth[valid])
                truths.append(sample.target[valid])
        guess, truth = np.concatenate(predicted).astype(np.float64), np.concatenate(truths).astype(np.float64)
        if not truth.size:
            raise ValueError("the dataset's depth maps hold no values (every pixel 0)")
        return {
            "abs_rel": float(np.mean(np.abs(guess - truth) / truth)),
            "rmse": float(np.sqrt(np.mean((guess - truth) ** 2))),
            "delta1": delta1(guess, truth),
        }


TASK = DepthTask()
