"""GPU memory of the TensorRT plans, estimated from shapes without TensorRT: what the capacity planner reports per pod.

For each model served from a plan (every pipeline's core, and each second stage whose config is a plan), at each
optimization profile's largest shape (its max per-image dims at ``max_batch_size``), from the ONNX the precision
ladder chose (its own element types: an FP16 model's tensors are FP16):

- **activations**: the peak of the intermediate tensors alive at once when the graph runs in its order (a tensor
  lives from the node that makes it to the last node that reads it; the model's inputs and outputs are not
  counted: they are the I/O buffers), after the shape computations are folded to constants;
- **I/O**: the input's and outputs' bytes at that shape;
- **weights**: the ONNX's initializers.

Then per instance, as Triton's TensorRT backend allocates: its own copy of the engine (the backend shares one
engine between instances only when no I/O tensor has a dynamic dim, and the batch dim is one), one execution
context per listed profile, each reserving the largest profile's activations (``STATIC``, the default) or its own
profile's (``execution_context_allocation_strategy: ON_PROFILE_CHANGE``), and one set of I/O buffers sized for the
largest shape of any profile.

A tensor whose shape depends on the data (an ``nms=True`` export's NonZero and NonMaxSuppression, and everything
after them) is taken at its upper bound (:func:`bound_data_dependent`), so every export gets a figure; the profile
records which tensors were bounded.

An estimate: TensorRT fuses layers (fewer intermediate tensors), orders and reuses memory its own way, and adds its
tactics' scratch memory (at most the build's workspace limit); it is not the CUDA context or the backend's own
allocations. ``verify-plan --deserialize`` logs the built plan's own figure per profile on a GPU.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builders import BuildError
from builders.tensorrt import models
from builders.tensorrt.profiles import optimization_profiles
from vision_serving import engine_profiles, layout, model_config

# ONNX TensorProto element types -> bytes.
ELEMENT_BYTES = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}


@dataclass(frozen=True)
class TensorBytes:
    name: str
    shape: tuple[int, ...]
    nbytes: int


@dataclass(frozen=True)
class ShapeEstimate:
    """One graph at one input shape."""

    activations: int
    largest: TensorBytes
    inputs: tuple[TensorBytes, ...]
    outputs: tuple[TensorBytes, ...]
    upper_bounds: tuple[str, ...] = ()  # data-dependent tensors, counted at the most they can hold


def _tensor_bytes(info: Any) -> TensorBytes | None:
    kind = info.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in kind.shape.dim] if kind.HasField("shape") else [-1]
    if any(d < 0 for d in dims) or kind.elem_type not in ELEMENT_BYTES:
        return None
    return TensorBytes(info.name, tuple(dims), math.prod(dims) * ELEMENT_BYTES[kind.elem_type])


def concrete_graph(path: Path, input_shapes: Mapping[str, Sequence[int]]) -> tuple[Any, tuple[str, ...]]:
    """The ONNX at ``path`` with its inputs at these shapes, shape computations folded to constants and every tensor's
    shape inferred, and the data-dependent tensors taken at their upper bound (:func:`bound_data_dependent`; their
    names are returned with the model). ``BuildError`` names a tensor whose shape stays unknown."""
    import onnx
    from onnx import shape_inference

    model = onnx.load(str(path))
    for graph_input in model.graph.input:
        if graph_input.name in input_shapes:
            shape = list(input_shapes[graph_input.name])
            dims = graph_input.type.tensor_type.shape.dim
            if len(dims) != len(shape):
                raise BuildError(f"{path}: input '{graph_input.name}' has {len(dims)} dims, the shape given is {shape}")
            for dim, value in zip(dims, shape):
                dim.ClearField("dim_param")
                dim.dim_value = int(value)
    del model.graph.value_info[:]  # exported shapes may pin a dim to -1 or a name: inferred anew at these shapes
    for graph_output in model.graph.output:
        graph_output.type.tensor_type.ClearField("shape")
    model = shape_inference.infer_shapes(model, data_prop=True)
    model = fold_and_infer(model)
    model, bounded = bound_data_dependent(model)
    unknown = [info.name for info in [*model.graph.value_info, *model.graph.output] if _tensor_bytes(info) is None]
    if unknown:
        raise BuildError(f"{path}: no shape for {len(unknown)} tensor(s) at {dict(input_shapes)} (e.g. '{unknown[0]}')")
    return model, bounded


def fold_and_infer(model: Any) -> Any:
    """Shape computations folded to constants, shapes inferred again: Shape -> Slice -> Concat -> Reshape chains fold
    once their inputs' shapes are known (a few rounds)."""
    import onnx_graphsurgeon as gs
    from onnx import shape_inference

    for _ in range(3):
        graph = gs.import_onnx(model)
        graph.fold_constants(fold_shapes=True, error_ok=True).cleanup()
        model = shape_inference.infer_shapes(gs.export_onnx(graph), data_prop=True)
        if all(_tensor_bytes(info) is not None for info in model.graph.value_info):
            break
    return model


# Ops whose output's shape depends on the input's values, not its shape. TensorRT allocates such an output at run time;
# the estimate takes it at the most it can hold: NonZero's indices [rank, every element]; NonMaxSuppression's
# [batch x classes x min(max_output_boxes_per_class, boxes), 3] (an absent bound is ONNX's default 0; one computed at
# run time counts every box).
DATA_DEPENDENT = ("NonZero", "NonMaxSuppression")


def _upper_bound(node: Any, shapes: Mapping[str, list[int] | None], constants: Mapping[str, Any]) -> list[int] | None:
    known = [shapes.get(name) for name in node.input]
    if node.op_type == "NonZero" and known and known[0] is not None:
        return [len(known[0]), math.prod(known[0])]
    if node.op_type == "NonMaxSuppression" and len(known) >= 2 and known[0] is not None and known[1] is not None:
        (batch, boxes, _), classes = known[0], known[1][1]
        limit = constants.get(node.input[2]) if len(node.input) > 2 and node.input[2] else 0
        per_class = boxes if limit is None else min(int(limit), boxes)
        return [batch * classes * per_class, 3]
    return None


def bound_data_dependent(model: Any, rounds: int = 8) -> tuple[Any, tuple[str, ...]]:
    """Each data-dependent output (``DATA_DEPENDENT``) whose shape is unknown set to its upper bound, and the shapes
    after it inferred again, round after round (a NonMaxSuppression reads what a NonZero selected)."""
    import numpy as np
    from onnx import TensorProto, numpy_helper, shape_inference

    bounded: list[str] = []
    for _ in range(rounds):
        infos = {info.name: info for info in [*model.graph.value_info, *model.graph.input, *model.graph.output]}
        shapes = {name: _dims(info) for name, info in infos.items()}
        constants = {
            init.name: int(np.asarray(numpy_helper.to_array(init)).reshape(-1)[0])
            for init in model.graph.initializer
            if init.dims in ([], [1])
        }
        found = {}
        for node in (node for node in model.graph.node if node.op_type in DATA_DEPENDENT):
            name = node.output[0]
            if shapes.get(name) is None and (bound := _upper_bound(node, shapes, constants)) is not None:
                found[name] = bound
        if not found:
            break
        for name, bound in found.items():
            info = infos.get(name) or model.graph.value_info.add()
            info.name = name
            info.type.tensor_type.elem_type = info.type.tensor_type.elem_type or TensorProto.INT64  # the ops' index type
            info.type.tensor_type.ClearField("shape")
            for value in bound:
                info.type.tensor_type.shape.dim.add().dim_value = value
        bounded += found
        model = fold_and_infer(shape_inference.infer_shapes(model, data_prop=True))
    return model, tuple(bounded)


def _dims(info: Any) -> list[int] | None:
    """A tensor's dims when every one is known, else None."""
    kind = info.type.tensor_type
    if not kind.HasField("shape") or not all(d.HasField("dim_value") for d in kind.shape.dim):
        return None
    return [int(d.dim_value) for d in kind.shape.dim]


@functools.lru_cache(maxsize=64)
def _estimate(path: Path, shapes: tuple[tuple[str, tuple[int, ...]], ...], mtime_ns: int) -> ShapeEstimate:
    model, bounded = concrete_graph(path, dict(shapes))
    graph = model.graph
    sizes = {info.name: info for info in [*graph.value_info, *graph.output, *graph.input]}
    measured = {name: _tensor_bytes(info) for name, info in sizes.items()}
    boundary = {info.name for info in [*graph.input, *graph.output]} | {init.name for init in graph.initializer}
    last_use: dict[str, int] = {}
    for index, node in enumerate(graph.node):
        for name in node.input:
            last_use[name] = index
    live: dict[str, int] = {}
    peak, largest = 0, TensorBytes("", (), 0)
    for index, node in enumerate(graph.node):
        for name in node.output:
            tensor = measured.get(name)
            if name and name not in boundary and tensor is not None:
                live[name] = tensor.nbytes
                largest = tensor if tensor.nbytes > largest.nbytes else largest
        peak = max(peak, sum(live.values()))
        for name in set(node.input):
            if last_use.get(name) == index:
                live.pop(name, None)
    initializers = {init.name for init in graph.initializer}
    inputs = tuple(t for info in graph.input if info.name not in initializers and (t := measured.get(info.name)) is not None)
    outputs = tuple(t for info in graph.output if (t := measured.get(info.name)) is not None)
    return ShapeEstimate(peak, largest, inputs, outputs, bounded)


def estimate(path: Path, input_shapes: Mapping[str, Sequence[int]]) -> ShapeEstimate:
    """Activations, largest intermediate tensor and I/O bytes of the ONNX at ``path`` at these input shapes."""
    key = tuple(sorted((name, tuple(int(d) for d in shape)) for name, shape in input_shapes.items()))
    return _estimate(path, key, path.stat().st_mtime_ns)


def weights_bytes(path: Path) -> int:
    """The bytes of the ONNX's initializers and Constant nodes' values at their types."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    total = sum(numpy_helper.to_array(init).nbytes for init in model.graph.initializer)
    for node in model.graph.node:
        if node.op_type == "Constant":
            total += sum(numpy_helper.to_array(a.t).nbytes for a in node.attribute if a.name == "value")
    return total


# --------------------------------------------------------------------------- per model, per instance, per pod


@dataclass(frozen=True)
class ProfileMemory:
    name: str
    max_shape: tuple[int, ...]  # batch first
    activations: int
    input_bytes: int
    output_bytes: int
    largest: TensorBytes
    upper_bounds: tuple[str, ...] = ()  # data-dependent tensors counted at their upper bound (bound_data_dependent)


@dataclass(frozen=True)
class ModelMemory:
    model: str
    onnx: str
    precision: str  # the ladder's choice, or "fp32 (no ladder record)"
    weights: int
    profiles: tuple[ProfileMemory, ...]
    strategy: str  # STATIC | ON_PROFILE_CHANGE
    instances: int

    @property
    def contexts(self) -> int:
        """The activations one instance's contexts reserve (one context per profile)."""
        sizes = [profile.activations for profile in self.profiles]
        return sum(sizes) if self.strategy == engine_profiles.ON_PROFILE_CHANGE else len(sizes) * max(sizes)

    @property
    def io_buffers(self) -> int:
        """One instance's I/O buffers: each tensor at its largest over the profiles."""
        return max(p.input_bytes for p in self.profiles) + max(p.output_bytes for p in self.profiles)

    @property
    def per_instance(self) -> int:
        return self.weights + self.contexts + self.io_buffers

    @property
    def total(self) -> int:
        return self.instances * self.per_instance

    def with_instances(self, count: int) -> ModelMemory:
        return ModelMemory(self.model, self.onnx, self.precision, self.weights, self.profiles, self.strategy, count)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "onnx": self.onnx,
            "precision": self.precision,
            "weights_bytes": self.weights,
            "strategy": self.strategy,
            "instances": self.instances,
            "profiles": [
                {
                    "name": p.name,
                    "max_shape": list(p.max_shape),
                    "activations_bytes": p.activations,
                    "input_bytes": p.input_bytes,
                    "output_bytes": p.output_bytes,
                    "largest_tensor": {"name": p.largest.name, "shape": list(p.largest.shape), "bytes": p.largest.nbytes},
                    "upper_bound_tensors": list(p.upper_bounds),
                }
                for p in self.profiles
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelMemory:
        profiles = tuple(
            ProfileMemory(
                p["name"],
                tuple(p["max_shape"]),
                p["activations_bytes"],
                p["input_bytes"],
                p["output_bytes"],
                TensorBytes(p["largest_tensor"]["name"], tuple(p["largest_tensor"]["shape"]), p["largest_tensor"]["bytes"]),
                tuple(p.get("upper_bound_tensors", ())),
            )
            for p in data["profiles"]
        )
        return cls(data["model"], data["onnx"], data["precision"], data["weights_bytes"], profiles, data["strategy"], data["instances"])


def served_onnx(pipeline: layout.Pipeline, role: str) -> tuple[Path, str]:
    """The ONNX the plan is built from and its precision: the ladder's choice, else the FP32 export (an upper bound)."""
    version_dir = models.model_dir(pipeline, role) / str(models.MODEL_VERSION)
    record = layout.read_served_precision(version_dir)
    if record is not None and (version_dir / record["onnx"]).is_file():
        return version_dir / record["onnx"], str(record["precision"])
    fp32 = version_dir / layout.FP32_ONNX
    if not fp32.is_file():
        raise BuildError(f"{fp32}: not built (python -m builders export --pipeline {pipeline.name})")
    return fp32, "fp32 (no ladder record)"


def model_memory(pipeline: layout.Pipeline, role: str) -> ModelMemory:
    """The estimate of one model served from a plan, with its production config's instances and allocation strategy."""
    config = models.load_core_config(pipeline, role)
    onnx_path, precision = served_onnx(pipeline, role)
    ranges = models.model_profiles(pipeline, role, config)
    names = [profile.name for profile in ranges] or ["batch"]
    profiles = []
    for name, shapes in zip(names, optimization_profiles(config, None, ranges)):
        found = estimate(onnx_path, {item.name: item.max for item in shapes})
        profiles.append(
            ProfileMemory(
                name,
                shapes[0].max,
                found.activations,
                sum(t.nbytes for t in found.inputs),
                sum(t.nbytes for t in found.outputs),
                found.largest,
                found.upper_bounds,
            )
        )
    strategy = model_config.parameter(config, engine_profiles.ALLOCATION_STRATEGY, "STATIC")
    instances = sum(int(group.count) or 1 for group in config.instance_group) or 1
    return ModelMemory(config.name, onnx_path.name, precision, weights_bytes(onnx_path), tuple(profiles), strategy, instances)


def pod_models(repository: Path = layout.MODEL_REPOSITORY) -> list[ModelMemory]:
    """Every model a pod serves from a plan, across the repository's pipelines."""
    return [model_memory(pipeline, role) for pipeline in layout.pipelines(repository) for role in models.engine_roles(pipeline)]
