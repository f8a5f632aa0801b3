"""The export step of the classifier (a converting kind: PyTorch's export, checked against PyTorch, then the one path),
on the real model repository (idempotent: a rebuild only when inputs change)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest

from builders import export, loaded, provenance
from builders.artifacts import atomic_write_bytes, input_hash, sha256_file
from builders.sources import efficientnet_lite0
from vision_serving import layout, model_config, preprocessing
from vision_serving.image_codec import decode_rgb

REPOSITORY_ROOT = layout.REPOSITORY_ROOT
CLASSIFIER = layout.pipeline("image_classifier")
# What the builders take: the pipeline with its configs and recipe loaded.
PIPELINE = loaded.load(CLASSIFIER)


@pytest.fixture(scope="module")
def exported() -> export.ExportResult:
    return export.export(PIPELINE, log=lambda message: None)


LABELS = CLASSIFIER.model_dir("postprocess") / "labels.txt"


@pytest.fixture(scope="module")
def onnx_model(exported: export.ExportResult) -> onnx.ModelProto:
    return onnx.load(str(exported.onnx_path))


@pytest.fixture(scope="module")
def core_config() -> model_config.ModelConfig:
    return model_config.load_config(CLASSIFIER.core_dir)


def test_files_exist(exported: export.ExportResult) -> None:
    assert exported.onnx_path == CLASSIFIER.onnx("fp32") == CLASSIFIER.core_version_dir / "model.onnx"
    for path in (exported.onnx_path, LABELS, layout.provenance_path(exported.onnx_path)):
        assert path.is_file(), path


def test_checker_passes_and_opset(exported: export.ExportResult, onnx_model: onnx.ModelProto) -> None:
    onnx.checker.check_model(str(exported.onnx_path), full_check=True)
    default_opsets = [entry.version for entry in onnx_model.opset_import if entry.domain in ("", "ai.onnx")]
    assert default_opsets and max(default_opsets) == PIPELINE.recipe.source.opset == 18  # the recipe's opset


def _dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_param if d.HasField("dim_param") else d.dim_value for d in value.type.tensor_type.shape.dim]


def test_io_matches_core_config_with_dynamic_batch(onnx_model: onnx.ModelProto, core_config: model_config.ModelConfig) -> None:
    for kind, values in (("input", onnx_model.graph.input), ("output", onnx_model.graph.output)):
        (config_tensor,) = core_config.input if kind == "input" else core_config.output
        (value,) = values
        assert value.name == config_tensor.name
        elem_type = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        assert elem_type == model_config.numpy_dtype(config_tensor.data_type)
        batch, *per_item = value.type.tensor_type.shape.dim
        assert batch.HasField("dim_param") and not batch.HasField("dim_value"), "batch dim must be dynamic"
        assert [d.dim_value for d in per_item] == list(config_tensor.dims)
    assert _dims(onnx_model.graph.input[0])[0] == _dims(onnx_model.graph.output[0])[0]


def test_no_reduce_mean_remains(onnx_model: onnx.ModelProto) -> None:
    op_types = {node.op_type for node in onnx_model.graph.node}
    assert "ReduceMean" not in op_types
    assert "GlobalAveragePool" in op_types


def test_provenance(exported: export.ExportResult, onnx_model: onnx.ModelProto) -> None:
    record = json.loads(layout.provenance_path(exported.onnx_path).read_text())
    assert record["inputs"]["source"]["file"] == "efficientnet-lite0-57934424.pth"
    assert record["inputs"]["source"]["sha256"].startswith("579344248a93")
    assert record["nodes"]["after"] == len(onnx_model.graph.node)
    assert record["step"] == "export" and record["output"]["sha256"] == sha256_file(exported.onnx_path)
    assert record["companions"] == {"../../image_classifier_postprocess/labels.txt": sha256_file(LABELS)}
    assert record["pytorch"]["max_abs_diff"] <= efficientnet_lite0.MAX_ABS_LOGIT_DIFF
    assert record["pytorch"]["top1_identical"] is True and record["pytorch"]["photos"] >= 4
    # The recipe's passes ran, each verified on onnxruntime; the normalization is in the graph (uint8 pixels in).
    assert [item["name"] for item in record["passes"]] == list(PIPELINE.recipe.fix.passes)
    assert "normalization_max_abs_diff" in record and "batch_max_abs_diff" in record
    assert set(record["inputs"]["packages"]) >= {"torch", "onnx", "efficientnet-lite-pytorch"}


def test_labels_file(exported: export.ExportResult, core_config: model_config.ModelConfig) -> None:
    labels = LABELS.read_text().splitlines()
    assert len(labels) == int(np.prod(core_config.output[0].dims))
    assert [labels[i] for i in (281, 282, 285, 967, 872)] == ["tabby", "tiger cat", "Egyptian cat", "espresso", "tripod"]


def _classify(exported: export.ExportResult, photo_bytes: dict[str, bytes], names: list[str]) -> list[str]:
    preprocess = model_config.load_config(CLASSIFIER.model_dir("preprocess"))
    spec = preprocessing.PreprocessSpec.from_config(preprocess)
    limits = preprocessing.limits_from_config(preprocess)
    batch = preprocessing.preprocess_batch([decode_rgb(photo_bytes[name], limits) for name in names], spec)
    session = onnxruntime.InferenceSession(str(exported.onnx_path), providers=["CPUExecutionProvider"])
    (logits,) = session.run(None, {session.get_inputs()[0].name: batch})
    labels = LABELS.read_text().splitlines()
    return [labels[i] for i in logits.argmax(axis=1)]


def test_onnxruntime_classifies_real_photos(exported: export.ExportResult, photo_bytes: dict[str, bytes]) -> None:
    chelsea, coffee, camera = _classify(exported, photo_bytes, ["chelsea", "coffee", "camera"])
    assert chelsea in {"tiger cat", "Egyptian cat", "tabby"}
    assert coffee == "espresso"
    assert camera == "tripod"
    # Batch of one through the same dynamic graph.
    assert _classify(exported, photo_bytes, ["coffee"]) == ["espresso"]


def test_second_run_is_up_to_date(exported: export.ExportResult) -> None:
    paths = (exported.onnx_path, LABELS, layout.provenance_path(exported.onnx_path))
    mtimes = [path.stat().st_mtime_ns for path in paths]
    messages: list[str] = []
    again = export.export(PIPELINE, log=messages.append)
    assert again.status == "up to date"
    assert messages == [f"{exported.onnx_path.relative_to(REPOSITORY_ROOT)} is up to date"]
    assert [path.stat().st_mtime_ns for path in paths] == mtimes


def test_changed_or_tampered_outputs_are_not_up_to_date(exported: export.ExportResult, tmp_path: Path) -> None:
    current_hash = json.loads(layout.provenance_path(exported.onnx_path).read_text())["input_hash"]
    assert provenance.is_current(exported.onnx_path, current_hash)
    assert not provenance.is_current(exported.onnx_path, "0" * 64)
    # A copy of the outputs elsewhere is current until one of them changes.
    onnx_copy = tmp_path / "core" / "1" / exported.onnx_path.name
    labels_copy = onnx_copy.parent / os.path.relpath(LABELS, exported.onnx_path.parent)
    for source, target in (
        (exported.onnx_path, onnx_copy),
        (layout.provenance_path(exported.onnx_path), provenance.path_for(onnx_copy)),
        (LABELS, labels_copy),
    ):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    assert provenance.is_current(onnx_copy, current_hash)
    labels_copy.write_text(labels_copy.read_text().replace("espresso", "coffee"))
    assert not provenance.is_current(onnx_copy, current_hash)
    shutil.copyfile(LABELS, labels_copy)
    provenance.path_for(onnx_copy).write_text("{not json")
    assert not provenance.is_current(onnx_copy, current_hash)
    assert input_hash({"a": 1}) != input_hash({"a": 2})


def test_atomic_write_keeps_old_file_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "model.onnx"
    target.write_bytes(b"old")

    def failing_replace(source: str, destination: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"old"
    assert [path.name for path in tmp_path.iterdir()] == ["model.onnx"]


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "builders", *args],
        cwd=REPOSITORY_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _assert_one_error_line(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and expected in lines[0]


def test_cli_nonexistent_repository(tmp_path: Path) -> None:
    missing = tmp_path / "no_such_repository"
    _assert_one_error_line(_run_cli("export", "--model-repository", str(missing)), str(missing))


def test_cli_unknown_pipeline() -> None:
    result = _run_cli("export", "--pipeline", "no_such_pipeline")
    _assert_one_error_line(result, "no pipeline 'no_such_pipeline'")
    assert CLASSIFIER.name in result.stderr


def test_cli_needs_a_pipeline_when_there_are_several() -> None:
    assert len(layout.pipelines()) > 1
    result = _run_cli("export")
    _assert_one_error_line(result, "choose a pipeline with --pipeline NAME")
    assert all(item.name in result.stderr for item in layout.pipelines())


def test_cli_bad_core_config(tmp_path: Path) -> None:
    copy = layout.Pipeline.at(tmp_path / "model_repository" / CLASSIFIER.name)
    copy.repository.mkdir(parents=True)
    shutil.copy(CLASSIFIER.recipe, copy.recipe)
    for role in layout.ROLES:
        copy.model_dir(role).mkdir()
        shutil.copy(CLASSIFIER.model_dir(role) / "config.pbtxt", copy.model_dir(role) / "config.pbtxt")
    core = copy.core_dir / "config.pbtxt"
    core.write_text(core.read_text().replace("max_batch_size: 32", "max_batch_size: thirty-two"))
    _assert_one_error_line(
        _run_cli("export", "--model-repository", str(copy.repository.parent), "--pipeline", CLASSIFIER.name),
        f"{copy.core_dir.name}/config.pbtxt",
    )
