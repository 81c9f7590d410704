"""State diagrams drawn from the transition tables, so the docs cannot drift (h11 style).

``python -m amqp10.amqp091._diagrams [connection|channel|content]`` prints a
Mermaid ``stateDiagram-v2``; received inputs are ``R:``, sent ones ``S:``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from enum import Enum
from typing import Any

from . import channel_state, connection_state

__all__ = ["TABLES", "mermaid"]

TABLES: dict[str, tuple[Mapping[tuple[Any, Any], Any], Enum]] = {
    "connection": (connection_state.TRANSITIONS, connection_state.ConnectionState.START),
    "channel": (channel_state.TRANSITIONS, channel_state.ChannelState.CLOSED),
    "content": (channel_state.CONTENT_TRANSITIONS, channel_state.ContentState.IDLE),
}


def mermaid(name: str) -> str:
    """The Mermaid source of table ``name``, one edge per (state, input)."""
    table, start = TABLES[name]
    lines = ["stateDiagram-v2", f"    [*] --> {start.name}"]
    for (src, inp), dst in table.items():
        kind, _, what = inp.name.partition("_")
        label = (
            f"{ {'SEND': 'S', 'RECV': 'R'}[kind] }: {what.lower()}"
            if kind in ("SEND", "RECV")
            else inp.value
        )
        lines.append(f"    {src.name} --> {dst.name}: {label.replace('_', '-')}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    for table in sys.argv[1:] or list(TABLES):
        sys.stdout.write(mermaid(table))
