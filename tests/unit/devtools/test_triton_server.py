"""./scripts/serve before tritonserver starts: ports already in use are refused in one line, untouched; the
client command it suggests per served pipeline (the script of the pipeline's task, --url off the default port)."""

from __future__ import annotations

import re
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from devtools import client, clients, triton_server
from vision_serving import layout, model_config
from vision_serving.tasks import registry

SCRIPTS = layout.REPOSITORY_ROOT / "scripts"


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another server listens on (here: a bare socket on localhost)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for probe in sockets:
            probe.bind(("", 0))
        return [probe.getsockname()[1] for probe in sockets]
    finally:
        for probe in sockets:
            probe.close()


def test_a_port_in_use_is_refused_in_one_line_before_anything_is_built_or_written(busy_port, monkeypatch, capsys):
    def must_not_run(*args, **kwargs):
        raise AssertionError("serve went on past a port in use")

    monkeypatch.setattr(triton_server, "build_artifacts", must_not_run)
    monkeypatch.setattr(triton_server.cpu_sizing, "size_repository", must_not_run)
    grpc, metrics = free_ports(2)
    view = triton_server.BUILD_DIR / "sized" / str(busy_port)
    existed = view.exists()
    argv = ["--http-port", str(busy_port), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    assert triton_server.main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"serve: error: port {busy_port} is in use (another server?); pass --http-port/--grpc-port/--metrics-port"
    ]
    assert view.exists() == existed


def test_the_library_refuses_busy_or_equal_ports_before_it_sizes_the_view(busy_port, monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("the sized view was written")

    monkeypatch.setattr(triton_server.cpu_sizing, "size_repository", must_not_run)
    http, metrics = free_ports(2)
    with pytest.raises(triton_server.LauncherError, match=rf"^port {busy_port} is in use \(another server\?\)"):
        triton_server.LocalTritonServer(http_port=http, grpc_port=busy_port, metrics_port=metrics).start()
    with pytest.raises(triton_server.LauncherError, match=rf"the three ports must differ \(--http-port {http}, --grpc-port {http}, "):
        triton_server.LocalTritonServer(http_port=http, grpc_port=http, metrics_port=metrics).start()
    assert not triton_server.port_in_use(http)


def test_each_served_pipeline_gets_the_client_of_its_task(tmp_path: Path):
    # The shipped pipelines (a user's own folders in model_repository/ are theirs, not this test's).
    by_name = {name: layout.pipeline(name) for name in ("face_detector", "image_classifier", "person_segmenter")}
    served = list(by_name.values())
    assert triton_server.client_commands([by_name["face_detector"]], "localhost:8001") == ["./scripts/detect .build/samples"]
    assert triton_server.client_commands(served, "localhost:9001") == [
        "./scripts/detect --url localhost:9001 .build/samples",
        "./scripts/classify --url localhost:9001 .build/samples",
        "./scripts/segment --url localhost:9001 .build/samples/astronaut.png",
    ]
    # A pipeline of the user's: the script of its task (read from its postprocess config), with --model.
    mine = layout.Pipeline("my_detector", tmp_path / "my_detector")
    mine.model_dir("postprocess").mkdir(parents=True)
    shutil.copy(by_name["face_detector"].model_dir("postprocess") / "config.pbtxt", mine.model_dir("postprocess"))
    assert triton_server.client_commands([mine], "localhost:8001") == ["./scripts/detect --model my_detector .build/samples"]


def test_each_client_script_runs_its_task():
    """A task's client may name a script (a task without one is ``python -m devtools.client --task NAME``): then
    ./scripts/<script> exists, runs scripts/<script>.py, which names the task back, and the script's default model is
    a pipeline of that task; every script that runs a client is the one its task's client names."""
    scripts = {task: script for task in registry.TASKS if (script := clients.client_for(task).script)}
    for task, script in scripts.items():
        module = script.replace("-", "_")
        assert (SCRIPTS / script).is_file()
        assert f'script_main("{task}")' in (SCRIPTS / f"{module}.py").read_text()
        assert f"-m scripts.{module} " in (SCRIPTS / script).read_text()
        default = client.default_model(task)
        if default is not None:
            assert registry.for_config(model_config.load_config(layout.pipeline(default).model_dir("postprocess"))).name == task
    named = {path.stem: re.findall(r'script_main\("(\w+)"\)', path.read_text()) for path in SCRIPTS.glob("*.py")}
    assert {module: tasks for module, tasks in named.items() if tasks} == {
        script.replace("-", "_"): [task] for task, script in scripts.items()
    }


def test_a_pipeline_of_a_task_without_a_client_of_its_own_gets_the_generic_one(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.TASKS, "scratch", SimpleNamespace(name="scratch"))
    mine = layout.Pipeline("mine", tmp_path / "mine")
    mine.model_dir("postprocess").mkdir(parents=True)
    (mine.model_dir("postprocess") / "config.pbtxt").write_text(
        'name: "mine_postprocess" backend: "python" parameters [ { key: "task", value: { string_value: "scratch" } } ]'
    )
    assert triton_server.client_commands([mine], "localhost:9001") == [
        ".venv/bin/python -m devtools.client --task scratch --url localhost:9001 --model mine .build/samples"
    ]


def test_the_server_preloads_jemalloc_where_there_is_one(tmp_path):
    library = tmp_path / "libjemalloc.so.2"
    library.write_bytes(b"")
    assert triton_server.jemalloc_library({"JEMALLOC_LIBRARY": str(library)}) == library
    assert triton_server.jemalloc_library({"JEMALLOC_LIBRARY": str(tmp_path / "none.so")}) is None
    assert triton_server.jemalloc_library({"JEMALLOC_LIBRARY": str(library), "VISION_SERVING_MALLOC": "glibc"}) is None


def test_the_server_environment_puts_jemalloc_first_in_ld_preload(tmp_path, monkeypatch):
    library = tmp_path / "libjemalloc.so.2"
    library.write_bytes(b"")
    monkeypatch.setenv("JEMALLOC_LIBRARY", str(library))
    monkeypatch.setenv("LD_PRELOAD", "/opt/other.so")
    assert triton_server.server_environment()["LD_PRELOAD"] == f"{library}:/opt/other.so"
    monkeypatch.setenv("VISION_SERVING_MALLOC", "glibc")
    assert triton_server.server_environment()["LD_PRELOAD"] == "/opt/other.so"
