"""builders.rapidocr_models: the wheel's files are taken by their pinned sha256 only, and the character list is the recognizer's own.

A stand-in wheel (a zip of the same name in a temporary wheel cache) keeps these offline; the real
wheel's files are read in tests/onnx/vision_serving/test_text_reading.py.
"""

from __future__ import annotations

import hashlib
import zipfile

import onnx
import pytest
from onnx import helper

from builders import BuildError, rapidocr_models, tflite
from devtools import lock
from tests.support.onnx_graphs import model, value


def _recognizer(path, characters: str | None) -> bytes:
    built = model([helper.make_node("Identity", ["x"], ["y"])], [value("x", [1, 3, 48, 320])], [value("y", [1, 3, 48, 320])])
    if characters is not None:
        helper.set_model_props(built, {"character": characters})
    onnx.save(built, path)
    return path.read_bytes()


@pytest.fixture
def fake_wheel(tmp_path, monkeypatch):
    """A ``rapidocr-3.10.0`` wheel in a temporary cache holding the given members; returns a function adding them."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    monkeypatch.setattr(tflite, "WHEELS_DIR", wheels)
    monkeypatch.setattr(rapidocr_models, "CACHE_DIR", tmp_path / "models")

    def build(members: dict[str, bytes]) -> None:
        with zipfile.ZipFile(wheels / "rapidocr-3.10.0-py3-none-any.whl", "w") as archive:
            for name, data in members.items():
                archive.writestr(name, data)

    return build


def test_a_member_with_the_pinned_sha256_is_extracted_once(fake_wheel, tmp_path, monkeypatch):
    data = _recognizer(tmp_path / "r.onnx", "a\nb\n\u3000\nc")
    pinned = rapidocr_models.WheelModel("recognizer", "rapidocr/models/PP-OCRv6_rec_small.onnx", hashlib.sha256(data).hexdigest(), "test")
    monkeypatch.setitem(rapidocr_models.MODELS, "recognizer", pinned)
    fake_wheel({pinned.member: data})
    path = rapidocr_models.model_file("recognizer")
    assert path.read_bytes() == data and path.is_relative_to(tmp_path / "models")
    assert rapidocr_models.model_characters(path) == ["a", "b", "\u3000", "c"]


def test_other_bytes_than_the_pinned_ones_are_refused(fake_wheel):
    fake_wheel({rapidocr_models.MODELS["detector"].member: b"not the detector"})
    with pytest.raises(BuildError, match="sha256"):
        rapidocr_models.model_file("detector")


def test_a_missing_member_and_an_unknown_role_are_build_errors(fake_wheel):
    fake_wheel({})
    with pytest.raises(BuildError, match="has no member"):
        rapidocr_models.model_file("classifier")
    with pytest.raises(BuildError, match="detector, recognizer, classifier"):
        rapidocr_models.model_file("angle")


def test_a_recognizer_without_its_character_list_is_refused(tmp_path):
    _recognizer(tmp_path / "r.onnx", None)
    with pytest.raises(BuildError, match="no 'character' metadata"):
        rapidocr_models.model_characters(tmp_path / "r.onnx")


def test_the_pins_are_rapidocr_s_own_listing():
    # rapidocr/default_models.yaml lists the same files with these SHA256 (and config.yaml selects them).
    assert {model.member.rsplit("/", 1)[1]: model.sha256[:12] for model in rapidocr_models.MODELS.values()} == {
        "PP-OCRv6_det_small.onnx": "090f04abcd9d",
        "PP-OCRv6_rec_small.onnx": "6f327246b503",
        "ch_ppocr_mobile_v2.0_cls_mobile.onnx": "e47acedf6632",
    }
    # the release the reference environment runs (requirements/rapidocr.in)
    assert rapidocr_models.WHEEL == f"rapidocr=={lock.input_pins(lock.BY_NAME['rapidocr'].input)['rapidocr']}" == "rapidocr==3.10.0"
