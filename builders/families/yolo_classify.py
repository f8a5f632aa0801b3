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

from builders import BuildError, Log
from builders.artifacts import sha256_file
from builders.families import yolo
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
    type_fixes: tuple[str, ...] = ()

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
    import onnx

    if not path.is_file():
        raise BuildError(f"--model {path}: no such file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as error:  # protobuf's DecodeError and friends
        raise yolo.UnsupportedModel(f"{path}: not an ONNX model ({type(error).__name__})") from None
    found = {prop.key: prop.value for prop in model.metadata_props}
    initializers = {item.name for item in model.graph.initializer}
    inputs = [item for item in model.graph.input if item.name not in initializers]
    outputs = list(model.graph.output)
    if len(inputs) != 1:
        raise yolo.UnsupportedModel(
            f"{path.name} has {len(inputs)} inputs ({', '.join(i.name for i in inputs)}); supported: one image input"
        )
    source = inputs[0]
    in_shape = yolo._dims(source)
    in_type = yolo._dtype_name(source.type.tensor_type.elem_type)
    if in_type != "float32" or len(in_shape) != 4 or in_shape[1] != 3:
        raise yolo.UnsupportedModel(
            f"{path.name}: input '{source.name}' is {in_type} {list(in_shape)}; supported: a float32 [N, 3, H, W] image (NCHW)"
        )
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
        type_fixes=yolo._type_fixes(model, path.name),
    )


def batch_passes(model: ClassifyModel, path: Path, log: Log) -> tuple[list[str], int]:
    """The fix passes and max_batch_size, as :func:`builders.families.yolo.batch_passes` finds them for a detector.

    It reads the input's size, the batch and the type fixes; its probe's core config names the outputs by a detection
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
        type_fixes=model.type_fixes,
        static_size=model.static_size,
    )
    return yolo.batch_passes(stand_in, path, log)


# --------------------------------------------------------------------------- the files


def _names(model: ClassifyModel) -> tuple[str, str]:
    """The core's output and the postprocess's input: named for what they hold."""
    return ("probabilities", "PROBABILITIES") if model.scores == "probabilities" else ("logits", "LOGITS")


def _preprocess_parameters(model: ClassifyModel) -> dict[str, str]:
    """Ultralytics' classify_transforms as its predictor runs them (see the module), then yolo's limits and sizing."""
    resize = (
        {"resize": "center_crop", "resize_shorter_side": str(model.height)}  # torchvision's Resize(int) + CenterCrop
        if model.square
        else {"resize": "stretch"}  # Resize((H, W)): the whole photo onto the tensor; CenterCrop keeps it
    )
    kept = {key: value for key, value in yolo.PREPROCESS_PARAMETERS.items() if key not in ("resize", "interpolation", "pad_value")}
    return {**kept, **resize, "interpolation": "pil_bilinear", "decode_oversampling": "0"}


def _core_io(model: ClassifyModel) -> dict[str, Any]:
    core_output, _ = _names(model)
    return {
        "input": [yolo._tensor("images", "TYPE_UINT8", [3, model.height, model.width])],
        "output": [yolo._tensor(core_output, "TYPE_FP32", [model.classes])],
    }


def _answers() -> list[dict[str, Any]]:
    """The classification task's outputs (the ensemble's and the postprocess model's)."""
    return [yolo._role_tensor(role) for role in classification.OUTPUTS]


def _requests() -> list[dict[str, Any]]:
    """The per-request options (optional inputs of the ensemble and the postprocess): TOP_K."""
    return [yolo._role_tensor(role) for role in classification.INPUTS if not role.from_core]


def files(name: str, model: ClassifyModel, source_name: str, sha256: str, passes: list[str], max_batch: int) -> dict[str, str]:
    """Every text file of the pipeline folder, by its path in the folder."""
    header = f"# Written by `python -m builders new-pipeline {name} --from yolo` for {source_name} (Ultralytics classify)."
    queue = max(16, 2 * max_batch)
    return yolo.folder_files(
        name,
        _recipe(header, name, model, source_name, sha256, passes),
        {
            name: _ensemble_config(header, name, model, max_batch),
            f"{name}_preprocess": _preprocess_config(header, name, model, max_batch),
            f"{name}_core": _core_config_file(header, name, model, max_batch, queue),
            f"{name}_postprocess": _postprocess_config(header, name, model, max_batch, queue),
        },
        model.names,
    )


def _recipe(header: str, name: str, model: ClassifyModel, source_name: str, sha256: str, passes: list[str]) -> str:
    """pipeline.toml: the ONNX source, its fix passes, package photos for calibration and the gate."""
    gate = classification.TASK.gate_defaults
    return f"""{header}
# The build recipe (python -m builders ... --pipeline {name}); tensors and preprocessing live in the configs beside it.
description = "Ultralytics classifier, {model.classes} classes, {model.height}x{model.width} input (from {source_name})"

[source]
kind = "onnx"
path = "{yolo.MODEL_FILE}"
sha256 = "{sha256}"

[fix]
# stable_io_names gives the model's input and output the configs' names; a static batch of 1 is made dynamic.
passes = {passes!r}

[quantize]
# INT8 calibration and the precision gate's held-out photos: package photos by default. For a classifier of your
# own classes, calibrate on your images (`python -m builders quantize --pipeline {name} --calibration-dir DIR`) and
# measure on labelled ones (`python -m builders evaluate --pipeline {name} --dataset DIR`, a folder per class).
calibration_photos = ["astronaut", "brick", "china", "clock_motion", "flower", "grass", "page", "retina"]
evaluation_photos = ["camera", "chelsea", "coffee", "motorcycle_left", "rocket"]
exclude = []
samples = 128
method = "entropy"

[gate]
# FP32 against each lower precision on the evaluation photos: top-1 agreement, top-5 overlap, the scores' cosine.
min_top1 = {gate["min_top1"]}
min_top5 = {gate["min_top5"]}
min_cosine = {gate["min_cosine"]}

[golden]
"""


def _ensemble_config(header: str, name: str, model: ClassifyModel, max_batch: int) -> str:
    """The ensemble clients call: image bytes and TOP_K in, the top-k labels, scores and class ids out."""
    core_output, post_input = _names(model)
    answers = [item["name"] for item in _answers()]
    requests = [item["name"] for item in _requests()]

    def step(model_name: str, inputs: dict[str, str], outputs: dict[str, str]) -> dict[str, Any]:
        return {"model_name": model_name, "model_version": -1, "input_map": inputs, "output_map": outputs}

    steps = [
        step(f"{name}_preprocess", {"IMAGE": "IMAGE"}, {"PIXELS": "pixels"}),
        step(f"{name}_core", {"images": "pixels"}, {core_output: core_output}),
        step(f"{name}_postprocess", {post_input: core_output, **{key: key for key in requests}}, {key: key for key in answers}),
    ]
    return yolo._config(
        f"{header}\n# The classifier clients call: encoded image bytes in (and an optional TOP_K); the top-k labels, scores "
        "(probabilities)\n# and class ids out, best first.",
        name=name,
        platform="ensemble",
        max_batch_size=max_batch,
        input=[yolo._tensor("IMAGE", "TYPE_STRING", [1]), *_requests()],
        output=_answers(),
        ensemble_scheduling={"step": steps},
    )


def _preprocess_config(header: str, name: str, model: ClassifyModel, max_batch: int) -> str:
    """Decode and Ultralytics' classify transforms, the pixels handed over as UINT8."""
    resize = (
        f"the shorter side resized to {model.height}, the centre {model.height}x{model.width} cut"
        if model.square
        else f"the whole photo resized to {model.height}x{model.width}"
    )
    return yolo._config(
        f"{header}\n# Decode at full size, validate, then Ultralytics' classify transforms as its predictor runs them "
        f"(classify_transforms):\n# {resize} by Pillow's bilinear filter (antialiased, as torchvision's Resize on a PIL "
        "image), RGB,\n# NCHW, handed over as UINT8: the / 255 (std below; Ultralytics' mean 0, std 1) is folded into the "
        "core's graph.",
        name=f"{name}_preprocess",
        backend="python",
        max_batch_size=max_batch,
        input=[yolo._tensor("IMAGE", "TYPE_STRING", [1])],
        output=[yolo._tensor("PIXELS", "TYPE_UINT8", [3, model.height, model.width])],
        parameters={**_preprocess_parameters(model), **yolo.DRIFT_PARAMETERS},
        dynamic_batching=yolo._batching(0, 16),
        instance_group=yolo._instances("KIND_CPU", 2),
    )


def _postprocess_config(header: str, name: str, model: ClassifyModel, max_batch: int, queue: int) -> str:
    """The classification task: the top k of the model's scores (a softmax first when they are logits)."""
    _, post_input = _names(model)
    parameters = {
        "task": "classification",
        "scores": model.scores,
        "top_k": str(model.top_k),
        "labels_file": yolo.LABELS_FILE,
        "cpu_share": "0.5",
        "max_instances": "8",
    }
    what = "probabilities (the softmax is in the model)" if model.scores == "probabilities" else "logits (softmax here)"
    return yolo._config(
        f"{header}\n# The classification task (vision_serving/tasks/classification.py): the core's {what} -> the top k\n"
        f"# labels, scores and class ids (k {model.top_k} unless a request sends TOP_K).",
        name=f"{name}_postprocess",
        backend="python",
        max_batch_size=max_batch,
        input=[yolo._tensor(post_input, "TYPE_FP32", [model.classes]), *_requests()],
        output=_answers(),
        parameters={**parameters, **yolo.DRIFT_PARAMETERS},
        dynamic_batching=yolo._batching(0, queue),
        instance_group=yolo._instances("KIND_CPU", 1),
    )


def _core_config_file(header: str, name: str, model: ClassifyModel, max_batch: int, queue: int) -> str:
    """The production core: a TensorRT plan, warmed up at batch 1 and the max batch."""
    zeros = {"data_type": "TYPE_UINT8", "dims": [3, model.height, model.width], "zero_data": True}
    warmup = [{"name": f"zeros_batch_{size}", "batch_size": size, "inputs": {"images": zeros}} for size in sorted({1, max_batch})]
    return yolo._config(
        f"{header}\n# The production core: a TensorRT plan on the GPU, built on the node by `python -m builders build-engine` "
        "from the\n# precision the ladder chose. Without a GPU, `--model-config-name=cpu` serves configs/cpu.pbtxt (the same "
        "tensors).",
        name=f"{name}_core",
        platform="tensorrt_plan",
        max_batch_size=max_batch,
        **_core_io(model),
        dynamic_batching=yolo._batching(0, queue),
        instance_group=yolo._instances("KIND_GPU", 1),
        model_warmup=warmup,
    )


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
