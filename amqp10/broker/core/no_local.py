"""Qpid's ``no-local`` queues: a queue declared with the ``no-local`` argument does not
take the messages published on the connection it is local to, that of its exclusive
owner or of an exclusive consumer (Qpid's broker: ``Queue::isLocal``). Such a message is
dropped as it arrives, so it neither waits on the queue nor blocks what comes after it.

Connections are told apart by the ``origin`` a front end marks each message with
(:meth:`~.message.QueuedMessage.mark_origin`) and gives its exclusive owners and
consumers as an ``origin`` attribute; one without it is local to no publisher.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from .message import QueuedMessage

if TYPE_CHECKING:
    from .queues import Queue

__all__ = ["NO_LOCAL", "is_no_local", "not_local"]

NO_LOCAL: Final = "no-local"
"""The queue argument (Qpid's name; no RabbitMQ argument says this)."""

_TRUE: Final = frozenset({"true", "1", "yes"})


def is_no_local(arguments: Mapping[str, Any] | None) -> bool:
    """Whether queue ``arguments`` ask for ``no-local`` (true, a non-zero number, "true")."""
    v = (arguments or {}).get(NO_LOCAL)
    if isinstance(v, str | bytes):
        return (v.decode(errors="replace") if isinstance(v, bytes) else v).lower() in _TRUE
    return bool(v)


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
