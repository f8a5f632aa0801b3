"""The TensorRT plan steps (`build-engine`, `verify-plan`).

Pure logic (profile, version handling, provenance comparison, CLI errors) runs
everywhere. The `gpu` tests build real plans; they skip unless `tensorrt`
imports and `nvidia-smi` sees a GPU (the builder image on a GPU host:
`docker compose -f docker/compose.yaml run --rm builder python -m pytest -m gpu`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from builders import BuildError, cli
from builders import tensorrt_engine as te
from vision_serving import layout, model_config

REPOSITORY_ROOT = layout.REPOSITORY_ROOT
CLASSIFIER = layout.pipeline("image_classifier")
# The repository has several pipelines: every step that reads one is told which.
PIPELINE_ARGS = ["--pipeline", CLASSIFIER.name]
H100 = te.GpuFacts("NVIDIA H100 80GB HBM3", "9.0", "580.65.06", "13.0")
L4 = te.GpuFacts("NVIDIA L4", "8.9", "580.65.06", "13.0")

TINY_CONFIG = """
name: "tiny_core"
platform: "tensorrt_plan"
max_batch_size: 4
input [ { name: "images" data_type: TYPE_FP32 dims: [ 3, 8, 8 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 10 ] } ]
"""


def core_config(text: str = TINY_CONFIG) -> model_config.ModelConfig:
    return model_config.parse_config_text(text)


# A minimal valid recipe: build-engine reads only the core's config, but layout finds pipelines by their recipe.
TINY_RECIPE = """
task = "classification"
[source]
kind = "onnx"
path = "tiny_core/1/model_int8_qdq.onnx"
"""


def tiny_pipeline(root: Path) -> layout.Pipeline:
    """``root/tiny``: a pipeline whose core is TINY_CONFIG (a model repository holding one pipeline)."""
    pipeline = layout.Pipeline.at(root / "tiny")
    pipeline.core_version_dir.mkdir(parents=True)
    pipeline.recipe.write_text(TINY_RECIPE)
    (pipeline.core_dir / "config.pbtxt").write_text(TINY_CONFIG)
    return pipeline


def provenance(trt: str = "10.13.3.9", cc: str = "9.0") -> dict:
    return {"tensorrt": {"version": trt}, "gpu": {"name": "NVIDIA H100 80GB HBM3", "compute_capability": cc}}


# --------------------------------------------------------------------------- pure logic


def test_profile_from_the_real_core_config():
    core = te.load_core_config(CLASSIFIER.repository)
    assert core.name == CLASSIFIER.model_name("core")
    (profile,) = te.optimization_profile(core)
    dims = tuple(core.input[0].dims)
    assert profile.name == core.input[0].name
    assert profile.min == (1, *dims) and profile.max == (core.max_batch_size, *dims) and profile.opt == profile.max
    (profile,) = te.optimization_profile(core, opt_batch=8)
    assert profile.opt == (8, *dims)


@pytest.mark.parametrize("opt", [0, 5, 100])
def test_profile_rejects_an_opt_batch_outside_the_range(opt):
    with pytest.raises(model_config.ConfigError, match="outside 1..4"):
        te.optimization_profile(core_config(), opt_batch=opt)


def test_profile_without_batching_and_with_variable_dims():
    (profile,) = te.optimization_profile(core_config(TINY_CONFIG.replace("max_batch_size: 4", "max_batch_size: 0")))
    assert profile.min == profile.opt == profile.max == (3, 8, 8)
    with pytest.raises(model_config.ConfigError, match="variable dims"):
        te.optimization_profile(core_config(TINY_CONFIG.replace("dims: [ 3, 8, 8 ]", "dims: [ 3, -1, -1 ]")))


def test_the_cpu_variant_is_not_taken_for_the_plan(tmp_path):
    pipeline = tiny_pipeline(tmp_path)
    assert te.load_core_config(pipeline.repository).name == "tiny_core"
    config = pipeline.core_dir / "config.pbtxt"
    config.write_text(TINY_CONFIG.replace('platform: "tensorrt_plan"', 'backend: "python"'))
    with pytest.raises(model_config.ConfigError, match="tiny_core/config.pbtxt: platform is 'python', expected 'tensorrt_plan'"):
        te.load_core_config(pipeline.repository)


def test_default_paths_are_the_pipelines(tmp_path):
    assert te.default_plan(CLASSIFIER.repository) == CLASSIFIER.plan == CLASSIFIER.core_version_dir / te.PLAN_FILENAME
    pipeline = tiny_pipeline(tmp_path)
    # Before the precision ladder ran: the INT8 Q/DQ model.
    assert te.default_onnx(pipeline.repository) == pipeline.onnx("int8") == pipeline.core_version_dir / te.QDQ_ONNX_FILENAME


def test_default_onnx_is_the_precision_the_ladder_chose(tmp_path):
    pipeline = tiny_pipeline(tmp_path)
    fp16 = pipeline.onnx("fp16")
    fp16.write_bytes(b"fp16 model")
    record = {"precision": "fp16", "onnx": fp16.name, "onnx_sha256": te.sha256_bytes(b"fp16 model")}
    pipeline.served_precision.write_text(json.dumps(record))
    assert te.default_onnx(pipeline.repository) == fp16
    fp16.write_bytes(b"changed since the ladder measured it")
    assert te.default_onnx(pipeline.repository) == pipeline.onnx("int8")


def test_release_cache_key_and_versions():
    assert te.release("10.13.3.9") == "10.13.3" and te.release("11.4.1") == "11.4.1"
    assert te.cache_key("11.4.1.2", "12.0") == "trt11.4.1-sm120"
    assert te.major_minor("10.8.0.43") == (10, 8)
    with pytest.raises(BuildError):
        te.release("10.x")


def fake_trt(version: str, strongly_typed: bool = True) -> types.SimpleNamespace:
    members = {"STRONGLY_TYPED": 1} if strongly_typed else {}
    if version.startswith("10."):
        members["EXPLICIT_BATCH"] = 0
    return types.SimpleNamespace(__version__=version, NetworkDefinitionCreationFlag=types.SimpleNamespace(**members))


def test_network_flags_for_tensorrt_10_and_11():
    assert te.network_creation_flags(fake_trt("10.13.3.9")) == (1 << 1, ["STRONGLY_TYPED"])
    # 11: always strongly typed; STRONGLY_TYPED is deprecated and ignored, EXPLICIT_BATCH is gone.
    assert te.network_creation_flags(fake_trt("11.4.1.2")) == (0, [])
    assert te.network_creation_flags(fake_trt("12.0.0.1", strongly_typed=False)) == (0, [])
    with pytest.raises(BuildError, match="too old"):
        te.network_creation_flags(fake_trt("10.7.0.23"))
    with pytest.raises(BuildError, match="no NetworkDefinitionCreationFlag.STRONGLY_TYPED"):
        te.network_creation_flags(fake_trt("10.9.0.1", strongly_typed=False))


def test_parser_errors_are_listed_one_per_line():
    class Error:
        def __init__(self, node, name, op, desc):
            self._node, self._name, self._op, self._desc = node, name, op, desc

        def code(self):
            return "UNSUPPORTED_NODE"

        def desc(self):
            return self._desc

        def node(self):
            return self._node

        def node_name(self):
            return self._name

        def node_operator(self):
            return self._op

    errors = [Error(3, "/head/NMS", "EfficientNMS_TRT", "plugin not found"), Error(-1, "", "", "invalid graph")]
    parser = types.SimpleNamespace(num_errors=2, get_error=lambda i: errors[i])
    assert te.parser_errors(parser) == [
        "[UNSUPPORTED_NODE] node /head/NMS op EfficientNMS_TRT: plugin not found",
        "[UNSUPPORTED_NODE] invalid graph",
    ]


def test_parse_nvidia_smi():
    gpus = te.parse_nvidia_smi("NVIDIA H100 80GB HBM3, 9.0, 580.65.06\nNVIDIA H100 80GB HBM3, 9.0, 580.65.06\n")
    assert [g.compute_capability for g in gpus] == ["9.0", "9.0"] and gpus[0].driver_version == "580.65.06"
    assert te.single_compute_capability(gpus) == "9.0"
    with pytest.raises(BuildError, match="different compute capabilities"):
        te.single_compute_capability([H100, L4])
    with pytest.raises(BuildError, match="unexpected nvidia-smi output"):
        te.parse_nvidia_smi("No devices were found")


def test_tensorrt_version_from_library_file_names(tmp_path):
    for name in ("libnvinfer.so", "libnvinfer.so.10", "libnvinfer.so.10.13.3", "libnvinfer_plugin.so.10.13.3"):
        (tmp_path / name).touch()
    assert te.tensorrt_version_from_libraries([tmp_path]) == "10.13.3"
    assert te.tensorrt_version_from_libraries([tmp_path / "missing"]) is None


def test_provenance_that_matches():
    assert te.compare_provenance(provenance(), "10.13.3.1", [H100, H100]) == []  # only the build number differs


def test_provenance_with_another_tensorrt_release():
    (problem,) = te.compare_provenance(provenance(), "10.14.1.48", [H100])
    assert "TensorRT 10.13.3" in problem and "10.14.1" in problem and "major.minor.patch must match" in problem


def test_provenance_for_another_gpu_architecture():
    problems = te.compare_provenance(provenance(cc="8.9"), "10.13.3.9", [H100, L4])
    assert problems == ["plan built for compute capability 8.9 (NVIDIA H100 80GB HBM3), GPU 0 is 9.0 (NVIDIA H100 80GB HBM3)"]
    assert te.compare_provenance(provenance(), "10.13.3.9", []) == ["no NVIDIA GPU visible"]
    assert te.compare_provenance({}, "10.13.3.9", [H100]) == ["the provenance has no TensorRT version or compute capability"]


def test_engine_io_comparison():
    expected = te.expected_engine_io(core_config())
    assert expected == {"images": ("INPUT", "FP32", (-1, 3, 8, 8)), "logits": ("OUTPUT", "FP32", (-1, 10))}
    actual = dict(expected, logits=("OUTPUT", "FP16", (-1, 10)), extra=("OUTPUT", "FP32", (-1,)))
    assert te.compare_engine_io(expected, actual) == [
        "the plan's output 'extra' is not in the core config",
        "'logits': config says ('OUTPUT', 'FP32', (-1, 10)), plan has ('OUTPUT', 'FP16', (-1, 10))",
    ]


def test_calibration_hash_is_read_from_the_onnx_provenance(tmp_path):
    onnx_path = tmp_path / "model_int8_qdq.onnx"
    onnx_path.write_bytes(b"")
    assert te.onnx_provenance(onnx_path) == {"file": None, "calibration_hash": None}
    digest = "ab" * 32
    record = {"input_hash": "cd" * 32, "inputs": {"calibration_recipe": "ef" * 32}, "calibration": {"file": "c.npy", "sha256": digest}}
    (tmp_path / "model_int8_qdq.onnx.json").write_text(json.dumps(record))
    assert te.onnx_provenance(onnx_path) == {"file": "model_int8_qdq.onnx.json", "input_hash": "cd" * 32, "calibration_hash": digest}


def write_plan(directory: Path, record: dict, payload: bytes = b"plan") -> Path:
    plan = directory / "model.plan"
    plan.write_bytes(payload)
    record = dict(record, plan={"sha256": te.sha256_bytes(payload)})
    (directory / "model.plan.json").write_text(json.dumps(record))
    return plan


def test_verify_plan_outcomes(tmp_path):
    plan = write_plan(tmp_path, provenance())
    assert te.verify_plan(plan, CLASSIFIER.repository, tensorrt_version="10.13.3", gpus=[H100], log=lambda _: None)
    with pytest.raises(te.VerificationError) as mismatch:
        te.verify_plan(plan, CLASSIFIER.repository, tensorrt_version="11.4.1", gpus=[L4])
    assert mismatch.value.exit_code == 1 and "\n" not in str(mismatch.value)
    assert "TensorRT 10.13.3" in str(mismatch.value) and "compute capability 9.0" in str(mismatch.value)
    plan.write_bytes(b"another plan")
    with pytest.raises(te.VerificationError, match="sha256 differs"):
        te.verify_plan(plan, CLASSIFIER.repository, tensorrt_version="10.13.3", gpus=[H100])
    (tmp_path / "model.plan.json").unlink()
    with pytest.raises(te.VerificationError, match="missing or unreadable provenance"):
        te.verify_plan(plan, CLASSIFIER.repository, tensorrt_version="10.13.3", gpus=[H100])


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    code = cli.main(argv)
    return code, capsys.readouterr().err


def test_cli_says_tensorrt_is_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # makes `import tensorrt` raise ImportError
    onnx_path = tmp_path / "model_int8_qdq.onnx"
    onnx_path.write_bytes(b"not used")
    code, err = run_cli(["build-engine", *PIPELINE_ARGS, "--onnx", str(onnx_path), "--output", str(tmp_path / "model.plan")], capsys)
    assert code == 2
    assert err.strip() == "error: TensorRT is not installed (use the builder image docker/builder.Dockerfile)"
    plan = write_plan(tmp_path, provenance())
    monkeypatch.setattr(te, "LIBRARY_DIRS", ())
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    code, err = run_cli(["verify-plan", *PIPELINE_ARGS, "--plan", str(plan)], capsys)
    assert code == 2 and "TensorRT is not installed" in err


def test_cli_verify_plan_mismatch_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys):
    plan = write_plan(tmp_path, provenance())
    monkeypatch.setattr(te, "query_gpus", lambda: [L4])
    code, err = run_cli(["verify-plan", *PIPELINE_ARGS, "--plan", str(plan), "--tensorrt-version", "10.13.3"], capsys)
    assert code == 1 and err.count("\n") == 1 and err.startswith("error: ") and "compute capability 9.0" in err
    monkeypatch.setattr(te, "query_gpus", lambda: [H100])
    code, err = run_cli(["verify-plan", *PIPELINE_ARGS, "--plan", str(plan), "--tensorrt-version", "10.13.3"], capsys)
    assert code == 0 and "OK for TensorRT 10.13.3" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["build-engine", "--opt-batch", "0"], "must be a positive integer"),
        (["build-engine", "--workspace-mib", "-1"], "must be a positive integer"),
        (["build-engine", "--opt-batch", "x"], "invalid"),
    ],
)
def test_cli_argument_validation(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_cli_opt_batch_above_max_batch_size_is_a_user_error(tmp_path, capsys):
    onnx_path = tmp_path / "model_int8_qdq.onnx"
    onnx_path.write_bytes(b"not used")
    code, err = run_cli(["build-engine", *PIPELINE_ARGS, "--onnx", str(onnx_path), "--opt-batch", "1000"], capsys)
    assert code == 2 and "outside 1..32" in err


def test_module_entry_point_runs_with_only_the_serving_requirements(tmp_path):
    """The server image's init container: `python3 -m builders.tensorrt_engine verify-plan` without onnx/torch/cv2."""
    blocked = "import sys, runpy; [sys.modules.__setitem__(m, None) for m in ('onnx', 'onnx_graphsurgeon', 'torch', 'cv2', 'tensorrt')]; "
    run = "sys.argv = ['x', 'verify-plan', '--pipeline', 'image_classifier', '--plan', sys.argv[1]]; runpy.run_module('builders.tensorrt_engine', run_name='__main__')"
    completed = subprocess.run(
        [sys.executable, "-c", blocked + run, str(tmp_path / "model.plan")], capture_output=True, text=True, cwd=REPOSITORY_ROOT, check=False
    )
    assert completed.returncode == 2 and completed.stderr.strip().endswith("no such plan (run python -m builders build-engine)"), completed.stderr


def test_cli_needs_the_pipeline_when_the_repository_has_several(tmp_path, capsys):
    assert len(layout.pipelines()) > 1
    code, err = run_cli(["verify-plan", "--plan", str(tmp_path / "model.plan")], capsys)
    assert code == 2 and err.startswith("error: choose a pipeline with --pipeline NAME") and err.count("\n") == 1
    # A model repository holding one pipeline needs no --pipeline.
    pipeline = tiny_pipeline(tmp_path / "model_repository")
    code, err = run_cli(["verify-plan", "--model-repository", str(pipeline.repository.parent)], capsys)
    assert code == 2 and err.strip() == f"error: {pipeline.plan}: no such plan (run python -m builders build-engine)"


def test_cli_missing_onnx(tmp_path, capsys):
    code, err = run_cli(["build-engine", *PIPELINE_ARGS, "--onnx", str(tmp_path / "missing.onnx")], capsys)
    assert code == 2 and "no such ONNX file" in err


# --------------------------------------------------------------------------- real builds (GPU + TensorRT)


def _gpu_available() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(te.NVIDIA_SMI_QUERY, capture_output=True, check=False).returncode == 0


def _cudart():
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        try:
            from cuda import cudart
        except ImportError:
            pytest.skip("cuda-python is not installed (pip install cuda-python)")
    return cudart


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
    """One batch through the deserialized plan (cuda-python for device memory)."""
    cudart = _cudart()
    engine = trt.Runtime(trt.Logger(trt.Logger.ERROR)).deserialize_cuda_engine(plan.read_bytes())
    context = engine.create_execution_context()
    for name, array in inputs.items():
        context.set_input_shape(name, array.shape)
    outputs, pointers = {}, []
    try:
        for index in range(engine.num_io_tensors):
            name = engine.get_tensor_name(index)
            host = inputs.get(name)
            if host is None:
                host = np.empty(tuple(context.get_tensor_shape(name)), dtype=trt.nptype(engine.get_tensor_dtype(name)))
                outputs[name] = host
            host = np.ascontiguousarray(host)
            error, pointer = cudart.cudaMalloc(host.nbytes)
            assert int(error) == 0, error
            pointers.append(pointer)
            if name in inputs:
                cudart.cudaMemcpy(pointer, host.ctypes.data, host.nbytes, cudart.cudaMemcpyKind.cudaMemcpyHostToDevice)
            context.set_tensor_address(name, pointer)
        assert context.execute_async_v3(0)
        cudart.cudaDeviceSynchronize()
        for index in range(engine.num_io_tensors):
            name = engine.get_tensor_name(index)
            if name in outputs:
                cudart.cudaMemcpy(outputs[name].ctypes.data, pointers[index], outputs[name].nbytes, cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost)
    finally:
        for pointer in pointers:
            cudart.cudaFree(pointer)
    return outputs


def onnxruntime_emulation(onnx_path: Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The Q/DQ model on onnxruntime without fusion: Q -> DQ -> float ops, close to TensorRT's INT8 math (docs/design.md §3)."""
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
    record = json.loads(te.provenance_path(plan).read_text())
    assert record["tensorrt"]["version"] == trt.__version__ and record["onnx"]["qdq_nodes"] == 3
    assert record["profile"]["images"] == {"min": [1, 3, 8, 8], "opt": [2, 3, 8, 8], "max": [4, 3, 8, 8]}
    assert record["builder"]["strongly_typed"] and not {"INT8", "FP16"} & set(record["builder"]["builder_flags"])
    assert (tmp_path / "cache" / record["cache_key"] / "timing.cache").stat().st_size > 0

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
    onnx_path = te.default_onnx(CLASSIFIER.repository)
    if not onnx_path.is_file():
        pytest.skip(f"{onnx_path} not built (python -m builders quantize --pipeline {CLASSIFIER.name})")
    plan = tmp_path / te.PLAN_FILENAME
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
    batch = preprocessing.preprocess_batch(
        [decode_rgb(photos.photo_bytes(n), limits) for n in names], preprocessing.PreprocessSpec.from_config(preprocess)
    ).astype(np.float32)
    core = te.load_core_config(CLASSIFIER.repository)
    input_name, output_name = core.input[0].name, core.output[0].name
    got = run_plan(trt, plan, {input_name: batch})[output_name]
    want = onnxruntime_emulation(onnx_path, {input_name: batch})[output_name]
    cosine = np.sum(got * want, axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    assert cosine.min() > 0.98, cosine
    assert np.mean(got.argmax(1) == want.argmax(1)) >= 5 / 6


def test_module_type_checks_strictly():
    """TensorRT has no stubs: its objects are `Any`; everything else in the module is typed."""
    pytest.importorskip("mypy", reason="mypy is not installed")
    completed = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--ignore-missing-imports", "--follow-imports=silent",
         "--cache-dir", str(REPOSITORY_ROOT / ".build" / "mypy"), "builders/tensorrt_engine.py"],
        capture_output=True, text=True, cwd=REPOSITORY_ROOT, timeout=300, check=False,
    )
    assert completed.returncode == 0, completed.stdout
