"""What the served text reader's Python steps compute, without Triton: the preprocess's outputs per request,
and the postprocess's view of them.

The preprocess hands the postprocess, besides the detector's input, the resized and padded BGR image the
crops are cut from (``DET_IMAGE``) and how to map its pixels back to the photo (``DET_TRANSFORM``: ratio_h,
ratio_w, pad_top, photo height, photo width), so nothing is decoded twice.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from ... import image_codec, preprocessing
from ..base import EngineProfile
from . import detection
from .settings import DetectionSettings

DETECTOR_INPUT, IMAGE, TRANSFORM = "DET_INPUT", "DET_IMAGE", "DET_TRANSFORM"


# The longest detector input side served (the preprocess config's max_detector_side): longer inputs are refused.
MAX_DETECTOR_SIDE = 4096
# Photos per detector run the profiles are tuned for: one photo per request, and the dynamic batcher merges only
# requests of one size (measured on the text upload mix: a mean batch of 1.00 to 1.46 at 1 to 16 clients).
DETECTOR_OPT_BATCH = 1


def detector_side_bounds(settings: DetectionSettings) -> tuple[int, int]:
    """(shortest, longest kept) side of a detector input, as :func:`detection.prepare` computes it.

    Every side is a multiple of 32. The shorter side is scaled up to ``limit_side_len`` when shorter (exactly
    that: 736), else kept, so it is never below 736. A kept side is one of the photo after
    ``resize_within_bounds``, at most ``max_side_len``, rounded: at most 1984 for 2000. So an input is either
    within 736..1984 on both sides, or 736 on its shorter side and longer than 1984 (a thin photo scaled up by
    736 / its shorter side), bounded only by ``max_detector_side``."""
    return detection.multiple_of_32(settings.limit_side_len), detection.multiple_of_32(settings.max_side_len)


def detector_profiles(settings: DetectionSettings, max_side: int = MAX_DETECTOR_SIDE) -> tuple[EngineProfile, ...]:
    """The text detector's TensorRT profiles (per-image ``[3, H, W]``): exactly the inputs :func:`prepare_photo`
    can send (:func:`detector_side_bounds`), in profiles that do not overlap, so the backend's choice is the one that
    fits and no profile reserves memory for shapes that never come:

    - ``photo``: both sides 736..1984, tuned for 736 x 736 (a square photo, and the shorter side of every photo
      scaled up);
    - ``wide`` and ``tall``: 736 on one side, 2016..``max_side`` on the other (only when ``max_side`` > 1984), tuned
      for ``width_height_ratio`` / 2 to 1 (a photo wider than 8:1 is padded to about 4:1: 736 x 2944)."""
    short, kept = detector_side_bounds(settings)
    if max_side < short:
        raise ValueError(f"max_detector_side {max_side} is below the shortest detector input side {short}: no photo could be served")
    photo_max = min(kept, max_side - max_side % 32)
    profiles = [EngineProfile("photo", (3, short, short), (3, short, short), (3, photo_max, photo_max), DETECTOR_OPT_BATCH)]
    longest = max_side - max_side % 32
    if longest > photo_max:
        low = photo_max + 32
        opt = min(longest, max(low, detection.multiple_of_32(int(short * settings.width_height_ratio / 2))))
        profiles.append(EngineProfile("wide", (3, short, low), (3, short, opt), (3, short, longest), DETECTOR_OPT_BATCH))
        profiles.append(EngineProfile("tall", (3, low, short), (3, opt, short), (3, longest, short), DETECTOR_OPT_BATCH))
    return tuple(profiles)


def prepare_photo(
    item: image_codec.Decoded, index: int, count: int, settings: DetectionSettings, max_side: int = MAX_DETECTOR_SIDE
) -> detection.DetectionInput:
    """One decoded photo (RGB) prepared for the detector; ValueError when it is too small to read text in, or
    when its detector input would be longer than ``max_side`` (a very long, thin photo)."""
    where = f"image {index} of {count}: " if count > 1 else ""
    found = detection.prepare(cv2.cvtColor(item.image, cv2.COLOR_RGB2BGR), settings)
    if found is None:
        raise ValueError(f"{where}{item.width}x{item.height} is too small to read text in")
    height, width = found.tensor.shape[1:]
    if max(height, width) > max_side:
        raise ValueError(
            f"{where}{item.width}x{item.height} needs a {width}x{height} text detector input, longer than {max_side} "
            "(max_detector_side): cut the photo into parts of at most 1:5 aspect ratio"
        )
    return found


def prepare_request(
    payloads: np.ndarray, limits: image_codec.ImageLimits, settings: DetectionSettings, max_side: int = MAX_DETECTOR_SIDE
) -> list[detection.DetectionInput]:
    """One request's photos (BYTES ``[n, 1]``) prepared for the detector. Raises ImageError or ValueError
    naming the photo that cannot be read, or saying that the photos need different detector sizes."""
    return prepare_decoded(preprocessing.decode_payloads(payloads, limits), settings, max_side)


def prepare_decoded(
    decoded: Sequence[image_codec.Decoded], settings: DetectionSettings, max_side: int = MAX_DETECTOR_SIDE
) -> list[detection.DetectionInput]:
    """One request's decoded photos prepared for the detector (ValueError as :func:`prepare_request`)."""
    prepared = [prepare_photo(item, index, len(decoded), settings, max_side) for index, item in enumerate(decoded)]
    sizes = sorted({(item.tensor.shape, item.image.shape) for item in prepared})
    if len(sizes) > 1:
        shapes = ", ".join(f"{tensor[1]}x{tensor[2]}" for tensor, _ in sizes)
        raise ValueError(f"the photos of one request need one detector size, these need {shapes}: send one photo per request")
    return prepared


def preprocess_outputs(prepared: list[detection.DetectionInput]) -> dict[str, np.ndarray]:
    transform = [[item.ratio_h, item.ratio_w, item.pad_top, *item.photo_shape] for item in prepared]
    return {
        DETECTOR_INPUT: np.stack([item.tensor for item in prepared]),
        IMAGE: np.stack([item.image for item in prepared]),
        TRANSFORM: np.array(transform, np.float32).reshape(len(prepared), 5),
    }


def from_preprocess(images: Sequence[np.ndarray] | np.ndarray, transforms: np.ndarray) -> list[detection.DetectionInput]:
    """The postprocess's photos back from ``DET_IMAGE`` ``[n, h, w, 3]`` and ``DET_TRANSFORM`` ``[n, 5]``
    (the detector's input itself is not needed there)."""
    empty = np.zeros((0, 0, 0), np.uint8)
    return [
        detection.DetectionInput(empty, image, float(t[0]), float(t[1]), int(t[2]), (int(t[3]), int(t[4])))
        for image, t in zip(images, np.asarray(transforms).reshape(-1, 5))
    ]
