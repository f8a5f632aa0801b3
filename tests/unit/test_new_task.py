"""A new task is its module and one line in the task registry: the tests accept one they have never seen, unedited.

The tests that read the registry (each unit test module that imports ``vision_serving.tasks.registry``) run in a
subprocess with a throwaway task registered by a pytest plugin written here: the task's own module (a
:class:`~vision_serving.tasks.base.Task` with two outputs, no client module in devtools/clients, no scripts/ entry, no
pipeline in model_repository/) and the one line the registry would hold. They pass as they do without it: the tests
derive the shipped tasks from the registry and the model repository, a client and a script are optional (a task
without a client gets the generic one), and no test lists the tasks.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

UNIT = Path(__file__).resolve().parent
ROOT = UNIT.parent.parent
NAME = "throwaway"

PLUGIN = f'''
"""A throwaway task: its module (this class) and its registry line (the last one)."""

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from vision_serving.tasks import registry
from vision_serving.tasks.base import Role, Task


class ThrowawayTask(Task):
    name = "{NAME}"
    drift_features = ()
    gate_defaults: ClassVar[Mapping[str, float]] = {{}}
    dataset_layout = "none"

    def output_roles(self):
        return (Role("scores", "FP32", (2,), name="SCORES"), Role("names", "BYTES", (None,), name="NAMES"))

    def config_roles(self, config):
        return (), self.output_roles()

    def postprocessor(self, config, model_dir: Path):
        raise NotImplementedError("the throwaway task serves nothing")

    def gate(self, reference, candidate, limits) -> dict[str, Any]:
        raise NotImplementedError

    def dataset(self, directory: Path, postprocessor):
        raise NotImplementedError

    def dataset_metrics(self, runs) -> dict[str, float]:
        raise NotImplementedError

    def response_result(self, postprocessor, outputs):
        raise NotImplementedError


registry.TASKS[ThrowawayTask.name] = ThrowawayTask()
'''

CHECK = f"""
import sys
from vision_serving.tasks import registry
from devtools import client, clients
assert "{NAME}" in registry.TASKS and clients.client_for("{NAME}") is clients.GENERIC and client.default_model("{NAME}") is None
"""


def registry_readers() -> list[Path]:
    """The unit test modules that import the task registry (``from vision_serving.tasks import registry`` or its
    module by name)."""
    found = []
    for path in sorted(UNIT.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == "vision_serving.tasks" and "registry" in {a.name for a in node.names}:
                found.append(path)
                break
            if isinstance(node, (ast.Import, ast.ImportFrom)) and "vision_serving.tasks.registry" in (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            ):
                found.append(path)
                break
    return found


def test_the_tests_that_read_the_task_registry_accept_a_new_task_unedited(tmp_path):
    (tmp_path / "throwaway_task.py").write_text(PLUGIN)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    registered = subprocess.run(
        [sys.executable, "-c", "import throwaway_task\n" + CHECK], capture_output=True, text=True, cwd=ROOT, env=environment, timeout=120
    )
    assert registered.returncode == 0, registered.stderr[-3000:]  # registered, with the generic client and no pipeline
    readers = registry_readers()
    assert {path.relative_to(UNIT).as_posix() for path in readers} >= {"devtools/test_clients.py", "devtools/test_triton_server.py"}
    arguments = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "throwaway_task", *map(str, readers)]
    completed = subprocess.run([sys.executable, *arguments], capture_output=True, text=True, cwd=ROOT, env=environment, timeout=600)
    assert completed.returncode == 0, completed.stdout[-6000:] + completed.stderr[-2000:]
    assert " passed" in completed.stdout.strip().splitlines()[-1]
