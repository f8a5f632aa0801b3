"""Dependency locks: ``requirements/<set>.in`` (edited by hand) -> ``requirements/<set>.txt`` (generated).

Every set is resolved by ``uv pip compile --generate-hashes`` for the interpreter and
platform it is installed on (not this machine's), from PyPI alone, with every transitive
dependency pinned and every file hashed, so each is installed with ``pip install
--require-hashes``. A lock's header records the sha256 of its inputs (the ``.in`` file, the
files it includes with ``-r`` and the resolution options), so a stale lock is detected
without a network (``--check``; tests/unit/test_dependency_locks.py)::

    python -m devtools.lock              # every set (scripts/lock)
    python -m devtools.lock image dev    # some sets
    python -m devtools.lock --check      # exit 1 naming the stale locks; resolves nothing
    python -m devtools.lock --upgrade    # newest versions the inputs allow (default: keep the locked ones)

The ``dev`` set takes torch as the +cpu wheel from a local wheel directory
(``--torch-find-links``, default /opt/wheels): PyPI's Linux torch is the CUDA build.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from vision_serving.layout import REQUIREMENTS_DIR

PYPI = "https://pypi.org/simple"
TORCH_FIND_LINKS = "/opt/wheels"
HEADER_HASH = "# inputs-sha256: "
# Ubuntu 24.04 (the 26.xx NVIDIA images) has glibc 2.39; manylinux_2_28 wheels and older install there.
IMAGE_PLATFORM = "x86_64-manylinux_2_28"
# This machine and CI: Python 3.11 on Debian 12 (glibc 2.36); nvidia-pytriton 0.7.0 needs manylinux_2_35.
LOCAL_PLATFORM = "x86_64-manylinux_2_35"


@dataclass(frozen=True)
class LockSet:
    name: str
    purpose: str
    python_version: str
    platform: str
    torch_cpu: bool = False  # torch is the +cpu wheel from the torch find-links location
    no_deps: bool = False  # the packages of the .in alone (installed with pip --no-deps)
    drop: str | None = None  # fullmatch of package names left out of the lock (installed otherwise)

    @property
    def input(self) -> Path:
        return REQUIREMENTS_DIR / f"{self.name}.in"

    @property
    def lock(self) -> Path:
        return REQUIREMENTS_DIR / f"{self.name}.txt"

    def options(self) -> str:
        return f"python {self.python_version}, {self.platform}, torch_cpu={self.torch_cpu}, no_deps={self.no_deps}, drop={self.drop}"


SETS = (
    LockSet("pip", "pip itself, installed first into every venv made here (see pip.in)", "3.11", LOCAL_PLATFORM, no_deps=True),
    LockSet("image", "the serving image's Python backend (docker/server.Dockerfile), wheels only", "3.12", IMAGE_PLATFORM),
    LockSet("gateway", "the image gateway's image (docker/gateway.Dockerfile), wheels only", "3.12", IMAGE_PLATFORM),
    LockSet("streams", "the stream service's image (docker/streams.Dockerfile), wheels only", "3.12", IMAGE_PLATFORM),
    LockSet(
        "builder",
        "the builder image (docker/builder.Dockerfile); torch (CPU) comes from TORCH_INDEX_URL, so it and PyPI torch's CUDA packages are left out",
        "3.12",
        IMAGE_PLATFORM,
        # cuda-python and its pure bindings stay (the GPU tests' numeric checks); the CUDA runtimes torch pulls in go.
        drop=r"torch|triton|cuda-(?!python$|bindings$|pathfinder$|core$).*|nvidia-(?!ml-py$).*",
    ),
    LockSet("dev", ".venv: the local server, the builders and the tests (scripts/bootstrap.sh)", "3.11", LOCAL_PLATFORM, torch_cpu=True),
    LockSet("modelopt", "nvidia-modelopt alone, installed --no-deps after dev.txt or builder.txt", "3.11", LOCAL_PLATFORM, no_deps=True),
    LockSet(
        "deploy-check", "the deployment checks' venv, .build/deploy-check (tests/integration/test_deployment.py)", "3.11", LOCAL_PLATFORM
    ),
    LockSet("tflite-convert", "build environment .build/envs/tflite-convert (builders/build_envs.py)", "3.11", LOCAL_PLATFORM),
    LockSet("mediapipe", "build environment .build/envs/mediapipe (builders/build_envs.py)", "3.11", LOCAL_PLATFORM),
    LockSet(
        "ultralytics",
        "the tests' YOLO and SAHI reference environment .build/envs/ultralytics (builders/build_envs.py)",
        "3.11",
        LOCAL_PLATFORM,
        drop="triton",  # OpenAI's Triton, torch's GPU kernel compiler: 0.9 GB that nothing on the CPU imports
    ),
    LockSet("trackers", "the tests' tracker reference environment .build/envs/trackers (builders/build_envs.py)", "3.11", LOCAL_PLATFORM),
    LockSet("rapidocr", "the tests' OCR reference environment .build/envs/rapidocr (builders/build_envs.py)", "3.11", LOCAL_PLATFORM),
    LockSet("heif-encode", "the tests' HEIC and AVIF encoders .build/envs/heif-encode (builders/build_envs.py)", "3.11", LOCAL_PLATFORM),
)
BY_NAME = {lock_set.name: lock_set for lock_set in SETS}


class LockError(Exception):
    """A user-facing failure: one line."""


@dataclass(frozen=True)
class Pin:
    name: str  # normalized (PEP 503)
    version: str
    hashes: tuple[str, ...]


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([^\s;\\#]+)")
_INCLUDE = re.compile(r"^-r\s+(\S+)")


def input_files(path: Path) -> list[Path]:
    """``path`` and every file it includes with ``-r``, depth first, each once."""
    found: list[Path] = []

    def visit(current: Path) -> None:
        if current in found:
            return
        found.append(current)
        for line in current.read_text().splitlines():
            include = _INCLUDE.match(line.strip())
            if include:
                visit((current.parent / include.group(1)).resolve())

    visit(path.resolve())
    return found


def input_pins(path: Path) -> dict[str, str]:
    """Normalized name -> version of every ``name==version`` in ``path`` and its includes."""
    pins: dict[str, str] = {}
    for file in input_files(path):
        for line in file.read_text().splitlines():
            requirement = _REQUIREMENT.match(line.strip())
            if requirement:
                name = normalize(requirement.group(1))
                if pins.setdefault(name, requirement.group(3)) != requirement.group(3):
                    raise LockError(f"{file.name}: {name} pinned twice, to {pins[name]} and {requirement.group(3)}")
    return pins


def inputs_sha256(lock_set: LockSet) -> str:
    digest = hashlib.sha256(lock_set.options().encode())
    for file in input_files(lock_set.input):
        digest.update(f"\n{file.name}\n".encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def read_lock(path: Path) -> dict[str, Pin]:
    """The pins of a generated lock file (a package line at column 0, its ``--hash`` lines after it)."""
    pins: dict[str, Pin] = {}
    name = version = None
    hashes: list[str] = []

    def close() -> None:
        if name is not None and version is not None:
            pins[name] = Pin(name, version, tuple(hashes))

    for line in path.read_text().splitlines():
        requirement = _REQUIREMENT.match(line)
        if requirement:
            close()
            name, version, hashes = normalize(requirement.group(1)), requirement.group(3), []
        hashes += re.findall(r"--hash=(sha256:[0-9a-f]{64})", line)
    close()
    return pins


def recorded_sha256(path: Path) -> str | None:
    for line in path.read_text().splitlines():
        if line.startswith(HEADER_HASH):
            return line.removeprefix(HEADER_HASH).strip()
    return None


def stale(lock_set: LockSet) -> str | None:
    """Why ``lock_set``'s lock does not match its inputs, or None."""
    if not lock_set.lock.is_file():
        return f"{lock_set.lock.name} is missing"
    if recorded_sha256(lock_set.lock) != inputs_sha256(lock_set):
        return f"{lock_set.lock.name} is older than {lock_set.input.name} (or its includes)"
    return None


def _drop_blocks(text: str, pattern: str) -> str:
    """``text`` without the package blocks (the package line and its indented lines) whose name fullmatches ``pattern``."""
    kept: list[str] = []
    dropping = False
    for line in text.splitlines():
        requirement = _REQUIREMENT.match(line)
        if requirement:
            dropping = re.fullmatch(pattern, normalize(requirement.group(1))) is not None
        elif not line.startswith(" "):
            dropping = False
        if not dropping:
            kept.append(line)
    return "\n".join(kept) + "\n"


def uv_executable() -> str:
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.is_file() else shutil.which("uv")
    if found is None:
        raise LockError("uv not found: install requirements/dev.txt (scripts/bootstrap.sh) or put uv 0.13 on PATH")
    return found


def compile_lock(lock_set: LockSet, uv: str, torch_find_links: str, upgrade: bool = False) -> str:
    """The lock file's text for ``lock_set`` (uv resolves; nothing is written). uv keeps the
    versions of the current lock where the inputs allow (it reads its output file first)
    unless ``upgrade``."""
    with tempfile.TemporaryDirectory() as scratch:
        output = Path(scratch) / lock_set.lock.name
        if lock_set.lock.is_file() and not upgrade:
            shutil.copyfile(lock_set.lock, output)
        command = [
            uv,
            "pip",
            "compile",
            "--no-config",
            "--quiet",
            "--generate-hashes",
            "--no-header",
            "--python-version",
            lock_set.python_version,
            "--python-platform",
            lock_set.platform,
            "--index-url",
            PYPI,
            "--output-file",
            str(output),
        ]
        if lock_set.torch_cpu:
            command += ["--find-links", torch_find_links]
        if lock_set.no_deps:
            command.append("--no-deps")
        if upgrade:
            command.append("--upgrade")
        environment = {key: value for key, value in os.environ.items() if not key.startswith("UV_")}
        completed = subprocess.run(
            [*command, lock_set.input.name], cwd=REQUIREMENTS_DIR, capture_output=True, text=True, env=environment, check=False
        )
        if completed.returncode != 0:
            message = " | ".join(line.strip() for line in completed.stderr.strip().splitlines()[-6:] if line.strip())
            raise LockError(f"cannot resolve {lock_set.input.name}: {message}")
        body = output.read_text()
    if lock_set.drop:
        body = _drop_blocks(body, lock_set.drop)
    if lock_set.torch_cpu:
        torch = re.search(r"^torch==(\S+)", body, re.MULTILINE)
        if torch is None or not torch.group(1).endswith("+cpu"):
            raise LockError(
                f"{lock_set.lock.name} would lock PyPI's CUDA torch: no torch +cpu wheel in {torch_find_links} (--torch-find-links)"
            )
    header = (
        f"# requirements/{lock_set.lock.name}: {lock_set.purpose}.\n"
        f"# Generated from {lock_set.input.name} by `python -m devtools.lock` (scripts/lock); do not edit.\n"
        f"# Resolved with uv for Python {lock_set.python_version} on {lock_set.platform}, from {PYPI}"
        + (f" (torch: the +cpu wheel of {torch_find_links})" if lock_set.torch_cpu else "")
        + ".\n"
        f"{HEADER_HASH}{inputs_sha256(lock_set)}\n"
    )
    return header + body


def write_lock(lock_set: LockSet, text: str) -> None:
    partial = lock_set.lock.with_name(f".{lock_set.lock.name}.tmp")
    partial.write_text(text)
    partial.replace(lock_set.lock)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.lock", description=__doc__.split("\n", 1)[0])
    parser.add_argument("sets", nargs="*", metavar="SET", help=f"sets to lock (default: all): {', '.join(BY_NAME)}")
    parser.add_argument("--check", action="store_true", help="resolve nothing; exit 1 naming every lock older than its inputs")
    parser.add_argument(
        "--upgrade", action="store_true", help="newest versions the inputs allow (default: keep the current locks' versions)"
    )
    parser.add_argument("--torch-find-links", default=TORCH_FIND_LINKS, help="where the torch +cpu wheel is (dev set; default %(default)s)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.sets if name not in BY_NAME]
    if unknown:
        parser.error(f"unknown set {unknown[0]!r} (choose from {', '.join(BY_NAME)})")
    chosen = [BY_NAME[name] for name in args.sets] or list(SETS)
    try:
        if args.check:
            problems = [problem for problem in map(stale, chosen) if problem]
            for problem in problems:
                print(f"lock: {problem}: run python -m devtools.lock", file=sys.stderr)
            return 1 if problems else 0
        uv = uv_executable()
        for lock_set in tqdm(chosen, desc="lock", unit="set", file=sys.stderr):
            write_lock(lock_set, compile_lock(lock_set, uv, args.torch_find_links, args.upgrade))
    except LockError as error:
        print(f"lock: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
