"""``new-pipeline NAME --from TEMPLATE``: the template's spec without its comments, the files its build needs, renamed, and every config generated."""

from __future__ import annotations

import shutil

import pytest

from builders import BuildError, scaffold, spec
from builders.configs import generate, header_line
from vision_serving import consistency, layout, model_config

TEMPLATE = layout.pipeline("person_segmenter")


@pytest.fixture
def repository(tmp_path):
    root = tmp_path / "model_repository"
    shutil.copytree(TEMPLATE.repository, root / TEMPLATE.name, ignore=shutil.ignore_patterns("*.onnx", "*.json", "*.tmp", "__pycache__"))
    return root


def test_the_copy_is_renamed_generated_and_says_where_it_came_from(repository):
    scaffold.new_pipeline("my_segmenter", TEMPLATE.name, repository, log=lambda _: None)
    copy = layout.pipeline("my_segmenter", repository)
    assert sorted(p.name for p in copy.repository.iterdir() if p.is_dir()) == [
        "my_segmenter",
        "my_segmenter_core",
        "my_segmenter_postprocess",
        "my_segmenter_preprocess",
    ]
    for role in layout.ROLES:
        assert model_config.load_config(copy.model_dir(role)).name == copy.model_name(role)
    ensemble = (copy.ensemble_dir / "config.pbtxt").read_text()
    assert 'model_name: "my_segmenter_core"' in ensemble and "person_segmenter" not in ensemble
    first, rest = copy.recipe.read_text().split("\n", 1)
    assert first.startswith("# Copied from the person_segmenter pipeline by `python -m builders new-pipeline my_segmenter")
    assert [line for line in rest.splitlines() if line.lstrip().startswith("#")][1:] == []  # the template's comments are gone
    for path in copy.repository.rglob("*.pbtxt"):
        assert path.read_text().splitlines()[0] == header_line("my_segmenter"), path
    assert generate.files(spec.load(copy)) == {path: path.read_text() for path in generate.files(spec.load(copy))}
    assert consistency.check_repository(repository) == []


def test_a_copy_has_every_file_its_build_needs(tmp_path):
    """The face detector's labels are a hand-written file (no build writes them): the copy has them."""
    root = tmp_path / "model_repository"
    source = layout.pipeline("face_detector")
    shutil.copytree(source.repository, root / source.name, ignore=shutil.ignore_patterns("*.onnx", "*.json", "__pycache__"))
    scaffold.new_pipeline("my_faces", source.name, root, log=lambda _: None)
    copy = layout.pipeline("my_faces", root)
    assert (copy.model_dir("postprocess") / "labels.txt").read_text() == (source.model_dir("postprocess") / "labels.txt").read_text()
    hand = {p.relative_to(copy.repository).as_posix() for p in copy.repository.rglob("*") if p.is_file()} - {
        p.relative_to(copy.repository).as_posix() for p in generate.files(spec.load(copy))
    }
    assert hand == {"pipeline.toml", "my_faces_postprocess/labels.txt"}


def test_the_next_commands_name_the_model_repository_when_it_is_not_the_default(repository):
    lines: list[str] = []
    scaffold.new_pipeline("my_segmenter", TEMPLATE.name, repository, log=lines.append)
    (line,) = lines
    assert "edit its pipeline.toml for your model (docs/models.md, 'Any ONNX model: start from the pipeline of its task')" in line
    assert line.endswith(
        f"then `python -m builders all --pipeline my_segmenter --model-repository {repository}`, "
        f"then `./scripts/serve --model-repository {repository}`"
    )
    assert scaffold.next_commands("mine", layout.MODEL_REPOSITORY) == "`python -m builders all --pipeline mine`, then `./scripts/serve`"


def test_names_and_templates_are_checked(repository):
    with pytest.raises(BuildError, match="use lower-case letters, digits and _"):
        scaffold.new_pipeline("My-Model", TEMPLATE.name, repository, log=lambda _: None)
    with pytest.raises(BuildError, match=r"--from 'nothing' is neither a pipeline \(person_segmenter\) nor a model family \(yolo\)"):
        scaffold.new_pipeline("mine", "nothing", repository, log=lambda _: None)
    with pytest.raises(BuildError, match="already exists"):
        scaffold.new_pipeline(TEMPLATE.name, TEMPLATE.name, repository, log=lambda _: None)


def test_comments_are_stripped_outside_quotes():
    text = 'a: "x # not a comment"  # a comment\n# whole line\n\n\n\nb: 1\n'
    assert scaffold.strip_comments(text) == 'a: "x # not a comment"\n\nb: 1\n'
