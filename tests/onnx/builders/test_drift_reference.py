"""builders drift-reference on the real classifier: where it writes, what it holds, idempotence, the CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from builders import build_all, calibration, cli, drift_reference, loaded, photos, provenance
from tests.support.pipelines import built_classifier
from vision_serving import drift, image_codec, layout
from vision_serving.pipeline_configs import PipelineConfigs


def test_reference_of_the_classifier_is_written_beside_the_served_version():
    pipeline = built_classifier()
    path = drift_reference.build(loaded.load(pipeline), log=lambda message: None)
    assert path == layout.drift_reference_path(pipeline.core_version_dir) == pipeline.drift_reference
    record = json.loads(path.read_text())
    assert record["core_version"] == "1" and record["onnx"] == layout.FP32_ONNX and record["images"] >= 100
    assert set(record["models"]) == {"image_classifier_preprocess", "image_classifier_postprocess"}
    images = drift.load_reference(path, "image_classifier_preprocess")
    assert set(images.numeric) == set(drift.IMAGE_NUMERIC) and set(images.categorical) == {"format"}
    assert all(len(values) == record["images"] for values in images.numeric.values())
    assert 0.1 < images.means["brightness"] < 0.9 and images.means["saturation"] > 0.05
    outputs = drift.load_reference(path, "image_classifier_postprocess")
    assert set(outputs.numeric) == {"confidence", "entropy"} and set(outputs.categorical) == {"predicted_class"}
    assert np.all((outputs.numeric["confidence"] > 0) & (outputs.numeric["confidence"] <= 1))
    # Provenance: the ONNX it was computed with; a second build is a no-op.
    record_of = provenance.read_for(path)
    assert record_of is not None and record_of.step == drift_reference.STEP
    assert record_of.input_hashes["onnx"] == layout.file_sha256(pipeline.onnx("fp32"))
    before = path.stat().st_mtime_ns
    drift_reference.build(loaded.load(pipeline), log=lambda message: None)
    assert path.stat().st_mtime_ns == before


def test_cli_step_reports_up_to_date(capsys):
    built_classifier()
    assert cli.main(["drift-reference", "--pipeline", "image_classifier"]) == 0
    assert "is up to date" in capsys.readouterr().err


def test_cli_unknown_pipeline_is_one_line_exit_2(capsys):
    assert cli.main(["drift-reference", "--pipeline", "no_such_pipeline"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")


# --------------------------------------------------------------------------- --photos: the user's own photos

# Built artifacts left out of the copy: the copy's reference is built from scratch.
NOT_COPIED = shutil.ignore_patterns("__pycache__", "*.plan*", "model_int8_qdq.onnx*", "drift_reference.json*")


@pytest.fixture(scope="module")
def classifier_copy(tmp_path_factory) -> layout.Pipeline:
    """A copy of the built classifier (FP32 ONNX, configs) in a temporary model repository: the
    user-reference tests never touch the shared repository's reference."""
    source = built_classifier()
    root = tmp_path_factory.mktemp("drift") / "model_repository"
    shutil.copytree(source.repository, root / source.name, ignore=NOT_COPIED)
    return layout.pipeline(source.name, root)


def write_photos(folder: Path, count: int) -> list[str]:
    """``count`` real photos (package photos as-is, then seeded augmentations: JPEG and PNG) in two
    sub-folders, each file named for its format only when it is even; returns their names."""
    folder.mkdir(parents=True)
    sources = calibration.package_sources(list(photos.registry())[:12])
    limits = PipelineConfigs.load(built_classifier()).limits
    names = []
    for sample in calibration.make_samples(sources, count, 4242, calibration.EVALUATION_PROFILE, limits):
        suffix = "." + (image_codec.sniff_format(sample.data) or "bin") if sample.index % 2 == 0 else ""
        path = folder / f"day{sample.index % 2}" / f"upload_{sample.index:04d}{suffix}"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(sample.data)
        names.append(path.relative_to(folder).as_posix())
    return names


def test_reference_from_the_users_photos_is_kept_until_rebuilt_or_the_model_changes(classifier_copy, tmp_path):
    pipeline = classifier_copy
    folder = tmp_path / "traffic"
    needed = drift_reference.minimum_photos(loaded.load(pipeline))
    names = write_photos(folder, needed + 2)
    (folder / "day0" / "notes.txt").write_text("not an image\n")  # refused by the served decoder
    (folder / "day1" / "cut.jpg").write_bytes((folder / names[0]).read_bytes()[:300])  # truncated
    (folder / ".DS_Store").write_bytes(b"\x00\x01")  # hidden: not part of the set
    lines: list[str] = []
    path = drift_reference.build(loaded.load(pipeline), photos=folder, log=lines.append)
    skipped = [line for line in lines if line.startswith("skipped")]
    assert len(skipped) == 1 and skipped[0].startswith(f"skipped 2 of {needed + 4} files the served decoder refuses (first: "), lines
    record = json.loads(path.read_text())
    assert record["images"] == needed + 2
    assert record["photos"] == {"source": "photos", "directory": str(folder), "files": needed + 4, "refused": 2}
    images = drift.load_reference(path, "image_classifier_preprocess")
    assert all(len(values) == needed + 2 for values in images.numeric.values())
    assert set(images.categorical["format"]) <= {"jpeg", "png"} and sum(images.categorical["format"].values()) == needed + 2
    built = provenance.read_for(path)
    assert built is not None and built.inputs["reference"]["source"] == "photos" and built.inputs["reference"]["files"] == needed + 4
    assert built.extra["photos_directory"] == str(folder)
    before = path.read_bytes()

    # The same photos again: up to date. Without --photos (all, build_artifacts), even with --force: kept.
    lines.clear()
    drift_reference.build(loaded.load(pipeline), photos=folder, log=lines.append)
    assert lines == [f"{path} is up to date"]
    for force in (False, True):
        lines.clear()
        drift_reference.build(loaded.load(pipeline), force=force, log=lines.append)
        assert len(lines) == 1 and "kept (built from" in lines[0] and path.read_bytes() == before
    # A changed photo is another set: rebuilt.
    (folder / names[0]).write_bytes((folder / names[2]).read_bytes())
    assert drift_reference.photo_set(folder).sha256 != built.inputs["reference"]["sha256"]

    # Drift settings do not touch the reference; another model config does: one line, the file untouched.
    postprocess = pipeline.model_dir("postprocess") / "config.pbtxt"
    text = postprocess.read_text()
    postprocess.write_text(
        text.replace('{ key: "drift_window"', '{ key: "drift_features", value: { string_value: "confidence" } },\n  { key: "drift_window"')
    )
    drift_reference.build(loaded.load(pipeline), log=lines.append)
    assert path.read_bytes() == before
    postprocess.write_text(text.replace('string_value: "5"', 'string_value: "3"', 1))
    try:
        with pytest.raises(drift_reference.StaleUserReference) as raised:
            drift_reference.build(loaded.load(pipeline), log=lines.append)
        message = str(raised.value)
        assert "\n" not in message and f"--pipeline image_classifier --photos {folder}`" in message
        assert path.read_bytes() == before
        # `all` keeps it too, with a warning line, and carries on.
        lines.clear()
        dict(build_all.steps(loaded.load(pipeline), force=True))["drift-reference"](lines.append)
        assert lines == [f"warning: {message}"] and path.read_bytes() == before
    finally:
        postprocess.write_text(text)


def test_too_few_photos_is_one_line_exit_2(classifier_copy, tmp_path, capsys):
    folder = tmp_path / "few"
    write_photos(folder, 6)
    arguments = ["drift-reference", "--pipeline", classifier_copy.name, "--model-repository", str(classifier_copy.repository.parent)]
    assert cli.main([*arguments, "--photos", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --photos {folder}: 6 files; the drift tests need at least 128 photos (drift_min_samples)"]
    assert cli.main([*arguments, "--photos", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"error: --photos {tmp_path / 'missing'}: not a directory"]
    assert cli.main([*arguments, "--limit", "5"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["error: --limit needs --photos"]


def test_limit_is_a_seeded_choice_of_the_folder(tmp_path):
    folder = tmp_path / "many"
    for index in range(40):
        (folder / f"{index % 3}").mkdir(parents=True, exist_ok=True)
        (folder / f"{index % 3}" / f"{index}.jpg").write_bytes(bytes([index]) * 10)
    every = drift_reference.photo_set(folder)
    assert every.found == 40 and len(every.files) == 40 and every.limit is None
    some = drift_reference.photo_set(folder, limit=10)
    assert len(some.files) == 10 and some.found == 40 and set(some.files) < set(every.files)
    assert drift_reference.photo_set(folder, limit=10) == some and some.sha256 != every.sha256
    assert drift_reference.photo_set(folder, limit=100).files == every.files
