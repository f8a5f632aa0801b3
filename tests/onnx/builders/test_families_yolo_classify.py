"""``new-pipeline --from yolo`` with an Ultralytics classify export: a classification pipeline, answering as Ultralytics.

Small hand-built graphs stand in for exports in the first tests (what the file is, the one-line refusals, the batch, the
folder). The last ones bring the tests' own YOLOv8n-cls (tests/support/yolo_classify.py: one shape per photo, five
classes), trained by Ultralytics and exported as ``static.onnx`` (batch 1, made dynamic by new-pipeline) and
``dynamic.onnx`` (``dynamic=True``), and a non-square export made from the static one, into a temporary model repository
as a user would (``python -m builders new-pipeline NAME --from yolo --model FILE``, ``builders export``, ``builders
check``), then serve them in process on the CPU core (:class:`vision_serving.served.ServedPipeline`) on photos the model
never saw and package photos: the top 5 classes equal ``YOLO(file).predict``'s (tests/support/ultralytics_yolo.py), in
order, and every class's score within 1e-4 of its probability.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from builders import BuildError, cli, loaded, photos, scaffold
from builders.artifacts import sha256_file
from builders.families import yolo, yolo_classify
from tests.support import yolo_classify as shapes
from tests.support import yolo_exports
from tests.support.onnx_graphs import const, model, value
from vision_serving import consistency, layout, model_config
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.served import ServedPipeline

CLASSES = ("cat", "dog", "bird")
ULTRALYTICS = {"names": "{0: 'cat', 1: 'dog', 2: 'bird'}", "stride": "1", "task": "classify", "batch": "1", "imgsz": "[32, 32]"}
MAX_SCORE_DIFF = 1e-4


def classifier(
    path: Path,
    classes: int = len(CLASSES),
    size: tuple[int, int] = (32, 32),
    metadata: dict[str, str] | None = None,
    batch: int | str = 1,
    softmax: bool = True,
    input_dims: list[int | str] | None = None,
    input_type: int = onnx.TensorProto.FLOAT,
    output_dims: list[int | str] | None = None,
    output_type: int = onnx.TensorProto.FLOAT,
    extra_output: bool = False,
) -> Path:
    """YOLOv8-cls's head on a stride-4 Conv: Conv -> GlobalAveragePool -> Flatten -> Gemm (-> Softmax), as exported."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["images", "w"], ["features"], strides=[4, 4]),
        helper.make_node("GlobalAveragePool", ["features"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["output0" if not softmax else "scores"], transB=1),
    ]
    if softmax:
        nodes.append(helper.make_node("Softmax", ["scores"], ["output0"], axis=1))
    outputs = [value("output0", output_dims or [batch, classes], output_type)]
    if extra_output:
        outputs.append(value("flat", [batch, 8]))
    built = model(
        nodes,
        [value("images", input_dims or [batch, 3, *size], input_type)],
        outputs,
        [
            const("w", rng.normal(size=(8, 3, 4, 4)), np.float32),
            const("fc_w", rng.normal(size=(classes, 8)), np.float32),
            const("fc_b", np.zeros(classes), np.float32),
        ],
    )
    helper.set_model_props(built, metadata if metadata is not None else ULTRALYTICS)
    onnx.save(built, path)
    return path


def test_is_classify_reads_the_metadata_alone(tmp_path):
    """The task from the file's metadata, its graph never parsed: a file whose graph is garbage still says it."""
    assert yolo_classify.is_classify(classifier(tmp_path / "m.onnx"))
    assert not yolo_classify.is_classify(classifier(tmp_path / "detect.onnx", metadata={**ULTRALYTICS, "task": "detect"}))
    assert not yolo_classify.is_classify(classifier(tmp_path / "plain.onnx", metadata={}))
    assert not yolo_classify.is_classify(tmp_path / "missing.onnx")
    (tmp_path / "text.onnx").write_text("not a model\n" * 10)
    assert not yolo_classify.is_classify(tmp_path / "text.onnx")
    built = onnx.load(str(tmp_path / "m.onnx"))
    graph = built.graph.SerializeToString()
    data = built.SerializeToString()
    broken = data.replace(graph, bytes(len(graph)))  # the graph field's bytes zeroed, its length kept
    assert broken != data
    (tmp_path / "broken.onnx").write_bytes(broken)
    assert yolo_classify.metadata(tmp_path / "broken.onnx")["names"] == ULTRALYTICS["names"]
    assert yolo_classify.is_classify(tmp_path / "broken.onnx")


def test_an_ultralytics_classify_export_is_read_from_its_file(tmp_path):
    found = yolo_classify.inspect(classifier(tmp_path / "m.onnx"))
    assert (found.names, found.height, found.width, found.scores, found.top_k) == (CLASSES, 32, 32, "probabilities", 3)
    assert found.static_batch and found.static_size and found.ultralytics and found.output_name == "output0"
    # Without the Softmax its output is logits: the postprocess applies the softmax.
    assert yolo_classify.inspect(classifier(tmp_path / "logits.onnx", softmax=False)).scores == "logits"
    # --labels replace the names; --imgsz sizes a dynamic export without imgsz metadata.
    labels = tmp_path / "labels.txt"
    labels.write_text("a\nb\nc\n")
    assert yolo_classify.inspect(tmp_path / "m.onnx", labels).names == ("a", "b", "c")
    dynamic = classifier(
        tmp_path / "dynamic.onnx",
        batch="batch",
        input_dims=["batch", 3, "height", "width"],
        output_dims=["Softmaxoutput0_dim_0", 3],
        metadata={**ULTRALYTICS, "imgsz": "[64, 96]"},
    )
    found = yolo_classify.inspect(dynamic)
    assert (found.height, found.width, found.static_batch, found.static_size, found.square) == (64, 96, False, False, False)
    assert yolo_classify.batch_passes(found, dynamic, lambda _: None) == (["stable_io_names", "batch_dimension"], yolo.MAX_BATCH)


@pytest.mark.parametrize("batch", [1, 4])
def test_a_static_batch_is_made_dynamic(tmp_path, batch):
    """Ultralytics' default batch of 1, or export(batch=B)'s fixed B."""
    path = classifier(tmp_path / "m.onnx", batch=batch)
    lines: list[str] = []
    assert yolo_classify.batch_passes(yolo_classify.inspect(path), path, lines.append) == (yolo.BATCH_PASSES, yolo.MAX_BATCH)
    assert lines == [
        f"the static batch of 1 becomes dynamic (batch_dimension, batch_reshape_placeholder, batch_dimension): max_batch_size {yolo.MAX_BATCH}"
    ]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"extra_output": True}, "m.onnx is a classify model with 2 outputs (output0, flat); supported: one float32 [N, C] output"),
        ({"output_dims": [1, 3, 1]}, "m.onnx: output 'output0' is float32 [1, 3, 1]; supported: one float32 [N, C] output"),
        ({"output_type": onnx.TensorProto.FLOAT16}, "m.onnx: output 'output0' is float16 [1, 3]; supported: one float32 [N, C]"),
        ({"input_type": onnx.TensorProto.UINT8}, "m.onnx: input 'images' is uint8 [1, 3, 32, 32]; supported: a float32 [N, 3, H, W] image"),
        (
            {"metadata": {**ULTRALYTICS, "names": "['cat', 'dog']"}},
            "m.onnx: output 'output0' scores 3 classes, its 'names' metadata names 2",
        ),
        (
            {"metadata": {"task": "classify", "imgsz": "[32, 32]"}},
            "m.onnx: the model has no class names (no 'names' metadata): pass --labels",
        ),
        (
            {"input_dims": [1, 3, "h", "w"], "metadata": {"task": "classify", "names": "['cat', 'dog', 'bird']"}},
            "the input size is dynamic",
        ),
    ],
    ids=["two-outputs", "rank-3-output", "float16-output", "uint8-input", "names-count", "no-names", "dynamic-size-without-imgsz"],
)
def test_unsupported_classify_models_are_refused_in_one_line(tmp_path, change, message):
    with pytest.raises(yolo.UnsupportedModel) as raised:
        yolo_classify.inspect(classifier(tmp_path / "m.onnx", **change))
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_the_cli_brings_a_classify_export_and_refuses_head(tmp_path, capsys):
    repository = tmp_path / "model_repository"
    repository.mkdir()
    path = classifier(tmp_path / "pets.onnx")
    where = ["--model", str(path), "--model-repository", str(repository)]
    assert cli.main(["new-pipeline", "pets", "--from", "yolo", *where, "--head", "yolo"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == "error: --head 'yolo': pets.onnx is an Ultralytics classify model; --head names a detector's output format"
    assert list(repository.iterdir()) == []
    assert cli.main(["new-pipeline", "pets", "--from", "yolo", *where]) == 0
    assert (repository / "pets" / "pets_postprocess" / "labels.txt").read_text() == "cat\ndog\nbird\n"


def test_the_folder_is_a_complete_classification_pipeline(tmp_path):
    """Written, it passes the repository's consistency check and loads as a classification pipeline with Ultralytics'
    classify preprocessing; a non-square model's is the whole photo resized."""
    repository = tmp_path / "model_repository"
    repository.mkdir()
    (tmp_path / "downloads").mkdir()
    source = classifier(tmp_path / "downloads" / "m.onnx")
    wide = classifier(tmp_path / "downloads" / "wide.onnx", size=(32, 48), metadata={**ULTRALYTICS, "imgsz": "[32, 48]"})
    lines: list[str] = []
    scaffold.new_pipeline("pets", "yolo", repository, log=lines.append, model=source)
    scaffold.new_pipeline("wide_pets", "yolo", repository, log=lines.append, model=wide)
    assert lines[0] == "m.onnx: classifier (probabilities), 3 classes (cat, dog, bird), input 32x32, Ultralytics metadata"
    assert consistency.check_repository(repository) == []
    pipeline = loaded.load(layout.pipeline("pets", repository))
    assert pipeline.recipe.source.sha256 == sha256_file(source) == sha256_file(repository / "pets" / "model.onnx")
    assert pipeline.recipe.fix.passes == tuple(yolo.BATCH_PASSES)
    assert pipeline.task.name == "classification"
    spec = pipeline.configs.spec
    assert (spec.height, spec.width, spec.resize, spec.resize_shorter_side, spec.interpolation) == (
        32,
        32,
        "center_crop",
        32,
        "pil_bilinear",
    )
    assert (spec.mean, spec.std, spec.decode_oversampling, spec.pixel_dtype) == ((0, 0, 0), (255, 255, 255), 0, "uint8")
    post = model_config.load_config(repository / "pets" / "pets_postprocess")
    assert [model_config.parameter(post, key) for key in ("task", "scores", "top_k")] == ["classification", "probabilities", "3"]
    core = model_config.load_config(repository / "pets" / "pets_core")
    assert [(item.name, list(item.dims)) for item in core.output] == [("probabilities", [3])] and core.max_batch_size == yolo.MAX_BATCH
    wide_spec = loaded.load(layout.pipeline("wide_pets", repository)).configs.spec
    assert (wide_spec.height, wide_spec.width, wide_spec.resize, wide_spec.interpolation) == (32, 48, "stretch", "pil_bilinear")
    with pytest.raises(BuildError, match="already exists"):
        scaffold.new_pipeline("pets", "yolo", repository, log=lines.append, model=source)


# --------------------------------------------------------------------------- the tests' own YOLOv8n-cls, served

EXPORTS = {"shapes_cls": "static", "shapes_cls_dynamic": "dynamic", "shapes_cls_wide": "wide"}  # pipeline -> the export it serves
WIDE = (96, 160)  # the non-square export's input (the network is fully convolutional up to its global pooling)
PACKAGE_PHOTOS = ("astronaut", "chelsea", "coffee", "china", "grace_hopper", "hubble_deep_field", "page", "retina", "rocket", "text")


def run(*args: str) -> str:
    """``python ARGS`` from the project's root (as the docs type it): its stdout and stderr."""
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=layout.REPOSITORY_ROOT, timeout=900)
    assert result.returncode == 0, f"{' '.join(args)} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-4000:]}"
    return result.stdout + result.stderr


def non_square(source: Path, target: Path) -> Path:
    """The static export at a ``WIDE`` input, as ``export(imgsz=WIDE)`` writes it (input dims and imgsz metadata)."""
    built = onnx.load(str(source))
    for dim, size in zip(built.graph.input[0].type.tensor_type.shape.dim[2:], WIDE):
        dim.dim_value = size
    del built.graph.value_info[:]
    props = {prop.key: prop.value for prop in built.metadata_props}
    del built.metadata_props[:]
    helper.set_model_props(built, {**props, "imgsz": str(list(WIDE))})
    onnx.checker.check_model(built)
    onnx.save(built, str(target))
    return target


@pytest.fixture(scope="module")
def model_files(tmp_path_factory) -> dict[str, Path]:
    """Each pipeline's model file, as a user would have it (outside the repository)."""
    trained = shapes.trained()
    folder = tmp_path_factory.mktemp("downloads")
    files = {name: Path(shutil.copy(trained / f"{kind}.onnx", folder / f"{name}.onnx")) for name, kind in EXPORTS.items() if kind != "wide"}
    files["shapes_cls_wide"] = non_square(trained / "static.onnx", folder / "shapes_cls_wide.onnx")
    return files


@pytest.fixture(scope="module")
def brought(model_files, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The temporary model repository with the pipelines brought, exported and checked; what each command said."""
    repository = tmp_path_factory.mktemp("classify") / "model_repository"
    repository.mkdir()
    said = yolo_exports.bring(model_files, repository)
    assert "ok: " in run("-m", "vision_serving.consistency", "--repository", str(repository))
    return repository, said


@pytest.fixture(scope="module")
def pictures() -> dict[str, bytes]:
    """Photos of shapes the model never saw (many sizes and aspect ratios, elongated ones too, PNG and JPEG) and package
    photos (PNG and JPEG, up to 1411x1411)."""
    paths = photos.registry()
    return {**shapes.write_photos(30, seed=3), **{f"{name}{paths[name].suffix}": photos.photo_bytes(name) for name in PACKAGE_PHOTOS}}


def test_new_pipeline_reads_the_classify_exports(brought):
    repository, said = brought
    for name in EXPORTS:
        size = "x".join(map(str, WIDE)) if name == "shapes_cls_wide" else "128x128"
        assert f"{name}.onnx: classifier (probabilities), 5 classes ({', '.join(shapes.NAMES)}), input {size}" in said[name]
        assert "nothing blocks a TensorRT build" in said[name]
        assert model_config.load_config(layout.pipeline(name, repository).model_dir("postprocess")).max_batch_size == yolo.MAX_BATCH
    assert "becomes dynamic" in said["shapes_cls"]


@pytest.fixture(scope="module")
def predicted(model_files, pictures) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Ultralytics' predictor on each pipeline's model file (one run for all)."""
    return yolo_exports.references(model_files, pictures, task="classify")


@pytest.mark.parametrize("name", EXPORTS)
def test_classes_and_scores_equal_ultralytics_predictor(brought, model_files, predicted, pictures, name):
    repository, _ = brought
    names = sorted(pictures)
    expected = predicted[name]
    probabilities = np.stack([expected[photo]["probs"] for photo in names])
    served = ServedPipeline.load(PipelineConfigs.load(layout.pipeline(name, repository)), "cpu")
    result = served.run([pictures[photo] for photo in names])
    answers = result.outputs()
    assert answers["CLASS_IDS"].shape == (len(names), len(shapes.CLASSES))  # top 5 of 5 classes: every rank compared
    top = np.argsort(-probabilities, axis=1, kind="stable")[:, :5]
    assert [photo for photo, ids, want in zip(names, answers["CLASS_IDS"], top) if ids.tolist() != want.tolist()] == []
    assert answers["LABELS"][0].tolist() == [shapes.NAMES[i].encode() for i in answers["CLASS_IDS"][0]]
    score_diff = float(np.abs(answers["SCORES"] - np.take_along_axis(probabilities, top, axis=1)).max())
    output_diff = float(np.abs(result.logits - probabilities).max())  # every class, not only the top 5
    print(
        f"\n{name} ({model_files[name].name}) vs Ultralytics' predictor: {len(names)} photos, top-5 equal, max |Δ score| {max(score_diff, output_diff):.1e}"
    )
    assert max(score_diff, output_diff) <= MAX_SCORE_DIFF


def test_opencv_resizing_would_miss_the_tolerance(brought, predicted, pictures):
    """The comparison sees the preprocessing: OpenCV's bilinear resize (not antialiased) instead of Pillow's moves the
    scores past 1e-4 on these photos."""
    repository, _ = brought
    names = sorted(pictures)
    expected = predicted["shapes_cls"]
    served = ServedPipeline.load(PipelineConfigs.load(layout.pipeline("shapes_cls", repository)), "cpu")
    served.spec = dataclasses.replace(served.spec, interpolation="bilinear")
    got = served.run([pictures[photo] for photo in names]).logits
    assert float(np.abs(got - np.stack([expected[photo]["probs"] for photo in names])).max()) > 10 * MAX_SCORE_DIFF
