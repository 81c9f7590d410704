"""Bounded memory for queues: message bodies beyond a queue's budget live in the store only.

A queue (core/queues.py) keeps the head of each priority level in memory as
:class:`QueuedMessage` objects. Once what it holds in memory would pass its budget
(``limits.queue_memory_budget_bytes``: bodies plus :data:`MESSAGE_OVERHEAD` each), a
:class:`Pager` takes new messages instead: their level gets a *tail* that keeps only
each message's seq, size and two flags (13 bytes, in arrays), and the body stays in
the store. A durable message is there already (``messages``); a non-durable one is
written to the store's temporary ``paged`` table, which dies with the store's
connection, so a restart never brings it back. Every later message of that level
joins the tail too, which keeps the level in seq order.

A paged-out non-durable message is answered at once (nothing about it outlives a restart
anyway) while the bodies written to the paged table and not committed yet, which the
journal holds in memory meanwhile, stay within a share of the budget
(:data:`UNSTORED_SHARE`); past it, after that commit, which holds a publisher faster than
the disk back.

When a consumer reaches the end of a level's head, the queue asks :meth:`Pager.refill`
for the next run of the tail: one read of the store by seq range, the rows rebuilt as
messages of their format (as recovery does) and appended to the head, up to the
budget. A row not committed yet (the store's writes are grouped) ends the run; the
queue is dispatched again once the committer has caught up (a barrier).

What a paged message loses until it is read back: what was read once from its body
(routing fields, headers: read again on demand) and its publishing connection and
exchange (as after a restart). Browsers, PEEK and other readers that take nothing read
the tails too, a chunk at a time, and leave them paged out (core/browsing.py).
A consumer with a selector (or of message groups) that matches nothing in the head
reads on through the tail a run at a time (:meth:`Pager.take`) and takes the message it
matches out of the middle: its entry is marked gone (skipped by every later read, its
size no longer counted), and what it passed over stays paged out. Released, it goes back
to its entry if that is still paged out, so the level stays in order.
"""

from __future__ import annotations

import logging
from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final, Protocol

from . import store as _store
from .message import QueuedMessage, format_named

if TYPE_CHECKING:
    from .nodes import Journal
    from .queues import Queue

__all__ = ["MAX_RUN", "MESSAGE_OVERHEAD", "UNSTORED_SHARE", "Gap", "PageStore", "Pager"]

log = logging.getLogger(__name__)

MESSAGE_OVERHEAD: Final = 320
"""Bytes a queued message costs in memory besides its body (the object, its slots, its
place in a deque, its message-id): what the budget charges per message, so that a queue
of tiny messages is bounded too."""

MAX_RUN = 512
"""The most messages one refill reads back from the store."""

UNSTORED_SHARE = 8
"""A queue's paged-out non-durable bodies submitted to the journal and not committed yet
(bodies it holds in memory until then) may reach ``budget // UNSTORED_SHARE`` bytes before
their publishers are answered only after the commit: a paging queue's bodies then stay
within 9/8 of its budget plus what its publishers' windows hold past that. Counted per queue, as the budget is (the whole broker's memory
has its own limit and alarm); a budget of 0 leaves none (every one waits)."""

_TRANSIENT: Final = 1  # in the store's temporary paged table (else in its messages table)
_DURABLE: Final = 2  # the message's own durable flag
_GONE = 4  # taken from the middle of the tail by a selective consumer (its size set to 0)


class PageStore(Protocol):
    """Where paged-out bodies are read back from (:meth:`SqlStore.read_paged`)."""

    def read_paged(self, key: str, first: int, last: int, *, durable: bool, transient: bool) -> list[tuple[Any, ...]]: ...


class _Tail:
    """The paged-out part of one priority level, oldest first: seqs, sizes, flags."""

    __slots__ = ("bytes", "flags", "gone", "seqs", "sizes", "start")

    def __init__(self) -> None:
        self.seqs = array("q")
        self.sizes = array("l")
        self.flags = array("B")  # (not a bytearray: mypyc compiles no loop over one)
        self.start = 0  # entries before it have been read back
        self.bytes = 0
        self.gone = 0  # entries after start marked _GONE

    def __len__(self) -> int:
        return len(self.seqs) - self.start

    def append(self, seq: int, size: int, flags: int) -> None:
        self.seqs.append(seq)
        self.sizes.append(size)
        self.flags.append(flags)
        self.bytes += size

    def consume(self, n: int) -> None:
        """The first ``n`` entries are back in memory (or gone)."""
        start = self.start
        self.bytes -= sum(self.sizes[start : start + n])
        if self.gone:
            self.gone -= sum(1 for f in self.flags[start : start + n] if f & _GONE)
        self.start = start + n
        if self.start >= 4096 and self.start * 2 >= len(self.seqs):  # amortised O(1) per entry
            del self.seqs[: self.start]
            del self.sizes[: self.start]
            del self.flags[: self.start]
            self.start = 0


class Pager:
    """Keeps ``queue``'s messages in memory within ``budget`` bytes; the rest in ``store``."""

    def __init__(self, queue: Queue, store: PageStore, journal: Journal, budget: int) -> None:
        self.queue = queue
        self.store = store
        self.journal = journal
        self.budget = budget
        self._tails: dict[int, _Tail] = {}  # by priority level
        self.count = 0
        """Messages paged out (in a tail)."""
        self.bytes = 0
        """Their bytes."""
        self._waiting = False  # a barrier is pending: a read found a row not committed yet
        self._writing = 0  # the seq of the last paged-out message answered after its body's commit
        self.unstored = 0
        """Bytes of bodies submitted to the paged table and not committed yet."""
        self._unstored_sizes: deque[int] = deque()  # theirs, oldest first (commits come in order)
        self.unstored_limit = budget // UNSTORED_SHARE
        self._numbers: dict[int, int] = {}  # seq -> number of paged-out renumbered (once scheduled) messages
        self._missed: int | None = None  # the seq that read found missing

    def memory(self) -> int:
        """What the queue's queued messages cost in memory now (bodies and overhead)."""
        q = self.queue
        return (q.bytes - self.bytes) + MESSAGE_OVERHEAD * (q.count - self.count)

    def page_out(self, msg: QueuedMessage) -> bool:
        """Take ``msg`` (just enqueued at its level, ``seq`` set) into its level's tail if
        the level already has one or the budget is spent; False: the queue keeps it."""
        p = msg.priority
        tail = self._tails.get(p)
        if (tail is None or not len(tail)) and self.memory() + msg.size + MESSAGE_OVERHEAD <= self.budget:
            return False
        q = self.queue
        q._level(p)  # the level exists, so that takes look at it
        if tail is None:
            tail = self._tails[p] = _Tail()
        flags = _DURABLE if msg.durable else 0
        if not q._persistent(msg):  # not in the store yet: its body goes to the paged table
            flags |= _TRANSIENT
            self._page(msg)
            if self.unstored > self.unstored_limit:
                self._writing = msg.seq
        tail.append(msg.seq, msg.size, flags)
        number = getattr(msg, "_number", None)
        if number is not None:  # (a scheduled message, renumbered when due, keeps its number)
            self._numbers[msg.seq] = number
        self.count += 1
        self.bytes += msg.size
        q._paged_changed(msg.size)
        return True

    def _page(self, msg: QueuedMessage) -> None:
        """Write ``msg``'s body to the store's paged table (counted in :attr:`unstored` until
        it is committed)."""
        size = len(msg.data)
        self.unstored += size
        self._unstored_sizes.append(size)
        self.journal.submit(
            (_store.PAGE, self.queue._key, msg.seq, msg.delivery_count, msg.expiry, msg.arrival, msg.message_id, msg.format, msg.data),
            self._stored,
        )

    def _stored(self) -> None:
        """The oldest body :meth:`_page` submitted is committed."""
        self.unstored -= self._unstored_sizes.popleft()

    def writing(self, msg: QueuedMessage) -> bool:
        """Whether ``msg``, just paged out, is a non-durable message whose publisher is to be
        answered only once its body is committed: the bodies waiting for the committer were
        past :attr:`unstored_limit` with it, and the publishers' windows are what bounds
        them then. Under it, it is answered at once."""
        return self._writing == msg.seq

    def refill(self, level: deque[QueuedMessage]) -> bool:
        """Read the next run of ``level``'s tail back into it (as much as the budget allows,
        at least one message). True if anything was added."""
        p = next((i for i, lv in enumerate(self.queue._levels) if lv is level), -1)  # (empty deques are equal)
        tail = self._tails.get(p)
        while tail is not None and len(tail):
            added = self._refill_run(level, p, tail)
            if added is not None:
                return added
        return False

    def _refill_run(self, level: deque[QueuedMessage], p: int, tail: _Tail) -> bool | None:
        """One run of :meth:`refill`; None: the run held only messages taken already (read on)."""
        q = self.queue
        room = self.budget - self.memory()
        per = tail.bytes // len(tail) + MESSAGE_OVERHEAD
        n = min(len(tail), max(1, min(MAX_RUN, room // per)))
        start = tail.start
        seqs = tail.seqs[start : start + n]
        flags = tail.flags[start : start + n]
        by_seq = self._read(seqs, flags)
        key = q._key
        submit = self.journal.submit
        got = 0
        dropped = 0
        gone = 0
        for i, seq in enumerate(seqs):
            if flags[i] & _GONE:
                gone += 1
                got += 1
                continue
            row = by_seq.get(seq)
            if row is None:
                if self._missed == seq and not self._waiting:
                    # missing after the committer caught up: the row is gone (it cannot be
                    # read back); count it out rather than stall the queue behind it
                    log.error("queue %r: message %d is not in the store; skipped", q.name, seq)
                    dropped += 1
                    self._missed = None
                    got += 1
                    continue
                self._wait_for(seq)
                break
            level.append(self._rebuild(row, p, flags[i], taken=True))
            if flags[i] & _TRANSIENT:
                submit((_store.UNPAGE, key, seq))
            got += 1
        if not got:
            return False
        if dropped:
            lost = sum(tail.sizes[start + i] for i in range(got) if seqs[i] not in by_seq)
            q.count -= dropped
            q.bytes -= lost
        before = tail.bytes
        tail.consume(got)
        freed = before - tail.bytes
        self.count -= got - gone
        self.bytes -= freed
        q._paged_changed(-freed)
        if got == gone:
            return None
        return got > dropped + gone

    def _read(self, seqs: array[int], flags: array[int]) -> dict[int, tuple[Any, ...]]:
        """The store's rows of the paged-out ``seqs`` (one read by seq range), by seq; a row
        not there (not committed yet, or gone) is missing, and rows of other seqs in the
        range (other levels, delivered ones) are left out."""
        rows = self.store.read_paged(
            self.queue._key,
            seqs[0],
            seqs[-1],
            durable=not all(f & _TRANSIENT for f in flags),
            transient=any(f & _TRANSIENT for f in flags),
        )
        wanted = set(seqs)
        return {r[0]: r for r in rows if r[0] in wanted}

    def paged(self, priority: int, *, after: int = 0, skip: int = 0, chunk: int = MAX_RUN) -> Iterator[QueuedMessage | Gap]:
        """Level ``priority``'s paged-out messages after seq ``after`` (and past the first
        ``skip`` of those), oldest first, read back from the store ``chunk`` at a time and
        left paged out: what browsers and PEEK see past a level's head, within bounded
        memory. A row not committed yet ends it with a :class:`Gap` (the queue is
        dispatched again once it is committed)."""
        tail = self._tails.get(priority)
        if tail is None:
            return
        chunk = max(1, min(chunk, MAX_RUN))
        while True:
            # found again each time: a refill between two chunks moves the tail's start
            i = bisect_right(tail.seqs, after, lo=tail.start)
            flags = tail.flags
            while skip and i < len(flags):  # over the live entries (not _GONE)
                skip -= not flags[i] & _GONE
                i += 1
            seqs = tail.seqs[i : i + chunk]
            if not seqs:
                return
            flags = tail.flags[i : i + chunk]
            rows = self._read(seqs, flags)
            for seq, f in zip(seqs, flags, strict=True):
                if f & _GONE:
                    continue
                row = rows.get(seq)
                if row is None:
                    if self._missed == seq and not self._waiting:
                        continue  # gone for good (refill counts it out)
                    self._wait_for(seq)
                    yield Gap(seq)
                    return
                yield self._rebuild(row, priority, f, taken=False)
            after = seqs[-1]

    def take(self, priority: int, after: int, match: Callable[[QueuedMessage], bool]) -> tuple[QueuedMessage | None, int]:
        """The first paged-out message of level ``priority`` after seq ``after`` that ``match``
        accepts, taken out of the tail (rebuilt from the store; the others left there), and
        the seq up to which nothing matched: what a selective consumer takes without
        pulling what it passes over into memory. An expired message it meets is taken out
        and expired (dead-lettered) on the way."""
        q = self.queue
        now = q.now()
        last = after
        for msg in self.paged(priority, after=after):
            if isinstance(msg, Gap):
                break
            if msg.expiry is not None and msg.expiry <= now:
                self._gone(self._tails[priority], msg)
                q.count -= 1
                q.bytes -= msg.size
                q._expire(msg)
            elif match(msg):
                self._gone(self._tails[priority], msg)
                return msg, msg.seq
            last = msg.seq
        return None, last

    def _rebuild(self, row: tuple[Any, ...], priority: int, flags: int, *, taken: bool) -> QueuedMessage:
        """A paged-out message rebuilt from its store row, with the number it keeps if it was
        renumbered when due (forgotten here once ``taken`` out of the paged part)."""
        msg = _rebuild(row, priority, flags)
        if self._numbers:
            numbers = self._numbers
            number = numbers.pop(msg.seq, None) if taken else numbers.get(msg.seq)
            if number is not None:
                msg._number = number
        return msg

    def _gone(self, tail: _Tail, msg: QueuedMessage) -> None:
        """``msg`` has left the middle of ``tail`` for a consumer: mark its entry, count it out."""
        self._numbers.pop(msg.seq, None)
        i = bisect_right(tail.seqs, msg.seq, lo=tail.start) - 1
        f = tail.flags[i]
        size = tail.sizes[i]
        tail.flags[i] = f | _GONE
        tail.sizes[i] = 0
        tail.bytes -= size
        tail.gone += 1
        self.count -= 1
        self.bytes -= size
        self.queue._paged_changed(-size)
        if f & _TRANSIENT:
            self.journal.submit((_store.UNPAGE, self.queue._key, msg.seq))

    def put_back(self, msg: QueuedMessage) -> bool:
        """``msg``, taken by :meth:`take`, is released: back to its place in the tail if that
        is still paged out (True), which keeps the level in order; False: the queue puts it
        at the head of its level."""
        tail = self._tails.get(msg.priority)
        if tail is None:
            return False
        i = bisect_right(tail.seqs, msg.seq, lo=tail.start) - 1
        if i < tail.start or tail.seqs[i] != msg.seq or not tail.flags[i] & _GONE:
            return False
        f = tail.flags[i] & ~_GONE
        tail.flags[i] = f
        tail.sizes[i] = msg.size
        tail.bytes += msg.size
        tail.gone -= 1
        self.count += 1
        self.bytes += msg.size
        self.queue._paged_changed(msg.size)
        if f & _TRANSIENT:
            self._page(msg)  # (its row went when it was taken)
        return True

    def paged_count(self, priority: int) -> int:
        """How many of level ``priority``'s messages are paged out."""
        tail = self._tails.get(priority)
        return 0 if tail is None else len(tail) - tail.gone

    def last_paged(self) -> int:
        """The highest seq paged out (0: none)."""
        last = 0
        for tail in self._tails.values():
            i = len(tail.seqs) - 1
            while i >= tail.start and tail.flags[i] & _GONE:
                i -= 1
            if i >= tail.start:
                last = max(last, tail.seqs[i])
        return last

    def _wait_for(self, seq: int) -> None:
        """``seq``'s row is not committed yet: dispatch the queue again once it is. The
        barrier is submitted after the miss, so once it is committed so is the row, if it
        is ever written: a row still missing then is gone (:meth:`_refill_run`). A barrier
        pending for another seq does not do (the row may be submitted after it): a new one."""
        if self._waiting and self._missed == seq:
            return
        self._missed = seq
        self._waiting = True

        def committed() -> None:
            if self._missed == seq:  # (else a later barrier waits for the seq now missed)
                self._waiting = False
            q = self.queue
            q.dispatch()
            if q._expiring:  # its heads' deadline may wait for this row (core/expiry.py)
                q._arm_heads()

        self.journal.submit((_store.BARRIER,), committed)

    def fill_heads(self) -> None:
        """Give every level with a tail and an empty head its next run (before something
        compares the levels' oldest messages)."""
        for level in self.queue._levels:
            if not level:
                self.refill(level)

    def purge(self) -> None:
        """The queue is purged: forget every tail, deleting what the store keeps of it."""
        q = self.queue
        submit = self.journal.submit
        transient = False
        self._numbers.clear()
        for tail in self._tails.values():
            for i in range(tail.start, len(tail.seqs)):
                if tail.flags[i] & _GONE:
                    continue  # with a consumer now
                if tail.flags[i] & _TRANSIENT:
                    transient = True
                else:
                    q._disk_changed(-tail.sizes[i])
                    submit((_store.DELETE, q._key, tail.seqs[i]))
        if transient:
            submit((_store.UNPAGE, q._key, None))
        self._tails.clear()
        q._paged_changed(-self.bytes)
        self.count = 0
        self.bytes = 0


class Gap:
    """Where a read of the paged-out part stopped: ``seq``'s row is not committed yet."""

    __slots__ = ("seq",)

    def __init__(self, seq: int) -> None:
        self.seq = seq


def _rebuild(row: tuple[Any, ...], priority: int, flags: int) -> QueuedMessage:
    """A paged-out message rebuilt from its store row (as recovery does)."""
    seq, delivery_count, expiry, arrival, message_id, fmt, data = row
    return format_named(fmt)(
        bytes(data),
        priority=priority,
        durable=bool(flags & _DURABLE),
        expiry=expiry,
        message_id=message_id,
        delivery_count=delivery_count,
        arrival=arrival,
        seq=seq,
    )


def pager_factory(store: PageStore | None, budget: int | None) -> Callable[[Queue], Pager | None]:
    """What makes each queue's pager (None: no store, or no budget: everything in memory)."""

    def make(queue: Queue) -> Pager | None:
        if store is None or budget is None:
            return None
        return Pager(queue, store, queue.journal, budget)

    return make
