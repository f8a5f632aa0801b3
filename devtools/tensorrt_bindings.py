"""Record the names TensorRT's Python bindings define, from their sources, for the builder interface's check.

    python -m devtools.tensorrt_bindings --repository PATH [--tag TAG ...] > tests/unit/builders/tensorrt/tensorrt_bindings.json

PATH is a git clone of NVIDIA/TensorRT (its tags name the releases). The bindings are pybind11 code in
``python/src`` (``py::class_<...>(m, "Name")`` and ``py::enum_<...>(m, "Name")`` with their chained ``.def("x",
..., "arg"_a)``, ``.def_property[_readonly]("x")``, ``.def_readwrite("x")`` and ``.value("X")``); ``__version__`` is set by
``python/packaging/bindings_wheel/tensorrt/__init__.py``. For each tag this writes, for the classes the builder
interface stands for (:data:`builders.tensorrt.interface.BINDINGS`) and the module's own names, every member and
its keyword arguments. ``tests/unit/builders/tensorrt/test_bindings.py`` checks the interface against the result:
no TensorRT is needed to run that check, only to refresh this record when a release is added.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from builders.tensorrt import interface

DEFAULT_TAGS = ("v10.8.0", "v10.9.0", "v10.13.3", "v10.16", "v11.0", "v11.1")
SOURCES = (
    "python/src/infer/pyCore.cpp",
    "python/src/infer/pyFoundationalTypes.cpp",
    "python/src/infer/pyGraph.cpp",
    "python/src/parsers/pyOnnx.cpp",
)
PACKAGE_INIT = "python/packaging/bindings_wheel/tensorrt/__init__.py"
# The module's names the interface reads beyond its Protocols' classes (enums read by member name, DataType's names).
MODULE_CLASSES = ("NetworkDefinitionCreationFlag", "HardwareCompatibilityLevel", "DataType")

_DECLARATION = re.compile(r'py::(class_|enum_)<\s*([\w:]+)((?:\s*,\s*[\w:<>]+)*)\s*>\s*(\w+)?\s*[({]\s*(\w+)\s*,\s*"(\w+)"')
_MEMBER = re.compile(r'\.(def|def_property|def_property_readonly|def_readwrite|def_readonly|def_static|value)\(\s*"(\w+)"')
_KEYWORD = re.compile(r'"(\w+)"_a')


def _show(repository: Path, tag: str, path: str) -> str:
    completed = subprocess.run(["git", "-C", str(repository), "show", f"{tag}:{path}"], capture_output=True, text=True, check=False)
    return completed.stdout if completed.returncode == 0 else ""


def _statement_end(text: str, start: int) -> int:
    """The index of the ``;`` that ends the C++ statement starting at ``start`` (strings and brackets skipped)."""
    depth, index, in_string = 0, start, False
    while index < len(text):
        char = text[index]
        if in_string:
            if char == "\\":
                index += 2
                continue
            in_string = char != '"'
        elif char == '"':
            in_string = True
        elif char in "({[":
            depth += 1
        elif char in ")}]":
            depth -= 1
        elif char == ";" and depth <= 0:
            return index
        index += 1
    return len(text)


def _members(body: str) -> dict[str, list[list[str]]]:
    """Each member a chain of pybind11 calls defines, with the keyword names of each of its definitions (overloads)."""
    found: dict[str, list[list[str]]] = {}
    matches = list(_MEMBER.finditer(body))
    for match, following in zip(matches, [*matches[1:], None]):
        segment = body[match.end() : following.start() if following else len(body)]
        keywords = _KEYWORD.findall(segment) if match.group(1) not in ("value", "def_property", "def_property_readonly") else []
        found.setdefault(match.group(2), []).append(keywords)
    return found


def _merge(into: dict[str, list[list[str]]], members: dict[str, list[list[str]]]) -> None:
    for name, overloads in members.items():
        known = into.setdefault(name, [])
        known += [keywords for keywords in overloads if keywords not in known]


def bindings(repository: Path, tag: str) -> dict[str, dict[str, list[list[str]]]]:
    """Python class name -> member -> the keyword names of each definition, for every class the sources define at ``tag``."""
    classes: dict[str, dict[str, list[list[str]]]] = {}
    cpp_names: dict[str, str] = {}
    variables: dict[str, str] = {}
    bases: dict[str, list[str]] = {}
    for text in (_show(repository, tag, path) for path in SOURCES):
        for match in _DECLARATION.finditer(text):
            kind, cpp, rest, variable, scope, name = match.groups()
            body = text[match.end() : _statement_end(text, match.start())]
            members = _members(body)
            _merge(classes.setdefault(name, {}), members)
            cpp_names[cpp.split("::")[-1]] = name
            if variable:
                variables[variable] = name
            if kind == "class_" and rest.strip(", "):
                bases[name] = [base.strip().split("::")[-1] for base in rest.split(",") if base.strip()]
            if kind == "enum_" and ".export_values()" in body and scope in variables:  # values in the enclosing class too
                _merge(classes.setdefault(variables[scope], {}), members)
        for variable, name in variables.items():  # members added later: `binding.def(...)`
            for match in re.finditer(rf"\b{variable}\s*\.", text):
                _merge(classes[name], _members(text[match.start() : _statement_end(text, match.start())]))
    for name, names in bases.items():
        for base in names:
            if base in cpp_names:
                _merge(classes[name], classes.get(cpp_names[base], {}))
    return classes


def record(repository: Path, tags: Sequence[str]) -> dict[str, Any]:
    wanted = {*interface.BINDINGS.values(), *MODULE_CLASSES}
    module_names = set(interface.TensorRT.__annotations__) - {"__version__"}
    releases = {}
    for tag in tags:
        commit = subprocess.run(["git", "-C", str(repository), "rev-list", "-n1", tag], capture_output=True, text=True, check=True)
        classes = bindings(repository, tag)
        releases[tag] = {
            "commit": commit.stdout.strip(),
            "module": sorted(module_names & set(classes)),  # the module's names the interface reads, where defined
            "has_version": "__version__ =" in _show(repository, tag, PACKAGE_INIT),
            "classes": {name: dict(sorted(classes[name].items())) for name in sorted(wanted) if name in classes},
        }
    return {
        "source": "NVIDIA/TensorRT, python/src (pybind11) and python/packaging/bindings_wheel/tensorrt/__init__.py",
        "command": "python -m devtools.tensorrt_bindings --repository PATH",
        "releases": releases,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.tensorrt_bindings", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repository", type=Path, required=True, help="a git clone of NVIDIA/TensorRT")
    parser.add_argument("--tag", action="append", help=f"a release tag (repeatable; default: {' '.join(DEFAULT_TAGS)})")
    args = parser.parse_args(argv)
    sys.stdout.write(dumps(record(args.repository, args.tag or DEFAULT_TAGS)))
    return 0


def dumps(found: dict[str, Any]) -> str:
    """The record as JSON with one line per class of each release (its members and their keywords on that line)."""
    lines = ["{", f' "source": {json.dumps(found["source"])},', f' "command": {json.dumps(found["command"])},', ' "releases": {']
    releases = list(found["releases"].items())
    for index, (tag, release) in enumerate(releases):
        lines += [f"  {json.dumps(tag)}: {{", f'   "commit": {json.dumps(release["commit"])},']
        lines += [
            f'   "has_version": {json.dumps(release["has_version"])},',
            f'   "module": {json.dumps(release["module"])},',
            '   "classes": {',
        ]
        classes = list(release["classes"].items())
        lines += [
            f"    {json.dumps(name)}: {json.dumps(members)}{',' * (n < len(classes) - 1)}" for n, (name, members) in enumerate(classes)
        ]
        lines += ["   }", "  }" + "," * (index < len(releases) - 1)]
    return "\n".join([*lines, " }", "}"]) + "\n"


if __name__ == "__main__":
    sys.exit(main())
