"""The ``build-engine`` and ``verify-plan`` steps: the core's TensorRT plan.

``build-engine`` turns the explicitly quantized (Q/DQ) ONNX into
``<pipeline>_core/<version>/model.plan`` for the GPU and TensorRT at hand:

- a strongly typed network (TensorRT 10.8+: ``NetworkDefinitionCreationFlag.
  STRONGLY_TYPED``; TensorRT 11: always strongly typed, the flag is deprecated
  and ignored, and ``EXPLICIT_BATCH`` no longer exists), so the precision is
  exactly what the Q/DQ nodes say: no ``BuilderFlag.INT8``/``FP16`` (removed
  in 11), no calibrator (removed in 11);
- optimization profiles: batch 1 .. ``max_batch_size`` of the config,
  ``--opt-batch`` in between; fixed dims from the config, dynamic dims (and
  their own opt batch) from the code that makes the input
  (``vision_serving.engine_profiles``: the text detector's preprocess, the
  text recognizer's width buckets), one plan profile each;
- hardware compatibility ``SAME_COMPUTE_CAPABILITY`` where the bindings have it
  (TensorRT >= 10.9): the plan serves every GPU of the compute capability that
  built it; older releases build for the GPU model at hand only (TensorRT's
  default ``NONE``), and the plan cache and ``verify-plan`` then key on the GPU
  model too, so an H100 SXM's plan is never served on an H100 PCIe or an H200;
- a workspace memory-pool limit, a timing cache per GPU model (loaded when present,
  saved after), ``build_serialized_network``;
- the plan written atomically, then ``model.plan.json`` beside it: TensorRT
  version, GPU name, compute capability and hardware compatibility, driver/CUDA, ONNX sha256, the
  calibration hash from the Q/DQ ONNX's own provenance JSON, profile shapes,
  builder flags, build time.

``verify-plan`` checks that provenance against the machine it runs on (an init
container before the server starts): the plan's sha256, the TensorRT
major.minor.patch (a plan only deserializes with the TensorRT release that
built it; the fourth, build component may differ), the compute capability
of every visible GPU, and its model when the plan was built without hardware compatibility. ``--deserialize`` also loads the plan with
``trt.Runtime`` and compares its I/O tensors with the core config.

TensorRT is imported lazily: everything here except the build and
``--deserialize`` runs without it (``verify-plan`` reads the TensorRT version
from ``libnvinfer.so.X.Y.Z`` when the Python bindings are absent, as in the
Triton server image).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from builders import BuildError, arguments, provenance
from builders.artifacts import atomic_write_bytes, input_hash, sha256_file
from vision_serving import layout, model_config
from vision_serving.model_config import ConfigError

if TYPE_CHECKING:
    from vision_serving.tasks.base import EngineProfile

CORE_MODEL = "core"
MODEL_VERSION = layout.MODEL_VERSION
QDQ_ONNX_FILENAME = layout.INT8_ONNX
PLAN_FILENAME = layout.PLAN
PROVENANCE_SUFFIX = layout.PROVENANCE_SUFFIX
MIN_TENSORRT = (10, 8)
DEFAULT_WORKSPACE_MIB = 2048
BUILD_DIR = layout.BUILD_DIR / "tensorrt"
NOT_INSTALLED = "TensorRT is not installed (use the builder image docker/builder.Dockerfile)"
NVIDIA_SMI_QUERY = ["nvidia-smi", "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"]
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/local/tensorrt/lib", "/usr/lib64", "/usr/lib")

Log = Callable[[str], None]
# Triton's ModelConfig protobuf message (vision_serving/protos, generated): it has no type stubs.
ModelConfig: TypeAlias = Any


def log_to_stderr(message: str) -> None:
    print(f"build-engine: {message}", file=sys.stderr, flush=True)


class VerificationError(BuildError):
    """The plan does not match this machine (exit code 1)."""

    exit_code = 1


class PipelinesFailed(BuildError):
    """Some pipelines of a run over all of them failed (the first failure's exit code)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class GpuFacts:
    name: str
    compute_capability: str  # "9.0"
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # the CUDA version the driver supports, e.g. "13.0"

    @property
    def sm(self) -> str:
        return "sm" + self.compute_capability.replace(".", "")


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


def release(version: str) -> str:
    """``10.13.3.9`` -> ``10.13.3``: the part of a TensorRT version that a plan is bound to."""
    parts = version.split(".")
    if len(parts) < 3 or not all(part.isdigit() for part in parts[:3]):
        raise BuildError(f"unexpected TensorRT version {version!r}")
    return ".".join(parts[:3])


def major_minor(version: str) -> tuple[int, int]:
    major, minor = release(version).split(".")[:2]
    return int(major), int(minor)


# How far a plan may travel (TensorRT's HardwareCompatibilityLevel). "same_compute_capability" (TensorRT >= 10.9's
# SAME_COMPUTE_CAPABILITY): any GPU of the compute capability that built it. "none" (TensorRT's default, the only
# choice before 10.9): only the GPU model that built it, so its cache key and its verification name the GPU model.
SAME_COMPUTE_CAPABILITY = "same_compute_capability"
GPU_MODEL_ONLY = "none"


def gpu_slug(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100-80gb-hbm3``: a GPU model in a path."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown-gpu"


def hardware_compatibility(trt: Any) -> str:
    """The level this TensorRT builds plans at: SAME_COMPUTE_CAPABILITY where its bindings have it, else none."""
    levels = getattr(trt, "HardwareCompatibilityLevel", None)
    return SAME_COMPUTE_CAPABILITY if hasattr(levels, "SAME_COMPUTE_CAPABILITY") else GPU_MODEL_ONLY


def set_hardware_compatibility(trt: Any, config: Any, level: str) -> None:
    if level == SAME_COMPUTE_CAPABILITY:
        config.hardware_compatibility_level = trt.HardwareCompatibilityLevel.SAME_COMPUTE_CAPABILITY


def cache_key(tensorrt_version: str, compute_capability: str, compatibility: str = SAME_COMPUTE_CAPABILITY, gpu_name: str = "") -> str:
    """Where a plan for this TensorRT release and GPU lives in a plan cache: by compute capability when the plan
    is built for any GPU of it, else by GPU model too (a plan cache is shared by every node of a cluster)."""
    key = f"trt{release(tensorrt_version)}-sm{compute_capability.replace('.', '')}"
    return key if compatibility == SAME_COMPUTE_CAPABILITY else f"{key}-{gpu_slug(gpu_name)}"


def cache_entry(cache_dir: Path, key: str, pipeline: str, inputs_hash: str) -> Path:
    """The plan cache folder of one build: TensorRT release and GPU (``key``), pipeline, and the hash
    of the build's inputs (ONNX sha256, profile, workspace): another model version is another entry."""
    return cache_dir / key / pipeline / inputs_hash[:16]


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


# --------------------------------------------------------------------------- tensorrt


def import_tensorrt() -> Any:
    try:
        import tensorrt
    except ImportError:
        raise BuildError(NOT_INSTALLED) from None
    return tensorrt


def network_creation_flags(trt: Any) -> tuple[int, list[str]]:
    """Flags for ``Builder.create_network``: a strongly typed network on TensorRT 10.8+ and 11.

    10.x: ``STRONGLY_TYPED`` must be requested (``EXPLICIT_BATCH`` is deprecated
    and ignored since 10.0, so it is not passed). 11.x: networks are always
    strongly typed; ``STRONGLY_TYPED`` is deprecated and ignored and
    ``EXPLICIT_BATCH`` was removed, so nothing is passed.
    """
    version = str(trt.__version__)
    major, minor = major_minor(version)
    if (major, minor) < MIN_TENSORRT:
        raise BuildError(f"TensorRT {version} is too old: need {MIN_TENSORRT[0]}.{MIN_TENSORRT[1]} or newer (strongly typed Q/DQ networks)")
    if major >= 11:
        return 0, []
    flag = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    if flag is None:
        raise BuildError(f"TensorRT {version} has no NetworkDefinitionCreationFlag.STRONGLY_TYPED")
    return 1 << int(flag), ["STRONGLY_TYPED"]


def parser_errors(parser: Any) -> list[str]:
    """Every ONNX parser error as one readable line (node, operator, description)."""
    lines = []
    for index in range(int(parser.num_errors)):
        error = parser.get_error(index)
        where = []
        for attribute, label in (("node_name", "node"), ("node_operator", "op")):
            getter = getattr(error, attribute, None)
            value = getter() if callable(getter) else None
            if value:
                where.append(f"{label} {value}")
        if not where and int(error.node()) >= 0:
            where.append(f"node #{error.node()}")
        lines.append(f"[{error.code()}] {' '.join(where) + ': ' if where else ''}{error.desc()}")
    return lines


def set_builder_flags(trt: Any, config: Any) -> list[str]:
    """Names of the builder flags that are set (for the provenance record)."""
    names = []
    for name, flag in sorted(getattr(trt.BuilderFlag, "__members__", {}).items()):
        try:
            if config.get_flag(flag):
                names.append(name)
        except Exception:
            continue
    return names


# --------------------------------------------------------------------------- profile


@dataclass(frozen=True)
class InputProfile:
    name: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    def as_dict(self) -> dict[str, list[int]]:
        return {"min": list(self.min), "opt": list(self.opt), "max": list(self.max)}


def optimization_profile(core: ModelConfig, opt_batch: int | None = None) -> list[InputProfile]:
    """min/opt/max shapes per core input: batch 1 .. max_batch_size (opt: ``opt_batch``, default the max)."""
    max_batch = int(core.max_batch_size)
    profiles = []
    for tensor in core.input:
        dims = tuple(int(d) for d in tensor.dims)
        if any(d < 1 for d in dims):
            raise ConfigError(
                f"model '{core.name}': input '{tensor.name}' has variable dims {list(dims)}; the plan profile needs fixed non-batch dims"
            )
        if max_batch == 0:
            if opt_batch is not None:
                raise ConfigError(f"model '{core.name}': max_batch_size is 0 (no batching), so --opt-batch does not apply")
            profiles.append(InputProfile(tensor.name, dims, dims, dims))
            continue
        opt = max_batch if opt_batch is None else opt_batch
        if not 1 <= opt <= max_batch:
            raise ConfigError(f"--opt-batch {opt} is outside 1..{max_batch} (max_batch_size of model '{core.name}')")
        profiles.append(InputProfile(tensor.name, (1, *dims), (opt, *dims), (max_batch, *dims)))
    if not profiles:
        raise ConfigError(f"model '{core.name}' has no inputs")
    return profiles


def optimization_profiles(
    config: ModelConfig, opt_batch: int | None = None, ranges: Sequence[EngineProfile] = ()
) -> list[list[InputProfile]]:
    """Every optimization profile of a model: one profile when its input dims are fixed
    (:func:`optimization_profile`); with dynamic dims, one per ``ranges`` entry (the profiles the code that makes its
    input gives it: :func:`vision_serving.engine_profiles.for_model`), batch 1 .. ``max_batch_size`` before them,
    tuned for the profile's own batch (``opt_batch`` overrides it)."""
    dims = [tuple(int(d) for d in tensor.dims) for tensor in config.input]
    if all(d > 0 for shape in dims for d in shape):
        if ranges:
            raise ConfigError(
                f"model '{config.name}': its input dims are fixed ({[list(d) for d in dims]}); its input's code gives it profiles"
            )
        return [optimization_profile(config, opt_batch)]
    if len(config.input) != 1 or not ranges:
        raise ConfigError(
            f"model '{config.name}': input dims {[list(d) for d in dims]} are dynamic; the plan needs the profiles of its one input "
            "from the code that makes it (a preprocessor's or a task's engine_profiles)"
        )
    max_batch = int(config.max_batch_size)
    tensor, shape = config.input[0], dims[0]
    profiles = []
    for item in ranges:
        opt = item.opt_batch if opt_batch is None else opt_batch
        if max_batch < 1 or not 1 <= opt <= max_batch:
            raise ConfigError(f"model '{config.name}': opt batch {opt} is outside 1..{max_batch} (max_batch_size)")
        fits = len(item.max) == len(shape) and all(d == -1 or lo == hi == d for d, lo, hi in zip(shape, item.min, item.max))
        if not fits:
            raise ConfigError(f"model '{config.name}': profile {list(item.min)}..{list(item.max)} does not fit input dims {list(shape)}")
        profiles.append([InputProfile(tensor.name, (1, *item.min), (opt, *item.opt), (max_batch, *item.max))])
    return profiles


def expected_engine_io(core: ModelConfig) -> dict[str, tuple[str, str, tuple[int, ...]]]:
    """name -> (INPUT|OUTPUT, config dtype name, engine shape with -1 for the batch)."""
    batch: tuple[int, ...] = (-1,) if core.max_batch_size > 0 else ()
    expected = {}
    for kind, tensors in (("INPUT", core.input), ("OUTPUT", core.output)):
        for tensor in tensors:
            expected[tensor.name] = (kind, model_config.dtype_name(tensor.data_type), (*batch, *(int(d) for d in tensor.dims)))
    return expected


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


def compare_engine_io(
    expected: Mapping[str, tuple[str, str, tuple[int, ...]]], actual: Mapping[str, tuple[str, str, tuple[int, ...]]]
) -> list[str]:
    problems = []
    for name in sorted(set(expected) | set(actual)):
        if name not in actual:
            problems.append(f"the core config's {expected[name][0].lower()} '{name}' is not an I/O tensor of the plan")
        elif name not in expected:
            problems.append(f"the plan's {actual[name][0].lower()} '{name}' is not in the core config")
        elif expected[name] != actual[name]:
            problems.append(f"'{name}': config says {expected[name]}, plan has {actual[name]}")
    return problems


# --------------------------------------------------------------------------- provenance


def provenance_path(plan_path: Path) -> Path:
    return provenance.path_for(plan_path)


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


def compare_provenance(provenance: Mapping[str, Any], tensorrt_version: str, gpus: Sequence[GpuFacts]) -> list[str]:
    """Why a plan with this provenance cannot be served here (empty: it can)."""
    problems = []
    built_gpu = provenance.get("gpu", {})
    built_trt = str(provenance.get("tensorrt", {}).get("version", ""))
    built_cc = str(built_gpu.get("compute_capability", ""))
    if not built_trt or not built_cc:
        return ["the provenance has no TensorRT version or compute capability"]
    compatibility = str(built_gpu.get("hardware_compatibility", GPU_MODEL_ONLY))  # older records: TensorRT's default
    if release(built_trt) != release(tensorrt_version):
        problems.append(
            f"plan built with TensorRT {release(built_trt)}, this machine has {release(tensorrt_version)} "
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
        elif compatibility != SAME_COMPUTE_CAPABILITY and gpu.name != built_gpu.get("name"):
            problems.append(
                f"plan built on {built_gpu.get('name', '?')} without hardware compatibility (only that GPU model), "
                f"GPU {index} is {gpu.name}"
            )
    return problems


# --------------------------------------------------------------------------- build


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


def model_dir(pipeline: layout.Pipeline, role: str = CORE_MODEL) -> Path:
    """The folder of the core, or of a second stage."""
    return pipeline.core_dir if role == CORE_MODEL else pipeline.stage_dir(role)


def engine_roles(pipeline: layout.Pipeline) -> list[str]:
    """The models of a pipeline served from a plan: the core, then each second stage (a ``<pipeline>_core_<role>``
    folder whose config.pbtxt is a TensorRT plan), found by the folders alone."""
    roles = [CORE_MODEL]
    prefix = f"{pipeline.name}_core_"
    for folder in sorted(p for p in pipeline.repository.iterdir() if p.is_dir() and p.name.startswith(prefix)):
        role = folder.name[len(prefix) :]
        if (folder / "config.pbtxt").is_file():
            config = model_config.load_config(folder)
            if config.platform == "tensorrt_plan" or config.backend == "tensorrt":
                roles.append(role)
    return roles


def default_onnx(pipeline: layout.Pipeline, role: str = CORE_MODEL) -> Path:
    """The ONNX the precision ladder chose (served_precision.json), else the INT8 Q/DQ model (the core) or the
    FP32 export (a second stage without a ladder record)."""
    if role == CORE_MODEL:
        return pipeline.served_onnx() or pipeline.onnx("int8")
    version_dir = model_dir(pipeline, role) / str(MODEL_VERSION)
    return layout.served_onnx(version_dir) or version_dir / layout.FP32_ONNX


def default_plan(pipeline: layout.Pipeline, role: str = CORE_MODEL) -> Path:
    return model_dir(pipeline, role) / str(MODEL_VERSION) / PLAN_FILENAME


def load_core_config(pipeline: layout.Pipeline, role: str = CORE_MODEL) -> ModelConfig:
    """The production (TensorRT) config of the core (or a second stage), never a ``configs/`` variant. This
    step reads that config alone, not the whole pipeline: the serving image runs ``verify-plan`` without the
    serving library's image stack."""
    folder = model_dir(pipeline, role)
    config: ModelConfig = model_config.load_config(folder)
    if config.platform != "tensorrt_plan" and config.backend != "tensorrt":
        raise ConfigError(f"{folder / 'config.pbtxt'}: platform is {config.platform or config.backend!r}, expected 'tensorrt_plan'")
    return config


def model_profiles(pipeline: layout.Pipeline, role: str, config: ModelConfig | None = None) -> tuple[EngineProfile, ...]:
    """The profiles of a model whose input has dynamic dims, from the code that makes its input; () when its
    ``config`` (default: its TensorRT config) fixes them. Imported here: the serving library's preprocess and task
    code, which the other plan steps do not need."""
    config = load_core_config(pipeline, role) if config is None else config
    if all(int(d) > 0 for tensor in config.input for d in tensor.dims):
        return ()
    from vision_serving import engine_profiles

    return engine_profiles.for_model(pipeline, role)


def _read_provenance(path: Path) -> dict[str, Any] | None:
    record = provenance.Provenance.read(path)
    return record.to_dict() if record is not None else None


def _copy_atomically(source: Path, target: Path) -> None:
    if source.resolve() == target.resolve():
        return
    atomic_write_bytes(target, source.read_bytes())


def build_engine(settings: BuildSettings, log: Log = log_to_stderr) -> BuildResult:
    core = load_core_config(settings.pipeline, settings.role)
    profile_sets = optimization_profiles(core, settings.opt_batch, model_profiles(settings.pipeline, settings.role, core))
    profiles = profile_sets[0]
    if settings.workspace_mib < 1:
        raise BuildError(f"--workspace-mib must be positive, got {settings.workspace_mib}")
    if not settings.onnx.is_file():
        raise BuildError(f"{settings.onnx}: no such ONNX file (run the quantize step first, or pass --onnx)")

    trt = import_tensorrt()
    gpus = query_gpus()
    capability = single_compute_capability(gpus)
    compatibility = hardware_compatibility(trt)
    if compatibility != SAME_COMPUTE_CAPABILITY and len({gpu.name for gpu in gpus}) > 1:
        raise BuildError(
            f"TensorRT {release(trt.__version__)} builds plans for one GPU model and several are visible "
            f"({', '.join(sorted({gpu.name for gpu in gpus}))}): set CUDA_VISIBLE_DEVICES to one kind"
        )
    key = cache_key(trt.__version__, capability, compatibility, gpus[0].name)
    onnx_sha = sha256_file(settings.onnx)
    profile_record: Any = {p.name: p.as_dict() for p in profiles}
    if len(profile_sets) > 1:
        profile_record = [{p.name: p.as_dict() for p in profile} for profile in profile_sets]
    workspace_bytes = settings.workspace_mib << 20
    wanted = {"key": key, "onnx_sha256": onnx_sha, "profile": profile_record, "workspace_bytes": workspace_bytes}
    wanted_hash = input_hash(wanted)

    target_plan = settings.output
    # Content-addressed: <cache>/<key>/<pipeline>/<inputs hash>/model.plan (key: trt<X.Y.Z>-sm<CC>[-<gpu model>]). Two model
    # versions sharing a cache (stable and canary pods on one PVC) never write the same entry, so
    # neither rebuilds over the other nor copies the other's plan between check and copy.
    cached_name = settings.pipeline.name if settings.role == CORE_MODEL else f"{settings.pipeline.name}_{settings.role}"
    entry = cache_entry(settings.cache_dir, key, cached_name, wanted_hash) if settings.cache_dir else None
    build_plan = entry / PLAN_FILENAME if entry else target_plan
    if not settings.force and provenance.is_current(build_plan, wanted_hash):
        current = _read_provenance(provenance_path(build_plan)) or {}
        if build_plan != target_plan:
            _copy_atomically(build_plan, target_plan)
            atomic_write_bytes(provenance_path(target_plan), provenance_path(build_plan).read_bytes())
            log(f"{key}: cached plan {build_plan} is current; copied to {target_plan}")
            return BuildResult("from-cache", target_plan, current)
        log(f"{key}: {target_plan} is up to date (use --force to rebuild)")
        return BuildResult("up-to-date", target_plan, current)

    # Timing is measured per GPU model: its cache never crosses models, even when the plan may.
    timing_cache = settings.timing_cache or ((settings.cache_dir or BUILD_DIR) / key / f"timing-{gpu_slug(gpus[0].name)}.cache")
    log(
        f"building {key} from {settings.onnx} ({len(profiles)} input(s), {len(profile_sets)} profile(s), "
        f"opt batch {profiles[0].opt[0] if profiles[0].opt else '-'})"
    )
    started = time.monotonic()
    plan_bytes, builder_record = _build_serialized(
        trt, settings.onnx, core, profile_sets, workspace_bytes, timing_cache, compatibility, log
    )
    seconds = round(time.monotonic() - started, 1)

    gpu = gpus[0]
    onnx_record = onnx_provenance(settings.onnx)
    record = provenance.Provenance.for_bytes(
        "build-engine",
        wanted_hash,
        build_plan,
        plan_bytes,
        input_hashes={
            "onnx": onnx_sha,
            "onnx_provenance": onnx_record.get("input_hash"),
            "calibration": onnx_record["calibration_hash"],
            "core_config": sha256_file(model_dir(settings.pipeline, settings.role) / "config.pbtxt"),
        },
        tools={"tensorrt": str(trt.__version__)},
        inputs=wanted,
        extra={
            "cache_key": key,
            "tensorrt": {"version": str(trt.__version__), "release": release(trt.__version__), "must_match": "major.minor.patch"},
            "gpu": {
                "name": gpu.name,
                "compute_capability": capability,
                "hardware_compatibility": compatibility,
                "driver_version": gpu.driver_version,
                "cuda_driver_version": gpu.cuda_driver_version,
                "visible_gpus": len(gpus),
            },
            "onnx": {"file": settings.onnx.name, "qdq_nodes": count_qdq_nodes(settings.onnx), "provenance": onnx_record["file"]},
            "profile": profile_record,
            "builder": {**builder_record, "workspace_bytes": workspace_bytes},
            "seconds": seconds,
        },
    )
    atomic_write_bytes(build_plan, plan_bytes)
    record.write(provenance_path(build_plan))
    if build_plan != target_plan:
        _copy_atomically(build_plan, target_plan)
        atomic_write_bytes(provenance_path(target_plan), provenance_path(build_plan).read_bytes())
    log(f"wrote {target_plan} ({len(plan_bytes) / 1e6:.1f} MB, {seconds} s) and {provenance_path(target_plan).name}")
    return BuildResult("built", target_plan, record.to_dict())


def _build_serialized(
    trt: Any,
    onnx_path: Path,
    core: ModelConfig,
    profile_sets: Sequence[Sequence[InputProfile]],
    workspace_bytes: int,
    timing_cache: Path,
    compatibility: str,
    log: Log,
) -> tuple[bytes, dict[str, Any]]:
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags, flag_names = network_creation_flags(trt)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = parser_errors(parser) or ["(the parser reported no details)"]
        raise BuildError(f"{onnx_path}: the TensorRT ONNX parser failed with {len(errors)} error(s): " + " | ".join(errors))

    network_inputs = {network.get_input(i).name: tuple(network.get_input(i).shape) for i in range(network.num_inputs)}
    network_outputs = {network.get_output(i).name for i in range(network.num_outputs)}
    config_inputs = {p.name for p in profile_sets[0]}
    config_outputs = {t.name for t in core.output}
    if set(network_inputs) != config_inputs or network_outputs != config_outputs:
        raise BuildError(
            f"{onnx_path}: I/O names {sorted(network_inputs)} -> {sorted(network_outputs)} differ from the core config's "
            f"{sorted(config_inputs)} -> {sorted(config_outputs)}"
        )

    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_bytes)
    set_hardware_compatibility(trt, config, compatibility)
    for profiles in profile_sets:  # profile i of the plan: an instance_group's `profile: ["i"]` in the Triton config
        profile = builder.create_optimization_profile()
        for item in profiles:
            shape = network_inputs[item.name]
            if len(shape) != len(item.max) or any(d != -1 and not lo <= d <= hi for d, lo, hi in zip(shape, item.min, item.max)):
                raise BuildError(
                    f"{onnx_path}: input '{item.name}' has shape {list(shape)}, the profile is {list(item.min)}..{list(item.max)} (batch first)"
                )
            profile.set_shape(item.name, item.min, item.opt, item.max)
        config.add_optimization_profile(profile)

    cache_bytes = timing_cache.read_bytes() if timing_cache.is_file() else b""
    cache = config.create_timing_cache(cache_bytes)
    if not config.set_timing_cache(cache, ignore_mismatch=False):  # one GPU model's cache: a mismatch is a stale one
        log(f"timing cache {timing_cache} does not match this GPU or TensorRT; starting an empty one")
        config.set_timing_cache(config.create_timing_cache(b""), ignore_mismatch=False)
    log(f"timing cache {timing_cache} ({'loaded ' + str(len(cache_bytes)) + ' bytes' if cache_bytes else 'new'})")

    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise BuildError(f"{onnx_path}: TensorRT could not build the engine (see the TensorRT messages above)")
    atomic_write_bytes(timing_cache, bytes(memoryview(config.get_timing_cache().serialize())))
    record = {
        "strongly_typed": True,
        "network_flags": flag_names,
        "builder_flags": set_builder_flags(trt, config),
        "timing_cache": str(timing_cache),
        "timing_cache_loaded": bool(cache_bytes),
        "hardware_compatibility": compatibility,
    }
    return bytes(memoryview(serialized)), record


# --------------------------------------------------------------------------- verify


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


def deserialize_and_compare(
    plan_path: Path, core: ModelConfig, expected: Sequence[Sequence[InputProfile]] = (), log: Log = log_to_stderr
) -> list[str]:
    """Load the plan and compare its I/O with the config and its profiles' min and max shapes with ``expected``
    (the profiles the code that makes its input gives it: a plan built for other shapes is refused); log each
    profile's activation memory as TensorRT reports it (what a context reserves for it)."""
    trt = import_tensorrt()
    logger = trt.Logger(trt.Logger.ERROR)
    engine = trt.Runtime(logger).deserialize_cuda_engine(plan_path.read_bytes())
    if engine is None:
        return [f"trt.Runtime could not deserialize {plan_path} (see the TensorRT messages above)"]
    actual = {}
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        kind = "INPUT" if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else "OUTPUT"
        dtype = engine.get_tensor_dtype(name)
        actual[name] = (kind, TRT_DTYPES.get(dtype.name, dtype.name), tuple(int(d) for d in engine.get_tensor_shape(name)))
    problems = compare_engine_io(expected_engine_io(core), actual)
    count = int(engine.num_optimization_profiles)
    if expected and count != len(expected):
        problems.append(f"the plan has {count} optimization profile(s), its input's code gives {len(expected)}")
    for tensor in core.input:
        if tensor.name not in actual:
            continue
        for index in range(count):
            shapes = engine.get_tensor_profile_shape(tensor.name, index)
            low, high = tuple(int(d) for d in shapes[0]), tuple(int(d) for d in shapes[2])
            if core.max_batch_size > 0 and high[0] < core.max_batch_size:
                problems.append(
                    f"'{tensor.name}': the plan's profile {index} allows batch {high[0]}, the config's max_batch_size is {core.max_batch_size}"
                )
            wanted = next((item for item in expected[index] if item.name == tensor.name), None) if index < len(expected) else None
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
    built = provenance.Provenance.read(provenance_path(plan_path))
    if built is None:
        raise VerificationError(
            f"{provenance_path(plan_path)}: missing or unreadable provenance; rebuild the plan with python -m builders build-engine"
        )
    problems = []
    record = built.to_dict()
    if built.output_sha256 != sha256_file(plan_path):
        problems.append("the plan's sha256 differs from its provenance (replaced or corrupted)")
    version, source = current_tensorrt_version(tensorrt_version)
    visible = list(gpus) if gpus is not None else query_gpus()
    problems += compare_provenance(record, version, visible)
    if not problems and deserialize:
        core = load_core_config(pipeline, role)
        problems += deserialize_and_compare(plan_path, core, optimization_profiles(core, None, model_profiles(pipeline, role, core)), log)
    if problems:
        raise VerificationError(f"{plan_path}: " + "; ".join(problems) + " -> rebuild it on this node (python -m builders build-engine)")
    log(
        f"{plan_path}: OK for TensorRT {release(version)} ({source}) on {len(visible)} GPU(s) of compute capability {visible[0].compute_capability}"
    )
    return record


# --------------------------------------------------------------------------- command line (each step owns its arguments)


def each_pipeline(args: argparse.Namespace, step: Callable[[layout.Pipeline], object], log: Log = log_to_stderr) -> int:
    """``step`` on the chosen pipeline, or on every pipeline in turn: one failing does not stop the others, so one
    run names every pipeline that cannot be served; then the first failure's exit code, with all of them in one line.

    The pod is the unit that fails (docs/design.md, "One pipeline fails, the pod fails"): a pod that served only some
    pipelines would pass its readiness probe and let a rolling update replace the pods that still serve them all."""
    failures: list[tuple[str, BuildError]] = []
    repositories = arguments.chosen_repositories(args)
    for repository in repositories:
        pipeline = layout.Pipeline.at(repository)
        try:
            step(pipeline)
        except BuildError as error:
            if len(repositories) == 1:
                raise
            log(f"{pipeline.name}: {arguments.one_line(error)}")
            failures.append((pipeline.name, error))
    if failures:
        names = ", ".join(name for name, _ in failures)
        reasons = "; ".join(f"{name}: {arguments.one_line(error)}" for name, error in failures)
        raise PipelinesFailed(
            f"{len(failures)} of {len(repositories)} pipelines cannot be served ({names}), so this pod serves none: {reasons}",
            failures[0][1].exit_code,
        )
    return 0


def run_build_engine(args: argparse.Namespace) -> int:
    """The core's plan (--onnx / --output / --opt-batch apply to it), then each second stage's from its own default ONNX."""

    def build(pipeline: layout.Pipeline) -> None:
        for role in engine_roles(pipeline):
            core = role == CORE_MODEL
            build_engine(
                BuildSettings(
                    pipeline=pipeline,
                    onnx=(args.onnx if core else None) or default_onnx(pipeline, role),
                    output=(args.output if core else None) or default_plan(pipeline, role),
                    role=role,
                    opt_batch=args.opt_batch if core else None,
                    workspace_mib=args.workspace_mib,
                    timing_cache=args.timing_cache,
                    cache_dir=args.cache_dir,
                    force=args.force,
                )
            )

    return each_pipeline(args, build)


def add_build_engine_step(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "build-engine",
        parents=[common],
        help="build each core's TensorRT plan (strongly typed, at the precision the ladder chose) and its provenance",
        description=(
            f"Build <pipeline>_core/1/{PLAN_FILENAME} (every pipeline's, without --pipeline) for this GPU and TensorRT (10.8+ or 11) "
            f"from the ONNX the precision ladder chose (served_precision.json; else {QDQ_ONNX_FILENAME}): "
            "a strongly typed network, batch profile 1..max_batch_size of <pipeline>_core/config.pbtxt, a timing cache, "
            f"and {PLAN_FILENAME}.json beside the plan. Skips the build when the plan is current. Needs TensorRT "
            "(the builder image docker/builder.Dockerfile) and a GPU."
        ),
    )
    parser.add_argument(
        "--onnx", type=Path, metavar="PATH", help="the Q/DQ ONNX (default: the precision the ladder chose, served_precision.json)"
    )
    parser.add_argument("--output", type=Path, metavar="PATH", help=f"where to write the plan (default: <pipeline>_core/1/{PLAN_FILENAME})")
    parser.add_argument(
        "--opt-batch",
        type=arguments.positive_int,
        metavar="N",
        help="the core's profiles' optimal batch (default: a dynamic-shape model's own, else max_batch_size)",
    )
    parser.add_argument(
        "--workspace-mib",
        type=arguments.positive_int,
        default=DEFAULT_WORKSPACE_MIB,
        metavar="MIB",
        help="workspace memory-pool limit (default: %(default)s)",
    )
    parser.add_argument("--timing-cache", type=Path, metavar="PATH", help="timing cache file, loaded if present and saved after")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help="plan cache: build into DIR/trt<X.Y.Z>-sm<CC>[-<gpu model>]/<pipeline>/<inputs hash>/ (skipped when current there), "
        "then copy to --output",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.set_defaults(run=run_build_engine)


def run_verify_plan(args: argparse.Namespace) -> int:
    def verify(pipeline: layout.Pipeline) -> None:
        for role in engine_roles(pipeline):
            plan = (args.plan if role == CORE_MODEL else None) or default_plan(pipeline, role)
            verify_plan(plan, pipeline, deserialize=args.deserialize, tensorrt_version=args.tensorrt_version, role=role)

    return each_pipeline(args, verify)


def add_verify_plan_step(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "verify-plan",
        parents=[common],
        help="check a plan's provenance against this GPU and TensorRT (exit 1 on mismatch)",
        description=(
            "Compare model.plan.json with the machine: the plan's sha256, the TensorRT release (major.minor.patch must "
            "match; the build number may differ) and the compute capability of every visible GPU. For a Kubernetes "
            "init container: one line and exit 1 on a mismatch, exit 0 when the plan can be served."
        ),
    )
    parser.add_argument("--plan", type=Path, metavar="PATH", help="the plan (default: <pipeline>_core/1/model.plan)")
    parser.add_argument(
        "--deserialize", action="store_true", help="also load it with trt.Runtime and compare its I/O with <pipeline>_core/config.pbtxt"
    )
    parser.add_argument(
        "--tensorrt-version", metavar="X.Y.Z", help="the serving TensorRT version (default: the tensorrt module, else libnvinfer.so.X.Y.Z)"
    )
    parser.set_defaults(run=run_verify_plan)


# --------------------------------------------------------------------------- the images: the same TensorRT release


# What a user changes to pick the images (versions.env, read by docker compose --env-file and passed to both
# Dockerfiles as their one build arg): the images are nvcr.io/nvidia/{tensorrt,tritonserver}:${TRITON_RELEASE}-py3.
RELEASE_VARIABLE = "TRITON_RELEASE"


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


def run_same_tensorrt(args: argparse.Namespace) -> int:
    if args.server_version:
        server, where = args.server_version, "--server-version"
    elif args.server_library is not None:
        server, where = tensorrt_version_from_names(args.server_library), "the server image's libnvinfer files"
    else:
        server, where = tensorrt_version_from_libraries(), f"{', '.join(library_dirs())}"
    if server is None:
        raise BuildError(f"no libnvinfer.so.X.Y.Z in {where}: run this in the server image, or pass --server-version or --server-library")
    problem = release_mismatch(args.builder_version, server)
    if problem is not None:
        raise VerificationError(problem)
    print(f"same-tensorrt: builder {args.builder_version} and server {server}: TensorRT {release(server)} in both", file=sys.stderr)
    return 0


def add_same_tensorrt_step(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "same-tensorrt",
        help="check that the builder image's TensorRT release is the server image's (exit 1 when not)",
        description=(
            "Compare the builder image's tensorrt.__version__ with the server image's libnvinfer.so.X.Y.Z (major.minor.patch). "
            "docker/server.Dockerfile runs it while it builds, so a server image that could not load the builder's plans is "
            "never built; docker/check-tensorrt.sh runs it on the two upstream images before you build."
        ),
    )
    parser.add_argument("--builder-version", required=True, metavar="X.Y.Z", help="tensorrt.__version__ in the builder image")
    parser.add_argument("--server-version", metavar="X.Y.Z", help="the server image's TensorRT (default: libnvinfer.so.X.Y.Z here)")
    parser.add_argument(
        "--server-library",
        action="append",
        metavar="NAME",
        help="a libnvinfer.so.* file name found in the server image (repeat for each; symlinks included): the release is "
        "read from the versioned one (docker/check-tensorrt.sh)",
    )
    parser.set_defaults(run=run_same_tensorrt)


# --------------------------------------------------------------------------- entry point


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m builders.tensorrt_engine {build-engine,verify-plan,same-tensorrt} ...``: the plan steps of
    ``python -m builders`` (and the images' TensorRT check), without building the other steps' parsers (which import onnx): the
    server image runs ``verify-plan`` with only the serving requirements installed."""
    parser = argparse.ArgumentParser(prog="python -m builders.tensorrt_engine", description="Build or verify the core's TensorRT plan.")
    subparsers = parser.add_subparsers(title="steps", dest="step", required=True, metavar="STEP")
    common = arguments.common_options()
    add_build_engine_step(subparsers, common)
    add_verify_plan_step(subparsers, common)
    add_same_tensorrt_step(subparsers, common)
    return arguments.run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
