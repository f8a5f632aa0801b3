"""Every TensorRT name the plan steps use exists in TensorRT 10.8 to 11.1, with the keywords they pass.

The builder interface (builders/tensorrt/interface.py) declares each class, member and keyword the steps use; mypy
checks that the steps use nothing else. tensorrt_bindings.json holds what NVIDIA/TensorRT's pybind11 sources define
at the tags of 10.8.0, 10.9.0, 10.13.3, 10.16, 11.0 and 11.1 (``python -m devtools.tensorrt_bindings``, read from the
sources: no TensorRT runs here). These tests compare the two.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from builders.tensorrt import interface, verify

RECORD = json.loads(Path(__file__).with_name("tensorrt_bindings.json").read_text())
RELEASES = RECORD["releases"]
# Protocols that stand for no class of their own: the module, an opaque logger, the buffer, a DataType member.
NOT_BINDINGS = {"TensorRT", "ILogger", "IHostMemory", "IDataType"}


def protocols() -> dict[str, type]:
    return {
        name: value
        for name, value in vars(interface).items()
        if inspect.isclass(value) and getattr(value, "_is_protocol", False) and value.__module__ == interface.__name__
    }


def declared_members(protocol: type) -> dict[str, list[str] | None]:
    """member -> the keyword names it is called with (None: an attribute or a property)."""
    members: dict[str, list[str] | None] = dict.fromkeys(getattr(protocol, "__annotations__", {}))
    for name, value in vars(protocol).items():
        if name.startswith("_"):
            continue
        if isinstance(value, property):
            members[name] = None
        elif callable(value):
            parameters = list(inspect.signature(value).parameters.values())[1:]
            members[name] = [p.name for p in parameters if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    return members


def test_every_protocol_names_its_binding():
    assert set(protocols()) - NOT_BINDINGS == set(interface.BINDINGS)


@pytest.mark.parametrize("release", sorted(RELEASES))
@pytest.mark.parametrize("protocol", sorted(interface.BINDINGS))
def test_each_member_and_keyword_exists_in_the_release(protocol, release):
    binding = RELEASES[release]["classes"][interface.BINDINGS[protocol]]
    for member, keywords in declared_members(protocols()[protocol]).items():
        if member == "__members__":  # every pybind11 enum has it
            continue
        assert member in binding, f"{interface.BINDINGS[protocol]}.{member} is not in TensorRT {release}'s bindings"
        if keywords:  # passed in this order (and by these names): one definition's first keywords
            assert any(overload[: len(keywords)] == keywords for overload in binding[member]), (protocol, member, binding[member])


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_the_module_has_every_name_the_steps_read(release):
    module = set(RELEASES[release]["module"])
    names = set(interface.TensorRT.__annotations__) - {"__version__"}
    assert names <= module, names - module
    assert RELEASES[release]["has_version"]  # tensorrt.__version__, set by the wheel's __init__.py
    data_types = set(RELEASES[release]["classes"]["DataType"])
    assert set(verify.TRT_DTYPES) <= data_types


def test_what_the_steps_branch_on_is_what_the_releases_differ_in():
    """STRONGLY_TYPED in every release (requested on 10.x, deprecated and not passed on 11); EXPLICIT_BATCH and the
    FP16/INT8 builder flags on 10.x only (the build sets neither); SAME_COMPUTE_CAPABILITY from 10.9."""
    for release, found in RELEASES.items():
        classes = found["classes"]
        major = int(release.lstrip("v").split(".")[0])
        assert "STRONGLY_TYPED" in classes["NetworkDefinitionCreationFlag"], release
        assert ("EXPLICIT_BATCH" in classes["NetworkDefinitionCreationFlag"]) == (major == 10), release
        assert ({"FP16", "INT8"} <= set(classes["BuilderFlag"])) == (major == 10), release
        has_level = "SAME_COMPUTE_CAPABILITY" in classes["HardwareCompatibilityLevel"]
        assert has_level == (release != "v10.8.0"), release
    assert set(interface.VERSIONED_MEMBERS) == {
        ("NetworkDefinitionCreationFlag", "STRONGLY_TYPED"),
        ("HardwareCompatibilityLevel", "SAME_COMPUTE_CAPABILITY"),
    }


def test_the_record_covers_the_oldest_supported_release_and_both_majors():
    assert f"v{interface.MIN_TENSORRT[0]}.{interface.MIN_TENSORRT[1]}.0" in RELEASES
    assert {release.split(".")[0] for release in RELEASES} == {"v10", "v11"}
    assert all(len(found["commit"]) == 40 for found in RELEASES.values())
