"""The broker's durable store: SQLite in WAL mode, written with grouped commits.

Every durable message is in the database before the broker accepts it. Writes
are collected by :class:`GroupCommitter` and applied in one transaction per
batch from a worker thread, so a burst of N messages costs one fsync, not N.
On restart, :meth:`Store.load` gives back every queue's messages in order, with
the delivery-count of those that were in flight when the broker stopped raised
by one (their delivery may have been attempted).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

__all__ = ["GroupCommitter", "NodeRecord", "Store", "StoredMessage"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    name TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    properties TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS messages (
    node TEXT NOT NULL,
    seq INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    delivery_count INTEGER NOT NULL DEFAULT 0,
    in_flight INTEGER NOT NULL DEFAULT 0,
    expiry REAL,
    arrival REAL NOT NULL DEFAULT 0,
    message_id TEXT,
    data BLOB NOT NULL,
    PRIMARY KEY (node, seq)
) WITHOUT ROWID;
"""


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message row as recovered from the store."""

    node: str
    seq: int
    priority: int
    delivery_count: int
    expiry: float | None
    arrival: float
    message_id: str | None
    data: bytes


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A durable node (queue, topic subscription, stream) to recreate at start."""

    name: str
    kind: str
    properties: str


# Operations applied in one transaction (tuples keep the hot path cheap).
PUT = 0  # (PUT, node, seq, priority, delivery_count, expiry, arrival, message_id, data)
DELETE = 1  # (DELETE, node, seq)
UPDATE = 2  # (UPDATE, node, seq, delivery_count, in_flight)
NODE = 3  # (NODE, name, kind, properties)
DROP_NODE = 4  # (DROP_NODE, name)
BARRIER = 5  # (BARRIER,): writes nothing; its on_commit runs after those of every earlier op
Op = tuple[Any, ...]


class Store:
    """Synchronous SQLite access; call from one thread at a time."""

    def __init__(self, path: Path | str, *, synchronous: str = "FULL") -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def load(self) -> tuple[list[NodeRecord], list[StoredMessage]]:
        """Every durable node, and every stored message in (node, seq) order.

        Messages marked in flight come back with delivery-count + 1, and the
        change is written back so a second crash does not lose the count.
        """
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute(
                    "UPDATE messages SET delivery_count = delivery_count + 1, in_flight = 0 "
                    "WHERE in_flight = 1"
                )
                nodes = [NodeRecord(*r) for r in db.execute("SELECT name, kind, properties FROM nodes")]
                rows = db.execute(
                    "SELECT node, seq, priority, delivery_count, expiry, arrival, message_id, data "
                    "FROM messages ORDER BY node, seq"
                ).fetchall()
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return nodes, [StoredMessage(*r) for r in rows]

    def apply(self, ops: Iterable[Op]) -> None:
        """Apply a batch of operations in one transaction (one fsync)."""
        puts: list[tuple[Any, ...]] = []
        deletes: list[tuple[Any, ...]] = []
        updates: list[tuple[Any, ...]] = []
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                for op in ops:
                    kind = op[0]
                    if kind == PUT:
                        puts.append(op[1:])
                    elif kind == DELETE:
                        if puts or updates:
                            self._flush(puts, deletes, updates)
                        deletes.append(op[1:])
                    elif kind == UPDATE:
                        if deletes:
                            self._flush(puts, deletes, updates)
                        updates.append((op[3], op[4], op[1], op[2]))
                    elif kind == NODE:
                        self._flush(puts, deletes, updates)
                        db.execute(
                            "INSERT OR REPLACE INTO nodes (name, kind, properties) VALUES (?, ?, ?)",
                            op[1:],
                        )
                    elif kind == DROP_NODE:
                        self._flush(puts, deletes, updates)
                        db.execute("DELETE FROM messages WHERE node = ?", (op[1],))
                        db.execute("DELETE FROM nodes WHERE name = ?", (op[1],))
                    elif kind == BARRIER:
                        pass
                    else:  # pragma: no cover - a programming error
                        raise ValueError(f"unknown store operation {kind!r}")
                self._flush(puts, deletes, updates)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def _flush(
        self, puts: list[tuple[Any, ...]], deletes: list[tuple[Any, ...]], updates: list[tuple[Any, ...]]
    ) -> None:
        db = self._db
        if puts:
            db.executemany(
                "INSERT OR REPLACE INTO messages "
                "(node, seq, priority, delivery_count, expiry, arrival, message_id, data) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                puts,
            )
            puts.clear()
        if updates:
            db.executemany(
                "UPDATE messages SET delivery_count = ?, in_flight = ? WHERE node = ? AND seq = ?",
                updates,
            )
            updates.clear()
        if deletes:
            db.executemany("DELETE FROM messages WHERE node = ? AND seq = ?", deletes)
            deletes.clear()


class GroupCommitter:
    """Collects store operations and commits them in batches from a worker thread.

    ``submit(op, on_commit)`` never blocks; ``on_commit`` runs in the event loop
    once the operation is durable (this is when the broker accepts a message).
    Run :meth:`run` in a task group; :meth:`flush` waits for everything so far.
    """

    def __init__(self, store: Store, *, interval: float = 0.002, max_batch: int = 2048) -> None:
        self.store = store
        self.interval = interval
        self.max_batch = max_batch
        self._ops: list[Op] = []
        self._callbacks: list[Callable[[], None]] = []
        self._wake = anyio.Event()
        self._idle = anyio.Event()
        self._idle.set()
        self._closed = False
        self.commits = 0
        self.ops_committed = 0
        self.error: BaseException | None = None

    def submit(self, op: Op, on_commit: Callable[[], None] | None = None) -> None:
        if self._closed:
            raise RuntimeError("the store is closed")
        self._ops.append(op)
        if on_commit is not None:
            self._callbacks.append(on_commit)
        if self._idle.is_set():
            self._idle = anyio.Event()
        self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._ops)

    async def flush(self) -> None:
        """Wait until every operation submitted so far is committed."""
        while self._ops or not self._idle.is_set():
            await self._idle.wait()

    async def run(self) -> None:
        """Commit batches until cancelled (then commit what is left)."""
        try:
            while True:
                await self._wake.wait()
                self._wake = anyio.Event()
                if self.interval and len(self._ops) < self.max_batch:
                    await anyio.sleep(self.interval)
                await self._commit_pending()
        finally:
            with anyio.CancelScope(shield=True):
                await self._commit_pending()

    async def _commit_pending(self) -> None:
        while self._ops:
            ops, self._ops = self._ops, []
            callbacks, self._callbacks = self._callbacks, []
            try:
                await anyio.to_thread.run_sync(self.store.apply, ops)
            except BaseException as exc:
                self.error = exc
                raise
            self.commits += 1
            self.ops_committed += len(ops)
            for cb in callbacks:
                cb()
        self._idle.set()

    def close(self) -> None:
        self._closed = True
