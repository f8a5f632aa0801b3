"""``new-pipeline --from yolo`` with an Ultralytics depth export: a depth pipeline, answering as Ultralytics.

A small hand-built graph stands in for an export in the first tests (what the file is, the one-line refusals, the
folder). The last ones bring the tests' own YOLO26n-depth (tests/support/yolo_depth.py: a ground plane and shapes
standing on it), trained by Ultralytics and exported ``static.onnx`` (square, batch 1 made dynamic), ``wide.onnx``
(landscape) and ``dynamic.onnx`` (``dynamic=True``), into a temporary model repository as a user would, then serve them
in process on the CPU core on scenes the model never saw and package photos: every pixel of the served float32 map
within 1e-4 of the map's range of ``YOLO(file).predict``'s depth (tests/support/ultralytics_yolo.py), and the PNG
within its millimetre rounding of the map.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest
from onnx import helper

from builders import cli
from builders.families import yolo, yolo_depth
from tests.support import yolo_depth as scenes
from tests.support import yolo_exports
from tests.support.onnx_graphs import const, model, value
from vision_serving import consistency, layout, model_config
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.served import ServedPipeline
from vision_serving.tasks import depth

ULTRALYTICS = {"names": "{0: 'depth'}", "stride": "32", "task": "depth", "batch": "1", "imgsz": "[32, 48]"}
EXPORTS = {"depth_static": "static", "depth_wide": "wide", "depth_dynamic": "dynamic"}
PACKAGE_PHOTOS = ("astronaut", "coffee", "rocket", "page")
RANGE_SHARE = 1e-4  # the served map's largest difference, as a share of the predictor's map's range (the bar: 1 %)


def depth_graph(
    path: Path,
    size: tuple[int, int] = (32, 48),
    metadata: dict[str, str] | None = None,
    batch: int | str = 1,
    output_dims: list[int | str] | None = None,
    outputs: int = 1,
) -> Path:
    """A depth export's shape: a 1x1 Conv to one channel, then Exp (positive depth at every input pixel)."""
    nodes = [helper.make_node("Conv", ["images", "w"], ["log_depth"]), helper.make_node("Exp", ["log_depth"], ["depth0"])]
    out = [value("depth0", output_dims or [batch, 1, *size])]
    if outputs == 2:
        out.append(value("log_depth", [batch, 1, *size]))
    built = model(nodes, [value("images", [batch, 3, *size])], out, [const("w", np.full((1, 3, 1, 1), 0.3), np.float32)])
    helper.set_model_props(built, metadata if metadata is not None else ULTRALYTICS)
    onnx.save(built, path)
    return path


def test_a_depth_export_is_read_from_its_file(tmp_path):
    found = yolo_depth.inspect(depth_graph(tmp_path / "m.onnx"))
    assert (found.height, found.width, found.output_dims, found.static_batch, found.ultralytics) == (32, 48, (1, 32, 48), True, True)
    dynamic = yolo_depth.inspect(depth_graph(tmp_path / "d.onnx", batch="batch"))
    assert not dynamic.static_batch


@pytest.mark.parametrize(
    "change, message",
    [
        ({"outputs": 2}, "m.onnx is a depth model with 2 outputs (depth0, log_depth); supported: one float32 [N, 1, H, W] depth output"),
        ({"output_dims": [1, 1, 16, 24]}, "m.onnx: output 'depth0' is float32 [1, 1, 16, 24] for a 32x48 input; supported: one float32"),
    ],
    ids=["two-outputs", "half-size-output"],
)
def test_unsupported_depth_models_are_refused_in_one_line(tmp_path, change, message):
    with pytest.raises(yolo.UnsupportedModel) as raised:
        yolo_depth.inspect(depth_graph(tmp_path / "m.onnx", **change))
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_the_cli_brings_a_depth_export_and_refuses_other_tasks_in_one_line(tmp_path, capsys):
    repository = tmp_path / "model_repository"
    repository.mkdir()
    where = ["--model-repository", str(repository)]
    other = depth_graph(tmp_path / "rooms.onnx", metadata={**ULTRALYTICS, "task": "captioning"})
    assert cli.main(["new-pipeline", "rooms", "--from", "yolo", "--model", str(other), *where]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert (
        line == "error: rooms.onnx is an Ultralytics 'captioning' model; supported: classify, depth, detect, obb, pose, segment, semantic"
    )
    path = depth_graph(tmp_path / "ground.onnx")
    assert cli.main(["new-pipeline", "ground", "--from", "yolo", "--model", str(path), *where, "--labels", str(path)]) == 2
    assert "ground.onnx is an Ultralytics depth model (no classes)" in capsys.readouterr().err
    assert cli.main(["new-pipeline", "ground", "--from", "yolo", "--model", str(path), *where]) == 0
    folder = repository / "ground"
    assert not (folder / "ground_postprocess" / "labels.txt").exists()
    assert consistency.check_repository(repository) == []
    configs = PipelineConfigs.load(layout.pipeline("ground", repository))
    assert configs.task is depth.TASK
    assert model_config.parameter(configs.postprocess, "depth_scale") == "1000.0"
    assert model_config.parameter(configs.preprocess, "resize") == "yolo_stretch"


@pytest.fixture(scope="module")
def model_files(tmp_path_factory) -> dict[str, Path]:
    return yolo_exports.downloaded(scenes.trained(), EXPORTS, tmp_path_factory.mktemp("downloads"))


@pytest.fixture(scope="module")
def brought(model_files, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    return yolo_exports.brought_repository(model_files, tmp_path_factory.mktemp("depth"))


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> dict[str, bytes]:
    """Scenes the model never saw (90 to 420 px, PNG and JPEG) and package photos."""
    return {**scenes.new_scenes(tmp_path_factory.mktemp("scenes"), 12), **yolo_exports.package_photos(PACKAGE_PHOTOS)}


@pytest.fixture(scope="module")
def predicted(model_files, pictures) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    return yolo_exports.references(model_files, pictures, task="depth")


def test_new_pipeline_reads_the_depth_exports(brought):
    repository, said = brought
    for name in EXPORTS:
        size = "128x192" if name == "depth_wide" else "128x128"
        assert f"{name}.onnx: depth model, input {size}, Ultralytics metadata" in said[name]
        assert "nothing blocks a TensorRT build" in said[name]
        assert model_config.load_config(layout.pipeline(name, repository).model_dir("postprocess")).max_batch_size == yolo.MAX_BATCH


@pytest.mark.parametrize("name", EXPORTS)
def test_depth_equals_ultralytics_predictor(brought, predicted, pictures, name):
    repository, _ = brought
    names = sorted(pictures)
    served = ServedPipeline.load(PipelineConfigs.load(layout.pipeline(name, repository)), "cpu")
    result = served.run([pictures[photo] for photo in names])
    outputs = result.outputs()
    worst = 0.0
    for index, photo in enumerate(names):
        expected = predicted[name][photo]["depth"]
        spread = float(expected.max() - expected.min())
        assert spread > 0.05, f"{photo}: the model's depth hardly varies ({spread}): not a test of the resize"
        got = result.maps()[index]
        assert got.shape == expected.shape, photo
        share = float(np.abs(got - expected).max()) / spread
        worst = max(worst, share)
        assert share <= RANGE_SHARE, f"{photo}: max |Δ depth| is {share:.2%} of the range"
        from_png = depth.decode_png(bytes(outputs["DEPTH_PNG"][index, 0]), depth.DEPTH_SCALE)
        assert np.abs(from_png - got).max() <= 0.5 / depth.DEPTH_SCALE + 1e-4
        np.testing.assert_allclose(outputs["DEPTH_RANGE"][index], [got.min(), got.max()], rtol=1e-6)
    print(f"\n{name} vs Ultralytics' predictor: {len(names)} photos, max |Δ depth| {worst:.1e} of each map's range")


def test_a_half_pixel_resize_would_miss_the_tolerance(brought, predicted, pictures):
    """The comparison sees the resize: OpenCV's bilinear (half-pixel centres, not aligned corners) moves the maps past
    the tolerance."""
    repository, _ = brought
    names = sorted(pictures)
    served = ServedPipeline.load(PipelineConfigs.load(layout.pipeline("depth_static", repository)), "cpu")
    result = served.run([pictures[photo] for photo in names])
    shares = []
    for index, photo in enumerate(names):
        expected = predicted["depth_static"][photo]["depth"]
        model_map = depth.depth_2d(result.depth[index])
        half_pixel = cv2.resize(model_map, expected.shape[::-1], interpolation=cv2.INTER_LINEAR)
        shares.append(float(np.abs(half_pixel - expected).max()) / float(expected.max() - expected.min()))
    assert min(shares) > 10 * RANGE_SHARE, shares
