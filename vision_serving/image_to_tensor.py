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

The image may be a reduced decode of the photo (a JPEG at a DCT scale ``n/8``): the region is then
still given in the photo's pixels and :func:`warp_roi` samples the reduced image at the same points
of the photo (``source_scale``), each a box average of the photo's pixels instead of one of them.
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


def reduced_to_photo(scale_x: float, scale_y: float) -> npt.NDArray[np.float64]:
    """3x3 matrix, pixels of a decode reduced by ``scale_x`` x ``scale_y`` -> the photo's pixels (OpenCV's
    pixel-centre coordinates): reduced pixel ``i`` averages photo pixels ``[i / s, (i + 1) / s)``, whose
    centre is photo coordinate ``(i + 0.5) / s - 0.5``."""
    return np.array(
        [[1.0 / scale_x, 0.0, 0.5 / scale_x - 0.5], [0.0, 1.0 / scale_y, 0.5 / scale_y - 0.5], [0.0, 0.0, 1.0]], dtype=np.float64
    )


def warp_roi(
    image: np.ndarray,
    roi: tuple[float, float, float, float],
    tensor_width: int,
    tensor_height: int,
    interpolation: int = cv2.INTER_LINEAR,
    out: np.ndarray | None = None,
    source_scale: tuple[float, float] = (1.0, 1.0),
) -> np.ndarray:
    """The ``roi`` = (left, top, width, height) of the photo (its pixels, may extend past it) -> an
    ``tensor_height x tensor_width`` image of the same dtype and channels; outside the photo is 0.

    ``image`` is the photo, or a decode of it reduced by ``source_scale`` (x, y): the same points of
    the photo are sampled. ``out`` (C-contiguous, that shape and dtype) receives the result when given.
    """
    matrix = roi_matrix(*roi, tensor_width, tensor_height)
    border = (0,) * (image.shape[2] if image.ndim == 3 else 1)
    if source_scale == (1.0, 1.0):
        warped = cv2.warpPerspective(
            image, matrix, (tensor_width, tensor_height), dst=out, flags=interpolation, borderMode=cv2.BORDER_CONSTANT, borderValue=border
        )
    else:
        warped = _warp_reduced(image, matrix, (tensor_width, tensor_height), interpolation, source_scale, out)
    if out is not None and warped is not out:  # OpenCV allocated anyway (should not happen)
        out[...] = warped
        return out
    return warped


def _warp_reduced(
    image: np.ndarray,
    matrix: npt.NDArray[np.float64],
    tensor_size: tuple[int, int],
    interpolation: int,
    source_scale: tuple[float, float],
    out: np.ndarray | None,
) -> np.ndarray:
    """:func:`warp_roi` of a reduced decode: the photo's points sampled in the reduced image (edge pixels
    replicated), then weighted as the photo's own bilinear samples weigh the zero border (a sample within
    one photo pixel of the photo's edge blends with it), so the image's edge against the bars stays where
    the full-size warp puts it. The region is axis-aligned: x depends on the tensor column only, y on the row."""
    height, width = image.shape[:2]
    photo_width, photo_height = width / source_scale[0], height / source_scale[1]
    warped = cv2.warpPerspective(
        image, matrix @ reduced_to_photo(*source_scale), tensor_size, flags=interpolation, borderMode=cv2.BORDER_REPLICATE
    )
    inverse = np.linalg.inv(matrix)
    columns, rows = np.arange(tensor_size[0], dtype=np.float64), np.arange(tensor_size[1], dtype=np.float64)
    photo_x = (inverse[0, 0] * columns + inverse[0, 2]) / (inverse[2, 0] * columns + inverse[2, 2])
    photo_y = (inverse[1, 1] * rows + inverse[1, 2]) / (inverse[2, 1] * rows + inverse[2, 2])
    weight_x = np.clip(np.minimum(photo_x + 1.0, photo_width - photo_x), 0.0, 1.0)
    weight_y = np.clip(np.minimum(photo_y + 1.0, photo_height - photo_y), 0.0, 1.0)
    result = warped if out is None else out
    if out is not None:
        out[...] = warped
    # Only the rows and columns within one photo pixel of its edge (or past it: the bars) are weighted.
    edge_rows, edge_columns = weight_y < 1.0, weight_x < 1.0
    if edge_rows.any():
        weights = weight_y[edge_rows, None] * weight_x[None, :]
        result[edge_rows] = _weighted(warped[edge_rows], weights)
    if edge_columns.any():
        inner = ~edge_rows
        weights = np.broadcast_to(weight_x[None, edge_columns], (int(inner.sum()), int(edge_columns.sum())))
        result[np.ix_(inner, edge_columns)] = _weighted(warped[np.ix_(inner, edge_columns)], weights)
    return result


def _weighted(pixels: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Pixels (rows x columns [x channels]) times per-pixel weights in [0, 1], rounded to their dtype."""
    shape = weights.shape + (1,) * (pixels.ndim - 2)
    return np.rint(pixels * weights.reshape(shape).astype(np.float32)).astype(pixels.dtype)


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
