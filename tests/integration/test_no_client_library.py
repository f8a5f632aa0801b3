"""The Python models of a real tritonserver load no client library (the serving image has
no tritonclient/grpcio): vision_serving parses configs with the schema vendored in vision_serving/protos.

Read from each Python backend stub's /proc/<pid>/maps: the shared objects its interpreter loaded. The
same .venv that runs the tests (and holds tritonclient for the client side) is the stubs' environment
here, so an import of tritonclient.grpc by any model would map grpc's cygrpc extension.
"""

from __future__ import annotations

import pytest

from devtools import loadgen

pytestmark = pytest.mark.integration


def mapped_files(pid: int) -> set[str]:
    with open(f"/proc/{pid}/maps") as handle:
        return {line.split(maxsplit=5)[5].strip() for line in handle if len(line.split(maxsplit=5)) == 6}


def test_no_python_model_loads_a_client_library(triton_server):
    assert triton_server.process is not None
    stubs = loadgen.stub_processes(triton_server.process.pid)
    assert len(stubs) >= 6, stubs  # preprocess and postprocess of every pipeline, at least
    for name, pid in sorted(stubs.items()):
        files = mapped_files(pid)
        # The check sees what the models import: protobuf's C extension, loaded by vision_serving.model_config.
        assert any("/google/_upb/" in path for path in files), name
        client = sorted(path for path in files if "/site-packages/grpc/" in path or "/site-packages/tritonclient/" in path)
        assert not client, (name, client)
