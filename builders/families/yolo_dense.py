"""What Ultralytics' dense-map exports share (depth: :mod:`.yolo_depth`; semantic: :mod:`.yolo_semantic`): one image
input, one output holding a map the size of the input, a batch made dynamic as a detector's is
(:func:`builders.families.yolo.batch_passes`), and the folder written from the family's spec."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from builders import Log
from builders.artifacts import sha256_file
from builders.families import yolo


@dataclass(frozen=True)
class DenseModel:
    input_name: str
    height: int
    width: int
    output_name: str
    output_type: str  # numpy's name of the output's type: float32, uint8
    output_dims: tuple[int, ...]  # per image: (1, H, W) or (H, W)
    names: tuple[str, ...]  # its classes (the metadata's names, or --labels)
    static_batch: bool
    fixed_batch: int
    static_size: bool
    ultralytics: bool


def inspect(
    path: Path, imgsz: tuple[int, int] | None, what: str, supported: str, types: Sequence[str], labels: Path | None = None
) -> DenseModel:
    """The export ``path`` of a ``what`` model whose one output is a map of one of ``types`` at the input's size, or
    ``UnsupportedModel`` in one line naming ``supported``."""
    export = yolo.load_export(path)
    if len(export.outputs) != 1:
        found = ", ".join(output.name for output in export.outputs)
        raise yolo.UnsupportedModel(f"{path.name} is a {what} model with {len(export.outputs)} outputs ({found}); supported: {supported}")
    (output,) = export.outputs
    size = imgsz or yolo._size(export.metadata, export.in_shape, path.name)
    out_type = yolo._dtype_name(output.type.tensor_type.elem_type)
    out_shape = yolo._resolved(export.model, 0, yolo._dims(output), size)
    dims = tuple(out_shape[1:])
    if out_type not in types or dims not in ((1, *size), size):
        raise yolo.UnsupportedModel(
            f"{path.name}: output '{output.name}' is {out_type} {list(out_shape)} for a {size[0]}x{size[1]} input; supported: {supported}"
        )
    in_shape = export.in_shape
    return DenseModel(
        input_name=export.source.name,
        height=size[0],
        width=size[1],
        output_name=output.name,
        output_type=out_type,
        output_dims=tuple(int(d) for d in dims),
        names=yolo._names(export.metadata, labels),
        static_batch=isinstance(in_shape[0], int) and in_shape[0] > 0,
        fixed_batch=in_shape[0] if isinstance(in_shape[0], int) and in_shape[0] > 0 else 1,
        static_size=all(isinstance(d, int) and d > 0 for d in in_shape[2:]),
        ultralytics="imgsz" in export.metadata,
    )


def batch_passes(model: DenseModel, path: Path, log: Log) -> tuple[list[str], int]:
    """The fix passes and max_batch_size, as :func:`builders.families.yolo.batch_passes` finds them for a detector (a
    stand-in detector with this model's output: the probe reads the input's size and the batch)."""
    stand_in = yolo.YoloModel(
        input_name=model.input_name,
        height=model.height,
        width=model.width,
        output_names=(model.output_name,),
        output_shapes=((model.fixed_batch if model.static_batch else "batch", *model.output_dims),),
        head="yolo",
        names=model.names or ("map",),
        static_batch=model.static_batch,
        fixed_batch=model.fixed_batch,
        ultralytics=model.ultralytics,
        static_size=model.static_size,
    )
    return yolo.batch_passes(stand_in, path, log)


def write_folder(
    name: str,
    target: Path,
    model_path: Path,
    model: DenseModel,
    spec_text: Callable[[str, list[str], int], str],
    labels: Sequence[str] | None,
    log: Log,
) -> None:
    """The pipeline folder ``target``: the model, its spec (``spec_text(sha256, passes, max_batch)``), ``labels``
    beside the postprocess (None: none) and every file generated from the spec."""
    passes, max_batch = batch_passes(model, model_path, log)
    target.mkdir(parents=True)
    shutil.copy2(model_path, target / yolo.MODEL_FILE)
    spec = spec_text(sha256_file(target / yolo.MODEL_FILE), passes, max_batch)
    for relative, text in yolo.folder_files(name, spec, labels).items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
