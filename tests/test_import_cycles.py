"""No import cycle between the modules of ``statecore``, not even a type-only one.

The rule: parse every module of the package with :mod:`ast` and record each import it makes,
wherever it makes it (at the top, under ``if TYPE_CHECKING:``, inside a function). An edge goes
from the importing module to the module it names:

- ``import a.b.c`` and ``from a.b import c`` where ``a.b.c`` is a module: to ``a.b.c``;
- ``from a.b import name`` where ``name`` is not a submodule: to ``a.b`` (its ``__init__``);
- relative imports are resolved against the importing module's package first.

Package ``__init__`` modules are left out of the graph: they re-export the public API of their
submodules (``statecore/__init__.py`` imports nearly everything), and a submodule importing a
sibling through its package (``from statecore.backends import X``) reaches that sibling's
module only through the re-export, so an edge to a package's ``__init__`` is followed through
to the submodules that ``__init__`` imports. A cycle is then a strongly connected component of
more than one non-``__init__`` module (or a module that imports itself); the test fails listing
every one, with the edges that close it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import statecore

ROOT = Path(statecore.__file__).parent
PACKAGE = "statecore"


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _imports(name: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """The modules of ``statecore`` that module ``name`` imports, anywhere in its body."""
    package = name if _is_package(path) else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in modules:
                    yield sub
                elif target in modules:
                    yield target


def import_graph() -> dict[str, set[str]]:
    """Module → the non-``__init__`` modules it imports (through package re-exports)."""
    modules = _modules()
    raw = {name: set(_imports(name, path, modules)) - {name} for name, path in modules.items()}
    packages = {name for name, path in modules.items() if _is_package(path)}

    def through(target: str, seen: frozenset[str] = frozenset()) -> set[str]:
        if target not in packages:
            return {target}
        if target in seen:
            return set()
        out: set[str] = set()
        for t in raw[target]:
            out |= through(t, seen | {target})
        return out

    graph: dict[str, set[str]] = {}
    for name in modules:
        if name in packages:
            continue
        targets: set[str] = set()
        for t in raw[name]:
            targets |= through(t)
        graph[name] = targets - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_two_module_cycle() -> None:
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": set()}
    assert cycles(graph) == [["a", "b"]]


def test_no_import_cycle_between_statecore_modules() -> None:
    graph = import_graph()
    found = cycles(graph)
    described = [" ; ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in found]
    assert not found, "import cycles:\n" + "\n".join(described)
