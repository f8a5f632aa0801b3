"""The detection task in a tiled pipeline (:mod:`vision_serving.tiling`): the postprocess's inputs, the core it reaches by
BLS, and each photo's answer from its views' answers.

The postprocess of a tiled pipeline reads, per photo, its views (``TILES``, the core's input of each), where each is
in the photo (``TILE_BOXES``), their tensor transforms (``TILE_TRANSFORMS``), the photo's ``IMAGE_SIZE`` and the
request's optional ``TILING`` and thresholds. It sends every view of every photo of its batch to the core by BLS
(``core_model``, ``core_input``, ``core_output``, ``core_max_batch``: the configs say them, as they say a second
stage's), in requests of at most the core's ``max_batch_size``, and answers each view as the untiled pipeline answers
a photo of that view (the head's detection, its answers mapped to the view's pixels and clipped to it:
:attr:`~vision_serving.tasks.detection_heads.base.Head.clips_to_tile`). Then, per photo (:func:`merge_photos`):

- not tiled (``enabled`` false): its one view's answer, which is the untiled pipeline's;
- tiled: every view's detections moved by the view's origin into the photo's pixels, their boxes clipped to it as SAHI
  clips a shifted prediction's (keypoints, and what the head
  adds: :meth:`~vision_serving.tasks.detection_heads.base.Head.shift_extras`), those whose box holds no area dropped
  (as SAHI ignores them), merged (:func:`vision_serving.tile_merge.merge`: what each carries merges with its box:
  keypoints the keeper's, the head's answers as it says, :meth:`~.detection_heads.base.Head.merged_extras`), clipped to
  the photo, the ``max_detections`` best.

The answer has the untiled pipeline's tensors, padded to the request's largest count.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import model_config, preprocessing, tile_merge, tiling
from ..model_config import ConfigError, ModelConfig, model_config_pb2
from .base import Preprocessor, RequestPlan, Role, resolve_roles
from .detection_heads.base import Head

TILED_INPUTS = (
    Role("tile_boxes", "INT32", (-1, 4), name=tiling.TILE_BOXES),
    Role("tile_transforms", "FP32", (-1, 4), name=tiling.TILE_TRANSFORMS),
    Role("image_size", "INT32", (2,), name=tiling.IMAGE_SIZE),
)
TILING_OPTION = Role("tiling", "BYTES", (1,), optional=True, name=tiling.REQUEST_INPUT)
# The core a tiled postprocess reaches by BLS: the generated parameters, as a second stage's (role "core").
CORE_PARAMETERS = ("core_model", "core_input", "core_output", "core_max_batch")


def tiles_role(config: ModelConfig) -> Role:
    """The views' input: the core input's datatype, any shape."""
    for tensor in config.input:
        if tensor.name == tiling.TILES:
            return Role("tiles", model_config.dtype_name(tensor.data_type), None, name=tiling.TILES)
    return Role("tiles", "UINT8", None, name=tiling.TILES)


@dataclass(frozen=True)
class CoreLink:
    """The core a tiled postprocess calls: its model, input, outputs (in the order asked), largest batch and input
    datatype, and ``tensors``, a config whose inputs are the core's outputs as an untiled postprocess would take them
    (named in capitals), which the head binds to."""

    model: str
    input: str
    outputs: tuple[str, ...]
    max_batch: int
    dtype: type
    tensors: ModelConfig

    @classmethod
    def of(cls, config: ModelConfig, model_dir: Path) -> CoreLink:
        """From the postprocess's parameters and the core's own config, beside it (``ConfigError`` naming what is missing)."""
        model, input_name, output_text = (model_config.parameter(config, key) for key in CORE_PARAMETERS[:3])
        max_batch = model_config.int_parameter(config, "core_max_batch")
        path = model_dir.parent / model / "config.pbtxt"
        if not path.is_file():
            raise ConfigError(f"model '{config.name}': core_model '{model}' is not a model beside it ({path} is missing)")
        core = model_config.parse_config_text(path.read_text(), str(path))
        outputs = tuple(name.strip() for name in output_text.split(","))
        by_name = {tensor.name: tensor for tensor in core.output}
        missing = [name for name in outputs if name not in by_name]
        if missing or [t.name for t in core.input] != [input_name] or not 1 <= max_batch <= core.max_batch_size:
            raise ConfigError(
                f"model '{config.name}': core_model '{model}' takes {[t.name for t in core.input]} and gives "
                f"{sorted(by_name)} at batches of up to {core.max_batch_size}; core_input '{input_name}', core_output "
                f"'{output_text}' and core_max_batch {max_batch} must be among them"
            )
        tensors = ModelConfig(name=config.name)
        for name in outputs:
            tensors.input.append(model_config_pb2.ModelInput(name=name.upper(), data_type=by_name[name].data_type, dims=by_name[name].dims))
        dtype = model_config.numpy_dtype(core.input[0].data_type).type
        return cls(model, input_name, outputs, max_batch, dtype, tensors)

    def head_names(self, head: Head) -> dict[str, str | None]:
        """The head's roles -> the core's outputs (in capitals, as :attr:`tensors` names them)."""
        return resolve_roles(self.tensors, "input", head.input_roles())

    def by_role(self, head: Head, outputs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        """The core's outputs (in :attr:`outputs` order) by the head's roles."""
        position = {name.upper(): index for index, name in enumerate(self.outputs)}
        return {role: np.asarray(outputs[position[name]]) for role, name in self.head_names(head).items() if name is not None}


def parse(values: Mapping[str, np.ndarray | None], base: tiling.Tiling, head: Head) -> dict[str, np.ndarray]:
    """One request's tiled inputs by role -> per photo ``image_size``, ``tile_counts`` and ``tilings`` (each photo's
    settings), and per view, in photo order without the padding, ``tiles``, ``tile_boxes`` and ``tile_transforms``
    (``ValueError`` for a client's mistake: a bad ``TILING``, a merge the head does not allow)."""
    sizes, tiles, boxes, transforms = (values[role] for role in ("image_size", "tiles", "tile_boxes", "tile_transforms"))
    assert sizes is not None and tiles is not None and boxes is not None and transforms is not None  # required roles
    count = len(np.asarray(sizes))
    settings = tiling.request_settings(base, values.get("tiling"), count)
    for photo in settings:
        if photo.enabled and photo.merge not in head.tile_merges:
            raise ValueError(
                f"{tiling.REQUEST_INPUT}: merge {photo.merge!r} is not one of {', '.join(head.tile_merges)} for head {head.name}"
            )
    boxes = np.asarray(boxes, np.int32).reshape(count, -1, 4)
    real = (boxes[..., 2] > boxes[..., 0]) & (boxes[..., 3] > boxes[..., 1])
    tilings = np.empty(count, dtype=object)
    tilings[:] = settings
    return {
        "image_size": np.asarray(sizes, np.int32).reshape(count, 2),
        "tile_counts": real.sum(axis=1).astype(np.int64),
        "tilings": tilings,
        "tiles": np.asarray(tiles).reshape(count * boxes.shape[1], *np.shape(tiles)[2:])[real.reshape(-1)],
        "tile_boxes": boxes[real],
        "tile_transforms": np.asarray(transforms, np.float32).reshape(count, -1, 4)[real],
    }


def per_view(batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The untiled computation's inputs for every view of a parsed batch, each view a photo of its own: its size, its
    tensor transform and its photo's thresholds."""
    boxes = np.asarray(batch["tile_boxes"])
    photo = np.repeat(np.arange(len(batch["tile_counts"])), batch["tile_counts"])
    return {
        "image_size": np.stack([boxes[:, 3] - boxes[:, 1], boxes[:, 2] - boxes[:, 0]], axis=1).astype(np.int32),
        "transform": np.asarray(batch["tile_transforms"], np.float32),
        "score_threshold": np.asarray(batch["score_threshold"])[photo],
        "iou_threshold": np.asarray(batch["iou_threshold"])[photo],
    }


@dataclass(frozen=True)
class Answers:
    """Detections per image, padded: ``boxes [N, K, 4]``, ``scores [N, K]``, ``class_ids [N, K]``, ``counts [N]``,
    ``keypoints [N, K, P, D]`` or None, the head's ``extras`` by role ``[N, K, ...]``."""

    boxes: np.ndarray
    scores: np.ndarray
    class_ids: np.ndarray
    counts: np.ndarray
    keypoints: np.ndarray | None
    extras: dict[str, np.ndarray]


def _rows(answers: Answers, views: np.ndarray) -> dict[str, Any]:
    """The detections of ``views`` (indices), flat, in view order: each one's view, box, score, class, keypoints, extras."""
    k = answers.scores.shape[1]
    view, row = np.nonzero(np.arange(k)[None, :] < answers.counts[views][:, None])
    view = views[view]
    return {
        "view": view,
        "boxes": answers.boxes[view, row],
        "scores": answers.scores[view, row],
        "class_ids": answers.class_ids[view, row],
        "keypoints": None if answers.keypoints is None else answers.keypoints[view, row],
        "extras": {role: values[view, row] for role, values in answers.extras.items()},
    }


def _merged_photo(
    found: dict[str, Any], origins: np.ndarray, settings: tiling.Tiling, head: Head, size: tuple[float, float]
) -> dict[str, Any]:
    """One tiled photo's detections (:func:`_rows`) moved into its pixels by their views' ``origins``, their boxes clipped
    to the photo (``size``: height, width), and merged. The clip is SAHI's: a shifted prediction's box is the bounds of
    its shifted polygon within the photo (``ObjectAnnotation``), which its merge compares. A no-op for heads whose boxes
    are clipped to their view; an oriented box's bounds follow its corners past the view's edge, and past the photo's
    they would change what merges."""
    offsets = origins[found["view"]].astype(np.float32)
    boxes = (found["boxes"] + np.concatenate([offsets, offsets], axis=1)).astype(np.float32)
    boxes[:, 0::2] = np.clip(boxes[:, 0::2], 0, size[1])
    boxes[:, 1::2] = np.clip(boxes[:, 1::2], 0, size[0])
    keypoints = found["keypoints"]
    if keypoints is not None:
        keypoints = keypoints.copy()
        keypoints[..., :2] += offsets[:, None, :]
    extras = head.shift_extras(found["extras"], origins[found["view"]])
    kept = np.flatnonzero((boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1]))
    merged = tile_merge.merge(
        boxes[kept],
        found["scores"][kept],
        found["class_ids"][kept],
        settings.merge,
        settings.match,
        settings.merge_threshold,
        settings.class_agnostic,
    )
    keepers = kept[merged.keepers]
    members = [[int(kept[index]) for index in group] for group in merged.members]
    return {
        "boxes": merged.boxes,
        "scores": merged.scores,
        "class_ids": merged.class_ids,
        "keypoints": None if keypoints is None else keypoints[keepers],
        "extras": head.merged_extras(extras, keepers, members),
    }


def _padded(photos: Sequence[dict[str, Any]], like: Answers, limit: int) -> Answers:
    """Per-photo detections (each's first ``limit``) as one padded batch, with ``like``'s dtypes and shapes."""
    counts = np.array([min(len(photo["scores"]), limit) for photo in photos], np.int32)
    k = int(counts.max()) if len(counts) else 0

    def stacked(key: str, template: np.ndarray, role: str | None = None) -> np.ndarray:
        out = np.zeros((len(photos), k, *template.shape[2:]), template.dtype)
        if template.dtype == object:
            out[...] = b""
        for index, photo in enumerate(photos):
            values = photo[key] if role is None else photo[key][role]
            out[index, : counts[index]] = values[: counts[index]]
        return out

    keypoints = None if like.keypoints is None else stacked("keypoints", like.keypoints)
    extras = {role: stacked("extras", values, role) for role, values in like.extras.items()}
    return Answers(
        stacked("boxes", like.boxes), stacked("scores", like.scores), stacked("class_ids", like.class_ids), counts, keypoints, extras
    )


def merge_photos(answers: Answers, batch: Mapping[str, np.ndarray], head: Head, max_detections: int, clip: bool) -> Answers:
    """Each photo's answer from its views' (``answers``, one row per view, in the views' pixels): see the module."""
    counts = np.asarray(batch["tile_counts"])
    starts = np.concatenate([[0], np.cumsum(counts)])
    origins = np.asarray(batch["tile_boxes"])[:, :2]
    sizes = np.asarray(batch["image_size"], np.float32).reshape(-1, 2)
    photos = []
    for index, settings in enumerate(batch["tilings"]):
        found = _rows(answers, np.arange(starts[index], starts[index + 1]))
        size = (float(sizes[index, 0]), float(sizes[index, 1]))
        photos.append(_merged_photo(found, origins, settings, head, size) if settings.enabled else found)
    out = _padded(photos, answers, max_detections)
    if clip:
        sizes = np.asarray(batch["image_size"], np.float32)
        height, width = sizes[:, 0, None, None], sizes[:, 1, None, None]
        out.boxes[..., 0::2] = np.clip(out.boxes[..., 0::2], 0, width)
        out.boxes[..., 1::2] = np.clip(out.boxes[..., 1::2], 0, height)
        if out.keypoints is not None:
            out.keypoints[..., 0] = np.clip(out.keypoints[..., 0], 0, width[..., None])
            out.keypoints[..., 1] = np.clip(out.keypoints[..., 1], 0, height[..., None])
    return out


# --------------------------------------------------------------------------- the preprocessor


def _planner(config: ModelConfig) -> Callable[[Mapping[str, np.ndarray | None], int], RequestPlan]:
    """A request's views: each photo's settings (the config's, overridden by its ``TILING``), its decode (in full when
    tiled) and the views' cut (:class:`vision_serving.tiling.TilePreprocess`)."""
    preprocess = tiling.TilePreprocess.from_config(config)

    def plan(options: Mapping[str, np.ndarray | None], count: int) -> RequestPlan:
        settings = tiling.request_settings(preprocess.tiling, options.get("tiling"), count)
        return RequestPlan([preprocess.minimum(item) for item in settings], lambda decoded: preprocess.outputs(decoded, settings))

    return plan


def _computation(config: ModelConfig) -> preprocessing.Preprocess:
    """The views of photos sent without ``TILING`` (the config's settings)."""
    plan = _planner(config)
    return lambda decoded: plan({}, len(decoded)).compute(decoded)


def _check(config: ModelConfig) -> list[str]:
    """The outputs the tiles preprocessor writes (by name, type and dims), its settings and resize."""
    try:
        spec = preprocessing.PreprocessSpec.from_config(config)
        tiling.Tiling.from_config(config)
    except ConfigError as error:
        return [str(error)]
    pixels = "TYPE_UINT8" if spec.pixel_dtype == "uint8" else "TYPE_FP32"
    expected = {
        tiling.TILES: (pixels, [-1, *spec.output_shape]),
        tiling.TILE_BOXES: ("TYPE_INT32", [-1, 4]),
        tiling.TILE_TRANSFORMS: ("TYPE_FP32", [-1, 4]),
        tiling.IMAGE_SIZE: ("TYPE_INT32", [2]),
    }
    declared = {t.name: (model_config_pb2.DataType.Name(t.data_type), [int(d) for d in t.dims]) for t in config.output}
    if declared != expected:
        return [f"model '{config.name}': the tiles preprocessor writes {expected}, the config declares {declared}"]
    return []


PREPROCESSOR = Preprocessor(
    name="tiles",
    make=_computation,
    check=_check,
    profiles=lambda config: (),
    normalization=lambda config: preprocessing.PixelNormalization.of_spec(preprocessing.PreprocessSpec.from_config(config)),
    pixels=tiling.TILES,
    parameters=(*preprocessing.SPEC_PARAMETERS, *tiling.DEFAULTS),
    defaults=preprocessing.IMAGE_TO_TENSOR_DEFAULTS,
    options=(TILING_OPTION,),
    planner=_planner,
)
