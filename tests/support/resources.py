"""The least free disk and memory a test run saw, and during which test file, for the run's last lines.

A run from a clean clone writes its environments and models while tests run; when the disk fills, every test
that writes a file fails in its middle and pytest itself can die writing its report. The run's summary says
how low the disk and memory went, so such a run's tail names its cause (tests/conftest.py prints it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

LOW_BYTES = 512 * 1024 * 1024  # below this, writes of models and environments start to fail
GB = 1024**3


@dataclass
class Lowest:
    """The least free bytes seen, and the test file that ran then."""

    free: int | None = None
    during: str = ""

    def see(self, free: int, during: str) -> None:
        if self.free is None or free < self.free:
            self.free, self.during = free, during


def memory_available() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (None where there is no /proc)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class ResourceWatch:
    """Samples the free disk of the checkout's and the temporary folder's file systems, and the available
    memory, every ``period`` seconds in a daemon thread; ``current`` is the test file running."""

    def __init__(self, checkout: Path, period: float = 2.0) -> None:
        self.folders = {"checkout": checkout, "temporary folder": Path(tempfile.gettempdir())}
        self.disks: dict[str, Lowest] = {}
        self.memory = Lowest()
        self.current = "(collection)"
        self.period = period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="resource-watch", daemon=True)

    def start(self) -> None:
        self.sample()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.sample()

    def sample(self) -> None:
        devices: dict[int, str] = {}
        for name, folder in self.folders.items():
            try:
                device = os.stat(folder).st_dev
                free = shutil.disk_usage(folder).free
            except OSError:
                continue
            label = devices.setdefault(device, name)  # one file system is counted once, under its first name
            self.disks.setdefault(label, Lowest()).see(free, self.current)
        available = memory_available()
        if available is not None:
            self.memory.see(available, self.current)

    def _poll(self) -> None:
        while not self._stop.wait(self.period):
            self.sample()

    def lines(self) -> list[str]:
        """The summary's lines: the lowest of each, and a warning for each that ran out."""
        disk_remedy = "tests that write files fail then: free disk space (scripts/disk-check.sh says how much a run needs)"
        seen = [(f"disk free ({name})", lowest, disk_remedy) for name, lowest in self.disks.items()]
        seen.append(("memory available", self.memory, "processes fail or are killed then: stop other work on this machine"))
        parts = [f"{what} {lowest.free / GB:.1f} GB during {lowest.during}" for what, lowest, _ in seen if lowest.free is not None]
        lines = ["lowest during the run: " + "; ".join(parts)] if parts else []
        for what, lowest, remedy in seen:
            if lowest.free is not None and lowest.free < LOW_BYTES:
                lines.append(f"warning: {what} fell to {lowest.free / 1024**2:.0f} MB during {lowest.during}: {remedy}")
        return lines
