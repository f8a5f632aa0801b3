"""README "Add your own model", followed literally with an ONNX model the project does not ship.

The steps run as the README's commands (subprocesses), on a copy of the model
repository in a temporary folder (``--model-repository``), then the new
pipeline is served by a real tritonserver and checked against onnxruntime.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
from onnx import TensorProto, helper, numpy_helper

from devtools.loadgen import running_server
from vision_serving import classification, image_codec, layout, model_config, preprocessing
from vision_serving.onnx_core import create_session

pytestmark = pytest.mark.integration

NAME = "my_classifier"
LABELS = ["red", "green", "blue", "gray"]


def tiny_classifier() -> onnx.ModelProto:
    """A model of your own: Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm, 4 classes, 32x32 input."""
    rng = np.random.default_rng(7)
    weights = {
        "conv_w": rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32),
        "conv_b": rng.normal(0, 0.1, (8,)).astype(np.float32),
        "fc_w": rng.normal(0, 0.5, (4, 8)).astype(np.float32),
        "fc_b": np.zeros(4, dtype=np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["input", "conv_w", "conv_b"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("GlobalAveragePool", ["relu"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["scores"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 3, 32, 32])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n", 4])],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def run(*args: str) -> str:
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=layout.REPOSITORY_ROOT, timeout=900)
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return result.stdout + result.stderr


def edit(path: Path, pattern: str, replacement: str, count: int = 0) -> None:
    text, replaced = re.subn(pattern, replacement, path.read_text(), count=count, flags=re.M | re.S)
    assert replaced, f"{pattern!r} not found in {path}"
    path.write_text(text)


@pytest.fixture(scope="module")
def own_repository(tmp_path_factory, built_repository) -> Path:
    root = tmp_path_factory.mktemp("byo") / "model_repository"
    root.mkdir()
    shutil.copytree(built_repository / "image_classifier", root / "image_classifier")
    # 1. Start from the pipeline of the same task.
    run("-m", "builders", "new-pipeline", NAME, "--from", "image_classifier", "--model-repository", str(root))
    shutil.rmtree(root / "image_classifier")  # only the new pipeline is served in this test
    folder = root / NAME
    # 2. Put your model and its labels in the folder.
    onnx.save(tiny_classifier(), folder / "model.onnx")
    (folder / f"{NAME}_postprocess" / "labels.txt").write_text("\n".join(LABELS) + "\n")
    # 3. The recipe: an ONNX source, the fix passes that name and batch its I/O, a smaller calibration.
    recipe = folder / "pipeline.toml"
    edit(recipe, r"^description = .*?$", 'description = "my own 4-class colour classifier"')
    edit(recipe, r"^\[source\].*?(?=^\[fix\])", '[source]\nkind = "onnx"\npath = "model.onnx"\n\n')
    edit(recipe, r"^passes = .*?$", 'passes = ["stable_io_names", "batch_dimension"]')
    edit(recipe, r"^exclude = .*?$", "exclude = []")
    edit(recipe, r"^samples = .*?$", "samples = 64")
    edit(recipe, r"^\[golden\].*", "[golden]\n")
    # 4. The configs: your model's input size and class count, and its preprocessing.
    for config in (folder / f"{NAME}_core").rglob("*.pbtxt"):
        edit(config, r"dims: \[ 3, 224, 224 \]", "dims: [ 3, 32, 32 ]")
        edit(config, r"dims: \[ 1000 \]", "dims: [ 4 ]")
    preprocess = folder / f"{NAME}_preprocess" / "config.pbtxt"
    edit(preprocess, r"dims: \[ 3, 224, 224 \]", "dims: [ 3, 32, 32 ]")
    edit(preprocess, r'"resize_shorter_side", value: \{ string_value: "256" \}', '"resize_shorter_side", value: { string_value: "36" }')
    edit(preprocess, r'"mean", value: \{ string_value: "[^"]*" \}', '"mean", value: { string_value: "127.5,127.5,127.5" }')
    postprocess = folder / f"{NAME}_postprocess" / "config.pbtxt"
    edit(postprocess, r"dims: \[ 1000 \]", "dims: [ 4 ]")
    edit(postprocess, r'"top_k", value: \{ string_value: "5" \}', '"top_k", value: { string_value: "2" }')
    # 5. Check, then build.
    assert "ok: 1 pipelines" in run("-m", "vision_serving.consistency", "--repository", str(root))
    output = run("-m", "builders", "all", "--pipeline", NAME, "--model-repository", str(root))
    assert "serves" in output
    return root


def test_files_touched_are_only_the_new_pipeline_folder(own_repository):
    touched = sorted(p.relative_to(own_repository).as_posix() for p in own_repository.rglob("*") if p.is_file())
    assert all(path.startswith(f"{NAME}/") for path in touched)
    assert f"{NAME}/{NAME}_core/1/model.onnx" in touched  # built by `builders all`
    assert f"{NAME}/{NAME}_core/1/served_precision.json" in touched


def test_own_model_is_served_and_answers_like_onnxruntime(own_repository, photo_bytes, tmp_path):
    pipeline = layout.pipeline(NAME, own_repository)
    preprocess = model_config.load_config(pipeline.model_dir("preprocess"))
    limits = preprocessing.limits_from_config(preprocess)
    names = ["coffee", "chelsea", "astronaut"]
    batch = preprocessing.preprocess_batch(
        [image_codec.decode_rgb(photo_bytes[n], limits) for n in names], preprocessing.PreprocessSpec.from_config(preprocess)
    )
    session = create_session(pipeline.onnx("fp32"))
    (logits,) = session.run(None, {"images": batch})
    expected = classification.top_k(logits, [2] * len(names), np.array([label.encode() for label in LABELS], dtype=object))
    with running_server(own_repository, tmp_path) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        image = grpcclient.InferInput("IMAGE", [len(names), 1], "BYTES")
        image.set_data_from_numpy(np.array([[photo_bytes[n]] for n in names], dtype=np.object_))
        result = client.infer(NAME, [image])
    assert result.as_numpy("LABELS").shape == (3, 2)
    for row, top in enumerate(expected):
        assert result.as_numpy("CLASS_IDS")[row].tolist() == top.class_ids.tolist()
        assert [label.decode() for label in result.as_numpy("LABELS")[row]] == [label.decode() for label in top.labels]
        np.testing.assert_allclose(result.as_numpy("SCORES")[row], top.scores, atol=1e-5)
