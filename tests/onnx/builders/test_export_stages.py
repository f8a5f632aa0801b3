"""Second stages ([stages.<role>] of a recipe): the text reader's classifier and recognizer exported out of the
pinned rapidocr wheel beside its detector, their tensors renamed to their configs', the recognizer's character
list written for the postprocess, each skipped when up to date; other bytes, tensors or metadata are refused."""

from __future__ import annotations

import json

import onnx
import pytest

from builders import BuildError, CheckFailed, export, loaded
from builders.recipe import RecipeError
from devtools.loadgen import copy_repository
from vision_serving import layout, model_config

SOURCE = layout.pipeline("text_reader")


@pytest.fixture
def pipeline(tmp_path) -> layout.Pipeline:
    """A copy of the text_reader folder, its configs and recipe only."""
    copy = copy_repository(SOURCE.repository, tmp_path / "text_reader")
    for built in copy.rglob("*"):
        if built.is_file() and built.suffix in (".onnx", ".json") and built.name != "config.pbtxt":
            built.unlink()
    return layout.Pipeline.at(copy)


def test_every_stage_is_exported_with_the_config_s_tensors_and_the_character_list(pipeline):
    export.export(loaded.load(pipeline), log=lambda message: None)
    for role in ("classifier", "recognizer"):
        graph = onnx.load(str(pipeline.stage_onnx(role)), load_external_data=False).graph
        config = model_config.load_config(pipeline.stage_dir(role))
        assert [v.name for v in graph.input] == [t.name for t in config.input]
        assert [v.name for v in graph.output] == [t.name for t in config.output]
        assert layout.provenance_path(pipeline.stage_onnx(role)).is_file()
    recognizer = onnx.load(str(pipeline.stage_onnx("recognizer")), load_external_data=False)
    listed = json.loads((pipeline.model_dir("postprocess") / "characters.json").read_text(encoding="utf-8"))
    metadata = {prop.key: prop.value for prop in recognizer.metadata_props}["character"]
    assert listed == metadata.splitlines() and len(listed) == 18708 and "\u3000" in listed
    messages: list[str] = []
    export.export(loaded.load(pipeline), log=messages.append)
    assert "text_reader_core_recognizer/1/model.onnx is up to date" in messages


def test_other_bytes_than_the_pinned_ones_are_refused(pipeline):
    recipe = pipeline.recipe
    recipe.write_text(recipe.read_text().replace("6f327246b50388f3c176ae304bd95767ea6dc0c9ae92153ef8cbe210b3c14884", "1" * 64))
    with pytest.raises(BuildError, match=r"PP-OCRv6_rec_small.onnx from rapidocr-3.10.0-py3-none-any.whl: sha256 6f327246.*expected 1111"):
        export.export(loaded.load(pipeline), log=lambda message: None)


def test_a_stage_whose_config_differs_from_its_onnx_is_refused_in_one_line(pipeline):
    config = pipeline.stage_dir("classifier") / "config.pbtxt"
    config.write_text(config.read_text().replace("dims: [2]", "dims: [3]"))
    with pytest.raises(CheckFailed, match=r"does not match text_reader_core_classifier's config .*'directions': \[3\]"):
        export.export(loaded.load(pipeline), log=lambda message: None)


def test_a_missing_metadata_key_or_stage_folder_is_named(pipeline):
    recipe = pipeline.recipe
    recipe.write_text(recipe.read_text().replace("metadata_lists = { character =", "metadata_lists = { alphabet ="))
    with pytest.raises(CheckFailed, match="carries no metadata 'alphabet'"):
        export.export(loaded.load(pipeline), log=lambda message: None)
    recipe.write_text(recipe.read_text().replace("[stages.classifier]", "[stages.direction]"))
    with pytest.raises(RecipeError, match=r"\[stages.direction\]: no model text_reader_core_direction"):
        export.export(loaded.load(pipeline), log=lambda message: None)
