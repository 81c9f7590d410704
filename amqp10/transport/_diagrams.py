"""State diagrams drawn from the transition tables, so the docs cannot drift (h11 style).

``python -m amqp10.transport._diagrams [connection|session|link] > x.dot`` writes
Graphviz source; ``dot -Tsvg x.dot`` renders it. Sent inputs are drawn in blue,
received ones in green, as in the spec's figures 2.23 and 2.30 (``S:``/``R:``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from enum import Enum
from typing import Any

from . import connection_state, link_state, session_state

__all__ = ["TABLES", "dot"]

TABLES: dict[str, tuple[Mapping[tuple[Any, Any], Any], Any]] = {
    "connection": (connection_state.TRANSITIONS, connection_state.ConnectionState.START),
    "session": (session_state.TRANSITIONS, session_state.SessionState.UNMAPPED),
    "link": (link_state.TRANSITIONS, link_state.LinkState.DETACHED),
}


def _label(inp: Enum) -> str:
    name = inp.name
    kind, _, what = name.partition("_")
    prefix = {"SEND": "S", "RECV": "R"}.get(kind, kind)
    return f"{prefix}:{what.replace('_', ' ')}"


def dot(name: str) -> str:
    """Graphviz source for one of the tables (``connection``, ``session``, ``link``)."""
    table, start = TABLES[name]
    lines = [f'digraph "{name}" {{', "  rankdir=TB;", '  node [shape=box, fontname="Helvetica"];']
    lines.append(f'  "{start.name}" [style=bold];')
    edges: dict[tuple[str, str], list[str]] = {}
    for (state, inp), new in table.items():
        edges.setdefault((state.name, new.name), []).append(_label(inp))
    for (a, b), labels in sorted(edges.items()):
        colour = "blue" if all(x.startswith("S:") for x in labels) else "darkgreen"
        label = " / ".join(sorted(labels))
        lines.append(f'  "{a}" -> "{b}" [label="{label}", color={colour}];')
    lines.append("}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    for which in sys.argv[1:] or list(TABLES):
        sys.stdout.write(dot(which))
