"""Shared fixtures: real photos, and a real tritonserver on free ports."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import photos

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def photo_bytes() -> dict[str, bytes]:
    """Encoded bytes of the real photos shipped in installed packages."""
    return {name: photos.photo_bytes(name) for name in photos.registry()}


@pytest.fixture(scope="session")
def built_repository() -> Path:
    """The model repository with its artifacts built (idempotent)."""
    from devtools.triton_server import MODEL_REPOSITORY, build_artifacts

    build_artifacts()
    return MODEL_REPOSITORY


@pytest.fixture(scope="session")
def triton_server(built_repository, tmp_path_factory):
    """A real tritonserver serving the model repository with the CPU core."""
    from devtools.loadgen import running_server

    with running_server(built_repository, tmp_path_factory.mktemp("triton")) as server:
        yield server
