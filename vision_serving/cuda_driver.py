"""Can this container's CUDA run on the node's driver? One line either way (``python -m vision_serving.cuda_driver``).

The server image keeps NVIDIA's entrypoint in front of its own (``/opt/nvidia/nvidia_entrypoint.sh``: it sources
``/opt/nvidia/entrypoint.d/*.sh`` and prints ``*.txt``, then execs the command): the banner, the driver check
(``50-gpu-driver-check.sh``: no ``libcuda.so.1`` or no ``/dev/nvidiactl`` -> a warning and ``NVIDIA_CPU_ONLY=1``) and
the CUDA forward-compatibility set-up. NVIDIA's Triton images keep their compat libcuda under
``/usr/local/cuda/compat/lib.real``, where the container toolkit's ``enable-cuda-compat`` hook (it looks for
``/usr/local/cuda/compat/libcuda.so.*``) does not find it; the entrypoint's parts link it in when the host's driver is
older. This module is the exact check after them: it loads ``libcuda.so.1`` as the server will, calls ``cuInit`` and
``cuDriverGetVersion``, and compares the CUDA version the loaded driver supports with the image's (``CUDA_VERSION``,
set by NVIDIA's CUDA images):

- the driver supports the image's CUDA major (minor version compatibility, from CUDA 11): it runs;
- the loaded libcuda is the image's compat one: forward compatibility is on (data-center GPUs);
- ``cuInit`` fails with ``CUDA_ERROR_SYSTEM_DRIVER_MISMATCH`` (803) or ``CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE``
  (804), the codes NVIDIA's compatibility guide names, or the driver is older than the image's CUDA major without
  compat: it cannot run, and the line says which and what to do (exit 1).

No driver at all is a warning (the CPU configs still serve), or an error with ``--require`` (the Kubernetes
Deployment's GPU pods: ``VISION_SERVING_REQUIRE_GPU=1`` in the entry script).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LIBRARY = "libcuda.so.1"
COMPAT_DIR = "/usr/local/cuda/compat"
CUDA_SUCCESS, CUDA_ERROR_NO_DEVICE = 0, 100
CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 803, 804
EXIT_OK, EXIT_CANNOT_RUN = 0, 1


@dataclass(frozen=True)
class Verdict:
    level: str  # "ok", "warning" (it serves, but not from the GPU) or "error" (it cannot run)
    line: str

    @property
    def runs(self) -> bool:
        return self.level != "error"


def _version(encoded: int) -> tuple[int, int]:
    """cuDriverGetVersion's ``1000 * major + 10 * minor``."""
    return encoded // 1000, (encoded % 1000) // 10


def image_cuda(environ: Mapping[str, str]) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", environ.get("CUDA_VERSION", ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def kernel_driver(path: Path = Path("/proc/driver/nvidia/version")) -> str:
    """The NVIDIA kernel module's version (``NVRM version: NVIDIA UNIX [Open] ... Kernel Module [for x86_64]  580.65.06``), or '?'."""
    try:
        match = re.search(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s", path.read_text())  # the proprietary and the open module
    except OSError:
        return "?"
    return match.group(1) if match else "?"


def loaded_from(name: str, maps: Path = Path("/proc/self/maps")) -> str | None:
    """Where this process mapped a library from (``/proc/self/maps``), once loaded."""
    try:
        for line in maps.read_text().splitlines():
            path = line.split()[-1] if line.split() else ""
            if Path(path).name.startswith(name.split(".so")[0] + ".so"):
                return path
    except OSError:
        return None
    return None


def from_compat_dir(path: str | None, compat_dir: str = COMPAT_DIR) -> bool:
    """Whether ``path`` (as ``/proc/self/maps`` names it: every symlink resolved, ``/usr/local/cuda`` being one to
    ``/usr/local/cuda-X.Y`` and the compat libraries ``compat/lib.real`` in NVIDIA's images) lies in ``compat_dir``,
    both resolved."""
    if path is None:
        return False
    return Path(path).resolve().is_relative_to(Path(compat_dir).resolve())


def judge(library: Any, environ: Mapping[str, str], driver: str, path: str | None, require: bool, compat_dir: str = COMPAT_DIR) -> Verdict:
    """The verdict on a loaded libcuda (``library``: ``cuInit`` and ``cuDriverGetVersion`` as ctypes exposes them; None:
    it would not load)."""
    wanted = image_cuda(environ)
    needs = f"CUDA {wanted[0]}.{wanted[1]}" if wanted else "its CUDA"
    if library is None:
        return Verdict(
            "error" if require else "warning",
            f"no NVIDIA driver in this container ({LIBRARY} does not load): the TensorRT cores cannot run here",
        )
    status = int(library.cuInit(0))
    if status == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
        return Verdict(
            "error",
            f"the node's NVIDIA kernel module ({driver}) and its driver library differ (CUDA error 803): reboot the node after its driver update",
        )
    if status == CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
        return Verdict(
            "error",
            f"the image needs {needs}; forward compatibility is set up on driver {driver} but this GPU does not support it "
            "(CUDA error 804, data-center GPUs only): upgrade the node's driver",
        )
    if status == CUDA_ERROR_NO_DEVICE:
        return Verdict(
            "error" if require else "warning",
            f"no NVIDIA GPU visible (CUDA error 100) on driver {driver}: the TensorRT cores cannot run here",
        )
    if status != CUDA_SUCCESS:
        return Verdict("error", f"cuInit failed with CUDA error {status} on driver {driver}")
    encoded = ctypes.c_int(0)
    library.cuDriverGetVersion(ctypes.byref(encoded))
    supported = _version(encoded.value)
    compat = from_compat_dir(path, compat_dir)
    where = f"the image's forward-compatibility driver library ({path}) on kernel driver {driver}" if compat else f"driver {driver}"
    if wanted is not None and supported[0] < wanted[0]:
        return Verdict(
            "error",
            f"the image needs {needs}; {where} supports CUDA {supported[0]}.{supported[1]} and forward compatibility did not "
            "apply (not a data-center GPU, or the container toolkit's compat set-up is off): upgrade the node's driver",
        )
    return Verdict("ok", f"{where} supports CUDA {supported[0]}.{supported[1]}; the image needs {needs}: it runs")


def check(
    require: bool = False,
    environ: Mapping[str, str] | None = None,
    load: Callable[[str], Any] = ctypes.CDLL,
) -> Verdict:
    try:
        library = load(LIBRARY)
    except OSError:
        library = None
    path = loaded_from(LIBRARY) if library is not None else None
    return judge(library, os.environ if environ is None else environ, kernel_driver(), path, require)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vision_serving.cuda_driver", description=__doc__.split("\n\n")[0])
    parser.add_argument("--require", action="store_true", help="no driver or no GPU is an error too (a GPU pod)")
    parser.add_argument("--prefix", default="cuda-driver", help="the name the line starts with (default: %(default)s)")
    args = parser.parse_args(argv)
    verdict = check(args.require)
    kind = "" if verdict.level == "ok" else f"{verdict.level}: "
    print(f"{args.prefix}: {kind}{verdict.line}", file=sys.stderr)
    return EXIT_OK if verdict.runs else EXIT_CANNOT_RUN


if __name__ == "__main__":
    sys.exit(main())
