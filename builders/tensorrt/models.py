"""The models of a pipeline that are served from a plan, their files and configs, and the plan cache's layout.

A pipeline serves its core from a plan, and each second stage whose folder (``<pipeline>_core_<role>``, a
recipe's ``[stages.<role>]``) has a TensorRT config. A model's plan is built from the ONNX its precision ladder
chose (``served_precision.json``). The plan cache is content-addressed: ``<cache>/<key>/<model>/<inputs hash>/``,
the key naming the TensorRT release and the GPU (:func:`cache_key`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from builders import provenance
from builders.tensorrt import discovery, interface
from vision_serving import layout, model_config
from vision_serving.model_config import ConfigError

if TYPE_CHECKING:
    from vision_serving.tasks.base import EngineProfile

CORE_MODEL = "core"
MODEL_VERSION = layout.MODEL_VERSION
QDQ_ONNX_FILENAME = layout.INT8_ONNX
PLAN_FILENAME = layout.PLAN
BUILD_DIR = layout.BUILD_DIR / "tensorrt"
# Triton's ModelConfig protobuf message (vision_serving/protos, generated): it has no type stubs.
ModelConfig: TypeAlias = Any


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


def provenance_path(plan_path: Path) -> Path:
    return provenance.path_for(plan_path)


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


def cached_name(pipeline: layout.Pipeline, role: str = CORE_MODEL) -> str:
    """A model's folder in the plan cache: the pipeline's name for its core, ``<pipeline>_<role>`` for a stage."""
    return pipeline.name if role == CORE_MODEL else f"{pipeline.name}_{role}"


def cache_key(
    tensorrt_version: str, compute_capability: str, compatibility: str = interface.SAME_COMPUTE_CAPABILITY, gpu_name: str = ""
) -> str:
    """Where a plan for this TensorRT release and GPU lives in a plan cache: by compute capability when the plan
    is built for any GPU of it, else by GPU model too (a plan cache is shared by every node of a cluster)."""
    key = f"trt{discovery.release(tensorrt_version)}-sm{compute_capability.replace('.', '')}"
    return key if compatibility == interface.SAME_COMPUTE_CAPABILITY else f"{key}-{discovery.gpu_slug(gpu_name)}"


def cache_entry(cache_dir: Path, key: str, pipeline: str, inputs_hash: str) -> Path:
    """The plan cache folder of one build: TensorRT release and GPU (``key``), pipeline, and the hash
    of the build's inputs (ONNX sha256, profile, workspace): another model version is another entry."""
    return cache_dir / key / pipeline / inputs_hash[:16]


def timing_cache_path(cache_dir: Path | None, key: str, gpu_name: str) -> Path:
    """TensorRT's timing cache for one GPU model: timing is measured per GPU model, so its cache never crosses
    models even when the plan may (``<cache>/<key>/timing-<gpu model>.cache``)."""
    return (cache_dir or BUILD_DIR) / key / f"timing-{discovery.gpu_slug(gpu_name)}.cache"
