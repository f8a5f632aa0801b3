"""What the tests do with the exports of their YOLO models: Ultralytics' predictor on them (:func:`references`:
the answers a served pipeline is compared with), an export's input size, and :func:`to_yolo_v5`,
which rewrites the detector's ``yolo`` export into the original YOLOv5's ``[N, A, 5 + C]`` layout (objectness = the
best class score, class scores divided by it: YOLOv5's decoding gives back the same scores).

These read and write ONNX files (onnx): the drawing and training of the models, which the run's conftest imports,
are :mod:`tests.support.yolo`'s and import no onnx.
"""

from __future__ import annotations

import ast
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from builders import build_envs, photos
from builders.artifacts import sha256_file
from tests.support.yolo import CACHE, ENV, SCRIPT
from vision_serving import layout


def to_yolo_v5(source: Path, target: Path) -> Path:
    """The ``yolo`` export ``[N, 4 + C, A]`` rewritten as YOLOv5's ``[N, A, 5 + C]``: boxes, objectness =
    the best class score, class scores / objectness (so objectness x class score is the original score)."""
    model = onnx.load(str(source))
    graph = model.graph
    (output,) = graph.output
    raw = output.name
    channels = output.type.tensor_type.shape.dim[1].dim_value
    renamed = f"{raw}_yolo"
    for node in graph.node:
        node.output[:] = [renamed if name == raw else name for name in node.output]
    for info in graph.value_info:  # a recorded shape of the old output belongs to the renamed tensor
        if info.name == raw:
            info.name = renamed
    constants = {
        "v5_perm_starts_box": np.array([0], np.int64),
        "v5_box_ends": np.array([4], np.int64),
        "v5_cls_ends": np.array([channels], np.int64),
        "v5_axis": np.array([2], np.int64),
        "v5_eps": np.array(1e-12, np.float32),
    }
    graph.initializer.extend(numpy_helper.from_array(value, name) for name, value in constants.items())
    graph.node.extend(
        [
            helper.make_node("Transpose", [renamed], ["v5_t"], perm=[0, 2, 1]),
            helper.make_node("Slice", ["v5_t", "v5_perm_starts_box", "v5_box_ends", "v5_axis"], ["v5_boxes"]),
            helper.make_node("Slice", ["v5_t", "v5_box_ends", "v5_cls_ends", "v5_axis"], ["v5_classes"]),
            helper.make_node("ReduceMax", ["v5_classes"], ["v5_objectness"], axes=[2], keepdims=1),
            helper.make_node("Max", ["v5_objectness", "v5_eps"], ["v5_safe"]),
            helper.make_node("Div", ["v5_classes", "v5_safe"], ["v5_relative"]),
            helper.make_node("Concat", ["v5_boxes", "v5_objectness", "v5_relative"], [raw], axis=2),
        ]
    )
    batch, anchors = output.type.tensor_type.shape.dim[0], output.type.tensor_type.shape.dim[2].dim_value
    del graph.output[:]
    graph.output.append(
        helper.make_tensor_value_info(raw, onnx.TensorProto.FLOAT, [batch.dim_value or batch.dim_param, anchors, channels + 1])
    )
    # What YOLOv5's own export writes: its stride and names, none of Ultralytics' newer keys.
    kept = {prop.key: prop.value for prop in model.metadata_props if prop.key in ("stride", "names")}
    del model.metadata_props[:]
    helper.set_model_props(model, kept)
    onnx.checker.check_model(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(target))
    return target


RTDETR_SCRIPT = SCRIPT.parent / "ultralytics_rtdetr.py"


def rtdetr_exports(log=print) -> Path:
    """The folder of the tests' untrained RT-DETR's ``static.onnx`` and ``dynamic.onnx`` (``ultralytics_rtdetr.py
    export``), made once per script and environment lock."""
    key = hashlib.sha256(f"{sha256_file(RTDETR_SCRIPT)} {sha256_file(build_envs.requirements_file(ENV))}".encode()).hexdigest()[:16]
    folder = CACHE / f"rtdetr-{key}"
    if not (folder / "dynamic.onnx").is_file():
        build_envs.ensure_env(ENV, log)
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".rtdetr-", dir=CACHE) as scratch:
            build_envs.run_in_env(ENV, [str(RTDETR_SCRIPT), "export", "--out", scratch], log)
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(scratch, folder)
    return folder


def references(
    models: Mapping[str, Path], images: dict[str, bytes], log=print, task: str = "detect", script: Path = SCRIPT
) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Ultralytics' predictor on each of ``models`` (by the caller's names; full-size letterbox): per model, per image
    name, boxes, scores, classes, and the task's own answers (``ultralytics_yolo.predict``: masks, keypoints, rotated
    boxes and corners, probs). Each is cached by its file, the script and the images; the ones not cached are predicted
    in one process (its start, Ultralytics' and torch's imports, costs more than a model's predictions)."""
    names = sorted(images)
    caches = {}
    for label, model in models.items():
        key = hashlib.sha256(
            "\n".join(
                [task, sha256_file(model), sha256_file(script), *(f"{n}:{hashlib.sha256(images[n]).hexdigest()}" for n in names)]
            ).encode()
        )
        caches[label] = CACHE / "references" / f"{model.stem}-{key.hexdigest()[:16]}.npz"
    missing = [label for label, cache in caches.items() if not cache.is_file()]
    if missing:
        (CACHE / "references").mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".images-", dir=CACHE / "references") as scratch:
            paths = []
            for index, name in enumerate(names):
                path = Path(scratch) / f"{index:03d}_{name}"
                path.write_bytes(images[name])
                paths.append(str(path))
            arguments = [str(script), "predict", "--task", task]
            for label in missing:
                height, width = input_size(models[label])
                arguments += ["--model", str(models[label]), "--imgsz", f"{height},{width}", "--out", str(caches[label])]
            build_envs.run_in_env(ENV, arguments + paths, log)
    found = {}
    for label, cache in caches.items():
        with np.load(cache, allow_pickle=False) as data:
            found[label] = {
                name: {key.split("_", 1)[1]: np.array(data[key]) for key in data.files if key.startswith(f"{i}_")}
                for i, name in enumerate(names)
            }
    return found


def input_size(model: Path) -> tuple[int, int]:
    """The (height, width) of an export's image input: its dims, or its ``imgsz`` metadata where they are dynamic."""
    loaded = onnx.load(str(model), load_external_data=False)
    dims = loaded.graph.input[0].type.tensor_type.shape.dim
    if dims[2].dim_value and dims[3].dim_value:
        return dims[2].dim_value, dims[3].dim_value
    height, width = json.loads({prop.key: prop.value for prop in loaded.metadata_props}["imgsz"])
    return int(height), int(width)


def surer(source: Path, target: Path, odds: float) -> Path:
    """The export with each class score ``s`` replaced by ``odds x s / (1 - s + odds x s)`` (its odds multiplied by
    ``odds``), in the graph (a ``Mul``, ``Sub``, ``Add`` and ``Div`` after the first output), everything else and the
    metadata kept: a model trained for minutes scores under the predictor's 0.25, and both the pipeline and the
    predictor then read the same file. ``[N, 4 + C + extra, A]``: the C class rows; an end-to-end export's rows
    ``[N, K, 6 + extra]`` (its metadata's ``end2end``, ``nms`` in its ``args``, or RT-DETR's head): the score column
    (the rows' order kept: the odds rise with the score)."""
    model = onnx.load(str(source))
    graph = model.graph
    output = graph.output[0]
    raw, renamed = output.name, f"{output.name}_unsure"
    metadata = {prop.key: prop.value for prop in model.metadata_props}
    rows = metadata.get("end2end") == "True" or "'nms': True" in metadata.get("args", "") or metadata.get("head") == "RTDETRDecoder"
    classes = 1 if rows else len(ast.literal_eval(metadata["names"]))
    for node in graph.node:
        node.output[:] = [renamed if name == raw else name for name in node.output]
    for info in graph.value_info:
        if info.name == raw:
            info.name = renamed
    # The box, the scores (a row's one, or the classes'), then the rest (class and extra columns, or the extra rows).
    bounds = {"surer_0": 0, "surer_4": 4, "surer_scores_end": 4 + classes, "surer_end": 2**62, "surer_axis": 2 if rows else 1}
    constants = {name: np.array([value], np.int64) for name, value in bounds.items()}
    constants |= {"surer_odds": np.array(odds, np.float32), "surer_one": np.array(1.0, np.float32)}
    graph.initializer.extend(numpy_helper.from_array(value, name) for name, value in constants.items())
    graph.node.extend(
        [
            helper.make_node("Slice", [renamed, "surer_0", "surer_4", "surer_axis"], ["surer_boxes"]),
            helper.make_node("Slice", [renamed, "surer_4", "surer_scores_end", "surer_axis"], ["surer_scores"]),
            helper.make_node("Slice", [renamed, "surer_scores_end", "surer_end", "surer_axis"], ["surer_rest"]),
            helper.make_node("Mul", ["surer_scores", "surer_odds"], ["surer_raised"]),
            helper.make_node("Sub", ["surer_one", "surer_scores"], ["surer_complement"]),
            helper.make_node("Add", ["surer_complement", "surer_raised"], ["surer_total"]),
            helper.make_node("Div", ["surer_raised", "surer_total"], ["surer_sure"]),
            helper.make_node("Concat", ["surer_boxes", "surer_sure", "surer_rest"], [raw], axis=2 if rows else 1),
        ]
    )
    onnx.checker.check_model(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(target))
    return target


def run_python(*args: str, timeout: float = 1800) -> str:
    """``python ARGS`` in the project's root, as the docs type it: its stdout and stderr (an assertion names a failure)."""
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=layout.REPOSITORY_ROOT, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(args)} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return result.stdout + result.stderr


def bring(model_files: Mapping[str, Path], repository: Path) -> dict[str, str]:
    """Each model file brought into ``repository`` as a user brings it (``new-pipeline NAME --from yolo``), built
    (``export``) and checked (``check``: what blocks a TensorRT build): what the commands said, by pipeline name."""
    where = ["--model-repository", str(repository)]
    said = {}
    for name, model_file in model_files.items():
        said[name] = run_python("-m", "builders", "new-pipeline", name, "--from", "yolo", "--model", str(model_file), *where)
        said[name] += run_python("-m", "builders", "export", "--pipeline", name, *where)
        said[name] += run_python("-m", "builders", "check", "--pipeline", name, *where)
    return said


def downloaded(trained: Path, exports: Mapping[str, str], folder: Path) -> dict[str, Path]:
    """Each pipeline's model file as a user has it (outside any repository): the trained folder's ``<kind>.onnx`` of
    ``exports`` (pipeline name -> kind) copied to ``folder/<pipeline name>.onnx``."""
    folder.mkdir(parents=True, exist_ok=True)
    return {name: Path(shutil.copy(trained / f"{kind}.onnx", folder / f"{name}.onnx")) for name, kind in exports.items()}


def brought_repository(model_files: Mapping[str, Path], folder: Path) -> tuple[Path, dict[str, str]]:
    """A model repository under ``folder`` with each model file brought (:func:`bring`), and what the commands said."""
    repository = folder / "model_repository"
    repository.mkdir(parents=True)
    return repository, bring(model_files, repository)


def package_photos(names: Sequence[str]) -> dict[str, bytes]:
    """Package photos by their file names (name and suffix)."""
    return {photos.photo_path(name).name: photos.photo_bytes(name) for name in names}
