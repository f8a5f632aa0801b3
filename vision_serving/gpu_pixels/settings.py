"""The GPU pixel path's settings: the preprocess config's parameters of the mode, their defaults, and what the DALI
pipeline takes (:class:`PixelPipelineSettings`, its inputs by name).

A preprocess spec turns the mode on with ``pixel_device = "gpu"`` (``[preprocess]`` of ``pipeline.toml``); the
configs generator (:mod:`builders.configs.pixel_variants`) then writes the GPU preprocess as ``config.pbtxt`` (a
``KIND_GPU`` instance group, these parameters) and the served CPU preprocess as each ``configs/<variant>.pbtxt``, so
a server started with ``--model-config-name`` (no GPU) serves the CPU path unchanged. Off by default: the mode has
not run on a GPU yet (docs/gpu-pixels.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import model_config

DEVICE_PARAMETER = "pixel_device"
DEVICES = ("cpu", "gpu")
# The GPU preprocess's own parameters, with their defaults (written into its config.pbtxt):
# - dali_threads: the CPU threads of each instance's DALI pipeline (nvJPEG's host work, the formats DALI decodes on
#   the CPU: the routing below sends it JPEGs alone);
# - hw_decoder_load: the share of each batch's JPEGs given to the GPU's hardware JPEG decoder where it has one
#   (DALI's own default is 0.65, for throughput with CPU threads to spare; here the CPU is what bounds the pod, and
#   the hardware decoder takes a JPEG's Huffman decoding off the CPU: every JPEG it can take goes to it).
GPU_DEFAULTS = {"dali_threads": "2", "hw_decoder_load": "1.0"}
# The GPU preprocess's instances (KIND_GPU), unless the spec says (gpu_instances, read by the generator): two, so that
# one instance's CPU work (the header checks, the hand-over) overlaps the other's GPU batch.
GPU_INSTANCES = 2
GPU_INSTANCES_KEY = "gpu_instances"
PARAMETERS = (DEVICE_PARAMETER, *GPU_DEFAULTS)

# The DALI pipeline's external sources, by name: the bytes and each sample's geometry (vision_serving.gpu_pixels.plan).
ENCODED = "encoded"
REDUCED_SIZE = "reduced_size"  # float32 [2]: (height, width) of the emulated reduced decode
REDUCED_ROI_END = "reduced_roi_end"  # float32 [2]: the decoded image's region that maps onto it (a scale of n/8 exactly)
MATRIX = "matrix"  # float32 [2, 3]: tensor -> reduced image, in DALI's pixel-corner coordinates (warp)
# region: the served anti-aliasing's box reduction (resize_reducing_gap: its size and the region of the reduced image it
# averages), then the region of that onto the tensor; float32 [2] each.
AREA_SIZE, AREA_ROI_START, AREA_ROI_END = "area_size", "area_roi_start", "area_roi_end"
ROI_START, ROI_END = "roi_start", "roi_end"
FIT_SIZE, ANCHOR = "fit_size", "anchor"  # float32 [2], int32 [2]: the fitted resize and (-top, -left) of its slice (fit_pad)
# The resize kinds and the inputs each reads.
KINDS = {"warp": (MATRIX,), "region": (AREA_SIZE, AREA_ROI_START, AREA_ROI_END, ROI_START, ROI_END), "fit_pad": (FIT_SIZE, ANCHOR)}
# The resize kinds that start from the full decode; the others from the emulated reduced decode (the drift thumbnail
# always does, as the served one samples the reduced decode). ``warp`` and ``fit_pad`` do not antialias, and from a
# 12 MP decode they would alias; ``region``'s box reduction antialiases as the served one does, and an emulated n/8
# decode before it moved a low-margin top-1 (the coins photo at 1024 and 1280 px: "bubble" for "Petri dish", which the
# served full decode keeps).
FULL_DECODE_KINDS = ("region",)
# The interpolations that antialias when they shrink (Pillow's filters); OpenCV's do not.
ANTIALIASED = ("pil_bilinear",)
INTERPOLATIONS = ("bilinear", "bicubic", "nearest", "pil_bilinear")
THUMBNAIL_SIDE = 64  # vision_serving.drift.THUMBNAIL_SIDE: the drift features' thumbnail


def device(config: model_config.ModelConfig) -> str:
    """Where a preprocess config computes its pixels: ``cpu`` (the default) or ``gpu``."""
    value = model_config.parameter(config, DEVICE_PARAMETER, "cpu")
    if value not in DEVICES:
        raise model_config.ConfigError(f"model '{config.name}': {DEVICE_PARAMETER} {value!r} is not one of {', '.join(DEVICES)}")
    return value


@dataclass(frozen=True)
class GpuSettings:
    """A GPU preprocess config's own settings."""

    threads: int
    hw_decoder_load: float

    @classmethod
    def from_config(cls, config: model_config.ModelConfig) -> GpuSettings:
        threads = model_config.int_parameter(config, "dali_threads", int(GPU_DEFAULTS["dali_threads"]))
        load = model_config.float_parameter(config, "hw_decoder_load", float(GPU_DEFAULTS["hw_decoder_load"]))
        if threads < 1 or not 0.0 <= load <= 1.0:
            raise model_config.ConfigError(f"model '{config.name}': dali_threads must be >= 1 and hw_decoder_load in [0, 1]")
        return cls(threads, load)


@dataclass(frozen=True)
class PixelPipelineSettings:
    """What the DALI graph needs of the preprocess's spec and the mode's settings, as plain values."""

    kind: str
    height: int
    width: int
    layout: str = "NCHW"
    color_order: str = "RGB"
    interpolation: str = "bilinear"
    pad_value: int = 114
    mean: tuple[float, float, float] | None = None  # a float core's (pixel - mean) / std; None: uint8 pixels
    std: tuple[float, float, float] | None = None
    max_batch_size: int = 32
    device: str = "gpu"
    device_id: int | None = 0
    threads: int = 2
    hw_decoder_load: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"the GPU pixel path has no resize kind {self.kind!r} (it has {', '.join(KINDS)})")
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(f"the GPU pixel path has no interpolation {self.interpolation!r} (it has {', '.join(INTERPOLATIONS)})")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if (self.mean is None) != (self.std is None):
            raise ValueError("mean and std come together (a float core) or not at all (uint8 pixels)")

    @property
    def inputs(self) -> tuple[str, ...]:
        """Every external source the graph reads, by name."""
        return (ENCODED, REDUCED_SIZE, REDUCED_ROI_END, *KINDS[self.kind])
