"""Image sets for INT8 calibration and for the accuracy gate, through the served preprocessing.

Two disjoint sets of the real photos shipped in packages (``builders.photos``)
are named here, by photo name:

- the recipe's ``[quantize] calibration_photos`` feed ``python -m builders quantize``;
- its ``evaluation_photos`` are held out for the accuracy gate and are never
  used for calibration (the recipe refuses an overlap, and a user's
  ``--calibration-dir`` holding one of them is rejected).

Near-duplicates stay on one side (the motorcycle stereo pair is held out
whole). Either set is enlarged by seeded, deterministic augmentations of its
photos, applied to the decoded image *before* the served preprocessing:
random crops and scales, flips, small rotations, brightness / contrast /
colour jitter, blur and noise, then a JPEG (or PNG) re-encode at a varied
quality, so every sample goes through the served decoder
(at the size the served preprocessing decodes) and the served resize / crop /
normalize: :class:`vision_serving.served.ServedPipeline`, with the spec and
limits of ``<pipeline>_preprocess/config.pbtxt``. Calibration and evaluation use
different transform profiles and seeds. Sample ``i`` depends only on
``(seed, i)`` and its source photo, so the same seed gives the same bytes
(and the same sha256) on the same library versions.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from builders import BuildError, photos
from builders.loaded import LoadedPipeline
from vision_serving import image_codec, preprocessing
from vision_serving.served import ServedInputs

# Bump when the augmentation code changes what it produces (part of the recipe hash).
AUGMENTATION_VERSION = 1

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
# Fewer distinct calibration photos than this makes activation ranges meaningless.
MIN_CALIBRATION_PHOTOS = 4


@dataclass(frozen=True)
class AugmentProfile:
    """Ranges of the random transforms; each sample draws its own values."""

    name: str
    crop_area: tuple[float, float]  # fraction of the image area kept by the random crop
    aspect: tuple[float, float]  # crop aspect ratio (log-uniform)
    shorter_side: tuple[int, int]  # the crop is rescaled so its shorter side is in this range
    flip_p: float
    rotate_p: float
    max_degrees: float
    brightness: float  # additive, fraction of 255
    contrast: tuple[float, float]
    saturation: tuple[float, float]
    hue_degrees: float
    gamma: tuple[float, float]
    grayscale_p: float
    blur_p: float
    noise_p: float
    jpeg_p: float  # otherwise PNG
    jpeg_quality: tuple[int, int]


CALIBRATION_PROFILE = AugmentProfile(
    name="calibration",
    crop_area=(0.2, 1.0),
    aspect=(3 / 4, 4 / 3),
    shorter_side=(160, 720),
    flip_p=0.5,
    rotate_p=0.5,
    max_degrees=15.0,
    brightness=0.25,
    contrast=(0.6, 1.4),
    saturation=(0.5, 1.5),
    hue_degrees=12.0,
    gamma=(0.7, 1.4),
    grayscale_p=0.1,
    blur_p=0.15,
    noise_p=0.15,
    jpeg_p=0.85,
    jpeg_quality=(30, 95),
)
# Milder, what clients plausibly send; different transforms and seeds from calibration.
EVALUATION_PROFILE = AugmentProfile(
    name="evaluation",
    crop_area=(0.45, 1.0),
    aspect=(4 / 5, 5 / 4),
    shorter_side=(224, 640),
    flip_p=0.5,
    rotate_p=0.3,
    max_degrees=8.0,
    brightness=0.12,
    contrast=(0.8, 1.2),
    saturation=(0.75, 1.25),
    hue_degrees=5.0,
    gamma=(0.85, 1.15),
    grayscale_p=0.0,
    blur_p=0.1,
    noise_p=0.1,
    jpeg_p=0.9,
    jpeg_quality=(55, 95),
)
CALIBRATION_SEED = 20240601
EVALUATION_SEED = 7919


class CalibrationError(BuildError):
    """The calibration or evaluation images cannot be assembled."""


@dataclass(frozen=True)
class Source:
    """One encoded image a set is made from."""

    name: str
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass(frozen=True)
class Sample:
    """One encoded image of a set: a source as-is, or a seeded augmentation of it."""

    index: int
    source: str
    data: bytes
    transform: dict[str, Any]


def check_disjoint(calibration: Iterable[str], evaluation: Iterable[str]) -> None:
    overlap = sorted(set(calibration) & set(evaluation))
    if overlap:
        raise CalibrationError(f"calibration and evaluation photos overlap: {', '.join(overlap)}")


def photo_split(pipeline: LoadedPipeline) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(calibration, evaluation) photo names from the pipeline's recipe."""
    quantize = pipeline.recipe.quantize
    check_disjoint(quantize.calibration_photos, quantize.evaluation_photos)
    return quantize.calibration_photos, quantize.evaluation_photos


def package_sources(names: Sequence[str]) -> list[Source]:
    """The named package photos that are installed, in the given order."""
    available = photos.registry()
    return [Source(name, photos.photo_bytes(name)) for name in names if name in available]


def _folder(pipeline: LoadedPipeline, given: str | Path | None) -> Path | None:
    """A recipe folder (relative to the pipeline folder) or a command-line one; None for the package photos."""
    if not given:
        return None
    path = Path(given)
    return path if path.is_absolute() else (pipeline.layout.repository / path).resolve()


def folder_sources(directory: Path, what: str) -> list[Source]:
    """Every JPEG/PNG/WebP under ``directory`` (recursive, sorted by name)."""
    if not directory.is_dir():
        raise CalibrationError(f"{what} {directory}: not a directory")
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    return [Source(p.relative_to(directory).as_posix(), p.read_bytes()) for p in files]


def calibration_sources(pipeline: LoadedPipeline, calibration_dir: Path | None = None) -> list[Source]:
    """The calibration images: ``calibration_dir`` (the command line's), else the recipe's
    ``[quantize] calibration_dir``, else its package ``calibration_photos``.

    An image byte-identical to a held-out one is an error: calibrating on the held-out set would
    make the gate meaningless.
    """
    directory = Path(calibration_dir) if calibration_dir else _folder(pipeline, pipeline.recipe.quantize.calibration_dir)
    if directory is None:
        sources = package_sources(photo_split(pipeline)[0])
        where = "package calibration photos"
    else:
        sources = folder_sources(directory, "calibration folder")
        held_out = {source.sha256: source.name for source in evaluation_sources(pipeline)}
        leaked = [f"{s.name} (= held-out image {held_out[s.sha256]})" for s in sources if s.sha256 in held_out]
        if leaked:
            raise CalibrationError(f"{directory}: held-out evaluation images must not be calibrated on: {', '.join(leaked)}")
        where = f"images in {directory}"
    if len(sources) < MIN_CALIBRATION_PHOTOS:
        raise CalibrationError(f"found {len(sources)} {where}; calibration needs at least {MIN_CALIBRATION_PHOTOS}")
    return sources


# The precision gate and the drift reference: each package photo and this many seeded augmentations of it;
# a folder of your own images: its images, plus augmentations up to HELD_OUT_IMAGES when it has fewer.
AUGMENTED_PER_PHOTO = 24
HELD_OUT_IMAGES = 250


def held_out_count(pipeline: LoadedPipeline, sources: Sequence[Source]) -> int:
    """How many held-out images the gate measures (originals first, then augmentations)."""
    if pipeline.recipe.quantize.evaluation_dir:
        return max(len(sources), HELD_OUT_IMAGES)
    return len(sources) * (1 + AUGMENTED_PER_PHOTO)


def evaluation_sources(pipeline: LoadedPipeline) -> list[Source]:
    """The precision gate's held-out images: the recipe's ``[quantize] evaluation_dir``, else its package
    ``evaluation_photos``."""
    directory = _folder(pipeline, pipeline.recipe.quantize.evaluation_dir)
    if directory is not None:
        sources = folder_sources(directory, "evaluation folder")
        if not sources:
            raise CalibrationError(f"evaluation folder {directory}: no JPEG, PNG or WebP images")
        return sources
    sources = package_sources(photo_split(pipeline)[1])
    if not sources:
        raise CalibrationError("none of the held-out evaluation photos is installed (scikit-image's skimage/data/)")
    return sources


# --------------------------------------------------------------------------- augmentation


def _uniform(rng: np.random.Generator, bounds: tuple[float, float]) -> float:
    return float(rng.uniform(bounds[0], bounds[1]))


def _random_crop(image: np.ndarray, rng: np.random.Generator, profile: AugmentProfile) -> tuple[np.ndarray, dict[str, Any]]:
    height, width = image.shape[:2]
    for _ in range(10):
        area = _uniform(rng, profile.crop_area) * height * width
        aspect = math.exp(_uniform(rng, (math.log(profile.aspect[0]), math.log(profile.aspect[1]))))
        crop_w = round(math.sqrt(area * aspect))
        crop_h = round(math.sqrt(area / aspect))
        if 8 <= crop_w <= width and 8 <= crop_h <= height:
            left = int(rng.integers(0, width - crop_w + 1))
            top = int(rng.integers(0, height - crop_h + 1))
            return image[top : top + crop_h, left : left + crop_w], {"crop": [left, top, crop_w, crop_h]}
    return image, {"crop": [0, 0, width, height]}


def _rescale(image: np.ndarray, rng: np.random.Generator, profile: AugmentProfile) -> tuple[np.ndarray, dict[str, Any]]:
    height, width = image.shape[:2]
    target = int(rng.integers(profile.shorter_side[0], profile.shorter_side[1] + 1))
    scale = target / min(height, width)
    new_size = (max(1, round(width * scale)), max(1, round(height * scale)))
    interpolation = cv2.INTER_AREA if scale < 1 else (cv2.INTER_LINEAR, cv2.INTER_CUBIC)[int(rng.integers(0, 2))]
    return cv2.resize(image, new_size, interpolation=interpolation), {"size": list(new_size)}


def _rotate(image: np.ndarray, degrees: float) -> np.ndarray:
    height, width = image.shape[:2]
    matrix = cv2.getRotationMatrix2D((width / 2.0, height / 2.0), degrees, 1.0)
    return cv2.warpAffine(image, matrix, (width, height), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT_101)


def _color(image: np.ndarray, rng: np.random.Generator, profile: AugmentProfile) -> tuple[np.ndarray, dict[str, Any]]:
    params: dict[str, Any] = {}
    pixels = image.astype(np.float32)
    if rng.random() < profile.grayscale_p:
        gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32)
        pixels = np.repeat(gray[..., None], 3, axis=2)
        params["grayscale"] = True
    else:
        saturation = _uniform(rng, profile.saturation)
        gray = pixels @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
        pixels = gray[..., None] + saturation * (pixels - gray[..., None])
        params["saturation"] = round(saturation, 4)
        if profile.hue_degrees > 0:
            hue = _uniform(rng, (-profile.hue_degrees, profile.hue_degrees))
            hsv = cv2.cvtColor(np.clip(pixels, 0, 255).astype(np.uint8), cv2.COLOR_RGB2HSV_FULL)
            hsv[..., 0] = (hsv[..., 0].astype(np.int32) + round(hue * 256 / 360)) % 256
            pixels = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB_FULL).astype(np.float32)
            params["hue_degrees"] = round(hue, 2)
    contrast = _uniform(rng, profile.contrast)
    brightness = _uniform(rng, (-profile.brightness, profile.brightness)) * 255.0
    mean = float(pixels.mean())
    pixels = (pixels - mean) * contrast + mean + brightness
    gamma = _uniform(rng, profile.gamma)
    pixels = 255.0 * np.power(np.clip(pixels, 0, 255) / 255.0, gamma)
    params.update(contrast=round(contrast, 4), brightness=round(brightness, 2), gamma=round(gamma, 4))
    return np.clip(pixels + 0.5, 0, 255).astype(np.uint8), params


def augment(image: np.ndarray, rng: np.random.Generator, profile: AugmentProfile) -> tuple[np.ndarray, dict[str, Any]]:
    """RGB uint8 -> augmented RGB uint8 and the drawn parameters."""
    image, params = _random_crop(image, rng, profile)
    image, size = _rescale(image, rng, profile)
    params.update(size)
    if rng.random() < profile.flip_p:
        image = np.ascontiguousarray(image[:, ::-1])
        params["flip"] = True
    if rng.random() < profile.rotate_p:
        degrees = _uniform(rng, (-profile.max_degrees, profile.max_degrees))
        image = _rotate(image, degrees)
        params["rotate"] = round(degrees, 2)
    image, color = _color(image, rng, profile)
    params.update(color)
    if rng.random() < profile.blur_p:
        sigma = _uniform(rng, (0.5, 1.5))
        image = cv2.GaussianBlur(image, (0, 0), sigma)
        params["blur_sigma"] = round(sigma, 3)
    if rng.random() < profile.noise_p:
        sigma = _uniform(rng, (2.0, 6.0))
        noise = rng.normal(0.0, sigma, size=image.shape).astype(np.float32)
        image = np.clip(image.astype(np.float32) + noise + 0.5, 0, 255).astype(np.uint8)
        params["noise_sigma"] = round(sigma, 3)
    return image, params


def encode(image: np.ndarray, rng: np.random.Generator, profile: AugmentProfile) -> tuple[bytes, dict[str, Any]]:
    """RGB uint8 -> JPEG (random quality) or PNG bytes, as a client would send."""
    bgr = cv2.cvtColor(image, cv2.COLOR_RGB2BGR)
    if rng.random() < profile.jpeg_p:
        quality = int(rng.integers(profile.jpeg_quality[0], profile.jpeg_quality[1] + 1))
        ok, buffer = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, quality])
        params: dict[str, Any] = {"format": "jpeg", "quality": quality}
    else:
        ok, buffer = cv2.imencode(".png", bgr, [cv2.IMWRITE_PNG_COMPRESSION, 3])
        params = {"format": "png"}
    if not ok:
        raise CalibrationError("OpenCV failed to encode an augmented image")
    return buffer.tobytes(), params


def make_samples(
    sources: Sequence[Source],
    count: int,
    seed: int,
    profile: AugmentProfile,
    limits: image_codec.ImageLimits,
    include_originals: bool = True,
) -> list[Sample]:
    """``count`` encoded images: the sources as-is first (if asked), then augmentations.

    Augmented sample ``i`` takes source ``i % len(sources)`` and a generator
    seeded with ``(seed, i)``; sources are decoded by the served decoder.
    """
    if count < 1:
        raise CalibrationError(f"sample count must be positive, got {count}")
    if not sources:
        raise CalibrationError("no source images")
    decoded: dict[int, np.ndarray] = {}

    def source_image(position: int) -> np.ndarray:
        if position not in decoded:
            try:
                decoded[position] = image_codec.decode_rgb(sources[position].data, limits)
            except image_codec.ImageError as error:
                raise CalibrationError(f"{sources[position].name}: rejected by the served decoder: {error}") from None
        return decoded[position]

    samples: list[Sample] = []
    originals = min(count, len(sources)) if include_originals else 0
    for index in range(originals):
        source_image(index)  # validate it the way the server would
        samples.append(Sample(index, sources[index].name, sources[index].data, {"original": True}))
    for index in range(originals, count):
        position = index % len(sources)
        rng = np.random.default_rng(np.random.SeedSequence([seed, index]))
        image, params = augment(source_image(position), rng, profile)
        data, encoding = encode(image, rng, profile)
        params.update(encoding)
        samples.append(Sample(index, sources[position].name, data, params))
    return samples


def decode_samples(samples: Sequence[Sample], served: ServedInputs) -> list[image_codec.Decoded]:
    """Every sample through the served decoder (at the size the served preprocessing decodes)."""
    try:
        return [served.decode(sample.data) for sample in samples]
    except image_codec.ImageError as error:
        raise CalibrationError(f"an augmented image was rejected by the served decoder: {error}") from None


def core_inputs(samples: Sequence[Sample], served: ServedInputs, chunk: int = 64) -> np.ndarray:
    """The served decode + preprocessing of every sample -> the core's input batch, as the ensemble feeds it."""
    parts = []
    for start in range(0, len(samples), chunk):
        part = decode_samples(samples[start : start + chunk], served)
        feeds = served.core_feeds(served.preprocessed(part, served.offline_request(len(part))))
        if len(feeds) != 1:
            raise CalibrationError(f"the core takes {len(feeds)} inputs ({', '.join(feeds)}); calibration feeds one")
        parts.append(next(iter(feeds.values())))
    return np.concatenate(parts)


def recipe(sources: Sequence[Source], count: int, seed: int, profile: AugmentProfile, spec: preprocessing.PreprocessSpec) -> dict[str, Any]:
    """What a set is a function of (besides library versions): its hash names the set."""
    return {
        "sources": [{"name": s.name, "sha256": s.sha256} for s in sources],
        "count": count,
        "seed": seed,
        "profile": asdict(profile),
        "augmentation_version": AUGMENTATION_VERSION,
        "preprocess_spec": asdict(spec),
    }
