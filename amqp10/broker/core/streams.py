"""Streams: append-only logs with consecutive offsets, free of any I/O (the node base is core/nodes.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import store as _store
from .message import QueuedMessage
from .nodes import (
    NULL_JOURNAL,
    Consumer,
    DuplicateWindow,
    Journal,
    Node,
    PublishResult,
    cancel_consumers,
)
from .queue_policy import QueuePolicy

__all__ = ["Stream"]


class Stream(Node):
    """An append-only log: consecutive offsets, durable, not removed by consumption.

    Each consumer reads from its own position, chosen at attach time (first,
    last, next, an offset, or a timestamp). Retention drops the oldest entries
    by age and by total size.

    Read-committed: an entry gets its offset when published, but readers see it
    (and :attr:`next`, which stream-info reports, moves past it) only once the
    journal has committed it. A crash can only erase entries nobody has seen, so
    an offset never names two messages. With a journal that keeps nothing (no
    store), commits are immediate and so is delivery.
    """

    kind = "stream"
    _bytes_on_disk = True

    def __init__(
        self,
        name: str,
        policy: QueuePolicy,
        *,
        journal: Journal = NULL_JOURNAL,
        now: Callable[[], float],
        vhost: str = "/",
    ) -> None:
        super().__init__(name, policy)
        self.vhost = vhost
        self._key = _store.message_key(vhost, name)
        self.journal = journal
        self.now = now
        self._entries: list[QueuedMessage] = []  # offset = first + index - _base
        self._base = 0  # index of the first retained entry in _entries
        self.first = 0  # offset of the oldest retained message
        self.next = 0  # the committed end: offsets below it are stored, and readers see them
        self._end = 0  # offset the next published message gets (next <= _end)
        self.bytes = 0
        self.positions: dict[int, int] = {}  # consumer id -> next offset to deliver
        self.consumers: list[Consumer] = []
        # The consumers that may have credit (id -> consumer): reading towards the committed
        # end, or waiting at it. One found without credit leaves (consumer_ready brings it
        # back), so a commit visits only the readers that can take its entry.
        self._ready: dict[int, Consumer] = {}
        self.dedup = DuplicateWindow(policy.duplicate_window)
        self._dispatching = False

    @property
    def count(self) -> int:
        """Committed entries retained (what readers can read)."""
        return max(self.next - self.first, 0)

    def _get(self, offset: int) -> QueuedMessage:
        return self._entries[self._base + offset - self.first]

    def restore(self, msg: QueuedMessage) -> None:
        """Append a message recovered from the store (its seq is its offset; it is committed).

        Constant work per message: a restart restores millions of them.
        """
        if len(self._entries) == self._base:  # nothing retained yet: the log starts here
            self.first = msg.seq
        self._entries.append(msg)
        self.next = self._end = msg.seq + 1
        self.bytes += msg.size
        self.dedup.seen(msg.message_id)

    def publish(self, msg: QueuedMessage, on_stored: Callable[[], None]) -> PublishResult:
        if self.dedup.seen(msg.message_id):
            # a replayed publish: stored once, accepted again once the first copy is stored
            self.journal.submit((_store.BARRIER,), on_stored)
            return PublishResult.TAKEN
        offset = self._end
        msg.seq = offset
        if msg.arrival == 0.0:
            msg.arrival = self.now()
        msg.data = msg.with_stream_position(offset)
        msg.size = len(msg.data)
        self._entries.append(msg)
        self._end = offset + 1
        self.bytes += msg.size
        self.stats.enqueued += 1

        def committed() -> None:
            # the journal commits in submission order: every offset below this one is stored too
            if offset >= self.next:
                self.next = offset + 1
            on_stored()
            self.dispatch()

        self.journal.submit(
            (_store.PUT, self._key, offset, msg.priority, 0, None, msg.arrival, msg.message_id, msg.format, msg.data),
            committed,
        )
        self._retain()
        return PublishResult.TAKEN

    def _retain(self) -> None:
        p = self.policy
        cutoff = self.now() - p.max_age_seconds if p.max_age_seconds else None
        while self.first < self._end:
            oldest = self._get(self.first)
            too_old = cutoff is not None and oldest.arrival < cutoff
            too_big = p.retention_bytes is not None and self.bytes > p.retention_bytes and self._end - self.first > 1
            if not (too_old or too_big):
                break
            self.journal.submit((_store.DELETE, self._key, self.first))
            self.bytes -= oldest.size
            self._base += 1
            self.first += 1
        if self._base > 1024 and self._base > len(self._entries) // 2:
            del self._entries[: self._base]
            self._base = 0

    def start_offset(self, spec: Any) -> int:
        """Where a consumer starts for a filter value: first/last/next, an offset or a timestamp."""
        from ...types import timestamp

        if spec is None or spec == "next":
            return self.next
        if spec == "first":
            return self.first
        if spec == "last":
            return max(self.next - 1, self.first)
        if isinstance(spec, timestamp):
            ms = int(spec) / 1000
            lo, hi = self.first, self.next
            while lo < hi:  # arrival times only grow: binary search
                mid = (lo + hi) // 2
                if self._get(mid).arrival < ms:
                    lo = mid + 1
                else:
                    hi = mid
            return lo
        if isinstance(spec, int) and not isinstance(spec, bool):
            return min(max(spec, self.first), self._end)  # may wait for its commit
        raise ValueError(f"unsupported stream offset {spec!r}: use first, last, next, an offset or a timestamp")

    def add_consumer(self, consumer: Consumer) -> None:
        """Start ``consumer`` at the end (:meth:`add_consumer_at` for another offset)."""
        self.add_consumer_at(consumer, None)

    def add_consumer_at(self, consumer: Consumer, start: int | None) -> None:
        """Start ``consumer`` at offset ``start`` (None: the end). With
        ``single_active_consumer``, one that comes while another reads waits its turn.
        (Not ``add_consumer`` with a second parameter: compiled callers reach an override of
        a compiled base's method with the base's parameters only; tests/test_design.py.)"""
        self.positions[consumer.id] = self.next if start is None else start
        waits = self.policy.single_active_consumer and bool(self.consumers)
        self.consumers.append(consumer)
        if not waits:
            self._ready[consumer.id] = consumer
            self.dispatch()

    def consumer_ready(self, consumer: Consumer) -> None:
        # (a late call for one that left is ignored; one waiting its turn as single active
        # consumer is not made ready)
        if consumer.id in self.positions and (not self.policy.single_active_consumer or self.consumers[0] is consumer):
            self._ready[consumer.id] = consumer
        self.dispatch()

    def holds_more(self, consumer: Consumer) -> bool:
        """Whether entries past ``consumer``'s position are here."""
        return self.positions.get(consumer.id, self.next) < self.next

    def stream_offset(self, msg: QueuedMessage) -> int | None:
        """An entry's offset is its ``seq``."""
        return msg.seq

    @property
    def active_consumer(self) -> Consumer | None:
        """With ``single_active_consumer``: the one consumer that reads."""
        return self.consumers[0] if self.consumers else None

    def remove_consumer(self, consumer: Consumer) -> None:
        """``consumer`` leaves. With ``single_active_consumer``, if it was the active one the
        next to come takes over where it stopped (RabbitMQ's single active consumer of a
        stream resumes from the group's last offset), so no entry is read twice by the group."""
        active = self.policy.single_active_consumer and bool(self.consumers) and self.consumers[0] is consumer
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        position = self.positions.pop(consumer.id, None)
        self._ready.pop(consumer.id, None)
        if active and self.consumers:
            heir = self.consumers[0]
            if position is not None:
                self.positions[heir.id] = position
            self._ready[heir.id] = heir
            self.dispatch()

    def dispatch(self) -> None:
        """Each ready consumer reads on from its position to the committed end, as far as
        its credit goes. One that runs out of credit leaves the ready set; one that reaches
        the end stays in it, waiting at the tail without being asked for credit until a
        commit moves the end past it."""
        if self._dispatching or not self._ready:
            return
        self._dispatching = True
        try:
            ready = self._ready
            positions = self.positions
            stats = self.stats
            for cid, c in list(ready.items()):
                pos = positions.get(cid, self.next)
                if pos < self.first:
                    pos = self.first
                if pos >= self.next:
                    continue  # waiting at the tail: nothing to ask it
                credit = c.credit()
                selector = getattr(c, "selector", None)
                while credit > 0 and pos < self.next:
                    msg = self._entries[self._base + pos - self.first]
                    pos += 1
                    if selector is not None and not selector(msg):
                        continue  # not in this consumer's view: it reads on
                    positions[cid] = pos
                    stats.delivered += 1
                    c.deliver(self, msg)
                    credit -= 1  # each delivery takes one; ask again only when none is left
                    if credit <= 0:
                        credit = c.credit()
                if cid in ready:  # (still here: not removed while it was delivered to)
                    positions[cid] = pos
                    if credit <= 0:
                        del ready[cid]  # parked until consumer_ready
        finally:
            self._dispatching = False

    # outcomes do not remove anything from a stream
    def ack(self, msg: QueuedMessage) -> None:
        self.stats.acked += 1

    def release(
        self, msg: QueuedMessage, *, delivery_failed: bool = False, undeliverable_to: int | None = None, due: float | None = None
    ) -> None:
        self.stats.released += 1

    def reject(self, msg: QueuedMessage) -> None:
        self.stats.rejected += 1

    def delete(self) -> None:
        """The stream is being deleted: cancel its consumers."""
        self.deleted = True
        consumers, self.consumers = self.consumers, []
        self.positions.clear()
        self._ready.clear()
        cancel_consumers(consumers)

    def peek(self, n: int, offset: int = 0) -> list[QueuedMessage]:
        """``n`` retained messages from position ``offset`` past the oldest (management's PEEK)."""
        start = self.first + max(offset, 0)
        return [self._get(o) for o in range(start, min(self.next, start + max(n, 0)))]

    def info(self) -> dict[str, int]:
        return {"first": self.first, "next": self.next, "count": self.count, "bytes": self.bytes}
