"""A stand-in for the ``tensorrt`` module, as the builder interface (builders/tensorrt/interface.py) describes it.

It records what the plan steps ask of TensorRT and answers as the real bindings do, with the differences between
the releases the steps branch on: ``EXPLICIT_BATCH`` and the FP16/INT8 builder flags exist on 10.x only,
``HardwareCompatibilityLevel.SAME_COMPUTE_CAPABILITY`` from 10.9 (the names the bindings define at each tag are in
tests/unit/builders/tensorrt/tensorrt_bindings.json). Its "ONNX parser" reads a JSON description of the network
instead of a model (:func:`write_network`): inputs and their shapes, outputs, and the errors a real parser would
report. A plan it builds is JSON too: the network, the flags and the profiles it was built with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def write_network(
    path: Path, inputs: dict[str, list[int]], outputs: list[str], errors: list[dict[str, Any]] | None = None, fails: bool = False
) -> Path:
    """A stand-in "ONNX" file: what the stand-in's parser makes of it (``errors``, or ``fails`` without any: it fails)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"inputs": inputs, "outputs": outputs, "errors": errors or [], "fails": fails}))
    return path


class Enum(SimpleNamespace):
    """A pybind11 enum: members as attributes, and ``__members__``."""

    @property
    def __members__(self) -> dict[str, object]:
        return dict(vars(self))


class Logger:
    INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = range(5)

    def __init__(self, min_severity: int) -> None:
        self.min_severity = min_severity


@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...]


@dataclass
class Network:
    flags: int
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[Tensor] = field(default_factory=list)

    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

    def get_input(self, index: int) -> Tensor:
        return self.inputs[index]

    def get_output(self, index: int) -> Tensor:
        return self.outputs[index]


class ParserError:
    def __init__(self, node: int, name: str, op: str, desc: str) -> None:
        self._node, self._name, self._op, self._desc = node, name, op, desc

    def code(self) -> str:
        return "UNSUPPORTED_NODE"

    def desc(self) -> str:
        return self._desc

    def node(self) -> int:
        return self._node

    def node_name(self) -> str:
        return self._name

    def node_operator(self) -> str:
        return self._op


class OnnxParser:
    def __init__(self, network: Network, logger: Logger) -> None:
        self.network, self.errors = network, []

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    def get_error(self, index: int) -> ParserError:
        return self.errors[index]

    def parse_from_file(self, model: str) -> bool:
        described = json.loads(Path(model).read_text())
        self.errors = [ParserError(e.get("node", -1), e.get("name", ""), e.get("op", ""), e["desc"]) for e in described["errors"]]
        if self.errors or described["fails"]:
            return False
        self.network.inputs = [Tensor(name, tuple(shape)) for name, shape in described["inputs"].items()]
        self.network.outputs = [Tensor(name, ()) for name in described["outputs"]]
        return True


class Profile:
    def __init__(self) -> None:
        self.shapes: dict[str, tuple[list[int], list[int], list[int]]] = {}

    def set_shape(self, input: str, min: Any, opt: Any, max: Any) -> None:
        self.shapes[input] = (list(min), list(opt), list(max))


class TimingCache:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def serialize(self) -> bytes:
        return self.data or b"timing cache measured by the stand-in"


class BuilderConfig:
    def __init__(self, trt: StandIn) -> None:
        self.trt = trt
        self.hardware_compatibility_level: object = trt.HardwareCompatibilityLevel.NONE
        self.pools: dict[object, int] = {}
        self.profiles: list[Profile] = []
        self.timing_cache: TimingCache | None = None

    def set_memory_pool_limit(self, pool: object, pool_size: int) -> None:
        self.pools[pool] = pool_size

    def add_optimization_profile(self, profile: Profile) -> int:
        self.profiles.append(profile)
        return len(self.profiles) - 1

    def create_timing_cache(self, serialized_timing_cache: bytes) -> TimingCache:
        return TimingCache(bytes(serialized_timing_cache))

    def set_timing_cache(self, cache: TimingCache, ignore_mismatch: bool) -> bool:
        assert ignore_mismatch is False
        if cache.data == self.trt.stale_timing_cache:
            return False
        self.timing_cache = cache
        return True

    def get_timing_cache(self) -> TimingCache:
        assert self.timing_cache is not None
        return self.timing_cache

    def get_flag(self, flag: object) -> bool:
        return flag == getattr(self.trt.BuilderFlag, "TF32", None)  # TensorRT's default config: TF32 on, nothing else


class Builder:
    def __init__(self, trt: StandIn, logger: Logger) -> None:
        self.trt = trt

    def create_network(self, flags: int = 0) -> Network:
        return Network(flags)

    def create_builder_config(self) -> BuilderConfig:
        config = BuilderConfig(self.trt)
        self.trt.configs.append(config)
        return config

    def create_optimization_profile(self) -> Profile:
        return Profile()

    def build_serialized_network(self, network: Network, config: BuilderConfig) -> bytes | None:
        self.trt.builds += 1
        if self.trt.build_fails:
            return None
        plan = {
            "network_flags": network.flags,
            "inputs": {tensor.name: list(tensor.shape) for tensor in network.inputs},
            "profiles": [profile.shapes for profile in config.profiles],
            "hardware_compatibility_level": str(config.hardware_compatibility_level),
        }
        return json.dumps(plan).encode()


RELEASES_WITH_SAME_COMPUTE_CAPABILITY = (10, 9)


class StandIn:
    """The ``tensorrt`` module of one release (``version``), with knobs for what can go wrong."""

    Logger = Logger

    def __init__(
        self, version: str = "10.13.3.9", build_fails: bool = False, stale_timing_cache: bytes | None = None, engine: object = None
    ) -> None:
        self.__version__ = version
        self.engine = engine  # what Runtime.deserialize_cuda_engine gives (None: a plan it cannot load)
        self.build_fails = build_fails
        self.stale_timing_cache = stale_timing_cache
        self.builds = 0
        self.configs: list[BuilderConfig] = []
        major, minor = (int(part) for part in version.split(".")[:2])
        self.NetworkDefinitionCreationFlag = Enum(STRONGLY_TYPED=1, **({"EXPLICIT_BATCH": 0} if major == 10 else {}))
        flags = {"TF32": 7, "REFIT": 8, **({"FP16": 0, "INT8": 1, "BF16": 17} if major == 10 else {})}
        self.BuilderFlag = Enum(**flags)
        self.MemoryPoolType = Enum(WORKSPACE=0, DLA_MANAGED_SRAM=1)
        levels = {"NONE": 0, "AMPERE_PLUS": 1}
        if (major, minor) >= RELEASES_WITH_SAME_COMPUTE_CAPABILITY:
            levels["SAME_COMPUTE_CAPABILITY"] = 2
        self.HardwareCompatibilityLevel = Enum(**levels)
        self.TensorIOMode = Enum(NONE=0, INPUT=1, OUTPUT=2)

    def Builder(self, logger: Logger) -> Builder:
        return Builder(self, logger)

    def OnnxParser(self, network: Network, logger: Logger) -> OnnxParser:
        return OnnxParser(network, logger)

    def Runtime(self, logger: Logger) -> SimpleNamespace:
        return SimpleNamespace(deserialize_cuda_engine=lambda serialized_engine: self.engine)
