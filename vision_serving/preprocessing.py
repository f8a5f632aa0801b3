"""Resize and normalize decoded images into one model-input batch, for any input height x width.

Four resize modes, named by the preprocess config's ``resize`` parameter; the
model input's height and width are the pixel output's dims:

- ``center_crop``: scale the shorter side to ``resize_shorter_side``, then
  center-crop height x width (ImageNet classifiers);
- ``stretch``: map the whole image onto height x width, ignoring its aspect
  ratio, exactly as MediaPipe's ``ImageToTensorCalculator`` does with
  ``keep_aspect_ratio: false`` (the selfie-segmentation graphs; see
  :func:`stretch`);
- ``letterbox``: map the whole image onto height x width keeping its aspect
  ratio, centred, with zero bars, exactly as ``ImageToTensorCalculator`` does
  with ``keep_aspect_ratio: true`` (the face-detection graph; see
  :func:`letterbox`);
- ``yolo_letterbox``: Ultralytics' ``LetterBox`` (``ultralytics/data/augment.py``,
  as its predictor applies it to a fixed-size model): scale by
  ``r = min(H / h, W / w)`` to ``round(w r) x round(h r)`` with ``cv2.resize``
  (linear), then pad to H x W with ``pad_value`` (114), the padding split as
  ``round(d / 2 - 0.1)`` before and ``round(d / 2 + 0.1)`` after
  (:func:`yolo_letterbox`).

The ``interpolation`` parameter names OpenCV's filters (``bilinear``, ``bicubic``, ``nearest``) or
Pillow's (:data:`PIL_INTERPOLATIONS`: ``pil_bilinear``), the latter for ``center_crop`` and
``stretch`` only: ``Image.resize`` itself, antialiased when it shrinks (its filter's support widens
with the scale), exactly as torchvision's ``Resize`` computes on a PIL image; Ultralytics' classify
predictor (``classify_transforms``: ``Resize`` of the shorter side to the model's size,
``CenterCrop``; a non-square size is resized to it whole) gets its pixels this way
(:func:`pil_resize`).

Every mode also gives each image's **tensor transform** (:func:`tensor_transforms`):
``(scale_x, scale_y, offset_x, offset_y)`` with ``tensor = image * scale +
offset``, in pixels; a postprocess model that maps results back to the photo
(boxes) inverts it, so it never needs to know how the preprocessing resized.

Normalization is ``(pixel * scale - mean) / std`` per channel (config
parameters ``scale``, default 1, ``mean`` and ``std``; float32, a division as torchvision and
Ultralytics compute it), in ``NCHW`` or ``NHWC``
layout and ``RGB`` or ``BGR`` channel order. The pixel output's data type says where it
happens: ``TYPE_FP32``, here; ``TYPE_UINT8``, in the core's own graph (the builders fold the
same float32 arithmetic, :func:`normalization_constants`, into its ONNX: a quarter of the bytes
through shared memory and to the GPU, and the GPU does the arithmetic), the preprocess handing
over the resized pixels in the model's layout and channel order. The parameters come from the
preprocess model's ``config.pbtxt`` (``PreprocessSpec.from_config``), so a model
version carries its own preprocessing. ``center_crop`` downscales by more than
``resize_reducing_gap`` (config parameter; 0 = off) are anti-aliased: area
averaging to that many times the target first (:func:`reduce_for_resize`), so a
photo's answer does not depend on its size or decode scale. ``stretch``,
``letterbox`` and ``yolo_letterbox`` stay their references' exact (aliasing)
resizes: they are gated against MediaPipe's and Ultralytics' own runtimes.
Resize-shorter-side + center-crop is ``cv2.resize`` followed by a crop when the
resized image is at most ``MAX_RESIZE_AREA_RATIO`` times the crop (every
photo-like aspect ratio): OpenCV's separable, vectorized resize is about 4x
faster than a warp. A more elongated image is instead computed as a single
affine warp that evaluates only the cropped output pixels, so it never
allocates its huge resized intermediate; the two paths agree up to OpenCV's
fixed-point rounding (the warp's 1/32-pixel coordinate grid).

Speed (``benchmarks/``): crops are written straight into one uint8 batch
buffer, normalization writes straight into the float output (``out`` lets a
caller supply it), and ``set_threads`` bounds OpenCV's own thread pool, since
Triton already runs model instances in parallel on few cores.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import cv2
import numpy as np
from PIL import Image

from . import heif, image_to_tensor, model_config
from .image_codec import Decoded, ImageError, ImageLimits, MinimumSize, decode

INTERPOLATIONS = {
    "bicubic": cv2.INTER_CUBIC,
    "bilinear": cv2.INTER_LINEAR,
    "nearest": cv2.INTER_NEAREST,
}
# Pillow's filters (PIL.Image.Resampling names), antialiased when they shrink: torchvision's Resize on a PIL image.
PIL_INTERPOLATIONS = {"pil_bilinear": "BILINEAR"}
# The resize modes that take a Pillow filter (the letterboxes reproduce OpenCV-based references).
PIL_MODES = ("center_crop", "stretch")
LAYOUTS = ("NCHW", "NHWC")
# The pixel output's data type (its config spelling) -> what the preprocess hands the core.
PIXEL_DTYPES = {"FP32": "float32", "UINT8": "uint8"}
COLOR_ORDERS = ("RGB", "BGR")
RESIZE_MODES = ("center_crop", "stretch", "letterbox", "yolo_letterbox")
# The modes that reproduce another runtime's resize exactly (decoded at full size, no anti-aliasing).
EXACT_MODES = ("stretch", "letterbox", "yolo_letterbox")
# Ultralytics' LetterBox padding_value.
YOLO_PAD_VALUE = 114
# Resize the whole image (then crop) up to this many times the crop's area;
# beyond, warp only the crop (bounded cost and memory for elongated images).
MAX_RESIZE_AREA_RATIO = 4.0
# The tensor transform's length: scale_x, scale_y, offset_x, offset_y.
TRANSFORM_SIZE = 4


def set_threads(count: int) -> None:
    """OpenCV's thread pool size for this process (0: OpenCV's default, one per CPU), and the HEIC/AVIF decoders'."""
    cv2.setNumThreads(count if count > 0 else -1)
    heif.set_threads(count)


@dataclass(frozen=True)
class PreprocessSpec:
    height: int
    width: int
    resize_shorter_side: int
    interpolation: str
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    layout: str = "NCHW"
    color_order: str = "RGB"
    resize: str = "center_crop"
    # Multiplies the pixel (0..255) before mean and std: 1/255 gives torchvision's ToTensor range.
    scale: float = 1.0
    # yolo_letterbox: the padding's pixel value (0..255, before normalization).
    pad_value: int = YOLO_PAD_VALUE
    # center_crop: JPEGs decode at a DCT scale keeping the shorter side >= this x resize_shorter_side.
    decode_oversampling: float = 2.0
    # center_crop: a downscale by more than this factor first area-averages to this x the target
    # (anti-aliasing, as Pillow's reducing_gap), then interpolates; 0 = off (plain interpolation).
    resize_reducing_gap: float = 0.0
    # What the preprocess hands the core: "float32" (normalized here) or "uint8" (normalized in the core's graph).
    pixel_dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.height < 1 or self.width < 1:
            raise model_config.ConfigError(f"the model input must be at least 1x1, got {self.height}x{self.width}")
        if self.decode_oversampling != 0 and self.decode_oversampling < 1:
            raise model_config.ConfigError(f"decode_oversampling must be 0 (off) or >= 1, got {self.decode_oversampling}")
        if self.resize_reducing_gap != 0 and not self.resize_reducing_gap >= 1:
            raise model_config.ConfigError(f"resize_reducing_gap must be 0 (off) or >= 1, got {self.resize_reducing_gap}")
        if self.resize not in RESIZE_MODES:
            raise model_config.ConfigError(f"resize {self.resize!r} is not one of {RESIZE_MODES}")
        if self.interpolation not in INTERPOLATIONS and self.interpolation not in PIL_INTERPOLATIONS:
            raise model_config.ConfigError(
                f"interpolation {self.interpolation!r} is not one of {sorted(INTERPOLATIONS) + sorted(PIL_INTERPOLATIONS)}"
            )
        if self.interpolation in PIL_INTERPOLATIONS and self.resize not in PIL_MODES:
            raise model_config.ConfigError(
                f"interpolation {self.interpolation!r} (Pillow's) applies to resize {' or '.join(PIL_MODES)}, not {self.resize!r}"
            )
        if self.interpolation in PIL_INTERPOLATIONS and self.resize_reducing_gap != 0:
            raise model_config.ConfigError(
                f"resize_reducing_gap does not apply to interpolation {self.interpolation!r} (Pillow's filters are antialiased): "
                "set it to 0 or remove it"
            )
        if self.layout not in LAYOUTS:
            raise model_config.ConfigError(f"layout {self.layout!r} is not one of {LAYOUTS}")
        if self.color_order not in COLOR_ORDERS:
            raise model_config.ConfigError(f"color_order {self.color_order!r} is not one of {COLOR_ORDERS}")
        if self.pixel_dtype not in PIXEL_DTYPES.values():
            raise model_config.ConfigError(f"pixel data type {self.pixel_dtype!r} is not one of {sorted(PIXEL_DTYPES.values())}")
        if len(self.mean) != 3 or len(self.std) != 3:
            raise model_config.ConfigError("mean and std need three values, one per channel")
        if any(not value > 0 for value in self.std):
            raise model_config.ConfigError("std values must be positive")
        if not (self.scale > 0 and math.isfinite(self.scale)):
            raise model_config.ConfigError(f"scale must be a positive number, got {self.scale}")
        if not 0 <= self.pad_value <= 255:
            raise model_config.ConfigError(f"pad_value must be a pixel value in 0..255, got {self.pad_value}")
        if self.resize != "center_crop" and self.resize_reducing_gap != 0:
            raise model_config.ConfigError(
                f"resize_reducing_gap applies to resize center_crop only (resize {self.resize!r} reproduces its reference's "
                "exact resize): set it to 0 or remove it"
            )
        if self.resize == "center_crop" and self.resize_shorter_side < max(self.height, self.width):
            raise model_config.ConfigError(
                f"resize_shorter_side {self.resize_shorter_side} is smaller than the crop {self.height}x{self.width}"
            )

    @property
    def output_shape(self) -> tuple[int, int, int]:
        """Shape of one preprocessed image, without the batch dimension."""
        if self.layout == "NCHW":
            return (3, self.height, self.width)
        return (self.height, self.width, 3)

    @classmethod
    def from_config(cls, config: model_config.ModelConfig) -> PreprocessSpec:
        layout = model_config.parameter(config, "layout")
        dims = list(model_config.tensor(config, pixels_output(config), "output").dims)
        if layout not in LAYOUTS:
            raise model_config.ConfigError(f"model '{config.name}': layout {layout!r} is not one of {LAYOUTS}")
        channels, height, width = dims if layout == "NCHW" else (dims[2], dims[0], dims[1])
        if channels != 3 or height < 1 or width < 1:
            raise model_config.ConfigError(
                f"model '{config.name}': output dims {dims} are not a 3-channel {layout} image of a fixed height and width"
            )
        resize = model_config.parameter(config, "resize", "center_crop")
        pixels = model_config.tensor(config, pixels_output(config), "output")
        return cls(
            pixel_dtype=PIXEL_DTYPES[model_config.dtype_name(pixels.data_type)],
            height=height,
            width=width,
            resize=resize,
            resize_shorter_side=model_config.int_parameter(config, "resize_shorter_side") if resize == "center_crop" else 0,
            interpolation=model_config.parameter(config, "interpolation"),
            mean=tuple(model_config.float_list_parameter(config, "mean")),  # type: ignore[arg-type]
            std=tuple(model_config.float_list_parameter(config, "std")),  # type: ignore[arg-type]
            layout=layout,
            color_order=model_config.parameter(config, "color_order"),
            scale=model_config.float_parameter(config, "scale", 1.0),
            pad_value=model_config.int_parameter(config, "pad_value", YOLO_PAD_VALUE),
            decode_oversampling=float(model_config.parameter(config, "decode_oversampling", "2")),
            resize_reducing_gap=model_config.float_parameter(config, "resize_reducing_gap", 0.0),
        )


@dataclass(frozen=True)
class PreprocessOutputs:
    """A preprocess model's outputs, found by role: the FP32 (or UINT8: :mod:`builders.normalization`) image
    (3-D), and optionally the INT32 ``[2]`` original size (height, width) and the FP32 ``[4]`` tensor transform."""

    pixels: str
    image_size: str | None
    transform: str | None

    @classmethod
    def from_config(cls, config: model_config.ModelConfig) -> PreprocessOutputs:
        def named(datatype: int, rank: int | None = None, dims: list[int] | None = None) -> list[str]:
            return [
                item.name
                for item in config.output
                if item.data_type == datatype and (rank is None or len(item.dims) == rank) and (dims is None or list(item.dims) == dims)
            ]

        types = model_config.model_config_pb2
        fp32, int32 = types.TYPE_FP32, types.TYPE_INT32
        pixels = named(fp32, rank=3) + named(types.TYPE_UINT8, rank=3)
        sizes, transforms = named(int32, dims=[2]), named(fp32, dims=[TRANSFORM_SIZE])
        if len(pixels) != 1 or len(sizes) > 1 or len(transforms) > 1 or len(config.output) != 1 + len(sizes) + len(transforms):
            raise model_config.ConfigError(
                f"model '{config.name}': expected one FP32 or UINT8 3-D image output, at most one INT32 [2] size output "
                f"(height, width) and at most one FP32 [{TRANSFORM_SIZE}] tensor-transform output"
            )
        return cls(pixels[0], sizes[0] if sizes else None, transforms[0] if transforms else None)


def pixels_output(config: model_config.ModelConfig) -> str:
    """The preprocess model's image output (its one FP32 or UINT8 output of rank 3)."""
    return PreprocessOutputs.from_config(config).pixels


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
    pixels (docs/design.md, "Reduced JPEG decoding and anti-aliased downscaling"). The reduced image is never larger than the
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


def _crop_origin(new_width: int, new_height: int, crop_width: int, crop_height: int) -> tuple[int, int]:
    return round((new_width - crop_width) / 2.0), round((new_height - crop_height) / 2.0)


def source_scale(image: np.ndarray, size: tuple[int, int] | None) -> tuple[float, float]:
    """(x, y) scale of ``image``, a decode of a photo of ``size`` (height, width; None: the photo itself).

    A JPEG reduced at DCT scale ``n/8`` is ``ceil(side x n / 8)`` pixels a side: the scale is that ``n/8``
    exactly when it explains both sides, else the ratio of the sides (another decoder's reduction)."""
    if size is None:
        return 1.0, 1.0
    height, width = image.shape[:2]
    photo_height, photo_width = int(size[0]), int(size[1])
    if (height, width) == (photo_height, photo_width):
        return 1.0, 1.0
    for eighths in range(1, 8):
        if (-(-photo_width * eighths // 8), -(-photo_height * eighths // 8)) == (width, height):
            return eighths / 8.0, eighths / 8.0
    return width / photo_width, height / photo_height


def stretch(
    image: np.ndarray, width: int, height: int, interpolation: int, out: np.ndarray | None = None, size: tuple[int, int] | None = None
) -> np.ndarray:
    """The whole image onto a width x height grid, as MediaPipe's ImageToTensorCalculator (CPU) does it
    with ``keep_aspect_ratio: false``: the region of interest is the whole image.

    mediapipe/calculators/tensor/image_to_tensor_converter_opencv.cc maps the
    region's corners onto the tensor's corners with ``cv::getPerspectiveTransform``
    (float32 corner points) and samples with ``cv::warpPerspective`` (border
    constant 0): corner-aligned, unlike ``cv2.resize``'s half-pixel centres
    (:func:`vision_serving.image_to_tensor.warp_roi`). ``size``: the photo's (height, width) when
    ``image`` is a reduced decode of it (the same points of the photo are sampled).
    """
    photo_height, photo_width = size if size is not None else image.shape[:2]
    roi = (0.0, 0.0, float(photo_width), float(photo_height))
    return image_to_tensor.warp_roi(image, roi, width, height, interpolation, out, source_scale(image, size))


def letterbox(
    image: np.ndarray, width: int, height: int, interpolation: int, out: np.ndarray | None = None, size: tuple[int, int] | None = None
) -> np.ndarray:
    """The whole image onto a width x height grid keeping its aspect ratio, as ImageToTensorCalculator
    (CPU) does it with ``keep_aspect_ratio: true`` and ``BORDER_ZERO``.

    The region of interest is the image padded to the grid's aspect ratio, centred
    (``GetRoi`` + ``PadRoi``: :func:`vision_serving.image_to_tensor.letterbox_roi`); the bars
    are zero pixels. ``size``: the photo's (height, width) when ``image`` is a reduced decode of it.
    """
    photo_height, photo_width = size if size is not None else image.shape[:2]
    roi = image_to_tensor.letterbox_roi(photo_height, photo_width, height, width)
    return image_to_tensor.warp_roi(image, roi, width, height, interpolation, out, source_scale(image, size))


@dataclass(frozen=True)
class YoloLetterbox:
    """Ultralytics' ``LetterBox.get_params`` for one image (center, no auto, scaleup): the resized size
    and the padding before each side, in pixels."""

    new_width: int
    new_height: int
    left: int
    top: int

    @classmethod
    def of(cls, height: int, width: int, tensor_height: int, tensor_width: int) -> YoloLetterbox:
        ratio = min(tensor_height / height, tensor_width / width)
        new_width, new_height = max(round(width * ratio), 1), max(round(height * ratio), 1)
        # dw /= 2; top = round(dh - 0.1), bottom = round(dh + 0.1): Python's round, half to even.
        left = round((tensor_width - new_width) / 2 - 0.1)
        top = round((tensor_height - new_height) / 2 - 0.1)
        return cls(new_width, new_height, left, top)


def yolo_letterbox(
    image: np.ndarray,
    width: int,
    height: int,
    interpolation: int,
    pad_value: int = YOLO_PAD_VALUE,
    out: np.ndarray | None = None,
    size: tuple[int, int] | None = None,
) -> np.ndarray:
    """Ultralytics' ``LetterBox`` onto a width x height grid: ``cv2.resize`` (when the size changes) to
    the rounded fit, then constant padding, split as :class:`YoloLetterbox` rounds it. ``size``: the
    photo's (height, width) when ``image`` is a reduced decode of it (the geometry is the photo's;
    ``cv2.resize``'s half-pixel centres sample the same points of the photo at any scale)."""
    photo_height, photo_width = size if size is not None else image.shape[:2]
    geometry = YoloLetterbox.of(photo_height, photo_width, height, width)
    if out is None:
        out = np.empty((height, width, image.shape[2]), dtype=image.dtype)
    out[...] = pad_value
    region = out[geometry.top : geometry.top + geometry.new_height, geometry.left : geometry.left + geometry.new_width]
    if (image.shape[1], image.shape[0]) == (geometry.new_width, geometry.new_height):
        region[...] = image
    else:
        region[...] = cv2.resize(image, (geometry.new_width, geometry.new_height), interpolation=interpolation)
    return out


def pil_resize(
    image: np.ndarray, width: int, height: int, interpolation: str, box: tuple[float, float, float, float] | None = None
) -> np.ndarray:
    """HxWx3 uint8 -> width x height x 3 uint8 by Pillow's ``Image.resize`` with the filter ``interpolation`` (a
    :data:`PIL_INTERPOLATIONS` name): what torchvision's ``Resize`` computes on a PIL image (antialiased when it
    shrinks; Pillow's fixed-point arithmetic, the horizontal pass first, each rounded to 8 bits). ``box``: the region
    (left, top, right, bottom, in the image's pixels) resampled onto the output instead of the whole image."""
    source = Image.fromarray(np.ascontiguousarray(image))
    return np.asarray(source.resize((width, height), getattr(Image.Resampling, PIL_INTERPOLATIONS[interpolation]), box=box))


def _pil_center_crop(image: np.ndarray, spec: PreprocessSpec) -> np.ndarray:
    """torchvision's ``Resize(shorter side)`` + ``CenterCrop`` on a PIL image: Pillow resizes the whole image, then the
    crop is cut. An elongated image (beyond ``MAX_RESIZE_AREA_RATIO``) resamples only the crop's region (Pillow's
    ``box``: the same filter centred on the same points, up to the float rounding of the box's corners)."""
    height, width = image.shape[:2]
    new_width, new_height = resized_size(width, height, spec.resize_shorter_side)
    left, top = _crop_origin(new_width, new_height, spec.width, spec.height)
    if new_width * new_height <= MAX_RESIZE_AREA_RATIO * spec.width * spec.height:
        if (new_width, new_height) == (width, height):  # torchvision's Resize hands the image on unchanged
            return image[top : top + spec.height, left : left + spec.width]
        return pil_resize(image, new_width, new_height, spec.interpolation)[top : top + spec.height, left : left + spec.width]
    scale_x, scale_y = width / new_width, height / new_height
    box = (left * scale_x, top * scale_y, (left + spec.width) * scale_x, (top + spec.height) * scale_y)
    return pil_resize(image, spec.width, spec.height, spec.interpolation, box)


def _center_crop(image: np.ndarray, spec: PreprocessSpec, out: np.ndarray | None) -> np.ndarray:
    """Resize the shorter side, then center-crop (one affine warp of the crop for elongated images)."""
    if spec.interpolation in PIL_INTERPOLATIONS:
        return _written(_pil_center_crop(image, spec), out)
    height, width = image.shape[:2]
    new_width, new_height = resized_size(width, height, spec.resize_shorter_side)
    left, top = _crop_origin(new_width, new_height, spec.width, spec.height)
    interpolation = INTERPOLATIONS[spec.interpolation]
    image = reduce_for_resize(image, new_width, new_height, spec.resize_reducing_gap)
    height, width = image.shape[:2]
    if new_width * new_height <= MAX_RESIZE_AREA_RATIO * spec.width * spec.height:
        resized = cv2.resize(image, (new_width, new_height), interpolation=interpolation)
        cropped = resized[top : top + spec.height, left : left + spec.width]
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
        (spec.width, spec.height),
        dst=out,
        flags=interpolation | cv2.WARP_INVERSE_MAP,
        borderMode=cv2.BORDER_REPLICATE,
    )
    if out is not None and warped is not out:  # OpenCV allocated anyway (should not happen)
        out[...] = warped
        return out
    return warped


def resize_and_crop(
    image: np.ndarray, spec: PreprocessSpec, out: np.ndarray | None = None, size: tuple[int, int] | None = None
) -> np.ndarray:
    """HxWx3 uint8 -> height x width x 3 uint8 as the spec's resize mode computes it.

    ``out``, a C-contiguous height x width x 3 uint8 array, receives the result
    (no intermediate copy on the warp paths). ``size``: the photo's (height, width) when ``image``
    is a reduced decode of it (:func:`decode_minimum`): ``stretch``, ``letterbox`` and
    ``yolo_letterbox`` keep the photo's geometry; ``center_crop`` scales the image it is given.
    """
    if spec.resize == "stretch" and spec.interpolation in PIL_INTERPOLATIONS:
        # The whole image onto the tensor by Pillow (a reduced decode covers the same photo: the geometry is the same).
        return _written(pil_resize(image, spec.width, spec.height, spec.interpolation), out)
    if spec.resize == "center_crop":
        return _center_crop(image, spec, out)
    interpolation = INTERPOLATIONS[spec.interpolation]
    if spec.resize == "stretch":
        return stretch(image, spec.width, spec.height, interpolation, out, size)
    if spec.resize == "letterbox":
        return letterbox(image, spec.width, spec.height, interpolation, out, size)
    return yolo_letterbox(image, spec.width, spec.height, interpolation, spec.pad_value, out, size)


def _written(pixels: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """``pixels`` in ``out`` when given, else as a C-contiguous array of their own."""
    if out is None:
        return np.ascontiguousarray(pixels)
    out[...] = pixels
    return out


def tensor_transforms(sizes: np.ndarray, spec: PreprocessSpec) -> np.ndarray:
    """[N, 2] (height, width) of the photos -> [N, 4] float32 (scale_x, scale_y, offset_x, offset_y):
    the map ``tensor = image * scale + offset`` (pixel edges, x right, y down) that the spec's resize
    applied to each photo. A postprocess model maps tensor coordinates back with ``(t - offset) / scale``.

    - ``center_crop``: the shorter-side scale, offset by the crop's origin (before anti-aliasing, which
      keeps the geometry);
    - ``stretch``: the corner-aligned warp, image [0, w] onto tensor [0, W];
    - ``letterbox``: MediaPipe's padded region onto the tensor;
    - ``yolo_letterbox``: Ultralytics' per-axis gains of the rounded resize and its padding
      (``ultralytics.utils.ops.scale_boxes``).
    """
    sizes = np.asarray(sizes).reshape(-1, 2)
    out = np.empty((len(sizes), TRANSFORM_SIZE), dtype=np.float64)
    for row, (height, width) in enumerate(sizes.tolist()):
        if spec.resize == "center_crop":
            new_width, new_height = resized_size(width, height, spec.resize_shorter_side)
            left, top = _crop_origin(new_width, new_height, spec.width, spec.height)
            out[row] = (new_width / width, new_height / height, -left, -top)
        elif spec.resize == "stretch":
            out[row] = (spec.width / width, spec.height / height, 0.0, 0.0)
        elif spec.resize == "letterbox":
            roi_left, roi_top, roi_width, roi_height = image_to_tensor.letterbox_roi(height, width, spec.height, spec.width)
            scale_x, scale_y = spec.width / roi_width, spec.height / roi_height
            out[row] = (scale_x, scale_y, -roi_left * scale_x, -roi_top * scale_y)
        else:
            geometry = YoloLetterbox.of(height, width, spec.height, spec.width)
            out[row] = (geometry.new_width / width, geometry.new_height / height, geometry.left, geometry.top)
    return out.astype(np.float32)


def normalization_constants(spec: PreprocessSpec) -> tuple[np.ndarray, np.ndarray]:
    """Float32 ``(mean / scale, std / scale)`` per channel, in the channel order the model takes: normalized =
    ``(pixel - mean') / std'``, which is ``(pixel * scale - mean) / std`` (here, or folded into the core's graph)."""
    scale = np.float64(spec.scale)
    mean = (np.asarray(spec.mean, dtype=np.float64) / scale).astype(np.float32)
    std = (np.asarray(spec.std, dtype=np.float64) / scale).astype(np.float32)
    return mean, std


def to_model_layout(crops: np.ndarray, spec: PreprocessSpec, out: np.ndarray | None = None) -> np.ndarray:
    """N x height x width x 3 uint8 RGB -> uint8 in the configured layout and channel order (no normalization)."""
    if spec.color_order == "BGR":
        crops = crops[..., ::-1]
    if out is None:
        out = np.empty((len(crops), *spec.output_shape), dtype=np.uint8)
    out[...] = crops.transpose(0, 3, 1, 2) if spec.layout == "NCHW" else crops
    return out


@dataclass(frozen=True)
class PixelNormalization:
    """What a core whose preprocess hands it uint8 pixels computes first, in its graph: float32
    ``(pixel - mean) / std`` per channel (in the model's channel order, on 0..255 pixels), in ``layout``
    (the builders fold it into the core's ONNX: :mod:`builders.normalization`)."""

    mean: tuple[float, ...]
    std: tuple[float, ...]
    layout: str = "NCHW"

    @classmethod
    def of_spec(cls, spec: PreprocessSpec) -> PixelNormalization:
        mean, std = normalization_constants(spec)
        return cls(tuple(mean.tolist()), tuple(std.tolist()), spec.layout)

    def constants(self) -> tuple[np.ndarray, np.ndarray]:
        """Float32 mean and std shaped to broadcast over a batch in the layout."""
        shape = (1, 3, 1, 1) if self.layout == "NCHW" else (1, 1, 1, 3)
        return np.asarray(self.mean, np.float32).reshape(shape), np.asarray(self.std, np.float32).reshape(shape)

    def apply(self, pixels: np.ndarray) -> np.ndarray:
        """A uint8 batch -> the float32 input a float model takes: what the folded graph computes."""
        mean, std = self.constants()
        return ((pixels.astype(np.float32) - mean) / std).astype(np.float32)


def normalize_pixels(pixels: np.ndarray, spec: PreprocessSpec) -> np.ndarray:
    """A uint8 batch in the model's layout and channel order -> the float32 input a float model takes: what the
    graph folded into a uint8 core computes (the builders check the folded graph against this)."""
    return PixelNormalization.of_spec(spec).apply(pixels)


def normalize_batch(crops: np.ndarray, spec: PreprocessSpec, out: np.ndarray | None = None) -> np.ndarray:
    """N x height x width x 3 uint8 RGB -> the batch the core takes, in the configured layout and channel order:
    float32 ``(pixel - mean / scale) / (std / scale)``, which is ``(pixel * scale - mean) / std`` (with ``scale`` 1
    exactly torchvision's ``Normalize`` and Ultralytics' ``/ 255`` in float32); or the uint8 pixels themselves when
    the core normalizes (``pixel_dtype`` uint8)."""
    if spec.pixel_dtype == "uint8":
        return to_model_layout(crops, spec, out)
    if spec.color_order == "BGR":
        crops = crops[..., ::-1]
    mean, std = normalization_constants(spec)
    if out is None:
        out = np.empty((len(crops), *spec.output_shape), dtype=np.float32)
    if spec.layout == "NCHW":
        for channel in range(3):
            np.subtract(crops[..., channel], mean[channel], out=out[:, channel], dtype=np.float32)
            out[:, channel] /= std[channel]
    else:
        np.subtract(crops, mean, out=out, dtype=np.float32)
        out /= std
    return out


def preprocess_batch(
    images: Sequence[np.ndarray], spec: PreprocessSpec, out: np.ndarray | None = None, sizes: np.ndarray | None = None
) -> np.ndarray:
    """Decoded RGB uint8 images of any sizes -> one model-input batch, float32 or uint8 as the spec says (written
    into ``out`` if given). ``sizes``: [N, 2] (height, width) of the photos when the images are reduced
    decodes of them (:func:`original_sizes`)."""
    crops = np.empty((len(images), spec.height, spec.width, 3), dtype=np.uint8)
    for index, image in enumerate(images):
        size = None if sizes is None else (int(sizes[index][0]), int(sizes[index][1]))
        resize_and_crop(image, spec, out=crops[index], size=size)
    return normalize_batch(crops, spec, out=out)


def preprocess_outputs(decoded: Sequence[Decoded], spec: PreprocessSpec, outputs: PreprocessOutputs) -> dict[str, np.ndarray]:
    """Decoded uploads (reduced or not) -> the preprocess model's outputs by their names: the model-input
    batch (:func:`preprocess_batch` at the photos' sizes) and, where the config declares them, the photos'
    sizes and tensor transforms. The one place the served preprocess and the in-process pipeline build them."""
    sizes = original_sizes(decoded)
    tensors = {outputs.pixels: preprocess_batch([item.image for item in decoded], spec, sizes=sizes)}
    if outputs.image_size is not None:
        tensors[outputs.image_size] = sizes
    if outputs.transform is not None:
        tensors[outputs.transform] = tensor_transforms(sizes, spec)
    return tensors


def decode_minimum(spec: PreprocessSpec) -> MinimumSize | None:
    """The smallest decoded image the spec's resize needs, ``decode_oversampling`` (config parameter,
    default 2; 0 turns reduced decoding off: every photo decoded at its full size) times what the resize
    keeps of it, so that the resize is still a downscale. JPEGs are decoded at the smallest DCT scale n/8
    that keeps it (:func:`vision_serving.image_codec.decode`):

    - ``center_crop``: a shorter side of at least that many times ``resize_shorter_side`` (web-size
      photos decode at full size; a 12 MP phone photo for a 256-pixel resize at 1/4);
    - ``stretch``: each side at least that many times the tensor's;
    - ``letterbox``, ``yolo_letterbox``: the photo fitted into that many times the tensor (its longer
      side relative to the tensor binds).

    The warps and Ultralytics' resize then sample the reduced image at the photo's own coordinates
    (:func:`resize_and_crop` with the photo's size): each sample is a box average of the photo's
    pixels instead of one of them, the geometry unchanged. docs/design.md ("Reduced JPEG decoding")
    gives what this moves against the full decode, measured per pipeline."""
    if spec.decode_oversampling <= 0:
        return None
    factor = spec.decode_oversampling
    if spec.resize == "center_crop":
        return MinimumSize(shorter_side=math.ceil(spec.resize_shorter_side * factor))
    width, height = math.ceil(spec.width * factor), math.ceil(spec.height * factor)
    if spec.resize == "stretch":
        return MinimumSize(width=width, height=height)
    return MinimumSize(fit_width=width, fit_height=height)


def decode_payloads(payloads: np.ndarray, limits: ImageLimits, minimum: MinimumSize | None = None) -> list[Decoded]:
    """Decode one request's BYTES tensor ([batch, 1] of encoded images) at the size the resize needs:
    pixels (RGB) and each photo's own size.

    Raises ``ImageError`` naming the first bad item; a request is answered
    whole, so one bad image fails only its own request.
    """
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


# --------------------------------------------------------------------------- ragged batches

# A preprocess computation of a task's own (vision_serving.preprocessors): decoded photos -> its outputs by name.
Preprocess = Callable[[Sequence[Decoded]], dict[str, np.ndarray]]


def ragged(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Per-photo arrays as one batch: stacked when they share a shape, else a 1-D object array of them."""
    if len({array.shape for array in arrays}) <= 1 and arrays:
        return np.stack(arrays)
    out = np.empty(len(arrays), dtype=object)
    for index, array in enumerate(arrays):
        out[index] = array
    return out


def is_ragged(array: np.ndarray) -> bool:
    return array.dtype == object and array.ndim == 1 and all(isinstance(item, np.ndarray) for item in array)
