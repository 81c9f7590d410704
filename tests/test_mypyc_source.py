"""What the modules of the compiled build (setup.py's ``COMPILED``) must not hold, read
from their source, so that a change tested in the pure build does not break the compiled
one (bench/RESULTS.md, "The client's per-message path compiled"):

- an async generator (mypyc compiles none: it stops the build);
- a ``finally`` with an ``await`` in it, in an async function (compiled, one re-raised a
  cancellation that an ``async with`` had caught: ``Driver.run``'s end);
- ``object.__new__(...)`` (refused for a compiled class: ``cls.__new__`` or ``cls(...)``);
- a ``continue`` or ``break`` inside a ``try`` that has a ``finally``, for a loop outside
  that ``try`` (mypyc 1.x: "continue inside try/finally block is unimplemented").
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def compiled_modules() -> list[str]:
    """The paths of setup.py's ``COMPILED`` (read, not imported: importing runs setup())."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "COMPILED" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, list)
            return [str(v) for v in value]
    raise AssertionError("setup.py has no COMPILED list")


def _own_nodes(fn: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``fn``'s body, not those of the functions and classes defined in it."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


def _jumps_out(node: ast.Try) -> Iterator[ast.stmt]:
    """The ``continue`` and ``break`` statements in ``node`` (not its ``finally``) that leave
    it: those not inside a loop, function or class nested in it."""
    todo: list[ast.AST] = [*node.body, *node.handlers, *node.orelse]
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.Continue, ast.Break)):
            yield n
        elif not isinstance(
            n, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
        ):
            todo.extend(ast.iter_child_nodes(n))
        else:  # a nested loop's else: still this try's
            todo.extend(getattr(n, "orelse", []) if isinstance(n, (ast.For, ast.AsyncFor, ast.While)) else [])


def problems(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Try) and node.finalbody:
            for jump in _jumps_out(node):
                word = "continue" if isinstance(jump, ast.Continue) else "break"
                found.append(f"line {jump.lineno}: {word} inside a try/finally")
        if isinstance(node, ast.AsyncFunctionDef):
            own = list(_own_nodes(node))
            if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in own):
                found.append(f"line {node.lineno}: async generator {node.name}")
            for n in own:
                if isinstance(n, ast.Try) and any(
                    isinstance(a, ast.Await) for s in n.finalbody for a in ast.walk(s)
                ):
                    found.append(f"line {n.lineno}: await in a finally of {node.name}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "__new__"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "object"
        ):
            found.append(f"line {node.lineno}: object.__new__")
    return found


def test_the_compiled_list_names_existing_modules() -> None:
    modules = compiled_modules()
    assert "amqp10/io/driver.py" in modules and "amqp10/client/sync.py" in modules
    assert [m for m in modules if not (ROOT / m).is_file()] == []


@pytest.mark.parametrize("module", compiled_modules())
def test_a_compiled_module_holds_nothing_mypyc_breaks_on(module: str) -> None:
    assert problems((ROOT / module).read_text()) == []


def test_the_checks_find_what_they_look_for() -> None:
    source = """
async def gen():
    yield 1

async def run():
    try:
        pass
    finally:
        await end()

async def fine():
    async def inner():
        try:
            pass
        except BaseException:
            await end()
            raise
    def sync_gen():
        yield 2
    return object.__new__(C)

def loops():
    for x in xs:
        try:
            if x:
                continue
            for y in x:
                break
        finally:
            pass
        try:
            while True:
                break
        finally:
            pass
"""
    assert sorted(problems(source)) == sorted([
        "line 2: async generator gen",
        "line 6: await in a finally of run",
        "line 20: object.__new__",
        "line 26: continue inside a try/finally",
    ])
