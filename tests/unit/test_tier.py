"""The unit tier is what its folder says: it imports no ONNX runtime, graph library or Triton server, conftest included.

Each module of tests/unit is imported in one fresh interpreter (as pytest imports it), then the
interpreter's ``sys.modules`` is read: a unit test that pulls in onnx, onnxruntime, OpenVINO or
onnx-graphsurgeon, directly or through the product module it tests, belongs in tests/onnx. And the
tier's whole collection (tests/conftest.py, its plugins and hooks, every test module) runs in an
interpreter where those packages and the Triton server's are absent, as on a machine without them.
(Starting a tritonserver is counted by tests/conftest.py's summary line.)
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent
ROOT = UNIT.parent.parent
HEAVY = ("onnx", "onnxruntime", "openvino", "onnx_graphsurgeon", "tensorrt")
# Packages the unit tier runs without: those, and the Triton server's (nvidia-pytriton ships tritonserver).
ABSENT = (*HEAVY, "tritonserver", "pytriton")

PROBE = """
import importlib.util, json, sys
sys.path.insert(0, sys.argv[1])
heavy = set(json.loads(sys.argv[2]))
found = {}
for path in sys.argv[3:]:
    before = {name for name in sys.modules if name.split(".")[0] in heavy}
    spec = importlib.util.spec_from_file_location("unit_probe_" + str(len(found)), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found[path] = sorted({name.split(".")[0] for name in sys.modules if name.split(".")[0] in heavy} - before)
print(json.dumps(found))
"""


def test_unit_test_modules_import_no_onnx_runtime_or_graph_library():
    modules = sorted(str(path) for path in UNIT.rglob("test_*.py"))
    assert len(modules) > 20, "the unit tests were not found"
    completed = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT), json.dumps(HEAVY), *modules], capture_output=True, text=True, timeout=300, check=False
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    offenders = {Path(path).relative_to(ROOT).as_posix(): names for path, names in json.loads(completed.stdout).items() if names}
    assert not offenders, f"unit test modules that import {'/'.join(HEAVY)} (move them to tests/onnx): {offenders}"


def imported_modules(path: Path) -> set[str]:
    """Every module an import statement of a file names, at any depth (inside functions too): ``from a import b``
    names ``a`` and ``a.b`` (b may be a module)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


MODULE_PROBE = """
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
heavy = set(json.loads(sys.argv[2]))
found = {}
for name in sys.argv[3:]:
    before = {m.split(".")[0] for m in sys.modules if m.split(".")[0] in heavy}
    try:
        importlib.import_module(name)
    except ImportError:
        continue  # a name imported from a module, not a module
    found[name] = sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0] in heavy} - before)
print(json.dumps(found))
"""


def test_unit_test_modules_import_no_onnx_runtime_or_graph_library_later_either():
    """A function-level import escapes the probe above until its test runs: every module a unit test file imports,
    at any depth, is imported here, and none may pull in onnx or a runtime."""
    files = {path: imported_modules(path) for path in sorted(UNIT.rglob("*.py"))}
    modules = sorted(set().union(*files.values()) - {"__future__"})
    completed = subprocess.run(
        [sys.executable, "-c", MODULE_PROBE, str(ROOT), json.dumps(HEAVY), *modules],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    heavy_modules = {name for name, found in json.loads(completed.stdout).items() if found} | {
        m for m in modules if m.split(".")[0] in HEAVY
    }
    offenders = {path.relative_to(ROOT).as_posix(): sorted(names & heavy_modules) for path, names in files.items() if names & heavy_modules}
    assert not offenders, (
        f"unit test files that import {'/'.join(HEAVY)}, directly or through these modules (move the test to tests/onnx): {offenders}"
    )


WITHOUT = """
import json, sys
absent, asked = set(json.loads(sys.argv[1])), set()


class Absent:
    \"\"\"A finder before all others: the packages named are not installed (and every import of them is noted).\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in absent:
            asked.add(name)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Absent())
import pytest

code = pytest.main(sys.argv[2:])
print(json.dumps({"code": int(code), "asked": sorted(asked)}))
"""


def test_the_unit_tier_collects_and_runs_its_hooks_where_onnx_and_tritonserver_are_absent():
    """``pytest tests/unit`` with onnx, the runtimes and the Triton server's packages uninstalled (a finder refuses
    them): conftest, its plugins and every unit test module import, and its collection hooks run (every test collected,
    then deselected by ``-k``: what the run needs starts at the end of collection), and nothing asked for them."""
    arguments = ["-q", "-p", "no:cacheprovider", "-k", "not test_", str(UNIT)]
    completed = subprocess.run(
        [sys.executable, "-c", WITHOUT, json.dumps(ABSENT), *arguments], capture_output=True, text=True, cwd=ROOT, timeout=600, check=False
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    *output, result = completed.stdout.strip().splitlines()
    found = json.loads(result)
    assert found["asked"] == [], f"the unit tier's collection imports {found['asked']}"
    assert found["code"] == pytest.ExitCode.NO_TESTS_COLLECTED, "\n".join(output[-40:])  # collected, all deselected; no error
    assert re.search(r"\b(\d{3,}) deselected\b", "\n".join(output)), "\n".join(output[-40:])


# A sitecustomize that makes the ONNX runtimes and graph libraries unimportable in an interpreter and its subprocesses.
BLOCKER = "import sys\nfor name in {names!r}:\n    sys.modules[name] = None\n"
# The tests that run unit modules in subprocesses of their own (each is run where it is, not again in there).
SUBPROCESS_TIERS = ("test_tier.py", "test_new_task.py", "test_user_pipeline.py")


def test_the_unit_tier_passes_where_onnx_cannot_import(tmp_path):
    """The README's promise run as it reads: every unit test passes in an interpreter (and its subprocesses) where onnx,
    onnxruntime, OpenVINO, onnx-graphsurgeon and TensorRT cannot be imported."""
    (tmp_path / "sitecustomize.py").write_text(BLOCKER.format(names=HEAVY))
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    blocked = subprocess.run([sys.executable, "-c", "import onnx"], capture_output=True, text=True, env=environment, timeout=60)
    assert blocked.returncode != 0 and "halted" in blocked.stderr
    ignored = [f"--ignore={UNIT / name}" for name in SUBPROCESS_TIERS]
    arguments = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(UNIT), *ignored]
    completed = subprocess.run(arguments, capture_output=True, text=True, cwd=ROOT, env=environment, timeout=1200)
    assert completed.returncode == 0, completed.stdout[-6000:] + completed.stderr[-2000:]
    assert " passed" in completed.stdout.strip().splitlines()[-1]
