"""``python -m builders configs``: the command that writes what vision_serving.config_variants generates."""

from __future__ import annotations

import shutil

import pytest

from builders import cli
from vision_serving import layout

CONFIGS_ONLY = shutil.ignore_patterns("1", "__pycache__")


@pytest.fixture
def repository(tmp_path):
    """A model repository holding copies of two pipelines' configs (no version folders)."""
    for name in ("image_classifier", "face_detector"):
        shutil.copytree(layout.pipeline(name).repository, tmp_path / name, ignore=CONFIGS_ONLY)
    return tmp_path


def configs(repository, *options: str) -> int:
    return cli.main(["configs", *options, "--model-repository", str(repository)])


def test_check_lists_what_differs_and_the_command_rewrites_it(repository, capsys):
    assert configs(repository, "--all", "--check") == 0
    variant = repository / "face_detector" / "face_detector_core" / "configs" / "cpu.pbtxt"
    original = variant.read_text()
    variant.write_text(original.replace("max_queue_size: 19", "max_queue_size: 20"))
    capsys.readouterr()
    assert configs(repository, "--all", "--check") == 1
    out = capsys.readouterr().out
    assert f"differs from its generation: {variant}" in out and "1 file(s) to regenerate" in out
    assert configs(repository, "--pipeline", "image_classifier") == 0  # another pipeline: this file stays
    assert variant.read_text() != original
    assert configs(repository, "--pipeline", "face_detector") == 0
    assert variant.read_text() == original
    assert "face_detector: wrote face_detector_core/configs/cpu.pbtxt" in capsys.readouterr().err


def test_a_pipeline_must_be_chosen(repository, capsys):
    assert configs(repository) == 2
    assert "error: choose a pipeline with --pipeline NAME, or --all (pipelines: face_detector, image_classifier)" in capsys.readouterr().err
    assert configs(repository, "--all", "--pipeline", "face_detector") == 2
    assert configs(repository, "--pipeline", "nothing") == 2
