"""Environments installed, and the model repository built, in the background from the start of a run, while
the first tests run.

pip's downloads and unpacking take a minute or more per environment on a clean clone (tflite-convert's
TensorFlow, the deployment checks' tools, MediaPipe) but little CPU, so they overlap well with the tests
before the first one that needs them. That test's own install call waits on the same flock, and repeats
a failed install, raising its error there; the background's output goes to
``.build/envs/background-install.log``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable

from builders import Log, build_envs
from vision_serving import layout


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


class Build:
    """A build of the model repository's artifacts (``devtools.triton_server.build_artifacts``) in a child
    process from the start of a run, while the unit and deploy tiers run: the first test that needs the built
    repository waits for it, then builds in process (everything up to date by then; an error of the
    background build repeats there, in that test). Its output goes to ``.build/background-build.log``.

    The builders write every file through a temporary file and a rename (``builders.artifacts``), so a test
    that copies the repository meanwhile sees a file whole or not at all (its copy leaves ``*.tmp`` out)."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self.process is not None:
            return
        layout.BUILD_DIR.mkdir(parents=True, exist_ok=True)
        with open(layout.BUILD_DIR / "background-build.log", "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", "from devtools.triton_server import build_artifacts; build_artifacts()"],
                cwd=layout.REPOSITORY_ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # stop() ends it with what it started
            )

    def wait(self) -> None:
        if self.process is not None:
            self.process.wait()

    def stop(self) -> None:
        """End a build still running when the run ends (a run that never needed it, or stopped early)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


BUILD = Build()
