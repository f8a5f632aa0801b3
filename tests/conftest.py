"""Shared fixtures (real photos, the built repository, the shared tritonserver) and the tiers.

Each test gets the marker of its folder (``tests/unit`` -> ``unit``, ``tests/onnx`` -> ``onnx``,
``tests/deploy`` -> ``deploy``, ``tests/integration`` -> ``integration``, ``tests/gpu`` -> ``gpu``),
so ``-m`` and a folder select the same tests. At the end of a run the summary counts the
tritonserver processes the run started and which test file started each, and the least free disk and
memory the run saw (tests/support/resources.py).
"""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from builders import photos
from tests.support import background, references, resources, yolo

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
# The tiers, in the order a run takes them: the quick ones first (they fail fast, and they run while the
# build environments install in the background), the ones that start servers last.
TIERS = ("unit", "deploy", "onnx", "integration", "gpu")
# The deployment fixtures (rendered manifests, the Deployment's container), for tests/deploy and tests/integration.
pytest_plugins = ("tests.support.deployment", "tests.support.gateway")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers = {}
    for item in items:
        tier = Path(item.path).resolve().relative_to(TESTS).parts[0]
        if tier not in TIERS:
            raise pytest.UsageError(f"{item.nodeid}: a test lives in one of tests/{{{','.join(TIERS)}}}/")
        other = {marker.name for marker in item.iter_markers()} & set(TIERS) - {tier}
        if other:
            raise pytest.UsageError(f"{item.nodeid}: marked {', '.join(sorted(other))} but lives in tests/{tier}/ (move it)")
        item.add_marker(getattr(pytest.mark, tier))
        tiers[item] = TIERS.index(tier)
    items.sort(key=tiers.__getitem__)  # stable: each tier keeps its files' and tests' order


class ServerStarts:
    """Every tritonserver process started during the run, found by polling /proc (it sees the ones
    ``./scripts/serve`` or the entry script start in a subprocess too), with the test that ran then."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.by_file: Counter[str] = Counter()
        self.current = "(collection)"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="tritonserver-starts", daemon=True)

    def start(self) -> None:
        self.seen = self._running()  # servers that were running before this run are not its own
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _running(self) -> set[int]:
        found = set()
        for entry in os.scandir("/proc"):
            pid = int(entry.name) if entry.name.isdigit() else 0
            # A server's own forks (a Python backend stub before its exec) are not servers.
            if pid and _is_tritonserver(pid) and not _is_tritonserver(_parent(pid)) and self._started_by_this_run(pid):
                found.add(pid)
        return found

    @staticmethod
    def _started_by_this_run(pid: int) -> bool:
        """Whether this pytest process is an ancestor of ``pid`` (other runs' servers are not counted)."""
        while pid > 1:
            if pid == os.getpid():
                return True
            pid = _parent(pid)
        return False

    def _poll(self) -> None:
        while not self._stop.wait(0.5):
            for pid in self._running() - self.seen:
                self.seen.add(pid)
                self.by_file[self.current] += 1


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _is_tritonserver(pid: int) -> bool:
    """Whether the process runs a program named tritonserver (by path, or by name from PATH)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            program = cmdline.read().split(b"\0", 1)[0]
    except OSError:
        return False
    return os.path.basename(program) == b"tritonserver"


SERVER_STARTS = ServerStarts()
RESOURCES = resources.ResourceWatch(REPOSITORY_ROOT)


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.path.isdir("/proc"):
        SERVER_STARTS.start()
    RESOURCES.start()


def _deploy_check_tools(log: object) -> Path:
    from tests.support import deployment  # imported by pytest_plugins above, after this module (assert rewriting)

    return deployment.ensure_deploy_env()


# What a test needs installed, by a fixture it uses (directly or through others): the exports' tf2onnx
# environment for the built repository, the deployment checks' tools, the HEIC/AVIF encoders, the tracker reference.
INSTALLS_BY_FIXTURE = {
    "built_repository": ("tflite-convert", background.build_env("tflite-convert")),
    "tools": ("deploy-check", _deploy_check_tools),
    "heif_files": ("heif-encode", background.build_env("heif-encode")),
    "trackers_python": ("trackers", background.build_env("trackers")),
}


def pytest_collection_finish(session: pytest.Session) -> None:
    """What the selected tests will need starts now (tests/support/background.py): the installs by fixture
    (INSTALLS_BY_FIXTURE) and MediaPipe's environment for the modules comparing with it (tests.support.references),
    and the model repository's build when a test uses the built repository."""
    if session.config.option.collectonly:
        return
    installs = {}
    for item in session.items:
        for fixture in getattr(item, "fixturenames", ()):
            if fixture in INSTALLS_BY_FIXTURE:
                name, call = INSTALLS_BY_FIXTURE[fixture]
                installs[name] = call
        module = getattr(item, "module", None)
        if module is not None and any(value is references for value in vars(module).values()):
            installs[references.ENV] = background.build_env(references.ENV)
    background.install(installs)
    if any("built_repository" in getattr(item, "fixturenames", ()) for item in session.items):
        background.BUILD.start()
    yolo.train_in_background(_yolo_trainers(session.items))


def _yolo_trainers(items: list[pytest.Item]) -> list:
    """The ``trained`` of each YOLO model the selected tests' modules use, in the order the run reaches them: a task's
    (tests/support/yolo_<task>.py) where a module imports it, else the detector's (tests/support/yolo.py, which the
    task modules import for its helpers)."""
    trainers: list = []
    for item in items:
        module = getattr(item, "module", None)
        supports = (
            [value for value in vars(module).values() if getattr(value, "__name__", "").startswith("tests.support.yolo")] if module else []
        )
        tasks = [support for support in supports if support is not yolo and hasattr(support, "trained")]
        for support in tasks or [support for support in supports if support is yolo]:
            if support.trained not in trainers:
                trainers.append(support.trained)
    return trainers


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    background.BUILD.stop()
    RESOURCES.stop()
    if exitstatus == pytest.ExitCode.INTERNAL_ERROR:  # pytest prints no terminal summary then
        for line in RESOURCES.lines():
            print(f"test: {line}", file=sys.stderr)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    SERVER_STARTS.current = RESOURCES.current = item.nodeid.split("::", 1)[0]
    return (yield)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    SERVER_STARTS.stop()
    starts = sum(SERVER_STARTS.by_file.values())
    files = ", ".join(f"{name} {count}" for name, count in sorted(SERVER_STARTS.by_file.items()))
    terminalreporter.write_line(f"tritonserver starts: {starts}" + (f" ({files})" if files else ""))
    for line in RESOURCES.lines():
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def photo_bytes() -> dict[str, bytes]:
    """Encoded bytes of the real photos shipped in installed packages."""
    return {name: photos.photo_bytes(name) for name in photos.registry()}


@pytest.fixture(scope="session")
def built_repository() -> Path:
    """The model repository with its artifacts built (idempotent)."""
    from devtools.triton_server import MODEL_REPOSITORY, build_artifacts

    background.BUILD.wait()  # started at collection (tests/support/background.py)
    build_artifacts()
    return MODEL_REPOSITORY


@pytest.fixture(scope="session")
def triton_server(production_server):
    """The run's shared tritonserver: the model image's content served the way the server image serves
    it, through its entry script with the Deployment's flags (tests/support/deployment.py). Its
    restricted APIs (model repository, shared memory, logging, trace) want the admin key."""
    return production_server
