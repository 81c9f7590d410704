"""Deferred messages: set aside by ``defer_message``, then taken by sequence number.

A deferred message stays acquired in the core (counted as unacknowledged, kept in
the store) and is given to no consumer; ``receive-by-sequence-number`` reads it
again and ``update-disposition`` settles it with the core's ack, release or reject.
The set lives as long as the broker process: after a restart the store gives the
message back to its queue, as for any unacknowledged message.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

from ...core import Queue, QueuedMessage

__all__ = ["defer", "deferred", "undefer"]

_DEFERRED: WeakKeyDictionary[Queue, dict[int, QueuedMessage]] = WeakKeyDictionary()


def defer(queue: Queue, msg: QueuedMessage) -> None:
    """Set ``msg`` (acquired from ``queue``) aside."""
    _DEFERRED.setdefault(queue, {})[msg.seq] = msg


def deferred(queue: Queue, seq: int) -> QueuedMessage | None:
    """The deferred message ``seq`` of ``queue``, left deferred."""
    return _DEFERRED.get(queue, {}).get(seq)


def undefer(queue: Queue, seq: int) -> QueuedMessage | None:
    """Take the deferred message ``seq`` back (to settle it)."""
    return _DEFERRED.get(queue, {}).pop(seq, None)
