"""A step made to hang, on a real tritonserver: the liveness check sees it within its bound, and the requests
queued behind it time out where the alert looks (nv_inference_request_failure of the step).

The server serves a copy of the classifier pipeline sized for one CPU (one preprocess instance), whose
preprocess ``model.py`` is the served one with one change: an upload starting with :data:`HANG` makes
``_parse`` run a regular expression that backtracks for ever, in C, holding the GIL (a decoder stuck in C
code; the stub stays alive and never answers). Triton's health endpoints stay green; the liveness script
(docker/triton-liveness.sh, with ``--stuck-after`` set to :data:`STUCK_AFTER_S`) fails once the batch has
run that long. The test prints the time to detection; docs/operations.md records it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from devtools.loadgen import GOLDEN_LABELS, MODEL, classify, copy_repository, image_input, running_server, stub_processes
from vision_serving import step_heartbeat

pytestmark = pytest.mark.integration

HANG = b"hang this step"
STUCK_AFTER_S = 3
LIVENESS_SCRIPT = Path(__file__).resolve().parents[2] / "docker" / "triton-liveness.sh"
HANGING_MODEL = '''"""The served preprocess, made to hang on one upload (tests/integration/test_stuck_step.py)."""

import re

import triton_python_backend_utils as pb_utils

from vision_serving.triton_models.preprocess import TritonPythonModel as Served


class TritonPythonModel(Served):
    def _parse(self, request):
        payload = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy().reshape(-1)[0]
        if bytes(payload).startswith(HANG):
            re.match(r"(a+)+$", "a" * 64 + "b")  # catastrophic backtracking: in C, holding the GIL, for ever
        return super()._parse(request)
'''.replace("HANG", repr(HANG))


@pytest.fixture
def repository(built_repository, tmp_path) -> Path:
    copy_repository(built_repository / MODEL, tmp_path / "model_repository" / MODEL)
    (tmp_path / "model_repository" / MODEL / f"{MODEL}_preprocess" / "1" / "model.py").write_text(HANGING_MODEL)
    return tmp_path / "model_repository"


def liveness(server_pid: int, http_port: int, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    command = ["bash", str(LIVENESS_SCRIPT), f"--pid={server_pid}", f"--http-port={http_port}", f"--state={tmp_path / 'state'}"]
    command += [f"--stuck-after={STUCK_AFTER_S}", f"--steps-dir={tmp_path / 'steps'}"]
    return subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)


def failures(metrics_port: int, model: str) -> dict[str, float]:
    """nv_inference_request_failure of ``model`` by reason."""
    with urllib.request.urlopen(f"http://localhost:{metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = {}
    for line in text.splitlines():
        if line.startswith("nv_inference_request_failure{") and f'model="{model}"' in line:
            reason = line.split('reason="', 1)[1].split('"', 1)[0] if 'reason="' in line else ""
            found[reason] = float(line.rsplit(" ", 1)[1])
    return found


def test_a_hung_step_fails_liveness_within_its_bound(repository, tmp_path, photo_bytes, monkeypatch):
    monkeypatch.setenv(step_heartbeat.ENVIRONMENT_VARIABLE, str(tmp_path / "steps"))  # the stubs inherit it
    with running_server(repository, tmp_path / "logs", exit_timeout_secs=5, pipelines=[MODEL], cpus=1) as server:
        pid = server.process.pid
        stubs = stub_processes(pid)
        (victim,) = [stub for name, stub in stubs.items() if name.startswith(f"{MODEL}_preprocess_")]
        client = grpcclient.InferenceServerClient(server.grpc_url)
        assert classify(client, photo_bytes["coffee"]) in GOLDEN_LABELS["coffee"]
        assert liveness(pid, server.http_port, tmp_path).returncode == 0
        assert sorted(path.name for path in (tmp_path / "steps").iterdir()) == sorted(
            f"{name.split('@')[0]}.{stub}" for name, stub in stubs.items()
        )

        hung = threading.Thread(target=lambda: _infer(server.grpc_url, HANG, timeout_s=60), daemon=True)
        sent = time.monotonic()
        hung.start()
        detected = None
        while detected is None and time.monotonic() - sent < STUCK_AFTER_S + 10:
            completed = liveness(pid, server.http_port, tmp_path)
            if completed.returncode != 0:
                detected = (round(time.monotonic() - sent, 2), completed.returncode, completed.stderr.strip())
            time.sleep(0.2)
        health_green = client.is_server_live() and client.is_server_ready()
        # Requests behind the hung instance wait in its queue until their own timeout (Triton's per-request timeout).
        queued = [_infer(server.grpc_url, photo_bytes["coffee"], timeout_s=30, queue_timeout_us=1_000_000) for _ in range(2)]
        failed = failures(server.metrics_port, f"{MODEL}_preprocess")
        summary = {"detected_after_s": detected and detected[0], "message": detected and detected[2], "health_green": health_green}
        summary |= {"queued_requests": queued, "preprocess_failures": failed}
        print("stuck step:", json.dumps(summary))
        os.kill(victim, signal.SIGKILL)  # the server can then stop

    assert detected is not None, summary
    assert detected[1] == 1 and f"{MODEL}_preprocess_0_0 (pid {victim}) has been executing one batch for" in detected[2], detected
    # Not before the bound; after it, within a few of the loop's probes (each a bash and a curl, slower on a loaded
    # machine) and the request's way to the step.
    assert STUCK_AFTER_S <= detected[0] <= STUCK_AFTER_S + 4, detected
    assert health_green, "Triton's own health endpoints see nothing (why the heartbeat exists)"
    assert all(status == "UNAVAILABLE" for status, _ in queued), queued
    assert failed.get("REJECTED", 0) >= 2, failed  # what VisionServingStepRequestsTimingOut counts


def _infer(url: str, payload: bytes, timeout_s: float, queue_timeout_us: int = 0) -> tuple[str, str]:
    client = grpcclient.InferenceServerClient(url)
    try:
        client.infer(MODEL, [image_input([payload])], client_timeout=timeout_s, timeout=queue_timeout_us or None)
        return "OK", ""
    except InferenceServerException as error:
        return str(error.status()).removeprefix("StatusCode."), (error.message() or "")[:120]
