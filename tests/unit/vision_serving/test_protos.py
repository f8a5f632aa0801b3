"""vision_serving.protos: Triton's model configuration schema vendored from a release, so the serving
image needs no client library (tritonclient, grpcio); the copy is checked against its sources."""

from __future__ import annotations

import hashlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

from vision_serving import layout, protos
from vision_serving.protos import model_config_pb2

PROTOS = Path(protos.__file__).parent
PROTO = PROTOS / "model_config.proto"
MODULE = PROTOS / "model_config_pb2.py"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_vendored_files_are_the_recorded_ones():
    assert sha256(PROTO) == protos.PROTO_SHA256
    assert sha256(MODULE) == protos.MODULE_SHA256
    assert "Redistribution and use in source and binary forms" in (PROTOS / "LICENSE").read_text()


def test_the_module_is_tritonclient_s_own_copy_byte_for_byte():
    """The dev set's tritonclient (the client side of every test) speaks the same schema: a
    tritonclient upgrade that changes it fails here, and both modules can share one process."""
    from importlib import metadata

    assert metadata.version("tritonclient") == protos.TRITONCLIENT_VERSION
    spec = importlib.util.find_spec("tritonclient.grpc")
    assert spec is not None and spec.submodule_search_locations
    installed = Path(next(iter(spec.submodule_search_locations))) / "model_config_pb2.py"
    assert installed.read_bytes() == MODULE.read_bytes()


def test_the_proto_declares_exactly_the_fields_and_enum_values_of_the_module():
    text = PROTO.read_text()
    assert 'syntax = "proto3";' in text and re.search(r"^package inference;", text, re.MULTILINE)
    descriptor = model_config_pb2.DESCRIPTOR
    assert descriptor.name == "model_config.proto" and descriptor.package == "inference"
    checked = 0

    def visit(message) -> None:
        nonlocal checked
        if message.GetOptions().map_entry:
            return  # protoc's synthetic entry of a map<K, V> field (the field itself is checked)
        assert re.search(rf"\bmessage {message.name}\b", text), message.full_name
        for field in message.fields:
            assert re.search(rf"\b{field.name}\s*=\s*{field.number}\s*;", text), field.full_name
            checked += 1
        for enum in message.enum_types:
            visit_enum(enum)
        for nested in message.nested_types:
            visit(nested)

    def visit_enum(enum) -> None:
        nonlocal checked
        assert re.search(rf"\benum {enum.name}\b", text), enum.full_name
        for value in enum.values:
            assert re.search(rf"\b{value.name}\s*=\s*{value.number}\s*;", text), (enum.full_name, value.name)
            checked += 1

    for message in descriptor.message_types_by_name.values():
        visit(message)
    for enum in descriptor.enum_types_by_name.values():
        visit_enum(enum)
    # ... and the .proto declares nothing else: one `name = number;` outside comments per field and value.
    declarations = [line for line in (line.split("//")[0] for line in text.splitlines()) if re.search(r"\b\w+\s*=\s*\d+\s*;", line)]
    assert checked == len(declarations) == 196, (checked, len(declarations))


# In a fresh interpreter where tritonclient and grpc cannot be imported (as in the serving image):
# import every vision_serving module a Python model uses and parse every config of the repository.
WITHOUT_CLIENT = """
import importlib, json, pkgutil, sys
sys.modules["tritonclient"] = None
sys.modules["grpc"] = None
import vision_serving
from pathlib import Path
from google.protobuf import json_format
names = [m.name for m in pkgutil.walk_packages(vision_serving.__path__, "vision_serving.") if ".triton_models" not in m.name]
imported = []
for name in names:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as error:  # a module of the ONNX runtimes, on a machine without them (the unit tier's)
        if (error.name or "").split(".")[0] not in ("onnx", "onnxruntime", "openvino"):
            raise
        continue
    imported.append(name)
from vision_serving import model_config
parsed = 0
for path in sorted(Path(sys.argv[1]).rglob("*.pbtxt")):
    config = model_config.parse_config_text(path.read_text(), str(path))
    assert model_config.config_from_triton_json(json_format.MessageToJson(config)) == config, path
    parsed += 1
client = [name for name, module in sys.modules.items() if name.split(".")[0] in ("tritonclient", "grpc") and module is not None]
print(json.dumps({"modules": len(imported), "configs": parsed, "client_loaded": client}))
"""


def test_vision_serving_imports_and_parses_every_config_without_a_client_library():
    completed = subprocess.run(
        [sys.executable, "-c", WITHOUT_CLIENT, str(layout.MODEL_REPOSITORY)],
        cwd=layout.REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = __import__("json").loads(completed.stdout.strip().splitlines()[-1])
    assert result["modules"] >= 10 and result["configs"] >= 12 and not result["client_loaded"], result


BOTH = """
import importlib, sys
first, second = (importlib.import_module(name) for name in sys.argv[1:])
assert first.ModelConfig is second.ModelConfig and first.DESCRIPTOR is second.DESCRIPTOR
import tritonclient.grpc  # its service_pb2 imports its model_config_pb2 as well
print("ok")
"""


def test_the_vendored_and_the_client_schema_share_one_process_in_either_order():
    """Tests and devtools import both (vision_serving for configs, tritonclient for requests): the default
    descriptor pool takes the identical file twice and both modules hand out the same classes."""
    names = ["vision_serving.protos.model_config_pb2", "tritonclient.grpc.model_config_pb2"]
    for order in (names, names[::-1]):
        completed = subprocess.run(
            [sys.executable, "-c", BOTH, *order], cwd=layout.REPOSITORY_ROOT, capture_output=True, text=True, timeout=300, check=False
        )
        assert completed.returncode == 0 and completed.stdout.strip() == "ok", (order, completed.stderr[-3000:])
