"""The DALI pipeline of the GPU pixel path: encoded JPEGs in, the core's input (and a drift thumbnail) out.

One definition for both devices (:attr:`PixelPipelineSettings.device`): ``"gpu"`` decodes with ``decoders.image`` on
DALI's ``mixed`` backend (nvJPEG; the GPU's hardware JPEG decoder takes ``hw_decoder_load`` of the batch where it
has one) and every later operator runs on the GPU, so the pixels never leave GPU memory; ``"cpu"`` is the same graph
on DALI's CPU operators (``device_id=None``), which run without a GPU: the parity tests run it here.

Per sample the graph takes the encoded bytes and the geometry the served CPU resize would use, computed by
:mod:`vision_serving.gpu_pixels.plan` (the one place of those rules; nothing here decides geometry):

1. decode, EXIF orientation applied (``adjust_orientation``, OpenCV's behaviour), in the model's channel order,
   with libjpeg's fancy chroma upsampling on both devices (``jpeg_fancy_upsampling``: the served decoder's);
2. ``reduced_size``: resized, antialiased (Lanczos-3, :data:`REDUCED_DECODE_FILTER`), to the size libjpeg-turbo's
   DCT scaling would have decoded it at (``roi_end`` makes the scale exactly n/8, as the reduced decode's);
   the drift thumbnail samples it; the ``region`` kind's resize starts from the decode itself (``FULL_DECODE_KINDS``);
3. the resize, of one of three kinds (:data:`KINDS`; the plan maps each resize mode onto one): ``warp``,
   ``warp_affine`` with the sample's ``matrix``, zero outside the photo (MediaPipe's ``stretch`` and ``letterbox``);
   ``region``, the served anti-aliasing's box reduction (``area_size`` from ``area_roi_*``, antialiased), then
   ``resize`` of its ``roi_start``..``roi_end`` region onto the tensor, antialiased for a Pillow filter only
   (``center_crop``; ``stretch`` with a Pillow filter); ``fit_pad``, ``resize`` to ``fit_size`` then a ``slice`` from ``anchor``
   padded with ``pad_value`` (Ultralytics' ``yolo_letterbox``);
4. the model's layout (``transpose`` to CHW) and, for a float core, ``crop_mirror_normalize`` with its mean and
   std; a leading axis of 1, so that one sample is one request's ``[1, ...]`` tensor.

Outputs: the pixels, the 64 x 64 bilinear thumbnail of step 2's image (what the served drift features sample), and
the decoded shape (height, width, channels), which the caller checks against the plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from nvidia.dali import fn, pipeline_def, types
from nvidia.dali.data_node import DataNode

from .settings import (
    ANCHOR,
    ANTIALIASED,
    AREA_ROI_END,
    AREA_ROI_START,
    AREA_SIZE,
    ENCODED,
    FIT_SIZE,
    FULL_DECODE_KINDS,
    MATRIX,
    REDUCED_ROI_END,
    REDUCED_SIZE,
    ROI_END,
    ROI_START,
    THUMBNAIL_SIDE,
    PixelPipelineSettings,
)

INTERPOLATIONS = {
    "bilinear": types.DALIInterpType.INTERP_LINEAR,
    "bicubic": types.DALIInterpType.INTERP_CUBIC,
    "nearest": types.DALIInterpType.INTERP_NN,
    "pil_bilinear": types.DALIInterpType.INTERP_LINEAR,  # Pillow's antialiased bilinear: DALI's linear filter, antialiased
}

# The filter that stands in for libjpeg-turbo's DCT scaling (a low-pass of the coded blocks): Lanczos-3, antialiased.
# Measured once on DALI's CPU operators against the served reduced decode, on 13 of the parity test's JPEGs
# (tests/onnx/vision_serving/test_gpu_pixels_parity.py): the face boxes' smallest IoU 0.990 with it, 0.985 with the
# cubic filter, 0.973 with the linear one.
REDUCED_DECODE_FILTER = types.DALIInterpType.INTERP_LANCZOS3


def _one(node: object) -> DataNode:
    """An operator's one output (DALI's stubs type every output as a node, a list of nodes or None)."""
    assert isinstance(node, DataNode)  # a single-output operator, no num_outputs
    return node


def _source(name: str, dtype: types.DALIDataType, ndim: int = 1) -> DataNode:
    """A named input of the pipeline, in host memory (one array per sample)."""
    return _one(fn.external_source(name=name, device="cpu", dtype=dtype, ndim=ndim))


def _resized(image: Any, settings: PixelPipelineSettings) -> Any:
    """Step 3: the resize, from the reduced image to the tensor's height x width (HWC)."""
    interpolation = INTERPOLATIONS[settings.interpolation]
    size = [float(settings.height), float(settings.width)]
    if settings.kind == "warp":
        return fn.warp_affine(
            image, matrix=_source(MATRIX, types.DALIDataType.FLOAT, ndim=2), size=size, fill_value=0.0, interp_type=interpolation
        )
    if settings.kind == "region":
        area = _one(
            fn.resize(
                image,
                size=_source(AREA_SIZE, types.DALIDataType.FLOAT),
                roi_start=_source(AREA_ROI_START, types.DALIDataType.FLOAT),
                roi_end=_source(AREA_ROI_END, types.DALIDataType.FLOAT),
                interp_type=types.DALIInterpType.INTERP_LINEAR,
                antialias=True,
            )
        )
        start, end = _source(ROI_START, types.DALIDataType.FLOAT), _source(ROI_END, types.DALIDataType.FLOAT)
        antialias = settings.interpolation in ANTIALIASED
        return fn.resize(area, size=size, roi_start=start, roi_end=end, interp_type=interpolation, antialias=antialias)
    fitted = _one(fn.resize(image, size=_source(FIT_SIZE, types.DALIDataType.FLOAT), interp_type=interpolation, antialias=False))
    return fn.slice(
        fitted,
        start=_source(ANCHOR, types.DALIDataType.INT32),
        shape=[settings.height, settings.width],
        axis_names="HW",
        out_of_bounds_policy="pad",
        fill_values=float(settings.pad_value),
    )


def _model_layout(pixels: Any, settings: PixelPipelineSettings) -> Any:
    """Step 4: HWC uint8 -> the core's layout (and its normalization for a float core), batch axis first."""
    layout = "CHW" if settings.layout == "NCHW" else "HWC"
    if settings.mean is not None and settings.std is not None:
        pixels = fn.crop_mirror_normalize(
            pixels, dtype=types.DALIDataType.FLOAT, mean=list(settings.mean), std=list(settings.std), output_layout=layout
        )
    elif layout == "CHW":
        pixels = fn.transpose(pixels, perm=[2, 0, 1])
    return fn.expand_dims(pixels, axes=[0], new_axis_names="N")


def _graph(settings: PixelPipelineSettings) -> tuple[Any, Any, Any]:
    decoder = "mixed" if settings.device == "gpu" else "cpu"
    color = types.DALIImageType.BGR if settings.color_order == "BGR" else types.DALIImageType.RGB
    encoded = _source(ENCODED, types.DALIDataType.UINT8)
    image = fn.decoders.image(
        encoded,
        device=decoder,
        output_type=color,
        adjust_orientation=True,
        jpeg_fancy_upsampling=True,
        hw_decoder_load=settings.hw_decoder_load,  # the mixed backend's (the CPU one ignores it)
        # The mixed backend ties each decoder thread to a CPU core by default: not in a pod whose stubs share its CPUs.
        affine=False,
    )
    shape = image.shape()
    reduced = _one(
        fn.resize(
            image,
            size=_source(REDUCED_SIZE, types.DALIDataType.FLOAT),
            roi_start=[0.0, 0.0],
            roi_end=_source(REDUCED_ROI_END, types.DALIDataType.FLOAT),
            interp_type=REDUCED_DECODE_FILTER,
            antialias=True,
        )
    )
    thumbnail = fn.resize(reduced, size=[float(THUMBNAIL_SIDE)] * 2, interp_type=types.DALIInterpType.INTERP_LINEAR, antialias=False)
    source = image if settings.kind in FULL_DECODE_KINDS else reduced
    return _model_layout(_resized(source, settings), settings), thumbnail, shape


def build(settings: PixelPipelineSettings) -> Any:
    """The built pipeline: ``device_id`` None on DALI's CPU operators. One batch at a time (``prefetch_queue_depth``
    1), and DALI's default executor (``exec_dynamic``), whose outputs stay valid while they are referenced: a GPU
    output handed on by DLPack is never overwritten by the next batch."""
    # device_id None: no GPU and no CUDA runtime for a pipeline of CPU operators (Pipeline's docstring).
    options: dict[str, Any] = {
        "batch_size": settings.max_batch_size,
        "num_threads": settings.threads,
        "device_id": settings.device_id if settings.device == "gpu" else None,
    }
    make = pipeline_def(**options)(_graph)
    pipeline = make(settings, prefetch_queue_depth=1, exec_dynamic=True)
    pipeline.build()
    return pipeline


@dataclass(frozen=True)
class Outputs:
    """One run's outputs: the pixels (DALI's TensorList: on the GPU for ``device`` gpu), the thumbnails
    (uint8 [N, 64, 64, 3], host) and the decoded shapes (int64 [N, 3], host)."""

    pixels: Any
    thumbnails: np.ndarray
    shapes: np.ndarray

    def sample(self, index: int) -> Any:
        """Sample ``index``'s pixels, ``[1, ...]`` (a DALI tensor: DLPack, ``__cuda_array_interface__`` on the GPU)."""
        return self.pixels[index]

    def samples(self, count: int) -> Any | None:
        """All ``count`` samples as one ``[count, ...]`` tensor (one request of several images), or None where DALI's
        output is not one contiguous buffer (``as_reshaped_tensor`` needs one; a GPU output is not made contiguous)."""
        if not self.pixels.is_dense_tensor():
            return None
        return self.pixels.as_reshaped_tensor([count, *self.pixels[0].shape()[1:]])


def _host(tensors: Any) -> np.ndarray:
    return np.asarray((tensors.as_cpu() if hasattr(tensors, "as_cpu") else tensors).as_array())


def run(pipeline: Any, feeds: Mapping[str, Sequence[np.ndarray]]) -> Outputs:
    """One batch: ``feeds`` has every input of the settings, one array per sample (DALI raises on a sample its
    decoder refuses: the whole run fails, and the caller decides what each request gets)."""
    pixels, thumbnails, shapes = pipeline.run(**{name: list(values) for name, values in feeds.items()})
    return Outputs(pixels, _host(thumbnails), _host(shapes))
