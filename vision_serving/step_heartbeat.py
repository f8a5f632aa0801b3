"""Each Python step instance keeps, in a small file, since when the batch it is executing started.

A stub that is alive but does not answer (a decoder stuck in C, a deadlock) looks healthy to Triton: the
process runs, ``/v2/health/live`` and ``/v2/health/ready`` stay green, and its instance's requests wait
until their clients give up. The pod's liveness check (docker/triton-liveness.sh, ``--stuck-after``) reads
these files and fails when one instance has been executing one batch for longer than the bound, so the
kubelet restarts the pod. Reading a file needs nothing of the stub, not even the GIL: a step stuck in C
code that holds it is seen too.

The file is ``<directory>/<model instance name>.<pid>`` (the pid lets the check skip files of processes
that are gone or belong to another server), 21 bytes: the epoch milliseconds at which the running
``execute`` began, zero-padded, or all zeros while the instance waits for work. Writing it is one
``pwrite`` at the start and one at the end of each ``execute`` (about a microsecond each; a batch takes
milliseconds). The directory is ``$TRITON_STEP_HEARTBEAT_DIR``, else :data:`DEFAULT_DIRECTORY` (the
liveness check reads the same variable); a directory that cannot be written turns the heartbeat off, with
one line in the log, and never fails the model.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

DEFAULT_DIRECTORY = "/tmp/triton-steps"
ENVIRONMENT_VARIABLE = "TRITON_STEP_HEARTBEAT_DIR"
WIDTH = 20  # digits of epoch milliseconds (then a newline)
IDLE = b"0" * WIDTH + b"\n"


def directory() -> Path:
    return Path(os.environ.get(ENVIRONMENT_VARIABLE) or DEFAULT_DIRECTORY)


class StepHeartbeat:
    """One instance's busy-since file (see the module docstring)."""

    def __init__(self, path: Path, descriptor: int) -> None:
        self.path = path
        self._descriptor = descriptor

    @classmethod
    def open(cls, instance_name: str, folder: Path | None = None) -> StepHeartbeat:
        """The file of this process's instance, idle; raises OSError when it cannot be written."""
        folder = folder or directory()
        folder.mkdir(parents=True, exist_ok=True)
        remove_stale(folder)
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", instance_name)
        path = folder / f"{safe}.{os.getpid()}"
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.pwrite(descriptor, IDLE, 0)
        return cls(path, descriptor)

    def begin(self) -> None:
        os.pwrite(self._descriptor, b"%0*d\n" % (WIDTH, time.time_ns() // 1_000_000), 0)

    def end(self) -> None:
        os.pwrite(self._descriptor, IDLE, 0)

    def close(self) -> None:
        os.close(self._descriptor)
        self.path.unlink(missing_ok=True)


def remove_stale(folder: Path) -> None:
    """Remove the files of processes that are gone (a restarted container keeps its /tmp volume)."""
    for path in folder.glob("*.*"):
        pid = path.suffix.lstrip(".")
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            path.unlink(missing_ok=True)


def open_or_none(instance_name: str, log: Callable[[str], object] | None = None) -> StepHeartbeat | None:
    """:meth:`StepHeartbeat.open`, or None (logged) where the directory cannot be written: the model serves anyway."""
    try:
        return StepHeartbeat.open(instance_name)
    except OSError as error:
        if log is not None:
            log(f"{instance_name}: no step heartbeat ({error}); the liveness check cannot see this instance stuck")
        return None


@contextlib.contextmanager
def busy(heartbeat: StepHeartbeat | None) -> Iterator[None]:
    """The heartbeat says busy for the duration of the block (an execute); nothing when there is none."""
    if heartbeat is None:
        yield
        return
    heartbeat.begin()
    try:
        yield
    finally:
        heartbeat.end()
