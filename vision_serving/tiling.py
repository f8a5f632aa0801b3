"""Tiled inference (sliced, as SAHI does): each photo cut into overlapping tiles, each tile answered as a photo of its
own by the core, the answers mapped to the photo and merged (:mod:`vision_serving.tile_merge`).

**Where it is set.** A pipeline's spec ``[tiling]`` table (:func:`config_parameters` checks it) makes the pipeline
tiled: its preprocess cuts tiles (the preprocessor ``tiles`` of its task) and its postprocess sends them to the core by
BLS, in batches of the core's ``max_batch_size`` (the tiles of every photo of the postprocess's batch together), so
the ensemble has no core step. Both Python steps state the settings as config parameters (:data:`DEFAULTS`, in
:data:`PARAMETERS`' names), and both read a request's optional ``TILING`` input (BYTES ``[1]`` per image, JSON: see
:meth:`Tiling.with_request`), which turns tiling on or off for that photo and sets its parameters.

**The settings** (the spec's keys, and a request's; the defaults, and SAHI 0.12.8's ``get_sliced_prediction``'s):

- ``enabled`` (true): a photo not tiled is the untiled pipeline's answer exactly (decoded, resized and answered as
  the same pipeline without ``[tiling]`` would);
- ``tile_size`` (the model's input, height x width; SAHI: 512 x 512): each tile's size in the photo's pixels, an
  integer or ``[height, width]``. At the model's input a tile reaches the model unresized, an object keeping its
  pixels; a larger tile is shrunk into it (the preprocess's resize, e.g. Ultralytics' letterbox);
- ``overlap`` (0.2, SAHI's): the fraction of a tile shared with its neighbour, on both axes, ``[0, 1)``;
- ``full_view`` (true, SAHI's ``perform_standard_pred``): the whole photo resized as the untiled pipeline does it, one
  more view, for the objects larger than a tile; added only when the photo takes more than one tile, as SAHI does;
- ``merge`` (``greedy_nmm``, SAHI's ``GREEDYNMM``; or ``nms``), ``match`` (``ios``, intersection over the smaller box;
  or ``iou``), ``merge_threshold`` (0.5), ``class_agnostic`` (false): how the tiles' detections merge;
- ``max_tiles`` (64; the spec's only: a request cannot raise it): the most views one photo may take. A photo that
  needs more is refused with INVALID_ARG naming the views it needs and the limit; a 12 MP photo (4032 x 3024) takes 48
  tiles of 640 px at overlap 0.2, and the full view.

**The tiles** follow SAHI's ``get_slice_bboxes`` exactly (:func:`slice_boxes`): rows and columns every
``tile - int(overlap x tile)`` pixels from the top-left, the last of each shifted back to end at the photo's edge; a
photo smaller than a tile is one tile, the photo itself. A photo is decoded at its full size once; each tile is a
view of it, resized into the model's input by the pipeline's own image-to-tensor resize
(:func:`vision_serving.preprocessing.resize_and_crop`), with its own tensor transform.

**What the preprocess hands the postprocess**, per photo (padded to the request's largest count of views, rows past
a photo's count zero): ``TILES`` ``[T, *core input]``, ``TILE_BOXES`` INT32 ``[T, 4]`` (each view's x0, y0, x1, y1 in
the photo's pixels), ``TILE_TRANSFORMS`` FP32 ``[T, 4]`` (each view's tensor transform, from its own pixels), and the
photo's ``IMAGE_SIZE``.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from . import model_config, preprocessing
from .image_codec import Decoded, MinimumSize
from .model_config import ConfigError, ModelConfig

# The preprocess's outputs (and the postprocess's inputs) of a tiled pipeline.
TILES = preprocessing.TILES_OUTPUT
TILE_BOXES = "TILE_BOXES"
TILE_TRANSFORMS = "TILE_TRANSFORMS"
IMAGE_SIZE = "IMAGE_SIZE"
# The request's optional input (BYTES [1] per image: JSON), read by both Python steps.
REQUEST_INPUT = "TILING"
MERGES = ("greedy_nmm", "nms")
MATCHES = ("ios", "iou")
# The spec's [tiling] keys -> the config parameters both Python steps state, with their defaults ("input": the model's
# input size). A request's TILING sets the same keys but max_tiles.
PARAMETERS = {
    "enabled": "tiling",
    "tile_size": "tile_size",
    "overlap": "tile_overlap",
    "full_view": "tile_full_view",
    "merge": "tile_merge",
    "match": "tile_match",
    "merge_threshold": "tile_merge_threshold",
    "class_agnostic": "tile_class_agnostic",
    "max_tiles": "max_tiles",
}
DEFAULTS = {
    "tiling": "true",
    "tile_size": "input",
    "tile_overlap": "0.2",
    "tile_full_view": "true",
    "tile_merge": "greedy_nmm",
    "tile_match": "ios",
    "tile_merge_threshold": "0.5",
    "tile_class_agnostic": "false",
    "max_tiles": "64",
}
REQUEST_KEYS = tuple(key for key in PARAMETERS if key != "max_tiles")


@dataclass(frozen=True)
class Tiling:
    """One photo's tiling: the settings of the module docstring (``tile_size`` None: the model's input)."""

    enabled: bool = True
    tile_size: tuple[int, int] | None = None
    overlap: float = 0.2
    full_view: bool = True
    merge: str = "greedy_nmm"
    match: str = "ios"
    merge_threshold: float = 0.5
    class_agnostic: bool = False
    max_tiles: int = 64

    def __post_init__(self) -> None:
        if self.tile_size is not None and (len(self.tile_size) != 2 or min(self.tile_size) < 1):
            raise ValueError(f"tile_size must be a positive size, got {self.tile_size}")
        if not 0.0 <= self.overlap < 1.0:
            raise ValueError(f"overlap must be in [0, 1), got {self.overlap}")
        if self.merge not in MERGES:
            raise ValueError(f"merge must be one of {', '.join(MERGES)}, got {self.merge!r}")
        if self.match not in MATCHES:
            raise ValueError(f"match must be one of {', '.join(MATCHES)}, got {self.match!r}")
        if not 0.0 <= self.merge_threshold <= 1.0:
            raise ValueError(f"merge_threshold must be in [0, 1], got {self.merge_threshold}")
        if self.max_tiles < 1:
            raise ValueError(f"max_tiles must be at least 1, got {self.max_tiles}")

    @classmethod
    def from_config(cls, config: ModelConfig) -> Tiling:
        """The settings a Python step's config states (``ConfigError`` naming the model and the parameter)."""
        values = {key: model_config.parameter(config, name, DEFAULTS[name]) for key, name in PARAMETERS.items()}
        try:
            return cls(**{key: _parsed(key, text) for key, text in values.items()})
        except ValueError as error:
            raise ConfigError(f"model '{config.name}': tiling: {error}") from None

    def with_request(self, value: Any) -> Tiling:
        """These settings overridden by one image's ``TILING`` input: a JSON object of some of :data:`REQUEST_KEYS`
        (``{"tile_size": 512, "overlap": 0.25}``, ``{"enabled": false}``), or ``true``/``false`` alone; empty: as
        they are. ``ValueError`` names what is wrong."""
        text = value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
        if not text.strip():
            return self
        try:
            given = json.loads(text)
        except json.JSONDecodeError:
            raise ValueError(
                f"{REQUEST_INPUT} must be JSON (an object of {', '.join(REQUEST_KEYS)}, or true/false), got {text[:80]!r}"
            ) from None
        if isinstance(given, bool):
            given = {"enabled": given}
        if not isinstance(given, dict):
            raise ValueError(f"{REQUEST_INPUT} must be a JSON object of {', '.join(REQUEST_KEYS)} (or true/false), got {text[:80]!r}")
        unknown = sorted(set(given) - set(REQUEST_KEYS))
        if unknown:
            raise ValueError(f"{REQUEST_INPUT}: unknown key(s) {', '.join(unknown)}; a request may set {', '.join(REQUEST_KEYS)}")
        try:
            return replace(self, **{key: _value(key, item) for key, item in given.items()})
        except (ValueError, TypeError) as error:
            raise ValueError(f"{REQUEST_INPUT}: {error}") from None

    def size(self, input_size: tuple[int, int]) -> tuple[int, int]:
        """The tile's (height, width) in the photo's pixels: its own, or the model's ``input_size``."""
        return self.tile_size if self.tile_size is not None else input_size


def _parsed(key: str, text: str) -> Any:
    """A config parameter's text as the setting ``key`` (``ValueError`` naming the key)."""
    text = text.strip()
    if key == "tile_size":
        if text == "input":
            return None
        parts = text.split(",")
        if len(parts) not in (1, 2) or not all(part.strip().isdigit() for part in parts):
            raise ValueError(f"tile_size must be 'input', N or H,W, got {text!r}")
        sizes = [int(part) for part in parts]
        return (sizes[0], sizes[-1])
    if key in ("enabled", "full_view", "class_agnostic"):
        if text not in ("true", "false"):
            raise ValueError(f"{key} must be true or false, got {text!r}")
        return text == "true"
    if key == "max_tiles":
        if not text.isdigit():
            raise ValueError(f"max_tiles must be a positive integer, got {text!r}")
        return int(text)
    if key in ("merge", "match"):
        return text
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{key} must be a number, got {text!r}") from None


def _value(key: str, value: Any) -> Any:
    """A spec's or a request's value as the setting ``key`` (``ValueError`` naming the key)."""
    if key == "tile_size":
        sizes = value if isinstance(value, list) else [value]
        if len(sizes) not in (1, 2) or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in sizes):
            raise ValueError(f"tile_size must be a positive integer or [height, width], got {value!r}")
        return (int(sizes[0]), int(sizes[-1]))
    if key in ("enabled", "full_view", "class_agnostic"):
        if not isinstance(value, bool):
            raise ValueError(f"{key} must be true or false, got {value!r}")
        return value
    if key == "max_tiles":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"max_tiles must be a positive integer, got {value!r}")
        return value
    if key in ("merge", "match"):
        if not isinstance(value, str):
            raise ValueError(f"{key} must be a string, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{key} must be a number, got {value!r}")
    return float(value)


def config_parameters(table: Mapping[str, Any]) -> dict[str, str]:
    """A spec's ``[tiling]`` table -> the config parameters of both Python steps (:data:`DEFAULTS` where it does not
    say); ``ValueError`` naming a bad key."""
    unknown = sorted(set(table) - set(PARAMETERS))
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)}; expected some of {', '.join(PARAMETERS)}")
    settings = Tiling(**{key: _value(key, value) for key, value in table.items()})
    parameters = dict(DEFAULTS)
    for key, name in PARAMETERS.items():
        value = getattr(settings, key)
        if key == "tile_size":
            parameters[name] = "input" if value is None else f"{value[0]},{value[1]}"
        elif isinstance(value, bool):
            parameters[name] = "true" if value else "false"
        else:
            parameters[name] = str(value)
    return parameters


def is_tiled(config: ModelConfig) -> bool:
    """Whether a Python step's config belongs to a tiled pipeline (it states the ``tiling`` parameter)."""
    return PARAMETERS["enabled"] in config.parameters


def request_settings(base: Tiling, values: np.ndarray | None, count: int) -> list[Tiling]:
    """Each of a request's ``count`` images' settings: ``base`` overridden by its ``TILING`` input (``[count, 1]``, or
    None: ``base`` for each)."""
    if values is None:
        return [base] * count
    flat = np.asarray(values, dtype=object).reshape(-1)
    if flat.shape != (count,):
        raise ValueError(f"{REQUEST_INPUT} must have one value per image ({count}), got {flat.size}")
    return [base.with_request(value) for value in flat]


# --------------------------------------------------------------------------- the tiles


def slice_boxes(height: int, width: int, tile_height: int, tile_width: int, overlap: float) -> list[tuple[int, int, int, int]]:
    """The tiles ``(x0, y0, x1, y1)`` of a photo, as SAHI 0.12.8's ``get_slice_bboxes`` lays them (row by row)."""
    y_overlap, x_overlap = int(overlap * tile_height), int(overlap * tile_width)
    boxes = []
    y_min = y_max = 0
    while y_max < height:
        x_min = x_max = 0
        y_max = y_min + tile_height
        while x_max < width:
            x_max = x_min + tile_width
            if y_max > height or x_max > width:
                x_max, y_max = min(width, x_max), min(height, y_max)
                x_min, y_min = max(0, x_max - tile_width), max(0, y_max - tile_height)
            boxes.append((x_min, y_min, x_max, y_max))
            x_min = x_max - x_overlap
        y_min = y_max - y_overlap
    return boxes


def views(height: int, width: int, tiling: Tiling, input_size: tuple[int, int]) -> np.ndarray:
    """``[T, 4]`` int32: the views of a ``height`` x ``width`` photo, each (x0, y0, x1, y1) in its pixels: its tiles
    then the full view (:func:`slice_boxes`, the module docstring), or the photo alone when tiling is off.
    ``ValueError`` when they are more than ``max_tiles``."""
    if not tiling.enabled:
        return np.array([(0, 0, width, height)], np.int32)
    tile_height, tile_width = tiling.size(input_size)
    boxes = slice_boxes(height, width, tile_height, tile_width, tiling.overlap)
    if len(boxes) > 1 and tiling.full_view:
        boxes.append((0, 0, width, height))
    if len(boxes) > tiling.max_tiles:
        full = " and the full view" if tiling.full_view else ""
        raise ValueError(
            f"a {width}x{height} photo needs {len(boxes)} views ({len(boxes) - bool(tiling.full_view)} tiles of "
            f"{tile_width}x{tile_height} at overlap {tiling.overlap:g}{full}), more than the pipeline's limit of "
            f"{tiling.max_tiles} (max_tiles): send larger tiles, less overlap or a smaller photo"
        )
    return np.array(boxes, np.int32)


def cut(image: np.ndarray, boxes: np.ndarray, spec: preprocessing.PreprocessSpec, size: tuple[int, int]) -> np.ndarray:
    """The views ``boxes`` of one photo of ``size`` (height, width), decoded as ``image``, as the core's input
    ``[T, *spec.output_shape]``, each resized as the spec resizes a photo. The whole photo's view may come from a reduced
    decode (its geometry kept, as the untiled pipeline's); a tile needs the full decode."""
    crops = np.empty((len(boxes), spec.height, spec.width, 3), dtype=np.uint8)
    height, width = size
    for index, (x0, y0, x1, y1) in enumerate(boxes.tolist()):
        if (x0, y0, x1, y1) == (0, 0, width, height):
            preprocessing.resize_and_crop(image, spec, out=crops[index], size=size)
        elif image.shape[:2] != size:
            raise ValueError(f"a tile of a {width}x{height} photo needs its full decode, got {image.shape[1]}x{image.shape[0]}")
        else:
            preprocessing.resize_and_crop(image[y0:y1, x0:x1], spec, out=crops[index])
    return preprocessing.normalize_batch(crops, spec)


def transforms(boxes: np.ndarray, spec: preprocessing.PreprocessSpec) -> np.ndarray:
    """``[T, 4]`` each view's tensor transform, from its own pixels (``tensor = view * scale + offset``)."""
    sizes = np.stack([boxes[:, 3] - boxes[:, 1], boxes[:, 2] - boxes[:, 0]], axis=1)
    return preprocessing.tensor_transforms(sizes, spec)


def input_size(spec: preprocessing.PreprocessSpec) -> tuple[int, int]:
    return spec.height, spec.width


# --------------------------------------------------------------------------- the preprocess


@dataclass(frozen=True)
class TilePreprocess:
    """The tiled preprocess of a config: each photo's views (its settings' tiles), as the core's input."""

    spec: preprocessing.PreprocessSpec
    tiling: Tiling
    untiled_minimum: MinimumSize | None  # the untiled pipeline's decode (a photo not tiled is decoded as there)

    @classmethod
    def from_config(cls, config: ModelConfig) -> TilePreprocess:
        spec = preprocessing.PreprocessSpec.from_config(config)
        return cls(spec, Tiling.from_config(config), preprocessing.decode_minimum(spec))

    def minimum(self, tiling: Tiling) -> MinimumSize | None:
        """The decode a photo with these settings needs: at full size when it is tiled."""
        return None if tiling.enabled else self.untiled_minimum

    def outputs(self, decoded: Sequence[Decoded], settings: Sequence[Tiling]) -> dict[str, np.ndarray]:
        """Decoded photos and their settings -> the preprocess's outputs (views padded to the largest count)."""
        per_photo = []
        for index, (item, tiling) in enumerate(zip(decoded, settings)):
            try:
                boxes = views(item.height, item.width, tiling, input_size(self.spec))
            except ValueError as error:
                raise ValueError(f"image {index} of {len(decoded)}: {error}" if len(decoded) > 1 else str(error)) from None
            per_photo.append((cut(item.image, boxes, self.spec, (item.height, item.width)), boxes))
        count = max((len(boxes) for _, boxes in per_photo), default=0)
        dtype = np.uint8 if self.spec.pixel_dtype == "uint8" else np.float32
        tiles = np.zeros((len(decoded), count, *self.spec.output_shape), dtype)
        boxes_out = np.zeros((len(decoded), count, 4), np.int32)
        transforms_out = np.zeros((len(decoded), count, 4), np.float32)
        for index, (pixels, boxes) in enumerate(per_photo):
            tiles[index, : len(boxes)] = pixels
            boxes_out[index, : len(boxes)] = boxes
            transforms_out[index, : len(boxes)] = transforms(boxes, self.spec)
        sizes = preprocessing.original_sizes(decoded)
        return {TILES: tiles, TILE_BOXES: boxes_out, TILE_TRANSFORMS: transforms_out, IMAGE_SIZE: sizes}


def real_tiles(tiles: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """The views of a preprocess's outputs (``[N, T, ...]`` and their boxes ``[N, T, 4]``) without the padding, as
    one batch ``[M, ...]`` in photo order: what the core is sent."""
    boxes = np.asarray(boxes).reshape(-1, 4)
    kept = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
    return np.asarray(tiles).reshape(-1, *np.shape(tiles)[2:])[kept]


# --------------------------------------------------------------------------- the core, by BLS

# A model reached by BLS (or its CPU core in process): a batch in, its outputs in the order asked.
Infer = Callable[[np.ndarray], Awaitable[tuple[np.ndarray, ...]]]


async def in_batches(tiles: np.ndarray, max_batch: int, infer: Infer) -> tuple[np.ndarray, ...]:
    """Every tile through ``infer`` in requests of at most ``max_batch`` (all sent at once, so the core's scheduler
    batches them with other requests'), each output concatenated back in tile order."""
    if max_batch < 1 or not len(tiles):
        raise ValueError(f"need tiles and a max_batch of at least 1, got {len(tiles)} tiles, max_batch {max_batch}")
    starts = range(0, len(tiles), max_batch)
    answers = await asyncio.gather(*(infer(np.ascontiguousarray(tiles[start : start + max_batch])) for start in starts))
    for start, outputs in zip(starts, answers):
        expected = min(max_batch, len(tiles) - start)
        if any(len(output) != expected for output in outputs):
            raise ValueError(f"a request of {expected} tiles was answered with {', '.join(str(len(o)) for o in outputs)} rows")
    return tuple(np.concatenate([outputs[index] for outputs in answers]) for index in range(len(answers[0])))
