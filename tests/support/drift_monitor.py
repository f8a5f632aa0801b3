"""Waiting for a background :class:`vision_serving.drift.DriftMonitor` to finish its updates."""

from __future__ import annotations

import time

from vision_serving.drift import DriftMonitor


def wait_idle(monitor: DriftMonitor, timeout_s: float = 5.0) -> bool:
    """Block until the newest update the monitor was handed has finished (its ``latest()`` report
    has the sequence of ``updates``, or none was handed yet); True when that happened in time."""
    deadline = time.monotonic() + timeout_s
    while True:
        latest = monitor.latest()
        if monitor.updates == 0 or (latest is not None and latest.sequence == monitor.updates):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
