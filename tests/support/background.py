"""Environments installed in the background from the start of a run, while the first tests run.

pip's downloads and unpacking take a minute or more per environment on a clean clone (tflite-convert's
TensorFlow, the deployment checks' tools, MediaPipe) but little CPU, so they overlap well with the tests
before the first one that needs them. That test's own install call waits on the same flock, and repeats
a failed install, raising its error there; the background's output goes to
``.build/envs/background-install.log``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from builders import Log, build_envs


def build_env(name: str) -> Callable[[Log], object]:
    """The install of build environment ``name`` (builders.build_envs; an up-to-date one returns at once)."""
    return lambda log: build_envs.ensure_env(name, log)


def install(installs: dict[str, Callable[[Log], object]]) -> None:
    """Start each install in a daemon thread of its own."""
    if not installs:
        return
    build_envs.ENVS_DIR.mkdir(parents=True, exist_ok=True)
    log_file = build_envs.ENVS_DIR / "background-install.log"

    def work(name: str, call: Callable[[Log], object]) -> None:
        with contextlib.suppress(Exception), open(log_file, "a") as handle:
            call(lambda message: print(f"{name}: {message}", file=handle, flush=True))

    for name, call in sorted(installs.items()):
        threading.Thread(target=work, args=(name, call), name=f"install-{name}", daemon=True).start()
