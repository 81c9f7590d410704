"""What the workers count together: connections (in all, per source address, per user) and memory.

The connection limits (``limits.max_connections``, ``[security]``
``max_connections_per_address`` and ``max_connections_per_user``) and the memory alarm
are the whole broker's, not one worker's. The parent creates one shared file before it
forks the workers (:func:`create`, ``<data dir>/workers/counters``); each worker maps it
(:class:`SharedCounts`) and owns one row of it, which only it writes:

- its connections (those :class:`~amqp10.broker.guard.ConnectionGuard` admitted, the
  handshaking ones included), its resident size, and the bytes of the messages its
  queues hold in memory (``limits.memory_limit_bytes`` counts every worker's:
  :meth:`SharedCounts.whole_queued`);
- two open-addressed tables, one per source address and one per user: each slot an
  8-byte hash of the key (0: empty) and its count. A count that falls to 0 keeps its
  slot (a later connection of the same key takes it again); a table whose used slots
  reach :data:`FILL` is compacted (its 0 counts dropped, when an eighth of the slots
  are such), and a key that still finds no room is counted on its worker only (logged).

An admission check sums the other rows with its own count, read without a lock: it is off
at most by the connections being admitted at that instant on other workers, as the
design note says. A worker zeroes its row when it starts (a restarted worker's
predecessor left its counts there).
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
from pathlib import Path

__all__ = ["FILL", "SLOTS", "SharedCounts", "counters_path", "create"]

log = logging.getLogger("amqp10.broker.workers")

SLOTS = 4096
"""Slots per table per worker; at most :data:`FILL` of them in use (keys with connections,
or that had some before the last compaction), so a lookup probes few."""
FILL = SLOTS * 3 // 4

_HEAD = 3  # a row's first words: connections, resident bytes, queued bytes in memory
_TOTAL, _RSS, _QUEUED = 0, 1, 2
_ADDRESS, _USER = 0, 1  # the tables
_ROW = _HEAD + 2 * 2 * SLOTS  # words (int64) in one worker's row


def counters_path(directory: Path) -> Path:
    """The shared file of the workers whose sockets are in ``directory``."""
    return directory / "counters"


def create(directory: Path, workers: int) -> Path:
    """Make the shared file for ``workers`` workers, zeroed (the parent, before it forks)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = counters_path(directory)
    tmp = path.with_name(path.name + ".new")
    with open(tmp, "wb") as f:
        f.truncate(workers * _ROW * 8)
    os.replace(tmp, path)  # a worker of an earlier run that still maps the old file keeps it
    return path


def _key_hash(key: str) -> int:
    """A key's slot tag: 8 bytes of its hash as a signed, nonzero int64."""
    h = int.from_bytes(hashlib.blake2b(key.encode(errors="surrogateescape"), digest_size=8).digest(), "little", signed=True)
    return h or 1


class SharedCounts:
    """Worker ``me``'s view of the shared file of ``workers`` rows (see the module)."""

    def __init__(self, path: Path, workers: int, me: int) -> None:
        self.workers = workers
        self.me = me
        with open(path, "r+b") as f:
            self._map = mmap.mmap(f.fileno(), workers * _ROW * 8)
        self._words = memoryview(self._map).cast("q")
        self._mine = me * _ROW
        for i in range(self._mine, self._mine + _ROW):
            self._words[i] = 0
        self._full_logged = False
        self._used = [0, 0]  # slots with a tag in each of this worker's tables
        self._live = [0, 0]  # of them, those with a count

    @classmethod
    def attach(cls, directory: Path, workers: int, me: int) -> SharedCounts | None:
        """Worker ``me``'s view of the file the parent made; None (logged: every limit then
        counts this worker only) if there is none of the size ``workers`` need."""
        path = counters_path(directory)
        try:
            if path.stat().st_size == workers * _ROW * 8:
                return cls(path, workers, me)
            why = "of another size"
        except OSError as exc:
            why = str(exc)
        log.warning("no shared connection counts at %s (%s): limits count this worker only", path, why)
        return None

    def close(self) -> None:
        self._words.release()
        self._map.close()

    # -- this worker's row ---------------------------------------------------------------------
    def publish_total(self, n: int) -> None:
        """This worker's connections now."""
        self._words[self._mine + _TOTAL] = n

    def publish_address(self, address: str, n: int) -> None:
        self._publish(_ADDRESS, address, n)

    def publish_user(self, user: str, n: int) -> None:
        self._publish(_USER, user, n)

    def whole_rss(self, mine: int | None) -> int | None:
        """Publish this worker's resident size ``mine``; the sum of every worker's (None: unknown)."""
        if mine is None:
            return None
        self._words[self._mine + _RSS] = mine
        return mine + self._others(_RSS)

    def whole_queued(self, mine: int) -> int:
        """Publish the bytes of the messages this worker's queues hold in memory, ``mine``
        (not paged out: ``Broker.stats.resident_bytes``); those of the other workers, as
        each last published them."""
        self._words[self._mine + _QUEUED] = mine
        return self._others(_QUEUED)

    # -- the other workers' rows ---------------------------------------------------------------
    def total(self) -> int:
        """The other workers' connections."""
        return self._others(_TOTAL)

    def address(self, address: str) -> int:
        """The other workers' connections from ``address``."""
        return self._others_keyed(_ADDRESS, address)

    def user(self, user: str) -> int:
        """The other workers' connections of ``user``."""
        return self._others_keyed(_USER, user)

    # -- the tables ----------------------------------------------------------------------------
    def _others(self, word: int) -> int:
        w = self._words
        return sum(w[k * _ROW + word] for k in range(self.workers) if k != self.me)

    def _others_keyed(self, table: int, key: str) -> int:
        h = _key_hash(key)
        return sum(self._find(k, table, h)[1] for k in range(self.workers) if k != self.me)

    def _table(self, worker: int, table: int) -> int:
        return worker * _ROW + _HEAD + table * 2 * SLOTS

    def _find(self, worker: int, table: int, h: int) -> tuple[int | None, int]:
        """(the word of ``h``'s slot or of the first empty one, None if the table is full;
        ``h``'s count there, 0 if absent)."""
        w = self._words
        base = self._table(worker, table)
        start = h % SLOTS
        for i in range(SLOTS):
            at = base + 2 * ((start + i) % SLOTS)
            tag = w[at]
            if tag == h:
                return at, w[at + 1]
            if tag == 0:
                return at, 0
        return None, 0

    def _publish(self, table: int, key: str, n: int) -> None:
        h = _key_hash(key)
        w = self._words
        at, old = self._find(self.me, table, h)
        assert at is not None  # (never more than FILL slots used)
        if w[at] == 0:  # a new key: it takes a slot
            if n == 0:
                return
            if self._used[table] >= FILL:
                if self._used[table] - self._live[table] >= SLOTS // 8:  # worth it (amortised)
                    self._compact(table)
                if self._used[table] >= FILL:
                    if not self._full_logged:
                        self._full_logged = True
                        log.warning("%d keys with connections on this worker: the rest count on it only", FILL)
                    return
                at, old = self._find(self.me, table, h)
                assert at is not None
            self._used[table] += 1
        self._live[table] += (n > 0) - (old > 0)
        w[at + 1] = n  # the count before the tag: a reader that sees the tag sees its count
        w[at] = h

    def _compact(self, table: int) -> None:
        """Drop the slots whose count is 0 (this worker's table only)."""
        w = self._words
        base = self._table(self.me, table)
        live = [(w[base + 2 * i], w[base + 2 * i + 1]) for i in range(SLOTS) if w[base + 2 * i + 1]]
        for i in range(2 * SLOTS):
            w[base + i] = 0
        for h, n in live:
            at, _ = self._find(self.me, table, h)
            assert at is not None
            w[at + 1] = n
            w[at] = h
        self._used[table] = self._live[table] = len(live)
