"""The liveness script's stuck-step check (docker/triton-liveness.sh ``--stuck-after``), on a fake server: a
process named tritonserver with a child named like a Python backend stub, and heartbeat files written by
vision_serving/step_heartbeat.py itself. The real server with a step made to hang is
tests/integration/test_stuck_step.py."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vision_serving import step_heartbeat

LIVENESS_SCRIPT = Path(__file__).resolve().parents[2] / "docker" / "triton-liveness.sh"


class FakeServer:
    def __init__(self, pid: int, stub_pid: int) -> None:
        self.pid, self.stub_pid = pid, stub_pid


@pytest.fixture
def server(tmp_path) -> Iterator[FakeServer]:
    """``tritonserver`` (a shell script: its process name is the file's) that starts one ``triton_python_backend_stub``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "triton_python_backend_stub"
    stub.write_text("#!/bin/bash\nsleep 600\n")
    server = bin_dir / "tritonserver"
    server.write_text(f"#!/bin/bash\n{stub} &\necho $! > {tmp_path / 'stub.pid'}\nwait\n")
    for path in (stub, server):
        path.chmod(0o755)
    process = subprocess.Popen([str(server)], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not (tmp_path / "stub.pid").exists() or not (tmp_path / "stub.pid").read_text().strip():
            assert time.monotonic() < deadline, "the fake stub did not start"
            time.sleep(0.05)
        yield FakeServer(process.pid, int((tmp_path / "stub.pid").read_text()))
    finally:
        os.killpg(process.pid, 9)
        process.wait(timeout=10)


def liveness(server: FakeServer, tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    command = ["bash", str(LIVENESS_SCRIPT), f"--pid={server.pid}", "--http-port=0", f"--state={tmp_path / 'state'}"]
    return subprocess.run(
        [*command, f"--steps-dir={tmp_path / 'steps'}", *arguments], capture_output=True, text=True, timeout=30, check=False
    )


def heartbeat_of(server: FakeServer, tmp_path: Path, name: str, since_ms: int) -> Path:
    """A heartbeat file as the stub's own would be: the library's format, the stub's pid."""
    folder = tmp_path / "steps"
    folder.mkdir(exist_ok=True)
    beat = step_heartbeat.StepHeartbeat.open(name, folder)
    path = folder / f"{name}.{server.stub_pid}"
    beat.path.rename(path)
    path.write_bytes(b"%020d\n" % since_ms)
    return path


def test_a_step_busy_past_the_bound_fails_liveness_naming_it(server, tmp_path):
    assert liveness(server, tmp_path).returncode == 0  # records the stub count
    path = heartbeat_of(server, tmp_path, "image_classifier_preprocess_0_0", time.time_ns() // 1_000_000 - 95_000)
    stuck = liveness(server, tmp_path, "--stuck-after=60")
    assert stuck.returncode == 1
    assert stuck.stderr.startswith(
        f"triton-liveness: Python backend stub image_classifier_preprocess_0_0 (pid {server.stub_pid}) has been executing one batch for 9"
    ), stuck.stderr
    assert stuck.stderr.strip().endswith("s (over 60 s): stuck, its requests are not answered")
    assert liveness(server, tmp_path, "--stuck-after=120").returncode == 0  # under the bound
    assert liveness(server, tmp_path, "--stuck-after=0").returncode == 0  # the check turned off
    path.write_bytes(step_heartbeat.IDLE)
    assert liveness(server, tmp_path, "--stuck-after=1").returncode == 0  # idle


def test_files_of_other_processes_are_skipped(server, tmp_path):
    folder = tmp_path / "steps"
    folder.mkdir()
    old = time.time_ns() // 1_000_000 - 3_600_000
    (folder / f"other_server_step_0_0.{os.getpid()}").write_bytes(b"%020d\n" % old)  # alive, not this server's child
    (folder / "gone_step_0_0.999999999").write_bytes(b"%020d\n" % old)  # no such process
    (folder / f"garbled.{server.stub_pid}").write_bytes(b"not a number\n")
    assert liveness(server, tmp_path, "--stuck-after=1").returncode == 0
    bad = liveness(server, tmp_path, "--stuck-after=1.5")
    assert bad.returncode == 2 and "whole seconds" in bad.stderr


def test_the_library_writes_busy_since_and_idle(tmp_path, monkeypatch):
    beat = step_heartbeat.StepHeartbeat.open("face_detector/postprocess 0", tmp_path)
    assert beat.path.name == f"face_detector_postprocess_0.{os.getpid()}" and beat.path.read_bytes() == step_heartbeat.IDLE
    before = time.time_ns() // 1_000_000
    with step_heartbeat.busy(beat):
        since = int(beat.path.read_bytes())
        assert before <= since <= time.time_ns() // 1_000_000
    assert beat.path.read_bytes() == step_heartbeat.IDLE
    with pytest.raises(RuntimeError), step_heartbeat.busy(beat):
        raise RuntimeError("a failing batch still ends the busy mark")
    assert beat.path.read_bytes() == step_heartbeat.IDLE
    (tmp_path / "dead_0_0.999999999").write_bytes(step_heartbeat.IDLE)
    step_heartbeat.StepHeartbeat.open("another", tmp_path)
    assert not (tmp_path / "dead_0_0.999999999").exists()  # files of processes that are gone are removed
    beat.close()
    assert not beat.path.exists()
    (tmp_path / "a_file").write_text("")
    monkeypatch.setenv(step_heartbeat.ENVIRONMENT_VARIABLE, str(tmp_path / "a_file"))
    logged: list[str] = []
    assert step_heartbeat.open_or_none("image_classifier_core_0_0", logged.append) is None  # cannot be written: none, one line
    assert len(logged) == 1 and "no step heartbeat" in logged[0]
    with step_heartbeat.busy(None):  # and the model serves anyway
        pass


def test_the_deployments_probe_bounds_a_stuck_steps_life(triton):
    """A stub stuck in one batch is restarted within --stuck-after plus the probe's failures (75 s)."""
    probe = triton["livenessProbe"]
    flags = dict(argument.split("=", 1) for argument in probe["exec"]["command"][1:])
    assert int(flags["--stuck-after"]) + probe["periodSeconds"] * probe["failureThreshold"] <= 90
