"""CPU time of a process tree (Linux /proc): what a request costs, independent of other load.

On a shared machine throughput depends on what else runs; the CPU time the
server spends per request barely does. ``ProcessTreeCPU(pid)`` sums user +
system time of a process and all its descendants (tritonserver and its
Python-backend stubs; uvicorn), so a measurement window can report
server CPU ms per request next to throughput. Throughput on an otherwise
idle machine is bounded by ``CPUs x 1000 / (server + client CPU ms per request)``.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np


def cpu_ms(function: Callable[[], object], count: int, repeats: int, excluded: Callable[[], float] | None = None) -> float:
    """CPU ms (this process, ``time.process_time``) per item of ``function`` (which handles ``count`` items), best of
    ``repeats`` after a warm-up; less what the running total ``excluded()`` (ms) grew by during each pass."""
    left_out = excluded or (lambda: 0.0)
    function()
    best = float("inf")
    for _ in range(repeats):
        started, before = time.process_time(), left_out()
        function()
        best = min(best, time.process_time() - started - (left_out() - before) / 1e3)
    return best * 1e3 / count


class TimedStage:
    """A second-stage model as a postprocess awaits it (a batch in, its outputs out), its calls' CPU ms
    (``time.process_time``) added to ``ms`` and their items to ``items``: the awaits never suspend in
    one process, so the calls run one after the other in the caller's thread and the time is theirs."""

    def __init__(self, model: Callable[[np.ndarray], tuple[np.ndarray, ...]]) -> None:
        self.model, self.ms, self.items = model, 0.0, 0

    async def __call__(self, batch: np.ndarray) -> tuple[np.ndarray, ...]:
        started = time.process_time()
        output = self.model(batch)
        self.ms += (time.process_time() - started) * 1e3
        self.items += len(batch)
        return output


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system seconds) of one process, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; fields after its ')' are fixed.
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICKS


def tree_cpu_seconds(root: int) -> float | None:
    """User + system CPU seconds of ``root`` and its live descendants (None without /proc)."""
    if not Path("/proc").is_dir():
        return None
    stats = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            found = _stat(int(entry.name))
            if found is not None:
                stats[int(entry.name)] = found
    if root not in stats:
        return None
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    total, pending = 0.0, [root]
    while pending:
        pid = pending.pop()
        total += stats[pid][1]
        pending.extend(children.get(pid, []))
    return total


class WindowCPU:
    """CPU seconds of the server's process tree and of this (client) process over a window."""

    def __init__(self, server_pid: int | None) -> None:
        self.server_pid = server_pid
        self.server_s: float | None = None
        self.client_s: float | None = None

    def start(self) -> None:
        self._server = tree_cpu_seconds(self.server_pid) if self.server_pid else None
        self._client = _own_cpu_seconds()

    def end(self) -> None:
        if self._server is not None and self.server_pid is not None:
            after = tree_cpu_seconds(self.server_pid)
            self.server_s = None if after is None else after - self._server
        self.client_s = _own_cpu_seconds() - self._client


def _own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


# The instruction sets that change what a CPU core computes fast (and, for INT8, what it computes): /proc/cpuinfo flags.
INSTRUCTION_SETS = {"AVX2": ("avx2",), "AVX-512": ("avx512f",), "VNNI": ("avx512_vnni", "avx_vnni"), "AMX": ("amx_int8",)}


def machine() -> dict:
    """The machine every figure is measured on: CPU model, logical and usable CPUs, which of
    INSTRUCTION_SETS the CPU has, memory, kernel and Python (recorded with every result)."""
    model, flags, memory_gib = "unknown", set(), None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory_gib = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu_model": model,
        "logical_cpus": os.cpu_count(),
        "usable_cpus": usable,
        "instruction_sets": {name: any(flag in flags for flag in names) for name, names in INSTRUCTION_SETS.items()},
        "memory_gib": memory_gib,
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def describe(found: dict) -> str:
    """``AMD EPYC 7B13, 2 CPUs, AVX2 yes, AVX-512 no, VNNI no, AMX no``."""
    sets = ", ".join(f"{name} {'yes' if present else 'no'}" for name, present in found["instruction_sets"].items())
    return f"{found['cpu_model']}, {found['usable_cpus']} CPUs, {sets}"
