"""The 1.0 front end's shape: handlers per concern, not borrowed methods or private names."""

from __future__ import annotations

import ast
from pathlib import Path

import amqp10.broker.amqp1 as amqp1

PACKAGE = Path(amqp1.__file__).parent
MODULES = sorted(PACKAGE.rglob("*.py"))


def _trees() -> list[tuple[Path, ast.Module]]:
    assert len(MODULES) >= 20
    return [(p, ast.parse(p.read_text())) for p in MODULES]


def test_no_private_name_is_imported_from_another_module() -> None:
    bad = [
        (p.name, alias.name)
        for p, tree in _trees()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name.startswith("_") and alias.name != "__future__"
    ]
    assert bad == []


def test_no_module_function_takes_self_to_be_bound_as_a_method_elsewhere() -> None:
    bad = [
        (p.name, node.name)
        for p, tree in _trees()
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.args.args and node.args.args[0].arg == "self"
    ]
    assert bad == []


def test_no_handler_guards_its_wake_with_the_routers_handling_flag() -> None:
    assert [p.name for p in MODULES if "_handling" in p.read_text()] == []
