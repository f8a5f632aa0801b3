"""The unit tier is what its folder says: its test modules import no ONNX runtime or graph library.

Each module of tests/unit is imported in one fresh interpreter (as pytest imports it), then the
interpreter's ``sys.modules`` is read: a unit test that pulls in onnx, onnxruntime, OpenVINO or
onnx-graphsurgeon, directly or through the product module it tests, belongs in tests/onnx.
(Starting a tritonserver is counted by tests/conftest.py's summary line.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

UNIT = Path(__file__).resolve().parent
ROOT = UNIT.parent.parent
HEAVY = ("onnx", "onnxruntime", "openvino", "onnx_graphsurgeon", "tensorrt")

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
