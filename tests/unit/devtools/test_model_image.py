"""devtools.model_image: what goes into the model image, and what a repository that is not built gets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from devtools import model_image
from vision_serving import layout

SOURCE = layout.pipeline("person_segmenter")  # its recipe and configs are committed: a clean clone has them


def built_copy(root: Path) -> layout.Pipeline:
    """The pipeline folder's committed files, with a served ONNX, its record, labels, a plan and caches as a build leaves them."""
    repository = root / "model_repository"
    shutil.copytree(
        SOURCE.repository,
        repository / SOURCE.name,
        ignore=shutil.ignore_patterns("*.onnx", "*.json", "*.plan", "*.txt", "*.tmp", "__pycache__"),
    )
    pipeline = layout.pipeline(SOURCE.name, repository)
    onnx = pipeline.onnx("int8")
    onnx.write_bytes(b"onnx bytes")
    layout.provenance_path(onnx).write_text("{}")
    pipeline.served_precision.write_text(json.dumps({"onnx": onnx.name, "onnx_sha256": layout.file_sha256(onnx)}))
    (pipeline.model_dir("postprocess") / "labels.txt").write_text("background\nperson\n")
    pipeline.plan.write_bytes(b"plan for one GPU")
    layout.provenance_path(pipeline.plan).write_text("{}")
    (pipeline.core_version_dir / "model.timing.cache").write_bytes(b"")
    (pipeline.core_version_dir / "__pycache__").mkdir()
    (pipeline.core_version_dir / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"")
    return pipeline


def test_stages_the_model_without_what_each_node_builds(tmp_path):
    pipeline = built_copy(tmp_path / "source")
    out = tmp_path / "context"
    (out / model_image.STAGED_REPOSITORY / "stale").mkdir(parents=True)
    files = model_image.stage(pipeline.repository.parent, out)
    staged = out / model_image.STAGED_REPOSITORY
    assert sorted(p.relative_to(staged) for p in staged.rglob("*") if p.is_file()) == files
    names = {p.name for p in files}
    assert {"pipeline.toml", "config.pbtxt", "cpu.pbtxt", "model.py", layout.SERVED_PRECISION, "model_int8_qdq.onnx"} <= names
    assert "model_int8_qdq.onnx.json" in names and "labels.txt" in names
    assert not {"model.plan", "model.plan.json", "model.timing.cache", "model.cpython-311.pyc"} & names
    assert not (staged / "stale").exists(), "the staged repository is replaced, not merged"
    assert [p.name for p in layout.pipelines(staged)] == [pipeline.name]
    assert layout.pipeline(pipeline.name, staged).served_onnx() is not None


@pytest.mark.parametrize("broken", ["no served precision", "changed onnx", "no config", "no pipeline"])
def test_refuses_a_repository_that_is_not_built(tmp_path, capsys, broken):
    pipeline = built_copy(tmp_path / "source")
    if broken == "no served precision":
        pipeline.served_precision.unlink()
    elif broken == "changed onnx":
        pipeline.onnx("int8").write_bytes(b"changed")
    elif broken == "no config":
        (pipeline.model_dir("postprocess") / "config.pbtxt").unlink()
    else:
        pipeline.recipe.unlink()
    out = tmp_path / "context"
    code = model_image.main(["--model-repository", str(pipeline.repository.parent), "--output", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("model_image: error: "), err
    assert not (out / model_image.STAGED_REPOSITORY).exists()


def test_refuses_an_output_inside_the_repository(tmp_path):
    pipeline = built_copy(tmp_path / "source")
    with pytest.raises(model_image.ModelImageError, match="inside the model repository"):
        model_image.stage(pipeline.repository.parent, pipeline.repository / "image")
