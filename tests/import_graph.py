"""The import graph of a package, read from its source (issue 30).

``python -m tests.import_graph [ROOT]`` prints the graph's circles (strongly connected
components of more than one module), what the broker's protocol-neutral parts (the
core, management, the configuration) reach, and the private names modules take from
each other; ``tests/test_design.py`` checks the same facts as rules.

What counts as an import is what runs when the module is loaded or used:

- every ``import`` and ``from ... import`` statement, at module level or inside a
  function (a lazy import is still a dependency), relative ones resolved;
- ``from pkg import name`` where ``pkg.name`` is a module imports that module (not the
  package's ``__init__``); otherwise it imports ``pkg``;
- ``import a.b.c`` imports ``a.b.c`` (the longest prefix that is a module of the tree);
- statements under ``if TYPE_CHECKING:`` do not count: they never run.

A parent package's ``__init__`` is not counted as imported by its submodules (it runs
first, but it is the package's front door, not something its modules depend on).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "NEUTRAL",
    "Graph",
    "Import",
    "build_graph",
    "circles",
    "private_names",
    "reach",
    "shortest_circle",
    "under",
]


@dataclass(frozen=True)
class Import:
    """One name a module takes from another module of the tree."""

    target: str  # the module imported, dotted
    name: str | None  # the name taken from it (``from target import name``), None for a module
    line: int


@dataclass
class Graph:
    """Modules of one package and the imports between them."""

    root: Path
    modules: dict[str, Path] = field(default_factory=dict)
    trees: dict[str, ast.Module] = field(default_factory=dict)
    imports: dict[str, list[Import]] = field(default_factory=dict)

    def edges(self, module: str) -> set[str]:
        return {i.target for i in self.imports.get(module, [])}

    def is_module(self, name: str) -> bool:
        return name in self.modules


def _module_name(path: Path, root: Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements that run, anywhere in ``tree`` (not under ``if TYPE_CHECKING:``)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _package(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _source(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` statement in ``module`` names, relative ones resolved."""
    if not node.level:
        return node.module or ""
    base = _package(module, path).rsplit(".", node.level - 1)[0]
    return f"{base}.{node.module}" if node.module else base


def _resolve(graph: Graph, name: str) -> str | None:
    """The longest prefix of ``name`` that is a module of the tree (None: outside it)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if graph.is_module(candidate):
            return candidate
        parts.pop()
    return None


def _imports_of(graph: Graph, module: str, path: Path) -> list[Import]:
    found: list[Import] = []
    for node in _runtime_imports(graph.trees[module]):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (target := _resolve(graph, alias.name)) is not None:
                    found.append(Import(target, None, node.lineno))
            continue
        source = _source(module, path, node)
        for alias in node.names:
            if graph.is_module(f"{source}.{alias.name}"):
                found.append(Import(f"{source}.{alias.name}", None, node.lineno))
            elif (target := _resolve(graph, source)) is not None:
                found.append(Import(target, alias.name, node.lineno))
    return found


def build_graph(root: Path) -> Graph:
    """The import graph of the package at ``root`` (a directory with ``__init__.py``)."""
    graph = Graph(root)
    for path in sorted(root.rglob("*.py")):
        module = _module_name(path, root)
        graph.modules[module] = path
        graph.trees[module] = ast.parse(path.read_text(), str(path))
    for module, path in graph.modules.items():
        graph.imports[module] = [i for i in _imports_of(graph, module, path) if i.target != module]
    return graph


def circles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph.modules):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph.edges(start))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.edges(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def shortest_circle(graph: Graph, component: Iterable[str]) -> list[str]:
    """One shortest circle through the first module of ``component``, within it:
    ``[a, b, ..., a]``."""
    members = sorted(component)
    inside = set(members)
    start = members[0]
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for child in sorted(graph.edges(node) & inside):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    raise ValueError(f"no circle through {start}")


def reach(graph: Graph, prefixes: Iterable[str]) -> dict[str, list[str]]:
    """Every module reachable from the modules under ``prefixes``, each with one import
    chain that reaches it (from a module under a prefix)."""
    starts = [m for m in sorted(graph.modules) if under(m, prefixes)]
    chains: dict[str, list[str]] = {m: [m] for m in starts}
    frontier = list(starts)
    while frontier:
        following: list[str] = []
        for node in frontier:
            for child in sorted(graph.edges(node)):
                if child not in chains:
                    chains[child] = [*chains[node], child]
                    following.append(child)
        frontier = following
    return chains


def under(module: str, prefixes: Iterable[str]) -> bool:
    """Whether ``module`` is one of ``prefixes`` or inside one of them."""
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``; None for anything but names and attributes."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def private_names(graph: Graph) -> list[str]:
    """Private names (one leading underscore) one module of the tree takes from another,
    as ``path:line: what``: ``from X import _name``, and ``X._name`` where ``X`` names a
    module of the tree (``import a.b as X``, ``from a import b``, ``import a.b``)."""
    found: list[str] = []
    for module, path in sorted(graph.modules.items()):
        where = path.relative_to(graph.root.parent)
        aliases: dict[str, str] = {}  # a name bound to a module of the tree, in any scope
        for i in graph.imports[module]:
            if i.name is not None and _private(i.name):
                found.append(f"{where}:{i.line}: from {i.target} import {i.name}")
        tree = graph.trees[module]
        for statement in _runtime_imports(tree):
            if isinstance(statement, ast.Import):
                aliases.update({a.asname: a.name for a in statement.names if a.asname and graph.is_module(a.name)})
            else:
                source = _source(module, path, statement)
                aliases.update(
                    {a.asname or a.name: f"{source}.{a.name}" for a in statement.names if graph.is_module(f"{source}.{a.name}")}
                )
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            parts = _dotted(node.value)
            if parts is None:
                continue
            target = ".".join([aliases.get(parts[0], parts[0]), *parts[1:]])
            if graph.is_module(target) and target != module:
                found.append(f"{where}:{node.lineno}: {'.'.join(parts)}.{node.attr} ({target})")
    return found


NEUTRAL: dict[str, tuple[str, ...]] = {
    "the broker core": ("amqp10.broker.core",),
    "management": ("amqp10.broker.management",),
    "the configuration": (
        "amqp10.broker.config",
        "amqp10.broker.config_model",
        "amqp10.broker.config_servicebus",
        "amqp10.broker.config_oauth2",
    ),
}
"""The protocol-neutral parts of the broker (their modules), whose reach the design tests bound."""


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "amqp10"
    graph = build_graph(root)
    edges = sum(len(graph.edges(m)) for m in graph.modules)
    print(f"{len(graph.modules)} modules, {edges} imports between them ({root})")
    found = circles(graph)
    print(f"\ncircles: {len(found)}")
    for component in found:
        print(f"- {len(component)} modules: {' -> '.join(shortest_circle(graph, component))}")
        for member in component:
            print(f"    {member}")
    for part, modules in NEUTRAL.items():
        chains = reach(graph, modules)
        outside = sorted(m for m in chains if not under(m, modules))
        print(f"\n{part} ({', '.join(modules)}) reaches {len(outside)} modules outside itself:")
        for module in outside:
            print(f"- {module}  (via {' -> '.join(chains[module])})")
    private = private_names(graph)
    print(f"\nprivate names taken across modules: {len(private)}")
    for line in private:
        print(f"- {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
