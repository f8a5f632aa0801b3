"""The repository consistency check, on the real repository and on broken copies of it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vision_serving import consistency, model_config


@pytest.fixture
def repository_copy(tmp_path) -> Path:
    target = tmp_path / "model_repository"
    shutil.copytree(model_config.MODEL_REPOSITORY, target, ignore=shutil.ignore_patterns("*.onnx", "*.plan", "__pycache__"))
    return target


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_real_repository_is_consistent():
    assert consistency.check_repository(model_config.MODEL_REPOSITORY) == []


def test_command_line_reports_ok():
    result = subprocess.run(
        [sys.executable, "-m", "vision_serving.consistency"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok: 4 models")


@pytest.mark.parametrize(
    "file, old, new, problem",
    [
        ("image_classifier/config.pbtxt", 'value: "pixels" }\n    },', 'value: "pixelz" }\n    },', "'pixels' is not produced by an earlier step"),
        ("image_classifier/config.pbtxt", 'input_map { key: "images"', 'input_map { key: "image"', "input_map key 'image' is not an input of the model"),
        ("core/configs/cpu.pbtxt", "dims: [ 1000 ]", "dims: [ 1001 ]", "differ in inputs, outputs or max_batch_size"),
        ("core/config.pbtxt", "dims: [ 3, 224, 224 ]", "dims: [ 3, 256, 256 ]", "expects TYPE_FP32[3, 256, 256]"),
        ("postprocess/config.pbtxt", "data_type: TYPE_FP32\n    dims: [ 1000 ]", "data_type: TYPE_FP16\n    dims: [ 1000 ]", "expects TYPE_FP16"),
        ("preprocess/config.pbtxt", 'string_value: "bicubic"', 'string_value: "lanczos"', "interpolation 'lanczos'"),
        ("postprocess/config.pbtxt", 'string_value: "5"', 'string_value: "0"', "TOP_K must be between 1 and 1000"),
        ("image_classifier/config.pbtxt", "max_batch_size: 32", "max_batch_size: 64", "ensemble max_batch_size 64 exceeds"),
        ("preprocess/config.pbtxt", "data_type: TYPE_STRING", "data_type: TYPE_STRNG", "preprocess/config.pbtxt"),
        ("image_classifier/config.pbtxt", '      output_map { key: "CLASS_IDS" value: "CLASS_IDS" }\n', "", "output 'CLASS_IDS' is not produced by any step"),
    ],
)
def test_broken_repository_is_reported(repository_copy, file, old, new, problem):
    edit(repository_copy / file, old, new)
    problems = consistency.check_repository(repository_copy)
    assert any(problem in p for p in problems), problems


def test_onnx_io_must_match_the_core_config(repository_copy, built_repository):
    shutil.copy(built_repository / "core" / "1" / "model.onnx", repository_copy / "core" / "1" / "model.onnx")
    assert consistency.check_repository(repository_copy) == []
    for config in ("core/config.pbtxt", "core/configs/cpu.pbtxt"):
        edit(repository_copy / config, 'name: "logits"', 'name: "scores"')
    edit(repository_copy / "image_classifier/config.pbtxt", 'key: "logits"', 'key: "scores"')
    problems = consistency.check_repository(repository_copy)
    assert any("model.onnx: ONNX outputs" in p for p in problems), problems
