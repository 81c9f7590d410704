"""Qpid's queue arguments that the core keeps (Qpid's broker has them; RabbitMQ has no
argument that says these), read as the virtual host makes a queue, whichever protocol
declared it:

- ``no-local``: the queue does not take the messages published on the connection it is
  local to, that of its exclusive owner or of an exclusive consumer (Qpid's
  ``Queue::isLocal``). Such a message is dropped as it arrives, so it neither waits on the
  queue nor blocks what comes after it. Connections are told apart by the ``origin`` a
  front end marks each message with (:meth:`~.message.QueuedMessage.mark_origin`) and
  gives its exclusive owners and consumers as an ``origin`` attribute; one without it is
  local to no publisher.
- ``alternate-exchange``: where the queue's messages go when it is deleted, those
  waiting and those its consumers hold (acquired, not yet settled) alike (Qpid's broker,
  QPID-3481). 0-10's ``queue.declare`` names it in a field of its own; the 0-10 front end
  passes it here (and as the dead-letter exchange: Qpid reroutes rejected messages there).

Qpid's arguments that set a queue's policy (``qpid.auto_delete_timeout``, the priorities,
groups, last-value key...) are in :mod:`.arguments`' table, ``QPID_ARGUMENTS``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from .message import QueuedMessage

if TYPE_CHECKING:
    from .queues import Queue

__all__ = [
    "ALTERNATE_EXCHANGE",
    "NO_LOCAL",
    "NODE_ARGUMENTS",
    "alternate_exchange",
    "is_no_local",
    "not_local",
]

NO_LOCAL: Final = "no-local"
ALTERNATE_EXCHANGE: Final = "alternate-exchange"
NODE_ARGUMENTS: Final = frozenset({NO_LOCAL, ALTERNATE_EXCHANGE})
"""The arguments this module reads (not part of a queue's policy)."""

_TRUE: Final = frozenset({"true", "1", "yes"})


def _text(v: Any) -> str | None:
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    return v if isinstance(v, str) else None


def is_no_local(arguments: Mapping[str, Any] | None) -> bool:
    """Whether queue ``arguments`` ask for ``no-local`` (true, a non-zero number, "true")."""
    v = (arguments or {}).get(NO_LOCAL)
    text = _text(v)
    return text.lower() in _TRUE if text is not None else bool(v)


def alternate_exchange(arguments: Mapping[str, Any] | None) -> str | None:
    """The exchange a deleted queue's messages go to (None: they are dropped)."""
    return _text((arguments or {}).get(ALTERNATE_EXCHANGE)) or None


def not_local(queue: Queue) -> Callable[[QueuedMessage], bool]:
    """The ``admit`` of a no-local ``queue``: False for a message published on the
    connection of its exclusive owner or of an exclusive consumer."""

    def admit(msg: QueuedMessage) -> bool:
        origin = msg.origin
        if origin is None:
            return True
        if getattr(queue.owner, "origin", None) is origin:
            return False
        return not any(
            getattr(c, "exclusive", False) and getattr(c, "origin", None) is origin
            for c in queue.consumers
        )

    return admit
