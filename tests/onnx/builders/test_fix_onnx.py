"""The ``fix`` step: the onnxruntime before/after harness, the CLI, and the real legacy EfficientNet-Lite0
export. The passes themselves are tested in ``tests/onnx/builders/passes/``."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest

from builders import batch_profile, cli, fix_onnx, trt_compat
from builders.passes import registry
from tests.support.onnx_graphs import QUIET, attribute, fix, op_types, relu_model, run, tf_same_constant_chain_model
from vision_serving import layout, model_config

CLASSIFIER = layout.pipeline("image_classifier")


# --------------------------------------------------------------------------- the harness


def test_a_pass_that_changes_outputs_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def relu_to_sigmoid(graph: gs.Graph) -> int:
        for node in graph.nodes:
            if node.op == "Relu":
                node.op = "Sigmoid"
                return 1
        return 0

    monkeypatch.setitem(registry.PASSES, "relu_to_sigmoid", relu_to_sigmoid)
    with pytest.raises(fix_onnx.FixVerificationError, match="relu_to_sigmoid changed the model's outputs"):
        fix(relu_model(["n", 3]), ["relu_to_sigmoid"])


# --------------------------------------------------------------------------- CLI


def write(built: onnx.ModelProto, path: Path) -> Path:
    onnx.save(built, str(path))
    return path


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], lines
    return errors[0]


def test_cli_fix_writes_the_fixed_model(tmp_path: Path) -> None:
    source = write(tf_same_constant_chain_model(), tmp_path / "in.onnx")
    target = tmp_path / "out.onnx"
    passes = "fold_constants_and_cleanup,fuse_pad_into_conv,remove_noops"
    code = cli.main(["fix", "--pipeline", CLASSIFIER.name, str(source), str(target), "--passes", passes])
    assert code == 0
    assert op_types(onnx.load(str(target))) == ["Conv"]


def test_cli_fix_error_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    fix_cli = ["fix", "--pipeline", CLASSIFIER.name]
    assert cli.main([*fix_cli, str(tmp_path / "missing.onnx"), str(tmp_path / "out.onnx")]) == 2
    assert "no such file" in one_error_line(capsys)

    source = write(relu_model(["n", 3]), tmp_path / "in.onnx")
    assert cli.main([*fix_cli, str(source), str(tmp_path / "out.onnx"), "--passes", "no_such_pass"]) == 2
    assert "unknown pass(es) no_such_pass" in one_error_line(capsys)

    # Several pipelines in the repository: the config to read is ambiguous without --pipeline.
    assert cli.main(["fix", str(source), str(tmp_path / "out.onnx"), "--passes", "remove_noops"]) == 2
    assert "choose a pipeline with --pipeline NAME" in one_error_line(capsys)
    assert cli.main(["fix", "--pipeline", "no_such_pipeline", str(source), str(tmp_path / "out.onnx")]) == 2
    assert "no pipeline 'no_such_pipeline'" in one_error_line(capsys)

    monkeypatch.setitem(registry.PASSES, "negate", lambda graph: (setattr(graph.nodes[1], "op", "Relu"), 1)[1])
    assert cli.main([*fix_cli, str(source), str(tmp_path / "out.onnx"), "--passes", "negate"]) == 1
    assert "changed the model's outputs" in one_error_line(capsys)
    assert not (tmp_path / "out.onnx").exists()


def test_fix_in_place_leaves_an_unchanged_model_alone(tmp_path: Path) -> None:
    path = write(relu_model(["n", 3]), tmp_path / "model.onnx")
    before = path.read_bytes()
    fix_onnx.fix_file(path, path, ["remove_noops"], QUIET, log=lambda _: None)
    assert path.read_bytes() == before  # nothing rewritten: not even the metadata
    fix_onnx.fix_file(path, path, ["remove_noops"], QUIET, log=lambda _: None, force=True)
    assert path.read_bytes() != before and "builders.fix" in {p.key for p in onnx.load(str(path)).metadata_props}


def test_cli_check_and_fix_default_to_the_core_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A model repository holding one pipeline: a copy of the classifier's recipe and configs, another model.
    copy = layout.Pipeline.at(tmp_path / "model_repository" / CLASSIFIER.name)
    shutil.copytree(CLASSIFIER.repository, copy.repository, ignore=shutil.ignore_patterns("*.onnx", "*.json", "__pycache__"))
    write(tf_same_constant_chain_model(), copy.onnx("fp32"))
    root = ["--model-repository", str(copy.repository.parent)]  # its only pipeline: no --pipeline needed
    assert cli.main(["check", *root]) == 0
    assert "runtime-pads" in capsys.readouterr().out
    passes = "fold_constants_and_cleanup,fuse_pad_into_conv"
    assert cli.main(["fix", *root, "--passes", passes]) == 0
    assert op_types(onnx.load(str(copy.onnx("fp32")))) == ["Conv"]


# --------------------------------------------------------------------------- the real case


@pytest.fixture(scope="module")
def legacy_model() -> onnx.ModelProto:
    from tests.support.legacy_export import export_legacy_onnx

    return export_legacy_onnx()


@pytest.fixture(scope="module")
def photo_batch() -> np.ndarray:
    from builders import photos
    from vision_serving import image_codec, model_config, preprocessing

    config = model_config.load_config(CLASSIFIER.model_dir("preprocess"))
    spec = preprocessing.PreprocessSpec.from_config(config)
    limits = preprocessing.limits_from_config(config)
    names = list(photos.registry())[:8]
    pixels = preprocessing.preprocess_batch([image_codec.decode_rgb(photos.photo_bytes(n), limits) for n in names], spec)
    return preprocessing.normalize_pixels(pixels, spec)  # the legacy export takes the normalized float image


def test_legacy_export_check_then_fix(legacy_model: onnx.ModelProto, photo_batch: np.ndarray) -> None:
    raw = trt_compat.check_model(legacy_model)
    codes = [f.code for f in raw.findings]
    assert codes.count("runtime-pads") == 17  # one per TF-"SAME" padded conv
    assert all(f.severity == "warning" and "fuse_pad_into_conv" in f.fix for f in raw.findings if f.code == "runtime-pads")
    assert "runtime-shape" in codes and "batch-range-undeclared" in codes
    assert not raw.blocking

    options = fix_onnx.options_for_core(model_config.load_config(CLASSIFIER.core_dir), None, None, 1e-4, 1e-4)
    result = fix(legacy_model, list(registry.DEFAULT_PASSES), options)
    fixed = result.model

    ops = set(op_types(fixed))
    assert not ops & {"Shape", "ConstantOfShape", "Pad", "Gather", "Slice", "Cast", "Concat"}
    for node in fixed.graph.node:
        if node.op_type == "Conv":
            assert len(attribute(node, "pads")) == 4 and all(isinstance(p, int) for p in attribute(node, "pads"))
    assert [v.name for v in fixed.graph.input] == ["images"] and [v.name for v in fixed.graph.output] == ["logits"]
    assert batch_profile.read_profile(fixed).max == 32
    assert trt_compat.check_model(fixed).findings == []

    expected = run(legacy_model, photo_batch)[0]
    actual = run(fixed, photo_batch)[0]
    assert float(np.abs(actual - expected).max()) <= 1e-4
    assert (actual.argmax(axis=1) == expected.argmax(axis=1)).all()
