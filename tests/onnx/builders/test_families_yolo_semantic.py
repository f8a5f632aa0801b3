"""``new-pipeline --from yolo`` with an Ultralytics semantic export: a semantic segmentation pipeline, answering as
Ultralytics.

A small hand-built graph stands in for an export in the first tests (the one-line refusals, the folder). The last ones
bring the tests' own YOLO26n-sem (tests/support/yolo_semantic.py: discs, squares and triangles on a background),
trained by Ultralytics and exported ``static.onnx`` (square, batch 1 made dynamic), ``wide.onnx`` (landscape) and
``dynamic.onnx`` (``dynamic=True``), into a temporary model repository as a user would, then serve them in process on
the CPU core on scenes the model never saw and package photos: every pixel's class equals ``YOLO(file).predict``'s
(tests/support/ultralytics_yolo.py), and the classes listed with their shares are the map's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from builders import cli
from builders.families import yolo, yolo_semantic
from tests.support import yolo_exports
from tests.support import yolo_semantic as scenes
from tests.support.onnx_graphs import const, model, value
from vision_serving import consistency, layout, model_config
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.served import ServedPipeline
from vision_serving.tasks import semantic_segmentation

ULTRALYTICS = {"names": "{0: 'floor', 1: 'wall', 2: 'sky'}", "stride": "32", "task": "semantic", "batch": "1", "imgsz": "[32, 48]"}
EXPORTS = {"rooms_static": "static", "rooms_wide": "wide", "rooms_dynamic": "dynamic"}
PACKAGE_PHOTOS = ("astronaut", "coffee", "rocket", "page")


def semantic_graph(path: Path, metadata: dict[str, str] | None = None, output_type: int = onnx.TensorProto.UINT8) -> Path:
    """A semantic export's shape: a 1x1 Conv to three channels, ArgMax over them, Cast to uint8 ([N, H, W])."""
    nodes = [
        helper.make_node("Conv", ["images", "w"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["ids"], axis=1, keepdims=0),
        helper.make_node("Cast", ["ids"], ["output0"], to=output_type),
    ]
    weights = const("w", np.random.default_rng(0).normal(size=(3, 3, 1, 1)), np.float32)
    built = model(nodes, [value("images", [1, 3, 32, 48])], [value("output0", [1, 32, 48], output_type)], [weights])
    helper.set_model_props(built, metadata if metadata is not None else ULTRALYTICS)
    onnx.save(built, path)
    return path


@pytest.mark.parametrize(
    "change, message",
    [
        ({"output_type": onnx.TensorProto.INT64}, "m.onnx: output 'output0' is int64 [1, 32, 48] for a 32x48 input; supported: one uint8"),
        ({"metadata": {**ULTRALYTICS, "names": "{0: 'floor'}"}}, "m.onnx: 1 class name (no 'names' metadata, or one class)"),
    ],
    ids=["int64-map", "one-class"],
)
def test_unsupported_semantic_models_are_refused_in_one_line(tmp_path, change, message):
    with pytest.raises(yolo.UnsupportedModel) as raised:
        yolo_semantic.inspect(semantic_graph(tmp_path / "m.onnx", **change))
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_the_cli_brings_a_semantic_export(tmp_path, capsys):
    repository = tmp_path / "model_repository"
    repository.mkdir()
    path = semantic_graph(tmp_path / "rooms.onnx")
    assert cli.main(["new-pipeline", "rooms", "--from", "yolo", "--model", str(path), "--model-repository", str(repository)]) == 0
    assert "rooms.onnx: semantic segmenter, 3 classes (floor, wall, sky), input 32x48, Ultralytics metadata" in capsys.readouterr().err
    assert (repository / "rooms" / "rooms_postprocess" / "labels.txt").read_text() == "floor\nwall\nsky\n"
    assert consistency.check_repository(repository) == []
    configs = PipelineConfigs.load(layout.pipeline("rooms", repository))
    assert configs.task is semantic_segmentation.TASK
    assert model_config.parameter(configs.preprocess, "resize") == "yolo_letterbox"
    assert model_config.dtype_name(configs.postprocess.input[0].data_type) == "UINT8"


@pytest.fixture(scope="module")
def model_files(tmp_path_factory) -> dict[str, Path]:
    return yolo_exports.downloaded(scenes.trained(), EXPORTS, tmp_path_factory.mktemp("downloads"))


@pytest.fixture(scope="module")
def brought(model_files, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    return yolo_exports.brought_repository(model_files, tmp_path_factory.mktemp("semantic"))


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> dict[str, bytes]:
    """Scenes the model never saw (90 to 420 px, PNG and JPEG) and package photos."""
    return {**scenes.new_scenes(tmp_path_factory.mktemp("scenes"), 12), **yolo_exports.package_photos(PACKAGE_PHOTOS)}


@pytest.fixture(scope="module")
def predicted(model_files, pictures) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    return yolo_exports.references(model_files, pictures, task="semantic")


def test_new_pipeline_reads_the_semantic_exports(brought):
    repository, said = brought
    for name in EXPORTS:
        size = "128x192" if name == "rooms_wide" else "128x128"
        assert f"{name}.onnx: semantic segmenter, 4 classes (background, disc, square, triangle), input {size}" in said[name]
        assert "nothing blocks a TensorRT build" in said[name]
        assert model_config.load_config(layout.pipeline(name, repository).model_dir("postprocess")).max_batch_size == yolo.MAX_BATCH


@pytest.mark.parametrize("name", EXPORTS)
def test_class_maps_equal_ultralytics_predictor(brought, predicted, pictures, name):
    repository, _ = brought
    names = sorted(pictures)
    served = ServedPipeline.load(PipelineConfigs.load(layout.pipeline(name, repository)), "cpu")
    result = served.run([pictures[photo] for photo in names])
    outputs = result.outputs()
    classes_seen = set()
    for index, photo in enumerate(names):
        expected = predicted[name][photo]["semantic"]
        got = result.maps()[index]
        assert got.shape == expected.shape, photo
        assert int(np.count_nonzero(got != expected)) == 0, f"{photo}: {np.mean(got != expected):.2%} of the pixels differ"
        assert np.array_equal(semantic_segmentation.decode_png(bytes(outputs["CLASS_MAP"][index, 0])), got)
        count = int(outputs["COUNT"][index, 0])
        ids, shares = outputs["CLASS_IDS"][index, :count], outputs["SHARES"][index, :count]
        assert sorted(ids.tolist()) == np.unique(expected).tolist()
        assert shares.tolist() == pytest.approx([np.mean(expected == c) for c in ids], abs=1e-6)
        assert [label.decode() for label in outputs["LABELS"][index, :count]] == [scenes.NAMES[c] for c in ids]
        classes_seen.update(ids.tolist())
    assert classes_seen >= {0, 1, 2, 3}, "the model must give every class somewhere: else the test shows little"
    print(f"\n{name} vs Ultralytics' predictor: {len(names)} photos, every pixel's class equal")
