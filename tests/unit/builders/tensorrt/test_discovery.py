"""GPUs and TensorRT releases found without TensorRT's bindings (builders/tensorrt/discovery.py)."""

from __future__ import annotations

import pytest

from builders import BuildError
from builders.tensorrt import discovery

H100 = discovery.GpuFacts("NVIDIA H100 80GB HBM3", "9.0", "580.65.06", "13.0")
L4 = discovery.GpuFacts("NVIDIA L4", "8.9", "580.65.06", "13.0")


def test_parse_nvidia_smi():
    gpus = discovery.parse_nvidia_smi("NVIDIA H100 80GB HBM3, 9.0, 580.65.06\nNVIDIA H100 80GB HBM3, 9.0, 580.65.06\n")
    assert [g.compute_capability for g in gpus] == ["9.0", "9.0"] and gpus[0].driver_version == "580.65.06"
    assert discovery.single_compute_capability(gpus) == "9.0" and gpus[0].sm == "sm90"
    with pytest.raises(BuildError, match="different compute capabilities"):
        discovery.single_compute_capability([H100, L4])
    with pytest.raises(BuildError, match="no NVIDIA GPU visible"):
        discovery.single_compute_capability([])
    with pytest.raises(BuildError, match="unexpected nvidia-smi output"):
        discovery.parse_nvidia_smi("No devices were found")


def test_release_and_versions():
    assert discovery.release("10.13.3.9") == "10.13.3" and discovery.release("11.4.1") == "11.4.1"
    assert discovery.major_minor("10.8.0.43") == (10, 8)
    assert discovery.gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3" and discovery.gpu_slug("!!") == "unknown-gpu"
    with pytest.raises(BuildError):
        discovery.release("10.x")


def test_tensorrt_version_from_library_file_names(tmp_path):
    """As TensorRT ships it: libnvinfer.so -> libnvinfer.so.11 -> libnvinfer.so.11.1.0, the symlinks sorting first."""
    (tmp_path / "libnvinfer.so.11.1.0").touch()
    (tmp_path / "libnvinfer.so.11").symlink_to("libnvinfer.so.11.1.0")
    (tmp_path / "libnvinfer.so").symlink_to("libnvinfer.so.11")
    (tmp_path / "libnvinfer_plugin.so.11.2.0").touch()
    assert sorted(p.name for p in tmp_path.glob("libnvinfer.so.*"))[0] == "libnvinfer.so.11"
    assert discovery.tensorrt_version_from_libraries([tmp_path]) == "11.1.0"
    assert discovery.tensorrt_version_from_libraries([tmp_path / "missing"]) is None
    names = ["/usr/lib/x86_64-linux-gnu/libnvinfer.so.10", "/usr/lib/x86_64-linux-gnu/libnvinfer.so.10.13.3.9"]
    assert discovery.tensorrt_version_from_names(names) == "10.13.3"
    assert discovery.tensorrt_version_from_names(["libnvinfer.so.10", "libnvinfer.so"]) is None


def test_the_current_version_comes_from_an_override_the_bindings_or_the_library(tmp_path, monkeypatch):
    import sys
    import types

    assert discovery.current_tensorrt_version("10.13.3") == ("10.13.3", "--tensorrt-version")
    monkeypatch.setitem(sys.modules, "tensorrt", types.SimpleNamespace(__version__="11.1.0.4"))
    assert discovery.current_tensorrt_version() == ("11.1.0.4", "tensorrt")
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    (tmp_path / "libnvinfer.so.10.16.0").touch()
    monkeypatch.setattr(discovery, "LIBRARY_DIRS", (str(tmp_path),))
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    assert discovery.current_tensorrt_version() == ("10.16.0", "libnvinfer")
    monkeypatch.setattr(discovery, "LIBRARY_DIRS", ())
    with pytest.raises(BuildError, match=r"no libnvinfer\.so\.X\.Y\.Z found either"):
        discovery.current_tensorrt_version()


def test_the_builder_and_server_images_need_the_same_tensorrt_release():
    assert discovery.release_mismatch("10.13.3.9", "10.13.3") is None  # the build number may differ
    problem = discovery.release_mismatch("11.1.0.4", "11.0.2")  # a tritonserver tag on the previous month's base
    assert problem is not None and problem.startswith("the builder image has TensorRT 11.1.0, the server image 11.0.2")


def test_gpus_come_from_nvidia_smi_else_cuda_python_else_one_line(monkeypatch):
    import subprocess
    import sys
    import types

    answers = {
        tuple(discovery.NVIDIA_SMI_QUERY): subprocess.CompletedProcess([], 0, "NVIDIA H200, 9.0, 580.65.06\n", ""),
        ("nvidia-smi",): subprocess.CompletedProcess([], 0, "| NVIDIA-SMI 580.65.06  Driver Version: 580.65.06  CUDA Version: 13.0 |", ""),
    }
    monkeypatch.setattr(subprocess, "run", lambda command, **_: answers[tuple(command)])
    assert discovery.query_gpus() == [discovery.GpuFacts("NVIDIA H200", "9.0", "580.65.06", "13.0")]

    answers[tuple(discovery.NVIDIA_SMI_QUERY)] = subprocess.CompletedProcess([], 9, "", "NVIDIA-SMI has failed")
    monkeypatch.setitem(sys.modules, "cuda", None)
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    with pytest.raises(
        BuildError, match=r"^no NVIDIA GPU visible \(nvidia-smi exited 9: NVIDIA-SMI has failed; cuda-python is not installed\)$"
    ):
        discovery.query_gpus()

    properties = types.SimpleNamespace(name=b"NVIDIA L4\x00", major=8, minor=9)
    runtime = types.SimpleNamespace(
        cudaGetDeviceCount=lambda: (0, 1), cudaDriverGetVersion=lambda: (0, 13000), cudaGetDeviceProperties=lambda index: (0, properties)
    )
    monkeypatch.setitem(sys.modules, "cuda.bindings", types.SimpleNamespace(runtime=runtime))
    monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", runtime)
    assert discovery.query_gpus() == [discovery.GpuFacts("NVIDIA L4", "8.9", None, "13.0")]
