"""``new-pipeline --from yolo``: what a YOLO ONNX is (metadata, shapes), the one-line refusals, the batch, the folder.

Small graphs of the three output layouts stand in for real exports here; the integration test
(tests/integration/test_bring_your_own_model.py) brings real Ultralytics exports and serves them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from builders import BuildError, cli, loaded, scaffold
from builders.artifacts import sha256_file
from builders.families import yolo
from tests.support.onnx_graphs import const, model, value
from vision_serving import consistency, layout, model_config

CLASSES = ("cat", "dog", "bird")
ULTRALYTICS = {"names": "{0: 'cat', 1: 'dog', 2: 'bird'}", "stride": "32", "task": "detect", "batch": "1", "end2end": "False"}


def detector(
    path: Path,
    layout_kind: str = "yolo",
    size: tuple[int, int] = (64, 96),
    classes: int = len(CLASSES),
    metadata: dict[str, str] | None = None,
    batch: int | str = 1,
    input_dims: list[int | str] | None = None,
    input_type: int = onnx.TensorProto.FLOAT,
    output_type: int = onnx.TensorProto.FLOAT,
    output_dims: list[int | str] | None = None,
) -> Path:
    """A 1x1 Conv at stride 8 over the image, reshaped into the layout's raw output (batch 1 pinned in the Reshape)."""
    height, width = size
    channels = {"yolo": 4 + classes, "yolo_v5": 5 + classes, "end2end": 6}[layout_kind]
    anchors = (height // 8) * (width // 8)
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["images", "w"], ["features"], strides=[8, 8]),
        helper.make_node("Reshape", ["features", "shape"], ["flat" if layout_kind != "yolo" else "output0"]),
    ]
    shape = [batch, channels, anchors]
    if layout_kind != "yolo":
        nodes.append(helper.make_node("Transpose", ["flat"], ["output0"], perm=[0, 2, 1]))
        shape = [batch, anchors, channels]
    built = model(
        nodes,
        [value("images", input_dims or [batch, 3, height, width], input_type)],
        [value("output0", output_dims or shape, output_type)],
        [const("w", rng.normal(size=(channels, 3, 1, 1)), np.float32), const("shape", [1, channels, -1], np.int64)],
    )
    helper.set_model_props(built, {**(metadata if metadata is not None else {**ULTRALYTICS, "imgsz": f"[{height}, {width}]"})})
    onnx.save(built, path)
    return path


def test_an_ultralytics_export_is_read_from_its_metadata(tmp_path):
    found = yolo.inspect(detector(tmp_path / "m.onnx"))
    assert (found.head, found.names, found.height, found.width) == ("yolo", CLASSES, 64, 96)
    assert found.static_batch and found.ultralytics and found.output_dims == [[7, 96]]


def test_the_original_yolov5_layout_and_end2end(tmp_path):
    assert yolo.inspect(detector(tmp_path / "v5.onnx", "yolo_v5")).head == "yolo_v5"
    # 300 = 15 x 20 positions: an NMS output [1, 300, 6]; the metadata says NMS is in the model.
    end2end = {**ULTRALYTICS, "imgsz": "[120, 160]", "end2end": "True"}
    assert yolo.inspect(detector(tmp_path / "e2e.onnx", "end2end", (120, 160), metadata=end2end)).head == "end2end"
    nms_export = {**ULTRALYTICS, "imgsz": "[120, 160]", "args": "{'nms': True, 'batch': 1}"}
    assert yolo.inspect(detector(tmp_path / "nms.onnx", "end2end", (120, 160), metadata=nms_export)).head == "end2end"


def test_rt_detr_rows_are_told_from_end2end_rows_by_the_metadata(tmp_path):
    """RT-DETR's [1, 300, 6] has end2end's shape but normalized boxes: its metadata's head (RTDETRDecoder) picks the rtdetr
    head, its input size from imgsz; without that metadata, Ultralytics rows are never taken for RT-DETR's; a wrong
    shape under that head is one line naming what is supported."""
    rtdetr = {**ULTRALYTICS, "imgsz": "[120, 160]", "head": "RTDETRDecoder"}
    found = yolo.inspect(detector(tmp_path / "rtdetr.onnx", "end2end", (120, 160), metadata=rtdetr))
    assert (found.head, found.head_parameters) == ("rtdetr", (("input_size", "120,160"),))
    spec = yolo.spec_text("mine", found, "rtdetr.onnx", "0" * 64, ["stable_io_names"], 1)
    assert 'resize = "yolo_stretch"' in spec and "clip_to_image = false" in spec
    end2end = {**ULTRALYTICS, "imgsz": "[120, 160]", "end2end": "True"}
    assert yolo.inspect(detector(tmp_path / "e2e.onnx", "end2end", (120, 160), metadata=end2end)).head == "end2end"
    with pytest.raises(
        yolo.UnsupportedModel, match=r"but its metadata's head is RTDETRDecoder; supported: rtdetr \[N, K, 6\] \(normalized"
    ):
        yolo.inspect(detector(tmp_path / "raw.onnx", "yolo", (64, 96), metadata={**rtdetr, "imgsz": "[64, 96]"}))


DYNAMIC = {"batch": "batch", "input_dims": ["batch", 3, "height", "width"], "output_dims": ["batch", "Concatoutput0_dim_1", "anchors"]}


@pytest.mark.parametrize("layout_kind, dims", [("yolo", [[7, 96]]), ("yolo_v5", [[96, 8]])])
def test_a_dynamic_export_is_fixed_at_its_imgsz(tmp_path, layout_kind, dims):
    """``dynamic=True``: batch, height, width and the output's dims past the batch are symbolic; the metadata's imgsz fixes
    the input and shape inference gives the output; batch_dimension then fixes them in the served graph."""
    path = detector(tmp_path / "dynamic.onnx", layout_kind, **DYNAMIC)  # type: ignore[arg-type]
    found = yolo.inspect(path)
    assert (found.head, found.output_dims, found.static_batch, found.static_size) == (layout_kind, dims, False, False)
    passes, max_batch = yolo.batch_passes(found, path, lambda _: None)
    assert (passes, max_batch) == (["stable_io_names", "batch_dimension"], yolo.MAX_BATCH)
    # The original YOLOv5's file, no metadata: --labels and --imgsz say what it is.
    labels = tmp_path / "labels.txt"
    labels.write_text("cat\ndog\nbird\n")
    plain = detector(tmp_path / "plain.onnx", layout_kind, metadata={}, **DYNAMIC)  # type: ignore[arg-type]
    with pytest.raises(yolo.UnsupportedModel, match="the input size is dynamic"):
        yolo.inspect(plain, labels)
    assert yolo.inspect(plain, labels, imgsz=(64, 96)).output_dims == dims


def test_an_nms_export_serves_the_batch_its_loop_was_unrolled_for(tmp_path):
    """Ultralytics' nms=True export runs its NMS in a loop unrolled over ``batch`` images: a run may hold no more."""
    args = "{'nms': True, 'dynamic': True, 'batch': 4}"
    metadata = {**ULTRALYTICS, "imgsz": "[64, 96]", "batch": "4", "args": args}
    path = detector(tmp_path / "nms.onnx", "end2end", metadata=metadata, **DYNAMIC)  # type: ignore[arg-type]
    found = yolo.inspect(path)
    assert (found.head, found.unrolled_batch) == ("end2end", 4)
    assert yolo.batch_passes(found, path, lambda _: None) == (["stable_io_names", "batch_dimension"], 4)
    static = detector(tmp_path / "static.onnx", "end2end", metadata={**metadata, "batch": "1", "args": "{'nms': True}"})
    found = yolo.inspect(static)
    assert found.unrolled_batch == 1 and yolo.batch_passes(found, static, lambda _: None)[1] == 1
    assert yolo.inspect(detector(tmp_path / "raw.onnx")).unrolled_batch is None


def test_without_metadata_the_labels_give_the_classes(tmp_path):
    path = detector(tmp_path / "plain.onnx", metadata={})
    with pytest.raises(yolo.UnsupportedModel, match=r"no class names \(no Ultralytics metadata\): pass --labels FILE"):
        yolo.inspect(path)
    labels = tmp_path / "labels.txt"
    labels.write_text("cat\ndog\nbird\n")
    found = yolo.inspect(path, labels)
    assert (found.head, found.names, found.ultralytics) == ("yolo", CLASSES, False)
    labels.write_text("cat\ndog\n")  # 7 channels are 4 + 3 classes, not 4 + 2
    with pytest.raises(yolo.UnsupportedModel, match=r"which is none of the supported formats for its 2 classes"):
        yolo.inspect(path, labels)


def test_a_shape_that_fits_two_heads_needs_head(tmp_path):
    # 4 + 3 = 7 channels over 8 anchors, read as [N, 7, 8] is yolo; [N, A=7, 5 + 3 = 8] is yolo_v5.
    path = tmp_path / "ambiguous.onnx"
    built = model(
        [helper.make_node("Reshape", ["images", "shape"], ["output0"])],
        [value("images", [1, 3, 8, 7])],
        [value("output0", [1, 7, 24])],
        [const("shape", [1, 7, 24], np.int64)],
    )
    helper.set_model_props(built, {**ULTRALYTICS, "imgsz": "[8, 7]"})
    onnx.save(built, path)
    assert yolo.inspect(path).head == "yolo"
    square = tmp_path / "square.onnx"
    built.graph.output[0].CopyFrom(value("output0", [1, 7, 8]))
    built.graph.initializer[0].CopyFrom(const("shape", [1, 7, 8], np.int64))
    built.graph.input[0].CopyFrom(value("images", [1, 3, 8, 7]))
    onnx.save(built, square)
    with pytest.raises(yolo.UnsupportedModel, match=r"output 'output0' has shape \[1, 7, 8\], which fits yolo and yolo_v5: pass --head"):
        yolo.inspect(square)
    assert yolo.inspect(square, head="yolo_v5").head == "yolo_v5"
    with pytest.raises(yolo.UnsupportedModel, match=r"--head 'ssd' is not one of yolo, yolo_v5, end2end"):
        yolo.inspect(square, head="ssd")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"metadata": {**ULTRALYTICS, "imgsz": "[64, 96]", "task": "depth"}}, "is an Ultralytics 'depth' model; supported: 'detect'"),
        ({"metadata": {**ULTRALYTICS, "imgsz": "[64, 96]", "end2end": "True"}}, "but its metadata says NMS is in the model (end2end)"),
        ({"input_dims": [1, 3, "h", "w"], "metadata": {"names": "['cat', 'dog', 'bird']"}}, "the input size is dynamic"),
        (
            {"input_type": onnx.TensorProto.UINT8},
            "m.onnx: input 'images' is uint8 [1, 3, 64, 96]; supported: a float32 [N, 3, H, W] image (NCHW)",
        ),
        ({"input_dims": [1, 64, 96, 3]}, "m.onnx: input 'images' is float32 [1, 64, 96, 3]; supported: a float32 [N, 3, H, W] image"),
        ({"output_type": onnx.TensorProto.FLOAT16}, "m.onnx: output 'output0' is float16; supported: float32"),
    ],
    ids=["unserved-task", "end2end-metadata-on-a-raw-head", "dynamic-size-without-imgsz", "uint8-input", "nhwc-input", "float16-output"],
)
def test_unsupported_models_are_refused_in_one_line(tmp_path, change, message):
    with pytest.raises(yolo.UnsupportedModel) as raised:
        yolo.inspect(detector(tmp_path / "m.onnx", **change))
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_the_cli_refuses_in_one_line_and_writes_nothing(tmp_path, capsys):
    path = tmp_path / "classifier.onnx"
    onnx.save(
        model([helper.make_node("Flatten", ["images"], ["scores"])], [value("images", [1, 3, 2, 2])], [value("scores", [1, 12])]), path
    )
    repository = tmp_path / "model_repository"
    repository.mkdir()
    assert cli.main(["new-pipeline", "mine", "--from", "yolo", "--model", str(path), "--model-repository", str(repository)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: classifier.onnx: output 'scores' has shape [1, 12]; supported: yolo [N, 4+C, A]")
    assert list(repository.iterdir()) == []
    assert cli.main(["new-pipeline", "mine", "--from", "yolo", "--model-repository", str(repository)]) == 2
    assert capsys.readouterr().err.strip() == "error: --from yolo needs --model FILE (the model to serve)"
    assert cli.main(["new-pipeline", "mine", "--from", "image_classifier", "--model", str(path)]) == 2
    assert "go with --from yolo, not with a pipeline template" in capsys.readouterr().err


def test_a_static_batch_of_one_is_made_dynamic_when_the_graph_allows(tmp_path):
    path = detector(tmp_path / "m.onnx")
    passes, max_batch = yolo.batch_passes(yolo.inspect(path), path, lambda _: None)
    assert max_batch == yolo.MAX_BATCH and passes == yolo.BATCH_PASSES
    dynamic = detector(tmp_path / "dynamic.onnx", batch="n")
    assert yolo.batch_passes(yolo.inspect(dynamic), dynamic, lambda _: None) == (["stable_io_names"], yolo.MAX_BATCH)


def test_the_folder_is_a_complete_pipeline(tmp_path):
    """Written, it passes the repository's consistency check and loads as a pipeline, its model pinned by sha256."""
    repository = tmp_path / "model_repository"
    repository.mkdir()
    (tmp_path / "downloads").mkdir()
    source = detector(tmp_path / "downloads" / "m.onnx")
    lines: list[str] = []
    scaffold.new_pipeline("pets", "yolo", repository, log=lines.append, model=source)
    assert lines[0] == "m.onnx: yolo head, 3 classes (cat, dog, bird), input 64x96, Ultralytics metadata"
    assert lines[-1] == (
        f"created {repository / 'pets'} for m.onnx; next: `python -m builders all --pipeline pets --model-repository {repository}`, "
        f"then `./scripts/serve --model-repository {repository}`"
    )
    assert consistency.check_repository(repository) == []
    pipeline = loaded.load(layout.pipeline("pets", repository))
    assert pipeline.recipe.source.sha256 == sha256_file(source) == sha256_file(repository / "pets" / "model.onnx")
    assert pipeline.task.name == "detection"
    assert (repository / "pets" / "pets_postprocess" / "labels.txt").read_text() == "cat\ndog\nbird\n"
    spec = pipeline.configs.spec
    assert (spec.height, spec.width, spec.resize, spec.pad_value) == (64, 96, "yolo_letterbox", 114)
    post = model_config.load_config(repository / "pets" / "pets_postprocess")
    assert model_config.parameter(post, "head") == "yolo" and model_config.parameter(post, "iou_threshold") == "0.7"
    with pytest.raises(BuildError, match="already exists"):
        scaffold.new_pipeline("pets", "yolo", repository, log=lines.append, model=source)
