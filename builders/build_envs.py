"""Separate virtual environments for build tools that cannot share the serving environment.

Some build steps need packages whose pins conflict with ``.venv`` (TensorFlow and
tf2onnx want numpy 2 and protobuf 7; MediaPipe pins its own protobuf). Each such
tool gets a venv of its own under ``.build/envs/<name>``, installed with
``--require-hashes --no-deps`` from the lock ``requirements/<name>.txt`` (generated from
``requirements/<name>.in`` by ``python -m devtools.lock``), after pip itself from
``requirements/pip.txt``. A stamp file in the venv records the
sha256 of the requirements file it was installed from; the venv is (re)installed
only when that hash changes, so repeated builds cost nothing.

The venvs are made with the base interpreter of the running Python (the one
``.venv`` itself was made from), so they have the same Python version.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from builders import BuildError, Log
from builders.artifacts import sha256_file

ROOT = Path(__file__).resolve().parent.parent
ENVS_DIR = ROOT / ".build" / "envs"
REQUIREMENTS_DIR = ROOT / "requirements"
STAMP_NAME = ".requirements.sha256"
PIP_LOCK = REQUIREMENTS_DIR / "pip.txt"
_TAIL_LINES = 12


def _stderr_log(message: str) -> None:
    print(f"envs: {message}", file=sys.stderr, flush=True)


def _base_python() -> str:
    """The interpreter the running venv was created from (itself when not in a venv)."""
    base_executable = getattr(sys, "_base_executable", None)
    for candidate in (
        Path(base_executable) if isinstance(base_executable, str) else None,
        Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}",
        Path(sys.base_prefix) / "bin" / "python3",
    ):
        if candidate is not None and candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return sys.executable


def _tail(text: str, lines: int = _TAIL_LINES) -> str:
    kept = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    # pip repeats "is ignored" warnings for every unreachable find-links location: noise.
    kept = [line for line in kept if "is neither a file nor a directory" not in line]
    return " | ".join(kept[-lines:]) if kept else "(no output)"


def env_dir(name: str) -> Path:
    return ENVS_DIR / name


def env_python(name: str) -> Path:
    return env_dir(name) / "bin" / "python"


def requirements_file(name: str) -> Path:
    return REQUIREMENTS_DIR / f"{name}.txt"


def ensure_env(name: str, log: Log = _stderr_log) -> Path:
    """The python executable of ``.build/envs/<name>``, created and installed as needed.

    Raises :class:`builders.BuildError` (one line: the tail of pip's output) when
    the requirements file is missing or pip fails; a failed install leaves no
    stamp, so the next call tries again.
    """
    requirements = requirements_file(name)
    if not requirements.is_file():
        raise BuildError(f"no requirements file for build environment {name!r}: {requirements}")
    wanted = sha256_file(requirements)
    venv, python = env_dir(name), env_python(name)
    stamp = venv / STAMP_NAME
    if python.is_file() and stamp.is_file() and stamp.read_text().strip() == wanted:
        return python
    with exclusive(venv.parent / f".{name}.lock"):  # another build may be installing it right now
        if python.is_file() and stamp.is_file() and stamp.read_text().strip() == wanted:
            return python
        return _install(name, requirements, wanted, log)


@contextlib.contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """Holds an exclusive flock on ``lock_file`` (created as needed) across processes."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _install(name: str, requirements: Path, wanted: str, log: Log) -> Path:
    """Creates ``.build/envs/<name>`` if needed and installs ``requirements`` into it; writes the stamp last."""
    venv, python = env_dir(name), env_python(name)
    stamp = venv / STAMP_NAME
    if not python.is_file():
        log(f"creating venv {venv.relative_to(ROOT)} ({_base_python()})")
        venv.parent.mkdir(parents=True, exist_ok=True)
        created = subprocess.run([_base_python(), "-m", "venv", str(venv)], capture_output=True, text=True, check=False)
        if created.returncode != 0:
            raise BuildError(f"cannot create venv {venv}: {_tail(created.stderr + created.stdout, 3)}")
    stamp.unlink(missing_ok=True)
    log(f"installing {requirements.relative_to(ROOT)} into {venv.relative_to(ROOT)} (this can take minutes)")
    # pip first: the venv's bundled pip may fail --require-hashes on a dependency's extras (requirements/pip.in).
    # --no-compile: Python compiles the modules a build imports when it first imports them, instead of
    # every module at install time (tflite-convert's install, measured: user CPU 34 s -> 18 s, user + sys
    # 39 s -> 30 s, wall 40 s -> 31 s); the first build that imports them pays for those it uses.
    for locked in (PIP_LOCK, requirements):
        installed = subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-input",
                "--no-compile",
                "--require-hashes",
                "--no-deps",  # a lock names every package to install, and a set's `drop` leaves some out on purpose
                "-r",
                str(locked),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if installed.returncode != 0:
            raise BuildError(
                f"pip install -r {locked.relative_to(ROOT)} failed in {venv.relative_to(ROOT)}: {_tail(installed.stderr or installed.stdout, 4)}"
            )
    stamp.write_text(wanted + "\n")
    log(f"{name}: ready")
    return python


def run_in_env(
    name: str,
    args: list[str],
    log: Log = _stderr_log,
    *,
    cwd: Path | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``<env python> *args`` in the build environment ``name``; output is captured.

    Raises :class:`builders.BuildError` with the last lines of stderr when the
    command exits non-zero or runs past ``timeout`` seconds.
    """
    python = ensure_env(name, log)
    command = [str(python), *args]
    log(f"{name}: {' '.join(args)}")
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False, cwd=cwd or ROOT, timeout=timeout)
    except subprocess.TimeoutExpired as error:
        raise BuildError(f"{name}: {' '.join(args[:3])} ran past {timeout}s") from error
    if result.returncode != 0:
        raise BuildError(f"{name}: {' '.join(args[:3])} exited {result.returncode}: {_tail(result.stderr or result.stdout)}")
    return result
