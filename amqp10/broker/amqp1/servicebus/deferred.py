"""Deferred messages: set aside by ``defer_message``, then taken by sequence number
(:attr:`~amqp10.broker.core.QueuedMessage.number`, which a scheduled message keeps).

A deferred message stays acquired in the core (counted as unacknowledged, kept in
the store, marked deferred: :meth:`Queue.defer <amqp10.broker.core.Queue.defer>`)
and is given to no consumer; ``receive-by-sequence-number`` reads it again and
``update-disposition`` settles it with the core's ack, release or reject. A durable
queue's deferred messages are deferred still after a restart, with their sequence
numbers. At ``workers`` > 1 a deferred message is set aside on its queue's owner, and
read and settled there (``servicebus.management``: the owner answers those operations).
"""

from __future__ import annotations

from ...core import NodeElsewhere, Queue, QueuedMessage

__all__ = ["defer", "deferred", "undefer"]


def defer(queue: Queue | NodeElsewhere, msg: QueuedMessage) -> None:
    """Set ``msg`` (acquired from ``queue``) aside (a queue another worker owns: there)."""
    queue.defer(msg)


def deferred(queue: Queue, number: int) -> QueuedMessage | None:
    """The deferred message of sequence number ``number`` of ``queue``, left deferred."""
    return queue.deferred.get(number)


def undefer(queue: Queue, number: int) -> QueuedMessage | None:
    """Take the deferred message of sequence number ``number`` back (to settle it)."""
    return queue.deferred.pop(number, None)
