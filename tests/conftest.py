"""Shared fixtures: real photos, and a real tritonserver on free ports."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from builders import photos

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def photo_bytes() -> dict[str, bytes]:
    """Encoded bytes of the real photos shipped in installed packages."""
    return {name: photos.photo_bytes(name) for name in photos.registry()}


@pytest.fixture(scope="session")
def built_repository() -> Path:
    """The model repository with its artifacts built (idempotent)."""
    from scripts.serve import MODEL_REPOSITORY, build_artifacts

    build_artifacts()
    return MODEL_REPOSITORY


@pytest.fixture(scope="session")
def triton_server(built_repository, tmp_path_factory):
    """A real tritonserver serving the model repository with the CPU core."""
    from scripts.serve import LocalTritonServer

    log_file = tmp_path_factory.mktemp("triton") / "tritonserver.log"
    server = LocalTritonServer(
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        model_repository=built_repository,
        log_file=log_file,
    )
    server.start()
    try:
        server.wait_ready(timeout_s=240)
        yield server
    finally:
        server.stop()
