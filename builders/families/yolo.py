"""``new-pipeline NAME --from yolo --model PATH.onnx``: a complete detection pipeline for a YOLO ONNX export.

What the model is comes from the file itself:

- the metadata Ultralytics writes into its ONNX exports (``names``, ``imgsz``, ``stride``,
  ``task``, ``end2end``, ``batch``), else the input and output shapes and ``--labels``;
- the head: the first of the registry's heads a YOLO export may carry
  (:mod:`vision_serving.tasks.detection_heads`, ``yolo_export``) whose ``fits`` takes the output's
  shape and class count (``yolo`` for ``[N, 4 + C, A]``, ``yolo_v5`` for ``[N, A, 5 + C]``,
  ``end2end`` for ``[N, K, 6]`` with NMS inside, which Ultralytics' metadata says for its
  ``nms=True`` and NMS-free exports); ``--head`` settles a shape that fits two;
- the batch: a dynamic batch dim is served as is (``dynamic=True``: its height and width are fixed
  at ``imgsz`` by ``batch_dimension``, the output dims the export left symbolic inferred from them);
  a static batch of 1 (Ultralytics' default ``dynamic=False``) is made dynamic by the
  ``batch_dimension`` pass where the graph allows it (tried here, on onnxruntime: a batch of 2 must
  give what its images give one by one), else the pipeline serves batch 1 (``max_batch_size`` 1);
  an ``nms=True`` export serves the batch its NMS loop was unrolled for (``batch``, 1 by default);
- the fix passes for what TensorRT refuses in the export's types, as ``check`` names them
  (NonZero on BOOL, Clip on INT64).

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

from builders import BuildError, Log
from builders.artifacts import sha256_file
from vision_serving import cpu_runtimes, layout
from vision_serving.tasks import detection
from vision_serving.tasks.detection_heads import registry as detection_heads

# The heads a YOLO detector's export may carry, and the formats they read, from the head registry.
HEADS = tuple(head.name for head in detection_heads.yolo_export_heads("detect"))


def formats(task: str = "detect") -> str:
    """The output formats of ``task``'s heads, for a refusal."""
    return ", ".join(f"{head.name} [N, {head.layout[1:]} ({head.exports})" for head in detection_heads.yolo_export_heads(task))


FORMATS = formats()
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
    # The fix passes for what TensorRT refuses in the export's types (builders.trt_compat's hints: NonZero on BOOL and
    # Clip on INT64 in Ultralytics' nms=True exports).
    type_fixes: tuple[str, ...] = ()
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
    """The head of the outputs (the registry's heads of ``task`` that fit them), checked against the class count where
    it is known."""
    found = f"{where} {'has shape' if len(shapes) == 1 else 'have shapes'} {', '.join(str(list(shape)) for shape in shapes)}"
    supported = formats(task)
    if any(len(shape) < 3 or not all(isinstance(d, int) and d > 0 for d in shape[1:]) for shape in shapes):
        raise UnsupportedModel(f"{found}; supported: {supported}, with fixed sizes past the batch")
    per_image = [tuple(int(d) for d in shape[1:]) for shape in shapes]
    heads = detection_heads.yolo_export_heads(task)
    fits = {head.name: head.fits(per_image, classes) for head in heads}
    if forced is not None:
        if forced not in fits:
            raise UnsupportedModel(f"--head {forced!r} is not one of {', '.join(fits)}")
        if not fits[forced]:
            raise UnsupportedModel(f"{found}, which is not --head {forced}; supported: {supported}")
        return forced
    if metadata.get("end2end", "").lower() == "true" or _exported_with_nms(metadata):
        in_model = [head.name for head in heads if head.nms_in_model and fits[head.name]]
        if in_model:
            return in_model[0]
        raise UnsupportedModel(f"{found} but its metadata says NMS is in the model (end2end); supported: {supported}")
    candidates = [name for name, fit in fits.items() if fit]
    if not candidates:
        detail = f" for its {classes} classes" if classes else ""
        raise UnsupportedModel(f"{found}, which is none of the supported formats{detail}: {supported}")
    if len(candidates) > 1:
        raise UnsupportedModel(f"{found}, which fits {' and '.join(candidates)}: pass --head")
    if classes is None and not detection_heads.head_class(candidates[0]).nms_in_model:
        raise UnsupportedModel(f"{found} and no class names (no Ultralytics metadata): pass --labels FILE (one label per line)")
    return candidates[0]


def _head_parameters(task: str, metadata: dict[str, str], where: str) -> tuple[tuple[str, str], ...]:
    """What a task's head needs from the metadata: a pose model's keypoint shape (``kpt_shape``) and names (``kpt_names``)."""
    if task != "pose":
        return ()
    try:
        shape = ast.literal_eval(metadata.get("kpt_shape", ""))
    except (ValueError, SyntaxError):
        shape = None
    if not isinstance(shape, list | tuple) or len(shape) != 2:
        raise UnsupportedModel(
            f"{where}: a pose model's metadata must give kpt_shape [keypoints, 2 or 3], got {metadata.get('kpt_shape')!r}"
        )
    parameters = [("keypoint_shape", f"{int(shape[0])},{int(shape[1])}")]
    try:
        names = ast.literal_eval(metadata.get("kpt_names", "None"))
    except (ValueError, SyntaxError):
        names = None
    if isinstance(names, dict):  # Ultralytics writes {class id: [names]}: one list for the keypoints of every class
        names = next(iter(names.values()), None)
    if isinstance(names, list | tuple) and len(names) == int(shape[0]):
        parameters.append(("keypoint_names", ",".join(str(name).replace(",", " ") for name in names)))
    return tuple(parameters)


def _exported_with_nms(metadata: dict[str, str]) -> bool:
    """Ultralytics' ``export(nms=True)``: its ``args`` metadata records it (``end2end`` stays False)."""
    try:
        args = ast.literal_eval(metadata.get("args", "{}"))
    except (ValueError, SyntaxError):
        return False
    return isinstance(args, dict) and args.get("nms") is True


def inspect(path: Path, labels: Path | None = None, head: str | None = None, imgsz: tuple[int, int] | None = None) -> YoloModel:
    """What ``path`` is, or ``UnsupportedModel`` in one line."""
    import onnx

    if not path.is_file():
        raise BuildError(f"--model {path}: no such file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as error:  # protobuf's DecodeError and friends
        raise UnsupportedModel(f"{path}: not an ONNX model ({type(error).__name__})") from None
    metadata = {prop.key: prop.value for prop in model.metadata_props}
    task = metadata.get("task", "detect")
    if task not in detection_heads.yolo_tasks():
        tasks = ", ".join(f"'{name}'" for name in detection_heads.yolo_tasks())
        raise UnsupportedModel(f"{path.name} is an Ultralytics '{task}' model; supported: {tasks} models")
    initializers = {item.name for item in model.graph.initializer}
    inputs = [item for item in model.graph.input if item.name not in initializers]
    outputs = list(model.graph.output)
    if len(inputs) != 1:
        raise UnsupportedModel(f"{path.name} has {len(inputs)} inputs ({', '.join(i.name for i in inputs)}); supported: one image input")
    source = inputs[0]
    in_shape = _dims(source)
    in_type = _dtype_name(source.type.tensor_type.elem_type)
    if in_type != "float32" or len(in_shape) != 4 or in_shape[1] != 3:
        raise UnsupportedModel(
            f"{path.name}: input '{source.name}' is {in_type} {list(in_shape)}; supported: a float32 [N, 3, H, W] image (NCHW)"
        )
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
        type_fixes=_type_fixes(model, path.name),
        unrolled_batch=_unrolled_batch(metadata, in_shape),
        task=task,
        head_parameters=_head_parameters(task, metadata, path.name),
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


def _type_fixes(model: Any, name: str) -> tuple[str, ...]:
    """The passes ``check`` names for the export's unsupported types, in the registry's order."""
    from builders import trt_compat
    from builders.passes import registry

    report = trt_compat.check_model(model, name=name)
    hinted = {fix for finding in report.findings if finding.code == "unsupported-dtype" for fix in finding.fix}
    return tuple(name for name in registry.DEFAULT_PASSES if name in hinted)


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


def batch_passes(model: YoloModel, path: Path, log: Log) -> tuple[list[str], int]:
    """The fix passes and max_batch_size: a dynamic batch as is; a static batch of 1 made dynamic when the
    fixed graph gives a batch of 2 what its images give one by one; else batch 1."""
    import onnx
    import onnxruntime

    from builders import fix_onnx
    from vision_serving.onnx_core import create_session

    onnxruntime.set_default_logger_severity(3)  # a graph the pass cannot batch fails below: its log would be noise
    cast = list(model.type_fixes)
    # A dynamic=True export: its height and width (and every shape that follows from them) fixed to the configs'.
    as_exported = [*cast, "stable_io_names", *([] if model.static_size else ["batch_dimension"])]
    if model.unrolled_batch is not None:
        log(
            f"the model's NMS was exported for batches of up to {model.unrolled_batch}: max_batch_size {model.unrolled_batch}"
            + ("" if model.unrolled_batch > 1 else "; export with dynamic=True, batch=B to serve batches of B")
        )
        return as_exported, model.unrolled_batch
    if not model.static_batch:
        return as_exported, MAX_BATCH
    core = _core_config(model, "probe", MAX_BATCH)
    options = fix_onnx.FixOptions.from_config(
        core, max_batch=MAX_BATCH, opt_batch=None, atol=fix_onnx.DEFAULT_ATOL, rtol=fix_onnx.DEFAULT_RTOL
    )
    try:
        fixed = fix_onnx.fix_model(onnx.load(str(path)), [*cast, *BATCH_PASSES], options, lambda _: None).model
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
            return [*cast, *BATCH_PASSES], MAX_BATCH
        reason = "a batch of 2 gives other answers than its images one by one"
    except Exception as error:  # a pass or onnxruntime refusing the rewritten graph
        reason = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
    if model.fixed_batch != 1:
        raise UnsupportedModel(
            f"its static batch of {model.fixed_batch} cannot be made dynamic ({reason}): export with batch=1 or dynamic=True"
        )
    log(f"the static batch of 1 cannot be made dynamic ({reason}): the pipeline serves batch 1; export with dynamic=True to batch")
    return [*cast, "stable_io_names"], 1


# --------------------------------------------------------------------------- the files


# Every config is a ModelConfig message (Triton's model_config.proto), written with protobuf's text format; the
# comments above each say what it is.
DRIFT_PARAMETERS = {
    "drift_enabled": "true",
    "drift_window": "512",
    "drift_min_samples": "128",
    "drift_update_every": "32",
    "drift_reference": "drift_reference.json",
}
DATA_TYPES = {"FP32": "TYPE_FP32", "INT32": "TYPE_INT32", "UINT8": "TYPE_UINT8", "BYTES": "TYPE_STRING"}


def _tensor(name: str, datatype: str, dims: Sequence[int | None], optional: bool = False) -> Any:
    """A ModelInput (or, without ``optional``, the same fields of a ModelOutput) as a dict for ``_config``."""
    item: dict[str, Any] = {"name": name, "data_type": datatype, "dims": [-1 if d is None else int(d) for d in dims]}
    if optional:
        item["optional"] = True
    return item


def _role_tensor(role: Any) -> dict[str, Any]:
    """A task's Role (what it reads or writes) as the tensor a config declares for it."""
    return _tensor(role.name or role.role.upper(), DATA_TYPES[role.datatype], role.dims or (), role.optional)


def _config(header: str, **fields: Any) -> str:
    """A ModelConfig from its fields (parameters as a plain dict of strings), in text format under ``header``."""
    from google.protobuf import json_format, text_format

    from vision_serving.protos.model_config_pb2 import ModelConfig

    parameters = fields.pop("parameters", None)
    if parameters is not None:
        fields["parameters"] = {key: {"string_value": str(value)} for key, value in parameters.items()}
    message = json_format.ParseDict(fields, ModelConfig())
    return f"{header}\n{text_format.MessageToString(message)}"


def _batching(delay_us: int, queue: int) -> dict[str, Any]:
    """The dynamic batcher: no delay unless asked, a bounded queue that rejects after 10 s (a request may ask sooner)."""
    return {
        "max_queue_delay_microseconds": delay_us,
        "default_queue_policy": {
            "timeout_action": "REJECT",
            "default_timeout_microseconds": 10_000_000,
            "allow_timeout_override": True,
            "max_queue_size": queue,
        },
    }


def _instances(kind: str, count: int) -> list[dict[str, Any]]:
    return [{"kind": kind, "count": count}]


# CPU variants of the core (the same tensors): name -> (what it is, backend fields, parameters, instances, queue delay).
# The Python backend's: every CPU runtime's configs (vision_serving.cpu_runtimes), no batcher delay; then Triton's own
# openvino backend (its batch padding wants a short delay).
CPU_VARIANTS: dict[str, tuple[str, dict[str, str], dict[str, str], int, int]] = {
    **{
        variant.name: (variant.about, {"backend": "python"}, dict(variant.parameters), variant.instances, 0)
        for runtime in cpu_runtimes.RUNTIMES.values()
        for variant in runtime.configs
    },
    "cpu_openvino_backend": ("The FP32 ONNX on Triton's own openvino backend (NVIDIA's server image)",
                             {"backend": "openvino", "default_model_filename": MODEL_FILE},
                             {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1", "INFERENCE_NUM_THREADS": "1", "ENABLE_BATCH_PADDING": "YES"},
                             2, 5000),
}  # fmt: skip


def _core_io(model: YoloModel) -> dict[str, Any]:
    """The core's tensors: the UINT8 image in, each output named for the head's role it fills."""
    return {
        "input": [_tensor("images", "TYPE_UINT8", [3, model.height, model.width])],
        "output": [_tensor(role, "TYPE_FP32", dims) for role, dims in zip(model.core_roles(), model.output_dims)],
    }


def _core_config(model: YoloModel, name: str, max_batch: int) -> Any:
    """The core's ModelConfig as the fix passes read it (names, dims, batch)."""
    from vision_serving import model_config

    return model_config.parse_config_text(
        _config("", name=f"{name}_core", platform="tensorrt_plan", max_batch_size=max_batch, **_core_io(model))
    )


def files(name: str, model: YoloModel, source_name: str, sha256: str, passes: list[str], max_batch: int) -> dict[str, str]:
    """Every text file of the pipeline folder, by its path in the folder."""
    header = f"# Written by `python -m builders new-pipeline {name} --from yolo` for {source_name} ({model.head} head)."
    queue = max(16, 2 * max_batch)
    return folder_files(
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


def folder_files(name: str, recipe: str, configs: dict[str, str], labels: Sequence[str]) -> dict[str, str]:
    """A pipeline folder's files: the recipe, each model's ``config.pbtxt`` (by model name), the labels beside the
    postprocess, the Python models' entry points, the ensemble's empty version folder and the core's CPU variants."""
    written = {layout.RECIPE_FILENAME: recipe, f"{name}/1/README": "Ensembles hold no files; Triton needs the version folder.\n"}
    written |= {f"{model}/config.pbtxt": text for model, text in configs.items()}
    written[f"{name}_postprocess/{LABELS_FILE}"] = "".join(f"{label}\n" for label in labels)
    for role in ("preprocess", "core", "postprocess"):
        written[f"{name}_{role}/1/model.py"] = (
            f'"""Triton entry point; the model lives in vision_serving.triton_models.{role} (shared by every pipeline)."""\n\n'
            f"from vision_serving.triton_models.{role} import TritonPythonModel  # noqa: F401\n"
        )
    written.update(cpu_variant_files(name, written[f"{name}_core/config.pbtxt"]))
    return written


def cpu_variant_files(name: str, core_config_text: str) -> dict[str, str]:
    """The core's CPU variants (``<name>_core/configs/<variant>.pbtxt``), generated from its config.pbtxt as
    ``python -m builders configs`` generates them (:mod:`vision_serving.config_variants`)."""
    from vision_serving import config_variants, model_config

    core = model_config.parse_config_text(core_config_text)
    return {f"{name}_core/{relative}": text for relative, text in config_variants.variant_files(core, name).items()}


def _thresholds() -> list[dict[str, Any]]:
    """The per-request thresholds (optional inputs of the ensemble and the postprocess)."""
    return [_role_tensor(role) for role in detection.REQUEST_ROLES]


def _geometry() -> list[dict[str, Any]]:
    """What the preprocess hands the postprocess to map boxes back to the photo."""
    return [_tensor("IMAGE_SIZE", "TYPE_INT32", [2]), _tensor("IMAGE_TRANSFORM", "TYPE_FP32", [4])]


def _answers(model: YoloModel) -> list[dict[str, Any]]:
    """The detection task's outputs with this head (the ensemble's and the postprocess model's)."""
    return [_role_tensor(role) for role in detection.answer_roles(model.head_instance())]


def _recipe(header: str, name: str, model: YoloModel, source_name: str, sha256: str, passes: list[str]) -> str:
    """pipeline.toml: the ONNX source, its fix passes, package photos for calibration and the gate."""
    return f"""{header}
# The build recipe (python -m builders ... --pipeline {name}); tensors and thresholds live in the configs beside it.
description = "{model.head} detector, {len(model.names)} classes, {model.height}x{model.width} input (from {source_name})"

[source]
kind = "onnx"
path = "{MODEL_FILE}"
sha256 = "{sha256}"
opset = 17

[fix]
# stable_io_names gives the model's input and output the configs' names; a static batch of 1 is made dynamic.
passes = {passes!r}

[quantize]
# INT8 calibration and the precision gate's held-out photos: package photos by default. For a detector of your
# own classes, calibrate on your images (`python -m builders quantize --pipeline {name} --calibration-dir DIR`) and
# measure on labelled ones (`python -m builders evaluate --pipeline {name} --dataset DIR`).
calibration_photos = ["astronaut", "brick", "china", "clock_motion", "flower", "grass", "page", "retina"]
evaluation_photos = ["camera", "chelsea", "coffee", "motorcycle_left", "rocket"]
exclude = []
samples = 128
method = "entropy"

[gate]
# FP32 against each lower precision, detections matched within each class by box IoU >= 0.5.
min_detection_agreement = 0.95
min_matched_iou = 0.90

[golden]
"""


def _ensemble_config(header: str, name: str, model: YoloModel, max_batch: int) -> str:
    """The ensemble clients call: image bytes and thresholds in, the detections out."""
    answers = [item["name"] for item in _answers(model)]
    thresholds = [item["name"] for item in _thresholds()]
    roles = model.core_roles()

    def step(model_name: str, inputs: dict[str, str], outputs: dict[str, str]) -> dict[str, Any]:
        return {"model_name": model_name, "model_version": -1, "input_map": inputs, "output_map": outputs}

    geometry = {"IMAGE_SIZE": "image_size", "IMAGE_TRANSFORM": "image_transform"}
    steps = [
        step(f"{name}_preprocess", {"IMAGE": "IMAGE"}, {"PIXELS": "pixels", **geometry}),
        step(f"{name}_core", {"images": "pixels"}, {role: role for role in roles}),
        step(
            f"{name}_postprocess",
            {**{role.upper(): role for role in roles}, **geometry, **{key: key for key in thresholds}},
            {key: key for key in answers},
        ),
    ]
    return _config(
        f"{header}\n# The {model.task} model clients call: encoded image bytes in; boxes (x_min, y_min, x_max, y_max in the photo's "
        "pixels), scores,\n# class ids, labels and the count out, and what the head adds. K is the request's largest count; rows "
        "past an image's count are zero.",
        name=name,
        platform="ensemble",
        max_batch_size=max_batch,
        input=[_tensor("IMAGE", "TYPE_STRING", [1]), *_thresholds()],
        output=_answers(model),
        ensemble_scheduling={"step": steps},
    )


# Ultralytics' LetterBox as its predictor runs it: fit, cv2.resize linear, centred padding of 114, RGB, NCHW.
PREPROCESS_PARAMETERS = {
    "layout": "NCHW",
    "color_order": "RGB",
    "resize": "yolo_letterbox",
    "interpolation": "bilinear",
    "pad_value": "114",
    # Every photo decoded at its full size: Ultralytics' predictor's answer exactly. A 640-pixel model keeps
    # most of a photo's pixels anyway; "2" decodes a 12 MP JPEG at 3/8 (about 20 % less decode time).
    "decode_oversampling": "0",
    "mean": "0,0,0",
    "std": "255,255,255",
    "accepted_formats": "jpeg,png,webp,heic,avif",
    "max_image_bytes": "20971520",
    "max_image_pixels": "50000000",
    "max_image_side": "32766",
    "max_jpeg_scans": "64",
    "opencv_threads": "1",
    "cpu_share": "1.0",
    "max_instances": "8",
    "decode_threads": "1",
}


def _preprocess_config(header: str, name: str, model: YoloModel, max_batch: int) -> str:
    """Decode and Ultralytics' letterbox, the pixels handed over as UINT8."""
    return _config(
        f"{header}\n# Decode, validate, then Ultralytics' LetterBox (its predictor on a {model.height}x{model.width} model): fit, "
        "cv2.resize linear,\n# centred padding of 114, RGB, NCHW, handed over as UINT8: the / 255 (std below) is folded into the "
        "core's graph.\n# IMAGE_SIZE and IMAGE_TRANSFORM let the postprocess map boxes back to the photo.",
        name=f"{name}_preprocess",
        backend="python",
        max_batch_size=max_batch,
        input=[_tensor("IMAGE", "TYPE_STRING", [1])],
        output=[_tensor("PIXELS", "TYPE_UINT8", [3, model.height, model.width]), *_geometry()],
        parameters={**PREPROCESS_PARAMETERS, **DRIFT_PARAMETERS},
        dynamic_batching=_batching(0, 16),
        instance_group=_instances("KIND_CPU", 2),
    )


def _postprocess_config(header: str, name: str, model: YoloModel, max_batch: int, queue: int) -> str:
    """The detection task with the model's head and Ultralytics' predictor defaults."""
    head = detection_heads.head_class(model.head)
    raw = [_tensor(role.upper(), "TYPE_FP32", dims) for role, dims in zip(model.core_roles(), model.output_dims)]
    parameters = {
        "task": "detection",
        "head": model.head,
        **dict(model.head_parameters),
        "labels_file": LABELS_FILE,
        "score_threshold": str(SCORE_THRESHOLD),
        "iou_threshold": str(IOU_THRESHOLD),
        "max_detections": str(MAX_DETECTIONS),
        "class_agnostic": "false",
        "clip_to_image": "true",
        "cpu_share": "0.5",
        "max_instances": "8",
    }
    return _config(
        f"{header}\n# The detection task (vision_serving/tasks/detection.py) with the {model.head} head: raw {head.layout} "
        "outputs ->\n# boxes in the photo's pixels, with Ultralytics' predictor defaults (conf 0.25, iou 0.7, max_det 300, "
        "class-aware NMS).",
        name=f"{name}_postprocess",
        backend="python",
        max_batch_size=max_batch,
        input=[*raw, *_geometry(), *_thresholds()],
        output=_answers(model),
        parameters={**parameters, **DRIFT_PARAMETERS},
        dynamic_batching=_batching(0, queue),
        instance_group=_instances("KIND_CPU", 1),
    )


def _core_config_file(header: str, name: str, model: YoloModel, max_batch: int, queue: int) -> str:
    """The production core: a TensorRT plan, warmed up at batch 1 and the max batch."""
    zeros = {"data_type": "TYPE_UINT8", "dims": [3, model.height, model.width], "zero_data": True}
    warmup = [{"name": f"zeros_batch_{size}", "batch_size": size, "inputs": {"images": zeros}} for size in sorted({1, max_batch})]
    return _config(
        f"{header}\n# The production core: a TensorRT plan on the GPU, built on the node by `python -m builders build-engine` "
        "from the\n# precision the ladder chose. Without a GPU, `--model-config-name=cpu` serves configs/cpu.pbtxt (the same "
        "tensors).",
        name=f"{name}_core",
        platform="tensorrt_plan",
        max_batch_size=max_batch,
        **_core_io(model),
        dynamic_batching=_batching(0, queue),
        instance_group=_instances("KIND_GPU", 1),
        model_warmup=warmup,
    )


def parse_imgsz(imgsz: str | None) -> tuple[int, int] | None:
    """``--imgsz H,W`` (or one number for a square input) as (height, width); None when not given."""
    if not imgsz:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*(?:,\s*(\d+)\s*)?", imgsz)
    if not match:
        raise BuildError(f"--imgsz {imgsz!r}: expected H,W (or one number for a square input)")
    return int(match.group(1)), int(match.group(2) or match.group(1))


def scaffold(
    name: str, target: Path, model_path: Path, labels: Path | None, head: str | None, size: tuple[int, int] | None, log: Log
) -> None:
    """Write the pipeline folder ``target`` for the YOLO ONNX ``model_path`` (a task some detection head serves)."""
    model = inspect(model_path, labels, head, size)
    log(
        f"{model_path.name}: {model.head} head, {len(model.names)} classes ({', '.join(model.names[:5])}{', ...' if len(model.names) > 5 else ''}), "
        f"input {model.height}x{model.width}{', Ultralytics metadata' if model.ultralytics else ''}"
    )
    passes, max_batch = batch_passes(model, model_path, log)
    target.mkdir(parents=True)
    shutil.copy2(model_path, target / MODEL_FILE)
    for relative, text in files(name, model, model_path.name, sha256_file(target / MODEL_FILE), passes, max_batch).items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
