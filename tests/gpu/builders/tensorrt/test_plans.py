"""TensorRT plan builds on a real GPU (marked gpu: skipped where tensorrt or nvidia-smi is missing).

Run them in the builder image on a GPU host:
    docker compose --env-file versions.env -f docker/compose.yaml run --rm --entrypoint /opt/nvidia/nvidia_entrypoint.sh builder python -m pytest -m gpu tests/gpu
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from builders.tensorrt import discovery, interface, models
from tests.support.tensorrt import run_cli, tiny_pipeline
from vision_serving import layout, model_config

REPOSITORY_ROOT = layout.REPOSITORY_ROOT
CLASSIFIER = layout.pipeline("image_classifier")
PIPELINE_ARGS = ["--pipeline", CLASSIFIER.name]
# --------------------------------------------------------------------------- real builds (GPU + TensorRT)


def _gpu_available() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(discovery.NVIDIA_SMI_QUERY, capture_output=True, check=False).returncode == 0


@pytest.fixture(scope="module")
def trt():
    trt = pytest.importorskip("tensorrt", reason="TensorRT is not installed (use the builder image docker/builder.Dockerfile)")
    if not _gpu_available():
        pytest.skip("no NVIDIA GPU (nvidia-smi failed)")
    return trt


def tiny_qdq_onnx(path: Path) -> None:
    """images [N,3,8,8] -> Q/DQ (int8, per-tensor) -> Conv with int8 per-channel DQ weights -> GAP -> logits [N,10]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = rng.integers(-127, 128, size=(10, 3, 3, 3), dtype=np.int8)
    initializers = [
        numpy_helper.from_array(np.array(1 / 64, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(0, np.int8), "x_zero"),
        numpy_helper.from_array(weights, "w_int8"),
        numpy_helper.from_array(rng.uniform(0.001, 0.01, 10).astype(np.float32), "w_scale"),
        numpy_helper.from_array(np.zeros(10, np.int8), "w_zero"),
        numpy_helper.from_array(rng.normal(size=10).astype(np.float32), "bias"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["images", "x_scale", "x_zero"], ["x_q"]),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_dq"]),
        helper.make_node("DequantizeLinear", ["w_int8", "w_scale", "w_zero"], ["w_dq"], axis=0),
        helper.make_node("Conv", ["x_dq", "w_dq", "bias"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["conv"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["logits"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_qdq",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))


def run_plan(trt, plan: Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One batch through the deserialized plan (tests/support/tensorrt_core.py: cuda-python for device memory)."""
    from tests.support.tensorrt_core import PlanCore

    core = PlanCore(plan)
    return dict(zip(core.output_names, core.run(inputs)))


def onnxruntime_emulation(onnx_path: Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The Q/DQ model on onnxruntime without fusion: Q -> DQ -> float ops, close to TensorRT's INT8 math (docs/design.md, "INT8 on CPU is judged by emulation")."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs)))


@pytest.mark.gpu
def test_build_verify_and_run_a_tiny_qdq_plan(trt, tmp_path, capsys):
    pipeline = tiny_pipeline(tmp_path / "model_repository")
    where = ["--model-repository", str(pipeline.repository.parent), "--pipeline", pipeline.name]
    onnx_path = pipeline.onnx("int8")
    tiny_qdq_onnx(onnx_path)
    argv = ["build-engine", *where, "--opt-batch", "2", "--cache-dir", str(tmp_path / "cache")]
    code, err = run_cli(argv, capsys)
    assert code == 0, err
    plan = pipeline.plan
    record = json.loads(models.provenance_path(plan).read_text())
    assert record["tensorrt"]["version"] == trt.__version__ and record["onnx"]["qdq_nodes"] == 3
    assert record["profile"]["images"] == {"min": [1, 3, 8, 8], "opt": [2, 3, 8, 8], "max": [4, 3, 8, 8]}
    assert record["builder"]["strongly_typed"] and not {"INT8", "FP16"} & set(record["builder"]["builder_flags"])
    gpu = record["gpu"]
    assert gpu["hardware_compatibility"] == interface.hardware_compatibility(trt)  # SAME_COMPUTE_CAPABILITY from TensorRT 10.9
    assert record["cache_key"] == models.cache_key(trt.__version__, gpu["compute_capability"], gpu["hardware_compatibility"], gpu["name"])
    assert (tmp_path / "cache" / record["cache_key"] / f"timing-{discovery.gpu_slug(gpu['name'])}.cache").stat().st_size > 0
    entry = models.cache_entry(tmp_path / "cache", record["cache_key"], pipeline.name, record["input_hash"])
    assert (entry / models.PLAN_FILENAME).read_bytes() == plan.read_bytes()

    code, err = run_cli(argv, capsys)  # second run: served from the cache, nothing rebuilt
    assert code == 0 and "is current" in err
    code, err = run_cli(["verify-plan", *where, "--deserialize"], capsys)
    assert code == 0, err
    code, err = run_cli(["verify-plan", *where, "--tensorrt-version", "9.0.0"], capsys)
    assert code == 1 and "TensorRT" in err

    batch = np.random.default_rng(1).uniform(-1, 1, (3, 3, 8, 8)).astype(np.float32)
    got = run_plan(trt, plan, {"images": batch})["logits"]
    want = onnxruntime_emulation(onnx_path, {"images": batch})["logits"]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.slow
def test_build_and_run_the_real_qdq_model(trt, tmp_path, capsys):
    onnx_path = models.default_onnx(CLASSIFIER)
    if not onnx_path.is_file():
        pytest.skip(f"{onnx_path} not built (python -m builders quantize --pipeline {CLASSIFIER.name})")
    plan = tmp_path / models.PLAN_FILENAME
    code, err = run_cli(["build-engine", *PIPELINE_ARGS, "--onnx", str(onnx_path), "--output", str(plan), "--opt-batch", "8"], capsys)
    assert code == 0, err
    code, err = run_cli(["verify-plan", *PIPELINE_ARGS, "--plan", str(plan), "--deserialize"], capsys)
    assert code == 0, err

    from builders import photos
    from vision_serving import preprocessing
    from vision_serving.image_codec import decode_rgb

    preprocess = model_config.load_config(CLASSIFIER.model_dir("preprocess"))
    limits = preprocessing.limits_from_config(preprocess)
    names = ["chelsea", "coffee", "camera", "motorcycle_left", "rocket", "astronaut"]
    # What the preprocess hands the core (uint8 pixels when the core's graph normalizes them).
    batch = preprocessing.preprocess_batch(
        [decode_rgb(photos.photo_bytes(n), limits) for n in names], preprocessing.PreprocessSpec.from_config(preprocess)
    )
    core = models.load_core_config(CLASSIFIER)
    input_name, output_name = core.input[0].name, core.output[0].name
    got = run_plan(trt, plan, {input_name: batch})[output_name]
    want = onnxruntime_emulation(onnx_path, {input_name: batch})[output_name]
    cosine = np.sum(got * want, axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    assert cosine.min() > 0.98, cosine
    assert np.mean(got.argmax(1) == want.argmax(1)) >= 5 / 6
