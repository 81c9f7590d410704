"""The client package's modules import each other without a cycle.

Every import counts: at module level, inside functions, and under
``TYPE_CHECKING``. A cycle dodged by a function-local or type-only import is
still a cycle: the modules cannot be read (or split) one at a time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import amqp10.client

PACKAGE = "amqp10.client"
ROOT = Path(amqp10.client.__file__).parent
MAX_LINES = 800  # a module above this holds more than one responsibility: split it


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join([PACKAGE, *parts])


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _imports(path: Path, root: Path, modules: set[str]) -> set[str]:
    """The package modules that ``path`` imports, anywhere in the file."""
    name = _module_name(path, root)
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(name, is_package, node.level, node.module)
            # ``from . import links`` names a module; ``from .links import X`` a member
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and target != PACKAGE:
                found.add(target)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    paths = sorted(root.rglob("*.py"))
    modules = {_module_name(p, root) for p in paths}
    return {_module_name(p, root): _imports(p, root, modules) for p in paths}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (as a path back to its start), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state:
                found = visit(dep)
                if found is not None:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found is not None:
                return found
    return None


def test_no_import_cycle_in_the_client_package() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_module_is_a_grab_bag() -> None:
    # keyed by the path: two modules of one name (``__init__.py``) must not hide each other
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in ROOT.rglob("*.py")}
    assert len(sizes) > 1
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def test_the_checker_sees_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "client"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .a import A\n")
    (pkg / "a.py").write_text("from .b import B\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import C\n"
    )
    (pkg / "c.py").write_text("def f():\n    from . import a\n")
    graph = import_graph(pkg)
    assert graph[f"{PACKAGE}.b"] == {f"{PACKAGE}.c"}
    assert graph[f"{PACKAGE}.c"] == {f"{PACKAGE}.a"}
    assert find_cycle(graph) == [f"{PACKAGE}.a", f"{PACKAGE}.b", f"{PACKAGE}.c", f"{PACKAGE}.a"]
    (pkg / "c.py").write_text("import json\n")
    assert find_cycle(import_graph(pkg)) is None
