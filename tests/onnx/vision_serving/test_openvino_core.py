"""The OpenVINO CPU core: same interface and load-time checks as the onnxruntime core; the config's
runtime and precision pick the model (precision "served" through served_precision.json)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.support.pipelines import built_classifier
from vision_serving import core_model, cpu_core, cpu_runtimes, layout, model_config
from vision_serving.onnx_core import OnnxCore
from vision_serving.openvino_core import OpenVinoCore
from vision_serving.openvino_settings import compile_properties

CLASSIFIER = layout.pipeline("image_classifier")


@pytest.fixture(scope="module")
def openvino_config() -> model_config.ModelConfig:
    return model_config.load_config(CLASSIFIER.core_dir, "cpu_openvino_fp32")


def test_every_pipeline_has_an_openvino_core_and_defaults_to_onnxruntime_fp32():
    for pipeline in layout.pipelines():
        default = model_config.load_config(pipeline.core_dir, "cpu")
        # Measured: onnxruntime FP32 is as fast as or faster than OpenVINO here, and exact (docs/design.md, "The CPU core is onnxruntime FP32").
        assert cpu_runtimes.of_config(default).name == "onnxruntime"
        assert core_model.onnx_filename(default, pipeline.core_version_dir) == layout.FP32_ONNX
        config = model_config.load_config(pipeline.core_dir, "cpu_openvino")
        assert cpu_runtimes.of_config(config).name == "openvino"
        # The classifier's INT8 fails the gate on OpenVINO (served ensemble): FP32 there.
        expected = "fp32" if pipeline.name == "image_classifier" else core_model.SERVED
        assert model_config.parameter(config, "precision") == expected
        assert model_config.parameter(model_config.load_config(pipeline.core_dir, "cpu_openvino_fp32"), "precision") == "fp32"
        assert cpu_runtimes.of_config(model_config.load_config(pipeline.core_dir, "cpu_onnxruntime")).name == "onnxruntime"
        assert model_config.load_config(pipeline.core_dir, "cpu_openvino_backend").backend == "openvino"


def test_openvino_matches_onnxruntime_fp32(openvino_config):
    pipeline = built_classifier()
    openvino = cpu_core.load(openvino_config, pipeline.core_version_dir)
    assert isinstance(openvino, OpenVinoCore) and openvino.onnx_path.name == layout.FP32_ONNX
    onnxruntime = OnnxCore(model_config.load_config(CLASSIFIER.core_dir, "cpu_onnxruntime"), pipeline.core_version_dir)
    (image,) = openvino_config.input
    batch = np.random.default_rng(0).integers(0, 256, (3, *image.dims)).astype(model_config.numpy_dtype(image.data_type))
    (got,), (expected,) = openvino.run({image.name: batch}), onnxruntime.run({image.name: batch})
    assert got.shape == (3, *openvino_config.output[0].dims)
    assert np.abs(got - expected).max() < 1e-2 * np.abs(expected).max()
    assert np.array_equal(got.argmax(axis=1), expected.argmax(axis=1))
    # f32 on every CPU: the plugin's own default is bf16 where the CPU has it (AVX-512 BF16, AMX).
    assert openvino.compiled.get_property("INFERENCE_PRECISION_HINT").to_string() == "f32"


def pooled_model(path, input_name: str, output_name: str) -> None:
    """uint8 images [N, 3, 224, 224] (as the classifier's core takes them) -> [N, 3]: the right names, the wrong number of classes."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("Cast", [input_name], ["pixels"], to=TensorProto.FLOAT),
            helper.make_node("GlobalAveragePool", ["pixels"], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], [output_name]),
        ],
        "wrong_classes",
        [helper.make_tensor_value_info(input_name, TensorProto.UINT8, ["batch", 3, 224, 224])],
        [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, ["batch", 3])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_wrong_output_shape_fails_at_load(tmp_path, openvino_config):
    pooled_model(tmp_path / layout.FP32_ONNX, openvino_config.input[0].name, openvino_config.output[0].name)
    with pytest.raises(model_config.ConfigError, match=r"has shape \[3\] per image; the config declares \[1000\]"):
        OpenVinoCore(openvino_config, tmp_path)


def test_wrong_io_names_fail_at_load(tmp_path, openvino_config):
    pooled_model(tmp_path / layout.FP32_ONNX, "pixels", openvino_config.output[0].name)
    with pytest.raises(model_config.ConfigError, match=r"ONNX I/O \['pixels'\]"):
        OpenVinoCore(openvino_config, tmp_path)


def test_served_precision_resolves_through_the_ladders_record(tmp_path, openvino_config):
    config = model_config.ModelConfig()
    config.CopyFrom(openvino_config)
    config.parameters["precision"].string_value = "served"
    pooled_model(tmp_path / layout.FP32_ONNX, "images", "logits")
    assert core_model.onnx_filename(config, tmp_path) == layout.FP32_ONNX  # the ladder has not run: FP32
    shutil.copy(tmp_path / layout.FP32_ONNX, tmp_path / layout.INT8_ONNX)
    record = {"precision": "int8", "onnx": layout.INT8_ONNX, "onnx_sha256": layout.file_sha256(tmp_path / layout.INT8_ONNX)}
    (tmp_path / layout.SERVED_PRECISION).write_text(json.dumps(record))
    assert core_model.onnx_filename(config, tmp_path) == layout.INT8_ONNX
    (tmp_path / layout.INT8_ONNX).write_bytes(b"rebuilt after the gate")
    with pytest.raises(model_config.ConfigError, match="not the file the precision ladder measured"):
        core_model.onnx_filename(config, tmp_path)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("performance_hint", "FASTEST", "performance_hint"),
        ("num_streams", "-1", "num_streams"),
        ("cpu_pinning", "maybe", "cpu_pinning"),
        ("inference_precision", "fp8", "inference_precision"),
        ("runtime", "tvm", "runtime"),
        ("precision", "int4", "precision"),
    ],
)
def test_bad_parameters_are_refused(openvino_config, key, value, message):
    config = model_config.ModelConfig()
    config.CopyFrom(openvino_config)
    config.parameters[key].string_value = value
    with pytest.raises(model_config.ConfigError, match=message):
        cpu_runtimes.of_config(config)
        core_model.model_parameter(config)
        compile_properties(config)


def test_run_from_several_threads_answers_each_its_own_input(tmp_path, openvino_config):
    """One infer request per calling thread: concurrent callers (a threaded service) never get another's outputs."""
    from concurrent.futures import ThreadPoolExecutor

    config = model_config.ModelConfig()
    config.CopyFrom(openvino_config)
    config.parameters["precision"].string_value = "fp32"
    config.output[0].dims[:] = [3]
    pooled_model(tmp_path / layout.FP32_ONNX, config.input[0].name, config.output[0].name)
    core = OpenVinoCore(config, tmp_path)

    def check(worker: int) -> bool:
        ok = True
        for step in range(40):
            value = float(worker * 50 + step)  # a uint8 pixel value
            (pooled,) = core.run({config.input[0].name: np.full((2, 3, 224, 224), value, np.uint8)})
            ok &= bool(np.allclose(pooled, value))
        return ok

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert all(pool.map(check, range(4)))


def test_openvino_compiles_under_the_servers_preloaded_jemalloc():
    """The local server and the image's entrypoint preload jemalloc; OpenVINO's compile_model then aborted
    ("free(): invalid pointer": oneTBB opens hwloc with RTLD_DEEPBIND) until the server's environment set
    TBB_ENABLE_SANITIZERS. The core loads and runs in a process with exactly that environment."""
    import subprocess
    import sys

    from devtools import triton_server

    env = triton_server.server_environment()
    if triton_server.jemalloc_library(env) is None:
        pytest.fail("no libjemalloc.so.2: run ./scripts/system-packages.sh as root (Debian's libjemalloc2)")
    pipeline = built_classifier()
    script = (
        "from pathlib import Path\n"
        "import numpy as np\n"
        "from vision_serving import cpu_core, model_config\n"
        f"config = model_config.load_config({str(CLASSIFIER.core_dir)!r}, 'cpu_openvino_fp32')\n"
        f"core = cpu_core.load(config, Path({str(pipeline.core_version_dir)!r}))\n"
        "(image,) = config.input\n"
        "(out,) = core.run({image.name: np.zeros((2, *image.dims), model_config.numpy_dtype(image.data_type))})\n"
        "print('ran', out.shape)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300, cwd=layout.REPOSITORY_ROOT)
    assert done.returncode == 0 and "ran (2, " in done.stdout, done.stderr[-2000:]
    # The same process without the companion setting: the crash this guards against (where this oneTBB still has it).
    bare = {key: value for key, value in env.items() if key not in triton_server.PRELOAD_COMPANIONS}
    crashed = subprocess.run(
        [sys.executable, "-c", script], env=bare, capture_output=True, text=True, timeout=300, cwd=layout.REPOSITORY_ROOT
    )
    print(f"without {', '.join(triton_server.PRELOAD_COMPANIONS)}: exit {crashed.returncode} {crashed.stderr.strip()[-80:]!r}")
