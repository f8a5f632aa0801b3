"""builders/ and vision_serving/ have no import cycles, and nothing imports scripts/.

Read with ``ast``, nothing is imported. Every import counts, at module level and inside functions
(deferred imports, e.g. the CLI importing a step only when it runs, would hide a cycle, not remove
it); only ``if TYPE_CHECKING:`` imports, which never run, are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("builders", "vision_serving", "devtools", "benchmarks", "tests")
CHECKED_FOR_CYCLES = ("builders", "vision_serving")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(statements: list[ast.stmt], name: str, is_package: bool, top_level: bool) -> list[tuple[str, bool]]:
    """(imported module, at import time) for every import in ``statements``, recursively."""
    found: list[tuple[str, bool]] = []
    for node in statements:
        if isinstance(node, ast.Import):
            found += [(alias.name, top_level) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.append((target, top_level))
            found += [(f"{target}.{alias.name}", top_level) for alias in node.names]
        elif isinstance(node, ast.If) and _is_type_checking(node):
            found += _imports(node.orelse, name, is_package, top_level)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            found += _imports(node.body, name, is_package, False)  # type: ignore[arg-type]
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                children = getattr(node, field, None)
                if isinstance(children, list) and children and isinstance(children[0], (ast.stmt, ast.ExceptHandler)):
                    found += _imports(children, name, is_package, top_level)  # type: ignore[arg-type]
    return found


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module -> project modules imported at import time, module -> every module it imports anywhere)."""
    known = modules()
    eager: dict[str, set[str]] = {}
    every: dict[str, set[str]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        eager[name], every[name] = set(), set()
        for target, at_import in _imports(tree.body, name, path.name == "__init__.py", True):
            every[name].add(target)
            if target in known and target != name and at_import:
                eager[name].add(target)
    return eager, every


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _scoped(graph: dict[str, set[str]], known: set[str]) -> dict[str, set[str]]:
    return {
        name: {
            target
            for target in targets
            if target in known and target != name and target.startswith(CHECKED_FOR_CYCLES) and not _is_parent(target, name)
        }
        for name, targets in graph.items()
        if name.startswith(CHECKED_FOR_CYCLES)
    }


def test_no_import_cycles_in_builders_and_vision_serving():
    eager, every = import_graph()
    known = set(modules())
    assert cycles(_scoped(eager, known)) == []  # at import time
    assert cycles(_scoped(every, known)) == []  # counting the imports inside functions too


def _is_parent(target: str, name: str) -> bool:
    """A package is imported before its submodules anyway: ``builders.x`` -> ``builders`` is not an edge of a cycle."""
    return name.startswith(target + ".")


def test_nothing_imports_scripts():
    _, every = import_graph()
    offenders = {name: sorted(t for t in targets if t == "scripts" or t.startswith("scripts.")) for name, targets in every.items()}
    assert {name: targets for name, targets in offenders.items() if targets} == {}


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# The layers, lowest first: a module imports only from its own layer and those below it (at any depth).
LAYERS = ("vision_serving", "builders", "devtools", "benchmarks", "scripts")


def layer(module: str) -> int | None:
    root = module.split(".")[0]
    return LAYERS.index(root) if root in LAYERS else None


def test_each_layer_imports_only_from_itself_and_below():
    """The library (vision_serving) <- builders <- devtools <- benchmarks <- scripts: the library serves without the
    build tools, the tools build without the benchmarks, and nothing imports scripts/ (tests may import anything)."""
    _, every = import_graph()
    upward = {
        name: sorted({t for t in targets if (layer(t) or 0) > (layer(name) or 0) and layer(t) is not None})
        for name, targets in every.items()
        if layer(name) is not None
    }
    assert {name: targets for name, targets in upward.items() if targets} == {}


def test_the_layer_check_sees_an_upward_import():
    assert layer("vision_serving.served") == 0 < layer("devtools.loadgen") == 2 < layer("benchmarks.cpu") == 3  # type: ignore[operator]
    assert layer("tests.support") is None and layer("numpy") is None
