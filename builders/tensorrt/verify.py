"""``verify-plan``: can this plan be served on this machine? (an init container, before the server starts)

It compares the plan's provenance (``model.plan.json``) with the machine: the plan's sha256, the TensorRT release
(major.minor.patch: a plan only deserializes with the release that built it; the fourth, build component may differ),
the compute capability of every visible GPU, and its model when the plan was built without hardware compatibility.
``--deserialize`` also loads the plan with ``trt.Runtime``, compares its I/O tensors with the config and its
profiles with the ones the input's code gives, and logs each profile's activation memory as TensorRT reports it.
Everything but ``--deserialize`` runs without TensorRT's bindings (the version from ``libnvinfer.so.X.Y.Z``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from builders import BuildError, CheckFailed, Log, provenance, stderr_logger
from builders.artifacts import sha256_file
from builders.tensorrt import discovery, interface, models, profiles
from builders.tensorrt.discovery import GpuFacts
from builders.tensorrt.interface import TensorRT
from builders.tensorrt.models import CORE_MODEL, ModelConfig
from builders.tensorrt.profiles import InputProfile
from vision_serving import layout, model_config

log_to_stderr = stderr_logger("verify-plan")
EngineIO = Mapping[str, tuple[str, str, tuple[int, ...]]]  # name -> (INPUT|OUTPUT, config dtype name, shape)

# TensorRT DataType member names -> Triton config dtype names.
TRT_DTYPES = {
    "FLOAT": "FP32",
    "HALF": "FP16",
    "BF16": "BF16",
    "INT8": "INT8",
    "INT32": "INT32",
    "INT64": "INT64",
    "BOOL": "BOOL",
    "UINT8": "UINT8",
}


class VerificationError(CheckFailed):
    """The plan does not match this machine (exit code 1)."""


def compare_provenance(record: Mapping[str, Any], tensorrt_version: str, gpus: Sequence[GpuFacts]) -> list[str]:
    """Why a plan with this provenance cannot be served here (empty: it can)."""
    built_gpu = record.get("gpu", {})
    built_trt = str(record.get("tensorrt", {}).get("version", ""))
    built_cc = str(built_gpu.get("compute_capability", ""))
    if not built_trt or not built_cc:
        return ["the provenance has no TensorRT version or compute capability"]
    compatibility = str(built_gpu.get("hardware_compatibility", interface.GPU_MODEL_ONLY))  # older records: TensorRT's default
    problems = []
    if discovery.release(built_trt) != discovery.release(tensorrt_version):
        problems.append(
            f"plan built with TensorRT {discovery.release(built_trt)}, this machine has {discovery.release(tensorrt_version)} "
            "(major.minor.patch must match; the build number may differ)"
        )
    if not gpus:
        problems.append("no NVIDIA GPU visible")
    for index, gpu in enumerate(gpus):
        if gpu.compute_capability != built_cc:
            problems.append(
                f"plan built for compute capability {built_cc} ({built_gpu.get('name', '?')}), "
                f"GPU {index} is {gpu.compute_capability} ({gpu.name})"
            )
        elif compatibility != interface.SAME_COMPUTE_CAPABILITY and gpu.name != built_gpu.get("name"):
            problems.append(
                f"plan built on {built_gpu.get('name', '?')} without hardware compatibility (only that GPU model), "
                f"GPU {index} is {gpu.name}"
            )
    return problems


def expected_engine_io(core: ModelConfig) -> dict[str, tuple[str, str, tuple[int, ...]]]:
    """name -> (INPUT|OUTPUT, config dtype name, engine shape with -1 for the batch)."""
    batch: tuple[int, ...] = (-1,) if core.max_batch_size > 0 else ()
    expected = {}
    for kind, tensors in (("INPUT", core.input), ("OUTPUT", core.output)):
        for tensor in tensors:
            expected[tensor.name] = (kind, model_config.dtype_name(tensor.data_type), (*batch, *(int(d) for d in tensor.dims)))
    return expected


def compare_engine_io(expected: EngineIO, actual: EngineIO, max_batch_size: int = 0) -> list[str]:
    """Why the plan's I/O tensors are not the config's (empty: they are). A batched config's tensors have batch -1 in a
    plan built with a dynamic batch; a static-batch plan (an export with its batch fixed, served at that batch: an
    ``nms=True`` export's unrolled NMS) reports its batch, which must then be ``max_batch_size``."""
    problems = []
    for name in sorted(set(expected) | set(actual)):
        if name not in actual:
            problems.append(f"the core config's {expected[name][0].lower()} '{name}' is not an I/O tensor of the plan")
        elif name not in expected:
            problems.append(f"the plan's {actual[name][0].lower()} '{name}' is not in the core config")
        elif expected[name] != actual[name] and not _static_batch(expected[name], actual[name], max_batch_size):
            (_, dtype, shape), (_, plan_dtype, plan_shape) = expected[name], actual[name]
            batched = max_batch_size > 0 and len(plan_shape) == len(shape) and plan_shape[1:] == shape[1:] and dtype == plan_dtype
            if batched:
                problems.append(
                    f"'{name}': the plan's batch is {plan_shape[0]}, the config's max_batch_size is {max_batch_size} "
                    "(a plan's batch is -1, dynamic, or fixed at max_batch_size)"
                )
            else:
                problems.append(f"'{name}': config says {expected[name]}, plan has {actual[name]}")
    return problems


def _static_batch(expected: tuple[str, str, tuple[int, ...]], actual: tuple[str, str, tuple[int, ...]], max_batch_size: int) -> bool:
    """Whether ``actual`` is ``expected`` (batch -1) with its batch fixed at ``max_batch_size``."""
    (kind, dtype, shape), (plan_kind, plan_dtype, plan_shape) = expected, actual
    return (
        max_batch_size > 0
        and (kind, dtype) == (plan_kind, plan_dtype)
        and len(shape) == len(plan_shape) > 0
        and shape[0] == -1
        and plan_shape[0] == max_batch_size
        and plan_shape[1:] == shape[1:]
    )


def deserialize_and_compare(
    plan_path: Path,
    core: ModelConfig,
    expected: Sequence[Sequence[InputProfile]] = (),
    log: Log = log_to_stderr,
    trt: TensorRT | None = None,
) -> list[str]:
    """Load the plan and compare its I/O with the config and its profiles' min and max shapes with ``expected``
    (the profiles the code that makes its input gives it: a plan built for other shapes is refused); log each
    profile's activation memory as TensorRT reports it (what a context reserves for it)."""
    trt = interface.import_tensorrt() if trt is None else trt
    engine = trt.Runtime(trt.Logger(trt.Logger.ERROR)).deserialize_cuda_engine(plan_path.read_bytes())
    if engine is None:
        return [f"trt.Runtime could not deserialize {plan_path} (see the TensorRT messages above)"]
    actual = {}
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        kind = "INPUT" if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else "OUTPUT"
        dtype = engine.get_tensor_dtype(name).name
        actual[name] = (kind, TRT_DTYPES.get(dtype, dtype), tuple(int(d) for d in engine.get_tensor_shape(name)))
    problems = compare_engine_io(expected_engine_io(core), actual, int(core.max_batch_size))
    count = int(engine.num_optimization_profiles)
    if expected and count != len(expected):
        problems.append(f"the plan has {count} optimization profile(s), its input's code gives {len(expected)}")
    for tensor in (tensor for tensor in core.input if tensor.name in actual):
        for index in range(count):
            shapes = engine.get_tensor_profile_shape(tensor.name, index)
            low, high = tuple(int(d) for d in shapes[0]), tuple(int(d) for d in shapes[2])
            if core.max_batch_size > 0 and high[0] < core.max_batch_size:
                problems.append(
                    f"'{tensor.name}': the plan's profile {index} allows batch {high[0]}, the config's max_batch_size is {core.max_batch_size}"
                )
            wanted = next((item for item in expected[index] if item.name == tensor.name), None) if index < len(expected) else None
            static = actual[tensor.name][2]  # a static-batch plan's input: its one shape is its profile (build.configure)
            if all(d > 0 for d in static) and static[:1] == (core.max_batch_size,) and (low, high) == (static, static):
                continue
            if wanted is not None and (low, high) != (wanted.min, wanted.max):
                problems.append(
                    f"'{tensor.name}': the plan's profile {index} is {list(low)}..{list(high)}, the code gives {list(wanted.min)}..{list(wanted.max)}"
                )
    memory = [int(engine.get_device_memory_size_for_profile_v2(index)) for index in range(count)]
    log(
        f"{plan_path}: activation memory per profile (TensorRT): "
        + ", ".join(f"{index}: {size / 2**20:.1f} MiB" for index, size in enumerate(memory))
    )
    return problems


def verify_plan(
    plan_path: Path,
    pipeline: layout.Pipeline,
    deserialize: bool = False,
    tensorrt_version: str | None = None,
    gpus: Sequence[GpuFacts] | None = None,
    log: Log = log_to_stderr,
    role: str = CORE_MODEL,
) -> dict[str, Any]:
    """Raise ``VerificationError`` (exit 1) with one line when the plan cannot be served here."""
    if not plan_path.is_file():
        raise BuildError(f"{plan_path}: no such plan (run python -m builders build-engine)")
    built = provenance.Provenance.read(models.provenance_path(plan_path))
    if built is None:
        raise VerificationError(
            f"{models.provenance_path(plan_path)}: missing or unreadable provenance; rebuild the plan with python -m builders build-engine"
        )
    problems = []
    record = built.to_dict()
    if built.output_sha256 != sha256_file(plan_path):
        problems.append("the plan's sha256 differs from its provenance (replaced or corrupted)")
    version, source = discovery.current_tensorrt_version(tensorrt_version)
    visible = list(gpus) if gpus is not None else discovery.query_gpus()
    problems += compare_provenance(record, version, visible)
    if not problems and deserialize:
        core = models.load_core_config(pipeline, role)
        expected = profiles.optimization_profiles(core, None, models.model_profiles(pipeline, role, core))
        problems += deserialize_and_compare(plan_path, core, expected, log)
    if problems:
        raise VerificationError(f"{plan_path}: " + "; ".join(problems) + " -> rebuild it on this node (python -m builders build-engine)")
    log(
        f"{plan_path}: OK for TensorRT {discovery.release(version)} ({source}) on {len(visible)} GPU(s) "
        f"of compute capability {visible[0].compute_capability}"
    )
    return record
