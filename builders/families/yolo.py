"""``new-pipeline NAME --from yolo --model PATH.onnx``: a complete detection pipeline for a YOLO ONNX export.

What the model is comes from the file itself:

- the metadata Ultralytics writes into its ONNX exports (``names``, ``imgsz``, ``stride``,
  ``task``, ``end2end``, ``batch``), else the input and output shapes and ``--labels``;
- the head: the first of the heads a YOLO export may carry (:mod:`.yolo_exports`, the facts of each
  head's export) whose ``fits`` takes the output's shape and class count (``yolo`` for ``[N, 4 + C, A]``, ``yolo_v5`` for ``[N, A, 5 + C]``,
  ``end2end`` for ``[N, K, 6]`` with NMS inside, which Ultralytics' metadata says for its
  ``nms=True`` and NMS-free exports); ``--head`` settles a shape that fits two;
- the batch: a dynamic batch dim is served as is (``dynamic=True``: its height and width are fixed
  at ``imgsz`` by ``batch_dimension``, the output dims the export left symbolic inferred from them);
  a static batch of 1 (Ultralytics' default ``dynamic=False``) is made dynamic by the
  ``batch_dimension`` pass where the graph allows it (tried here, on onnxruntime: a batch of 2 must
  give what its images give one by one), else the pipeline serves batch 1 (``max_batch_size`` 1);
  an ``nms=True`` export serves the batch its NMS loop was unrolled for (``batch``, 1 by default);
- the export's types as they are: TensorRT's ONNX parser takes an ``nms=True`` export's NonZero
  on BOOL and Clip on INT64 (``builders/tensorrt_onnx_ops.py``, from its importers).

It writes the pipeline folder: the model (pinned by sha256 in the recipe), the labels, the
recipe, the ensemble and its preprocess (Ultralytics' letterbox: ``yolo_letterbox``, pad 114,
RGB / 255, NCHW), core (TensorRT plan; onnxruntime and OpenVINO variants on CPU) and
postprocess (the detection task with Ultralytics' predictor defaults: score 0.25, IoU 0.7,
300 detections, class-aware NMS). A model this does not support is refused in one line that
says what was found and what is supported.
"""

from __future__ import annotations

import ast
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builders import BuildError, Log, spec_writer
from builders.artifacts import sha256_file
from builders.families import yolo_exports
from builders.spec_writer import Entry, Table
from vision_serving import layout
from vision_serving.preprocessing import YOLO_PAD_VALUE
from vision_serving.queue_policy import MIN_QUEUE_SIZE
from vision_serving.tasks.detection_heads import registry as detection_heads

MODEL_FILE = "model.onnx"
LABELS_FILE = "labels.txt"
MAX_BATCH = 16
# Ultralytics' predictor defaults (ultralytics/cfg/default.yaml: conf 0.25 for predict, iou 0.7, max_det 300).
SCORE_THRESHOLD, IOU_THRESHOLD, MAX_DETECTIONS = 0.25, 0.7, 300
# The fix passes a static batch of 1 needs: the batch made symbolic, then Reshape targets that start with a literal 1 unpinned.
BATCH_PASSES = ["stable_io_names", "batch_dimension", "batch_reshape_placeholder", "batch_dimension"]


class UnsupportedModel(BuildError):
    """The ONNX is not a YOLO detector this bundle can serve; the message says what was found."""


@dataclass(frozen=True)
class YoloModel:
    input_name: str
    height: int
    width: int
    output_names: tuple[str, ...]
    output_shapes: tuple[tuple[int | str, ...], ...]  # each output's, batch dim first
    head: str
    names: tuple[str, ...]
    static_batch: bool  # the batch dim is fixed in the file (1, Ultralytics' default, or export(batch=B)'s B)
    ultralytics: bool  # the export carries Ultralytics' metadata
    # Ultralytics' nms=True export unrolls its NMS loop over the batch it was exported with (``batch``; 1 unless given):
    # images past it would get no detections, so no run may hold more. None: no such loop.
    unrolled_batch: int | None = None
    fixed_batch: int = 1  # that batch, where it is fixed
    static_size: bool = True  # the input's height and width are fixed in the file (else dynamic=True: fixed by batch_dimension)

    task: str = "detect"  # Ultralytics' task (its metadata's): the heads considered are that task's
    head_parameters: tuple[tuple[str, str], ...] = ()  # the head's own config parameters (a pose model's keypoint shape)

    @property
    def output_dims(self) -> list[list[int]]:
        """Each output's per-image dims, as the configs declare them."""
        return [[int(d) for d in shape[1:]] for shape in self.output_shapes]

    def head_instance(self) -> Any:
        """The head, with its parameters (what the postprocess will run)."""
        return detection_heads.head_class(self.head).from_parameters(dict(self.head_parameters))

    def core_roles(self) -> list[str]:
        """The head's roles of the core's outputs, in the export's output order: the tensors' names in the configs."""
        return [role.role for role in self.head_instance().input_roles() if role.from_core]


def _dims(value: Any) -> tuple[int | str, ...]:
    return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in value.type.tensor_type.shape.dim)


def _names(metadata: dict[str, str], labels: Path | None) -> tuple[str, ...]:
    if labels is not None:
        if not labels.exists():
            raise BuildError(f"--labels {labels}: no such file")
        names = tuple(line.strip() for line in labels.read_text(encoding="utf-8").splitlines() if line.strip())
        if not names:
            raise BuildError(f"--labels {labels}: no labels (one per line, in class-id order)")
        return names
    if "names" not in metadata:
        return ()
    try:
        parsed = ast.literal_eval(metadata["names"])
    except (ValueError, SyntaxError):
        raise UnsupportedModel(f"the model's 'names' metadata is not a dict of class names: {metadata['names'][:80]!r}") from None
    if isinstance(parsed, dict):
        return tuple(str(parsed[key]) for key in sorted(parsed))
    return tuple(str(item) for item in parsed)


def _head(
    shapes: list[tuple[int | str, ...]], classes: int | None, metadata: dict[str, str], forced: str | None, where: str, task: str = "detect"
) -> str:
    """The head of the outputs (the heads of ``task`` whose export fits them, :mod:`.yolo_exports`), checked against the
    class count where it is known."""
    found = f"{where} {'has shape' if len(shapes) == 1 else 'have shapes'} {', '.join(str(list(shape)) for shape in shapes)}"
    supported = yolo_exports.formats(task)
    if any(len(shape) < 3 or not all(isinstance(d, int) and d > 0 for d in shape[1:]) for shape in shapes):
        raise UnsupportedModel(f"{found}; supported: {supported}, with fixed sizes past the batch")
    per_image = [tuple(int(d) for d in shape[1:]) for shape in shapes]
    exports = {name: yolo_exports.EXPORTS[name] for name in yolo_exports.heads(task)}
    # An export whose metadata names Ultralytics' head module (RT-DETR's RTDETRDecoder) is that head's only; other exports
    # never are (RT-DETR's normalized rows have the shape of end2end's).
    decoder = metadata.get("head", "")
    named = {name: export for name, export in exports.items() if export.ultralytics_head and export.ultralytics_head == decoder}
    if named and forced is None:
        (name, export), *_ = named.items()
        if export.fits(per_image, classes):
            return name
        raise UnsupportedModel(
            f"{found} but its metadata's head is {decoder}; supported: {name} [N, {export.layout[1:]} ({export.exports})"
        )
    if forced is None:
        exports = {name: export for name, export in exports.items() if not export.ultralytics_head}
    fits = {name: export.fits(per_image, classes) for name, export in exports.items()}
    if forced is not None:
        if forced not in fits:
            raise UnsupportedModel(f"--head {forced!r} is not one of {', '.join(fits)}")
        if not fits[forced]:
            raise UnsupportedModel(f"{found}, which is not --head {forced}; supported: {supported}")
        return forced
    if metadata.get("end2end", "").lower() == "true" or _exported_with_nms(metadata):
        in_model = [name for name, export in exports.items() if export.nms_in_model and fits[name]]
        if in_model:
            return in_model[0]
        raise UnsupportedModel(f"{found} but its metadata says NMS is in the model (end2end); supported: {supported}")
    # Ultralytics' metadata that says no NMS is in the model rules out the end-to-end rows (a pose model's [4 + C + PxD, A]
    # would pass for rows of keypoints); an export without that metadata is taken by its shape alone.
    ultralytics = "imgsz" in metadata
    candidates = [name for name, fit in fits.items() if fit and not (ultralytics and exports[name].nms_in_model)]
    if not candidates:
        detail = f" for its {classes} classes" if classes else ""
        raise UnsupportedModel(f"{found}, which is none of the supported formats{detail}: {supported}")
    if len(candidates) > 1:
        raise UnsupportedModel(f"{found}, which fits {' and '.join(candidates)}: pass --head")
    if classes is None and not exports[candidates[0]].nms_in_model:
        raise UnsupportedModel(f"{found} and no class names (no Ultralytics metadata): pass --labels FILE (one label per line)")
    return candidates[0]


def _head_parameters(head: str, metadata: dict[str, str], where: str) -> tuple[tuple[str, str], ...]:
    """The head's config parameters from the export's metadata (:meth:`.yolo_exports.YoloExport.parameters`)."""
    try:
        return yolo_exports.EXPORTS[head].parameters(metadata)
    except ValueError as error:
        raise UnsupportedModel(f"{where}: {error}") from None


def _exported_with_nms(metadata: dict[str, str]) -> bool:
    """Ultralytics' ``export(nms=True)``: its ``args`` metadata records it (``end2end`` stays False)."""
    try:
        args = ast.literal_eval(metadata.get("args", "{}"))
    except (ValueError, SyntaxError):
        return False
    return isinstance(args, dict) and args.get("nms") is True


@dataclass(frozen=True)
class Export:
    """An ONNX export of one image input, loaded without its external data: what every family reads first."""

    model: Any  # the onnx.ModelProto
    metadata: dict[str, str]
    source: Any  # its image input (an onnx.ValueInfoProto)
    in_shape: tuple[int | str, ...]  # [N, 3, H, W], dims symbolic where the export left them so
    outputs: list[Any]


def load_export(path: Path, tasks: Sequence[str] = ()) -> Export:
    """The export ``path`` with one float32 ``[N, 3, H, W]`` image input, or ``UnsupportedModel`` in one line (where
    ``tasks`` are given, a file whose metadata's ``task``, detect where it has none, is not one of them too)."""
    import onnx

    if not path.is_file():
        raise BuildError(f"--model {path}: no such file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as error:  # protobuf's DecodeError and friends
        raise UnsupportedModel(f"{path}: not an ONNX model ({type(error).__name__})") from None
    metadata = {prop.key: prop.value for prop in model.metadata_props}
    task = metadata.get("task", "detect")
    if tasks and task not in tasks:
        raise UnsupportedModel(f"{path.name} is an Ultralytics '{task}' model; supported: {', '.join(repr(name) for name in tasks)} models")
    initializers = {item.name for item in model.graph.initializer}
    inputs = [item for item in model.graph.input if item.name not in initializers]
    if len(inputs) != 1:
        raise UnsupportedModel(f"{path.name} has {len(inputs)} inputs ({', '.join(i.name for i in inputs)}); supported: one image input")
    source = inputs[0]
    in_shape = _dims(source)
    in_type = _dtype_name(source.type.tensor_type.elem_type)
    if in_type != "float32" or len(in_shape) != 4 or in_shape[1] != 3:
        raise UnsupportedModel(
            f"{path.name}: input '{source.name}' is {in_type} {list(in_shape)}; supported: a float32 [N, 3, H, W] image (NCHW)"
        )
    return Export(model, metadata, source, in_shape, list(model.graph.output))


def inspect(path: Path, labels: Path | None = None, head: str | None = None, imgsz: tuple[int, int] | None = None) -> YoloModel:
    """What ``path`` is, or ``UnsupportedModel`` in one line."""
    export = load_export(path, yolo_exports.tasks())
    model, metadata, source, in_shape, outputs = export.model, export.metadata, export.source, export.in_shape, export.outputs
    task = metadata.get("task", "detect")
    for output in outputs:
        out_type = _dtype_name(output.type.tensor_type.elem_type)
        if out_type != "float32":
            raise UnsupportedModel(f"{path.name}: output '{output.name}' is {out_type}; supported: float32")
    size = imgsz or _size(metadata, in_shape, path.name)
    names = _names(metadata, labels)
    out_shapes = [_resolved(model, index, _dims(output), size) for index, output in enumerate(outputs)]
    where = f"{path.name}: output{'s' if len(outputs) > 1 else ''} {', '.join(repr(output.name) for output in outputs)}"
    chosen = _head(out_shapes, len(names) or None, metadata, head, where, task)
    if not names:
        raise UnsupportedModel(f"{path.name}: the {chosen} output does not give the class count and the model has no names: pass --labels")
    return YoloModel(
        input_name=source.name,
        height=size[0],
        width=size[1],
        output_names=tuple(output.name for output in outputs),
        output_shapes=tuple(out_shapes),
        head=chosen,
        names=names,
        static_batch=isinstance(in_shape[0], int) and in_shape[0] > 0,
        fixed_batch=in_shape[0] if isinstance(in_shape[0], int) and in_shape[0] > 0 else 1,
        static_size=all(isinstance(d, int) and d > 0 for d in in_shape[2:]),
        ultralytics="imgsz" in metadata,
        unrolled_batch=_unrolled_batch(metadata, in_shape),
        task=task,
        head_parameters=_head_parameters(chosen, metadata, path.name),
    )


def _resolved(model: Any, index: int, shape: tuple[int | str, ...], size: tuple[int, int]) -> tuple[int | str, ...]:
    """The output's shape with the dims past the batch that the export left symbolic (``dynamic=True``: the
    ``4 + C`` and anchor dims) resolved for a ``size`` input: the input fixed to ``[1, 3, H, W]`` and the shapes
    inferred again (with data propagation, through the Shape arithmetic); a dim inference cannot resolve, from
    one run of the model on onnxruntime. Dims the export states are kept."""
    if all(isinstance(d, int) and d > 0 for d in shape[1:]):
        return shape
    import onnx

    fixed = onnx.ModelProto.FromString(model.SerializeToString())
    initializers = {item.name for item in fixed.graph.initializer}
    (image,) = [item for item in fixed.graph.input if item.name not in initializers]
    for dim, value in zip(image.type.tensor_type.shape.dim, (1, 3, *size)):
        dim.Clear()
        dim.dim_value = value
    del fixed.graph.value_info[:]
    for dim in fixed.graph.output[index].type.tensor_type.shape.dim[1:]:
        if not dim.HasField("dim_value"):
            dim.Clear()
    try:
        inferred = _dims(onnx.shape_inference.infer_shapes(fixed, data_prop=True).graph.output[index])
    except Exception:  # an export inference cannot walk: onnxruntime below says
        inferred = shape
    if all(isinstance(d, int) and d > 0 for d in inferred[1:]):
        return (shape[0], *inferred[1:])
    return (shape[0], *_run_shapes(fixed)[index][1:])


def _unrolled_batch(metadata: dict[str, str], in_shape: tuple[int | str, ...]) -> int | None:
    """Images per run an Ultralytics ``nms=True`` export handles (see ``YoloModel.unrolled_batch``)."""
    if not _exported_with_nms(metadata):
        return None
    if isinstance(in_shape[0], int) and in_shape[0] > 0:
        return int(in_shape[0])
    try:
        return max(1, int(metadata.get("batch", "1")))
    except ValueError:
        return 1


def _run_shapes(model: Any) -> list[tuple[int, ...]]:
    """Each output's shape from one run of ``model`` (its image input fixed) on zeros."""
    from vision_serving.onnx_core import create_session

    scratch = layout.BUILD_DIR / "new-pipeline"
    scratch.mkdir(parents=True, exist_ok=True)
    probe = scratch / "shape_probe.onnx"
    probe.write_bytes(model.SerializeToString())
    session = create_session(probe)
    (image,) = session.get_inputs()
    return [tuple(int(d) for d in output.shape) for output in session.run(None, {image.name: np.zeros(image.shape, np.float32)})]


def _dtype_name(elem_type: int) -> str:
    """An ONNX tensor type as numpy names it (``float32``, ``uint8``, ``float16``), else as ONNX does."""
    import onnx

    try:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    except (KeyError, ValueError, TypeError):
        dtype = None
    return str(dtype.name) if dtype is not None and dtype.kind != "O" else onnx.TensorProto.DataType.Name(elem_type).lower()


def _size(metadata: dict[str, str], shape: tuple[int | str, ...], where: str) -> tuple[int, int]:
    if isinstance(shape[2], int) and isinstance(shape[3], int) and shape[2] > 0 and shape[3] > 0:
        return int(shape[2]), int(shape[3])
    if "imgsz" in metadata:
        value = ast.literal_eval(metadata["imgsz"])
        height, width = (value, value) if isinstance(value, int) else (int(value[0]), int(value[1]))
        return height, width
    raise UnsupportedModel(f"{where}: the input size is dynamic ({list(shape)}) and no imgsz metadata says it: pass --imgsz H,W")


# --------------------------------------------------------------------------- the batch


def probe_core(height: int, width: int, outputs: Sequence[tuple[str, Sequence[int]]]) -> Any:
    """A core config of the UINT8 ``[3, height, width]`` image in and these FP32 outputs, at :data:`MAX_BATCH`: what the
    fix passes read while the batch is probed."""
    from builders import spec as specs
    from builders.configs import generate

    tensors = tuple(specs.TensorSpec(name, "FP32", tuple(dims)) for name, dims in outputs)
    core = specs.CoreSpec((specs.TensorSpec("images", "UINT8", (3, height, width)),), tensors)
    return generate.core_config("probe_core", core, MAX_BATCH, ())


def batch_passes(model: YoloModel, path: Path, log: Log) -> tuple[list[str], int]:
    """The fix passes and max_batch_size: a dynamic batch as is; a static batch of 1 made dynamic when the
    fixed graph gives a batch of 2 what its images give one by one; else batch 1."""
    import onnx
    import onnxruntime

    from builders import fix_onnx
    from vision_serving.onnx_core import create_session

    onnxruntime.set_default_logger_severity(3)  # a graph the pass cannot batch fails below: its log would be noise
    # A dynamic=True export: its height and width (and every shape that follows from them) fixed to the configs'.
    as_exported = ["stable_io_names", *([] if model.static_size else ["batch_dimension"])]
    if model.unrolled_batch is not None:
        log(
            f"the model's NMS was exported for batches of up to {model.unrolled_batch}: max_batch_size {model.unrolled_batch}"
            + ("" if model.unrolled_batch > 1 else "; export with dynamic=True, batch=B to serve batches of B")
        )
        return as_exported, model.unrolled_batch
    if not model.static_batch:
        return as_exported, MAX_BATCH
    core = probe_core(model.height, model.width, [(name, dims) for name, dims in zip(model.core_roles(), model.output_dims)])
    options = fix_onnx.FixOptions.from_config(
        core, max_batch=MAX_BATCH, opt_batch=None, atol=fix_onnx.DEFAULT_ATOL, rtol=fix_onnx.DEFAULT_RTOL
    )
    try:
        fixed = fix_onnx.fix_model(onnx.load(str(path)), list(BATCH_PASSES), options, lambda _: None).model
        scratch = layout.BUILD_DIR / "new-pipeline"
        scratch.mkdir(parents=True, exist_ok=True)
        probe = scratch / "batch_probe.onnx"
        probe.write_bytes(fixed.SerializeToString())
        session = create_session(probe)
        images = np.random.default_rng(0).random((2, 3, model.height, model.width), dtype=np.float32)
        name = session.get_inputs()[0].name
        together = session.run(None, {name: images})
        alone = [session.run(None, {name: images[i : i + 1]}) for i in range(2)]
        if all(
            np.allclose(batched, np.concatenate([one[index] for one in alone]), atol=1e-3, rtol=1e-3)
            for index, batched in enumerate(together)
            if batched.shape[0] == 2
        ) and all(batched.shape[0] == 2 for batched in together):
            log(f"the static batch of {model.fixed_batch} becomes dynamic ({', '.join(BATCH_PASSES[1:])}): max_batch_size {MAX_BATCH}")
            return list(BATCH_PASSES), MAX_BATCH
        reason = "a batch of 2 gives other answers than its images one by one"
    except Exception as error:  # a pass or onnxruntime refusing the rewritten graph
        reason = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
    if model.fixed_batch != 1:
        raise UnsupportedModel(
            f"its static batch of {model.fixed_batch} cannot be made dynamic ({reason}): export with batch=1 or dynamic=True"
        )
    log(f"the static batch of 1 cannot be made dynamic ({reason}): the pipeline serves batch 1; export with dynamic=True to batch")
    return ["stable_io_names"], 1


# --------------------------------------------------------------------------- the spec


def recipe_tables(name: str, source_name: str, sha256: str, passes: Sequence[str], own: str, gate: Sequence[Entry]) -> list[Table]:
    """The build sections of a family's spec: the ONNX source, its fix passes, package photos for calibration and
    the precision gate (``own``: what a user calibrates and measures on for their own classes), ``gate``'s thresholds."""
    return [
        Table(
            "source", [Entry("kind", "onnx"), Entry("path", MODEL_FILE), Entry("sha256", sha256)], [f"The export {source_name}, pinned."]
        ),
        Table(
            "fix",
            [Entry("passes", list(passes))],
            ["stable_io_names gives the model's input and output the configs' names; a static batch of 1 is made dynamic."],
        ),
        Table(
            "quantize",
            [
                Entry("calibration_photos", ["astronaut", "brick", "china", "clock_motion", "flower", "grass", "page", "retina"]),
                Entry("evaluation_photos", ["camera", "chelsea", "coffee", "motorcycle_left", "rocket"]),
                Entry("exclude", []),
                Entry("samples", 128),
                Entry("method", "entropy"),
            ],
            [
                "INT8 calibration and the precision gate's held-out photos: package photos by default. For your own classes,",
                f"calibrate on your images (`python -m builders quantize --pipeline {name} --calibration-dir DIR`) and measure on",
                f"labelled ones (`python -m builders evaluate --pipeline {name} --dataset DIR`, {own}).",
            ],
        ),
        Table("gate", gate),
        Table("golden"),
    ]


def header(name: str, source_name: str, what: str) -> list[str]:
    return [
        f"Written by `python -m builders new-pipeline {name} --from yolo` for {source_name} ({what}). Every Triton config of",
        f"this folder is generated from this file: edit it, then run `python -m builders configs --pipeline {name}`.",
    ]


def _letterbox(model: YoloModel) -> Table:
    """Ultralytics' LetterBox as its predictor runs it on a fixed-size model (with ``scale_fill``: ``yolo_stretch``)."""
    return letterbox_table(model.height, model.width, yolo_exports.EXPORTS[model.head].resize)


def letterbox_table(height: int, width: int, resize: str) -> Table:
    """The ``[preprocess]`` of Ultralytics' LetterBox as its predictor runs it on a ``height`` x ``width`` model:
    ``yolo_letterbox`` (fit, centred padding of 114) or, with ``scale_fill``, ``yolo_stretch``."""
    return Table(
        "preprocess",
        [
            Entry("layout", "NCHW"),
            Entry("color_order", "RGB"),
            Entry("resize", resize),
            Entry("interpolation", "bilinear"),
            Entry("pad_value", YOLO_PAD_VALUE),
            Entry(
                "decode_oversampling",
                0,
                "Every photo decoded at its full size: Ultralytics' predictor's answer exactly (2: a 12 MP JPEG at 3/8).",
            ),
            Entry("mean", [0, 0, 0], "RGB / 255, folded into the core's graph (the pixels are handed over as UINT8)."),
            Entry("std", [255, 255, 255]),
            Entry("instances", 2),
        ],
        [
            f"Ultralytics' LetterBox as its predictor runs it on a {height}x{width} model: "
            + (
                "the whole photo by cv2.resize linear (scale_fill), no padding."
                if resize == "yolo_stretch"
                else "fit, cv2.resize linear, centred padding of 114."
            )
        ],
    )


def _detection(model: YoloModel, queue: int) -> Table:
    """The detection task with the model's head and Ultralytics' predictor's defaults."""
    return Table(
        "postprocess",
        [
            Entry("head", model.head),
            *(Entry(key, value) for key, value in model.head_parameters),
            Entry("labels_file", LABELS_FILE, "One class name a line, in class-id order."),
            Entry(
                "score_threshold",
                SCORE_THRESHOLD,
                "Ultralytics' predictor defaults: conf 0.25, max_det 300; the model's rows are kept as they are (no NMS: iou_threshold"
                " and class_agnostic do not apply)."
                if yolo_exports.EXPORTS[model.head].nms_in_model
                else "Ultralytics' predictor defaults: conf 0.25, iou 0.7, max_det 300, class-aware NMS.",
            ),
            Entry("iou_threshold", IOU_THRESHOLD),
            Entry("max_detections", MAX_DETECTIONS),
            Entry("class_agnostic", False),
            Entry("clip_to_image", yolo_exports.EXPORTS[model.head].clip_to_image),
            Entry("cpu_share", 0.5),
            Entry("max_queue_size", queue),
        ],
    )


def _tiling(model: YoloModel) -> Table:
    """Tiled inference at SAHI's defaults but the tile, at the model's input (vision_serving.tiling)."""
    merge = "nms" if "greedy_nmm" not in detection_heads.head_class(model.head).tile_merges else "greedy_nmm"
    return Table(
        "tiling",
        [
            Entry("enabled", True, 'A request\'s TILING input ({"enabled": false}, {"tile_size": 512, ...}) overrides these, per image.'),
            Entry(
                "tile_size",
                [model.height, model.width],
                "Each tile in the photo's pixels: the model's input (a tile reaches it unresized).",
            ),
            Entry("overlap", 0.2),
            Entry("full_view", True, "The whole photo as one more view (for the objects larger than a tile)."),
            Entry(
                "merge",
                merge,
                "SAHI's get_sliced_prediction merge: greedy NMM by intersection over the smaller box"
                + (" (oriented boxes: NMS, as SAHI's)." if merge == "nms" else "."),
            ),
            Entry("match", "ios"),
            Entry("merge_threshold", 0.5),
            Entry("class_agnostic", False),
            Entry("max_tiles", 64, "A photo needing more views is refused (INVALID_ARG); each costs a core pass."),
        ],
        ["Tiled inference: each photo cut into overlapping tiles at the model's input, the tiles' detections merged (docs/tiling.md)."],
    )


def spec_text(name: str, model: YoloModel, source_name: str, sha256: str, passes: list[str], max_batch: int, tiled: bool = False) -> str:
    """The pipeline's ``pipeline.toml``: the detection task with the model's head and Ultralytics' predictor's
    letterbox and defaults (tiled where ``tiled``), and its build recipe."""
    queue = max(MIN_QUEUE_SIZE, 2 * max_batch)
    outputs = [{"name": role, "datatype": "FP32", "dims": dims} for role, dims in zip(model.core_roles(), model.output_dims)]
    description = f"{model.head} detector, {len(model.names)} classes, {model.height}x{model.width} input (from {source_name})"
    gate = [
        Entry(
            "min_detection_agreement", 0.95, "FP32 against each lower precision, detections matched within each class by box IoU >= 0.5."
        ),
        Entry("min_matched_iou", 0.90),
    ]
    tables = [
        Table("", [Entry("description", description), Entry("task", "detection"), Entry("max_batch_size", max_batch)]),
        _letterbox(model),
        Table(
            "core",
            [
                Entry("inputs", [{"name": "images", "datatype": "UINT8", "dims": [3, model.height, model.width]}]),
                Entry("outputs", outputs, f"The raw {yolo_exports.EXPORTS[model.head].layout} outputs, named for the head's roles."),
                Entry("max_queue_size", queue),
            ],
        ),
        _detection(model, queue),
        *([_tiling(model)] if tiled else []),
        *recipe_tables(name, source_name, sha256, passes, "images with YOLO labels", gate),
    ]
    return spec_writer.render(header(name, source_name, f"{model.head} head"), tables)


def folder_files(name: str, spec: str, labels: Sequence[str] | None) -> dict[str, str]:
    """A family's pipeline folder, by path in the folder: its spec, its labels beside the postprocess (None: a model
    without classes) and every file generated from the spec (:mod:`builders.configs.generate`)."""
    from builders import spec as specs
    from builders.configs import generate

    pipeline = layout.Pipeline(name, layout.MODEL_REPOSITORY / name)
    generated = generate.files(specs.from_text(spec, pipeline))
    return {
        layout.RECIPE_FILENAME: spec,
        **({f"{name}_postprocess/{LABELS_FILE}": "".join(f"{label}\n" for label in labels)} if labels is not None else {}),
        **{str(path.relative_to(pipeline.repository)): text for path, text in generated.items()},
    }


def files(
    name: str, model: YoloModel, source_name: str, sha256: str, passes: list[str], max_batch: int, tiled: bool = False
) -> dict[str, str]:
    """Every text file of the pipeline folder, by its path in the folder."""
    return folder_files(name, spec_text(name, model, source_name, sha256, passes, max_batch, tiled), model.names)


def parse_imgsz(imgsz: str | None) -> tuple[int, int] | None:
    """``--imgsz H,W`` (or one number for a square input) as (height, width); None when not given."""
    if not imgsz:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*(?:,\s*(\d+)\s*)?", imgsz)
    if not match:
        raise BuildError(f"--imgsz {imgsz!r}: expected H,W (or one number for a square input)")
    return int(match.group(1)), int(match.group(2) or match.group(1))


def scaffold(
    name: str,
    target: Path,
    model_path: Path,
    labels: Path | None,
    head: str | None,
    size: tuple[int, int] | None,
    log: Log,
    tiled: bool = False,
) -> None:
    """Write the pipeline folder ``target`` for the YOLO ONNX ``model_path`` (a task some detection head serves; tiled
    where ``tiled``)."""
    model = inspect(model_path, labels, head, size)
    log(
        f"{model_path.name}: {model.head} head, {len(model.names)} classes ({', '.join(model.names[:5])}{', ...' if len(model.names) > 5 else ''}), "
        f"input {model.height}x{model.width}{', Ultralytics metadata' if model.ultralytics else ''}"
    )
    passes, max_batch = batch_passes(model, model_path, log)
    target.mkdir(parents=True)
    shutil.copy2(model_path, target / MODEL_FILE)
    for relative, text in files(name, model, model_path.name, sha256_file(target / MODEL_FILE), passes, max_batch, tiled).items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
