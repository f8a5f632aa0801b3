"""builders.build_envs: two builds at once install a build environment once (an flock around the install)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from builders import build_envs

TRY_LOCK = """
import fcntl, sys
with open(sys.argv[1], "a") as handle:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(3)
"""


def test_the_install_lock_excludes_another_process_until_released(tmp_path):
    lock = tmp_path / "envs" / ".x.lock"
    with build_envs.exclusive(lock):
        assert lock.is_file()
        held = subprocess.run([sys.executable, "-c", TRY_LOCK, str(lock)], check=False)
        assert held.returncode == 3, "another process took the lock while it was held"
    free = subprocess.run([sys.executable, "-c", TRY_LOCK, str(lock)], check=False)
    assert free.returncode == 0


def test_a_second_caller_waits_and_finds_the_environment_ready(tmp_path, monkeypatch):
    """ensure_env checks again under the lock: the caller that waited does not install a second time."""
    (tmp_path / "requirements").mkdir()
    requirements = tmp_path / "requirements" / "demo.txt"
    requirements.write_text("# nothing\n")
    monkeypatch.setattr(build_envs, "requirements_file", lambda name: requirements)
    monkeypatch.setattr(build_envs, "env_dir", lambda name: tmp_path / "envs" / name)
    monkeypatch.setattr(build_envs, "env_python", lambda name: tmp_path / "envs" / name / "bin" / "python")
    installs: list[str] = []

    def fake_install(name, requirements, wanted, log):
        installs.append(name)
        time.sleep(0.3)  # the other caller arrives meanwhile and waits on the lock
        python = build_envs.env_python(name)
        python.parent.mkdir(parents=True, exist_ok=True)
        python.write_text("")
        (build_envs.env_dir(name) / build_envs.STAMP_NAME).write_text(wanted + "\n")
        return python

    monkeypatch.setattr(build_envs, "_install", fake_install)
    results: list[object] = []
    callers = [threading.Thread(target=lambda: results.append(build_envs.ensure_env("demo", log=lambda m: None))) for _ in range(2)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert installs == ["demo"] and results == [build_envs.env_python("demo")] * 2
