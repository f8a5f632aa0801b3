"""Capacity planner: the vCPUs and memory per pod, the pods, and how far one GPU is used, for a pipeline,
an upload mix and a target throughput.

    python -m benchmarks.capacity --pipeline image_classifier --mix web --target 2000 [--gpu-images-per-s 3000]
    python -m benchmarks.capacity --all [--gpu-images-per-s 3000]     # every pipeline x mix (docs/sizing.md's table)
    python -m benchmarks.capacity --measure                           # measure this machine first

On a GPU node the core is TensorRT and fast; what each image costs the pod's CPUs is the CPU steps
and Triton's own work around them. The planner's inputs, measured on the machine it runs on by
``--measure`` and recorded with its CPU model and flags (``benchmarks/results/capacity.json``):

- **step costs**: CPU ms per image of the served decode, preprocessing (resize, crop, layout) and
  postprocessing (its own code: the second-stage models a two-stage pipeline's postprocess calls run on
  the GPU like the core), and the drift statistics the configs enable, one thread (as each sized worker
  runs), per upload kind (thumbnail, web, 12 MP phone photos: ``benchmarks/images.py``), through the
  served code (``benchmarks.steps.served_costs``, the per-step costs of ``python -m benchmarks.steps``);
- **serving overhead**: the local tritonserver under load (web photos, one per gRPC request), its
  own process and each preprocess/postprocess instance's CPU per request, minus the same steps
  in-process: gRPC, the ensemble scheduler, the Python backend's shared-memory hand-over (and a
  postprocess's BLS requests to its second stages). The cores' own CPU is left out (on the GPU it is
  TensorRT's launch cost);
- **memory**: resident memory of each Python step's instance after the load (the largest seen), less
  the shared memory the tensors travel through (the pod's /dev/shm volume, counted once).

- **shared memory**: per Python step, the most bytes one request moves through the Python backend's shared memory
  (``--measure-shm``, also part of ``--measure``): its input and output tensors and, for a postprocess that calls
  second stages, every BLS request's input and output (a BLS output comes back into the stub's region), measured in
  process through the served code on every upload kind and the text mix.

The pod's ``/dev/shm`` holds one region per Python step instance, grown to the most that instance ever held at
once and never shrunk (python_backend's ``SharedMemoryManager::GrowIfNeeded``); an instance runs one batch at a time.
So ``/dev/shm`` = the sum over every pipeline's sized instances of ``max_batch_size`` x the step's largest request,
plus each region's first 1 MiB: every instance at its largest batch of its largest request (:func:`dshm_gib`).

**GPU memory** (``--gpu-memory``): every plan of the pod, estimated from shapes by
:mod:`builders.engine_memory` (activations at each profile's maximum, I/O buffers, weights; an estimate, recorded
in ``benchmarks/results/gpu_memory.json``), plus an allowance for the CUDA context and TensorRT's runtime. A
model whose instance runs several profiles (shapes that cannot share a batch, so their executions queue on the
instance's one stream) gets two instances where the pod, at 1.5 x the estimate, still fits ``--gpu-memory-gib`` at
90 % (Triton's optimization guide: two instances let one's transfers overlap the other's compute), else one; measure
with ``perf_analyzer`` on a GPU to go further (:func:`choose_instances`).

Planning, for ``--utilization`` U of each vCPU (headroom for bursts and the kernel, default 0.7):
``images/s per vCPU = U x 1000 / (step ms + overhead ms)``; a pod with V vCPUs and one GPU serves
``min(V x that, GPU images/s)``; pods = target / that, rounded up; memory per pod = the sized
instances (``vision_serving.cpu_sizing`` on V CPUs) of every pipeline x their measured memory,
plus the server's own. The GPU figure is yours to give (``perf_analyzer`` on the core's plan).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from benchmarks import cpu, images
from vision_serving import cpu_sizing, layout, model_config

# The measuring imports the served code (onnxruntime), the load generator and the server launcher
# inside the functions that measure: planning from measured costs needs none of them.

RESULTS = layout.REPOSITORY_ROOT / "benchmarks" / "results" / "capacity.json"
KINDS = ("thumbnail", "web", "phone")
MIXES = (*KINDS, "mix")
DEFAULT_GPU_IMAGES_PER_S = 3000.0
DEFAULT_UTILIZATION = 0.7
DEPLOYMENT = layout.REPOSITORY_ROOT / "k8s" / "server" / "deployment.yaml"
CPU_STEPS = ("preprocess", "postprocess")
# The served steps' costs by where they run (benchmarks.steps.served_costs's names): the GPU pixel path moves the first.
CPU_PREPROCESS = ("decode", "preprocess", "preprocess_drift")
CPU_POSTPROCESS = ("postprocess", "postprocess_drift")
GPU_PIXELS = layout.REPOSITORY_ROOT / "benchmarks" / "results" / "gpu_pixels.json"
TILING = layout.REPOSITORY_ROOT / "benchmarks" / "results" / "tiling" / "tiling.json"
# Host memory of the CUDA context, TensorRT's runtime and the plans' host copies in the server
# process on a GPU: not measurable here (no GPU), an allowance the Deployment adds (docs/sizing.md).
CUDA_HOST_GIB = 3.0
GPU_MEMORY = layout.REPOSITORY_ROOT / "benchmarks" / "results" / "gpu_memory.json"
# The GPU a pod is planned for (the smallest of the 16 to 24 GiB inference GPUs), the share of it planned (the rest:
# fragmentation, TensorRT's tactic scratch), and the CUDA context and TensorRT runtime of the server process (not
# estimable from shapes: an allowance).
DEFAULT_GPU_MEMORY_GIB = 16.0
GPU_MEMORY_SHARE = 0.9
GPU_RUNTIME_GIB = 1.0
# The estimate has not been checked against TensorRT's own figures (no GPU where it was written): the instances are
# chosen for 1.5 x the estimate. verify-plan --deserialize logs each profile's real activations on a GPU.
ESTIMATE_MARGIN = 1.5
# Instances worth giving a model whose one instance runs several profiles: two let one instance's copies overlap the
# other's compute (Triton's optimization guide, "Model Instances"); more only by measurement.
PLANNED_INSTANCES = 2
# Each Python step instance's shared memory region starts at 1 MiB (the backend's shm-default-byte-size).
SHM_REGION_START = 1 << 20
SHM_KINDS = (*KINDS, "text")
# Load before the measured window: a fresh server's first seconds cost more CPU per request
# (first imports and drift tests in each instance): 10.3 against 6.5-6.9 ms in the classifier's preprocess.
SERVING_WARMUP_S = 10.0


# ---------------------------------------------------------------------------- planning


def cpu_quantity(text: str) -> float:
    """A Kubernetes CPU quantity (``"8"``, ``"7500m"``) in CPUs."""
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def deployment_vcpus(path: Path = DEPLOYMENT) -> float:
    """The triton container's CPU limit in the Deployment: what each pod's sizing reads at start."""
    document = yaml.safe_load(path.read_text())
    (container,) = [c for c in document["spec"]["template"]["spec"]["containers"] if c["name"] == "triton"]
    return cpu_quantity(str(container["resources"]["limits"]["cpu"]))


@dataclass(frozen=True)
class Plan:
    pipeline: str
    mix: str
    cpu_ms_per_image: float
    images_per_s_per_vcpu: float
    vcpus_per_1000: float
    vcpus_to_fill_gpu: float
    vcpus_per_pod: float
    memory_gib_per_pod: float
    dshm_gib_per_pod: float | None  # None: the shared memory was not measured
    pod_images_per_s: float
    target: float
    pods: int
    gpu_utilization: float
    bottleneck: str
    core_passes_per_image: int = 1  # a tiled pipeline's views per photo: each is a pass through the core


def mix_shares(mix: str) -> dict[str, float]:
    if mix in KINDS:
        return {mix: 1.0}
    if mix == "mix":
        return dict(images.MIX_SHARES)
    raise ValueError(f"unknown upload mix {mix!r}; known: {', '.join(MIXES)}")


def cpu_ms_per_image(costs: dict[str, Any], pipeline: str, mix: str, gpu_pixels: dict[str, Any] | None = None) -> float:
    """The pod's CPU ms per image of ``pipeline`` for ``mix``: its CPU steps and the serving overhead; with
    ``gpu_pixels`` (``python -m benchmarks.gpu_pixels --measure``'s run), the GPU pixel path's (:func:`pixel_path_ms`)."""
    if gpu_pixels is not None:
        return sum(pixel_path_ms(gpu_pixels, costs, pipeline, mix, "gpu").values())
    measured = costs["pipelines"][pipeline]
    steps = sum(share * sum(measured["steps"][kind].values()) for kind, share in mix_shares(mix).items())
    return steps + measured["overhead_ms"]


def pixel_path_ms(recorded: dict[str, Any], costs: dict[str, Any], pipeline: str, mix: str, mode: str) -> dict[str, float]:
    """CPU ms per image by part (preprocess, postprocess, hops) of ``pipeline`` for ``mix`` with its pixels on the
    ``mode`` (cpu or gpu), from one run of ``python -m benchmarks.gpu_pixels --measure`` (both modes side by side)
    and the serving overhead of ``costs`` (the hops, the same in both modes)."""
    if pipeline not in recorded["pipelines"]:
        raise ValueError(f"no GPU pixel path costs for pipeline {pipeline!r}; measured: {', '.join(recorded['pipelines'])}")
    parts = {"preprocess": 0.0, "postprocess": 0.0}
    for kind, share in mix_shares(mix).items():
        measured = recorded["pipelines"][pipeline][kind]
        before = measured["cpu_mode"]
        own = sum(before.get(step, 0.0) for step in CPU_PREPROCESS) if mode == "cpu" else sum(measured["gpu_mode"].values())
        parts["preprocess"] += share * own
        parts["postprocess"] += share * sum(before.get(step, 0.0) for step in CPU_POSTPROCESS)
    parts["hops"] = costs["pipelines"][pipeline]["overhead_ms"]
    return parts


def tiled_view_ms(recorded: dict[str, Any]) -> float:
    """The Python steps' CPU ms per view past the first of a tiled pipeline (cutting a view, answering and merging it),
    from ``python -m benchmarks.tiling``'s run: the tiled pipeline's preprocess and postprocess CPU per photo at its
    most views less its untiled photo's, over the added views."""
    rows = [row for row in recorded["rows"] if row.get("table") == "cost" and row["system"] == "tiled pipeline"]
    untiled = next((row for row in rows if row["tiles"] == "untiled"), None)
    if untiled is None or len(rows) < 2:
        raise ValueError("the tiling run has no untiled and tiled rows of the tiled pipeline")
    most = max(rows, key=lambda row: row["core_items"])
    added = most["preprocess_cpu_ms"] + most["postprocess_cpu_ms"] - untiled["preprocess_cpu_ms"] - untiled["postprocess_cpu_ms"]
    return max(0.0, added) / (most["core_items"] - untiled["core_items"])


def memory_gib_per_pod(costs: dict[str, Any], vcpus: float) -> float:
    """Every pipeline's Python step instances, sized to ``vcpus``, x their measured memory, and the server."""
    mib = costs["server_mib"]
    for measured in costs["pipelines"].values():
        for step, instance in measured["instances"].items():
            count = instance["count"]
            if instance["sized"]:
                count = cpu_sizing.step_layout(vcpus, instance["cpu_share"], instance["max_instances"]).instances
            mib += count * measured["instance_mib"][step]
    return mib / 1024


def dshm_gib(costs: dict[str, Any], vcpus: float) -> float:
    """The pod's /dev/shm: every Python step instance, sized to ``vcpus``, holding its largest batch
    (``max_batch_size``) of the step's largest measured request at once, plus each region's first MiB."""
    total = 0
    for name, measured in costs["pipelines"].items():
        if "shm" not in measured:
            raise ValueError(f"no shared-memory measurement for pipeline {name!r} (run python -m benchmarks.capacity --measure-shm)")
        for step, instance in measured["instances"].items():
            count = instance["count"]
            if instance["sized"]:
                count = cpu_sizing.step_layout(vcpus, instance["cpu_share"], instance["max_instances"]).instances
            total += count * (instance["max_batch_size"] * measured["shm"][step]["bytes"] + SHM_REGION_START)
    return total / 2**30


def gpu_pod_bytes(models: list[dict[str, Any]], counts: dict[str, int] | None = None) -> int:
    """Every plan's estimated bytes on the pod's GPU (``counts``: instances by model, else each config's)."""
    from builders.engine_memory import ModelMemory

    total = 0
    for data in models:
        model = ModelMemory.from_dict(data)
        total += model.with_instances((counts or {}).get(model.model, model.instances)).total
    return total


def choose_instances(models: list[dict[str, Any]], gpu_memory_gib: float = DEFAULT_GPU_MEMORY_GIB) -> dict[str, int]:
    """Instances of each model whose instance runs several profiles: two where the pod (every other model at its
    config's count, these chosen smallest first), at ``ESTIMATE_MARGIN`` x the estimate, still fits ``gpu_memory_gib``
    at 90 % with the runtime allowance, else one. Models with one profile keep their config's count (not in the result)."""
    from builders.engine_memory import ModelMemory

    budget = (GPU_MEMORY_SHARE * gpu_memory_gib - GPU_RUNTIME_GIB) * 2**30 / ESTIMATE_MARGIN
    planned = sorted((ModelMemory.from_dict(data) for data in models if len(data["profiles"]) > 1), key=lambda m: m.per_instance)
    counts = {model.model: 1 for model in planned}
    for model in planned:
        trial = {**counts, model.model: PLANNED_INSTANCES}
        if gpu_pod_bytes(models, trial) <= budget:
            counts = trial
    return counts


def load_gpu_memory(path: Path = GPU_MEMORY) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def estimate_gpu_memory(command: str, repository: Path = layout.MODEL_REPOSITORY) -> dict[str, Any]:
    """Every plan's GPU memory estimated from shapes (builders.engine_memory), with the configs' instances."""
    from builders import engine_memory

    return {
        "command": command,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "estimate": "from ONNX shapes, not measured: activations = the peak of live intermediate tensors at each profile's "
        "max shape and max_batch_size (builders/engine_memory.py)",
        "gpu_runtime_gib": GPU_RUNTIME_GIB,
        "models": [model.to_dict() for model in engine_memory.pod_models(repository)],
    }


def render_gpu_memory(estimated: dict[str, Any], gpu_memory_gib: float = DEFAULT_GPU_MEMORY_GIB) -> str:
    from builders.engine_memory import ModelMemory

    mib = 2**20
    lines = [
        f"GPU memory per pod, an ESTIMATE from shapes (`{estimated['command']}`, {estimated['created_at']}): TensorRT activations "
        "at each profile's max shape and max_batch_size (peak of live tensors in the ONNX graph), I/O buffers, weights.",
        "",
        "| model | precision | profiles: activations at max (MiB) | contexts (MiB) | I/O (MiB) | weights (MiB) | per instance (MiB) | instances | total (MiB) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    models = [ModelMemory.from_dict(data) for data in estimated["models"]]
    for m in models:
        profiles = ", ".join(f"{p.name} {p.activations / mib:.0f}" for p in m.profiles)
        strategy = "" if len(m.profiles) == 1 else f" ({m.strategy})"
        lines.append(
            f"| {m.model} | {m.precision} | {profiles} | {m.contexts / mib:.0f}{strategy} | {m.io_buffers / mib:.0f} | {m.weights / mib:.1f} | "
            f"{m.per_instance / mib:.0f} | {m.instances} | {m.total / mib:.0f} |"
        )
    total = gpu_pod_bytes(estimated["models"]) / 2**30
    needed = total + estimated["gpu_runtime_gib"]
    budget = GPU_MEMORY_SHARE * gpu_memory_gib
    chosen = choose_instances(estimated["models"], gpu_memory_gib)
    lines += [
        "",
        f"Pod: {total:.1f} GiB of plans + {estimated['gpu_runtime_gib']:g} GiB CUDA context and TensorRT runtime (an allowance) = "
        f"{needed:.1f} GiB; a {gpu_memory_gib:g} GiB GPU planned at {100 * GPU_MEMORY_SHARE:.0f} % ({budget:.1f} GiB): "
        f"{'fits' if needed <= budget else 'DOES NOT FIT'}.",
        f"Instances of the models whose instance runs several profiles (two where the pod fits at {ESTIMATE_MARGIN:g} x the "
        "estimate, else one): "
        + ", ".join(f"{name} {count} (config: {next(m.instances for m in models if m.model == name)})" for name, count in chosen.items()),
    ]
    return "\n".join(lines)


def plan(
    costs: dict[str, Any],
    pipeline: str,
    mix: str,
    target: float,
    gpu_images_per_s: float = DEFAULT_GPU_IMAGES_PER_S,
    vcpus_per_pod: float | None = None,
    utilization: float = DEFAULT_UTILIZATION,
    gpu_pixels: dict[str, Any] | None = None,
    tiles: int = 1,
    tiling: dict[str, Any] | None = None,
) -> Plan:
    """``tiles``: the views per photo of a tiled pipeline (docs/tiling.md): each a core pass (the GPU serves
    ``gpu_images_per_s / tiles`` photos), and the Python steps' CPU per added view from ``tiling``
    (:func:`tiled_view_ms`) on top of the untiled photo's."""
    if pipeline not in costs["pipelines"]:
        raise ValueError(f"no measured costs for pipeline {pipeline!r}; measured: {', '.join(costs['pipelines'])} (run --measure)")
    vcpus_per_pod = deployment_vcpus() if vcpus_per_pod is None else vcpus_per_pod
    if min(target, gpu_images_per_s, vcpus_per_pod) <= 0 or not 0 < utilization <= 1:
        raise ValueError("target, GPU images/s and vCPUs per pod must be positive, and the utilization in (0, 1]")
    if tiles < 1 or (tiles > 1 and tiling is None):
        raise ValueError("tiles must be at least 1, and a tiled plan needs the tiling run's costs")
    ms = cpu_ms_per_image(costs, pipeline, mix, gpu_pixels) + (tiles - 1) * (tiled_view_ms(tiling) if tiling is not None else 0.0)
    per_vcpu = utilization * 1000.0 / ms
    cpu_side = vcpus_per_pod * per_vcpu
    gpu_photos_per_s = gpu_images_per_s / tiles
    pod = min(cpu_side, gpu_photos_per_s)
    pods = max(1, math.ceil(target / pod - 1e-9))
    return Plan(
        pipeline=pipeline,
        mix=mix,
        cpu_ms_per_image=ms,
        images_per_s_per_vcpu=per_vcpu,
        vcpus_per_1000=1000.0 / per_vcpu,
        vcpus_to_fill_gpu=gpu_photos_per_s / per_vcpu,
        vcpus_per_pod=vcpus_per_pod,
        memory_gib_per_pod=memory_gib_per_pod(costs, vcpus_per_pod),
        dshm_gib_per_pod=dshm_gib(costs, vcpus_per_pod) if all("shm" in m for m in costs["pipelines"].values()) else None,
        pod_images_per_s=pod,
        target=target,
        pods=pods,
        gpu_utilization=target / pods / gpu_photos_per_s,
        bottleneck="CPU" if cpu_side < gpu_photos_per_s else "GPU",
        core_passes_per_image=tiles,
    )


def render_plan(result: Plan, costs: dict[str, Any], gpu_images_per_s: float) -> str:
    tiled = (
        [
            f"  tiled:             {result.core_passes_per_image} core passes per photo ({gpu_images_per_s / result.core_passes_per_image:.0f} photos/s per GPU)"
        ]
        if result.core_passes_per_image > 1
        else []
    )
    return "\n".join(
        [
            f"{result.pipeline}, {result.mix} uploads, target {result.target:g} images/s, one GPU of {gpu_images_per_s:g} images/s per pod",
            *tiled,
            f"  CPU per image:     {result.cpu_ms_per_image:.2f} ms (steps + serving overhead), measured on {cpu.describe(costs['machine'])}",
            f"  per vCPU:          {result.images_per_s_per_vcpu:.0f} images/s at {100 * (result.images_per_s_per_vcpu * result.cpu_ms_per_image / 1000):.0f} % use",
            f"  vCPUs:             {result.vcpus_per_1000:.1f} per 1000 images/s; {result.vcpus_to_fill_gpu:.1f} to keep one GPU busy",
            f"  per pod:           {result.vcpus_per_pod:g} vCPUs, {result.memory_gib_per_pod:.1f} GiB memory (every pipeline's sized instances)"
            + (f", {result.dshm_gib_per_pod:.1f} GiB /dev/shm" if result.dshm_gib_per_pod is not None else ", /dev/shm not measured"),
            f"  one pod serves:    {result.pod_images_per_s:.0f} images/s ({result.bottleneck}-bound)",
            f"  pods needed:       {result.pods}",
            f"  GPU use:           {100 * result.gpu_utilization:.0f} % of each pod's GPU",
        ]
    )


def render_table(costs: dict[str, Any], gpu_images_per_s: float, vcpus_per_pod: float | None, utilization: float) -> str:
    vcpus_per_pod = deployment_vcpus() if vcpus_per_pod is None else vcpus_per_pod
    lines = [
        f"Measured on {cpu.describe(costs['machine'])}, {costs['created_at']} (`{costs['command']}`); "
        f"{100 * utilization:.0f} % of each vCPU used; one GPU of {gpu_images_per_s:g} images/s per pod of {vcpus_per_pod:g} vCPUs.",
        "",
        "| pipeline | uploads | CPU ms/image | images/s per vCPU | vCPUs per 1000 images/s | vCPUs to fill the GPU | "
        "one pod: images/s | GPU use | memory per pod | /dev/shm per pod |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for pipeline in costs["pipelines"]:
        for mix in MIXES:
            p = plan(costs, pipeline, mix, 1000.0, gpu_images_per_s, vcpus_per_pod, utilization)
            lines.append(
                f"| {pipeline} | {mix} | {p.cpu_ms_per_image:.2f} | {p.images_per_s_per_vcpu:.0f} | {p.vcpus_per_1000:.1f} | "
                f"{p.vcpus_to_fill_gpu:.1f} | {p.pod_images_per_s:.0f} ({p.bottleneck}) | "
                f"{100 * p.pod_images_per_s / gpu_images_per_s:.0f} % | {p.memory_gib_per_pod:.1f} GiB | "
                + (f"{p.dshm_gib_per_pod:.1f} GiB |" if p.dshm_gib_per_pod is not None else "– |")
            )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- measuring


def step_costs(pipeline: layout.Pipeline, repeats: int) -> dict[str, dict[str, float]]:
    """CPU ms per image of the CPU steps, per upload kind, through the served code with the served
    thread settings (one OpenCV thread, as each sized worker runs)."""
    from benchmarks import inprocess, steps

    served = inprocess.load(pipeline)
    return {kind: steps.served_costs(served, [p.data for p in images.upload_mix(kind)], repeats, core=False) for kind in KINDS}


def resident_kib(status: str) -> int:
    """A process's resident memory from its ``/proc/PID/status``, less its shared memory (``RssShmem``): the
    Python backend's tensors travel through regions in /dev/shm that the server and each stub both map, and
    the pod counts them once, as its /dev/shm volume (``VmRSS`` where the kernel gives no split)."""
    fields = {
        line.split(":")[0]: int(line.split()[1]) for line in status.splitlines() if line.startswith(("VmRSS:", "RssAnon:", "RssFile:"))
    }
    if "RssAnon" in fields and "RssFile" in fields:
        return fields["RssAnon"] + fields["RssFile"]
    return fields.get("VmRSS", 0)


def _processes(root: int) -> dict[int, tuple[str, float, int]]:
    """``root``'s children: pid -> (model name or "", CPU seconds, resident KiB)."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if pid != root and int(fields[1]) != root:
            continue
        model = Path(command[1].decode()).parent.parent.name if len(command) > 1 and command[1].endswith(b"model.py") else ""
        found[pid] = (model, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), resident_kib(status))
    return found


def _snapshot(snapshots: list[dict[int, tuple[str, float, int]]], root: int) -> None:
    snapshots.append(_processes(root))


def serving_costs(pipelines: list[layout.Pipeline], duration_s: float, concurrency: int) -> dict[str, Any]:
    """Per pipeline: the server's and each CPU step's CPU ms per request under load, and instance memory."""
    from benchmarks.senders import ensemble_sender
    from devtools import loadgen
    from devtools.triton_server import LocalTritonServer

    payloads = [payload.data for payload in images.upload_mix("web")]
    server = LocalTritonServer(
        http_port=loadgen.free_port(),
        grpc_port=loadgen.free_port(),
        metrics_port=loadgen.free_port(),
        log_file=Path("/dev/null"),
        model_repository=pipelines[0].repository.parent,
        pipelines=[pipeline.name for pipeline in pipelines],
    )
    server.start()
    result: dict[str, Any] = {"pipelines": {}}
    try:
        server.wait_ready()
        assert server.process is not None
        root = server.process.pid
        for pipeline in pipelines:
            snapshots: list[dict[int, tuple[str, float, int]]] = []
            measured = loadgen.closed_loop(
                ensemble_sender(server.grpc_url, pipeline, payloads),
                concurrency,
                SERVING_WARMUP_S,
                duration_s,
                on_window_start=partial(_snapshot, snapshots, root),
                on_window_end=partial(_snapshot, snapshots, root),
            )
            before, after = snapshots
            requests = measured.throughput * duration_s
            per_model: dict[str, float] = {}
            memory: dict[str, int] = {}
            for pid, (model, seconds, rss) in after.items():
                per_model[model] = per_model.get(model, 0.0) + seconds - before.get(pid, (model, seconds, rss))[1]
                memory[model] = max(memory.get(model, 0), rss)
            names = {step: pipeline.model_name(step) for step in CPU_STEPS}
            result["pipelines"][pipeline.name] = {
                "requests": requests,
                "server_ms": 1e3 * per_model.get("", 0.0) / requests,
                "step_ms": {step: 1e3 * per_model.get(name, 0.0) / requests for step, name in names.items()},
                "instance_mib": {step: memory.get(name, 0) / 1024 for step, name in names.items()},
            }
            print(f"capacity: {pipeline.name}: served {measured.throughput:.1f} req/s", file=sys.stderr, flush=True)
        result["server_mib"] = _processes(root)[root][2] / 1024
    finally:
        server.stop()
    return result


def _instances(pipeline: layout.Pipeline) -> dict[str, dict[str, Any]]:
    """How each CPU step's instance count is set: sized (its cpu_share and max_instances) or fixed."""
    found = {}
    for step in CPU_STEPS:
        config = model_config.load_config(pipeline.model_dir(step))
        sized = cpu_sizing.SHARE_PARAMETER in config.parameters
        found[step] = {
            "sized": sized,
            "count": config.instance_group[0].count if config.instance_group else 1,
            "cpu_share": model_config.float_parameter(config, cpu_sizing.SHARE_PARAMETER) if sized else None,
            "max_instances": model_config.int_parameter(config, cpu_sizing.MAX_INSTANCES_PARAMETER, cpu_sizing.DEFAULT_MAX_INSTANCES),
            "max_batch_size": int(config.max_batch_size) or 1,
        }
    return found


def tensor_bytes(array: Any) -> int:
    """What a tensor takes in the Python backend's shared memory: its data; a BYTES tensor's elements with their
    4-byte length prefixes; a ragged batch (photos of different shapes), each photo's array."""
    array = np.asarray(array)
    if array.dtype == object:
        if array.ndim == 1 and all(isinstance(item, np.ndarray) for item in array):
            return sum(tensor_bytes(item) for item in array)
        return sum(len(item if isinstance(item, bytes) else str(item).encode()) + 4 for item in array.reshape(-1))
    return int(array.nbytes)


def shm_per_request(pipeline: layout.Pipeline) -> dict[str, dict[str, Any]]:
    """Per Python step, the most bytes one request of one photo moves through the Python backend's shared memory, over
    the upload kinds and the text mix, through the served code in process: the preprocess's encoded photo in and its
    tensors out; the postprocess's tensors in and out, and each request it sends a second stage (its input, as sent,
    and its output, which comes back into the stub's region), all alive at once as the postprocess awaits them."""
    from benchmarks import inprocess

    served = inprocess.load(pipeline)
    sent = [0]

    def recording(infer: Any) -> Any:
        async def run(batch: np.ndarray) -> np.ndarray:
            output = await infer(batch)
            sent[0] += np.ascontiguousarray(batch, dtype=np.float32).nbytes + tensor_bytes(output)
            return output

        return run

    if served.stage_cores:
        served.postprocessor.use_stages({role: recording(stage.infer) for role, stage in served.stage_cores.items()})
    found: dict[str, dict[str, Any]] = {step: {"bytes": 0, "photo": ""} for step in CPU_STEPS}
    for kind in SHM_KINDS:
        for payload in images.upload_mix(kind):
            preprocessed = served.preprocessed([served.decode(payload.data)])  # the preprocess's outputs, by ensemble name
            tensors = served.with_core(preprocessed)
            sent[0] = 0
            result = served.postprocess(tensors)
            sizes = {
                "preprocess": len(payload.data) + 4 + sum(tensor_bytes(v) for v in preprocessed.values()),
                "postprocess": sum(tensor_bytes(v) for v in served.postprocess_inputs(tensors).values() if v is not None)
                + sum(tensor_bytes(v) for v in result.outputs().values())
                + sent[0],
            }
            for step, size in sizes.items():
                if size > found[step]["bytes"]:
                    found[step] = {"bytes": size, "photo": f"{kind}/{payload.name}"}
    return found


def measure_shm(costs: dict[str, Any], repository: Path = layout.MODEL_REPOSITORY) -> dict[str, Any]:
    """``costs`` with every pipeline's shared memory per request measured again (and its steps' batch sizes)."""
    for pipeline in layout.pipelines(repository):
        if pipeline.name not in costs["pipelines"]:
            raise ValueError(f"no measured costs for pipeline {pipeline.name!r}: run python -m benchmarks.capacity --measure")
        print(f"capacity: {pipeline.name}: shared memory per request...", file=sys.stderr, flush=True)
        row = costs["pipelines"][pipeline.name]
        row["instances"] = _instances(pipeline)
        row["shm"] = shm_per_request(pipeline)
    return costs


def measure(repeats: int, duration_s: float, concurrency: int, command: str, repository: Path = layout.MODEL_REPOSITORY) -> dict[str, Any]:
    chosen = layout.pipelines(repository)
    costs: dict[str, Any] = {
        "command": command,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": cpu.machine(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "pipelines": {},
    }
    for pipeline in chosen:
        print(f"capacity: {pipeline.name}: step costs...", file=sys.stderr, flush=True)
        costs["pipelines"][pipeline.name] = {
            "steps": step_costs(pipeline, repeats),
            "instances": _instances(pipeline),
            "shm": shm_per_request(pipeline),
        }
    served = serving_costs(chosen, duration_s, concurrency)
    costs["server_mib"] = served["server_mib"]
    for name, measured in served["pipelines"].items():
        row = costs["pipelines"][name]
        in_process = sum(row["steps"]["web"].values())
        served_cpu = measured["server_ms"] + sum(measured["step_ms"].values())
        row["served_web"] = measured
        row["overhead_ms"] = max(0.0, served_cpu - in_process)
        row["instance_mib"] = measured["instance_mib"]
    return costs


def scaling(pipeline: layout.Pipeline, cpu_sets: list[frozenset[int]], rounds: int, duration_s: float, concurrency: int) -> str:
    """The server pinned to each CPU set (sized to it) side by side, windows alternating: throughput follows the CPUs."""
    from benchmarks.senders import ensemble_sender
    from devtools import loadgen
    from devtools.triton_server import LocalTritonServer

    payloads = [payload.data for payload in images.upload_mix("web")]
    servers = []
    for cpu_set in cpu_sets:
        server = LocalTritonServer(
            http_port=loadgen.free_port(),
            grpc_port=loadgen.free_port(),
            metrics_port=loadgen.free_port(),
            log_file=Path("/dev/null"),
            pipelines=[pipeline.name],
            cpu_set=cpu_set,
        )
        servers.append(server)
    rates: dict[int, list[float]] = {index: [] for index in range(len(servers))}
    try:
        for server in servers:
            server.start()
            server.wait_ready()
        for _ in range(rounds):
            for index, server in enumerate(servers):
                measured = loadgen.closed_loop(ensemble_sender(server.grpc_url, pipeline, payloads), concurrency, 2.0, duration_s)
                if measured.errors:
                    raise RuntimeError(f"{measured.errors} errors on CPUs {sorted(cpu_sets[index])}")
                rates[index].append(measured.throughput)
    finally:
        for server in servers:
            server.stop()
    name = pipeline.model_name("preprocess")
    lines = [
        f"Measured on {cpu.describe(cpu.machine())}, {datetime.now(UTC).isoformat(timespec='seconds')}; {pipeline.name}, "
        f"web photos, one per gRPC request, closed loop at concurrency {concurrency}; {rounds} alternating windows of "
        f"{duration_s:g} s per server (median).",
        "",
        "| server CPUs | sized preprocess | throughput (req/s) | vs the first |",
        "|---|---|---:|---:|",
    ]
    first = float(np.median(rates[0]))
    for index, server in enumerate(servers):
        median = float(np.median(rates[index]))
        lines.append(
            f"| {','.join(map(str, sorted(cpu_sets[index])))} | {server.step_layouts[name]} | {median:.1f} | {median / first:.2f} |"
        )
    return "\n".join(lines)


def load(path: Path = RESULTS) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no measured costs; run `python -m benchmarks.capacity --measure` on this machine first")
    return json.loads(path.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.capacity", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipeline", help="the pipeline to plan for")
    parser.add_argument("--mix", default="web", choices=MIXES, help="the upload mix (default: %(default)s)")
    parser.add_argument("--target", type=float, default=1000.0, help="images per second to serve (default: %(default)s)")
    parser.add_argument(
        "--gpu-images-per-s", type=float, default=DEFAULT_GPU_IMAGES_PER_S, help="one GPU's images/s for the core (default: %(default)s)"
    )
    parser.add_argument("--vcpus-per-pod", type=float, help="the server container's CPU limit (default: k8s/server/deployment.yaml's)")
    parser.add_argument(
        "--utilization", type=float, default=DEFAULT_UTILIZATION, help="share of each vCPU to plan for (default: %(default)s)"
    )
    parser.add_argument(
        "--pixels",
        choices=("cpu", "gpu"),
        default="cpu",
        help="where the preprocess computes its pixels: gpu plans the GPU pixel path from benchmarks/results/gpu_pixels.json "
        "(python -m benchmarks.gpu_pixels --measure; --pipeline only) (default: %(default)s)",
    )
    parser.add_argument("--pixel-costs", type=Path, default=GPU_PIXELS, help="--pixels gpu: the measured run (default: %(default)s)")
    parser.add_argument(
        "--tiles",
        type=int,
        default=1,
        help="a tiled pipeline's views per photo (docs/tiling.md; --pipeline only): core passes and the Python steps' CPU "
        "per view from --tiling-costs (default: %(default)s, untiled)",
    )
    parser.add_argument(
        "--tiling-costs", type=Path, default=TILING, help="--tiles: python -m benchmarks.tiling's run (default: %(default)s)"
    )
    parser.add_argument("--all", action="store_true", help="the table of every pipeline and mix")
    parser.add_argument("--measure", action="store_true", help=f"measure this machine's costs first (writes {RESULTS.name})")
    parser.add_argument(
        "--measure-shm",
        action="store_true",
        help=f"measure only the shared memory per request of each Python step, into the existing {RESULTS.name}",
    )
    parser.add_argument(
        "--gpu-memory",
        action="store_true",
        help=f"estimate every plan's GPU memory from the built ONNX's shapes (writes {GPU_MEMORY.name}) and print it",
    )
    parser.add_argument(
        "--gpu-memory-gib",
        type=float,
        default=DEFAULT_GPU_MEMORY_GIB,
        help="the GPU's memory the pod is planned for (default: %(default)s)",
    )
    parser.add_argument("--gpu-memory-file", type=Path, default=GPU_MEMORY, help="the GPU memory estimate (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="--measure: passes per step cost (best of)")
    parser.add_argument("--duration", type=float, default=8.0, help="--measure: seconds of load per pipeline")
    parser.add_argument("--concurrency", type=int, default=8, help="--measure: clients of the load")
    parser.add_argument("--costs", type=Path, default=RESULTS, help="the measured costs (default: %(default)s)")
    parser.add_argument(
        "--model-repository", type=Path, default=layout.MODEL_REPOSITORY, help="--measure: the pipelines to measure (default: %(default)s)"
    )
    parser.add_argument(
        "--scaling",
        nargs="+",
        metavar="CPUS",
        help="instead: serve --pipeline pinned to each CPU list (e.g. 0 0,1), sized to it, and compare throughputs",
    )
    parser.add_argument("--rounds", type=int, default=3, help="--scaling: alternating windows per CPU list")
    args = parser.parse_args(argv)
    if args.scaling:
        cpu_sets = [frozenset(int(part) for part in text.split(",")) for text in args.scaling]
        print(scaling(layout.pipeline(args.pipeline or "image_classifier"), cpu_sets, args.rounds, args.duration, args.concurrency))
        return 0
    command = " ".join(["python -m benchmarks.capacity", *(argv if argv is not None else sys.argv[1:])])
    try:
        if args.gpu_memory:
            estimated = estimate_gpu_memory(command, args.model_repository)
            args.gpu_memory_file.parent.mkdir(parents=True, exist_ok=True)
            args.gpu_memory_file.write_text(json.dumps(estimated, indent=2) + "\n")
            print(render_gpu_memory(estimated, args.gpu_memory_gib))
            if not (args.measure or args.measure_shm or args.all or args.pipeline):
                return 0
        if args.measure:
            costs = measure(args.repeats, args.duration, args.concurrency, command, args.model_repository)
            args.costs.parent.mkdir(parents=True, exist_ok=True)
            args.costs.write_text(json.dumps(costs, indent=2) + "\n")
        elif args.measure_shm:
            costs = measure_shm(load(args.costs), args.model_repository)
            costs["shm_command"] = command
            costs["shm_created_at"] = datetime.now(UTC).isoformat(timespec="seconds")
            args.costs.write_text(json.dumps(costs, indent=2) + "\n")
        costs = load(args.costs)
        if args.all or not args.pipeline:
            print(render_table(costs, args.gpu_images_per_s, args.vcpus_per_pod, args.utilization))
            recorded = load_gpu_memory(args.gpu_memory_file)
            if recorded is not None and not args.gpu_memory:
                print()
                print(render_gpu_memory(recorded, args.gpu_memory_gib))
        if args.pipeline:
            if args.pixels == "gpu" and not args.pixel_costs.is_file():
                raise FileNotFoundError(
                    f"{args.pixel_costs}: no GPU pixel path costs; run `python -m benchmarks.gpu_pixels --measure` first"
                )
            pixels = load(args.pixel_costs) if args.pixels == "gpu" else None
            tiling = load(args.tiling_costs) if args.tiles > 1 else None
            result = plan(
                costs,
                args.pipeline,
                args.mix,
                args.target,
                args.gpu_images_per_s,
                args.vcpus_per_pod,
                args.utilization,
                pixels,
                args.tiles,
                tiling,
            )
            print(render_plan(result, costs, args.gpu_images_per_s))
            if pixels is not None:
                print(f"  pixels:            on the GPU; the CPU's checks and postprocess measured on {cpu.describe(pixels['machine'])}")
    except (ValueError, FileNotFoundError) as error:
        print(f"capacity: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
