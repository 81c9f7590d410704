"""Scheduled delivery: messages held back until their due time, then enqueued.

A message whose :attr:`~amqp10.broker.core.message.QueuedMessage.due` time
(read once from its native form: for AMQP 1.0 the message annotations
``x-opt-delivery-time``, ``x-opt-scheduled-enqueue-time`` and
``x-opt-delivery-delay``) lies in the future is not put in its queue when
published: the queue stores it (if durable) and hands it to the broker's
:class:`Scheduler`, which keeps it in a heap ordered by due time, ties by
arrival. When it is due, :meth:`Scheduler.release_due` gives it back to the
queue (:meth:`~amqp10.broker.core.queues.Queue.enqueue_due`), which enqueues it
as a newly arrived message: consumers and browsers never see it before. It gets a new
``seq`` there (a queue is ordered by seq), and keeps the one it got when held as its
:attr:`~amqp10.broker.core.message.QueuedMessage.number` (in the store too): the
sequence number Service Bus answered when it was scheduled, which it keeps for life.

No timers here, as in :mod:`.recovery`: the service calls :meth:`release_due`
when :meth:`next_deadline` passes (``on_change`` tells it the deadline may have
moved), and the broker's once-a-second ``tick`` does too.

Semantics (RabbitMQ's delayed-message exchange): a held message is not in the
queue yet. It counts in the queue's ``stats.scheduled`` (not in its depth), its
time to live (the header's ``ttl`` and the queue's ``message-ttl``) counts from
its due time (an ``absolute-expiry-time`` stays absolute), and the queue's
length limits apply to it when it enters at its due time (it always enters; an
overflow policy acts on the next publish). Durable held messages are in the
store as any message; a restart reads their due time again from the stored
bytes.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING

from .message import QueuedMessage

if TYPE_CHECKING:
    from .queues import Queue

__all__ = ["Scheduler"]


class Scheduler:
    """The held-back messages of a broker, in due-time order (ties by arrival)."""

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self._heap: list[tuple[float, float, int, Queue, QueuedMessage]] = []
        self._tie = itertools.count()
        self.on_change: Callable[[], None] = lambda: None
        """Called when the next deadline may have moved earlier (the service re-arms its timer)."""

    def __len__(self) -> int:
        return len(self._heap)

    def hold(self, queue: Queue, msg: QueuedMessage, due: float) -> None:
        """Keep ``msg`` for ``queue`` until ``due`` (seconds since the epoch)."""
        heap = self._heap
        earliest = heap[0][0] if heap else None
        heapq.heappush(heap, (due, msg.arrival, next(self._tie), queue, msg))
        queue.stats.scheduled += 1
        if earliest is None or due < earliest:
            self.on_change()

    def next_deadline(self) -> float | None:
        """When the next held message is due (None: none is held)."""
        return self._heap[0][0] if self._heap else None

    def release_due(self) -> int:
        """Enqueue every message whose time has come, in due-time order; return how many."""
        heap = self._heap
        if not heap:
            return 0
        now = self.now()
        n = 0
        while heap and heap[0][0] <= now:
            _, _, _, queue, msg = heapq.heappop(heap)
            queue.stats.scheduled -= 1
            if not queue.deleted:
                queue.enqueue_due(msg)
                n += 1
        return n

    def cancel(self, queue: Queue) -> list[QueuedMessage]:
        """Forget ``queue``'s held messages (purged or deleted); return them."""
        mine = [e[4] for e in self._heap if e[3] is queue]
        if mine:
            self._heap = [e for e in self._heap if e[3] is not queue]
            heapq.heapify(self._heap)
            queue.stats.scheduled -= len(mine)
        return mine

    def cancel_one(self, queue: Queue, seq: int) -> QueuedMessage | None:
        """Forget ``queue``'s held message with sequence number ``seq``; return it (None: none)."""
        for i, e in enumerate(self._heap):
            if e[3] is queue and e[4].seq == seq:
                self._heap.pop(i)
                heapq.heapify(self._heap)
                queue.stats.scheduled -= 1
                return e[4]
        return None
