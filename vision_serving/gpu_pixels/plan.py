"""Per upload, what the GPU pixel path does with it, in plain Python (no DALI here): whether the GPU decoder takes
it (:func:`cpu_reason`), and the arguments of the DALI pipeline that reproduce the served resize (:func:`sample_plan`).

**Routing.** The upload has passed the served checks (:func:`vision_serving.image_codec.check`: limits, magic bytes,
the structure walk, the declared size; a request failing one fails alone, as in the CPU mode). DALI's
``decoders.image`` decodes JPEG (and JPEG 2000) on the GPU and every other format on its CPU threads; nvJPEG decodes
baseline, extended and progressive Huffman JPEGs of 8-bit samples, grey or YCbCr. Those go to the GPU; everything
else (PNG, WebP, HEIC, AVIF, and JPEGs of arithmetic or lossless coding, 12-bit samples, or four components:
CMYK/YCCK, which the served decoder converts with OpenCV) takes the served CPU decode and resize, exactly as in the
CPU mode. So the pixels of one upload never depend on which decoder DALI would have picked.

**Geometry.** Each rule is the served code's (:mod:`vision_serving.resize`, :mod:`vision_serving.image_to_tensor`),
called here, not restated:

- the decode: the served decoder reduces a JPEG by libjpeg-turbo's DCT scaling to the smallest n/8 that keeps the
  resize's minimum (:func:`vision_serving.preprocess_spec.decode_minimum`); nvJPEG decodes at full size, so the
  pipeline first resizes the decode, antialiased, to that n/8 size (:func:`reduced_eighths`), the same box-like
  averages of the photo's pixels; the resize of the ``region`` kind starts from the full decode instead
  (:data:`vision_serving.gpu_pixels.settings.FULL_DECODE_KINDS`), and the drift thumbnail always from the reduced one;
- ``stretch``, ``letterbox``: MediaPipe's region matrix (``roi_matrix``) on the reduced image
  (``reduced_to_photo``), inverted, in DALI's coordinates (:func:`dali_matrix`);
- ``center_crop``: the shorter side scaled and the crop cut as the served code computes them on the image it is given
  (the reduced decode), as the crop's region of it; ``stretch`` with a Pillow filter: the whole image;
- ``yolo_letterbox``: Ultralytics' fitted size and padding (:class:`vision_serving.resize.YoloLetterbox`) of the photo;
  ``yolo_stretch``: the tensor's size, no padding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .. import image_codec, image_structure, image_to_tensor, preprocessing, resize
from ..image_codec import Checked, MinimumSize
from ..preprocess_spec import PIL_INTERPOLATIONS, PreprocessSpec
from . import settings as names
from .settings import GpuSettings, PixelPipelineSettings

# nvJPEG's codings (frame markers): baseline, extended sequential and progressive, Huffman-coded.
GPU_FRAMES = {0xC0: "baseline", 0xC1: "extended sequential", 0xC2: "progressive"}
GPU_COMPONENTS = (1, 3)
TRANSPOSING_ORIENTATIONS = (5, 6, 7, 8)


def cpu_reason(data: bytes, checked: Checked) -> str | None:
    """Why the GPU decoder does not take this checked upload (the served CPU decode does), or None: it does."""
    if checked.format != "jpeg":
        return f"{checked.format.upper()} is decoded on the CPU"
    try:
        frame = image_structure.jpeg_frame_header(data)
    except image_structure.StructureError as error:  # the structure walk passed, so this does not happen; the CPU path says why
        return str(error)
    if frame.marker not in GPU_FRAMES:
        return f"a JPEG of {image_structure.marker_name(frame.marker)} coding is decoded on the CPU"
    if frame.precision != 8:
        return f"a JPEG of {frame.precision}-bit samples is decoded on the CPU"
    if frame.components not in GPU_COMPONENTS:
        return f"a JPEG of {frame.components} components (CMYK or YCCK) is decoded on the CPU"
    return None


def reduced_eighths(checked: Checked, minimum: MinimumSize | None, transposed: bool) -> int:
    """The n of the DCT scale n/8 the served decoder decodes this JPEG at (8: full size): the smallest whose
    ``ceil(side * n / 8)`` keeps the stored image's minimum (libjpeg-turbo's scaled size, TJSCALED)."""
    if minimum is None:
        return 8
    min_width, min_height = image_codec.stored_minimum(checked, minimum, transposed)
    for eighths in range(1, 8):
        if -(-checked.width * eighths // 8) >= min_width and -(-checked.height * eighths // 8) >= min_height:
            return eighths
    return 8


def dali_matrix(tensor_to_source: npt.NDArray[np.float64]) -> np.ndarray:
    """A 3x3 affine map, tensor pixel -> source pixel in OpenCV's pixel-centre coordinates, as DALI's ``warp_affine``
    ``matrix``, 2 x 3 (destination to source, ``[0, 0]`` the first pixel's corner): centres move by half a pixel."""
    affine = tensor_to_source[:2] / tensor_to_source[2, 2]
    linear, offset = affine[:, :2], affine[:, 2]
    corner = offset + 0.5 - linear @ np.array([0.5, 0.5])
    return np.concatenate([linear, corner[:, None]], axis=1).astype(np.float32)


@dataclass(frozen=True)
class SamplePlan:
    """One upload for the DALI pipeline: its bytes, the photo's displayed size, the decoded shape DALI must report
    (height, width: the photo, EXIF applied) and the geometry inputs by name (:data:`settings.KINDS`)."""

    encoded: np.ndarray
    height: int
    width: int
    feeds: dict[str, np.ndarray]

    @property
    def decoded(self) -> tuple[int, int]:
        return self.height, self.width


def kind(spec: PreprocessSpec) -> str:
    """The DALI pipeline's resize kind for the spec's resize mode."""
    if spec.resize in ("yolo_letterbox", "yolo_stretch"):
        return "fit_pad"
    if spec.resize == "center_crop" or spec.interpolation in PIL_INTERPOLATIONS:
        return "region"
    return "warp"


def _f32(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def _region(spec: PreprocessSpec, image: tuple[int, int]) -> dict[str, np.ndarray]:
    """``region``'s inputs for the (reduced) decode of ``image`` = (height, width): the served center crop of the image
    it is given, after its box reduction (:func:`vision_serving.resize.reduce_for_resize`); a Pillow ``stretch``: the
    whole image, no reduction."""
    height, width = image
    whole = {names.AREA_SIZE: _f32(height, width), names.AREA_ROI_START: _f32(0.0, 0.0), names.AREA_ROI_END: _f32(height, width)}
    if spec.resize != "center_crop":
        return {**whole, names.ROI_START: _f32(0.0, 0.0), names.ROI_END: _f32(height, width)}
    new_width, new_height = resize.resized_size(width, height, spec.resize_shorter_side)
    gap = spec.resize_reducing_gap
    factor = int(min(width / new_width, height / new_height) / gap) if gap > 0 and spec.interpolation not in PIL_INTERPOLATIONS else 0
    area_height, area_width = height, width
    if factor >= 2:  # reduce_for_resize: the rows and columns that fill whole boxes, box-averaged
        crop_height, crop_width = height - height % factor, width - width % factor
        top, left = (height - crop_height) // 2, (width - crop_width) // 2
        area_height, area_width = crop_height // factor, crop_width // factor
        whole = {
            names.AREA_SIZE: _f32(area_height, area_width),
            names.AREA_ROI_START: _f32(top, left),
            names.AREA_ROI_END: _f32(top + crop_height, left + crop_width),
        }
    left, top = resize.crop_origin(new_width, new_height, spec.width, spec.height)
    x, y = area_width / new_width, area_height / new_height
    return {**whole, names.ROI_START: _f32(top * y, left * x), names.ROI_END: _f32((top + spec.height) * y, (left + spec.width) * x)}


def _geometry(spec: PreprocessSpec, height: int, width: int, reduced: tuple[int, int], scale: float) -> dict[str, np.ndarray]:
    """The resize kind's inputs for a photo of ``height`` x ``width`` whose reduced decode is ``reduced`` (at ``scale``)."""
    chosen = kind(spec)
    if chosen == "fit_pad" and spec.resize == "yolo_stretch":  # the whole photo resized onto the tensor, nothing padded
        return {names.FIT_SIZE: _f32(spec.height, spec.width), names.ANCHOR: np.zeros(2, dtype=np.int32)}
    if chosen == "fit_pad":
        fit = resize.YoloLetterbox.of(height, width, spec.height, spec.width)
        return {names.FIT_SIZE: _f32(fit.new_height, fit.new_width), names.ANCHOR: np.array([-fit.top, -fit.left], dtype=np.int32)}
    if chosen == "region":
        return _region(spec, reduced)
    roi = (
        (0.0, 0.0, float(width), float(height))
        if spec.resize == "stretch"
        else image_to_tensor.letterbox_roi(height, width, spec.height, spec.width)
    )
    forward = image_to_tensor.roi_matrix(*roi, spec.width, spec.height)
    if scale != 1.0:
        forward = forward @ image_to_tensor.reduced_to_photo(scale, scale)
    return {names.MATRIX: dali_matrix(np.linalg.inv(forward))}


def sample_plan(data: bytes, checked: Checked, spec: PreprocessSpec, minimum: MinimumSize | None) -> SamplePlan:
    """The DALI pipeline's inputs for one upload the GPU decoder takes (:func:`cpu_reason` is None)."""
    transposed = image_codec.jpeg_orientation(data) in TRANSPOSING_ORIENTATIONS
    height, width = (checked.width, checked.height) if transposed else (checked.height, checked.width)
    eighths = reduced_eighths(checked, minimum, transposed)
    scale = eighths / 8.0
    reduced = (-(-height * eighths // 8), -(-width * eighths // 8))
    resized_from, from_scale = ((height, width), 1.0) if kind(spec) in names.FULL_DECODE_KINDS else (reduced, scale)
    feeds = {
        names.REDUCED_SIZE: _f32(*reduced),
        names.REDUCED_ROI_END: _f32(reduced[0] / scale, reduced[1] / scale),
        **_geometry(spec, height, width, resized_from, from_scale),
    }
    return SamplePlan(np.frombuffer(data[: checked.end], dtype=np.uint8), height, width, feeds)


def pipeline_settings(
    spec: PreprocessSpec, gpu: GpuSettings, max_batch_size: int, device: str = "gpu", device_id: int | None = 0
) -> PixelPipelineSettings:
    """The DALI pipeline of a preprocess spec (``device`` cpu: DALI's CPU operators, the parity tests)."""
    mean, std = preprocessing.normalization_constants(spec) if spec.pixel_dtype == "float32" else (None, None)
    return PixelPipelineSettings(
        kind=kind(spec),
        height=spec.height,
        width=spec.width,
        layout=spec.layout,
        color_order=spec.color_order,
        interpolation=spec.interpolation,
        pad_value=spec.pad_value,
        mean=None if mean is None else (float(mean[0]), float(mean[1]), float(mean[2])),
        std=None if std is None else (float(std[0]), float(std[1]), float(std[2])),
        max_batch_size=max_batch_size,
        device=device,
        device_id=device_id,
        threads=gpu.threads,
        hw_decoder_load=gpu.hw_decoder_load,
    )


def feeds(plans: list[SamplePlan], inputs: tuple[str, ...]) -> dict[str, list[np.ndarray]]:
    """The pipeline's inputs for a batch of planned uploads, by name."""
    batch = {name: [plan.feeds[name] for plan in plans] for name in inputs if name != names.ENCODED}
    return {names.ENCODED: [plan.encoded for plan in plans], **batch}
