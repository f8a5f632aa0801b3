"""What a preprocess config says about the image-to-tensor resize and the uploads it takes: :class:`PreprocessSpec`
(the resize mode, the model input's size, layout, channel order and normalization), :class:`PreprocessOutputs` (its
outputs by role), the decode limits and their defaults, and the smallest decode the resize needs
(:func:`decode_minimum`). The computations are :mod:`vision_serving.resize` and :mod:`vision_serving.preprocessing`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2

from . import image_codec, image_structure, model_config
from .image_codec import ImageLimits, MinimumSize

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
RESIZE_MODES = ("center_crop", "stretch", "letterbox", "yolo_letterbox", "yolo_stretch")
# The modes that reproduce another runtime's resize exactly (decoded at full size, no anti-aliasing).
EXACT_MODES = ("stretch", "letterbox", "yolo_letterbox", "yolo_stretch")
# Ultralytics' LetterBox padding_value.
YOLO_PAD_VALUE = 114
# Resize the whole image (then crop) up to this many times the crop's area;
# beyond, warp only the crop (bounded cost and memory for elongated images).
MAX_RESIZE_AREA_RATIO = 4.0
# The tensor transform's length: scale_x, scale_y, offset_x, offset_y.
TRANSFORM_SIZE = 4


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
        layout = model_config.parameter(config, "layout", IMAGE_TO_TENSOR_DEFAULTS["layout"])
        dims = list(model_config.tensor(config, pixels_output(config), "output").dims)[-3:]  # a tiled preprocess's, per view
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
            color_order=model_config.parameter(config, "color_order", IMAGE_TO_TENSOR_DEFAULTS["color_order"]),
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
    """The preprocess model's image output (its one FP32 or UINT8 output of rank 3), or a tiled preprocess's views
    (``TILES``, ``[T, *image]``: :mod:`vision_serving.tiling`)."""
    if any(item.name == TILES_OUTPUT and len(item.dims) == 4 for item in config.output):
        return TILES_OUTPUT
    return PreprocessOutputs.from_config(config).pixels


# What every preprocess refuses before decoding, by its config's parameters, with their defaults: the formats it
# takes, the payload's bytes and the declared pixels (decompression bombs), the longest side (OpenCV's warp limit)
# a JPEG's scans (progressive-scan decode bombs) and a PNG's chunks (image_structure's walk stays bounded).
LIMIT_DEFAULTS = {
    "accepted_formats": ",".join(("jpeg", "png", "webp", "heic", "avif")),
    "max_image_bytes": str(20 * 1024 * 1024),
    "max_image_pixels": str(50_000_000),
    "max_image_side": str(image_codec.DEFAULT_MAX_SIDE),
    "max_jpeg_scans": str(image_codec.DEFAULT_MAX_JPEG_SCANS),
    "max_png_chunks": str(image_structure.DEFAULT_MAX_PNG_CHUNKS),
}
# OpenCV's (and the HEIC/AVIF decoders') threads per instance: 1, because Triton's instances already run in parallel
# on few cores (0: OpenCV's default, one thread per CPU, which oversubscribes them).
THREAD_DEFAULTS = {"opencv_threads": "1"}
# The image-to-tensor resize's own parameters (PreprocessSpec.from_config reads them).
SPEC_PARAMETERS = (
    "layout",
    "color_order",
    "resize",
    "resize_shorter_side",
    "interpolation",
    "mean",
    "std",
    "scale",
    "pad_value",
    "decode_oversampling",
    "resize_reducing_gap",
)
# The output through which the image-to-tensor resize hands the core its input.
PIXELS_OUTPUT = "PIXELS"
# A tiled preprocess's views, each the image-to-tensor resize's (vision_serving.tiling).
TILES_OUTPUT = "TILES"
# The image-to-tensor resize's layout and channel order when a config does not say.
IMAGE_TO_TENSOR_DEFAULTS = {"layout": "NCHW", "color_order": "RGB"}


def limits_from_config(config: model_config.ModelConfig) -> ImageLimits:
    def given(key: str) -> str:
        return model_config.parameter(config, key, LIMIT_DEFAULTS[key])

    return ImageLimits(
        max_bytes=model_config.int_parameter(config, "max_image_bytes", int(LIMIT_DEFAULTS["max_image_bytes"])),
        max_pixels=model_config.int_parameter(config, "max_image_pixels", int(LIMIT_DEFAULTS["max_image_pixels"])),
        accepted_formats=tuple(given("accepted_formats").split(",")),
        max_side=model_config.int_parameter(config, "max_image_side", int(LIMIT_DEFAULTS["max_image_side"])),
        max_jpeg_scans=model_config.int_parameter(config, "max_jpeg_scans", int(LIMIT_DEFAULTS["max_jpeg_scans"])),
        max_png_chunks=model_config.int_parameter(config, "max_png_chunks", int(LIMIT_DEFAULTS["max_png_chunks"])),
    )


def decode_minimum(spec: PreprocessSpec) -> MinimumSize | None:
    """The smallest decoded image the spec's resize needs, ``decode_oversampling`` (config parameter,
    default 2; 0 turns reduced decoding off: every photo decoded at its full size) times what the resize
    keeps of it, so that the resize is still a downscale. JPEGs are decoded at the smallest DCT scale n/8
    that keeps it (:func:`vision_serving.image_codec.decode`):

    - ``center_crop``: a shorter side of at least that many times ``resize_shorter_side`` (web-size
      photos decode at full size; a 12 MP phone photo for a 256-pixel resize at 1/4);
    - ``stretch``, ``yolo_stretch``: each side at least that many times the tensor's;
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
    if spec.resize in ("stretch", "yolo_stretch"):
        return MinimumSize(width=width, height=height)
    return MinimumSize(fit_width=width, fit_height=height)
