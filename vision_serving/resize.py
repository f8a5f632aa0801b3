"""The image-to-tensor resize modes (:data:`vision_serving.preprocess_spec.RESIZE_MODES`), one photo at a time, and the
tensor transform each gives (:func:`tensor_transforms`); :mod:`vision_serving.preprocessing` has the whole story."""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
from PIL import Image

from . import image_to_tensor
from .preprocess_spec import INTERPOLATIONS, MAX_RESIZE_AREA_RATIO, PIL_INTERPOLATIONS, TRANSFORM_SIZE, YOLO_PAD_VALUE, PreprocessSpec


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


def crop_origin(new_width: int, new_height: int, crop_width: int, crop_height: int) -> tuple[int, int]:
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


def yolo_stretch(
    image: np.ndarray, width: int, height: int, interpolation: int, out: np.ndarray | None = None, size: tuple[int, int] | None = None
) -> np.ndarray:
    """Ultralytics' ``LetterBox(scale_fill=True)`` (RT-DETR's and the depth models' predictors): the whole image onto a
    width x height grid by ``cv2.resize`` (when the size changes), the aspect ratio not kept, no padding. ``size``: the
    photo's (height, width) when ``image`` is a reduced decode of it (``cv2.resize``'s half-pixel centres sample the
    same points of the photo at any scale). Unlike :func:`stretch` (MediaPipe's corner-aligned warp)."""
    if (image.shape[1], image.shape[0]) == (width, height):
        return _written(image, out)
    return _written(cv2.resize(image, (width, height), interpolation=interpolation), out)


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
    left, top = crop_origin(new_width, new_height, spec.width, spec.height)
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
    left, top = crop_origin(new_width, new_height, spec.width, spec.height)
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
    is a reduced decode of it (:func:`decode_minimum`): ``stretch``, ``letterbox``, ``yolo_letterbox`` and
    ``yolo_stretch`` keep the photo's geometry; ``center_crop`` scales the image it is given.
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
    if spec.resize == "yolo_stretch":
        return yolo_stretch(image, spec.width, spec.height, interpolation, out, size)
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
    - ``stretch``: the corner-aligned warp, image [0, w] onto tensor [0, W]; ``yolo_stretch``: ``cv2.resize``, the same edges;
    - ``letterbox``: MediaPipe's padded region onto the tensor;
    - ``yolo_letterbox``: Ultralytics' per-axis gains of the rounded resize and its padding
      (``ultralytics.utils.ops.scale_boxes``).
    """
    sizes = np.asarray(sizes).reshape(-1, 2)
    out = np.empty((len(sizes), TRANSFORM_SIZE), dtype=np.float64)
    for row, (height, width) in enumerate(sizes.tolist()):
        if spec.resize == "center_crop":
            new_width, new_height = resized_size(width, height, spec.resize_shorter_side)
            left, top = crop_origin(new_width, new_height, spec.width, spec.height)
            out[row] = (new_width / width, new_height / height, -left, -top)
        elif spec.resize in ("stretch", "yolo_stretch"):
            out[row] = (spec.width / width, spec.height / height, 0.0, 0.0)
        elif spec.resize == "letterbox":
            roi_left, roi_top, roi_width, roi_height = image_to_tensor.letterbox_roi(height, width, spec.height, spec.width)
            scale_x, scale_y = spec.width / roi_width, spec.height / roi_height
            out[row] = (scale_x, scale_y, -roi_left * scale_x, -roi_top * scale_y)
        else:
            geometry = YoloLetterbox.of(height, width, spec.height, spec.width)
            out[row] = (geometry.new_width / width, geometry.new_height / height, geometry.left, geometry.top)
    return out.astype(np.float32)
