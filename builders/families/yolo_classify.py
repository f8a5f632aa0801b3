"""``new-pipeline NAME --from yolo --model PATH.onnx`` for an Ultralytics classify export: a complete classification pipeline.

An export whose metadata says ``task: classify`` (YOLOv8n-cls and its kin: ``model.export(format="onnx")``)
is one float32 ``images`` input ``[N, 3, H, W]`` and one ``[N, C]`` output holding the class
probabilities (the softmax is in the graph), with ``names`` and ``imgsz`` in its metadata.
:mod:`builders.scaffold` hands such a file here (:func:`is_classify` reads only the
file's metadata). What the model is comes from the file:

- the classes: its ``names`` (or ``--labels``), as many as the output's ``C``;
- the scores: ``probabilities`` when the output is a Softmax's (Ultralytics' exports), else
  ``logits`` (the postprocess applies the softmax);
- the batch and the input size as for a detector (:mod:`builders.families.yolo`): a dynamic batch
  served as is, its height and width fixed at ``imgsz``; a static batch of 1 made dynamic where
  the graph allows it, else batch 1.

It writes the pipeline folder: the model (pinned by sha256 in the recipe), the labels, the recipe,
the ensemble (image bytes and an optional ``TOP_K`` in; labels, scores and class ids out), and its
preprocess, core (TensorRT plan; onnxruntime and OpenVINO variants on CPU) and postprocess (the
classification task, :mod:`vision_serving.tasks.classification`, top 5 by default). The preprocess
is Ultralytics' classify predictor's (``classify_transforms``): the photo decoded at full size,
Pillow's antialiased bilinear ``Resize`` of its shorter side to the model's size and ``CenterCrop``
(a non-square size: the whole photo resized to it), RGB, ``/ 255`` (Ultralytics' default mean 0 and
std 1), NCHW; its answers are the predictor's (top-5 equal, scores within 1e-4:
tests/onnx/builders/test_families_yolo_classify.py).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from builders import BuildError, Log, spec_writer
from builders.artifacts import sha256_file
from builders.families import yolo
from builders.spec_writer import Entry, Table
from vision_serving.queue_policy import MIN_QUEUE_SIZE
from vision_serving.tasks import classification

TASK = "classify"  # Ultralytics' metadata
TOP_K = 5  # the postprocess's default k (at most the class count)
SUPPORTED = "one float32 [N, C] output of class scores (Ultralytics' classify export)"
# ModelProto's field numbers (onnx.proto) and the protobuf wire types the walk over the file meets.
METADATA_FIELD = 14
VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5


@dataclass(frozen=True)
class ClassifyModel:
    input_name: str
    height: int
    width: int
    output_name: str
    names: tuple[str, ...]
    scores: str  # what the output holds: "probabilities" (a Softmax's) or "logits"
    static_batch: bool  # the batch dim is fixed in the file (1, or export(batch=B)'s B)
    static_size: bool  # the input's height and width are fixed in the file (else dynamic=True: fixed by batch_dimension)
    ultralytics: bool  # the export carries Ultralytics' metadata

    @property
    def classes(self) -> int:
        return len(self.names)

    @property
    def top_k(self) -> int:
        return min(TOP_K, self.classes)

    @property
    def square(self) -> bool:
        return self.height == self.width


# --------------------------------------------------------------------------- what the file is


def _varint(handle: BinaryIO) -> int | None:
    """A protobuf varint from ``handle``; None at the end of the file."""
    value, shift = 0, 0
    while True:
        byte = handle.read(1)
        if not byte:
            return None
        value |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return value
        shift += 7
        if shift > 63:
            raise ValueError("a varint longer than 10 bytes")


def metadata(path: Path) -> dict[str, str]:
    """An ONNX file's ``metadata_props``, read without parsing its graph: the file's top-level protobuf fields are walked
    and every one but the metadata entries skipped (a YOLO's weights are never read). Empty for a file that is not a
    protobuf message."""
    import onnx

    found: dict[str, str] = {}
    try:
        with open(path, "rb") as handle:
            size = path.stat().st_size
            while handle.tell() < size:
                tag = _varint(handle)
                if tag is None:
                    break
                field, wire = tag >> 3, tag & 7
                if wire == VARINT:
                    _varint(handle)
                elif wire in (FIXED64, FIXED32):
                    handle.seek(8 if wire == FIXED64 else 4, 1)
                elif wire == LENGTH_DELIMITED:
                    length = _varint(handle)
                    if length is None or handle.tell() + length > size:
                        return {}
                    if field == METADATA_FIELD:
                        entry = onnx.StringStringEntryProto.FromString(handle.read(length))
                        found[entry.key] = entry.value
                    else:
                        handle.seek(length, 1)
                else:
                    return {}
    except Exception:  # OSError, a bad varint, protobuf's DecodeError: not an ONNX file (yolo.inspect says so)
        return {}
    return found


def is_classify(path: Path) -> bool:
    """Whether ``path`` is an Ultralytics classify export (its metadata's ``task``), from its metadata alone."""
    return path.is_file() and metadata(path).get("task") == TASK


def _producer(model: Any, tensor: str) -> str:
    """The op type of the node that writes ``tensor`` (empty for a graph input or an initializer)."""
    return next((node.op_type for node in model.graph.node if tensor in node.output), "")


def inspect(path: Path, labels: Path | None = None, imgsz: tuple[int, int] | None = None) -> ClassifyModel:
    """What the classify export ``path`` is, or ``UnsupportedModel`` in one line."""
    export = yolo.load_export(path)
    model, found, source, in_shape, outputs = export.model, export.metadata, export.source, export.in_shape, export.outputs
    if len(outputs) != 1:
        raise yolo.UnsupportedModel(
            f"{path.name} is a classify model with {len(outputs)} outputs ({', '.join(o.name for o in outputs)}); supported: {SUPPORTED}"
        )
    (output,) = outputs
    out_type = yolo._dtype_name(output.type.tensor_type.elem_type)
    size = imgsz or yolo._size(found, in_shape, path.name)
    out_shape = yolo._resolved(model, 0, yolo._dims(output), size)
    if out_type != "float32" or len(out_shape) != 2 or not (isinstance(out_shape[1], int) and out_shape[1] > 0):
        raise yolo.UnsupportedModel(f"{path.name}: output '{output.name}' is {out_type} {list(out_shape)}; supported: {SUPPORTED}")
    classes = int(out_shape[1])
    names = yolo._names(found, labels)
    if not names:
        raise yolo.UnsupportedModel(f"{path.name}: the model has no class names (no 'names' metadata): pass --labels FILE (one per line)")
    if len(names) != classes:
        where = f"--labels {labels}" if labels is not None else "its 'names' metadata"
        raise yolo.UnsupportedModel(f"{path.name}: output '{output.name}' scores {classes} classes, {where} names {len(names)}")
    return ClassifyModel(
        input_name=source.name,
        height=size[0],
        width=size[1],
        output_name=output.name,
        names=names,
        scores="probabilities" if _producer(model, output.name) == "Softmax" else "logits",
        static_batch=isinstance(in_shape[0], int) and in_shape[0] > 0,  # export(batch=B): made dynamic like a batch of 1
        static_size=all(isinstance(d, int) and d > 0 for d in in_shape[2:]),
        ultralytics="imgsz" in found,
    )


def batch_passes(model: ClassifyModel, path: Path, log: Log) -> tuple[list[str], int]:
    """The fix passes and max_batch_size, as :func:`builders.families.yolo.batch_passes` finds them for a detector.

    It reads the input's size and the batch; its probe's core config names the outputs by a detection
    head's roles, which do not change what the probe finds: a stand-in detector with this model's output gives them."""
    stand_in = yolo.YoloModel(
        input_name=model.input_name,
        height=model.height,
        width=model.width,
        output_names=(model.output_name,),
        output_shapes=((1 if model.static_batch else "batch", model.classes),),
        head="yolo",
        names=model.names,
        static_batch=model.static_batch,
        ultralytics=model.ultralytics,
        static_size=model.static_size,
    )
    return yolo.batch_passes(stand_in, path, log)


# --------------------------------------------------------------------------- the spec


def _resize(model: ClassifyModel) -> list[Entry]:
    """Ultralytics' classify_transforms as its predictor runs them (see the module)."""
    if model.square:  # torchvision's Resize(int) + CenterCrop
        return [Entry("resize", "center_crop"), Entry("resize_shorter_side", model.height)]
    return [Entry("resize", "stretch")]  # Resize((H, W)): the whole photo onto the tensor; CenterCrop keeps it


def _transforms(model: ClassifyModel) -> Table:
    """Ultralytics' classify transforms as its predictor runs them (classify_transforms)."""
    return Table(
        "preprocess",
        [
            Entry("layout", "NCHW"),
            Entry("color_order", "RGB"),
            *_resize(model),
            Entry("interpolation", "pil_bilinear", "Pillow's bilinear filter, antialiased, as torchvision's Resize on a PIL image."),
            Entry("decode_oversampling", 0, "Every photo decoded at its full size, as the predictor decodes it."),
            Entry("mean", [0, 0, 0], "/ 255 (Ultralytics' mean 0, std 1), folded into the core's graph."),
            Entry("std", [255, 255, 255]),
            Entry("instances", 2),
        ],
        ["Ultralytics' classify transforms as its predictor runs them (classify_transforms)."],
    )


def spec_text(name: str, model: ClassifyModel, source_name: str, sha256: str, passes: list[str], max_batch: int) -> str:
    """The pipeline's ``pipeline.toml``: the classification task with Ultralytics' classify preprocessing."""
    queue = max(MIN_QUEUE_SIZE, 2 * max_batch)
    gate = classification.TASK.gate_defaults
    what = "probabilities (the softmax is in the model)" if model.scores == "probabilities" else "logits (softmax in the postprocess)"
    description = f"Ultralytics classifier, {model.classes} classes, {model.height}x{model.width} input (from {source_name})"
    tables = [
        Table("", [Entry("description", description), Entry("task", "classification"), Entry("max_batch_size", max_batch)]),
        _transforms(model),
        Table(
            "core",
            [
                Entry("inputs", [{"name": "images", "datatype": "UINT8", "dims": [3, model.height, model.width]}]),
                Entry("outputs", [{"name": model.scores, "datatype": "FP32", "dims": [model.classes]}], f"The class {what}."),
                Entry("max_queue_size", queue),
            ],
        ),
        Table(
            "postprocess",
            [
                Entry("scores", model.scores),
                Entry("top_k", model.top_k, "k unless a request sends TOP_K."),
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
            "a folder per class",
            [
                Entry(
                    "min_top1", gate["min_top1"], "FP32 against each lower precision: top-1 agreement, top-5 overlap, the scores' cosine."
                ),
                Entry("min_top5", gate["min_top5"]),
                Entry("min_cosine", gate["min_cosine"]),
            ],
        ),
    ]
    return spec_writer.render(yolo.header(name, source_name, "Ultralytics classify"), tables)


def files(name: str, model: ClassifyModel, source_name: str, sha256: str, passes: list[str], max_batch: int) -> dict[str, str]:
    """Every text file of the pipeline folder, by its path in the folder."""
    return yolo.folder_files(name, spec_text(name, model, source_name, sha256, passes, max_batch), model.names)


def scaffold(
    name: str, target: Path, model_path: Path, labels: Path | None, head: str | None, size: tuple[int, int] | None, log: Log
) -> None:
    """Write the pipeline folder ``target`` for the classify export ``model_path`` (``size``: ``--imgsz``, parsed)."""
    if head is not None:
        raise BuildError(f"--head {head!r}: {model_path.name} is an Ultralytics classify model; --head names a detector's output format")
    model = inspect(model_path, labels, size)
    shown = ", ".join(model.names[:5]) + (", ..." if model.classes > 5 else "")
    log(
        f"{model_path.name}: classifier ({model.scores}), {model.classes} classes ({shown}), input {model.height}x{model.width}"
        f"{', Ultralytics metadata' if model.ultralytics else ''}"
    )
    passes, max_batch = batch_passes(model, model_path, log)
    target.mkdir(parents=True)
    shutil.copy2(model_path, target / yolo.MODEL_FILE)
    for relative, text in files(name, model, model_path.name, sha256_file(target / yolo.MODEL_FILE), passes, max_batch).items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
