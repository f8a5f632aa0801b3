"""The command-line clients of the tasks (devtools/clients): each task's module found by its name, the generic client
for a task without one, each client's options, request inputs, table, JSON and the files it writes (no server: a
fake one where the whole program runs)."""

from __future__ import annotations

import argparse
import importlib
import json
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import cv2
import numpy as np
import pytest

from devtools import client, clients
from devtools.clients import classification as classification_client
from devtools.clients import detection as detection_client
from devtools.clients import generic
from devtools.clients import segmentation as segmentation_client
from devtools.clients import text_reading as text_reading_client
from tests.support import shipped as shipped_pipelines
from vision_serving import layout, model_config
from vision_serving.tasks import classification, detection, registry, segmentation
from vision_serving.tasks.base import LabelledSample, Postprocessor, Role, Task, TaskResult
from vision_serving.tasks.text_reading import reader


def png(picture: np.ndarray) -> bytes:
    ok, data = cv2.imencode(".png", picture)
    assert ok
    return data.tobytes()


# --------------------------------------------------------------------------- finding a task's client


def test_each_task_gets_the_client_module_named_as_it_is_or_the_generic_one():
    """A task with a module in devtools/clients gets its CLIENT, a task without one the generic client (a client is
    optional); every module there that exports a client is a registered task's."""
    folder = Path(clients.__file__).parent
    for name in registry.TASKS:
        if (folder / f"{name}.py").is_file():
            module = importlib.import_module(f"devtools.clients.{name}")
            assert clients.client_for(name) is module.CLIENT
            assert isinstance(module.CLIENT, clients.TaskClient) and module.CLIENT is not clients.GENERIC
        else:
            assert clients.client_for(name) is clients.GENERIC
    exporting = {path.stem for path in folder.glob("*.py") if re.search(r"^CLIENT = ", path.read_text(), re.M)} - {"generic"}
    assert exporting <= set(registry.TASKS), f"client modules of no registered task: {sorted(exporting - set(registry.TASKS))}"


def test_a_task_without_a_module_gets_the_generic_client_and_a_module_without_a_client_is_refused():
    assert clients.client_for("no_such_task") is clients.GENERIC is generic.CLIENT
    assert clients.client_for("not.a.module") is clients.GENERIC
    with pytest.raises(TypeError, match=r"devtools\.clients\.drawing is not the client of task 'drawing'"):
        clients.client_for("drawing")


def test_the_default_model_of_a_task_is_its_shipped_pipeline(tmp_path):
    """Each shipped task's client names its shipped pipeline, which is in model_repository/ under that task (read through
    the registry), and is its default; a task without a pipeline there has no default."""
    repository = shipped_pipelines.repository(tmp_path)
    by_task: dict[str, list[str]] = {}
    for pipeline in shipped_pipelines.pipelines():
        task = registry.for_config(model_config.load_config(pipeline.model_dir("postprocess")))
        by_task.setdefault(task.name, []).append(pipeline.name)
    assert by_task, "no pipeline in model_repository/"
    for task in registry.TASKS:
        assert client.task_pipelines(task, repository) == sorted(by_task.get(task, []))
        shipped = clients.client_for(task).pipeline
        if shipped is not None:
            assert shipped in by_task[task]
        assert client.default_model(task, repository) == (
            shipped if shipped is not None else None if len(by_task.get(task, [])) != 1 else by_task[task][0]
        )
    assert client.default_model("no_such_task", repository) is None


def _repository(folder, names):
    """Pipelines ``names`` with the face detector's postprocess config (detection); a name ending in "broken" has none."""
    source = layout.pipeline("face_detector").model_dir("postprocess") / "config.pbtxt"
    for name in names:
        (folder / name / f"{name}_postprocess").mkdir(parents=True)
        (folder / name / layout.RECIPE_FILENAME).write_text("")
        if not name.endswith("broken"):  # no config: left out (the consistency check reports it)
            shutil.copy(source, folder / name / f"{name}_postprocess")


def test_a_users_pipeline_never_takes_the_shipped_ones_place(tmp_path):
    """face_detector when it is there, whatever the user adds beside it (``car_detector`` sorts first)."""
    _repository(tmp_path, ("car_detector", "face_detector", "c_broken"))
    assert client.task_pipelines("detection", tmp_path) == ["car_detector", "face_detector"]
    assert client.default_model("detection", tmp_path) == "face_detector"
    assert client.default_model("classification", tmp_path) is None
    assert client.task_pipelines("detection", tmp_path / "missing") == []


def test_without_the_shipped_pipeline_the_only_one_is_the_default_and_several_need_model(tmp_path, capsys):
    _repository(tmp_path / "one", ("car_detector", "b_broken"))
    assert client.default_model("detection", tmp_path / "one") == "car_detector"
    _repository(tmp_path / "two", ("car_detector", "bike_detector"))
    assert client.default_model("detection", tmp_path / "two") is None
    assert client.model_choices("detection", tmp_path / "two") == "one of bike_detector, car_detector"
    assert client.model_choices("classification", tmp_path / "two") == "no pipeline of two/ has the task classification"


def test_a_client_without_a_default_asks_for_model_naming_the_choices(monkeypatch, capsys):
    monkeypatch.setattr(client, "default_model", lambda task_name, repository=layout.MODEL_REPOSITORY: None)
    monkeypatch.setattr(client, "model_choices", lambda task_name, repository=layout.MODEL_REPOSITORY: "one of bike_detector, car_detector")
    with pytest.raises(SystemExit):
        client.script_main("detection", ["photo.jpg"])
    assert "detect: error: --model is required: one of bike_detector, car_detector" in capsys.readouterr().err


def test_the_files_a_client_wrote_are_not_sent_again(tmp_path):
    for name in ("a.png", f"a{detection_client.DRAWN_SUFFIX}", "b.jpg"):
        (tmp_path / name).write_bytes(b"x")
    args = argparse.Namespace(paths=[str(tmp_path)], recursive=False)
    suffixes = clients.client_for("detection").output_suffixes()
    assert client.input_files("detect", args, suffixes) == [str(tmp_path / "a.png"), str(tmp_path / "b.jpg")]
    assert clients.client_for("segmentation").output_suffixes() == (segmentation.MASK_SUFFIX, segmentation_client.OVERLAY_SUFFIX)


# --------------------------------------------------------------------------- classification


def classification_post(folder: Path) -> classification.ClassificationPostprocessor:
    config = model_config.parse_config_text(
        """name: "tiny_postprocess" backend: "python" max_batch_size: 8
input [ { name: "LOGITS" data_type: TYPE_FP32 dims: [ 10 ] }, { name: "TOP_K" data_type: TYPE_INT32 dims: [ 1 ] optional: true } ]
output [ { name: "LABELS" data_type: TYPE_STRING dims: [ -1 ] }, { name: "SCORES" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "CLASS_IDS" data_type: TYPE_INT32 dims: [ -1 ] } ]
parameters [ { key: "task", value: { string_value: "classification" } }, { key: "top_k", value: { string_value: "3" } },
             { key: "labels_file", value: { string_value: "labels.txt" } } ]"""
    )
    (folder / "labels.txt").write_text("".join(f"class {i}\n" for i in range(10)))
    return classification.ClassificationPostprocessor(config, folder)


def test_classification_client_table_and_json(tmp_path):
    post = classification_post(tmp_path)
    outputs = post.run({"logits": np.arange(10, dtype=np.float32)[None]}).outputs()
    by_role = {role: outputs[name][0] for role, name in post.outputs.items() if name}
    report = classification_client.CLIENT.report("cat.jpg", by_role, b"", argparse.Namespace())
    assert report.lines[0] == "cat.jpg" and report.lines[1].split() == ["rank", "label", "score", "class", "id"]
    assert report.lines[2].split()[:3] == ["1", "class", "9"]
    assert report.record["predictions"][0]["class_id"] == 9
    assert [p["class_id"] for p in report.record["predictions"]] == [9, 8, 7] and report.files == []


def test_classification_client_sends_top_k_only_when_asked():
    parser = argparse.ArgumentParser()
    classification_client.CLIENT.add_arguments(parser)
    top_k = classification_client.CLIENT.request_inputs(parser.parse_args(["--top-k", "3"]), 2)
    assert top_k.keys() == {"top_k"} and top_k["top_k"].dtype == np.int32 and top_k["top_k"].tolist() == [[3], [3]]
    assert classification_client.CLIENT.request_inputs(parser.parse_args([]), 2) == {}
    assert {"top_k"} == {role.role for role in classification.TASK.request_roles()}
    with pytest.raises(SystemExit):
        parser.parse_args(["--top-k", "0"])


# --------------------------------------------------------------------------- detection

DETECTIONS = {
    "boxes": np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.float32), "scores": np.array([0.9, 0.5], np.float32),
    "class_ids": np.array([1, 1], np.int32), "labels": np.array([b"square", b"square"], object), "count": np.array([2], np.int32),
}  # fmt: skip


def test_the_detection_client_prints_labels_and_counts():
    report = detection_client.CLIENT.report("x.jpg", DETECTIONS, b"", argparse.Namespace(draw=None))
    assert report.lines[0] == "x.jpg: 2 detections (square: 2)"
    assert report.lines[1].split() == ["#", "label", "score", "x_min", "y_min", "x_max", "y_max"]
    assert report.lines[2].split() == ["1", "square", "0.900", "1.0", "2.0", "3.0", "4.0"]
    assert report.record["detections"][0] == {"label": "square", "class_id": 1, "score": 0.9, "box": [1.0, 2.0, 3.0, 4.0]}
    none = detection_client.CLIENT.report("y.jpg", {**DETECTIONS, "count": np.array([0], np.int32)}, b"", argparse.Namespace(draw=None))
    assert none.lines == ["y.jpg: 0 detections"] and none.record["detections"] == []


def test_the_detection_client_draws_boxes_and_keypoints(tmp_path):
    image = png(np.full((100, 120, 3), 255, np.uint8))
    outputs = {
        **DETECTIONS,
        "boxes": np.array([[10, 10, 60, 50], [0, 0, 0, 0]], np.float32),
        "count": np.array([1], np.int32),
        "keypoints": np.array([[[20, 20], [30, 30]], [[0, 0], [0, 0]]], np.float32),
    }
    one = tmp_path / "drawn.jpg"
    report = detection_client.CLIENT.report("x.jpg", outputs, image, argparse.Namespace(draw=one, single_image=True))
    assert report.lines[0] == f"x.jpg: 1 detection (square: 1) -> {one}"
    assert report.record["drawn"] == str(one) and report.files == [str(one)]
    assert report.record["detections"][0]["keypoints"] == [[20.0, 20.0], [30.0, 30.0]]
    picture = cv2.imread(str(one))
    assert picture.shape == (100, 120, 3) and (picture[10, 10:60] != 255).any() and (picture[80:, :] == 255).all()
    # Several images (or an OUT that is not a picture): OUT is a folder of <name>.detections.jpg.
    folder = tmp_path / "out"
    many = detection_client.CLIENT.report("photos/y.png", outputs, image, argparse.Namespace(draw=folder, single_image=False))
    assert many.record["drawn"] == str(folder / f"y{detection_client.DRAWN_SUFFIX}") and (folder / "y.detections.jpg").is_file()
    with pytest.raises(ValueError, match="the server decoded this file but OpenCV cannot, nothing drawn"):
        detection_client.CLIENT.report("z.heic", outputs, b"not a picture", argparse.Namespace(draw=folder, single_image=False))


def test_the_detection_options_set_the_tasks_request_inputs():
    assert set(detection_client.REQUEST_ROLES) == {role.role for role in detection.TASK.request_roles()}
    parser = argparse.ArgumentParser()
    detection_client.CLIENT.add_arguments(parser)
    inputs = detection_client.CLIENT.request_inputs(parser.parse_args(["--iou-threshold", "0.5"]), 3)
    assert inputs.keys() == {"iou_threshold"} and inputs["iou_threshold"].dtype == np.float32
    assert inputs["iou_threshold"].tolist() == [[0.5]] * 3
    both = detection_client.CLIENT.request_inputs(parser.parse_args(["--score-threshold", "0", "--iou-threshold", "1"]), 1)
    assert {role: value.tolist() for role, value in both.items()} == {"score_threshold": [[0.0]], "iou_threshold": [[1.0]]}
    for bad in ("1.5", "-0.1", "nan"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--score-threshold", bad])
    tiled = detection_client.CLIENT.request_inputs(parser.parse_args(["--tiling", '{"tile_size": 512}']), 2)
    assert tiled.keys() == {"tiling"} and tiled["tiling"].dtype == np.object_
    assert tiled["tiling"].tolist() == [[b'{"tile_size": 512}']] * 2
    with pytest.raises(SystemExit):
        parser.parse_args(["--tiling", "{tile"])


# --------------------------------------------------------------------------- segmentation


def test_the_segmentation_client_writes_the_mask_and_an_overlay(tmp_path):
    mask = np.zeros((8, 10), np.uint8)
    mask[:, :5] = 255
    outputs = {"mask": np.array([segmentation.encode_png(mask, binary=True)], object), "coverage": np.array([0.5], np.float32)}
    image = png(np.full((8, 10, 3), 128, np.uint8))
    out = tmp_path / "masks"
    report = segmentation_client.CLIENT.report("photos/a.png", outputs, image, argparse.Namespace(out_dir=out, overlay=True))
    mask_file, overlay_file = out / "a.mask.png", out / "a.overlay.jpg"
    assert report.lines == [f"photos/a.png  coverage  50.0%  -> {mask_file}, {overlay_file}"]
    assert report.record == {"file": "photos/a.png", "coverage": 0.5, "mask_file": str(mask_file), "overlay_file": str(overlay_file)}
    assert report.files == [str(mask_file), str(overlay_file)]
    assert np.array_equal(segmentation.decode_png(mask_file.read_bytes()), mask)
    tinted = cv2.imread(str(overlay_file))
    assert tinted.shape == (8, 10, 3) and abs(int(tinted[4, 8, 0]) - 128) < 8 and int(tinted[4, 1, 0]) > 160  # blue tint on the mask
    # Beside the image without --out-dir; no overlay when the image is not the mask's size.
    (tmp_path / "photos").mkdir()
    small = segmentation_client.CLIENT.report(
        str(tmp_path / "photos" / "b.png"), outputs, png(np.zeros((4, 4, 3), np.uint8)), argparse.Namespace(out_dir=None, overlay=True)
    )
    assert small.record["mask_file"] == str(tmp_path / "photos" / "b.mask.png") and small.record["overlay_file"] is None


# --------------------------------------------------------------------------- text reading


def line(text: str, x: float, y: float, score: float = 0.9) -> reader.Line:
    box = np.array([[x, y], [x + 100, y], [x + 100, y + 20], [x, y + 20]], np.float32)
    return reader.Line(text, score, box, 0.8)


def test_the_text_reading_client_prints_each_line_and_draws_the_boxes(tmp_path):
    image = png(np.full((80, 200, 3), 255, np.uint8))
    lines = [line("Gate", 10, 10, 0.987), line("Road", 10, 40, 0.5)]
    outputs = {role: value[0] for role, value in reader.padded([lines]).items()}
    by_role = {"texts": outputs["TEXTS"], "scores": outputs["SCORES"], "boxes": outputs["BOXES"], "count": outputs["COUNT"]}
    args = argparse.Namespace(draw=tmp_path / "out", single_image=False)
    report = text_reading_client.CLIENT.report("sign.png", by_role, image, args)
    drawn = tmp_path / "out" / f"sign{text_reading_client.DRAWN_SUFFIX}"
    assert report.lines == [f"sign.png: 2 lines -> {drawn}", "    1  0.987  Gate", "    2  0.500  Road"]
    assert [item["text"] for item in report.record["lines"]] == ["Gate", "Road"] and report.record["drawn"] == str(drawn)
    assert report.record["lines"][0]["box"][2] == [110.0, 30.0]
    picture = cv2.imread(str(drawn))
    assert picture is not None and picture.shape == (80, 200, 3) and (picture != 255).any()
    plain = text_reading_client.CLIENT.report("sign.png", by_role, image, argparse.Namespace(draw=None))
    assert plain.lines[0] == "sign.png: 2 lines" and "drawn" not in plain.record and plain.files == []


# --------------------------------------------------------------------------- a new task: the generic client


class ScratchTask(Task):
    """A throwaway task, registered only in these tests: two outputs, no client module of its own."""

    name = "scratch"
    drift_features = ()
    gate_defaults: ClassVar[Mapping[str, float]] = {}
    dataset_layout = "none"

    def output_roles(self) -> tuple[Role, ...]:
        return (Role("scores", "FP32", (2,), name="SCORES"), Role("names", "BYTES", (None,), name="NAMES"))

    def config_roles(self, config: model_config.ModelConfig) -> tuple[tuple[Role, ...], tuple[Role, ...]]:
        return (), self.output_roles()

    def postprocessor(self, config: model_config.ModelConfig, model_dir: Path) -> Postprocessor:
        raise NotImplementedError

    def gate(self, reference: TaskResult, candidate: TaskResult, limits: Mapping[str, float]) -> dict[str, Any]:
        raise NotImplementedError

    def dataset(self, directory: Path, postprocessor: Postprocessor) -> list[LabelledSample]:
        raise NotImplementedError

    def dataset_metrics(self, runs: Any) -> dict[str, float]:
        raise NotImplementedError

    def response_result(self, postprocessor: Postprocessor, outputs: Mapping[str, np.ndarray]) -> TaskResult:
        raise NotImplementedError


class FakeResult:
    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays

    def as_numpy(self, name: str) -> np.ndarray:
        return self.arrays[name]


class FakeServer:
    """tritonclient.grpc's calls the client makes, for one ``scratch`` pipeline: each image's scores are
    (its index in the request / 4, 0.5), its names ``cat`` and, for a second image, bytes that are not text."""

    CONFIGS: ClassVar[dict[str, dict[str, Any]]] = {
        "scratch": {
            "name": "scratch",
            "max_batch_size": 4,
            "input": [{"name": "IMAGE", "data_type": "TYPE_STRING", "dims": ["1"]}],
            "output": [
                {"name": "SCORES", "data_type": "TYPE_FP32", "dims": ["2"]},
                {"name": "NAMES", "data_type": "TYPE_STRING", "dims": ["-1"]},
            ],
            "ensemble_scheduling": {"step": [{"model_name": "scratch_postprocess"}]},
        },
        "scratch_postprocess": {"name": "scratch_postprocess", "parameters": {"task": {"string_value": "scratch"}}},
    }

    def __init__(self) -> None:
        self.requests: list[int] = []

    def is_server_ready(self, **_: object) -> bool:
        return True

    def is_model_ready(self, model: str, **_: object) -> bool:
        return model in self.CONFIGS

    def get_model_metadata(self, model: str, **_: object) -> dict[str, Any]:
        return {"name": model}

    def get_model_config(self, model: str, **_: object) -> dict[str, Any]:
        return {"config": self.CONFIGS[model]}

    def infer(self, model: str, inputs: list[Any], **_: object) -> FakeResult:
        count = inputs[0].shape()[0]
        self.requests.append(count)
        scores = np.array([[index / 4, 0.5] for index in range(count)], np.float32)
        names = np.array([[b"cat", b"\xff\xd8" if index else b"mat"] for index in range(count)], object)
        return FakeResult({"SCORES": scores, "NAMES": names})

    def close(self) -> None:
        pass


@pytest.fixture
def scratch(monkeypatch, tmp_path) -> tuple[FakeServer, list[str]]:
    """The scratch task in the registry, the client connected to a fake server, two image files."""
    monkeypatch.setitem(registry.TASKS, "scratch", ScratchTask())
    server = FakeServer()
    monkeypatch.setattr(client, "connect", lambda args: client.TritonConnection("grpc", "fake:0", 5.0, client=server))
    files = []
    for name in ("a.png", "b.png"):
        (tmp_path / name).write_bytes(b"uploaded " + name.encode())
        files.append(str(tmp_path / name))
    return server, files


def test_a_new_task_gets_the_generic_client_which_prints_every_output(scratch, capsys):
    server, files = scratch
    assert clients.client_for("scratch") is clients.GENERIC
    assert client.main(["--task", "scratch", "--model", "scratch", *files]) == 0
    assert server.requests == [2]
    out = capsys.readouterr().out
    assert out.split("\n\n") == [
        f"{files[0]}\n  scores  [2]  [0, 0.5]\n  names   [2]  ['cat', 'mat']",
        f"{files[1]}\n  scores  [2]  [0.25, 0.5]\n  names   [2]  ['cat', '<2 bytes>']\n",
    ]


def test_the_generic_client_gives_every_output_as_lists_in_json(scratch, capsys):
    server, files = scratch
    assert client.main(["--task", "scratch", "--model", "scratch", "--json", *files]) == 0
    first, second = json.loads(capsys.readouterr().out)
    assert first == {"file": files[0], "outputs": {"scores": [0.0, 0.5], "names": ["cat", "mat"]}}
    assert second == {"file": files[1], "outputs": {"scores": [0.25, 0.5], "names": ["cat", {"bytes": 2, "base64": "/9g="}]}}
    assert client.main(["--task", "scratch", "--model", "scratch", "--json", "--batch-size", "1", *files]) == 0
    assert [result["outputs"]["names"] for result in json.loads(capsys.readouterr().out)] == [["cat", "mat"]] * 2
    assert server.requests == [2, 1, 1]


def test_a_new_task_without_a_pipeline_in_the_repository_needs_model(scratch, capsys):
    _, files = scratch
    assert client.default_model("scratch") is None
    with pytest.raises(SystemExit):
        client.main(["--task", "scratch", *files])
    assert "--model is required: no pipeline of model_repository/ has the task scratch" in capsys.readouterr().err
    # A script of its own runs the same client, named as the script.
    assert client.script_main("scratch", ["--model", "scratch", files[0]]) == 0
    assert capsys.readouterr().out.startswith(f"{files[0]}\n  scores  [2]  [0, 0.5]")


def test_the_generic_entry_serves_a_shipped_task_with_its_own_client(scratch, capsys):
    """``python -m devtools.client --task NAME``: the task's own client, and its pipeline's task must be NAME."""
    _, files = scratch
    assert client.main(["--task", "detection", "--model", "scratch", "--draw", "out", files[0]]) == 2
    assert capsys.readouterr().err.strip() == (
        "python -m devtools.client: error: model 'scratch' is a scratch pipeline, not detection: use its own client"
    )
    with pytest.raises(SystemExit):
        client.main([files[0]])
    assert "the following arguments are required: --task" in capsys.readouterr().err


def test_the_generic_report_of_an_output_of_any_shape():
    outputs = {"grid": np.arange(40, dtype=np.int32).reshape(2, 20), "one": np.float32(0.5), "empty": np.zeros((0,), object)}
    report = generic.CLIENT.report("x.png", outputs, b"", argparse.Namespace())
    assert report.lines[0] == "x.png" and report.lines[1].startswith("  grid    [2x20]  [[0, 1, 2, ..., 17, 18, 19],")
    assert report.lines[2] == "  one     [scalar]  0.5" and report.lines[3] == "  empty   [0]  []"
    assert report.record["outputs"] == {"grid": np.arange(40).reshape(2, 20).tolist(), "one": 0.5, "empty": []}


# --------------------------------------------------------------------------- detection: a pose model's keypoints


def pose_outputs(keypoints: list[list[float]]) -> dict[str, np.ndarray]:
    """One detection (a box along the picture's edges) with ``keypoints`` [P, 3] (x, y, score), and a padding row."""
    points = np.zeros((2, len(keypoints), 3), np.float32)
    points[0] = keypoints
    boxes = np.array([[0, 0, 99, 79], [0, 0, 0, 0]], np.float32)
    return {**DETECTIONS, "boxes": boxes, "count": np.array([1], np.int32), "keypoints": points}


def test_the_detection_client_draws_the_keypoints_a_pose_model_scores_at_least_a_half(tmp_path):
    """``[K, P, 3]``: a keypoint scored below 0.5 is not drawn (Ultralytics' plotting leaves it out too); JSON has them all."""
    image = png(np.full((80, 100, 3), 255, np.uint8))
    out = tmp_path / "drawn.png"
    outputs = pose_outputs([[20, 40, 0.9], [50, 40, 0.2], [80, 40, 0.5]])
    report = detection_client.CLIENT.report("x.png", outputs, image, argparse.Namespace(draw=out, single_image=True))
    assert report.record["detections"][0]["keypoints"] == [[20.0, 40.0, 0.9], [50.0, 40.0, 0.2], [80.0, 40.0, 0.5]]
    assert "keypoint_names" not in report.record  # no server to ask (a report of its own): no names
    picture = cv2.imread(str(out))
    assert (picture[40, 20] != 255).any() and (picture[40, 80] != 255).any()
    assert (picture[36:45, 46:55] == 255).all()  # the keypoint scored 0.2
    # The face detector's keypoints [K, P, 2] have no score: every one is drawn, listed as [x, y].
    plain = {**outputs, "keypoints": outputs["keypoints"][..., :2]}
    report = detection_client.CLIENT.report("x.png", plain, image, argparse.Namespace(draw=out, single_image=True))
    assert report.record["detections"][0]["keypoints"] == [[20.0, 40.0], [50.0, 40.0], [80.0, 40.0]]
    assert (cv2.imread(str(out))[40, 50] != 255).any()


def test_coco_keypoints_are_joined_by_their_limbs_where_both_ends_are_drawn(tmp_path):
    """17 keypoints: Ultralytics' skeleton. Shoulders (5, 6) both drawn: their limb is; the left elbow (7) scored 0.1:
    neither it nor the upper arm to it is."""
    keypoints = [[90.0, 70.0, 0.1]] * 17
    keypoints[5], keypoints[6], keypoints[7] = [20.0, 20.0, 0.9], [80.0, 20.0, 0.8], [20.0, 60.0, 0.1]
    out = tmp_path / "person.png"
    args = argparse.Namespace(draw=out, single_image=True)
    detection_client.CLIENT.report("p.png", pose_outputs(keypoints), png(np.full((80, 100, 3), 255, np.uint8)), args)
    picture = cv2.imread(str(out))
    assert (picture[20, 50] != 255).any()  # mid-shoulders
    assert (picture[36:45, 15:26] == 255).all() and (picture[56:65, 15:26] == 255).all()  # no upper arm, no elbow


class PoseServer(FakeServer):
    """A detection pipeline of a pose model on the fake server: one detection of 3 keypoints per image; its postprocess
    names them (``keypoint_names``) or not."""

    ENSEMBLE: ClassVar[dict[str, Any]] = {
        "name": "poses",
        "max_batch_size": 4,
        "input": [{"name": "IMAGE", "data_type": "TYPE_STRING", "dims": ["1"]}],
        "output": [
            {"name": "BOXES", "data_type": "TYPE_FP32", "dims": ["-1", "4"]},
            {"name": "SCORES", "data_type": "TYPE_FP32", "dims": ["-1"]},
            {"name": "CLASS_IDS", "data_type": "TYPE_INT32", "dims": ["-1"]},
            {"name": "LABELS", "data_type": "TYPE_STRING", "dims": ["-1"]},
            {"name": "COUNT", "data_type": "TYPE_INT32", "dims": ["1"]},
            {"name": "KEYPOINTS", "data_type": "TYPE_FP32", "dims": ["-1", "3", "3"]},
        ],
        "ensemble_scheduling": {"step": [{"model_name": "poses_preprocess"}, {"model_name": "poses_postprocess"}]},
    }

    def __init__(self, names: str | None) -> None:
        super().__init__()
        parameters = {"task": {"string_value": "detection"}, **({"keypoint_names": {"string_value": names}} if names else {})}
        self.CONFIGS = {
            "poses": self.ENSEMBLE,
            "poses_preprocess": {"name": "poses_preprocess", "parameters": {}},
            "poses_postprocess": {"name": "poses_postprocess", "parameters": parameters},
        }
        self.config_requests: list[str] = []

    def get_model_config(self, model: str, **options: object) -> dict[str, Any]:
        self.config_requests.append(model)
        return super().get_model_config(model, **options)

    def infer(self, model: str, inputs: list[Any], **_: object) -> FakeResult:
        count = inputs[0].shape()[0]
        self.requests.append(count)
        outputs = pose_outputs([[20, 40, 0.9], [50, 40, 0.2], [80, 40, 0.5]])
        return FakeResult({name.upper(): np.stack([value[None] if name == "count" else value] * count) for name, value in outputs.items()})


@pytest.mark.parametrize("names", ["apex,left,right", None])
def test_the_detection_client_names_the_keypoints_as_the_postprocess_config_does(monkeypatch, tmp_path, capsys, names):
    """``--json``: every keypoint with its score, and the names the server's postprocess config gives them (read once
    per run, with the pipeline's interface: the program hands the client its task parameters), none where it gives none."""
    server = PoseServer(names)
    monkeypatch.setattr(client, "connect", lambda args: client.TritonConnection("grpc", "fake:0", 5.0, client=server))
    files = []
    for name in ("a.png", "b.png"):
        (tmp_path / name).write_bytes(png(np.full((80, 100, 3), 255, np.uint8)))
        files.append(str(tmp_path / name))
    assert client.script_main("detection", ["--model", "poses", "--json", "--draw", str(tmp_path / "drawn"), *files]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [record["detections"][0]["keypoints"] for record in records] == [[[20.0, 40.0, 0.9], [50.0, 40.0, 0.2], [80.0, 40.0, 0.5]]] * 2
    assert [record.get("keypoint_names") for record in records] == [names.split(",") if names else None] * 2
    assert server.config_requests.count("poses_postprocess") == 1  # read once, with the pipeline's interface
    assert (tmp_path / "drawn" / f"a{detection_client.DRAWN_SUFFIX}").is_file()
