"""The segmentation task: per-pixel probabilities -> a PNG mask at the photo's own size, and its coverage.

As MediaPipe's selfie-segmentation graphs do it (``TensorsToSegmentationCalculator``, CPU path):
the model's probability map (already a sigmoid output) is resized *as probabilities* to the
photo's size with bilinear interpolation, and only then thresholded, so mask edges follow the
image's resolution rather than the model's grid (any height x width: the square general model
and the 144x256 landscape one alike).

Postprocess config (``task: "segmentation"``): ``mask_mode`` (``threshold``: foreground where
``p >= threshold``; ``probability``: round(255 p)) and ``threshold``. Tensors by role:
the required FP32 probability map (``[H, W]``, ``[H, W, 1]`` or ``[1, H, W]``) and INT32 ``[2]``
image size (height, width); outputs BYTES ``[1]`` mask PNG and FP32 ``[1]`` coverage (the fraction of
pixels with ``p >= threshold``, in both modes).

The mask PNG is one-channel grayscale at the photo's size: **1 bit per pixel** in ``threshold`` mode
(a binary mask: every PNG decoder reads it; OpenCV's ``imdecode`` gives 0 and 255, Pillow mode ``"1"``),
8 bits in ``probability`` mode. Encoding a 12 MP binary mask as 1-bit PNG (zlib's run-length
strategy) costs about a tenth of the 8-bit PNG it replaced, and the file is a tenth of its size
(docs/design.md, "The mask is a 1-bit PNG").

Drift features: ``coverage``, ``confidence`` (mean per-pixel certainty ``|2p - 1|``). Precision
gate (recipe ``[gate] min_mean_iou``): mean over images of the person/background IoU of the
thresholded full-size masks. Labelled dataset: ``DIR/<name>.jpg|png`` with ``DIR/<name>.mask.png``
(8-bit, the image's size, foreground > 127); mean IoU and foreground IoU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import cv2
import numpy as np

from .. import drift, model_config
from ..model_config import ModelConfig
from .base import LabelledSample, Postprocessor, Role, Task, TaskResult, gate_report

MASK_MODES = ("threshold", "probability")
MASK_SUFFIX = ".mask.png"  # a labelled dataset's masks, and the ones the segmentation client writes
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
INPUTS = (
    Role("probabilities", "FP32", None, name="PROBABILITIES", from_core=True),
    Role("image_size", "INT32", (2,), name="IMAGE_SIZE"),
)
OUTPUTS = (Role("mask", "BYTES", (1,), name="MASK"), Role("coverage", "FP32", (1,), name="COVERAGE"))


@dataclass(frozen=True)
class MaskSpec:
    mode: str = "threshold"
    threshold: float = 0.5

    def __post_init__(self) -> None:
        if self.mode not in MASK_MODES:
            raise ValueError(f"mask mode {self.mode!r} is not one of {MASK_MODES}")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"mask threshold must be in (0, 1), got {self.threshold}")

    @classmethod
    def from_config(cls, config: ModelConfig) -> MaskSpec:
        return cls(model_config.parameter(config, "mask_mode"), model_config.float_parameter(config, "threshold"))


def probabilities_2d(probabilities: np.ndarray) -> np.ndarray:
    """[H, W] float32 from a model output of [H, W], [H, W, 1] or [1, H, W]."""
    squeezed = np.squeeze(np.asarray(probabilities, dtype=np.float32))
    if squeezed.ndim != 2:
        raise ValueError(f"expected one probability map per image, got shape {probabilities.shape}")
    return squeezed


def upsample(probabilities: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize of one [h, w] probability map to [height, width], clipped to [0, 1]."""
    resized = _resized(probabilities, height, width)
    return np.clip(resized, 0.0, 1.0, out=resized)


def _resized(probabilities: np.ndarray, height: int, width: int) -> np.ndarray:
    if height < 1 or width < 1:
        raise ValueError(f"image size must be positive, got {height}x{width}")
    return cv2.resize(probabilities_2d(probabilities), (int(width), int(height)), interpolation=cv2.INTER_LINEAR)


def full_size_mask(probabilities: np.ndarray, height: int, width: int, spec: MaskSpec) -> tuple[np.ndarray, float]:
    """One [h, w] probability map -> (uint8 mask at height x width, coverage): the map resized bilinearly as
    probabilities, then thresholded (255 where ``p >= threshold``, else 0) or, in ``probability`` mode,
    round(255 p). Clipping to [0, 1] never moves a threshold in (0, 1), so the threshold mode skips it."""
    resized = _resized(probabilities, height, width)
    threshold = np.float32(spec.threshold)
    # 255 where p >= the threshold. OpenCV compares with a scalar (its stubs list arrays only), except on a 1x1 photo:
    # there it takes the 1x1 array and the scalar for two arrays of different types, so numpy compares.
    foreground = (
        np.where(resized >= threshold, np.uint8(255), np.uint8(0)).astype(np.uint8)
        if resized.size == 1
        else cv2.compare(resized, float(threshold), cv2.CMP_GE)  # type: ignore[call-overload]
    )
    coverage = cv2.countNonZero(foreground) / foreground.size
    if spec.mode == "threshold":
        return foreground, coverage
    np.clip(resized, 0.0, 1.0, out=resized)
    return np.rint(resized * 255.0).astype(np.uint8), coverage


# 1-bit grayscale, zlib's run-length strategy: a binary mask is long runs (measured at 12 MP: 9.7 ms and 6 KB,
# against 80 ms and 68 KB as an 8-bit PNG at compression level 1).
BINARY_PNG = [cv2.IMWRITE_PNG_BILEVEL, 1, cv2.IMWRITE_PNG_COMPRESSION, 1, cv2.IMWRITE_PNG_STRATEGY, cv2.IMWRITE_PNG_STRATEGY_RLE]
GRAY_PNG = [cv2.IMWRITE_PNG_COMPRESSION, 1]


def encode_png(mask: np.ndarray, binary: bool = False) -> bytes:
    """A one-channel PNG of a uint8 mask: 1 bit per pixel when ``binary`` (the mask holds 0 and 255 only),
    else 8 bits (fast compression: masks compress well at level 1)."""
    ok, encoded = cv2.imencode(".png", mask, BINARY_PNG if binary else GRAY_PNG)
    if not ok:
        raise RuntimeError("PNG encoding of the mask failed")
    return encoded.tobytes()


def decode_png(data: bytes) -> np.ndarray:
    """A mask PNG back to [H, W] uint8 (for clients and tests): a 1-bit PNG reads as 0 and 255."""
    mask = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
    if mask is None or mask.ndim != 2 or mask.dtype != np.uint8:
        raise ValueError("not a single-channel PNG mask (1 or 8 bits)")
    return mask


def iou(first: np.ndarray, second: np.ndarray) -> float:
    """Intersection over union of two boolean (or 0/255) masks of the same shape; 1.0 when both are empty."""
    a, b = np.asarray(first) > 0, np.asarray(second) > 0
    if a.shape != b.shape:
        raise ValueError(f"mask shapes differ: {a.shape} vs {b.shape}")
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)


def mean_iou(first: Sequence[np.ndarray], second: Sequence[np.ndarray]) -> float:
    """Mean over images of the two-class (foreground, background) IoU: the segmentation gate's metric."""
    if len(first) != len(second) or not first:
        raise ValueError("mean_iou needs two equally long, non-empty lists of masks")
    scores = []
    for a, b in zip(first, second):
        a_bool, b_bool = np.asarray(a) > 0, np.asarray(b) > 0
        scores.append((iou(a_bool, b_bool) + iou(~a_bool, ~b_bool)) / 2.0)
    return float(np.mean(scores))


class MaskResult(TaskResult):
    """A batch's probability maps and photo sizes; full-size masks are computed once, on first use
    (or given: a served response's decoded masks, without probabilities)."""

    def __init__(
        self,
        post: SegmentationPostprocessor,
        probabilities: np.ndarray | None,
        sizes: np.ndarray,
        masks: list[tuple[np.ndarray, float]] | None = None,
    ) -> None:
        if probabilities is not None and len(probabilities) != len(sizes):
            raise ValueError(f"{len(probabilities)} probability maps for {len(sizes)} image sizes")
        self.post = post
        self.probabilities = None if probabilities is None else np.asarray(probabilities, dtype=np.float32)
        self.sizes = np.asarray(sizes).reshape(-1, 2)
        self._masks = masks

    def __len__(self) -> int:
        return len(self.sizes)

    def _probabilities(self) -> np.ndarray:
        if self.probabilities is None:
            raise ValueError("a served response has no probability maps")
        return self.probabilities

    def masks(self) -> list[tuple[np.ndarray, float]]:
        """(uint8 mask at the photo's size, coverage) per image."""
        if self._masks is None:
            spec = self.post.spec
            self._masks = [full_size_mask(p, int(h), int(w), spec) for p, (h, w) in zip(self._probabilities(), self.sizes)]
        return self._masks

    def thresholded(self) -> list[np.ndarray]:
        """Boolean masks at the threshold (what the gate and the dataset metric compare)."""
        if self.probabilities is None:  # served masks: 255 (threshold mode) or round(255 p) at or above the threshold
            return [mask >= np.float32(self.post.spec.threshold) * 255 for mask, _ in self.masks()]
        spec = MaskSpec("threshold", self.post.spec.threshold)
        return [full_size_mask(p, int(h), int(w), spec)[0] > 0 for p, (h, w) in zip(self.probabilities, self.sizes)]

    def outputs(self, start: int = 0, stop: int | None = None) -> dict[str, np.ndarray]:
        chosen = self.masks()[start:stop]
        binary = self.post.spec.mode == "threshold"
        png = np.array([[encode_png(mask, binary)] for mask, _ in chosen], dtype=np.object_).reshape(-1, 1)
        coverage = np.array([[coverage] for _, coverage in chosen], dtype=np.float32).reshape(-1, 1)
        return self.post.named({"mask": png, "coverage": coverage})

    def features(self) -> drift.Features:
        flat = self._probabilities().reshape(len(self), -1)
        certainty = np.abs(2.0 * flat - 1.0).mean(axis=1, dtype=np.float64)
        coverage = np.array([coverage for _, coverage in self.masks()], dtype=np.float64)
        return drift.Features({"coverage": coverage, "confidence": certainty})


class SegmentationPostprocessor(Postprocessor):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config, INPUTS, OUTPUTS)
        self.spec = MaskSpec.from_config(config)
        dims = [int(d) for d in model_config.tensor(config, self.inputs["probabilities"] or "").dims]
        if len([d for d in dims if d != 1]) != 2:
            raise model_config.ConfigError(f"model '{config.name}': the probability input {dims} is not one map per image")

    def parse_roles(self, values: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray]:
        probabilities, sizes = values["probabilities"], values["image_size"]
        assert probabilities is not None and sizes is not None
        return {"probabilities": probabilities, "image_size": sizes}

    def run(self, batch: Mapping[str, np.ndarray]) -> MaskResult:
        return MaskResult(self, batch["probabilities"], batch["image_size"])


class SegmentationTask(Task):
    name = "segmentation"
    drift_features = ("coverage", "confidence")
    gate_defaults: ClassVar[dict[str, float]] = {"min_mean_iou": 0.95}
    dataset_layout = f"DIR/<name>.jpg|png with its mask DIR/<name>{MASK_SUFFIX} (8-bit, the image's size, foreground > 127)"

    def output_roles(self) -> tuple[Role, ...]:
        return OUTPUTS

    def config_roles(self, config: ModelConfig) -> tuple[tuple[Role, ...], tuple[Role, ...]]:
        return INPUTS, OUTPUTS

    def postprocessor(self, config: ModelConfig, model_dir: Path) -> SegmentationPostprocessor:
        return SegmentationPostprocessor(config)

    def gate(self, reference: TaskResult, candidate: TaskResult, limits: Mapping[str, float]) -> dict[str, Any]:
        assert isinstance(reference, MaskResult) and isinstance(candidate, MaskResult)
        first, second = reference.thresholded(), candidate.thresholded()
        value = mean_iou(first, second)
        foreground = [iou(a, b) for a, b in zip(first, second)]
        metrics = {
            "count": len(first),
            "mean_iou": value,
            "foreground_iou_min": float(np.min(foreground)),
            "foreground_iou_mean": float(np.mean(foreground)),
        }
        if reference.probabilities is not None and candidate.probabilities is not None:
            metrics["max_abs_probability_diff"] = float(np.abs(reference.probabilities - candidate.probabilities).max())
        return gate_report(metrics, {"mean_iou": (value, limits["min_mean_iou"])})

    def response_result(self, postprocessor: Postprocessor, outputs: Mapping[str, np.ndarray]) -> MaskResult:
        assert isinstance(postprocessor, SegmentationPostprocessor)
        masks = [decode_png(bytes(png)) for png in np.asarray(outputs["mask"]).reshape(-1)]
        coverage = np.asarray(outputs["coverage"], dtype=np.float64).reshape(-1)
        sizes = np.array([mask.shape for mask in masks], dtype=np.int32).reshape(-1, 2)
        return MaskResult(postprocessor, None, sizes, [(mask, float(c)) for mask, c in zip(masks, coverage)])

    def dataset(self, directory: Path, postprocessor: Postprocessor) -> list[LabelledSample]:
        samples = []
        images = sorted(
            p for p in directory.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES and not p.name.endswith(MASK_SUFFIX)
        )
        for path in images:
            mask_path = path.with_name(path.stem + MASK_SUFFIX)
            if not mask_path.is_file():
                raise ValueError(f"{path}: no mask {mask_path.name} beside it")
            mask = cv2.imread(str(mask_path), cv2.IMREAD_GRAYSCALE)
            if mask is None:
                raise ValueError(f"{mask_path}: not a readable 8-bit mask")
            samples.append(LabelledSample(path, mask > 127))
        return samples

    def dataset_metrics(self, runs: Sequence[tuple[TaskResult, Sequence[LabelledSample]]]) -> dict[str, float]:
        predicted, samples = [], []
        for result, part in runs:
            assert isinstance(result, MaskResult)
            predicted += result.thresholded()
            samples += list(part)
        for mask, sample in zip(predicted, samples):
            if mask.shape != sample.target.shape:
                raise ValueError(f"{sample.path}: mask is {sample.target.shape[::-1]}, the image {mask.shape[::-1]} (width x height)")
        truth = [sample.target for sample in samples]
        return {"mean_iou": mean_iou(predicted, truth), "foreground_iou": float(np.mean([iou(m, t) for m, t in zip(predicted, truth)]))}


TASK = SegmentationTask()
