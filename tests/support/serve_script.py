"""``./scripts/serve`` for some pipelines of a model repository, on free ports, as a user starts it: the tests that
serve a repository of their own (a brought model, a tiled pipeline, a GPU-mode spec's CPU variant)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from devtools.loadgen import free_port
from vision_serving import layout

READY_WITHIN_S = 600


@contextlib.contextmanager
def serving(repository: Path, pipelines: list[str], log: Path) -> Iterator[dict[str, str]]:
    """The server's ``grpc``, ``http`` and ``metrics`` addresses and its ``log``, once it printed ``serve: ready``
    (Triton reports every model ready); stopped, with its process group, on exit."""
    ports = {"http": free_port(), "grpc": free_port(), "metrics": free_port()}
    command = [str(layout.REPOSITORY_ROOT / "scripts" / "serve"), "--model-repository", str(repository)]
    command += [argument for name in pipelines for argument in ("--pipeline", name)]
    command += ["--http-port", str(ports["http"]), "--grpc-port", str(ports["grpc"]), "--metrics-port", str(ports["metrics"])]
    with open(log, "wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=layout.REPOSITORY_ROOT, start_new_session=True)
    try:
        deadline = time.monotonic() + READY_WITHIN_S
        while "serve: ready" not in log.read_text():
            assert process.poll() is None, f"serve exited {process.returncode}:\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"serve was not ready in {READY_WITHIN_S} s:\n{log.read_text()[-4000:]}"
            time.sleep(1)
        yield {name: f"localhost:{port}" for name, port in ports.items()} | {"log": str(log)}
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=120)
