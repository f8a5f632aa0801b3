"""builders/provenance.py: the one record type and the one up-to-date check."""

from __future__ import annotations

import json

import pytest

from builders import provenance
from builders.artifacts import sha256_bytes
from builders.provenance import Provenance


def built(tmp_path, data: bytes = b"model", input_hash: str = "ab" * 32):
    artifact = tmp_path / "core" / "1" / "model.onnx"
    artifact.parent.mkdir(parents=True)
    artifact.write_bytes(data)
    record = Provenance.for_bytes(
        "export", input_hash, artifact, data, input_hashes={"source": "cd" * 32}, tools={"onnx": "1.17.0"}, extra={"seconds": 1.5}
    )
    return artifact, record


def test_write_read_round_trip_keeps_named_fields_and_extra(tmp_path):
    artifact, record = built(tmp_path)
    record.write(provenance.path_for(artifact))
    on_disk = json.loads(provenance.path_for(artifact).read_text())
    assert on_disk["step"] == "export" and on_disk["input_hash"] == "ab" * 32
    assert on_disk["output"] == {"file": "model.onnx", "sha256": sha256_bytes(b"model"), "bytes": 5}
    assert on_disk["input_hashes"] == {"source": "cd" * 32} and on_disk["tools"] == {"onnx": "1.17.0"}
    assert on_disk["seconds"] == 1.5 and on_disk["created_at"]
    assert Provenance.read(provenance.path_for(artifact)) == record


def test_is_current(tmp_path):
    artifact, record = built(tmp_path)
    assert not provenance.is_current(artifact, "ab" * 32)  # no record yet
    record.write(provenance.path_for(artifact))
    assert provenance.is_current(artifact, "ab" * 32)
    assert not provenance.is_current(artifact, "00" * 32)
    artifact.write_bytes(b"replaced")
    assert not provenance.is_current(artifact, "ab" * 32)
    artifact.unlink()
    assert not provenance.is_current(artifact, "ab" * 32)


def test_companions_are_part_of_being_current(tmp_path):
    artifact, record = built(tmp_path)
    labels = tmp_path / "postprocess" / "labels.txt"
    labels.parent.mkdir()
    labels.write_text("cat\n")
    record.add_companion(artifact, labels, b"cat\n")
    assert record.companions == {"../../postprocess/labels.txt": sha256_bytes(b"cat\n")}
    record.write(provenance.path_for(artifact))
    assert provenance.is_current(artifact, "ab" * 32)
    labels.write_text("dog\n")
    assert not provenance.is_current(artifact, "ab" * 32)


def test_unreadable_or_foreign_records(tmp_path):
    artifact, _ = built(tmp_path)
    path = provenance.path_for(artifact)
    for text in ("{not json", "[1, 2]"):
        path.write_text(text)
        assert Provenance.read(path) is None
        assert not provenance.is_current(artifact, "ab" * 32)
    path.write_text(json.dumps({"input_hash": "ab" * 32, "model": {"sha256": sha256_bytes(b"model")}}))  # an older format
    assert not provenance.is_current(artifact, "ab" * 32)


def test_extra_may_not_shadow_the_named_fields(tmp_path):
    artifact, record = built(tmp_path)
    record.extra["input_hash"] = "x"
    with pytest.raises(ValueError, match="clash"):
        record.write(provenance.path_for(artifact))
