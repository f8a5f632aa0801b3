"""The source kinds a recipe may name (builders.sources): the registry's keys, what each kind's [source] table
needs (every mistake one line naming the file and key), which kinds a second stage may come from, and a kind
added by a module and one registry entry being one the recipe accepts."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from builders import BuildError, recipe
from builders.sources import registry
from builders.sources.base import RecipeError, Source, SourceKind
from vision_serving.tasks import registry as tasks

TASK = tasks.task("text_reading")
SHA = "0" * 64
WHERE = "pipeline.toml [source]"
ONNX_CORE = f'[source]\nkind = "onnx"\npath = "m.onnx"\nsha256 = "{SHA}"\n'


def load(tmp_path: Path, text: str) -> recipe.Recipe:
    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    return recipe.load(path, TASK)


def test_the_registry_lists_each_kind_once_under_its_own_key():
    assert list(registry.KINDS) == ["efficientnet_lite0", "tflite", "onnx"]
    for key, kind in registry.KINDS.items():
        assert kind.key == key and kind.description and "\n" not in kind.description
    assert registry.kind("tflite", WHERE) is registry.KINDS["tflite"]


def test_an_unknown_kind_is_one_line_naming_it_and_the_supported_kinds(tmp_path):
    with pytest.raises(RecipeError) as raised:
        load(tmp_path, '[source]\nkind = "keras"\n')
    message = str(raised.value)
    assert message == f"{tmp_path / 'pipeline.toml'} [source]: kind must be one of efficientnet_lite0, tflite, onnx, got 'keras'"
    with pytest.raises(RecipeError, match=r"^somewhere: kind must be one of"):
        registry.kind("", "somewhere")


@pytest.mark.parametrize(
    "source",
    [
        Source("onnx", path="m.onnx", sha256=SHA),
        Source("onnx", wheel="rapidocr==3.10.0", member="rapidocr/models/m.onnx", sha256=SHA),
        Source("tflite", wheel="mediapipe==0.10.14", member="mediapipe/m.tflite", sha256=SHA),
        Source("efficientnet_lite0", opset=18),
    ],
)
def test_a_complete_table_is_valid(source):
    registry.kind(source.kind, WHERE).validate(source, WHERE)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (Source("onnx", path="m.onnx"), r"sha256 must pin the model file \(onnx sources\): its 64 hex digits.*got ''"),
        (Source("onnx", path="m.onnx", sha256="ABC"), r"sha256 must pin the model file .*got 'ABC'"),
        (Source("tflite", wheel="w==1", member="m.tflite", sha256="A" * 64), r"sha256 must pin the model file \(tflite sources\)"),
        (Source("onnx", sha256=SHA), "an onnx source is a path in the pipeline folder or a wheel and its member, not both or neither"),
        (Source("onnx", path="m.onnx", wheel="w==1", member="m.onnx", sha256=SHA), "not both or neither"),
        (Source("onnx", path="m.onnx", wheel="w==1", sha256=SHA), "not both or neither"),
        (Source("onnx", wheel="w==1", sha256=SHA), "not both or neither"),
        (Source("tflite", wheel="w==1", sha256=SHA), "a tflite source in a wheel needs wheel and member"),
        (Source("tflite", path="m.tflite", sha256=SHA), "a tflite source in a wheel needs wheel and member"),
        (
            Source("tflite", wheel="w==1", member="m.tflite", path="m.tflite", sha256=SHA),
            "a tflite source is a wheel and its member, not a path",
        ),
    ],
)
def test_an_incomplete_table_is_one_line_naming_where(source, message):
    with pytest.raises(RecipeError, match=message) as raised:
        registry.kind(source.kind, WHERE).validate(source, WHERE)
    assert str(raised.value).startswith(f"{WHERE}: ") and "\n" not in str(raised.value)


def test_the_recipe_asks_the_kind(tmp_path):
    with pytest.raises(RecipeError, match=r"\[source\]: a tflite source in a wheel needs wheel and member"):
        load(tmp_path, f'[source]\nkind = "tflite"\nsha256 = "{SHA}"\n')
    assert load(tmp_path, ONNX_CORE).source == Source("onnx", path="m.onnx", sha256=SHA)


def test_only_an_onnx_file_may_be_a_second_stage_s_source(tmp_path):
    assert [key for key, kind in registry.KINDS.items() if kind.stage_source] == ["onnx"]
    assert registry.stage_kind("onnx", WHERE) is registry.KINDS["onnx"]
    stage = f'[stages.reader]\nsource = {{ kind = "tflite", wheel = "w==1", member = "r.tflite", sha256 = "{SHA}" }}\n'
    with pytest.raises(RecipeError) as raised:
        load(tmp_path, ONNX_CORE + stage)
    assert str(raised.value) == (
        f"{tmp_path / 'pipeline.toml'} [stages.reader] source: a second stage's source must be of a kind it may come from (onnx), "
        "got 'tflite'"
    )
    with pytest.raises(RecipeError, match=r"\[stages.reader\] source: kind must be one of efficientnet_lite0, tflite, onnx, got 'x'"):
        load(tmp_path, ONNX_CORE + '[stages.reader]\nsource = { kind = "x" }\n')


def test_a_kind_without_a_model_file_or_a_converter_says_so_when_asked(tmp_path):
    kind = SourceKind("bare", "a kind that says nothing of its own")
    with pytest.raises(BuildError, match=rf"^{re.escape(WHERE)}: the bare kind names no model file$"):
        kind.model_file(Source("bare"), tmp_path, WHERE, lambda message: None)
    with pytest.raises(BuildError, match=r"^the bare kind has no converter to ONNX$"):
        kind.convert(Source("bare"), tmp_path, tmp_path, None, lambda message: None)  # type: ignore[arg-type]
    assert kind.check_converted(None, tmp_path, lambda: None, print) == {}  # type: ignore[arg-type, return-value]
    assert kind.converter_sha256() is None and registry.KINDS["efficientnet_lite0"].converter_sha256() is None
    # No kind owns an export of its own: every one converts and goes the one path of builders.export.
    assert not any(hasattr(kind, "export") for kind in registry.KINDS.values())


def test_an_onnx_file_in_the_pipeline_folder_is_checked_against_its_pin(tmp_path):
    kind = registry.KINDS["onnx"]
    (tmp_path / "m.onnx").write_bytes(b"not really onnx")
    with pytest.raises(RecipeError, match=rf"^{re.escape(WHERE)}: m.onnx has sha256 [0-9a-f]{{64}}, the recipe pins {SHA}$"):
        kind.model_file(Source("onnx", path="m.onnx", sha256=SHA), tmp_path, WHERE, lambda message: None)
    with pytest.raises(RecipeError, match=rf"^{re.escape(WHERE)}: path 'missing.onnx' is not a file in the pipeline folder$"):
        kind.model_file(Source("onnx", path="missing.onnx", sha256=SHA), tmp_path, WHERE, lambda message: None)
    pinned = hashlib.sha256(b"not really onnx").hexdigest()
    assert kind.model_file(Source("onnx", path="m.onnx", sha256=pinned), tmp_path, WHERE, lambda message: None) == tmp_path / "m.onnx"


@dataclass(frozen=True)
class NumpyWeights(SourceKind):
    """A throwaway kind: a .npz file of the pipeline folder (what a new kind's module would hold)."""

    def validate(self, source: Source, where: str) -> None:
        if not source.path.endswith(".npz"):
            raise RecipeError(f"{where}: a numpy_weights source is a .npz file, got path {source.path!r}")


def test_a_kind_is_one_module_and_one_registry_entry(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.KINDS, "numpy_weights", NumpyWeights("numpy_weights", "weights as a .npz file"))
    loaded = load(tmp_path, '[source]\nkind = "numpy_weights"\npath = "w.npz"\n')
    assert loaded.source == Source("numpy_weights", path="w.npz")
    with pytest.raises(RecipeError, match=r"\[source\]: a numpy_weights source is a .npz file, got path 'w.bin'"):
        load(tmp_path, '[source]\nkind = "numpy_weights"\npath = "w.bin"\n')
    with pytest.raises(RecipeError, match="kind must be one of efficientnet_lite0, tflite, onnx, numpy_weights, got 'x'"):
        load(tmp_path, '[source]\nkind = "x"\n')
    with pytest.raises(RecipeError, match="a second stage's source must be of a kind it may come from"):
        load(tmp_path, ONNX_CORE + '[stages.reader]\nsource = { kind = "numpy_weights", path = "w.npz" }\n')


def test_the_tflite_converter_s_lock_is_what_its_provenance_records():
    lock = Path(__file__).resolve().parents[3] / "requirements" / "tflite-convert.txt"
    assert registry.KINDS["tflite"].converter_sha256() == hashlib.sha256(lock.read_bytes()).hexdigest()
