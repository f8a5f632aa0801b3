"""vision_serving.cuda_driver: the node's driver against the image's CUDA, in one line (libcuda stood in for)."""

from __future__ import annotations

import ctypes

import pytest

from vision_serving import cuda_driver

CUDA_13 = {"CUDA_VERSION": "13.0.2"}


class Driver:
    """libcuda as ctypes exposes it: cuInit's status, cuDriverGetVersion's 1000 x major + 10 x minor."""

    def __init__(self, status: int = 0, version: int = 13000) -> None:
        self.status, self.version = status, version

    def cuInit(self, flags: int) -> int:
        return self.status

    def cuDriverGetVersion(self, pointer) -> int:
        ctypes.cast(pointer, ctypes.POINTER(ctypes.c_int)).contents.value = self.version
        return 0


def judge(driver, environ=CUDA_13, path="/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06", require=False):
    return cuda_driver.judge(driver, environ, "580.65.06", path, require)


def test_a_driver_of_the_image_s_cuda_major_runs_it():
    verdict = judge(Driver(version=13000))
    assert verdict.level == "ok" and verdict.line == "driver 580.65.06 supports CUDA 13.0; the image needs CUDA 13.0: it runs"
    assert judge(Driver(version=13000), {"CUDA_VERSION": "13.2.1"}).runs  # minor version compatibility
    assert judge(Driver(version=14010)).runs


def test_an_older_driver_runs_it_through_forward_compatibility_or_says_it_cannot():
    compat = judge(Driver(version=13000), path="/usr/local/cuda/compat/lib/libcuda.so.1")
    assert compat.runs and "the image's forward-compatibility driver library (/usr/local/cuda/compat/lib/libcuda.so.1)" in compat.line
    old = judge(Driver(version=12080))
    assert old.level == "error" and old.line.startswith("the image needs CUDA 13.0; driver 580.65.06 supports CUDA 12.8")
    assert "forward compatibility did not apply" in old.line and old.line.endswith("upgrade the node's driver")


def test_the_compat_library_is_named_by_its_resolved_path(tmp_path):
    """/proc/self/maps names the file every symlink resolved: /usr/local/cuda -> cuda-13.0, compat/lib -> lib.real in
    NVIDIA's images. The compat directory is compared resolved too, so the forward-compatibility driver is named."""
    real = tmp_path / "cuda-13.0" / "compat" / "lib.real"
    real.mkdir(parents=True)
    (real / "libcuda.so.580.95.05").touch()
    (tmp_path / "cuda").symlink_to(tmp_path / "cuda-13.0")
    (tmp_path / "cuda-13.0" / "compat" / "lib").symlink_to(real)
    mapped = str(real / "libcuda.so.580.95.05")
    assert cuda_driver.from_compat_dir(mapped, str(tmp_path / "cuda" / "compat"))
    assert not cuda_driver.from_compat_dir("/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06", str(tmp_path / "cuda" / "compat"))
    assert not cuda_driver.from_compat_dir(None)
    verdict = cuda_driver.judge(Driver(version=13000), CUDA_13, "580.65.06", mapped, False, str(tmp_path / "cuda" / "compat"))
    assert verdict.runs and verdict.line.startswith(f"the image's forward-compatibility driver library ({mapped}) on kernel driver")


@pytest.mark.parametrize(("status", "words"), [(803, "reboot the node"), (804, "data-center GPUs only"), (999, "CUDA error 999")])
def test_cuinit_s_compatibility_errors_are_one_line_each(status, words):
    verdict = judge(Driver(status=status))
    assert verdict.level == "error" and words in verdict.line and "\n" not in verdict.line


def test_no_driver_or_no_gpu_is_a_warning_unless_required():
    assert judge(None).level == "warning" and judge(None, require=True).level == "error"
    assert judge(Driver(status=100)).level == "warning" and judge(Driver(status=100), require=True).level == "error"


def test_the_kernel_module_and_the_loaded_library_are_read_from_proc(tmp_path):
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (dvs-builder@U16-I3-B05-2-1)\n")
    assert cuda_driver.kernel_driver(version) == "580.65.06" and cuda_driver.kernel_driver(tmp_path / "none") == "?"
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  Thu Feb 20 21:42:48 UTC 2025\n")
    assert cuda_driver.kernel_driver(version) == "570.124.06"
    maps = tmp_path / "maps"
    maps.write_text(
        "7f0000000000-7f0000001000 r--p 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libcudart.so.13.0.96\n"
        "7f0000002000-7f0000003000 r--p 00000000 08:01 2 /usr/local/cuda/compat/lib/libcuda.so.580.95.05\n"
    )
    assert cuda_driver.loaded_from("libcuda.so.1", maps) == "/usr/local/cuda/compat/lib/libcuda.so.580.95.05"
    assert cuda_driver.image_cuda({"CUDA_VERSION": "13.0.2.006"}) == (13, 0) and cuda_driver.image_cuda({}) is None


def test_the_command_prints_one_line_and_exits_1_where_it_cannot_run(monkeypatch, capsys):
    def missing(name: str):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(cuda_driver, "check", lambda require=False: cuda_driver.judge(None, CUDA_13, "?", None, require))
    assert cuda_driver.main(["--prefix", "tritonserver-pipelines"]) == 0
    assert (
        capsys.readouterr().err
        == "tritonserver-pipelines: warning: no NVIDIA driver in this container (libcuda.so.1 does not load): the TensorRT cores cannot run here\n"
    )
    assert cuda_driver.main(["--require"]) == 1
    assert capsys.readouterr().err.startswith("cuda-driver: error: no NVIDIA driver")
    monkeypatch.undo()
    assert cuda_driver.check(environ=CUDA_13, load=missing).level == "warning"
