"""Segmentation postprocessing: per-pixel person probabilities -> a PNG mask at the original size.

As MediaPipe's selfie-segmentation graph does it (``TensorsToSegmentationCalculator``,
CPU path): the model's probability map (already a sigmoid output, activation
NONE) is resized *as probabilities* to the original image size with bilinear
interpolation, and only then thresholded, so mask edges follow the image's
resolution rather than the model's 256x256 grid.

The mask is one 8-bit channel: 0 = background ... 255 = person. In
``threshold`` mode a pixel is 255 where the probability is >= the threshold,
else 0; in ``probability`` mode it is round(255 * p). ``COVERAGE`` is the
fraction of the original image's pixels whose probability is >= the threshold
(in both modes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

MASK_MODES = ("threshold", "probability")


@dataclass(frozen=True)
class MaskSpec:
    mode: str = "threshold"
    threshold: float = 0.5

    def __post_init__(self) -> None:
        if self.mode not in MASK_MODES:
            raise ValueError(f"mask mode {self.mode!r} is not one of {MASK_MODES}")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"mask threshold must be in (0, 1), got {self.threshold}")


@dataclass(frozen=True)
class Mask:
    png: bytes  # 8-bit single-channel PNG at the original size
    coverage: float  # fraction of person pixels


def probabilities_2d(probabilities: np.ndarray) -> np.ndarray:
    """[H, W] float32 from a model output of [H, W], [H, W, 1] or [1, H, W]."""
    squeezed = np.squeeze(np.asarray(probabilities, dtype=np.float32))
    if squeezed.ndim != 2:
        raise ValueError(f"expected one probability map per image, got shape {probabilities.shape}")
    return squeezed


def upsample(probabilities: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize of one [h, w] probability map to [height, width], clipped to [0, 1]."""
    if height < 1 or width < 1:
        raise ValueError(f"image size must be positive, got {height}x{width}")
    resized = cv2.resize(probabilities_2d(probabilities), (int(width), int(height)), interpolation=cv2.INTER_LINEAR)
    return np.clip(resized, 0.0, 1.0, out=resized)


def mask_from_probabilities(probabilities: np.ndarray, spec: MaskSpec) -> tuple[np.ndarray, float]:
    """Full-size probabilities -> (uint8 mask, coverage)."""
    person = probabilities >= np.float32(spec.threshold)
    coverage = float(person.mean()) if person.size else 0.0
    if spec.mode == "threshold":
        return person.astype(np.uint8) * np.uint8(255), coverage
    return np.rint(probabilities * 255.0).astype(np.uint8), coverage


def encode_png(mask: np.ndarray) -> bytes:
    """An 8-bit single-channel PNG (fast compression: masks compress well at level 1)."""
    ok, encoded = cv2.imencode(".png", mask, [cv2.IMWRITE_PNG_COMPRESSION, 1])
    if not ok:
        raise RuntimeError("PNG encoding of the mask failed")
    return encoded.tobytes()


def decode_png(data: bytes) -> np.ndarray:
    """A mask PNG back to [H, W] uint8 (for clients and tests)."""
    mask = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
    if mask is None or mask.ndim != 2 or mask.dtype != np.uint8:
        raise ValueError("not an 8-bit single-channel PNG mask")
    return mask


def masks(probabilities: np.ndarray, sizes: np.ndarray, spec: MaskSpec) -> list[Mask]:
    """A batch: probabilities [N, h, w(, 1)] and original sizes [N, 2] (height, width) -> one Mask each."""
    if len(probabilities) != len(sizes):
        raise ValueError(f"{len(probabilities)} probability maps for {len(sizes)} image sizes")
    results = []
    for probability, (height, width) in zip(probabilities, np.asarray(sizes).reshape(-1, 2)):
        mask, coverage = mask_from_probabilities(upsample(probability, int(height), int(width)), spec)
        results.append(Mask(encode_png(mask), coverage))
    return results


def iou(first: np.ndarray, second: np.ndarray) -> float:
    """Intersection over union of two boolean (or 0/255) masks of the same shape; 1.0 when both are empty."""
    a, b = np.asarray(first) > 0, np.asarray(second) > 0
    if a.shape != b.shape:
        raise ValueError(f"mask shapes differ: {a.shape} vs {b.shape}")
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)


def mean_iou(first: Sequence[np.ndarray], second: Sequence[np.ndarray]) -> float:
    """Mean over images of the two-class (person, background) IoU: the segmentation gate's metric."""
    if len(first) != len(second) or not first:
        raise ValueError("mean_iou needs two equally long, non-empty lists of masks")
    scores = []
    for a, b in zip(first, second):
        a_bool, b_bool = np.asarray(a) > 0, np.asarray(b) > 0
        scores.append((iou(a_bool, b_bool) + iou(~a_bool, ~b_bool)) / 2.0)
    return float(np.mean(scores))
