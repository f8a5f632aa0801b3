"""Capacity planner: the vCPUs and memory per pod, the pods, and how far one GPU is used, for a pipeline,
an upload mix and a target throughput.

    python -m devtools.capacity --pipeline image_classifier --mix web --target 2000 [--gpu-images-per-s 3000]
    python -m devtools.capacity --all [--gpu-images-per-s 3000]     # every pipeline x mix (docs/sizing.md's table)
    python -m devtools.capacity --measure                           # measure this machine first

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
# Host memory of the CUDA context, TensorRT's runtime and the plans' host copies in the server
# process on a GPU: not measurable here (no GPU), an allowance the Deployment adds (docs/sizing.md).
CUDA_HOST_GIB = 3.0
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
    pod_images_per_s: float
    target: float
    pods: int
    gpu_utilization: float
    bottleneck: str


def mix_shares(mix: str) -> dict[str, float]:
    if mix in KINDS:
        return {mix: 1.0}
    if mix == "mix":
        return dict(images.MIX_SHARES)
    raise ValueError(f"unknown upload mix {mix!r}; known: {', '.join(MIXES)}")


def cpu_ms_per_image(costs: dict[str, Any], pipeline: str, mix: str) -> float:
    """The pod's CPU ms per image of ``pipeline`` for ``mix``: its CPU steps and the serving overhead."""
    measured = costs["pipelines"][pipeline]
    steps = sum(share * sum(measured["steps"][kind].values()) for kind, share in mix_shares(mix).items())
    return steps + measured["overhead_ms"]


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


def plan(
    costs: dict[str, Any],
    pipeline: str,
    mix: str,
    target: float,
    gpu_images_per_s: float = DEFAULT_GPU_IMAGES_PER_S,
    vcpus_per_pod: float | None = None,
    utilization: float = DEFAULT_UTILIZATION,
) -> Plan:
    if pipeline not in costs["pipelines"]:
        raise ValueError(f"no measured costs for pipeline {pipeline!r}; measured: {', '.join(costs['pipelines'])} (run --measure)")
    vcpus_per_pod = deployment_vcpus() if vcpus_per_pod is None else vcpus_per_pod
    if min(target, gpu_images_per_s, vcpus_per_pod) <= 0 or not 0 < utilization <= 1:
        raise ValueError("target, GPU images/s and vCPUs per pod must be positive, and the utilization in (0, 1]")
    ms = cpu_ms_per_image(costs, pipeline, mix)
    per_vcpu = utilization * 1000.0 / ms
    cpu_side = vcpus_per_pod * per_vcpu
    pod = min(cpu_side, gpu_images_per_s)
    pods = max(1, math.ceil(target / pod - 1e-9))
    return Plan(
        pipeline=pipeline,
        mix=mix,
        cpu_ms_per_image=ms,
        images_per_s_per_vcpu=per_vcpu,
        vcpus_per_1000=1000.0 / per_vcpu,
        vcpus_to_fill_gpu=gpu_images_per_s / per_vcpu,
        vcpus_per_pod=vcpus_per_pod,
        memory_gib_per_pod=memory_gib_per_pod(costs, vcpus_per_pod),
        pod_images_per_s=pod,
        target=target,
        pods=pods,
        gpu_utilization=target / pods / gpu_images_per_s,
        bottleneck="CPU" if cpu_side < gpu_images_per_s else "GPU",
    )


def render_plan(result: Plan, costs: dict[str, Any], gpu_images_per_s: float) -> str:
    return "\n".join(
        [
            f"{result.pipeline}, {result.mix} uploads, target {result.target:g} images/s, one GPU of {gpu_images_per_s:g} images/s per pod",
            f"  CPU per image:     {result.cpu_ms_per_image:.2f} ms (steps + serving overhead), measured on {cpu.describe(costs['machine'])}",
            f"  per vCPU:          {result.images_per_s_per_vcpu:.0f} images/s at {100 * (result.images_per_s_per_vcpu * result.cpu_ms_per_image / 1000):.0f} % use",
            f"  vCPUs:             {result.vcpus_per_1000:.1f} per 1000 images/s; {result.vcpus_to_fill_gpu:.1f} to keep one GPU busy",
            f"  per pod:           {result.vcpus_per_pod:g} vCPUs, {result.memory_gib_per_pod:.1f} GiB memory (every pipeline's sized instances)",
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
        "one pod: images/s | GPU use | memory per pod |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for pipeline in costs["pipelines"]:
        for mix in MIXES:
            p = plan(costs, pipeline, mix, 1000.0, gpu_images_per_s, vcpus_per_pod, utilization)
            lines.append(
                f"| {pipeline} | {mix} | {p.cpu_ms_per_image:.2f} | {p.images_per_s_per_vcpu:.0f} | {p.vcpus_per_1000:.1f} | "
                f"{p.vcpus_to_fill_gpu:.1f} | {p.pod_images_per_s:.0f} ({p.bottleneck}) | "
                f"{100 * p.pod_images_per_s / gpu_images_per_s:.0f} % | {p.memory_gib_per_pod:.1f} GiB |"
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
        }
    return found


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
        costs["pipelines"][pipeline.name] = {"steps": step_costs(pipeline, repeats), "instances": _instances(pipeline)}
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
        raise FileNotFoundError(f"{path}: no measured costs; run `python -m devtools.capacity --measure` on this machine first")
    return json.loads(path.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.capacity", description=__doc__.split("\n\n")[0])
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
    parser.add_argument("--all", action="store_true", help="the table of every pipeline and mix")
    parser.add_argument("--measure", action="store_true", help=f"measure this machine's costs first (writes {RESULTS.name})")
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
    try:
        if args.measure:
            command = " ".join(["python -m devtools.capacity", *(argv if argv is not None else sys.argv[1:])])
            costs = measure(args.repeats, args.duration, args.concurrency, command, args.model_repository)
            args.costs.parent.mkdir(parents=True, exist_ok=True)
            args.costs.write_text(json.dumps(costs, indent=2) + "\n")
        costs = load(args.costs)
        if args.all or not args.pipeline:
            print(render_table(costs, args.gpu_images_per_s, args.vcpus_per_pod, args.utilization))
        if args.pipeline:
            result = plan(costs, args.pipeline, args.mix, args.target, args.gpu_images_per_s, args.vcpus_per_pod, args.utilization)
            print(render_plan(result, costs, args.gpu_images_per_s))
    except (ValueError, FileNotFoundError) as error:
        print(f"capacity: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
