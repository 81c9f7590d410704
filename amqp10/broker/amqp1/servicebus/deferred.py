"""Deferred messages: set aside by ``defer_message``, then taken by sequence number.

A deferred message stays acquired in the core (counted as unacknowledged, kept in
the store, marked deferred: :meth:`Queue.defer <amqp10.broker.core.Queue.defer>`)
and is given to no consumer; ``receive-by-sequence-number`` reads it again and
``update-disposition`` settles it with the core's ack, release or reject. A durable
queue's deferred messages are deferred still after a restart, with their sequence
numbers.
"""

from __future__ import annotations

from ...core import Queue, QueuedMessage

__all__ = ["defer", "deferred", "undefer"]


def defer(queue: Queue, msg: QueuedMessage) -> None:
    """Set ``msg`` (acquired from ``queue``) aside."""
    queue.defer(msg)


def deferred(queue: Queue, seq: int) -> QueuedMessage | None:
    """The deferred message ``seq`` of ``queue``, left deferred."""
    return queue.deferred.get(seq)


def undefer(queue: Queue, seq: int) -> QueuedMessage | None:
    """Take the deferred message ``seq`` back (to settle it)."""
    return queue.deferred.pop(seq, None)
