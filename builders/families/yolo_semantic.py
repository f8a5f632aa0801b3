"""``new-pipeline NAME --from yolo --model PATH.onnx`` for an Ultralytics semantic export: a semantic segmentation
pipeline.

An export whose metadata says ``task: semantic`` (YOLO26-sem: ``model.export(format="onnx")``, static or
``dynamic=True``) is one float32 ``images`` input ``[N, 3, H, W]`` and one uint8 output ``[N, H, W]``: the class of every
pixel of the input (the head's logits upsampled and reduced by an ArgMax in the graph; a uint8 map holds up to 256
classes, and Ultralytics exports no other for ONNX). What the model is comes from the file: its classes (``names``, or
``--labels``), its input size and its batch, made dynamic as a detector's is. The preprocess is Ultralytics'
``SemanticSegmentationPredictor``'s: LetterBox (``yolo_letterbox``, padding 114), RGB, ``/ 255``, NCHW; the postprocess is
the semantic segmentation task (:mod:`vision_serving.tasks.semantic_segmentation`): the padding cut away and the map
resized to the photo by nearest neighbour, as the predictor does. Its maps equal the predictor's
(tests/onnx/builders/test_families_yolo_semantic.py).
"""

from __future__ import annotations

import functools
from pathlib import Path

from builders import BuildError, Log, spec_writer
from builders.families import yolo, yolo_dense
from builders.families.yolo_dense import DenseModel
from builders.spec_writer import Entry, Table
from vision_serving.queue_policy import MIN_QUEUE_SIZE
from vision_serving.tasks import semantic_segmentation

TASK = "semantic"  # Ultralytics' metadata
SUPPORTED = "one uint8 [N, H, W] class map at the input's size (Ultralytics' semantic export, up to 256 classes)"


def inspect(path: Path, labels: Path | None = None, imgsz: tuple[int, int] | None = None) -> DenseModel:
    """What the semantic export ``path`` is, or ``UnsupportedModel`` in one line."""
    model = yolo_dense.inspect(path, imgsz, "semantic", SUPPORTED, ("uint8",), labels)
    if len(model.names) < 2:
        found = f"{len(model.names)} class name{'s' if len(model.names) != 1 else ''}"
        raise yolo.UnsupportedModel(
            f"{path.name}: {found} (no 'names' metadata, or one class); supported: 2 to 256 classes (--labels FILE)"
        )
    return model


def spec_text(name: str, model: DenseModel, source_name: str, sha256: str, passes: list[str], max_batch: int) -> str:
    """The pipeline's ``pipeline.toml``: the semantic segmentation task with Ultralytics' LetterBox."""
    queue = max(MIN_QUEUE_SIZE, 2 * max_batch)
    gate = semantic_segmentation.TASK.gate_defaults
    description = f"Ultralytics semantic segmenter, {len(model.names)} classes, {model.height}x{model.width} input (from {source_name})"
    tables = [
        Table(
            "",
            [Entry("description", description), Entry("task", semantic_segmentation.TASK.name), Entry("max_batch_size", max_batch)],
        ),
        yolo.letterbox_table(model.height, model.width, "yolo_letterbox"),
        Table(
            "core",
            [
                Entry("inputs", [{"name": "images", "datatype": "UINT8", "dims": [3, model.height, model.width]}]),
                Entry(
                    "outputs", [{"name": "classes", "datatype": "UINT8", "dims": list(model.output_dims)}], "The class of each input pixel."
                ),
                Entry("max_queue_size", queue),
            ],
        ),
        Table(
            "postprocess",
            [
                Entry("labels_file", yolo.LABELS_FILE, "One class name a line, in class-id order."),
                Entry("cpu_share", 0.5),
                Entry("max_queue_size", queue),
            ],
        ),
        *yolo.recipe_tables(
            name,
            source_name,
            sha256,
            passes,
            f"a photo and its <name>{semantic_segmentation.CLASSES_SUFFIX} each",
            [
                Entry("min_pixel_agreement", gate["min_pixel_agreement"], "FP32 against each lower precision: pixels of the same class,"),
                Entry("min_mean_iou", gate["min_mean_iou"], "and the mean IoU over the classes."),
            ],
        ),
    ]
    return spec_writer.render(yolo.header(name, source_name, "Ultralytics semantic segmentation"), tables)


def scaffold(
    name: str, target: Path, model_path: Path, labels: Path | None, head: str | None, size: tuple[int, int] | None, log: Log
) -> None:
    """Write the pipeline folder ``target`` for the semantic export ``model_path`` (``size``: ``--imgsz``, parsed)."""
    if head is not None:
        raise BuildError(f"--head {head!r}: {model_path.name} is an Ultralytics semantic model; --head names a detector's output format")
    model = inspect(model_path, labels, size)
    shown = ", ".join(model.names[:5]) + (", ..." if len(model.names) > 5 else "")
    log(
        f"{model_path.name}: semantic segmenter, {len(model.names)} classes ({shown}), input {model.height}x{model.width}"
        f"{', Ultralytics metadata' if model.ultralytics else ''}"
    )
    spec = functools.partial(spec_text, name, model, model_path.name)
    yolo_dense.write_folder(name, target, model_path, model, spec, model.names, log)
