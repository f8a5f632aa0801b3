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
  (:func:`yolo_letterbox`);
- ``yolo_stretch``: Ultralytics' ``LetterBox(scale_fill=True)``, as the RT-DETR and depth predictors
  apply it: the whole image onto height x width by ``cv2.resize``, aspect ratio not kept, no padding
  (:func:`yolo_stretch`).

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

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from . import heif, model_config
from .image_codec import Decoded, ImageError, ImageLimits, MinimumSize, decode

# The spec and the resize modes live in their own modules; this one is the public face of the preprocessing.
from .preprocess_spec import (
    COLOR_ORDERS as COLOR_ORDERS,
)
from .preprocess_spec import (
    EXACT_MODES as EXACT_MODES,
)
from .preprocess_spec import (
    IMAGE_TO_TENSOR_DEFAULTS as IMAGE_TO_TENSOR_DEFAULTS,
)
from .preprocess_spec import (
    INTERPOLATIONS as INTERPOLATIONS,
)
from .preprocess_spec import (
    LAYOUTS as LAYOUTS,
)
from .preprocess_spec import (
    LIMIT_DEFAULTS as LIMIT_DEFAULTS,
)
from .preprocess_spec import (
    MAX_RESIZE_AREA_RATIO as MAX_RESIZE_AREA_RATIO,
)
from .preprocess_spec import (
    PIL_INTERPOLATIONS as PIL_INTERPOLATIONS,
)
from .preprocess_spec import (
    PIL_MODES as PIL_MODES,
)
from .preprocess_spec import (
    PIXEL_DTYPES as PIXEL_DTYPES,
)
from .preprocess_spec import (
    PIXELS_OUTPUT as PIXELS_OUTPUT,
)
from .preprocess_spec import (
    RESIZE_MODES as RESIZE_MODES,
)
from .preprocess_spec import (
    SPEC_PARAMETERS as SPEC_PARAMETERS,
)
from .preprocess_spec import (
    THREAD_DEFAULTS as THREAD_DEFAULTS,
)
from .preprocess_spec import (
    TILES_OUTPUT as TILES_OUTPUT,
)
from .preprocess_spec import (
    TRANSFORM_SIZE as TRANSFORM_SIZE,
)
from .preprocess_spec import (
    YOLO_PAD_VALUE as YOLO_PAD_VALUE,
)
from .preprocess_spec import (
    PreprocessOutputs as PreprocessOutputs,
)
from .preprocess_spec import (
    PreprocessSpec as PreprocessSpec,
)
from .preprocess_spec import (
    decode_minimum as decode_minimum,
)
from .preprocess_spec import (
    limits_from_config as limits_from_config,
)
from .preprocess_spec import (
    pixels_output as pixels_output,
)
from .resize import (
    YoloLetterbox as YoloLetterbox,
)
from .resize import (
    letterbox as letterbox,
)
from .resize import (
    pil_resize as pil_resize,
)
from .resize import (
    reduce_for_resize as reduce_for_resize,
)
from .resize import (
    resize_and_crop as resize_and_crop,
)
from .resize import (
    resized_size as resized_size,
)
from .resize import (
    source_scale as source_scale,
)
from .resize import (
    stretch as stretch,
)
from .resize import (
    tensor_transforms as tensor_transforms,
)
from .resize import (
    yolo_letterbox as yolo_letterbox,
)
from .resize import (
    yolo_stretch as yolo_stretch,
)


def configured_threads(config: model_config.ModelConfig) -> int:
    """A preprocess config's ``opencv_threads`` (:data:`THREAD_DEFAULTS` when it does not say)."""
    return model_config.int_parameter(config, "opencv_threads", int(THREAD_DEFAULTS["opencv_threads"]))


def set_threads(count: int) -> None:
    """OpenCV's thread pool size for this process (0: OpenCV's default, one per CPU), and the HEIC/AVIF decoders'."""
    cv2.setNumThreads(count if count > 0 else -1)
    heif.set_threads(count)


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


def decode_payloads(payloads: np.ndarray, limits: ImageLimits, minimum: MinimumSize | None = None) -> list[Decoded]:
    """Decode one request's BYTES tensor ([batch, 1] of encoded images) at the size the resize needs:
    pixels (RGB) and each photo's own size.

    Raises ``ImageError`` naming the first bad item; a request is answered
    whole, so one bad image fails only its own request.
    """
    return decode_each(payloads, limits, [minimum] * int(np.size(payloads)))


def decode_each(payloads: np.ndarray, limits: ImageLimits, minimums: Sequence[MinimumSize | None]) -> list[Decoded]:
    """:func:`decode_payloads` with each photo's own smallest size (None: in full)."""
    items = payloads.reshape(-1)
    decoded = []
    for index, (item, minimum) in enumerate(zip(items, minimums, strict=True)):
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
