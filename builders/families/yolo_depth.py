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

import functools
from pathlib import Path

from builders import BuildError, Log, spec_writer
from builders.families import yolo, yolo_dense
from builders.families.yolo_dense import DenseModel
from builders.spec_writer import Entry, Table
from vision_serving.queue_policy import MIN_QUEUE_SIZE
from vision_serving.tasks import depth

TASK = "depth"  # Ultralytics' metadata
SUPPORTED = "one float32 [N, 1, H, W] depth output at the input's size (Ultralytics' depth export)"


def inspect(path: Path, imgsz: tuple[int, int] | None = None) -> DenseModel:
    """What the depth export ``path`` is, or ``UnsupportedModel`` in one line."""
    return yolo_dense.inspect(path, imgsz, "depth", SUPPORTED, ("float32",))


def spec_text(name: str, model: DenseModel, source_name: str, sha256: str, passes: list[str], max_batch: int) -> str:
    """The pipeline's ``pipeline.toml``: the depth task with Ultralytics' DepthPredictor's preprocessing (LetterBox with
    scale_fill: the whole photo onto the input)."""
    queue = max(MIN_QUEUE_SIZE, 2 * max_batch)
    gate = depth.TASK.gate_defaults
    description = f"Ultralytics depth model, {model.height}x{model.width} input (from {source_name})"
    tables = [
        Table("", [Entry("description", description), Entry("task", depth.TASK.name), Entry("max_batch_size", max_batch)]),
        yolo.letterbox_table(model.height, model.width, "yolo_stretch"),
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
    yolo_dense.write_folder(name, target, model_path, model, functools.partial(spec_text, name, model, model_path.name), None, log)
