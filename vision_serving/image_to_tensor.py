"""MediaPipe's ImageToTensorCalculator warp (CPU): a region of an image onto the tensor grid.

The one implementation of the warp that MediaPipe's graphs use to prepare a
model input, shared by the ``stretch`` and ``letterbox`` resize modes of
:mod:`vision_serving.preprocessing`:

- ``stretch`` (``keep_aspect_ratio: false``): the region is the whole image;
- ``letterbox`` (``keep_aspect_ratio: true``): the region is the image padded
  along one axis to the tensor's aspect ratio, centred (:func:`letterbox_roi`;
  the padding samples outside the image, i.e. zero pixels).

``mediapipe/calculators/tensor/image_to_tensor_converter_opencv.cc`` maps the
region's corners (``cv::boxPoints`` of the rotated rect, float32: bottom-left,
top-left, top-right, bottom-right; rotation 0 here) onto the tensor's corners
``(0,H) (0,0) (W,0) (W,H)`` with ``cv::getPerspectiveTransform`` and samples
with ``cv::warpPerspective`` (``cv::INTER_LINEAR``, ``cv::BORDER_CONSTANT``
zero): corner-aligned, tensor pixel ``x`` samples the source at ``left + x *
width / W``, unlike ``cv2.resize``'s half-pixel centres, and without
antialiasing. The value range (``convertTo``) is left to the caller.
"""

from __future__ import annotations

import cv2
import numpy as np
import numpy.typing as npt


def roi_matrix(left: float, top: float, width: float, height: float, tensor_width: int, tensor_height: int) -> npt.NDArray[np.float64]:
    """3x3 perspective matrix, image pixels -> tensor pixels, built exactly as MediaPipe builds it.

    The ROI corners are float32 (``cv::Point2f``), as are the tensor's.
    """
    left32, top32 = np.float32(left), np.float32(top)
    right32, bottom32 = np.float32(left32 + np.float32(width)), np.float32(top32 + np.float32(height))
    source = np.array([[left32, bottom32], [left32, top32], [right32, top32], [right32, bottom32]], dtype=np.float32)
    w, h = float(tensor_width), float(tensor_height)
    target = np.array([[0.0, h], [0.0, 0.0], [w, 0.0], [w, h]], dtype=np.float32)
    return np.asarray(cv2.getPerspectiveTransform(source, target), dtype=np.float64)


def warp_roi(
    image: np.ndarray,
    roi: tuple[float, float, float, float],
    tensor_width: int,
    tensor_height: int,
    interpolation: int = cv2.INTER_LINEAR,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The ``roi`` = (left, top, width, height) of ``image`` (pixels, may extend past it) -> an
    ``tensor_height x tensor_width`` image of the same dtype and channels; outside the image is 0.

    ``out`` (C-contiguous, that shape and dtype) receives the result when given.
    """
    matrix = roi_matrix(*roi, tensor_width, tensor_height)
    border = (0,) * (image.shape[2] if image.ndim == 3 else 1)
    warped = cv2.warpPerspective(
        image,
        matrix,
        (tensor_width, tensor_height),
        dst=out,
        flags=interpolation,
        borderMode=cv2.BORDER_CONSTANT,
        borderValue=border,
    )
    if out is not None and warped is not out:  # OpenCV allocated anyway (should not happen)
        out[...] = warped
        return out
    return warped


def full_image_roi(image: np.ndarray) -> tuple[float, float, float, float]:
    """The whole image as the region: ``stretch`` (keep_aspect_ratio false)."""
    height, width = image.shape[:2]
    return 0.0, 0.0, float(width), float(height)


def letterbox_roi(height: float, width: float, tensor_height: int, tensor_width: int) -> tuple[float, float, float, float]:
    """The padded region (left, top, width, height) of a ``height x width`` image for a
    ``tensor_height x tensor_width`` tensor, as MediaPipe computes it in float32
    (``GetRoi`` + ``PadRoi`` with keep_aspect_ratio, image_to_tensor_utils.cc): centred on the
    image, its size grown along one axis to the tensor's aspect ratio."""
    h, w = np.float32(height), np.float32(width)
    if not (h > 0 and w > 0 and tensor_height > 0 and tensor_width > 0):
        raise ValueError(f"sizes must be positive, got image {height}x{width}, tensor {tensor_height}x{tensor_width}")
    tensor_aspect = np.float32(tensor_height) / np.float32(tensor_width)
    if tensor_aspect > h / w:  # pad vertically
        roi_w, roi_h = w, np.float32(w * tensor_aspect)
    else:
        roi_w, roi_h = np.float32(h / tensor_aspect), h
    # GetRoi centres the region on the image: centre = size / 2.
    left = np.float32(np.float32(0.5) * w - np.float32(0.5) * roi_w)
    top = np.float32(np.float32(0.5) * h - np.float32(0.5) * roi_h)
    return float(left), float(top), float(roi_w), float(roi_h)
