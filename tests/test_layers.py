"""The import directions of README.md (Layout): fusefs -> store
and pipeline -> store, never the other way or across, and through store only the names
docs/store-api.md publishes. Imports inside functions count as much as those at the top."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
API_DOC = ROOT / "docs" / "store-api.md"
PIPELINE_SIDE = ("pipeline", "pyspark_mqfs")



def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def absolute_imports(path: Path) -> list[tuple[str, str | None, int]]:
    """(module, name or None for `import module`, line) of every absolute import in a file."""
    found: list[tuple[str, str | None, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((a.name, None, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.extend((node.module, a.name, node.lineno) for a in node.names)
    return found


def top(module: str) -> str:
    """The package a module belongs to: `mqfs.store` for `mqfs.store.files.x`, else its first name."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "mqfs" else parts[0]


def published() -> dict[str, set[str]]:
    """The `module: names` lines of the text block under "## Published names" in the doc."""
    text = API_DOC.read_text()
    section = text.split("\n## Published names\n", 1)[1]
    block = re.search(r"```text\n(.*?)```", section, re.S)
    assert block, "docs/store-api.md: no ```text block under ## Published names"
    table: dict[str, set[str]] = {}
    for line in block.group(1).splitlines():
        module, names = line.split(":", 1)
        table[module.strip()] = {n.strip() for n in names.split(",") if n.strip()}
    return table


def forbidden(package: str, banned: set[str]) -> list[str]:
    return [f"{rel(p)}:{line} imports {module}" for p in sources(package)
            for module, _, line in absolute_imports(p) if top(module) in banned]


def test_store_imports_no_layer_above_it():
    assert forbidden("store", {"mqfs.fusefs", "mqfs.pipeline", "pyspark_mqfs", "pyspark", "pyfuse3",
                               "trio"}) == []


# store's floors, lowest first: a module imports only from its own floor or below. The
# sub-packages are the floors; the few modules directly in store/ sit at the bottom (errors,
# config, crash points, value classes) or the top (the engine, its read and write sides, and repair, which
# opens the engine); the services (the threads of an open store) sit just below the engine. Imports
# under `if TYPE_CHECKING:` name types for annotations only and load nothing, so they may
# look up (but no module, through them or not, imports itself: test_no_import_circle).
STORE_FLOORS = {"errors": 0, "config": 0, "crash_points": 0, "slotted": 0, "format": 1, "files": 2, "meta": 3,
                "offline": 4, "integrity": 4, "queues": 4, "services": 5, "message_store": 6, "reads": 6,
                "batch_reads": 6, "range_reads": 6, "writes": 6, "in_use": 6, "repair": 6,
                "group_offsets": 6,
                "__init__": 6}


def floor_of(parts: tuple[str, ...]) -> int:
    """The floor of a module given its path inside store/ (a sub-package's name decides)."""
    assert parts[0] in STORE_FLOORS, f"store/{'/'.join(parts)}: no floor in STORE_FLOORS"
    return STORE_FLOORS[parts[0]]


def runtime_imports(tree: ast.Module) -> list[ast.ImportFrom]:
    """Every `from ... import` that runs, at any depth, leaving out `if TYPE_CHECKING:` blocks."""
    found: list[ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def test_store_modules_import_only_their_floor_or_below():
    upward = []
    for path in sources("store"):
        parts = path.relative_to(ROOT / "store").with_suffix("").parts
        package = list(parts[:-1])
        for node in runtime_imports(ast.parse(path.read_text())):
            if node.module and top(node.module) == "mqfs.store":
                targets = [tuple(node.module.split(".")[2:]) or (a.name,) for a in node.names]
            elif node.level:
                anchor = package[: len(package) - node.level + 1]
                base = [*anchor, *(node.module or "").split(".")] if node.module else anchor
                targets = [tuple(base) if node.module else (*base, a.name) for a in node.names]
            else:
                continue
            upward += [f"{rel(path)}:{node.lineno} imports mqfs.store.{'.'.join(t)}"
                       for t in targets if t and floor_of(t) > floor_of(parts)]
    assert upward == []


def test_pipeline_never_imports_fusefs():
    for package in PIPELINE_SIDE:
        assert forbidden(package, {"mqfs.fusefs"}) == []


def test_fusefs_never_imports_the_pipeline_or_spark():
    assert forbidden("fusefs", {"mqfs.pipeline", "pyspark_mqfs", "pyspark"}) == []


def test_the_published_list_names_what_exists():
    table = published()
    assert {"mqfs.store", "mqfs.store.offline.views", "mqfs.store.offline.rebuild",
            "mqfs.store.format.jsonl"} <= set(table)
    for module, names in table.items():
        loaded = importlib.import_module(module)
        assert [n for n in sorted(names) if not hasattr(loaded, n)] == [], module


@pytest.mark.parametrize("package", ["fusefs", *PIPELINE_SIDE])
def test_only_published_store_names_are_imported(package):
    table = published()
    unpublished = []
    for path in sources(package):
        for module, name, line in absolute_imports(path):
            if top(module) != "mqfs.store":
                continue
            if name is None:  # `import mqfs.store.x`: every name of it would be reachable
                unpublished.append(f"{rel(path)}:{line} import {module}")
            elif f"{module}.{name}" in table:  # `from mqfs.store import views`
                continue
            elif name not in table.get(module, set()):
                unpublished.append(f"{rel(path)}:{line} {module}.{name}")
    assert unpublished == []


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports, at any depth, imports for type
    hints included (a circle of types is still a circle of design)."""
    graph: dict[str, set[str]] = {}
    for path in sources(package):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package_of = parts[:-1]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                anchor = package_of[: len(package_of) - node.level + 1]
                base = ".".join([*anchor, node.module] if node.module else anchor)
            elif node.module and top(node.module) == f"mqfs.{package}":
                base = node.module.removeprefix("mqfs.")
            else:
                continue
            deps.add(base)
            deps.update(f"{base}.{a.name}" for a in node.names)
        graph[name] = deps
    return {name: {d for d in deps if d in graph and d != name and not name.startswith(d + ".")}
            for name, deps in graph.items()}  # a module's own package runs first anyway


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                found.append(sorted([v, *component]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize("package", ["store", "fusefs", "pipeline"])
def test_no_import_circle(package):
    """Modules that import each other load only in one order and cannot be understood one at
    a time; services that import the engine back are the engine (issue 36)."""
    assert circles(import_graph(package)) == []


def test_the_circle_check_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
