"""A recipe's second stages ([stages.<role>]), ONNX sources in a wheel, and TensorRT profiles: parsed into typed
options, every mistake one line naming the file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import recipe
from vision_serving import layout
from vision_serving.tasks import registry

TASK = registry.task("text_reading")
SHA = "0" * 64
HEAD = f'[source]\nkind = "onnx"\npath = "m.onnx"\nsha256 = "{SHA}"\n'
STAGE = f'[stages.reader]\nsource = {{ kind = "onnx", path = "r.onnx", sha256 = "{SHA}" }}\n'


def load(tmp_path: Path, text: str) -> recipe.Recipe:
    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    return recipe.load(path, TASK)


def test_the_text_reader_s_recipe_has_two_stages_from_the_rapidocr_wheel():
    loaded = recipe.load(layout.pipeline("text_reader").recipe, TASK)
    assert loaded.source.kind == "onnx" and loaded.source.wheel == "rapidocr==3.10.0" and not loaded.source.path
    assert sorted(loaded.stages) == ["classifier", "recognizer"]
    recognizer = loaded.stages["recognizer"]
    assert recognizer.source.member.endswith("PP-OCRv6_rec_small.onnx") and recognizer.fix.passes == ("stable_io_names",)
    assert recognizer.metadata_lists == {"character": "characters.json"}
    assert loaded.precisions == ("fp16", "fp32")
    assert recognizer.precisions == ("fp16", "fp32") and recognizer.gate["min_character_accuracy"] == 0.99


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f'[source]\nkind = "onnx"\nsha256 = "{SHA}"\n', "a path in the pipeline folder or a wheel and its member, not both or neither"),
        (
            f'[source]\nkind = "onnx"\npath = "m.onnx"\nwheel = "w==1"\nmember = "m.onnx"\nsha256 = "{SHA}"\n',
            "not both or neither",
        ),
        (f'[source]\nkind = "onnx"\npath = "m.onnx"\nsha256 = "{SHA}"\n[stages.core]\nsource = {{}}\n', "other than preprocess, core"),
        (
            f'[source]\nkind = "onnx"\npath = "m.onnx"\nsha256 = "{SHA}"\n[stages.reader]\nsource = {{ kind = "onnx", path = "r.onnx", sha256 = "{SHA}" }}\nlayers = 2\n',
            r"\[stages.reader\]: unknown key\(s\) layers",
        ),
        (
            f'[source]\nkind = "onnx"\npath = "m.onnx"\nsha256 = "{SHA}"\n[stages.reader]\nsource = {{ kind = "onnx", path = "r.onnx", sha256 = "bad" }}\n',
            r"\[stages.reader\] source: sha256 must pin the model file",
        ),
        (HEAD + STAGE + 'metadata_lists = { character = "../x.json" }\n', "metadata_lists maps metadata keys to plain file names"),
        (
            f'[source]\nkind = "onnx"\npath = "m.onnx"\nsha256 = "{SHA}"\n[engine]\nprofiles = [[3, 48, 320]]\n',
            r"\[engine\]: TensorRT profiles are not a recipe key: they come from the code that makes the model's input",
        ),
        (
            HEAD + STAGE + "engine_profiles = [[3, 48, 320]]\n",
            r"\[stages.reader\]: engine_profiles: TensorRT profiles are not a recipe key",
        ),
    ],
)
def test_mistakes_are_one_line_naming_the_file_and_key(tmp_path, text, message):
    with pytest.raises(recipe.RecipeError, match=message) as raised:
        load(tmp_path, text)
    assert str(tmp_path / "pipeline.toml") in str(raised.value) and "\n" not in str(raised.value)


def test_a_stage_ladder_has_no_int8_rung(tmp_path):
    with pytest.raises(recipe.RecipeError, match=r"\[stages.reader\] precisions: precisions must be a ladder from \('fp16', 'fp32'\)"):
        load(tmp_path, HEAD + STAGE + 'precisions = ["int8", "fp32"]\n')
    with pytest.raises(recipe.RecipeError, match=r"\[stages.reader\] gate: unknown key\(s\) min_top1"):
        load(tmp_path, HEAD + STAGE + "gate = { min_top1 = 0.9 }\n")
