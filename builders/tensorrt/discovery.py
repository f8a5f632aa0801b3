"""The GPUs and the TensorRT release on this machine, found without TensorRT's Python bindings.

GPUs come from ``nvidia-smi`` (the driver's tool: it works without CUDA Python), else from cuda-python. The
TensorRT release comes from the ``tensorrt`` module when it imports, else from the name of ``libnvinfer.so.X.Y.Z``
(NVIDIA's server image ships TensorRT's libraries without the Python bindings). A plan deserializes only with the
TensorRT release (major.minor.patch) that built it: :func:`release` is that part of a version.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from builders import BuildError

NOT_INSTALLED = "TensorRT is not installed (use the builder image docker/builder.Dockerfile)"
NVIDIA_SMI_QUERY = ["nvidia-smi", "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"]
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/local/tensorrt/lib", "/usr/lib64", "/usr/lib")
# What a user changes to pick the images (versions.env, read by docker compose --env-file and passed to both
# Dockerfiles as their one build arg): the images are nvcr.io/nvidia/{tensorrt,tritonserver}:${TRITON_RELEASE}-py3.
RELEASE_VARIABLE = "TRITON_RELEASE"


@dataclass(frozen=True)
class GpuFacts:
    name: str
    compute_capability: str  # "9.0"
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # the CUDA version the driver supports, e.g. "13.0"

    @property
    def sm(self) -> str:
        return "sm" + self.compute_capability.replace(".", "")


# --------------------------------------------------------------------------- GPUs


def parse_nvidia_smi(text: str) -> list[GpuFacts]:
    """Rows of ``nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader``."""
    gpus = []
    for line in text.strip().splitlines():
        if not line.strip():
            continue
        parts = [part.strip() for part in line.rsplit(",", 2)]
        if len(parts) != 3 or not re.fullmatch(r"\d+\.\d+", parts[1]):
            raise BuildError(f"unexpected nvidia-smi output line: {line.strip()!r}")
        gpus.append(GpuFacts(name=parts[0], compute_capability=parts[1], driver_version=parts[2]))
    return gpus


def _cuda_driver_version_from_smi() -> str | None:
    try:
        text = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"CUDA Version:\s*([\d.]+)", text)
    return match.group(1) if match else None


def _gpus_from_cuda_python() -> list[GpuFacts]:
    try:
        from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
    except ImportError:
        from cuda import cudart  # older cuda-python
    error, count = cudart.cudaGetDeviceCount()
    if int(error) != 0 or count == 0:
        raise BuildError(f"cuda-python sees no GPU ({error})")
    _, driver = cudart.cudaDriverGetVersion()
    cuda_driver = f"{driver // 1000}.{(driver % 1000) // 10}"
    gpus = []
    for index in range(count):
        _, props = cudart.cudaGetDeviceProperties(index)
        name = props.name.decode() if isinstance(props.name, bytes) else str(props.name)
        gpus.append(GpuFacts(name.rstrip("\x00"), f"{props.major}.{props.minor}", None, cuda_driver))
    return gpus


def query_gpus() -> list[GpuFacts]:
    """The visible GPUs: ``nvidia-smi`` (works without CUDA Python), else cuda-python."""
    try:
        completed = subprocess.run(NVIDIA_SMI_QUERY, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as error:
        smi_problem = f"nvidia-smi: {error}"
    else:
        if completed.returncode == 0:
            cuda = _cuda_driver_version_from_smi()
            return [GpuFacts(g.name, g.compute_capability, g.driver_version, cuda) for g in parse_nvidia_smi(completed.stdout)]
        smi_problem = f"nvidia-smi exited {completed.returncode}: {(completed.stderr or completed.stdout).strip()}"
    try:
        return _gpus_from_cuda_python()
    except ImportError:
        raise BuildError(f"no NVIDIA GPU visible ({smi_problem}; cuda-python is not installed)") from None


def single_compute_capability(gpus: Sequence[GpuFacts]) -> str:
    if not gpus:
        raise BuildError("no NVIDIA GPU visible")
    capabilities = sorted({gpu.compute_capability for gpu in gpus})
    if len(capabilities) > 1:
        raise BuildError(
            f"GPUs of different compute capabilities are visible ({', '.join(capabilities)}); "
            "a plan serves one architecture: set CUDA_VISIBLE_DEVICES/NVIDIA_VISIBLE_DEVICES to one kind"
        )
    return capabilities[0]


def gpu_slug(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100-80gb-hbm3``: a GPU model in a path."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown-gpu"


# --------------------------------------------------------------------------- TensorRT releases


def release(version: str) -> str:
    """``10.13.3.9`` -> ``10.13.3``: the part of a TensorRT version that a plan is bound to."""
    parts = version.split(".")
    if len(parts) < 3 or not all(part.isdigit() for part in parts[:3]):
        raise BuildError(f"unexpected TensorRT version {version!r}")
    return ".".join(parts[:3])


def major_minor(version: str) -> tuple[int, int]:
    major, minor = release(version).split(".")[:2]
    return int(major), int(minor)


def tensorrt_version_from_names(names: Iterable[str | Path]) -> str | None:
    """``X.Y.Z`` of the newest ``libnvinfer.so.X.Y.Z[.B]`` among library file names (or paths). TensorRT ships
    ``libnvinfer.so`` -> ``libnvinfer.so.X`` -> ``libnvinfer.so.X.Y.Z``: only the last one, the real file, names
    the release, so the symlinks (which sort first) are not versions here."""
    found: list[tuple[int, ...]] = []
    for name in names:
        suffix = Path(name).name.removeprefix("libnvinfer.so.")
        if re.fullmatch(r"\d+\.\d+\.\d+(\.\d+)?", suffix):
            found.append(tuple(int(part) for part in suffix.split(".")))
    if not found:
        return None
    return ".".join(str(part) for part in max(found)[:3])


def library_dirs() -> list[str]:
    """Where a TensorRT library is looked for: ``LD_LIBRARY_PATH``, then the folders NVIDIA's images install it in."""
    return [*filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)), *LIBRARY_DIRS]


def tensorrt_version_from_libraries(directories: Iterable[str | Path] | None = None) -> str | None:
    """``X.Y.Z`` from ``libnvinfer.so.X.Y.Z`` (images that ship TensorRT without its Python bindings)."""
    folders = [Path(directory) for directory in (library_dirs() if directories is None else directories)]
    return tensorrt_version_from_names(library for folder in folders if folder.is_dir() for library in folder.glob("libnvinfer.so.*"))


def current_tensorrt_version(override: str | None = None) -> tuple[str, str]:
    """(version, where it came from): ``--tensorrt-version``, the Python bindings or libnvinfer's file name."""
    if override:
        return override, "--tensorrt-version"
    try:
        import tensorrt
    except ImportError:
        version = tensorrt_version_from_libraries()
        if version is None:
            raise BuildError(f"{NOT_INSTALLED}; no libnvinfer.so.X.Y.Z found either") from None
        return version, "libnvinfer"
    return str(tensorrt.__version__), "tensorrt"


def release_mismatch(builder_version: str, server_version: str) -> str | None:
    """Why plans the builder image builds would not load in the server image (None: they would)."""
    if release(builder_version) == release(server_version):
        return None
    return (
        f"the builder image has TensorRT {release(builder_version)}, the server image {release(server_version)}: plans built by "
        "one do not load in the other. NVIDIA has built a tritonserver:YY.MM on the previous month's base: set "
        f"{RELEASE_VARIABLE} in versions.env (the build arg of docker/builder.Dockerfile and docker/server.Dockerfile) to a "
        "release whose tensorrt and tritonserver images carry the same TensorRT"
    )
