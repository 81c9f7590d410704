"""The engine's objects talk through return values and public interfaces (issue 30).

A connection, session, link or delivery touches only its own private attributes
(``self._x``, ``cls._x``); it reaches a collaborator through that object's public,
documented names, as h2's streams return frames for the connection to write. The
rule, read from the source: an attribute access whose name starts with one
underscore (not a dunder), on anything but the name ``self`` or ``cls``. On the
tree before issue 30 it found 134 such accesses (session.py 50, link.py 47,
resume.py 21, connection.py 12, delivery.py 3, framing.py 1).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import amqp10.transport

ENGINE = Path(amqp10.transport.__file__).parent

# (file name, the accessed expression as ast.unparse writes it) -> why it is allowed.
# Empty: nothing in the engine needs another object's private attributes.
ALLOWED: dict[tuple[str, str], str] = {}


def private_accesses(source: str) -> list[tuple[int, str]]:
    """(line, expression) of each access to a private attribute of another object."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or name.startswith("__"):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_rule_sees_what_it_should() -> None:
    source = """
class A:
    def f(self, other):
        self._mine = 1            # own: fine
        other._theirs = 2         # another object's: found
        self.session._write()     # a collaborator reached through self: found
        super()._hook()           # a borrowed base-class private: found
        other.__class__           # dunder: fine
        return other.public
"""
    assert [expr for _, expr in private_accesses(source)] == [
        "other._theirs",
        "self.session._write",
        "super()._hook",
    ]


@pytest.mark.parametrize("path", sorted(ENGINE.glob("*.py")), ids=lambda p: p.name)
def test_no_private_access_across_objects(path: Path) -> None:
    offending = [
        f"{path.name}:{line}: {expr}"
        for line, expr in private_accesses(path.read_text(encoding="utf-8"))
        if (path.name, expr) not in ALLOWED
    ]
    assert offending == [], (
        f"{len(offending)} access(es) to another object's private attributes; use or "
        "add a public, documented name on the collaborator instead:\n" + "\n".join(offending)
    )
