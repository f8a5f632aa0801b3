"""``build-engine``: one model's plan, as named steps over the builder interface (:mod:`.interface`).

1. :func:`read_request`: the model's TensorRT config, its optimization profiles (:mod:`.profiles`) and its ONNX,
   checked before any GPU work.
2. :func:`target_machine`: the GPUs and the TensorRT at hand (one compute capability; one GPU model when the plan
   cannot be built for all of them) and the plan cache key they give.
3. :func:`build_inputs`: what the plan is a function of (the key, the ONNX's sha256, the profiles, the workspace),
   hashed: it names the cache entry and makes a plan current.
4. :func:`reuse_current`: a current plan, where the build would write it (the cache entry, else the output), ends the
   step (copied to the output from the cache).
5. :func:`build_serialized`: a strongly typed network parsed from the ONNX (:func:`parse_network`), its I/O
   compared with the config (:func:`check_network_io`), the builder configured (:func:`configure`: workspace
   memory-pool limit, hardware compatibility, the profiles; :func:`attach_timing_cache`: the GPU model's timing
   cache, loaded when present and saved after), ``build_serialized_network``. No INT8/FP16 builder flag and no
   calibrator (both removed in 11): the ONNX's types and Q/DQ nodes are the precision.
6. :func:`plan_provenance` and :func:`write_plan`: the plan written atomically, then ``model.plan.json`` beside it
   (TensorRT version, GPU name, compute capability and hardware compatibility, driver/CUDA, the ONNX's sha256 and the
   calibration hash of its own provenance, profile shapes, builder flags, build time).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builders import BuildError, Log, provenance, stderr_logger
from builders.artifacts import atomic_write_bytes, input_hash, sha256_bytes, sha256_file
from builders.tensorrt import discovery, interface, models, profiles
from builders.tensorrt.discovery import GpuFacts
from builders.tensorrt.interface import IBuilder, IBuilderConfig, ILogger, INetworkDefinition, TensorRT
from builders.tensorrt.models import CORE_MODEL, PLAN_FILENAME, ModelConfig
from builders.tensorrt.profiles import InputProfile
from vision_serving import layout

DEFAULT_WORKSPACE_MIB = 2048
log_to_stderr = stderr_logger("build-engine")


@dataclass
class BuildSettings:
    pipeline: layout.Pipeline
    onnx: Path
    output: Path
    role: str = CORE_MODEL  # the core, or a second stage (the recipe's [stages.<role>])
    opt_batch: int | None = None
    workspace_mib: int = DEFAULT_WORKSPACE_MIB
    timing_cache: Path | None = None
    cache_dir: Path | None = None
    force: bool = False


@dataclass
class BuildResult:
    status: str  # "built" | "up-to-date" | "from-cache"
    plan: Path
    provenance: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Request:
    """The model as its config and its input's code describe it."""

    core: ModelConfig
    profile_sets: list[list[InputProfile]]


@dataclass(frozen=True)
class Target:
    """The machine the plan is built for."""

    tensorrt_version: str
    gpus: tuple[GpuFacts, ...]
    compute_capability: str
    compatibility: str  # interface.SAME_COMPUTE_CAPABILITY or GPU_MODEL_ONLY
    key: str  # the plan cache key

    @property
    def gpu(self) -> GpuFacts:
        return self.gpus[0]


@dataclass(frozen=True)
class Inputs:
    """What the plan is a function of, and its hash."""

    record: dict[str, Any]
    hash: str
    onnx_sha256: str
    workspace_bytes: int


@dataclass(frozen=True)
class PlanPaths:
    build: Path  # where the build writes: the cache entry, else the output
    output: Path

    @property
    def cached(self) -> bool:
        return self.build != self.output


def build_engine(
    settings: BuildSettings, log: Log = log_to_stderr, trt: TensorRT | None = None, gpus: Sequence[GpuFacts] | None = None
) -> BuildResult:
    """The plan of ``settings.onnx`` for this GPU and TensorRT (``trt`` and ``gpus``: the tensorrt module and the
    visible GPUs, found when not given), or the current one where it already is."""
    request = read_request(settings)
    trt = interface.import_tensorrt() if trt is None else trt
    target = target_machine(trt, discovery.query_gpus() if gpus is None else gpus)
    inputs = build_inputs(settings, target, request)
    paths = plan_paths(settings, target, inputs)
    current = reuse_current(settings, paths, inputs, target.key, log)
    if current is not None:
        return current
    timing_cache = settings.timing_cache or models.timing_cache_path(settings.cache_dir, target.key, target.gpu.name)
    first = request.profile_sets[0]
    log(
        f"building {target.key} from {settings.onnx} ({len(first)} input(s), {len(request.profile_sets)} profile(s), "
        f"opt batch {first[0].opt[0] if first[0].opt else '-'})"
    )
    started = time.monotonic()
    plan, builder_record = build_serialized(trt, settings.onnx, request, inputs.workspace_bytes, timing_cache, target.compatibility, log)
    seconds = round(time.monotonic() - started, 1)
    record = plan_provenance(settings, target, inputs, paths.build, plan, builder_record, seconds)
    write_plan(paths, plan, record)
    log(f"wrote {paths.output} ({len(plan) / 1e6:.1f} MB, {seconds} s) and {models.provenance_path(paths.output).name}")
    return BuildResult("built", paths.output, record.to_dict())


# --------------------------------------------------------------------------- 1-4: what to build, and whether to


def read_request(settings: BuildSettings) -> Request:
    core = models.load_core_config(settings.pipeline, settings.role)
    profile_sets = profiles.optimization_profiles(core, settings.opt_batch, models.model_profiles(settings.pipeline, settings.role, core))
    if settings.workspace_mib < 1:
        raise BuildError(f"--workspace-mib must be positive, got {settings.workspace_mib}")
    if not settings.onnx.is_file():
        raise BuildError(f"{settings.onnx}: no such ONNX file (run the quantize step first, or pass --onnx)")
    return Request(core, profile_sets)


def target_machine(trt: TensorRT, gpus: Sequence[GpuFacts]) -> Target:
    capability = discovery.single_compute_capability(gpus)
    compatibility = interface.hardware_compatibility(trt)
    names = sorted({gpu.name for gpu in gpus})
    version = str(trt.__version__)
    if compatibility != interface.SAME_COMPUTE_CAPABILITY and len(names) > 1:
        raise BuildError(
            f"TensorRT {discovery.release(version)} builds plans for one GPU model and several are visible "
            f"({', '.join(names)}): set CUDA_VISIBLE_DEVICES to one kind"
        )
    return Target(version, tuple(gpus), capability, compatibility, models.cache_key(version, capability, compatibility, gpus[0].name))


def build_inputs(settings: BuildSettings, target: Target, request: Request) -> Inputs:
    onnx_sha = sha256_file(settings.onnx)
    workspace_bytes = settings.workspace_mib << 20
    record = {
        "key": target.key,
        "onnx_sha256": onnx_sha,
        "profile": profiles.profile_record(request.profile_sets),
        "workspace_bytes": workspace_bytes,
    }
    return Inputs(record, input_hash(record), onnx_sha, workspace_bytes)


def plan_paths(settings: BuildSettings, target: Target, inputs: Inputs) -> PlanPaths:
    """Content-addressed: ``<cache>/<key>/<model>/<inputs hash>/model.plan``. Two model versions sharing a cache
    (stable and canary pods on one volume) never write the same entry, so neither rebuilds over the other nor
    copies the other's plan between check and copy."""
    if settings.cache_dir is None:
        return PlanPaths(settings.output, settings.output)
    entry = models.cache_entry(settings.cache_dir, target.key, models.cached_name(settings.pipeline, settings.role), inputs.hash)
    return PlanPaths(entry / PLAN_FILENAME, settings.output)


def reuse_current(settings: BuildSettings, paths: PlanPaths, inputs: Inputs, key: str, log: Log) -> BuildResult | None:
    """The current plan, copied to the output when it is the cache's; None when it must be built."""
    if settings.force or not provenance.is_current(paths.build, inputs.hash):
        return None
    record = provenance.Provenance.read(models.provenance_path(paths.build))
    current = record.to_dict() if record is not None else {}
    if paths.cached:
        _copy_to_output(paths)
        log(f"{key}: cached plan {paths.build} is current; copied to {paths.output}")
        return BuildResult("from-cache", paths.output, current)
    log(f"{key}: {paths.output} is up to date (use --force to rebuild)")
    return BuildResult("up-to-date", paths.output, current)


# --------------------------------------------------------------------------- 5: the build


def build_serialized(
    trt: TensorRT,
    onnx_path: Path,
    request: Request,
    workspace_bytes: int,
    timing_cache: Path,
    compatibility: str,
    log: Log,
) -> tuple[bytes, dict[str, Any]]:
    """The serialized plan and what the builder ran with."""
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags, flag_names = interface.network_creation_flags(trt)
    network = builder.create_network(flags)
    parse_network(trt, network, logger, onnx_path)  # the parser lives as long as the network (its binding keeps it alive)
    shapes = check_network_io(network, onnx_path, request)
    config = configure(trt, builder, request.profile_sets, shapes, workspace_bytes, compatibility, onnx_path)
    loaded = attach_timing_cache(config, timing_cache, log)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise BuildError(f"{onnx_path}: TensorRT could not build the engine (see the TensorRT messages above)")
    atomic_write_bytes(timing_cache, bytes(memoryview(config.get_timing_cache().serialize())))
    record = {
        "strongly_typed": True,
        "network_flags": flag_names,
        "builder_flags": interface.builder_flags_set(trt, config),
        "timing_cache": str(timing_cache),
        "timing_cache_loaded": loaded,
        "hardware_compatibility": compatibility,
    }
    return bytes(memoryview(serialized)), record


def parse_network(trt: TensorRT, network: INetworkDefinition, logger: ILogger, onnx_path: Path) -> None:
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = interface.parser_errors(parser) or ["(the parser reported no details)"]
        raise BuildError(f"{onnx_path}: the TensorRT ONNX parser failed with {len(errors)} error(s): " + " | ".join(errors))


def check_network_io(network: INetworkDefinition, onnx_path: Path, request: Request) -> dict[str, tuple[int, ...]]:
    """The network's input shapes, after checking its input and output names are the config's."""
    inputs = {network.get_input(i).name: tuple(network.get_input(i).shape) for i in range(network.num_inputs)}
    outputs = {network.get_output(i).name for i in range(network.num_outputs)}
    config_inputs = {p.name for p in request.profile_sets[0]}
    config_outputs = {t.name for t in request.core.output}
    if set(inputs) != config_inputs or outputs != config_outputs:
        raise BuildError(
            f"{onnx_path}: I/O names {sorted(inputs)} -> {sorted(outputs)} differ from the core config's "
            f"{sorted(config_inputs)} -> {sorted(config_outputs)}"
        )
    return inputs


def configure(
    trt: TensorRT,
    builder: IBuilder,
    profile_sets: Sequence[Sequence[InputProfile]],
    shapes: dict[str, tuple[int, ...]],
    workspace_bytes: int,
    compatibility: str,
    onnx_path: Path,
) -> IBuilderConfig:
    """The builder config: the workspace limit, the hardware compatibility and one optimization profile per set."""
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_bytes)
    interface.set_hardware_compatibility(trt, config, compatibility)
    for items in profile_sets:
        profile = builder.create_optimization_profile()
        for item in items:
            shape = shapes[item.name]
            if len(shape) != len(item.max) or any(d != -1 and not lo <= d <= hi for d, lo, hi in zip(shape, item.min, item.max)):
                raise BuildError(
                    f"{onnx_path}: input '{item.name}' has shape {list(shape)}, the profile is {list(item.min)}..{list(item.max)} (batch first)"
                )
            # A static input (an export with its batch fixed: an nms=True export's unrolled NMS) has one shape, its own.
            static = all(d > 0 for d in shape)
            profile.set_shape(item.name, *((shape,) * 3 if static else (item.min, item.opt, item.max)))
        config.add_optimization_profile(profile)
    return config


def attach_timing_cache(config: IBuilderConfig, path: Path, log: Log) -> bool:
    """The GPU model's timing cache, or an empty one when it is missing or stale; True when one was loaded."""
    data = path.read_bytes() if path.is_file() else b""
    if not config.set_timing_cache(config.create_timing_cache(data), ignore_mismatch=False):  # a mismatch is a stale cache
        log(f"timing cache {path} does not match this GPU or TensorRT; starting an empty one")
        config.set_timing_cache(config.create_timing_cache(b""), ignore_mismatch=False)
        data = b""
    log(f"timing cache {path} ({'loaded ' + str(len(data)) + ' bytes' if data else 'new'})")
    return bool(data)


# --------------------------------------------------------------------------- 6: record and write


def onnx_provenance(onnx_path: Path) -> dict[str, Any]:
    """What the ONNX's own provenance (``<onnx>.json``, written by export/quantize/fp16) says: its input and calibration hashes."""
    path = provenance.path_for(onnx_path)
    if not path.is_file():
        return {"file": None, "calibration_hash": None}
    record = provenance.Provenance.read(path)
    if record is None:
        raise BuildError(f"{path}: unreadable provenance") from None
    return {"file": path.name, "input_hash": record.input_hash or None, "calibration_hash": record.input_hashes.get("calibration")}


def count_qdq_nodes(onnx_path: Path) -> int | None:
    try:
        import onnx
    except ImportError:
        return None
    model = onnx.load(str(onnx_path), load_external_data=False)
    return sum(1 for node in model.graph.node if node.op_type in ("QuantizeLinear", "DequantizeLinear"))


def plan_provenance(
    settings: BuildSettings, target: Target, inputs: Inputs, where: Path, plan: bytes, builder_record: dict[str, Any], seconds: float
) -> provenance.Provenance:
    """``model.plan.json``: what the plan was built from, with, and for."""
    onnx_record = onnx_provenance(settings.onnx)
    gpu = target.gpu
    return provenance.Provenance.for_bytes(
        "build-engine",
        inputs.hash,
        where,
        plan,
        input_hashes={
            "onnx": inputs.onnx_sha256,
            "onnx_provenance": onnx_record.get("input_hash"),
            "calibration": onnx_record["calibration_hash"],
            "core_config": sha256_file(models.model_dir(settings.pipeline, settings.role) / "config.pbtxt"),
        },
        tools={"tensorrt": target.tensorrt_version},
        inputs=inputs.record,
        extra={
            "cache_key": target.key,
            "tensorrt": {
                "version": target.tensorrt_version,
                "release": discovery.release(target.tensorrt_version),
                "must_match": "major.minor.patch",
            },
            "gpu": {
                "name": gpu.name,
                "compute_capability": target.compute_capability,
                "hardware_compatibility": target.compatibility,
                "driver_version": gpu.driver_version,
                "cuda_driver_version": gpu.cuda_driver_version,
                "visible_gpus": len(target.gpus),
            },
            "onnx": {"file": settings.onnx.name, "qdq_nodes": count_qdq_nodes(settings.onnx), "provenance": onnx_record["file"]},
            "profile": inputs.record["profile"],
            "builder": {**builder_record, "workspace_bytes": inputs.workspace_bytes},
            "seconds": seconds,
        },
    )


def write_plan(paths: PlanPaths, plan: bytes, record: provenance.Provenance) -> None:
    """The plan, then its provenance (a plan without one is never current), at the build's place, then the output. A
    cache entry is shared by pods: its pair is written into a folder of its own and renamed into place as one
    (:func:`publish`), so no reader ever finds one pod's plan beside another's record."""
    if not paths.cached:
        atomic_write_bytes(paths.build, plan)
        record.write(models.provenance_path(paths.build))
        return
    entry = paths.build.parent
    entry.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{entry.name}.building-", dir=entry.parent))
    (staging / paths.build.name).write_bytes(plan)
    record.write(models.provenance_path(staging / paths.build.name))
    publish(staging, entry)
    _copy_to_output(paths)


def publish(staging: Path, entry: Path) -> None:
    """``staging`` becomes ``entry`` by one rename; an entry already there (another pod's build of the same inputs, or a
    stale one) is renamed aside first and removed. Every state a reader can see is a whole pair, or no entry (then it
    builds)."""
    try:
        os.rename(staging, entry)
        return
    except OSError:  # the entry exists
        aside = Path(tempfile.mkdtemp(prefix=f".{entry.name}.replaced-", dir=entry.parent))
        with contextlib.suppress(FileNotFoundError):  # another pod moved it aside first
            os.replace(entry, aside / entry.name)
        try:
            os.rename(staging, entry)
        except OSError:  # another pod published its pair in between: that one stands
            shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(aside, ignore_errors=True)


def _copy_to_output(paths: PlanPaths) -> None:
    """The cache entry's plan and record, read as one pair (read again should another pod replace the entry between
    the two reads), written to the output."""
    record_path = models.provenance_path(paths.build)
    for _ in range(3):
        record, plan = record_path.read_bytes(), paths.build.read_bytes()
        read = provenance.Provenance.read(record_path)
        if read is not None and read.output_sha256 == sha256_bytes(plan) and record == record_path.read_bytes():
            break
    else:
        raise BuildError(f"the cache entry {paths.build.parent} kept changing while it was copied: rerun")
    if paths.build.resolve() != paths.output.resolve():
        atomic_write_bytes(paths.output, plan)
    atomic_write_bytes(models.provenance_path(paths.output), record)
