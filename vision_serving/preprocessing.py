"""Resize (center-crop, stretch or letterbox) and normalize decoded images into one model-input batch.

Three resize modes, named by the preprocess config's ``resize`` parameter:

- ``center_crop``: scale the shorter side to ``resize_shorter_side``, then
  center-crop the output size (ImageNet classifiers);
- ``stretch``: map the whole image onto the output size, ignoring its aspect
  ratio, exactly as MediaPipe's ``ImageToTensorCalculator`` does with
  ``keep_aspect_ratio: false`` (the selfie-segmentation graph; see
  :func:`stretch`);
- ``letterbox``: map the whole image onto the output size keeping its aspect
  ratio, centred, with zero bars, exactly as ``ImageToTensorCalculator`` does
  with ``keep_aspect_ratio: true`` (the face-detection graph; see
  :func:`letterbox`).

``stretch`` and ``letterbox`` are one warp of a region of interest
(:mod:`vision_serving.image_to_tensor`) with different regions; for both, the
postprocess model maps results back to the original image, whose size the
preprocess model passes on.

The parameters come from the preprocess model's ``config.pbtxt``
(``PreprocessSpec.from_config``), so a model version carries its own
preprocessing. ``center_crop`` downscales by more than ``resize_reducing_gap``
(config parameter; 0 = off) are anti-aliased: area averaging to that many times
the target first (:func:`reduce_for_resize`), so a photo's answer does not depend
on its size or decode scale. ``stretch`` and ``letterbox`` stay MediaPipe's exact
(aliasing) warp: they are gated against MediaPipe's own runtime.
Resize-shorter-side + center-crop is ``cv2.resize`` followed by
a crop when the resized image is at most ``MAX_RESIZE_AREA_RATIO`` times the
crop (every photo-like aspect ratio): OpenCV's separable, vectorized resize is
about 4x faster than a warp. A more elongated image is instead computed as a
single affine warp that evaluates only the cropped output pixels, so it never
allocates its huge resized intermediate; the two paths agree up to OpenCV's
fixed-point rounding (the warp's 1/32-pixel coordinate grid).

Speed (``benchmarks/``): crops are written straight into one uint8 batch
buffer, normalization writes straight into the float output (``out`` lets a
caller supply it), and ``set_threads`` bounds OpenCV's own thread pool, since
Triton already runs model instances in parallel on few cores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from . import detection, image_to_tensor, model_config
from .image_codec import Decoded, ImageError, ImageLimits, MinimumSize, decode, decode_rgb

INTERPOLATIONS = {
    "bicubic": cv2.INTER_CUBIC,
    "bilinear": cv2.INTER_LINEAR,
    "nearest": cv2.INTER_NEAREST,
}
LAYOUTS = ("NCHW", "NHWC")
COLOR_ORDERS = ("RGB", "BGR")
RESIZE_MODES = ("center_crop", "stretch", "letterbox")
# Resize the whole image (then crop) up to this many times the crop's area;
# beyond, warp only the crop (bounded cost and memory for elongated images).
MAX_RESIZE_AREA_RATIO = 4.0


def set_threads(count: int) -> None:
    """OpenCV's thread pool size for this process (0: OpenCV's default, one per CPU)."""
    cv2.setNumThreads(count if count > 0 else -1)


@dataclass(frozen=True)
class PreprocessSpec:
    crop_size: int
    resize_shorter_side: int
    interpolation: str
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    layout: str = "NCHW"
    color_order: str = "RGB"
    resize: str = "center_crop"
    # center_crop: JPEGs decode at a DCT scale keeping the shorter side >= this x resize_shorter_side.
    decode_oversampling: float = 2.0
    # center_crop: a downscale by more than this factor first area-averages to this x the target
    # (anti-aliasing, as Pillow's reducing_gap), then interpolates; 0 = off (plain interpolation).
    resize_reducing_gap: float = 0.0

    def __post_init__(self) -> None:
        if self.decode_oversampling != 0 and self.decode_oversampling < 1:
            raise model_config.ConfigError(f"decode_oversampling must be 0 (off) or >= 1, got {self.decode_oversampling}")
        if self.resize_reducing_gap != 0 and not self.resize_reducing_gap >= 1:
            raise model_config.ConfigError(f"resize_reducing_gap must be 0 (off) or >= 1, got {self.resize_reducing_gap}")
        if self.resize not in RESIZE_MODES:
            raise model_config.ConfigError(f"resize {self.resize!r} is not one of {RESIZE_MODES}")
        if self.interpolation not in INTERPOLATIONS:
            raise model_config.ConfigError(f"interpolation {self.interpolation!r} is not one of {sorted(INTERPOLATIONS)}")
        if self.layout not in LAYOUTS:
            raise model_config.ConfigError(f"layout {self.layout!r} is not one of {LAYOUTS}")
        if self.color_order not in COLOR_ORDERS:
            raise model_config.ConfigError(f"color_order {self.color_order!r} is not one of {COLOR_ORDERS}")
        if len(self.mean) != 3 or len(self.std) != 3:
            raise model_config.ConfigError("mean and std need three values, one per channel")
        if any(value <= 0 for value in self.std):
            raise model_config.ConfigError("std values must be positive")
        if self.resize != "center_crop" and self.resize_reducing_gap != 0:
            raise model_config.ConfigError(
                f"resize_reducing_gap applies to resize center_crop only (resize {self.resize!r} reproduces MediaPipe's warp): set it to 0 or remove it"
            )
        if self.resize == "center_crop" and self.resize_shorter_side < self.crop_size:
            raise model_config.ConfigError(f"resize_shorter_side {self.resize_shorter_side} is smaller than the crop {self.crop_size}")

    @property
    def output_shape(self) -> tuple[int, int, int]:
        """Shape of one preprocessed image, without the batch dimension."""
        if self.layout == "NCHW":
            return (3, self.crop_size, self.crop_size)
        return (self.crop_size, self.crop_size, 3)

    @classmethod
    def from_config(cls, config: model_config.ModelConfig) -> PreprocessSpec:
        layout = model_config.parameter(config, "layout")
        pixels = model_config.tensors_by_role(config).output("FP32")
        dims = list(model_config.tensor(config, pixels, "output").dims)
        if len(dims) != 3:
            raise model_config.ConfigError(f"model '{config.name}': output dims {dims} are not 3-D")
        channels, height, width = dims if layout == "NCHW" else (dims[2], dims[0], dims[1])
        if channels != 3 or height != width:
            raise model_config.ConfigError(f"model '{config.name}': output dims {dims} are not a square 3-channel {layout} image")
        resize = model_config.parameter(config, "resize", "center_crop")
        return cls(
            crop_size=height,
            resize=resize,
            resize_shorter_side=model_config.int_parameter(config, "resize_shorter_side") if resize == "center_crop" else height,
            interpolation=model_config.parameter(config, "interpolation"),
            mean=tuple(model_config.float_list_parameter(config, "mean")),  # type: ignore[arg-type]
            std=tuple(model_config.float_list_parameter(config, "std")),  # type: ignore[arg-type]
            layout=layout,
            color_order=model_config.parameter(config, "color_order"),
            decode_oversampling=float(model_config.parameter(config, "decode_oversampling", "2")),
            resize_reducing_gap=model_config.float_parameter(config, "resize_reducing_gap", 0.0),
        )


def limits_from_config(config: model_config.ModelConfig) -> ImageLimits:
    return ImageLimits(
        max_bytes=model_config.int_parameter(config, "max_image_bytes"),
        max_pixels=model_config.int_parameter(config, "max_image_pixels"),
        accepted_formats=tuple(model_config.parameter(config, "accepted_formats").split(",")),
        max_side=model_config.int_parameter(config, "max_image_side"),
        max_jpeg_scans=model_config.int_parameter(config, "max_jpeg_scans"),
    )


def resized_size(width: int, height: int, shorter_side: int) -> tuple[int, int]:
    """(width, height) after scaling the shorter side to ``shorter_side`` (torchvision's rounding)."""
    if width <= height:
        return shorter_side, int(shorter_side * height / width)
    return int(shorter_side * width / height), shorter_side


def reduce_for_resize(image: np.ndarray, new_width: int, new_height: int, gap: float) -> np.ndarray:
    """Anti-aliasing before a large downscale, as Pillow's ``Image.resize(..., reducing_gap=gap)``: when
    the image is at least ``2 x gap`` times the target, box-average it by the largest integer factor that
    keeps it at least ``gap`` times the target (``cv2.INTER_AREA`` at an exact integer factor: OpenCV's
    fast path); otherwise (or ``gap`` 0) the image itself. The few rows/columns that do not fill a whole
    box (fewer than the factor) are cropped evenly from both sides.

    Bicubic interpolation does not low-pass when it shrinks: from 4000 px to 256 px it point-samples
    texture and sensor noise, so the answer depended on the decode scale (a DCT-reduced decode
    averages first). After the reduction, a 4000 x 3000 photo and its 1/4 decode give nearly the same
    pixels (docs/design.md, "Anti-aliased downscaling"). The reduced image is never larger than the
    input, so it is memory-safe on the elongated-image warp path too.
    """
    height, width = image.shape[:2]
    factor = int(min(width / new_width, height / new_height) / gap) if gap > 0 else 0
    if factor < 2:
        return image
    crop_height, crop_width = height - height % factor, width - width % factor
    top, left = (height - crop_height) // 2, (width - crop_width) // 2
    boxes = image[top : top + crop_height, left : left + crop_width]
    return cv2.resize(boxes, (crop_width // factor, crop_height // factor), interpolation=cv2.INTER_AREA)


def _crop_origin(new_width: int, new_height: int, crop: int) -> tuple[int, int]:
    return round((new_width - crop) / 2.0), round((new_height - crop) / 2.0)


def stretch(image: np.ndarray, width: int, height: int, interpolation: int, out: np.ndarray | None = None) -> np.ndarray:
    """The whole image onto a width x height grid, as MediaPipe's ImageToTensorCalculator (CPU) does it
    with ``keep_aspect_ratio: false``: the region of interest is the whole image.

    mediapipe/calculators/tensor/image_to_tensor_converter_opencv.cc maps the
    region's corners onto the tensor's corners with ``cv::getPerspectiveTransform``
    (float32 corner points) and samples with ``cv::warpPerspective`` (border
    constant 0): corner-aligned, unlike ``cv2.resize``'s half-pixel centres
    (:func:`vision_serving.image_to_tensor.warp_roi`).
    """
    return image_to_tensor.warp_roi(image, image_to_tensor.full_image_roi(image), width, height, interpolation, out)


def letterbox(image: np.ndarray, width: int, height: int, interpolation: int, out: np.ndarray | None = None) -> np.ndarray:
    """The whole image onto a width x height grid keeping its aspect ratio, as ImageToTensorCalculator
    (CPU) does it with ``keep_aspect_ratio: true`` and ``BORDER_ZERO``.

    The region of interest is the image padded to the grid's aspect ratio, centred
    (``GetRoi`` + ``PadRoi``: :func:`vision_serving.detection.letterbox_params`, which
    the postprocessing also uses to map results back); the bars are zero pixels.
    """
    roi = detection.letterbox_params([image.shape[0]], [image.shape[1]], (height, width)).roi(0)
    return image_to_tensor.warp_roi(image, roi, width, height, interpolation, out)


_ROI_RESIZES = {"stretch": stretch, "letterbox": letterbox}


def resize_and_crop(image: np.ndarray, spec: PreprocessSpec, out: np.ndarray | None = None) -> np.ndarray:
    """HxWx3 uint8 -> crop x crop x 3 uint8: resize shorter side, then center-crop (or stretch, or letterbox).

    ``out``, a C-contiguous crop x crop x 3 uint8 array, receives the result
    (no intermediate copy on the warp path).
    """
    height, width = image.shape[:2]
    crop = spec.crop_size
    if spec.resize in _ROI_RESIZES:
        return _ROI_RESIZES[spec.resize](image, crop, crop, INTERPOLATIONS[spec.interpolation], out)
    new_width, new_height = resized_size(width, height, spec.resize_shorter_side)
    left, top = _crop_origin(new_width, new_height, crop)
    interpolation = INTERPOLATIONS[spec.interpolation]
    image = reduce_for_resize(image, new_width, new_height, spec.resize_reducing_gap)
    height, width = image.shape[:2]
    if new_width * new_height <= MAX_RESIZE_AREA_RATIO * crop * crop:
        resized = cv2.resize(image, (new_width, new_height), interpolation=interpolation)
        cropped = resized[top : top + crop, left : left + crop]
        if out is None:
            return np.ascontiguousarray(cropped)
        out[...] = cropped
        return out
    scale_x = new_width / width
    scale_y = new_height / height
    # Output pixel (x, y) is resized pixel (x + left, y + top), whose source
    # coordinate under cv2.resize's half-pixel convention is (d + 0.5) / s - 0.5.
    inverse_map = np.array(
        [
            [1.0 / scale_x, 0.0, (left + 0.5) / scale_x - 0.5],
            [0.0, 1.0 / scale_y, (top + 0.5) / scale_y - 0.5],
        ],
        dtype=np.float64,
    )
    warped = cv2.warpAffine(
        image,
        inverse_map,
        (crop, crop),
        dst=out,
        flags=interpolation | cv2.WARP_INVERSE_MAP,
        borderMode=cv2.BORDER_REPLICATE,
    )
    if out is not None and warped is not out:  # OpenCV allocated anyway (should not happen)
        out[...] = warped
        return out
    return warped


def normalize_batch(crops: np.ndarray, spec: PreprocessSpec, out: np.ndarray | None = None) -> np.ndarray:
    """N x crop x crop x 3 uint8 RGB -> float32 batch in the configured layout and channel order."""
    if spec.color_order == "BGR":
        crops = crops[..., ::-1]
    mean = np.asarray(spec.mean, dtype=np.float32)
    inverse_std = np.float32(1.0) / np.asarray(spec.std, dtype=np.float32)
    if out is None:
        out = np.empty((len(crops), *spec.output_shape), dtype=np.float32)
    if spec.layout == "NCHW":
        for channel in range(3):
            np.subtract(crops[..., channel], mean[channel], out=out[:, channel], dtype=np.float32)
            out[:, channel] *= inverse_std[channel]
    else:
        np.subtract(crops, mean, out=out, dtype=np.float32)
        out *= inverse_std
    return out


def preprocess_batch(images: Sequence[np.ndarray], spec: PreprocessSpec, out: np.ndarray | None = None) -> np.ndarray:
    """Decoded RGB uint8 images of any sizes -> one float32 model-input batch (written into ``out`` if given)."""
    crop = spec.crop_size
    crops = np.empty((len(images), crop, crop, 3), dtype=np.uint8)
    for index, image in enumerate(images):
        resize_and_crop(image, spec, out=crops[index])
    return normalize_batch(crops, spec, out=out)


def image_sizes(images: Sequence[np.ndarray]) -> np.ndarray:
    """[N, 2] int32 (height, width) of decoded images: what postprocessing maps results back to."""
    return np.array([image.shape[:2] for image in images], dtype=np.int32).reshape(len(images), 2)


def decode_payloads(payloads: np.ndarray, limits: ImageLimits) -> list[np.ndarray]:
    """Decode one request's BYTES tensor ([batch, 1] of encoded images) into RGB arrays.

    Raises ``ImageError`` naming the first bad item; a request is answered
    whole, so one bad image fails only its own request.
    """
    items = payloads.reshape(-1)
    images = []
    for index, item in enumerate(items):
        try:
            images.append(decode_rgb(bytes(item), limits))
        except ImageError as error:
            where = f"image {index} of {len(items)}: " if len(items) > 1 else ""
            raise ImageError(f"{where}{error}") from None
    return images


def decode_minimum(spec: PreprocessSpec) -> MinimumSize | None:
    """The smallest decoded image the spec's resize needs, so that it is still a downscale
    (JPEGs are decoded at the smallest DCT scale that keeps it: :func:`vision_serving.image_codec.decode`):
    ``center_crop``, a shorter side of at least ``decode_oversampling`` x ``resize_shorter_side``
    (config parameter, default 2: web-size photos still decode at full size, so answers do not
    move; a 12 MP phone photo decodes at 1/4 scale, about 4x cheaper; 0 turns reduced decoding off).

    None (full decode) for ``stretch`` and ``letterbox``: MediaPipe's corner-aligned warp is not
    scale-invariant (a reduced decode shifts its samples by (s-1)/2 original pixels at scale 1/s)
    and point-samples the full image; decoding reduced moved the person_segmenter's served masks
    to mean IoU 0.888 against FP32 on the ladder's held-out images (gate 0.95)."""
    if spec.resize == "center_crop" and spec.decode_oversampling > 0:
        return MinimumSize(shorter_side=math.ceil(spec.resize_shorter_side * spec.decode_oversampling))
    return None


def decode_payloads_reduced(payloads: np.ndarray, limits: ImageLimits, minimum: MinimumSize | None) -> list[Decoded]:
    """``decode_payloads`` at the size the resize needs: pixels and each photo's own size."""
    items = payloads.reshape(-1)
    decoded = []
    for index, item in enumerate(items):
        try:
            decoded.append(decode(bytes(item), limits, minimum))
        except ImageError as error:
            where = f"image {index} of {len(items)}: " if len(items) > 1 else ""
            raise ImageError(f"{where}{error}") from None
    return decoded


def original_sizes(decoded: Sequence[Decoded]) -> np.ndarray:
    """[N, 2] int32 (height, width) of the photos themselves (not of a reduced decode)."""
    return np.array([(item.height, item.width) for item in decoded], dtype=np.int32).reshape(len(decoded), 2)
