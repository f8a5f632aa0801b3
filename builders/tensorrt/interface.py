"""The builder interface: the part of TensorRT's Python API the plan steps use, as Protocols.

The real ``tensorrt`` module satisfies :class:`TensorRT` on TensorRT 10.8+ and 11 (it ships no type stubs, so
:func:`import_tensorrt` states it); the unit tests build with a stand-in that satisfies it too. Each Protocol names the
bindings' class it stands for (``BINDINGS``), and every member and keyword named here is checked against the
bindings' own sources (``python/src`` of NVIDIA/TensorRT) at the tags of 10.8, 10.9, 10.13, 10.16, 11.0 and 11.1
(``tests/unit/builders/tensorrt/test_bindings.py``, from the names recorded in ``tensorrt_bindings.json`` beside it);
mypy checks that the steps use nothing else.

What differs between the releases, and is decided here:

- **Strong typing.** 10.x builds a strongly typed network when asked
  (``NetworkDefinitionCreationFlag.STRONGLY_TYPED``, from 10.0; ``EXPLICIT_BATCH`` is deprecated and ignored, so it
  is not passed). 11.x networks are always strongly typed: ``STRONGLY_TYPED`` is deprecated and ignored,
  ``EXPLICIT_BATCH`` and the FP16/INT8 ``BuilderFlag`` members are gone. Precision therefore comes from the ONNX.
- **Hardware compatibility.** ``HardwareCompatibilityLevel.SAME_COMPUTE_CAPABILITY`` (from 10.9): the plan serves
  every GPU of the compute capability that built it. Before 10.9 a plan is for the GPU model that built it
  (TensorRT's default ``NONE``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, cast

from builders import BuildError
from builders.tensorrt import discovery

MIN_TENSORRT = (10, 8)
# How far a plan may travel. "same_compute_capability": any GPU of the compute capability that built it.
# "none" (TensorRT's default, the only choice before 10.9): only the GPU model that built it, so its cache key and its
# verification name the GPU model.
SAME_COMPUTE_CAPABILITY = "same_compute_capability"
GPU_MODEL_ONLY = "none"


class IHostMemory(Protocol):
    """Serialized bytes (a plan, a timing cache): TensorRT's ``IHostMemory`` supports the buffer protocol."""

    def __buffer__(self, flags: int, /) -> memoryview: ...


class ILogger(Protocol):
    """What ``trt.Logger(severity)`` makes: handed to the builder, the parser and the runtime."""


class LoggerType(Protocol):
    WARNING: object
    ERROR: object

    def __call__(self, min_severity: object, /) -> ILogger: ...


class ITensor(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def shape(self) -> Sequence[int]: ...


class INetworkDefinition(Protocol):
    @property
    def num_inputs(self) -> int: ...

    @property
    def num_outputs(self) -> int: ...

    def get_input(self, index: int, /) -> ITensor: ...

    def get_output(self, index: int, /) -> ITensor: ...


class IParserError(Protocol):
    def code(self) -> object: ...

    def desc(self) -> str: ...

    def node(self) -> int: ...

    def node_name(self) -> str: ...

    def node_operator(self) -> str: ...


class IOnnxParser(Protocol):
    @property
    def num_errors(self) -> int: ...

    def get_error(self, index: int, /) -> IParserError: ...

    def parse_from_file(self, model: str, /) -> bool: ...


class IOptimizationProfile(Protocol):
    def set_shape(self, input: str, min: Sequence[int], opt: Sequence[int], max: Sequence[int]) -> None: ...


class ITimingCache(Protocol):
    def serialize(self) -> IHostMemory: ...


class IBuilderConfig(Protocol):
    hardware_compatibility_level: object

    def set_memory_pool_limit(self, pool: object, pool_size: int) -> None: ...

    def add_optimization_profile(self, profile: IOptimizationProfile) -> int: ...

    def create_timing_cache(self, serialized_timing_cache: bytes) -> ITimingCache: ...

    def set_timing_cache(self, cache: ITimingCache, ignore_mismatch: bool) -> bool: ...

    def get_timing_cache(self) -> ITimingCache: ...

    def get_flag(self, flag: object) -> bool: ...


class IBuilder(Protocol):
    def create_network(self, flags: int = 0) -> INetworkDefinition: ...

    def create_builder_config(self) -> IBuilderConfig: ...

    def create_optimization_profile(self) -> IOptimizationProfile: ...

    def build_serialized_network(self, network: INetworkDefinition, config: IBuilderConfig) -> IHostMemory | None: ...


class IDataType(Protocol):
    @property
    def name(self) -> str: ...


class ICudaEngine(Protocol):
    @property
    def num_io_tensors(self) -> int: ...

    @property
    def num_optimization_profiles(self) -> int: ...

    def get_tensor_name(self, index: int, /) -> str: ...

    def get_tensor_mode(self, name: str, /) -> object: ...

    def get_tensor_dtype(self, name: str, /) -> IDataType: ...

    def get_tensor_shape(self, name: str, /) -> Sequence[int]: ...

    def get_tensor_profile_shape(self, name: str, profile_index: int) -> Sequence[Sequence[int]]: ...

    def get_device_memory_size_for_profile_v2(self, profile_index: int) -> int: ...


class IRuntime(Protocol):
    def deserialize_cuda_engine(self, serialized_engine: bytes) -> ICudaEngine | None: ...


class BuilderFlags(Protocol):
    __members__: Mapping[str, object]  # a pybind11 enum's name -> member


class MemoryPools(Protocol):
    WORKSPACE: object


class IOModes(Protocol):
    INPUT: object


class TensorRT(Protocol):
    """The ``tensorrt`` module, as far as the plan steps use it."""

    __version__: str
    Logger: LoggerType
    Builder: Callable[[ILogger], IBuilder]
    OnnxParser: Callable[[INetworkDefinition, ILogger], IOnnxParser]
    Runtime: Callable[[ILogger], IRuntime]
    BuilderFlag: BuilderFlags
    MemoryPoolType: MemoryPools
    TensorIOMode: IOModes
    NetworkDefinitionCreationFlag: object  # members read by name: VERSIONED_MEMBERS
    HardwareCompatibilityLevel: object


# The bindings' class (its Python name in the tensorrt module) each Protocol stands for.
BINDINGS: dict[str, str] = {
    "LoggerType": "Logger",
    "ITensor": "ITensor",
    "INetworkDefinition": "INetworkDefinition",
    "IParserError": "ParserError",
    "IOnnxParser": "OnnxParser",
    "IOptimizationProfile": "IOptimizationProfile",
    "ITimingCache": "ITimingCache",
    "IBuilderConfig": "IBuilderConfig",
    "IBuilder": "Builder",
    "ICudaEngine": "ICudaEngine",
    "IRuntime": "Runtime",
    "BuilderFlags": "BuilderFlag",
    "MemoryPools": "MemoryPoolType",
    "IOModes": "TensorIOMode",
}
# Members read by name with getattr, and the releases that have them (a missing one is handled where it is read).
VERSIONED_MEMBERS: dict[tuple[str, str], str] = {
    ("NetworkDefinitionCreationFlag", "STRONGLY_TYPED"): "10.0 and later; deprecated and ignored in 11",
    ("HardwareCompatibilityLevel", "SAME_COMPUTE_CAPABILITY"): "10.9 and later",
}


def import_tensorrt() -> TensorRT:
    try:
        import tensorrt
    except ImportError:
        raise BuildError(discovery.NOT_INSTALLED) from None
    return cast(TensorRT, tensorrt)


def network_creation_flags(trt: TensorRT) -> tuple[int, list[str]]:
    """Flags for ``Builder.create_network``: a strongly typed network on TensorRT 10.8+ and 11 (nothing to pass on 11)."""
    version = str(trt.__version__)
    major, minor = discovery.major_minor(version)
    if (major, minor) < MIN_TENSORRT:
        raise BuildError(f"TensorRT {version} is too old: need {MIN_TENSORRT[0]}.{MIN_TENSORRT[1]} or newer (strongly typed Q/DQ networks)")
    if major >= 11:
        return 0, []
    flag = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    if flag is None:
        raise BuildError(f"TensorRT {version} has no NetworkDefinitionCreationFlag.STRONGLY_TYPED")
    return 1 << int(cast(int, flag)), ["STRONGLY_TYPED"]


def hardware_compatibility(trt: TensorRT) -> str:
    """The level this TensorRT builds plans at: SAME_COMPUTE_CAPABILITY where its bindings have it, else none."""
    levels = getattr(trt, "HardwareCompatibilityLevel", None)
    return SAME_COMPUTE_CAPABILITY if hasattr(levels, "SAME_COMPUTE_CAPABILITY") else GPU_MODEL_ONLY


def set_hardware_compatibility(trt: TensorRT, config: IBuilderConfig, level: str) -> None:
    if level == SAME_COMPUTE_CAPABILITY:
        config.hardware_compatibility_level = getattr(trt.HardwareCompatibilityLevel, "SAME_COMPUTE_CAPABILITY")  # noqa: B009


def parser_errors(parser: IOnnxParser) -> list[str]:
    """Every ONNX parser error as one readable line (node, operator, description)."""
    lines = []
    for index in range(int(parser.num_errors)):
        error = parser.get_error(index)
        where = [f"{label} {value}" for value, label in ((error.node_name(), "node"), (error.node_operator(), "op")) if value]
        if not where and int(error.node()) >= 0:
            where.append(f"node #{error.node()}")
        lines.append(f"[{error.code()}] {' '.join(where) + ': ' if where else ''}{error.desc()}")
    return lines


def builder_flags_set(trt: TensorRT, config: IBuilderConfig) -> list[str]:
    """Names of the builder flags that are set (for the provenance record)."""
    names = []
    for name, flag in sorted(trt.BuilderFlag.__members__.items()):
        try:
            if config.get_flag(flag):
                names.append(name)
        except Exception:
            continue
    return names
