"""Byte credit (0-10's ``message.flow`` in bytes) for a consumer of another worker's node.

A 0-10 subscription's byte credit is exact: a message larger than what is left is not
sent, and it stays first on its queue until more credit comes. On a queue another worker
owns, the owner decides what it sends, so the budget goes there: the consuming link's
properties say how the consumer counts a message's bytes (:data:`BYTES_AS`: a format
and the octets of it not counted, :func:`cost`), and :data:`~.link.BYTES` control records
grant it, as :data:`~.link.GRANT` grants messages (:data:`UNLIMITED`: no byte limit;
:data:`NONE_LEFT`: limited again).
The owner's consumer (``owner.py``'s ``LinkConsumer``) sends nothing that does not fit:
such a message goes back to its queue there, at once, in its place, and the consumer
takes nothing more until more bytes are granted, as a local subscription does.
"""

from __future__ import annotations

from typing import Final

from ...types import symbol
from ..core import QueuedMessage

__all__ = ["BYTES_AS", "NONE_LEFT", "UNLIMITED", "Measure", "cost"]

BYTES_AS: Final = symbol("bytes-as")
"""In a consuming link's properties: [format, octets not counted] of its consumer's byte
credit (absent: it has none; the owner counts no bytes)."""
UNLIMITED: Final = -1
"""A :data:`~.link.BYTES` grant of no limit (the consumer's byte credit is infinite)."""
NONE_LEFT: Final = -2
"""A :data:`~.link.BYTES` record that limits the consumer again, with no bytes left (what
was granted without limit is taken back; grants add to it from there)."""

Measure = tuple[str, int]
"""How a consumer counts a message's bytes: its form in this format, less these octets."""


def cost(msg: QueuedMessage, measure: Measure) -> int:
    """``msg``'s bytes as a consumer that counts them by ``measure`` does."""
    fmt, uncounted = measure
    return len(msg.form(fmt)) - uncounted
