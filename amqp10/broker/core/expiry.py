"""Expiry on time: messages past their time to live, and queues unused past ``expires``.

RabbitMQ's rules, which the TTL-plus-dead-letter-exchange retry and delay pattern relies
on: a message whose time has come is dropped (dead-lettered, reason ``expired``) when it
is at the head of its queue, at that moment; one behind a longer-lived head waits until it
reaches the head (a consumer never receives it: a take skips and expires it); a queue with
``expires`` is deleted once it has had no consumer (and no ``basic.get``, and no
redeclaration) for that long.

No timers per message, and nothing per message for a queue without expiring messages.
A queue arms at most one deadline for its messages: the earliest expiry among the heads
of its priority levels (:meth:`~amqp10.broker.core.queues.Queue.expire_heads` runs
then), and one for itself with ``expires``. Both are kept in one heap for the broker,
as the scheduler keeps its held messages. A deadline is armed only when it moves
*earlier* (a message with an earlier expiry became a head); a deadline that turns out
early (the head was taken meanwhile) just finds nothing due and arms the next one, so a
take costs nothing here. What a queue has armed is its ``head_deadline`` and
``unused_deadline``; a heap entry that no longer matches them is stale and skipped
(and the heap is rebuilt without them when they are half of it).

No timers here, as in :mod:`.scheduled`: the service calls :meth:`Expirations.expire_due`
when :meth:`Expirations.next_deadline` passes (``on_change`` tells it the deadline may
have moved earlier), and the broker's once-a-second ``tick`` does too.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .queues import Queue

__all__ = ["Expirations"]

_HEADS = False  # what a heap entry is for: the queue's heads' expiry
_UNUSED = True  # or the queue itself (``expires``)


class Expirations:
    """The expiry deadlines of a broker's queues, earliest first."""

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self._heap: list[tuple[float, int, Queue, bool]] = []
        self._tie = itertools.count()
        self._stale = 0  # entries in the heap that no longer match their queue's deadline
        self.on_change: Callable[[], None] = lambda: None
        """Called when the next deadline may have moved earlier (the service re-arms its timer)."""

    def __len__(self) -> int:
        """How many deadlines are armed (stale entries not counted)."""
        return len(self._heap) - self._stale

    def arm_heads(self, queue: Queue, when: float) -> None:
        """``queue`` has a message at a head that expires at ``when``: make sure the queue's
        heads are looked at by then (nothing if it has an earlier deadline armed already)."""
        self._arm(queue, when, _HEADS)

    def arm_unused(self, queue: Queue, when: float) -> None:
        """``queue`` (with ``expires``) may be unused long enough at ``when``: look then."""
        self._arm(queue, when, _UNUSED)

    def _arm(self, queue: Queue, when: float, unused: bool) -> None:
        armed = queue.unused_deadline if unused else queue.head_deadline
        if armed is not None:
            if armed <= when:
                return
            self._stale += 1  # (its entry stays in the heap until it comes up)
        if unused:
            queue.unused_deadline = when
        else:
            queue.head_deadline = when
        self._push(when, queue, unused)

    def forget(self, queue: Queue) -> None:
        """``queue`` is deleted: its deadlines are void."""
        for armed in (queue.head_deadline, queue.unused_deadline):
            if armed is not None:
                self._stale += 1
        queue.head_deadline = queue.unused_deadline = None
        if self._stale > 64 and self._stale * 2 > len(self._heap):  # amortised O(1) per stale entry
            self._heap = [e for e in self._heap if _live(e)]
            heapq.heapify(self._heap)
            self._stale = 0

    def _push(self, when: float, queue: Queue, kind: bool) -> None:
        heap = self._heap
        earliest = heap[0][0] if heap else None
        heapq.heappush(heap, (when, next(self._tie), queue, kind))
        if earliest is None or when < earliest:
            self.on_change()

    def next_deadline(self) -> float | None:
        """When the next armed deadline passes (None: none is armed)."""
        heap = self._heap
        while heap and not _live(heap[0]):
            heapq.heappop(heap)
            self._stale = max(self._stale - 1, 0)  # (an entry re-armed at the same time counts once)
        return heap[0][0] if heap else None

    def expire_due(self) -> int:
        """Run every deadline that has passed: expire the messages at the heads of those
        queues, delete those queues unused long enough; return how many deadlines ran.
        A deadline armed meanwhile waits for the next call, even if due already (a
        message dead-lettered from a queue back into it cannot keep this call going)."""
        heap = self._heap
        now = self.now()
        due: list[tuple[Queue, bool]] = []
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            if not _live(entry):
                self._stale = max(self._stale - 1, 0)
                continue
            _, _, queue, unused = entry
            if unused:
                queue.unused_deadline = None
            else:
                queue.head_deadline = None
            due.append((queue, unused))
        for queue, unused in due:
            if queue.deleted:
                continue
            if unused:
                queue.expire_if_unused()
            else:
                queue.expire_heads()
        return len(due)


def _live(entry: tuple[float, int, Queue, bool]) -> bool:
    """Whether a heap entry is still its queue's deadline (not moved earlier, not forgotten)."""
    when, _, queue, unused = entry
    return (queue.unused_deadline if unused else queue.head_deadline) == when
