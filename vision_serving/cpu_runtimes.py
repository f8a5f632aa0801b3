"""The CPU runtimes a Python-backend core may name (its config's ``runtime`` parameter): the one place that lists them.

Each runtime is a module with a core class (``input_names``, ``output_names``, ``onnx_path``, ``run(feeds) -> list``
in config order: :class:`vision_serving.core_model.Core`) that states its arithmetic's precision itself, so a
config named FP32 computes FP32 on every CPU (OpenVINO's CPU plugin would run f32 models in bf16 where the CPU has
it: :mod:`vision_serving.openvino_core` sets ``INFERENCE_PRECISION_HINT``). Its entry here says how it is loaded,
which parameter gives its threads, how its settings are checked offline, the configs a new pipeline gets for it
and the variants the benchmarks measure. The module is imported only when a config names it (OpenVINO is a large
import).

Adding a runtime: its module, one line in :data:`RUNTIMES`, and a ``configs/cpu_<runtime>.pbtxt`` in the cores
that should offer it (``new-pipeline`` writes them from :attr:`CpuRuntime.configs`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from . import layout
from .model_config import ConfigError, ModelConfig, parameter

if TYPE_CHECKING:
    from .core_model import Core

DEFAULT = "onnxruntime"


@dataclass(frozen=True)
class ConfigVariant:
    """A ``configs/<name>.pbtxt`` of a core on this runtime: what it is, its parameters and instance count."""

    name: str
    about: str
    parameters: Mapping[str, str]
    instances: int = 2


@dataclass(frozen=True)
class MeasuredVariant:
    """A precision the benchmarks measure the runtime at: a core config and the parameters changed on it."""

    precision: str
    config: str
    parameters: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class CpuRuntime:
    name: str
    # Its core from a config and the version folder (the module imported inside: only when a config names it).
    load: Callable[[ModelConfig, Path], Core]
    # The parameter giving each instance's threads ("0": the library's default, every CPU).
    threads_parameter: str
    # What a service written without tuning runs (the benchmarks' naive comparisons), besides threads "0".
    untuned: Mapping[str, str] = field(default_factory=dict)
    # Checks its settings offline (raises ConfigError); None: nothing beyond the model.
    settings_check: Callable[[ModelConfig], object] | None = None
    configs: tuple[ConfigVariant, ...] = ()
    measured: tuple[MeasuredVariant, ...] = ()

    def check(self, config: ModelConfig) -> None:
        if self.settings_check is not None:
            self.settings_check(config)


def onnxruntime_core(config: ModelConfig, version_dir: Path) -> Core:
    from .onnx_core import OnnxCore

    return OnnxCore(config, version_dir)


def openvino_core(config: ModelConfig, version_dir: Path) -> Core:
    from .openvino_core import OpenVinoCore

    return OpenVinoCore(config, version_dir)


def openvino_settings(config: ModelConfig) -> object:
    from .openvino_core import compile_properties

    return compile_properties(config)


ONNX_FP32 = {"onnx_file": layout.FP32_ONNX, "graph_optimization": "all"}
OPENVINO = {"performance_hint": "LATENCY", "num_streams": "1", "inference_threads": "1", "cpu_pinning": "false"}

RUNTIMES: dict[str, CpuRuntime] = {
    runtime.name: runtime
    for runtime in (
        CpuRuntime(
            name="onnxruntime",
            load=onnxruntime_core,
            threads_parameter="intra_op_threads",
            untuned={"allow_spinning": "1"},  # onnxruntime's default: spinning intra-op threads
            configs=(
                ConfigVariant("cpu", "The default CPU core: the FP32 ONNX on onnxruntime", {"runtime": "onnxruntime", **ONNX_FP32, "intra_op_threads": "1"}),
                ConfigVariant("cpu_onnxruntime", "The FP32 ONNX on onnxruntime (as cpu)", {"runtime": "onnxruntime", **ONNX_FP32, "intra_op_threads": "1"}),
                ConfigVariant(
                    "cpu_int8",
                    "The INT8 Q/DQ ONNX on onnxruntime with optimizations off: an emulation of TensorRT's INT8",
                    {"onnx_file": layout.INT8_ONNX, "graph_optimization": "disable_all", "intra_op_threads": "2"},
                    instances=1,
                ),
            ),
            measured=(MeasuredVariant("fp32", "cpu_onnxruntime"), MeasuredVariant("int8", "cpu_int8")),
        ),
        CpuRuntime(
            name="openvino",
            load=openvino_core,
            threads_parameter="inference_threads",
            settings_check=openvino_settings,
            configs=(
                ConfigVariant("cpu_openvino", "The precision the ladder chose, on OpenVINO's CPU plugin", {"runtime": "openvino", "precision": "served", **OPENVINO}),
                ConfigVariant("cpu_openvino_fp32", "The FP32 ONNX on OpenVINO's CPU plugin", {"runtime": "openvino", "precision": "fp32", **OPENVINO}),
            ),
            measured=(MeasuredVariant("fp32", "cpu_openvino_fp32"), MeasuredVariant("int8", "cpu_openvino_fp32", (("precision", "int8"),))),
        ),
    )
}  # fmt: skip


def of_config(config: ModelConfig) -> CpuRuntime:
    """The runtime a Python-backend core config names (``runtime``; onnxruntime when absent)."""
    name = parameter(config, "runtime", DEFAULT)
    if name not in RUNTIMES:
        raise ConfigError(f"model '{config.name}': runtime {name!r} is not one of {', '.join(RUNTIMES)}")
    return RUNTIMES[name]
