"""The project's import graph has no circles, each layer imports only from itself and below, and nothing imports scripts/.

Read with ``ast``, nothing is imported. Every import counts: at module level, inside functions (a deferred import, e.g.
the CLI importing a step only when it runs, would hide a circle, not remove it) and under ``if TYPE_CHECKING:`` (a
circle for types only is still two modules that each need the other). So do the imports by name at run time
(``BY_NAME``: importlib), each read as the edges it can make: a client loaded by the program that runs it is below that
program, and importing the program back is an import from a lower layer to a higher one, which this graph sees as a
circle.
"""

from __future__ import annotations

import ast
import re
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("builders", "vision_serving", "gateway", "vision_streams", "devtools", "benchmarks", "tests")
# The modules that import by name at run time (importlib), which an import statement does not show, and the edges read
# for them (by_name_edges): module -> how.
BY_NAME = {
    "vision_serving.tasks.registry": "per_task(__name__, task) imports <the caller's package>.<task name>: a package that "
    "passes it its __name__ (devtools.clients, gateway.answers) imports each of its modules",
    "builders.step": "a Step names its options and run 'module:function': the module that holds such a string imports that module",
    "devtools.clients.detection": 'extra_drawing(name) imports f"{__package__}.draw_{name}": every devtools.clients.draw_* module',
}


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


def imported_names(tree: ast.Module, name: str, is_package: bool) -> set[str]:
    """Every module an import statement anywhere in ``tree`` names (``from a import b`` names ``a`` and ``a.b``: b may
    be a module), relative imports resolved against the module ``name``."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def by_name_edges(tree: ast.Module, name: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules ``tree`` imports by name (``BY_NAME``): a ``"module:function"`` string naming a project module; a call
    that passes ``__name__`` to ``per_task`` (every module of the package); an f-string that starts with ``__name__`` or
    ``__package__`` and a dot (every module its constant prefix begins)."""
    package = name if is_package else name.rpartition(".")[0]
    prefixes: set[str] = set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"[a-z_][\w.]*:[a-z_]\w*", node.value):
            found.add(node.value.split(":")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "per_task":
            if node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == "__name__":
                prefixes.add(name + ".")
        elif isinstance(node, ast.JoinedStr) and len(node.values) > 1:
            first, second = node.values[0], node.values[1]
            base = {"__name__": name, "__package__": package}.get(getattr(getattr(first, "value", None), "id", ""))
            if base and isinstance(second, ast.Constant) and str(second.value).startswith("."):
                prefixes.add(base + str(second.value))
    return (found & known) | {module for module in known for prefix in prefixes if module.startswith(prefix)}


def import_graph() -> dict[str, set[str]]:
    """Module -> every module it imports (anywhere in it, by name at run time too: ``by_name_edges``)."""
    known = modules()
    graph = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        graph[name] = imported_names(tree, name, is_package) | by_name_edges(tree, name, is_package, set(known))
    return graph


def project_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between the project's modules, without a submodule's import of its own package (a package is
    imported before its submodules anyway: ``builders.x`` -> ``builders`` is no edge of a circle)."""
    known = set(graph)
    return {name: {t for t in targets if t in known and t != name and not name.startswith(t + ".")} for name, targets in graph.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
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


def shortest_loop(graph: dict[str, set[str]], members: list[str]) -> list[str]:
    """A shortest path of imports from the first of ``members`` (a circle) back to itself, within them."""
    start, inside = members[0], set(members)
    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target in sorted(graph.get(node, set()) & inside):
            if target == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if target not in previous:
                previous[target] = node
                queue.append(target)
    raise AssertionError(f"{members} is not a circle")


def described(graph: dict[str, set[str]], found: list[list[str]]) -> str:
    return "\n".join(f"{' -> '.join(shortest_loop(graph, members))} ({len(members)} modules: {', '.join(members)})" for members in found)


def test_no_import_circles():
    """No circle in the import graph of the project's packages (``PACKAGES``), every import counted."""
    graph = project_edges(import_graph())
    found = circles(graph)
    assert found == [], f"import circles:\n{described(graph, found)}"


def test_nothing_imports_scripts():
    offenders = {name: sorted(t for t in targets if t == "scripts" or t.startswith("scripts.")) for name, targets in import_graph().items()}
    assert {name: targets for name, targets in offenders.items() if targets} == {}


def test_the_circle_finder_finds_and_names_a_circle():
    graph = {"a": {"b"}, "b": {"c", "a"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert shortest_loop(graph, ["a", "b", "c"]) == ["a", "b", "a"]
    assert described(graph, circles(graph)) == "a -> b -> a (3 modules: a, b, c)"
    assert circles({"a": {"b"}, "b": set()}) == []


def test_type_only_function_level_and_relative_imports_are_seen():
    source = """
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from pkg.types import Kind
def later():
    from . import sibling
    import pkg.deep.module
"""
    assert imported_names(ast.parse(source), "pkg.mod", False) == {
        "typing", "typing.TYPE_CHECKING", "pkg.types", "pkg.types.Kind", "pkg", "pkg.sibling", "pkg.deep.module",
    }  # fmt: skip


def test_every_module_that_imports_by_name_is_known():
    """Importing by name (``importlib.import_module``, ``__import__``) is the import an import statement does not show:
    each module of the project that does is one of ``BY_NAME``, whose edges ``by_name_edges`` reads."""
    calling = {
        name
        for name, path in modules().items()
        if not name.startswith("tests.") and re.search(r"import_module\(|__import__\(", path.read_text())
    }
    assert calling == set(BY_NAME), "a new way of importing by name: add it to BY_NAME and read its edges in by_name_edges"


def test_the_imports_by_name_are_edges():
    graph = import_graph()
    assert {"devtools.clients.detection", "devtools.clients.generic"} <= graph["devtools.clients"]  # per_task(__name__)
    assert "builders.export" in graph["builders.cli"]  # Step(..., "builders.export:run_from_args")
    assert {m for m in graph["devtools.clients.detection"] if m.startswith("devtools.clients.draw_")} == {
        m for m in modules() if m.startswith("devtools.clients.draw_")
    }


def test_a_client_that_imports_the_program_that_loads_it_is_a_circle():
    """devtools.client loads the task clients through devtools.clients; a client importing devtools.client back (an
    import from a lower layer to a higher one) closes a circle."""
    graph = project_edges(import_graph())
    assert "devtools.clients.detection" in graph["devtools.clients"]
    graph["devtools.clients.detection"] = graph["devtools.clients.detection"] | {"devtools.client"}
    (found,) = [members for members in circles(graph) if "devtools.client" in members]
    assert shortest_loop(graph, found) == ["devtools.client", "devtools.clients", "devtools.clients.detection", "devtools.client"]


# The layers, lowest first: a module imports only from its own layer and those below it (at any depth).
LAYERS = ("vision_serving", "gateway", "builders", "devtools", "benchmarks", "scripts")


def layer(module: str) -> int | None:
    root = module.split(".")[0]
    return LAYERS.index(root) if root in LAYERS else None


def test_each_layer_imports_only_from_itself_and_below():
    """The library (vision_serving) <- builders <- devtools <- benchmarks <- scripts: the library serves without the
    build tools, the tools build without the benchmarks, and nothing imports scripts/ (tests may import anything)."""
    upward = {
        name: sorted({t for t in targets if (layer(t) or 0) > (layer(name) or 0) and layer(t) is not None})
        for name, targets in import_graph().items()
        if layer(name) is not None
    }
    assert {name: targets for name, targets in upward.items() if targets} == {}


def test_the_layer_check_sees_an_upward_import():
    assert layer("vision_serving.served") == 0 < layer("gateway.app") == 1 < layer("devtools.loadgen") == 3 < layer("benchmarks.cpu") == 4  # type: ignore[operator]
    assert layer("tests.support") is None and layer("numpy") is None


def test_the_gateway_imports_the_serving_library_and_nothing_else_of_the_project():
    """The gateway image ships gateway/ and vision_serving/ alone: no builders, devtools, benchmarks or tests."""
    every = import_graph()
    project = ("builders", "devtools", "benchmarks", "tests", "scripts")
    offenders = {
        name: sorted(t for t in targets if t.split(".")[0] in project) for name, targets in every.items() if name.split(".")[0] == "gateway"
    }
    assert {name: targets for name, targets in offenders.items() if targets} == {}
    assert "gateway.catalog" in every
