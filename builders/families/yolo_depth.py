"""``new-pipeline NAME --from yolo --model PATH.onnx`` for an Ultralytics depth export: a complete depth pipeline.

An export whose metadata says ``task: depth`` (YOLO26-depth: ``model.export(format="onnx")``, static or
``dynamic=True``) is one float32 ``images`` input ``[N, 3, H, W]`` and one float32 output ``[N, 1, H, W]``: the depth
at every pixel of the input (the head's exp of its log-depth, upsampled in the graph to the input's size). What the
model is comes from the file: its input size (``imgsz`` metadata where the export's is dynamic) and its batch, made
dynamic as a detector's is (:mod:`builders.families.yolo`). The preprocess is Ultralytics' ``DepthPredictor``'s: the
whole photo stretched onto the input (``yolo_stretch``: LetterBox with ``scale_fill``), RGB, ``/ 255``, NCHW; the
postprocess is the depth task (:mod:`vision_serving.tasks.depth`): the map resized to the photo on aligned corners,
as the predictor resizes it, a 16-bit PNG of millimetres (``depth_scale`` 1000). Its answers equal the predictor's
(tests/onnx/builders/test_families_yolo_depth.py).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from builders import BuildError, Log, spec_writer
from builders.artifacts import sha256_file
from builders.families import yolo
from builders.spec_writer import Entry, Table
from vision_serving.queue_policy import MIN_QUEUE_SIZE
from vision_serving.tasks import depth

TASK = "depth"  # Ultralytics' metadata
SUPPORTED = "one float32 [N, 1, H, W] depth output at the input's size (Ultralytics' depth export)"


@dataclass(frozen=True)
class DepthModel:
    input_name: str
    height: int
    width: int
    output_name: str
    output_dims: tuple[int, ...]  # per image: (1, H, W) or (H, W)
    static_batch: bool
    fixed_batch: int
    static_size: bool
    ultralytics: bool


def inspect(path: Path, imgsz: tuple[int, int] | None = None) -> DepthModel:
    """What the depth export ``path`` is, or ``UnsupportedModel`` in one line."""
    export = yolo.load_export(path)
    model, found, source, in_shape, outputs = export.model, export.metadata, export.source, export.in_shape, export.outputs
    if len(outputs) != 1:
        raise yolo.UnsupportedModel(
            f"{path.name} is a depth model with {len(outputs)} outputs ({', '.join(o.name for o in outputs)}); supported: {SUPPORTED}"
        )
    (output,) = outputs
    size = imgsz or yolo._size(found, in_shape, path.name)
    out_type = yolo._dtype_name(output.type.tensor_type.elem_type)
    out_shape = yolo._resolved(model, 0, yolo._dims(output), size)
    dims = tuple(out_shape[1:])
    if out_type != "float32" or dims not in ((1, *size), size):
        raise yolo.UnsupportedModel(
            f"{path.name}: output '{output.name}' is {out_type} {list(out_shape)} for a {size[0]}x{size[1]} input; supported: {SUPPORTED}"
        )
    return DepthModel(
        input_name=source.name,
        height=size[0],
        width=size[1],
        output_name=output.name,
        output_dims=tuple(int(d) for d in dims),
        static_batch=isinstance(in_shape[0], int) and in_shape[0] > 0,
        fixed_batch=in_shape[0] if isinstance(in_shape[0], int) and in_shape[0] > 0 else 1,
        static_size=all(isinstance(d, int) and d > 0 for d in in_shape[2:]),
        ultralytics="imgsz" in found,
    )


def batch_passes(model: DepthModel, path: Path, log: Log) -> tuple[list[str], int]:
    """The fix passes and max_batch_size, as :func:`builders.families.yolo.batch_passes` finds them for a detector (a
    stand-in detector with this model's output: the probe reads the input's size and the batch)."""
    stand_in = yolo.YoloModel(
        input_name=model.input_name,
        height=model.height,
        width=model.width,
        output_names=(model.output_name,),
        output_shapes=((model.fixed_batch if model.static_batch else "batch", *model.output_dims),),
        head="yolo",
        names=("depth",),
        static_batch=model.static_batch,
        fixed_batch=model.fixed_batch,
        ultralytics=model.ultralytics,
        static_size=model.static_size,
    )
    return yolo.batch_passes(stand_in, path, log)


def _transforms(model: DepthModel) -> Table:
    """Ultralytics' DepthPredictor's preprocessing: LetterBox with scale_fill (the whole photo onto the input)."""
    return Table(
        "preprocess",
        [
            Entry("layout", "NCHW"),
            Entry("color_order", "RGB"),
            Entry("resize", "yolo_stretch"),
            Entry("interpolation", "bilinear"),
            Entry("decode_oversampling", 0, "Every photo decoded at its full size, as the predictor decodes it."),
            Entry("mean", [0, 0, 0], "RGB / 255, folded into the core's graph (the pixels are handed over as UINT8)."),
            Entry("std", [255, 255, 255]),
            Entry("instances", 2),
        ],
        [f"Ultralytics' DepthPredictor on a {model.height}x{model.width} model: the whole photo by cv2.resize linear (scale_fill)."],
    )


def spec_text(name: str, model: DepthModel, source_name: str, sha256: str, passes: list[str], max_batch: int) -> str:
    """The pipeline's ``pipeline.toml``: the depth task with Ultralytics' depth preprocessing."""
    queue = max(MIN_QUEUE_SIZE, 2 * max_batch)
    gate = depth.TASK.gate_defaults
    description = f"Ultralytics depth model, {model.height}x{model.width} input (from {source_name})"
    tables = [
        Table("", [Entry("description", description), Entry("task", depth.TASK.name), Entry("max_batch_size", max_batch)]),
        _transforms(model),
        Table(
            "core",
            [
                Entry("inputs", [{"name": "images", "datatype": "UINT8", "dims": [3, model.height, model.width]}]),
                Entry("outputs", [{"name": "depth", "datatype": "FP32", "dims": list(model.output_dims)}], "Depth at each input pixel."),
                Entry("max_queue_size", queue),
            ],
        ),
        Table(
            "postprocess",
            [
                Entry(
                    "depth_scale",
                    depth.DEPTH_SCALE,
                    "The PNG's values per metre: 1000 is millimetres up to 65.5 m (256: up to 256 m, for outdoor scenes).",
                ),
                Entry("cpu_share", 0.5),
                Entry("max_queue_size", queue),
            ],
        ),
        *yolo.recipe_tables(
            name,
            source_name,
            sha256,
            passes,
            f"a photo and its <name>{depth.DEPTH_SUFFIX} each",
            [
                Entry(
                    "min_delta1", gate["min_delta1"], "FP32 against each lower precision: pixels within 1.25x, and within 2 % of the range."
                ),
                Entry("min_within_range", gate["min_within_range"]),
            ],
        ),
    ]
    return spec_writer.render(yolo.header(name, source_name, "Ultralytics depth"), tables)


def scaffold(
    name: str, target: Path, model_path: Path, labels: Path | None, head: str | None, size: tuple[int, int] | None, log: Log
) -> None:
    """Write the pipeline folder ``target`` for the depth export ``model_path`` (``size``: ``--imgsz``, parsed)."""
    if head is not None or labels is not None:
        raise BuildError(f"{'--head' if head is not None else '--labels'}: {model_path.name} is an Ultralytics depth model (no classes)")
    model = inspect(model_path, size)
    log(f"{model_path.name}: depth model, input {model.height}x{model.width}{', Ultralytics metadata' if model.ultralytics else ''}")
    passes, max_batch = batch_passes(model, model_path, log)
    target.mkdir(parents=True)
    shutil.copy2(model_path, target / yolo.MODEL_FILE)
    spec = spec_text(name, model, model_path.name, sha256_file(target / yolo.MODEL_FILE), passes, max_batch)
    for relative, text in yolo.folder_files(name, spec, None).items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
