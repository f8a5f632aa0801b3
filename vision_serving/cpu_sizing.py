"""The Python steps' parallelism sized to the CPUs the server may use (its cgroup's limit).

A step whose config has a ``cpu_share`` parameter (the preprocess models, whose decode and resize
are what the CPUs spend per image, and the postprocess models) gets, at start, one *worker* per CPU
of its share of the container's CPUs:

    workers   = ceil(cpus x cpu_share)           (at least 1)
    instances = min(workers, max_instances)      (each instance is a process: ~0.13 GiB)
    threads   = ceil(workers / instances)        (``decode_threads``: decode and resize in a pool)

``decode_threads`` is written only into a step that declares it (the preprocess models, whose
instances decode a batch's requests in a pool); another sized step (the postprocess models) gets
its instances only, at most ``max_instances``.

``cpus`` is the container's CPU limit: cgroup v2 ``cpu.max`` (quota / period; the smallest along
the cgroup's path), cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``, else the CPUs this
process may run on (``sched_getaffinity``, which ``taskset`` and cpusets set), whichever is
smaller. On this project's 2-CPU test machine a shipped preprocess config (``count: 2``,
``cpu_share`` 1.0) is sized to 2 instances of 1 thread: exactly what it says.

:func:`size_repository` writes a *sized view* of a model repository: a folder whose models are
symbolic links to the originals, except the sized steps, whose configs are rewritten (every
config file of the model: ``config.pbtxt`` and ``configs/*.pbtxt``). Triton serves the view; the
repository itself (a git checkout, or the pod's read-only copy) is never written.

    python -m vision_serving.cpu_sizing --pipelines-root /models --out /tmp/sized-models
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format

from . import layout, model_config
from .protos import model_config_pb2

CGROUP_ROOT = Path("/sys/fs/cgroup")
SHARE_PARAMETER = "cpu_share"
MAX_INSTANCES_PARAMETER = "max_instances"
THREADS_PARAMETER = "decode_threads"
# The parameters this module reads or writes: a step's own parameter checks leave them to it.
PARAMETERS = (SHARE_PARAMETER, MAX_INSTANCES_PARAMETER, THREADS_PARAMETER)
DEFAULT_MAX_INSTANCES = 8
# What a sized step's config states where its pipeline's spec does not say: its share of the pod's CPUs and the
# most processes it may have; a step that decodes in a pool (the preprocess) also states its threads, 1 until the
# sizing writes them.
STEP_DEFAULTS = {SHARE_PARAMETER: "1.0", MAX_INSTANCES_PARAMETER: str(DEFAULT_MAX_INSTANCES)}
THREADED_STEP_DEFAULTS = {**STEP_DEFAULTS, THREADS_PARAMETER: "1"}
VIEW_MARKER = ".sized-view"  # in a view's root: only such a folder is ever replaced


class SizingError(ValueError):
    """A sized step's parameters are not usable; the message names the file and the value."""


@dataclass(frozen=True)
class CpuLimit:
    cpus: float
    source: str  # what set it, for the start-up line

    def __str__(self) -> str:
        return f"{self.cpus:g} CPUs ({self.source})"


@dataclass(frozen=True)
class StepLayout:
    workers: int
    instances: int
    threads: int  # 1 for a step without decode threads
    threaded: bool = True  # the step has decode threads (declares decode_threads)

    def __str__(self) -> str:
        if not self.threaded:
            return f"{self.instances} instance(s)"
        return f"{self.instances} instance(s) x {self.threads} decode thread(s)"


def parse_cpu_max(text: str) -> float | None:
    """cgroup v2 ``cpu.max`` (``"200000 100000"``, ``"max 100000"``) -> CPUs, None when unlimited."""
    fields = text.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    quota, period = int(fields[0]), int(fields[1])
    return quota / period if quota > 0 and period > 0 else None


def _smallest_along(top: Path, relative: str, read: Callable[[Path], float | None]) -> float | None:
    """The smallest limit ``read`` finds in ``top/relative`` and each of its parents up to ``top``
    (a child cgroup cannot use more than its parents)."""
    limits = []
    folder = top / relative.strip().lstrip("/")
    while True:
        limit = read(folder)
        if limit is not None:
            limits.append(limit)
        if folder == top or top not in folder.parents:
            break
        folder = folder.parent
    return min(limits) if limits else None


def _read_cpu_max(folder: Path) -> float | None:
    path = folder / "cpu.max"
    return parse_cpu_max(path.read_text()) if path.is_file() else None


def _read_cfs_quota(folder: Path) -> float | None:
    quota_file, period_file = folder / "cpu.cfs_quota_us", folder / "cpu.cfs_period_us"
    if not (quota_file.is_file() and period_file.is_file()):
        return None
    quota, period = int(quota_file.read_text()), int(period_file.read_text())
    return quota / period if quota > 0 and period > 0 else None


def _cgroup_v2_limit(root: Path, proc_cgroup: str) -> float | None:
    relative = next((line[3:] for line in proc_cgroup.splitlines() if line.startswith("0::")), None)
    return None if relative is None else _smallest_along(root, relative, _read_cpu_max)


def _cgroup_v1_limit(root: Path, proc_cgroup: str) -> float | None:
    """The CFS quota of the v1 ``cpu`` controller's cgroup (mounted as ``cpu`` or ``cpu,cpuacct``)."""
    for line in proc_cgroup.splitlines():
        _, controllers, relative = line.split(":", 2)
        if "cpu" in controllers.split(","):
            for top in (root / controllers, root / "cpu"):
                if top.is_dir():
                    return _smallest_along(top, relative, _read_cfs_quota)
    return None


def cpu_limit(
    cgroup_root: Path = CGROUP_ROOT,
    proc_cgroup: Path = Path("/proc/self/cgroup"),
    affinity: Callable[[], int] = lambda: len(os.sched_getaffinity(0)),
) -> CpuLimit:
    """The CPUs this process may use: its cgroup's CPU limit or its CPU affinity, the smaller."""
    cpus = CpuLimit(float(affinity()), "CPU affinity")
    text = proc_cgroup.read_text() if proc_cgroup.is_file() else ""
    for quota, source in (
        (_cgroup_v2_limit(cgroup_root, text), "cgroup cpu.max"),
        (_cgroup_v1_limit(cgroup_root, text), "cgroup cfs quota"),
    ):
        if quota is not None and quota < cpus.cpus:
            cpus = CpuLimit(quota, source)
    return cpus


def step_layout(cpus: float, share: float, max_instances: int, threaded: bool = True) -> StepLayout:
    """One worker per CPU of the step's share, as few processes as ``max_instances`` allows (the rest as
    threads when the step has decode threads)."""
    workers = max(1, math.ceil(cpus * share - 1e-9))
    instances = max(1, min(workers, max_instances))
    return StepLayout(workers, instances, math.ceil(workers / instances) if threaded else 1, threaded)


def _float(config: model_config_pb2.ModelConfig, key: str, where: Path) -> float:
    try:
        value = model_config.float_parameter(config, key)
    except (ValueError, model_config.ConfigError):
        raise SizingError(f"{where}: parameter {key} must be a number, found {config.parameters[key].string_value!r}") from None
    if not 0 < value <= 1:
        raise SizingError(f"{where}: parameter {key} must be in (0, 1] (a share of the pod's CPUs), found {value:g}")
    return value


def layout_for(config: model_config_pb2.ModelConfig, cpus: float, where: Path) -> StepLayout | None:
    """The layout of a sized step (None for a step without ``cpu_share``)."""
    if SHARE_PARAMETER not in config.parameters:
        return None
    share = _float(config, SHARE_PARAMETER, where)
    maximum = model_config.int_parameter(config, MAX_INSTANCES_PARAMETER, DEFAULT_MAX_INSTANCES)
    if maximum < 1:
        raise SizingError(f"{where}: parameter {MAX_INSTANCES_PARAMETER} must be at least 1, found {maximum}")
    if len(config.instance_group) != 1 or config.instance_group[0].kind != model_config_pb2.ModelInstanceGroup.KIND_CPU:
        raise SizingError(f"{where}: a step with {SHARE_PARAMETER} needs exactly one KIND_CPU instance_group")
    return step_layout(cpus, share, maximum, threaded=THREADS_PARAMETER in config.parameters)


def sized_config_text(text: str, cpus: float, where: Path) -> tuple[str, StepLayout | None]:
    """A config's text with its instance count and decode threads sized to ``cpus`` (unchanged when not sized)."""
    config = model_config.parse_config_text(text, str(where))
    chosen = layout_for(config, cpus, where)
    if chosen is None:
        return text, None
    config.instance_group[0].count = chosen.instances
    if chosen.threaded:
        config.parameters[THREADS_PARAMETER].string_value = str(chosen.threads)
    header = f"# Sized by vision_serving.cpu_sizing for {cpus:g} CPUs from {where}: {chosen}.\n"
    return header + text_format.MessageToString(config), chosen


def _config_files(model_dir: Path) -> list[Path]:
    return [path for path in [model_dir / "config.pbtxt", *sorted((model_dir / "configs").glob("*.pbtxt"))] if path.is_file()]


def _link_children(source: Path, target: Path, skip: set[str]) -> None:
    target.mkdir(parents=True)
    for child in sorted(source.iterdir()):
        if child.name not in skip:
            (target / child.name).symlink_to(child.resolve())


def size_model(model_dir: Path, target: Path, cpus: float) -> StepLayout | None:
    """``target``: a link to ``model_dir``, or, for a sized step, its files linked and its configs rewritten."""
    sized = {path: sized_config_text(path.read_text(), cpus, path) for path in _config_files(model_dir)}
    layouts = [chosen for _, chosen in sized.values() if chosen is not None]
    if not layouts:
        target.symlink_to(model_dir.resolve())
        return None
    _link_children(model_dir, target, {"config.pbtxt", "configs"})
    if (model_dir / "configs").is_dir():
        _link_children(model_dir / "configs", target / "configs", {path.name for path in sized})
    for path, (text, _) in sized.items():
        (target / path.relative_to(model_dir)).write_text(text)
    return layouts[0]


def size_repository(pipelines: list[layout.Pipeline], out: Path, cpus: float) -> dict[str, StepLayout]:
    """Write the sized view of ``pipelines`` under ``out`` (replaced): one folder per pipeline, as
    :mod:`vision_serving.layout` lays them out. Returns each sized step's layout by model name."""
    if out.exists():
        if not (out / VIEW_MARKER).is_file():
            raise SizingError(f"{out} exists and is not a sized view (no {VIEW_MARKER}): choose an empty folder")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / VIEW_MARKER).write_text("A view of a model repository written by vision_serving.cpu_sizing; replaced at each start.\n")
    layouts: dict[str, StepLayout] = {}
    for pipeline in pipelines:
        view = out / pipeline.name
        view.mkdir()
        for child in sorted(pipeline.repository.iterdir()):
            if (child / "config.pbtxt").is_file():
                chosen = size_model(child, view / child.name, cpus)
                if chosen is not None:
                    layouts[child.name] = chosen
            else:
                (view / child.name).symlink_to(child.resolve())
    return layouts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vision_serving.cpu_sizing", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipelines-root", type=Path, required=True, help="the model repository holding the pipeline folders")
    parser.add_argument("--out", type=Path, required=True, help="where to write the sized view (replaced)")
    parser.add_argument("--cpus", type=float, help="size for this many CPUs instead of this process's limit")
    args = parser.parse_args(argv)
    limit = CpuLimit(args.cpus, "--cpus") if args.cpus else cpu_limit()
    try:
        layouts = size_repository(layout.pipelines(args.pipelines_root), args.out, limit.cpus)
    except (SizingError, model_config.ConfigError, layout.LayoutError) as error:
        print(f"cpu_sizing: error: {error}", file=sys.stderr)
        return 2
    for name, chosen in layouts.items():
        print(f"cpu_sizing: {name}: {chosen} for {limit}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
