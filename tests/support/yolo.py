"""The tests' own YOLO detector: shapes drawn here, a YOLOv8n trained and exported by Ultralytics.

No pretrained COCO detector can be installed on these machines, so the tests make one: scenes of
circles, squares and triangles on flat colours and on crops of the package photos
(:func:`scene`), a dataset of them (:func:`write_dataset`), and a YOLOv8n at half its width
(``WIDTH``) trained on it from scratch by Ultralytics in its own environment (``tests/support/ultralytics_yolo.py``,
:func:`trained`), cached under ``.build/test-yolo/`` (or ``$TEST_YOLO_DIR``) by the hash of everything it is made of
(:func:`train_task`). The pose, segment and obb models start from its weights.
Its exports are the ``yolo`` head at a landscape 128x192 input and the ``end2end`` head at 128x128. The other tasks'
models (``tests/support/yolo_<task>.py``) are drawn and trained with the helpers here; what the tests do with the
exports (Ultralytics' predictor as the reference, the YOLOv5-layout rewrite) is :mod:`tests.support.yolo_exports`'s.
This module imports no onnx: the run's conftest imports it, and the unit tier runs without onnx.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path

import cv2
import numpy as np

from builders import build_envs, photos
from builders.artifacts import sha256_file
from vision_serving import layout

CLASSES = ("circle", "square", "triangle")
IMGSZ = 128
WIDE = 192  # the width of the yolo export: a landscape input (the end2end export stays square)
EPOCHS = 60  # at WIDTH: 19 to 23 detections in the integration test's 12 photos where it needs 12 (40 epochs: 11 or 12)
YOLOV8N_WIDTH = 0.25  # yolov8n's width multiple (ultralytics_yolo.py train --width)
WIDTH = 0.125  # the detector's: half yolov8n's channels, half its time per epoch; the pose, segment and obb models start from it
TRAIN_IMAGES = 200
VAL_IMAGES = 24
ENV = "ultralytics"
SCRIPT = Path(__file__).resolve().parent / "ultralytics_yolo.py"
# Where the trained models and the references are kept: TEST_YOLO_DIR, else .build/test-yolo.
CACHE = Path(os.environ.get("TEST_YOLO_DIR") or layout.BUILD_DIR / "test-yolo")
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
    data = root / "data.yaml"  # no path: Ultralytics reads the splits beside it (the folder can move: train_task)
    data.write_text(f"train: images/train\nval: images/val\n{yaml_extra}names:\n" + "".join(f"  {i}: {n}\n" for i, n in enumerate(names)))
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


_training_lock = threading.RLock()  # one training at a time in this process (the background ones and a fixture's)
_background: list[Future[Path]] = []


def train_in_background(trainers: Sequence[Callable[[Callable[[str], None]], Path]]) -> None:
    """Train each of ``trainers`` (the detector's :func:`trained`, or another task's ``trained(log)``), in order, in
    one thread, so a run that will need them trains them while other tests run (each training is a subprocess: it takes CPU, not this interpreter).
    A test's own ``trained()`` then finds its model cached, or waits for the training under way (one lock); a
    training that failed here is tried again there, where its error is raised."""
    if _background or not trainers:
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
    """The folder holding the detector's exports, weights and training.json (trained once per key; a training under
    way in the background is waited for)."""
    return train_task("detect", write_dataset, log, epochs=EPOCHS, width=WIDTH)


def train_task(
    task: str,
    write: Callable[[Path], Path],
    log,
    epochs: int,
    width: float = YOLOV8N_WIDTH,
    start_from: Path | None = None,
    family: str = "yolov8",
) -> Path:
    """A YOLOv8n (``family`` yolo26: a YOLO26n) of ``task`` at ``width`` (``ultralytics_yolo.py train --width``), from scratch or from the weights of
    the model in the folder ``start_from``, trained by Ultralytics on the dataset ``write(folder)`` draws (it returns
    the path to pass as ``data``) and exported (``ultralytics_yolo.exports``): the folder of its ONNX files, weights and
    training.json. Cached by what the model is made of: the script, the environment's lock, the options (the model it
    starts from by its folder's name, itself such a key) and every file of the dataset (drawn again for each call, in
    a second or two, and compared)."""
    options = ["--task", task, "--imgsz", str(IMGSZ), "--wide", str(WIDE), "--epochs", str(epochs), "--width", f"{width:g}"]
    options += ["--family", family] if family != "yolov8" else []
    with _training_lock:
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{family}-{task}-", dir=CACHE) as scratch:
            drawn = Path(scratch) / "dataset"
            data = write(drawn).relative_to(drawn)
            key = training_key([*options, *(["--init", start_from.name] if start_from else [])], drawn)
            folder = CACHE / f"{'' if family == 'yolov8' else family + '-'}{task}-{key}"
            if (folder / "training.json").is_file():
                return folder
            shutil.rmtree(folder, ignore_errors=True)  # what an interrupted training left
            folder.mkdir()
            drawn.rename(folder / "dataset")
        build_envs.ensure_env(ENV, log)
        arguments = [str(SCRIPT), "train", *options, "--data", str(folder / "dataset" / data), "--out", str(folder)]
        build_envs.run_in_env(ENV, arguments + (["--init", str(start_from / "weights.pt")] if start_from else []), log)
        return folder


def training_key(options: Sequence[str], dataset: Path) -> str:
    """The hash of the training script, the environment's lock, ``options`` and every file under ``dataset``."""
    digest = hashlib.sha256()
    for path in (SCRIPT, build_envs.requirements_file(ENV)):
        digest.update(sha256_file(path).encode())
    digest.update(" ".join(options).encode())
    for path in sorted(path for path in dataset.rglob("*") if path.is_file()):
        digest.update(f"{path.relative_to(dataset).as_posix()} {sha256_file(path)}\n".encode())
    return digest.hexdigest()[:16]
