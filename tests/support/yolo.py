"""The tests' own YOLO detector: shapes drawn here, a YOLOv8n trained and exported by Ultralytics, its reference.

No pretrained COCO detector can be installed on these machines, so the tests make one: scenes of
circles, squares and triangles on flat colours and on crops of the package photos
(:func:`scene`), a dataset of them (:func:`write_dataset`), and a YOLOv8n trained on it in a few
minutes by Ultralytics in its own environment (``tests/support/ultralytics_yolo.py``,
:func:`trained`), cached under ``.build/test-yolo/`` by the hash of everything it depends on.
Its exports are the ``yolo`` head at a landscape 128x192 input and the ``end2end`` head at 128x128; :func:`to_yolo_v5` rewrites the ``yolo``
export into the original YOLOv5's ``[N, A, 5 + C]`` layout (objectness = the best class score,
class scores divided by it: YOLOv5's decoding gives back the same scores). :func:`reference`
runs Ultralytics' predictor on a model file.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path

import cv2
import numpy as np
import onnx
from onnx import helper, numpy_helper

from builders import build_envs, photos
from builders.artifacts import sha256_file
from vision_serving import layout

CLASSES = ("circle", "square", "triangle")
IMGSZ = 128
WIDE = 192  # the width of the yolo export: a landscape input (the end2end export stays square)
EPOCHS = 40
TRAIN_IMAGES = 200
VAL_IMAGES = 24
ENV = "ultralytics"
SCRIPT = Path(__file__).resolve().parent / "ultralytics_yolo.py"
CACHE = layout.BUILD_DIR / "test-yolo"
# Backgrounds: package photos (calibration's and held-out alike: the detector's data, not the ladder's).
BACKGROUNDS = ("astronaut", "brick", "camera", "coffee", "grass", "gravel", "page", "rocket", "china", "flower")


def _color(rng: np.random.Generator) -> tuple[int, int, int]:
    return tuple(int(v) for v in rng.integers(0, 256, 3))  # type: ignore[return-value]


def canvas(rng: np.random.Generator, height: int, width: int, background: np.ndarray | None) -> np.ndarray:
    """A scene's ground: a flat colour with a little noise, or ``background`` resized to the scene."""
    if background is None:
        image = np.full((height, width, 3), _color(rng), np.uint8)
        return np.clip(image + rng.normal(0, 8, image.shape), 0, 255).astype(np.uint8)
    return cv2.resize(background, (width, height), interpolation=cv2.INTER_AREA)


def scene(rng: np.random.Generator, height: int, width: int, background: np.ndarray | None = None, count: int | None = None):
    """A BGR image of ``count`` (1..3) shapes and their YOLO labels ``(class, cx, cy, w, h)`` (normalized)."""
    image = canvas(rng, height, width, background)
    labels = []
    for _ in range(int(rng.integers(1, 4)) if count is None else count):
        kind = int(rng.integers(0, len(CLASSES)))
        side = rng.uniform(0.2, 0.45) * min(height, width)
        cx, cy = rng.uniform(side / 2, width - side / 2), rng.uniform(side / 2, height - side / 2)
        color = _color(rng)
        if kind == 0:
            cv2.circle(image, (int(cx), int(cy)), int(side / 2), color, -1, cv2.LINE_AA)
            box = (cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2)
        elif kind == 1:
            box = (cx - side * 0.4, cy - side * 0.4, cx + side * 0.4, cy + side * 0.4)
            cv2.rectangle(image, (int(box[0]), int(box[1])), (int(box[2]), int(box[3])), color, -1)
        else:
            corners = np.array([[cx, cy - side / 2], [cx - side / 2, cy + side / 2], [cx + side / 2, cy + side / 2]], np.int32)
            cv2.fillPoly(image, [corners], color, cv2.LINE_AA)
            (x0, y0), (x1, y1) = corners.min(axis=0), corners.max(axis=0)
            box = (float(x0), float(y0), float(x1), float(y1))
        x0, y0, x1, y1 = box
        labels.append((kind, (x0 + x1) / 2 / width, (y0 + y1) / 2 / height, (x1 - x0) / width, (y1 - y0) / height))
    return image, labels


def backgrounds() -> list[np.ndarray]:
    return [cv2.imdecode(np.frombuffer(photos.photo_bytes(name), np.uint8), cv2.IMREAD_COLOR) for name in BACKGROUNDS]


# A labelled scene: (height, width, background or None) -> the image and its label file's lines.
DrawScene = Callable[[np.random.Generator, int, int, "np.ndarray | None"], tuple[np.ndarray, str]]


def write_yolo_dataset(
    root: Path,
    draw: DrawScene,
    names: Sequence[str],
    counts: tuple[int, int],
    on_photo: Callable[[int], bool],
    seed: int = 1,
    yaml_extra: str = "",
) -> Path:
    """A training and a validation set in Ultralytics' layout (``images/<split>``, ``labels/<split>``): scenes of 96 to
    200 px, those ``on_photo`` picks drawn on a crop of a package photo; returns data.yaml (``yaml_extra`` added)."""
    pictures = backgrounds()
    for split, count, offset in (("train", counts[0], 0), ("val", counts[1], 1)):
        rng = np.random.default_rng([seed, offset])
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        for index in range(count):
            height, width = int(rng.integers(96, 200)), int(rng.integers(96, 200))
            background = None
            if on_photo(index):
                picture = pictures[int(rng.integers(0, len(pictures)))]
                top, left = int(rng.integers(0, picture.shape[0] // 2)), int(rng.integers(0, picture.shape[1] // 2))
                background = picture[top : top + picture.shape[0] // 2, left : left + picture.shape[1] // 2]
            image, lines = draw(rng, height, width, background)
            cv2.imwrite(str(root / "images" / split / f"{index:04d}.png"), image)
            (root / "labels" / split / f"{index:04d}.txt").write_text(lines)
    data = root / "data.yaml"
    data.write_text(
        f"path: {root}\ntrain: images/train\nval: images/val\n{yaml_extra}names:\n" + "".join(f"  {i}: {n}\n" for i, n in enumerate(names))
    )
    return data


def write_new_scenes(
    folder: Path, count: int, seed: int, prefix: str, draw: Callable[[np.random.Generator, int, int, np.ndarray | None], np.ndarray]
) -> dict[str, bytes]:
    """``count`` scenes a model never saw, 90 to 420 px, every other one on a package photo, PNG and JPEG, written to
    ``folder``: file name -> bytes."""
    rng = np.random.default_rng([seed, 7])
    pictures = backgrounds()
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for index in range(count):
        height, width = int(rng.integers(90, 420)), int(rng.integers(90, 420))
        image = draw(rng, height, width, pictures[index % len(pictures)] if index % 2 else None)
        suffix = ".png" if index % 3 else ".jpg"
        ok, data = cv2.imencode(suffix, image, [cv2.IMWRITE_JPEG_QUALITY, 92])
        assert ok
        name = f"{prefix}_{index:03d}{suffix}"
        (folder / name).write_bytes(data.tobytes())
        written[name] = data.tobytes()
    return written


def write_dataset(root: Path, seed: int = 1) -> Path:
    """The detector's training set (half on flat colours, half on photo crops) and a validation set; returns data.yaml."""

    def draw(rng: np.random.Generator, height: int, width: int, background: np.ndarray | None) -> tuple[np.ndarray, str]:
        image, labels = scene(rng, height, width, background)
        return image, "".join(f"{c} {x:.6f} {y:.6f} {w:.6f} {h:.6f}\n" for c, x, y, w, h in labels)

    return write_yolo_dataset(root, draw, CLASSES, (TRAIN_IMAGES, VAL_IMAGES), lambda index: index % 2 == 1, seed)


def _key() -> str:
    """The detector's cache folder name (:func:`train_task`'s)."""
    return train_task_key("detect", Path(__file__), EPOCHS)


def train_task_key(task: str, writer_file: Path, epochs: int, extra_key: str = "") -> str:
    digest = hashlib.sha256()
    for path in (SCRIPT, writer_file, build_envs.requirements_file(ENV)):
        digest.update(sha256_file(path).encode())
    digest.update(f"{task} {IMGSZ} {WIDE} {epochs} {extra_key}".encode())
    return digest.hexdigest()[:16] if task == "detect" else f"{task}-{digest.hexdigest()[:16]}"


_training_lock = threading.RLock()  # one training at a time in this process (the background ones and a fixture's)
_background: list[Future[Path]] = []


def train_in_background(trainers: Sequence[Callable[[Callable[[str], None]], Path]]) -> None:
    """Train each of ``trainers`` (the detector's :func:`trained`, or another task's ``trained(log)``), in order, in
    one thread, so a run that will need them trains them while other tests run (each training is a subprocess: it takes CPU, not this interpreter).
    A test's own ``trained()`` then finds its model cached, or waits for the training under way (one lock); a
    training that failed here is tried again there, where its error is raised."""
    if _background:
        return
    CACHE.mkdir(parents=True, exist_ok=True)
    log_file = CACHE / "background-training.log"

    def log(message: str) -> None:
        with open(log_file, "a") as handle:
            handle.write(message + "\n")

    def work() -> None:
        for index, trainer in enumerate(trainers):
            try:
                _background[index].set_result(trainer(log))
            except BaseException as error:  # the test that needs it trains again and raises its own
                _background[index].set_exception(error)

    _background.extend(Future() for _ in trainers)
    # A daemon thread: a run that ends early does not wait for the training (its subprocess finishes on its own).
    threading.Thread(target=work, name="yolo-training", daemon=True).start()


def trained(log=print) -> Path:
    """The folder holding the detector's exports and training.json (trained once per key; a training under way in
    the background is waited for)."""
    return _train_once(log)


def _train_once(log) -> Path:
    with _training_lock:
        return _train(log)


def _train(log) -> Path:
    return train_task("detect", write_dataset, Path(__file__), log)


def train_task(task: str, write: Callable[[Path], Path], writer_file: Path, log, epochs: int = EPOCHS, extra_key: str = "") -> Path:
    """A YOLOv8n of ``task`` trained by Ultralytics on the dataset ``write(folder)`` draws (it returns the path to pass
    as ``data``), exported (``ultralytics_yolo.exports``): the folder of its ONNX files and training.json, cached by the
    hash of the script, ``writer_file`` (the module that draws the data), the environment and the settings."""
    with _training_lock:
        return _train_task(task, write, writer_file, log, epochs, extra_key)


def _train_task(task: str, write: Callable[[Path], Path], writer_file: Path, log, epochs: int, extra_key: str) -> Path:
    folder = CACHE / train_task_key(task, writer_file, epochs, extra_key)
    if (folder / "training.json").is_file():
        return folder
    build_envs.ensure_env(ENV, log)
    data = write(folder / "dataset")
    arguments = ["--task", task, "--data", str(data), "--out", str(folder), "--imgsz", str(IMGSZ), "--wide", str(WIDE)]
    build_envs.run_in_env(ENV, [str(SCRIPT), "train", *arguments, "--epochs", str(epochs)], log)
    return folder


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
    onnx.helper.set_model_props(model, kept)
    onnx.checker.check_model(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(target))
    return target


def reference(model: Path, images: dict[str, bytes], log=print, task: str = "detect") -> dict[str, dict[str, np.ndarray]]:
    """Ultralytics' predictor on ``model`` (full-size letterbox): per image name, boxes, scores, classes, and the
    task's own answers (``ultralytics_yolo.predict``: masks, keypoints, rotated boxes and corners, probs)."""
    names = sorted(images)
    key = hashlib.sha256(
        "\n".join(
            [task, sha256_file(model), sha256_file(SCRIPT), *(f"{n}:{hashlib.sha256(images[n]).hexdigest()}" for n in names)]
        ).encode()
    )
    cache = CACHE / "references" / f"{model.stem}-{key.hexdigest()[:16]}.npz"
    if not cache.is_file():
        scratch = cache.parent / f".{cache.stem}"
        scratch.mkdir(parents=True, exist_ok=True)
        paths = []
        for index, name in enumerate(names):
            path = scratch / f"{index:03d}_{name}"
            path.write_bytes(images[name])
            paths.append(str(path))
        height, width = input_size(model)
        arguments = [str(SCRIPT), "predict", "--model", str(model), "--task", task, "--imgsz", f"{height},{width}", "--out", str(cache)]
        arguments += paths
        build_envs.run_in_env(ENV, arguments, log)
    with np.load(cache, allow_pickle=False) as data:
        return {
            name: {key.split("_", 1)[1]: np.array(data[key]) for key in data.files if key.startswith(f"{i}_")}
            for i, name in enumerate(names)
        }


def input_size(model: Path) -> tuple[int, int]:
    """The (height, width) of an export's image input: its dims, or its ``imgsz`` metadata where they are dynamic."""
    loaded = onnx.load(str(model), load_external_data=False)
    dims = loaded.graph.input[0].type.tensor_type.shape.dim
    if dims[2].dim_value and dims[3].dim_value:
        return dims[2].dim_value, dims[3].dim_value
    height, width = json.loads({prop.key: prop.value for prop in loaded.metadata_props}["imgsz"])
    return int(height), int(width)


def provenance(folder: Path) -> dict:
    return json.loads((folder / "training.json").read_text())
