"""The CPU runtimes a Python-backend core may name (its config's ``runtime`` parameter): the one place that lists them.

Each runtime is a module with a core class (``input_names``, ``output_names``, ``onnx_path``, ``run(feeds) -> list``
in config order: :class:`vision_serving.core_model.Core`) that states its arithmetic's precision itself, so a
config named FP32 computes FP32 on every CPU (OpenVINO's CPU plugin would run f32 models in bf16 where the CPU has
it: :mod:`vision_serving.openvino_core` sets ``INFERENCE_PRECISION_HINT``). Its entry here says how it is loaded,
which parameter gives its threads, how its settings are checked offline, the configs a new pipeline gets for it
and the variants the benchmarks measure. The module is imported only when a config names it (OpenVINO is a large
import).

Adding a runtime: its module and one line in :data:`RUNTIMES`, then ``python -m builders configs --all`` writes
its configs (:attr:`CpuRuntime.configs`) into every core's ``configs/`` folder. Each :class:`ConfigVariant` is
what that ``configs/<name>.pbtxt`` sets on top of the core's ``config.pbtxt`` (its tensors, batch, queue policy
and warm-up): ``builders.configs.variants`` generates the files from the two, and from the ``cpu`` table of a
core's spec where a pipeline measured or chose otherwise.
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
    """A ``configs/<name>.pbtxt`` of every core: what it is (``about``, then ``notes``: its header comment), its
    backend, parameters, instance count (``KIND_CPU``), dynamic batcher delay, model file (a C++ backend's) and
    whether it runs ``config.pbtxt``'s warm-up samples. Everything else comes from the core's ``config.pbtxt``
    (``builders.configs.variants``)."""

    name: str
    about: str
    parameters: Mapping[str, str]
    instances: int = 2
    backend: str = "python"
    default_model_filename: str = ""
    max_queue_delay_microseconds: int = 0
    warmup: bool = False
    notes: tuple[str, ...] = ()


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
    from .openvino_settings import compile_properties

    return compile_properties(config)


ONNX_FP32 = {"onnx_file": layout.FP32_ONNX, "graph_optimization": "all"}
ONNXRUNTIME_THREADS = (
    "One intra-op thread per instance: Triton's instances (instance_group) are the parallelism; onnxruntime's second "
    "thread spins while it waits, which cost more CPU per image with preprocessing sharing the CPUs (benchmarks/optimizations.md)."
)
OPENVINO_THREADS = (
    "OpenVINO CPU plugin settings (vision_serving/openvino_core.py): one stream of one thread per instance; "
    "Triton's instances (instance_group) are the parallelism, no thread waits idle."
)
INT8_EMULATION = (
    "For checking what the GPU's INT8 engine computes, not for speed: Q -> DQ -> float ops with onnxruntime's "
    "optimizations off (its fused int8 CPU kernels are wrong on AVX2-only CPUs); on CPU, FP32 (cpu) is faster and "
    'exact (docs/design.md, "INT8 on CPU is judged by emulation").'
)
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
                ConfigVariant("cpu", "The default CPU core: the FP32 ONNX on onnxruntime", {"runtime": "onnxruntime", **ONNX_FP32, "intra_op_threads": "1"},
                              warmup=True,
                              notes=("Measured side by side (one thread, batch 8, CPU time per image: benchmarks/results/steps.md), onnxruntime FP32 "
                                     "was as fast as or faster than OpenVINO at any precision for every pipeline here, and FP32 is exact; the "
                                     "ladder's precision is the GPU's (TensorRT).",
                                     ONNXRUNTIME_THREADS,
                                     "Warm-up: the samples run through each instance while the model loads, before it reports ready, so the "
                                     "first requests do not pay onnxruntime's first runs (its memory arena grows to the largest batch).")),
                ConfigVariant("cpu_onnxruntime", "The FP32 ONNX on onnxruntime (as cpu)", {"runtime": "onnxruntime", **ONNX_FP32, "intra_op_threads": "1"},
                              notes=(ONNXRUNTIME_THREADS,)),
                ConfigVariant(
                    "cpu_int8",
                    "The INT8 Q/DQ ONNX on onnxruntime with optimizations off: an emulation of TensorRT's INT8",
                    {"onnx_file": layout.INT8_ONNX, "graph_optimization": "disable_all", "intra_op_threads": "2"},
                    instances=1,
                    notes=("Its ONNX is written by `python -m builders quantize`.", INT8_EMULATION),
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
                ConfigVariant("cpu_openvino", "The precision the ladder chose, on OpenVINO's CPU plugin", {"runtime": "openvino", "precision": "served", **OPENVINO},
                              notes=('"served": the precision the ladder chose and measured (1/served_precision.json, resolved when the model '
                                     "loads; FP32 if the ladder has not run).", OPENVINO_THREADS)),
                ConfigVariant("cpu_openvino_fp32", "The FP32 ONNX on OpenVINO's CPU plugin, the reference", {"runtime": "openvino", "precision": "fp32", **OPENVINO},
                              notes=(OPENVINO_THREADS,)),
            ),
            measured=(MeasuredVariant("fp32", "cpu_openvino_fp32"), MeasuredVariant("int8", "cpu_openvino_fp32", (("precision", "int8"),))),
        ),
    )
}  # fmt: skip


# Triton's own openvino backend (NVIDIA's server image; no Python in the inference path): not a runtime of the
# Python-backend core (it has no ``runtime`` parameter), a config variant of its own. Its parameters are the backend's
# (vision_serving.consistency checks them offline: the local tritonserver has the Python backend only).
OPENVINO_BACKEND = ConfigVariant(
    "cpu_openvino_backend",
    "The FP32 ONNX on Triton's own openvino backend (NVIDIA's server image), no Python in the inference path",
    {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1", "INFERENCE_NUM_THREADS": "1", "ENABLE_BATCH_PADDING": "YES"},
    backend="openvino",
    default_model_filename=layout.FP32_ONNX,
    max_queue_delay_microseconds=5000,
    notes=(
        "The C++ backend cannot read served_precision.json: default_model_filename names the ONNX, FP32 or what the "
        "precision ladder chose (`python -m vision_serving.consistency` fails otherwise).",
        "The backend fixes the model's batch at max_batch_size and refuses smaller batches unless it pads them "
        "(ENABLE_BATCH_PADDING): every execution computes max_batch_size images; the batcher's delay lets batches fill "
        "under load. At low load the Python-backend cores (any batch size) have the lower latency.",
        "Not executed by the local tritonserver (Python backend only): checked offline (tensors, ONNX I/O, parameters) "
        "by vision_serving.consistency.",
    ),
)


def config_variants() -> tuple[ConfigVariant, ...]:
    """Every ``configs/<name>.pbtxt`` a core has: each runtime's configs, then Triton's openvino backend's."""
    return (*(variant for runtime in RUNTIMES.values() for variant in runtime.configs), OPENVINO_BACKEND)


def of_config(config: ModelConfig) -> CpuRuntime:
    """The runtime a Python-backend core config names (``runtime``; onnxruntime when absent)."""
    name = parameter(config, "runtime", DEFAULT)
    if name not in RUNTIMES:
        raise ConfigError(f"model '{config.name}': runtime {name!r} is not one of {', '.join(RUNTIMES)}")
    return RUNTIMES[name]
