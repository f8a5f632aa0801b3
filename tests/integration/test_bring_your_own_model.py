"""docs/models.md ("Your own model"), followed literally, for models the project does not ship.

Each model is brought the way docs/models.md says, its commands run as subprocesses, into a user's
clone: a git repository in a temporary folder holding the project's pipelines as committed. After
the steps, ``git status`` there names only the new pipeline's folder, and the project's own
checkout is as it was. One ``./scripts/serve --model-repository CLONE --pipeline ...`` then serves
every new pipeline, each checked against its own reference:

(a) a YOLOv8n trained here (tests/support/yolo.py), as the ``yolo`` head (a landscape 128x192
    export), ``end2end`` (128x128, NMS inside the model, batch 1) and ``yolo_v5`` (the same network
    in the original YOLOv5's ``[N, A, 5 + C]`` layout), each one ``new-pipeline --from yolo
    --model FILE``: against Ultralytics' own predictor on the same file;
(b) MediaPipe's landscape selfie segmenter (144x256, from the pinned wheel): ``new-pipeline --from
    person_segmenter``, the recipe's source and the configs' dims edited: against MediaPipe's own
    runtime (``model_selection=1``);
(c) an ONNX classifier generated here: ``new-pipeline --from image_classifier``: against onnxruntime.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
from onnx import TensorProto, helper, numpy_helper

from builders import photos, tflite
from builders.artifacts import sha256_file
from tests.support import references, serve_script, yolo, yolo_exports
from vision_serving import image_codec, layout
from vision_serving.onnx_core import create_session
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.served import ServedInputs
from vision_serving.tasks import detection, segmentation

pytestmark = pytest.mark.integration

ROOT = layout.REPOSITORY_ROOT
TEMPLATES = ("image_classifier", "person_segmenter")
CLASSIFIER = "my_classifier"
COLOURS = ["red", "green", "blue", "gray"]
SEGMENTER = "landscape_segmenter"
LANDSCAPE_MEMBER = "mediapipe/modules/selfie_segmentation/selfie_segmentation_landscape.tflite"
# The YOLO pipelines: name -> how the test's model file is made from the trained folder.
# Pipeline -> the export it serves (tests/support/ultralytics_yolo.py's exports(); yolo_v5 is the yolo export rewritten).
DETECTORS = {
    "shapes_yolo": "yolo",
    "shapes_end2end": "end2end",
    "shapes_v5": "yolo_v5",
    "shapes_dynamic": "dynamic",
    "shapes_dynamic_nms": "dynamic_nms",
}
MIN_IOU = 0.99
# What the builders write into a pipeline folder (the project's .gitignore keeps it out of git).
BUILT = (".onnx", ".onnx.json", ".plan", ".plan.json", "served_precision.json", "drift_reference.json", "drift_reference.json.json")
LIMITS = image_codec.ImageLimits(max_bytes=1 << 26, max_pixels=1 << 28)


def run(*args: str, cwd: Path = ROOT, code: int = 0) -> str:
    """``python ARGS`` as docs/models.md types it (in ``cwd``); its stdout and stderr."""
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, timeout=1800)
    assert result.returncode == code, f"{' '.join(args)} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return result.stdout + result.stderr


def git(clone: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(clone), *args], capture_output=True, text=True, check=True).stdout


def edit(path: Path, pattern: str, replacement: str) -> None:
    text, replaced = re.subn(pattern, replacement, path.read_text(), flags=re.M | re.S)
    assert replaced, f"{pattern!r} not found in {path}"
    path.write_text(text)


def changed_paths(clone: Path) -> list[str]:
    """What ``git status`` reports in the clone (untracked files one by one)."""
    return sorted(line[3:] for line in git(clone, "status", "--porcelain", "--untracked-files=all").splitlines())


# --------------------------------------------------------------------------- the user's clone


@pytest.fixture(scope="module")
def project_status() -> Iterator[str]:
    """The project's own ``git status``, before this module's steps; compared after them."""
    before = git(ROOT, "status", "--porcelain", "--untracked-files=all")
    yield before


@pytest.fixture(scope="module")
def clone(tmp_path_factory, project_status) -> Path:
    """A user's clone: a git repository with the templates' committed files and the project's .gitignore."""
    root = tmp_path_factory.mktemp("clone")
    shutil.copy(ROOT / ".gitignore", root / ".gitignore")
    for name in TEMPLATES:
        for relative in git(ROOT, "ls-files", f"model_repository/{name}").splitlines():
            target = root / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / relative, target)
    git(root, "init", "--quiet")
    git(root, "add", "--all")
    git(root, "-c", "user.name=user", "-c", "user.email=user@example.com", "commit", "--quiet", "-m", "the project as cloned")
    assert changed_paths(root) == []
    return root / "model_repository"


@pytest.fixture(scope="module")
def builds() -> Iterator[ThreadPoolExecutor]:
    """Where the pipelines' ``builders all`` run: two at a time, as a user with several pipelines may run them
    (each writes only its own folder). The classifier's and the segmenter's start first, while the detector
    may still be training; the three detectors' follow."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield pool


def build(pool: ThreadPoolExecutor, name: str, clone: Path) -> Future[str]:
    return pool.submit(run, "-m", "builders", "all", "--pipeline", name, "--model-repository", str(clone))


# --------------------------------------------------------------------------- (c) an ONNX classifier


def tiny_classifier() -> onnx.ModelProto:
    """A model of your own: Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm, 4 classes, 32x32 input."""
    rng = np.random.default_rng(7)
    weights = {
        "conv_w": rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32),
        "conv_b": rng.normal(0, 0.1, (8,)).astype(np.float32),
        "fc_w": rng.normal(0, 0.5, (4, 8)).astype(np.float32),
        "fc_b": np.zeros(4, dtype=np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["input", "conv_w", "conv_b"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("GlobalAveragePool", ["relu"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["scores"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 3, 32, 32])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n", 4])],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.fixture(scope="module")
def own_classifier(clone, builds, tmp_path_factory) -> Future[str]:
    """The classifier's folder made as docs/models.md says; its build started (its output, once done)."""
    model_file = tmp_path_factory.mktemp("classifier") / "model.onnx"
    onnx.save(tiny_classifier(), model_file)
    where = ["--model-repository", str(clone)]
    # 1. Start from the pipeline of the same task.
    run("-m", "builders", "new-pipeline", CLASSIFIER, "--from", "image_classifier", *where)
    folder = clone / CLASSIFIER
    # 2. Put your model and its labels in the folder.
    shutil.copy(model_file, folder / "model.onnx")
    (folder / f"{CLASSIFIER}_postprocess" / "labels.txt").write_text("\n".join(COLOURS) + "\n")
    # 3. The recipe: an ONNX source pinned by its sha256, the fix passes that name and batch its I/O, a smaller calibration.
    recipe = folder / "pipeline.toml"
    edit(recipe, r"^description = .*?$", 'description = "my own 4-class colour classifier"')
    edit(recipe, r"^\[source\].*?(?=^\[fix\])", f'[source]\nkind = "onnx"\npath = "model.onnx"\nsha256 = "{sha256_file(model_file)}"\n\n')
    edit(recipe, r"^passes = .*?$", 'passes = ["stable_io_names", "batch_dimension"]')
    edit(recipe, r"^exclude = .*?$", "exclude = []")
    edit(recipe, r"^samples = .*?$", "samples = 64")
    edit(recipe, r"^\[golden\].*", "[golden]\n")
    # 4. The spec's serving part: your model's input size and class count ([core]: the command carries them to every
    # config), its preprocessing and its top k; then the command.
    edit(recipe, r"dims = \[3, 224, 224\]", "dims = [3, 32, 32]")
    edit(recipe, r"dims = \[1000\]", "dims = [4]")
    edit(recipe, r"^resize_shorter_side = 256$", "resize_shorter_side = 36")
    edit(recipe, r"^mean = \[.*?\]$", "mean = [127.5, 127.5, 127.5]")
    edit(recipe, r"^top_k = 5$", "top_k = 2")
    run("-m", "builders", "configs", "--pipeline", CLASSIFIER, *where)
    # 5. Check, then build.
    assert "ok: " in run("-m", "vision_serving.consistency", "--repository", str(clone))
    return build(builds, CLASSIFIER, clone)


# --------------------------------------------------------------------------- (b) the landscape selfie segmenter


@pytest.fixture(scope="module")
def landscape_segmenter(clone, builds) -> Future[str]:
    """The segmenter's folder made as docs/models.md says; its build started (its output, once done)."""
    where = ["--model-repository", str(clone)]
    run("-m", "builders", "new-pipeline", SEGMENTER, "--from", "person_segmenter", *where)
    folder = clone / SEGMENTER
    # The other model file of the same wheel, pinned by its sha256 (`sha256sum` of the extracted member).
    member_sha256 = sha256_file(tflite.wheel_member("mediapipe==0.10.14", LANDSCAPE_MEMBER, None))
    recipe = folder / "pipeline.toml"
    edit(recipe, r'^member = ".*?"$', f'member = "{LANDSCAPE_MEMBER}"')
    edit(recipe, r'^sha256 = ".*?"$', f'sha256 = "{member_sha256}"')
    # Its input and output are 144 high, 256 wide: the core's tensors in the spec, then the command for every config.
    edit(recipe, r"dims = \[256, 256, 3\]", "dims = [144, 256, 3]")
    edit(recipe, r"dims = \[256, 256, 1\]", "dims = [144, 256, 1]")
    run("-m", "builders", "configs", "--pipeline", SEGMENTER, *where)
    assert "ok: " in run("-m", "vision_serving.consistency", "--repository", str(clone))
    return build(builds, SEGMENTER, clone)


# --------------------------------------------------------------------------- (a) YOLO, three heads


@pytest.fixture(scope="module")
def trained() -> Path:
    return yolo.trained()


@pytest.fixture(scope="module")
def yolo_models(trained, tmp_path_factory) -> dict[str, Path]:
    """The model file of each detector pipeline, as a user would have it (outside the repository)."""
    folder = tmp_path_factory.mktemp("downloads")
    files = {kind: trained / f"{kind}.onnx" for kind in ("yolo", "end2end", "dynamic", "dynamic_nms")}
    files["yolo_v5"] = yolo_exports.to_yolo_v5(files["yolo"], folder / "yolov5_layout.onnx")
    return {name: shutil.copy(files[kind], folder / f"{name}.onnx") for name, kind in DETECTORS.items()}


def write_scenes(folder: Path, count: int, seed: int, labelled: bool = False) -> dict[str, bytes]:
    """``count`` scenes of the detector's classes at many sizes and aspect ratios, PNG and JPEG."""
    rng = np.random.default_rng([seed, 7])
    pictures = yolo.backgrounds()
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for index in range(count):
        height, width = int(rng.integers(90, 420)), int(rng.integers(90, 420))
        background = pictures[index % len(pictures)] if index % 2 else None
        image, labels = yolo.scene(rng, height, width, background)
        ok, data = cv2.imencode(".png" if index % 3 else ".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 92])
        assert ok
        name = f"scene_{index:03d}{'.png' if index % 3 else '.jpg'}"
        (folder / name).write_bytes(data.tobytes())
        if labelled:
            (folder / name).with_suffix(".txt").write_text("".join(f"{c} {x:.6f} {y:.6f} {w:.6f} {h:.6f}\n" for c, x, y, w, h in labels))
        written[name] = data.tobytes()
    return written


@pytest.fixture(scope="module")
def shapes_photos(tmp_path_factory) -> dict[str, Path]:
    """Your own images, outside the repository: calibration, held-out and labelled evaluation folders."""
    root = tmp_path_factory.mktemp("my_images")
    write_scenes(root / "calibration", 24, seed=11)
    write_scenes(root / "held_out", 12, seed=12)
    write_scenes(root / "labelled", 40, seed=13, labelled=True)
    return {name: root / name for name in ("calibration", "held_out", "labelled")}


@pytest.fixture(scope="module")
def detectors(clone, builds, own_classifier, landscape_segmenter, yolo_models, shapes_photos) -> dict[str, str]:
    """Each YOLO file brought in with one command, the recipe pointed at your images, then built (after the
    classifier's and the segmenter's builds have started: those overlap the detector's training)."""
    where = ["--model-repository", str(clone)]
    outputs = {}
    for name, model_file in yolo_models.items():
        outputs[name] = run("-m", "builders", "new-pipeline", name, "--from", "yolo", "--model", str(model_file), *where)
        recipe = clone / name / "pipeline.toml"
        edit(
            recipe,
            r"^exclude = \[\]$",
            f'calibration_dir = "{shapes_photos["calibration"]}"\nevaluation_dir = "{shapes_photos["held_out"]}"\nexclude = []',
        )
    assert "ok: " in run("-m", "vision_serving.consistency", "--repository", str(clone))
    started = {name: build(builds, name, clone) for name in yolo_models}
    return {name: outputs[name] + started[name].result() for name in yolo_models}


def test_new_pipeline_reads_the_yolo_exports(detectors):
    """What the one command found in each file: the head, the classes and the input size from Ultralytics' metadata."""
    assert (
        "shapes_yolo.onnx: yolo head, 3 classes (circle, square, triangle), input 128x192, Ultralytics metadata" in detectors["shapes_yolo"]
    )
    assert (
        "shapes_end2end.onnx: end2end head, 3 classes (circle, square, triangle), input 128x128, Ultralytics metadata"
        in (detectors["shapes_end2end"])
    )
    assert "shapes_v5.onnx: yolo_v5 head, 3 classes (circle, square, triangle), input 128x192" in detectors["shapes_v5"]
    # Static batch-1 exports: the raw heads' batch is made dynamic; NMS inside the model cannot be, so it serves batch 1.
    assert "becomes dynamic" in detectors["shapes_yolo"] and "max_batch_size 1" in detectors["shapes_end2end"]
    # dynamic=True: the symbolic dims fixed at the metadata's imgsz; with nms=True, batch=4 the NMS loop serves batches of 4.
    assert "shapes_dynamic.onnx: yolo head, 3 classes (circle, square, triangle), input 128x128" in detectors["shapes_dynamic"]
    assert "shapes_dynamic_nms.onnx: end2end head, 3 classes (circle, square, triangle), input 128x128" in detectors["shapes_dynamic_nms"]
    assert "exported for batches of up to 4: max_batch_size 4" in detectors["shapes_dynamic_nms"]


def test_an_unsupported_model_is_refused_in_one_line(clone, tmp_path):
    model_file = tmp_path / "classifier.onnx"
    onnx.save(tiny_classifier(), model_file)
    result = subprocess.run(
        [sys.executable, "-m", "builders", "new-pipeline", "not_a_detector", "--from", "yolo", "--model", str(model_file)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: classifier.onnx: output 'scores' has shape ['n', 4]; supported: yolo [N, 4+C, A]"), line
    assert not (clone / "not_a_detector").exists()


# --------------------------------------------------------------------------- the files each one touched


@pytest.fixture(scope="module")
def brought(own_classifier, landscape_segmenter, detectors) -> list[str]:
    """The new pipelines, every build done."""
    for output in (own_classifier.result(), landscape_segmenter.result()):
        assert "serves" in output
    return [CLASSIFIER, SEGMENTER, *detectors]


def test_each_model_touched_only_its_own_pipeline_folder(clone, brought, project_status):
    touched = changed_paths(clone.parent)
    by_pipeline = {name: [path for path in touched if path.startswith(f"model_repository/{name}/")] for name in brought}
    assert sorted(path for paths in by_pipeline.values() for path in paths) == touched  # nothing outside them
    for name, paths in by_pipeline.items():
        assert f"model_repository/{name}/pipeline.toml" in paths and f"model_repository/{name}/{name}/config.pbtxt" in paths
        built = [path for path in paths if path.endswith(BUILT) and path != f"model_repository/{name}/model.onnx"]
        assert built == []  # what the builders wrote is ignored, as in the project
    # The model file a user adds is a source, pinned by sha256 in the recipe: theirs to commit.
    for name in (CLASSIFIER, *DETECTORS):
        assert f"model_repository/{name}/model.onnx" in by_pipeline[name]
    assert git(ROOT, "status", "--porcelain", "--untracked-files=all") == project_status  # the project's checkout is unchanged


# --------------------------------------------------------------------------- served, against the references


@pytest.fixture(scope="module")
def server(clone, brought, tmp_path_factory) -> Iterator[dict[str, str]]:
    """``./scripts/serve`` for the new pipelines (it checks their builds are up to date), on free ports."""
    with serve_script.serving(clone, list(brought), tmp_path_factory.mktemp("serve") / "serve.log") as served:
        with urllib.request.urlopen(f"http://{served['http']}/v2/health/ready", timeout=5) as response:
            assert response.status == 200
        assert f"serve: pipelines: {', '.join(brought)}" in Path(served["log"]).read_text()
        yield served


def infer(server, model: str, images: list[bytes], outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
    client = grpcclient.InferenceServerClient(server["grpc"])
    image = grpcclient.InferInput("IMAGE", [len(images), 1], "BYTES")
    image.set_data_from_numpy(np.array(images, dtype=np.object_).reshape(-1, 1))
    result = client.infer(model, [image])
    return {name: result.as_numpy(name) for name in outputs}


def test_own_classifier_answers_like_onnxruntime(server, clone, photo_bytes):
    pipeline = layout.pipeline(CLASSIFIER, clone)
    names = ["coffee", "chelsea", "astronaut"]
    answer = infer(server, CLASSIFIER, [photo_bytes[n] for n in names], ("LABELS", "SCORES", "CLASS_IDS"))
    # The reference: the library's decode and preprocessing of the new configs, then onnxruntime on the FP32 ONNX and a softmax.
    inputs = ServedInputs(PipelineConfigs.load(pipeline))
    (batch,) = inputs.core_feeds(inputs.preprocessed([inputs.decode(photo_bytes[n]) for n in names])).values()
    (logits,) = create_session(pipeline.onnx("fp32")).run(None, {"images": batch})
    probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    expected = np.argsort(-probabilities, axis=1, kind="stable")[:, :2]
    assert answer["LABELS"].shape == (3, 2)
    assert answer["CLASS_IDS"].tolist() == expected.tolist()
    assert [[label.decode() for label in row] for row in answer["LABELS"]] == [[COLOURS[i] for i in row] for row in expected]
    np.testing.assert_allclose(answer["SCORES"], np.take_along_axis(probabilities, expected, axis=1), atol=2e-3)


def test_landscape_segmenter_matches_mediapipe(server, photo_bytes):
    """The 144x256 model: MediaPipe's landscape masks (model_selection=1) on people and on photos without them."""
    names = ["astronaut", "grace_hopper", "camera", "coffee", "rocket", "motorcycle_left", "chelsea", "page"]
    reference = references.mediapipe_outputs("selfie_segmentation", {n: photo_bytes[n] for n in names}, model_selection=1)
    answer = infer(server, SEGMENTER, [photo_bytes[n] for n in names], ("MASK", "COVERAGE"))
    for index, name in enumerate(names):
        mask = segmentation.decode_png(answer["MASK"][index, 0])
        expected = reference[name] >= 0.5
        assert mask.shape == expected.shape == image_codec.decode_rgb(photo_bytes[name], LIMITS).shape[:2]
        assert answer["COVERAGE"][index, 0] == pytest.approx(float(expected.mean()), abs=0.01), name
        if expected.mean() > 0.05:
            assert segmentation.iou(mask, expected) >= 0.95, name


@pytest.fixture(scope="module")
def scenes(tmp_path_factory) -> dict[str, bytes]:
    """Photos the detectors never saw: new scenes at many sizes (PNG and JPEG), and package photos without shapes."""
    written = write_scenes(tmp_path_factory.mktemp("scenes"), 10, seed=21)
    return {**written, **{f"{name}.png": photos.photo_bytes(name) for name in ("coffee", "astronaut")}}


def served_detections(server, name: str, images: list[bytes], batch: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]]:
    """Per image: (boxes, scores, class ids, labels) as the ensemble answers, ``batch`` images per request."""
    found = []
    for start in range(0, len(images), batch):
        out = infer(server, name, images[start : start + batch], ("BOXES", "SCORES", "CLASS_IDS", "LABELS", "COUNT"))
        for row, count in enumerate(out["COUNT"][:, 0]):
            labels = [label.decode() for label in out["LABELS"][row, :count]]
            found.append((out["BOXES"][row, :count], out["SCORES"][row, :count], out["CLASS_IDS"][row, :count], labels))
    return found


@pytest.fixture(scope="module")
def predicted(yolo_models, scenes) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Ultralytics' predictor on each detector's model file (one run for all). It decodes its own layouts only: the
    YOLOv5-layout file is the yolo export rewritten (the same network, the same scores), so its reference is the
    predictor on that export."""
    found = yolo_exports.references({name: path for name, path in yolo_models.items() if name != "shapes_v5"}, scenes)
    return {**found, "shapes_v5": found["shapes_yolo"]}


@pytest.mark.parametrize("name", DETECTORS)
def test_detections_equal_ultralytics_predictor(server, predicted, scenes, name):
    """Same count and classes per photo, each box matched with IoU >= 0.99 and its score within 0.001, the labels the
    model's names: at FP32 (the CPU's served core), and on a landscape input for yolo and yolo_v5."""
    names = sorted(scenes)
    expected = predicted[name]
    batch = 1 if DETECTORS[name] == "end2end" else 4  # the static nms=True export serves batch 1; the dynamic one 4
    served = served_detections(server, name, [scenes[n] for n in names], batch)
    assert sum(len(expected[n]["scores"]) for n in names) >= len(names)  # the model finds shapes: a real comparison
    for photo, (boxes, scores, class_ids, labels) in zip(names, served):
        reference = expected[photo]
        assert len(boxes) == len(reference["boxes"]), photo
        assert sorted(class_ids.tolist()) == sorted(reference["classes"].tolist()), photo
        assert labels == [yolo.CLASSES[c] for c in class_ids]
        matches = detection.match_by_class((boxes, class_ids), (reference["boxes"], reference["classes"]), MIN_IOU)
        assert len(matches) == len(boxes), f"{photo}: {detection.box_iou(boxes, reference['boxes'])}"
        for i, j, _ in matches:
            assert scores[i] == pytest.approx(reference["scores"][j], abs=1e-3)


def test_detect_client_prints_the_labels(server, scenes, tmp_path, predicted):
    name = sorted(scenes)[1]
    path = tmp_path / name
    path.write_bytes(scenes[name])
    expected = predicted["shapes_yolo"][name]  # the predictor answers each photo alone
    result = subprocess.run(
        [str(ROOT / "scripts" / "detect"), "--url", server["grpc"], "--model", "shapes_yolo", "--json", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    (record,) = json.loads(result.stdout)
    assert sorted(d["label"] for d in record["detections"]) == sorted(yolo.CLASSES[c] for c in expected["classes"])
    table = subprocess.run(
        [str(ROOT / "scripts" / "detect"), "--url", server["grpc"], "--model", "shapes_yolo", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    count = len(expected["classes"])
    assert table.stdout.splitlines()[0].startswith(f"{path}: {count} detection{'' if count == 1 else 's'}")
    for label in {yolo.CLASSES[c] for c in expected["classes"]}:
        assert any(line.split()[1:2] == [label] for line in table.stdout.splitlines()[2:])


def test_evaluate_on_your_labelled_images(detectors, clone, shapes_photos):
    """`builders evaluate --dataset`: the detection metric of FP32 and of the served precision on labelled images."""
    output = run(
        "-m",
        "builders",
        "evaluate",
        "--pipeline",
        "shapes_yolo",
        "--model-repository",
        str(clone),
        "--dataset",
        str(shapes_photos["labelled"]),
    )
    report = json.loads((layout.pipeline("shapes_yolo", clone).reports_dir / "dataset.json").read_text())
    assert report["images"] == 40 and "fp32" in report["metrics"], output
    # The tests' small detector (val mAP50 about 0.5 on its own scenes): well above what boxes in the wrong place would score.
    fp32 = report["metrics"]["fp32"]
    assert fp32["map50"] > 0.25 and fp32["precision"] > 0.3 and fp32["recall"] > 0.1
    served = report["metrics"][report["served_precision"]]  # the ladder's choice scores as FP32 does on your data
    assert all(abs(served[key] - fp32[key]) <= 0.05 for key in ("precision", "recall", "map50"))
