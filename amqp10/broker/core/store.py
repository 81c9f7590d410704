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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

__all__ = [
    "message_key",
    "split_message_key",
    "BindingRecord", "ExchangeRecord", "GroupCommitter", "Loaded", "NodeRecord", "PolicyRecord", "Store",
    "StoredMessage", "VhostRecord"]

SCHEMA_VERSION = 3
"""``PRAGMA user_version`` of the current schema. Version 0 is the schema of the
brokers before virtual hosts (nodes and messages keyed by name alone, every
message a 1.0 message); version 2 has no policies or vhosts tables.
:meth:`Store.__init__` migrates both in place."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    vhost TEXT NOT NULL DEFAULT '/',
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    properties TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (vhost, name)
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
    format TEXT NOT NULL DEFAULT 'amqp1',
    data BLOB NOT NULL,
    PRIMARY KEY (node, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS exchanges (
    vhost TEXT NOT NULL,
    name TEXT NOT NULL,
    type TEXT NOT NULL,
    properties TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (vhost, name)
);
CREATE TABLE IF NOT EXISTS bindings (
    vhost TEXT NOT NULL,
    source TEXT NOT NULL,
    destination_kind TEXT NOT NULL,
    destination TEXT NOT NULL,
    routing_key TEXT NOT NULL,
    arguments TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (vhost, source, destination_kind, destination, routing_key, arguments)
);
CREATE TABLE IF NOT EXISTS policies (
    vhost TEXT NOT NULL,
    name TEXT NOT NULL,
    pattern TEXT NOT NULL,
    apply_to TEXT NOT NULL,
    definition TEXT NOT NULL,
    priority INTEGER NOT NULL,
    PRIMARY KEY (vhost, name)
);
CREATE TABLE IF NOT EXISTS vhosts (
    name TEXT PRIMARY KEY,
    metadata TEXT NOT NULL DEFAULT '{}'
);
"""

# Version 0 -> 2: the nodes move into the default virtual host (a new table, the rows
# copied); the messages keep their rows (the default host's message keys are the node
# names) and gain the format column (every old message is a 1.0 message). All in one
# transaction, so an interrupted migration leaves the old store as it was.
_MIGRATE_FROM_0 = """
ALTER TABLE nodes RENAME TO nodes_v0;
ALTER TABLE messages ADD COLUMN format TEXT NOT NULL DEFAULT 'amqp1';
{schema}
INSERT INTO nodes (vhost, name, kind, properties) SELECT '/', name, kind, properties FROM nodes_v0;
DROP TABLE nodes_v0;
"""
# Version 2 -> 3: new tables only (runtime policies, declared virtual hosts).


def message_key(vhost: str, node: str) -> str:
    """The ``messages.node`` of a node's messages: its name in the default virtual host,
    else the host's name and the node's joined by a unit separator (a character no
    address holds). Messages are keyed by one short text: a key of two costs every write."""
    return node if vhost == "/" else f"{vhost}\x1f{node}"


def split_message_key(key: str) -> tuple[str, str]:
    """(vhost, node) of a :func:`message_key`."""
    vhost, sep, node = key.partition("\x1f")
    return (vhost, node) if sep else ("/", key)


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message row as recovered from the store (``node``: its :func:`message_key`)."""

    node: str
    seq: int
    priority: int
    delivery_count: int
    expiry: float | None
    arrival: float
    message_id: str | None
    format: str
    data: bytes


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A durable node (queue, topic subscription, stream) to recreate at start."""

    vhost: str
    name: str
    kind: str
    properties: str


@dataclass(frozen=True, slots=True)
class ExchangeRecord:
    """A durable exchange: its type and properties (JSON: auto_delete, internal, alternate, arguments)."""

    vhost: str
    name: str
    type: str
    properties: str


@dataclass(frozen=True, slots=True)
class BindingRecord:
    """A durable binding: source exchange to a queue or exchange, key and arguments (JSON)."""

    vhost: str
    source: str
    destination_kind: str
    destination: str
    routing_key: str
    arguments: str


@dataclass(frozen=True, slots=True)
class PolicyRecord:
    """A runtime policy (RabbitMQ's): queues whose names match ``pattern`` get ``definition`` (JSON)."""

    vhost: str
    name: str
    pattern: str
    apply_to: str
    definition: str
    priority: int


@dataclass(frozen=True, slots=True)
class VhostRecord:
    """A virtual host declared at run time (definitions import), with its metadata (JSON)."""

    name: str
    metadata: str


@dataclass(frozen=True, slots=True)
class Loaded:
    """Everything a store holds, as :meth:`Store.load` reads it."""

    nodes: list[NodeRecord]
    messages: list[StoredMessage]
    exchanges: list[ExchangeRecord]
    bindings: list[BindingRecord]
    policies: list[PolicyRecord] = field(default_factory=list)
    vhosts: list[VhostRecord] = field(default_factory=list)


# Operations applied in one transaction (tuples keep the hot path cheap).
# ``key`` is the node's message_key(vhost, name).
PUT = 0  # (PUT, key, seq, priority, delivery_count, expiry, arrival, message_id, format, data)
DELETE = 1  # (DELETE, key, seq)
UPDATE = 2  # (UPDATE, key, seq, delivery_count, in_flight)
NODE = 3  # (NODE, vhost, name, kind, properties)
DROP_NODE = 4  # (DROP_NODE, vhost, name)
BARRIER = 5  # (BARRIER,): writes nothing; its on_commit runs after those of every earlier op
EXCHANGE = 6  # (EXCHANGE, vhost, name, type, properties)
DROP_EXCHANGE = 7  # (DROP_EXCHANGE, vhost, name): the exchange and every binding from or to it
BIND = 8  # (BIND, vhost, source, destination_kind, destination, routing_key, arguments)
UNBIND = 9  # (UNBIND, vhost, source, destination_kind, destination, routing_key, arguments)
POLICY = 10  # (POLICY, vhost, name, pattern, apply_to, definition, priority)
DROP_POLICY = 11  # (DROP_POLICY, vhost, name)
VHOST = 12  # (VHOST, name, metadata)
MOVE = 13  # (MOVE, key, seq, new_seq, expiry): a scheduled message enters its queue when due
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
        self.migrated_from: int | None = None
        self._migrate()
        self._lock = threading.Lock()

    def _migrate(self) -> None:
        """Bring the schema to :data:`SCHEMA_VERSION` (a new store is simply created)."""
        db = self._db
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            return
        old_tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if version == 0 and "messages" in old_tables:
            script = _MIGRATE_FROM_0.format(schema=_SCHEMA)
            self.migrated_from = 0
        elif version in (0, 2):
            # a new store, or version 2: every table it lacks is created, nothing else changes
            script = _SCHEMA
            if version == 2:
                self.migrated_from = 2
        else:
            raise ValueError(f"{self.path}: store schema version {version} is newer than this broker's ({SCHEMA_VERSION})")
        try:
            db.executescript(f"BEGIN IMMEDIATE;\n{script}\nPRAGMA user_version = {SCHEMA_VERSION};\nCOMMIT;")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def load(self) -> Loaded:
        """Every durable node, exchange and binding, and every stored message in (node key, seq) order.

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
                nodes = [NodeRecord(*r) for r in db.execute("SELECT vhost, name, kind, properties FROM nodes")]
                exchanges = [
                    ExchangeRecord(*r) for r in db.execute("SELECT vhost, name, type, properties FROM exchanges")
                ]
                bindings = [
                    BindingRecord(*r)
                    for r in db.execute(
                        "SELECT vhost, source, destination_kind, destination, routing_key, arguments FROM bindings"
                    )
                ]
                policies = [
                    PolicyRecord(*r)
                    for r in db.execute("SELECT vhost, name, pattern, apply_to, definition, priority FROM policies")
                ]
                vhosts = [VhostRecord(*r) for r in db.execute("SELECT name, metadata FROM vhosts")]
                rows = db.execute(
                    "SELECT node, seq, priority, delivery_count, expiry, arrival, message_id, format, data "
                    "FROM messages ORDER BY node, seq"
                ).fetchall()
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return Loaded(nodes, [StoredMessage(*r) for r in rows], exchanges, bindings, policies, vhosts)

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
                    elif kind == BARRIER:
                        pass
                    else:
                        self._flush(puts, deletes, updates)
                        self._definition(op)
                self._flush(puts, deletes, updates)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def _definition(self, op: Op) -> None:
        """Apply one change to the durable definitions (nodes, exchanges, bindings, policies, vhosts),
        or move a scheduled message to its place in its queue."""
        db = self._db
        kind = op[0]
        if kind == MOVE:
            db.execute("UPDATE messages SET seq = ?, expiry = ? WHERE node = ? AND seq = ?", (op[3], op[4], op[1], op[2]))
        elif kind == NODE:
            db.execute("INSERT OR REPLACE INTO nodes (vhost, name, kind, properties) VALUES (?, ?, ?, ?)", op[1:])
        elif kind == DROP_NODE:
            db.execute("DELETE FROM messages WHERE node = ?", (message_key(op[1], op[2]),))
            db.execute("DELETE FROM nodes WHERE vhost = ? AND name = ?", op[1:])
            db.execute("DELETE FROM bindings WHERE vhost = ? AND destination_kind = 'queue' AND destination = ?", op[1:])
        elif kind == EXCHANGE:
            db.execute("INSERT OR REPLACE INTO exchanges (vhost, name, type, properties) VALUES (?, ?, ?, ?)", op[1:])
        elif kind == DROP_EXCHANGE:
            db.execute("DELETE FROM exchanges WHERE vhost = ? AND name = ?", op[1:])
            db.execute("DELETE FROM bindings WHERE vhost = ? AND source = ?", op[1:])
            db.execute(
                "DELETE FROM bindings WHERE vhost = ? AND destination_kind = 'exchange' AND destination = ?", op[1:]
            )
        elif kind == BIND:
            db.execute(
                "INSERT OR REPLACE INTO bindings (vhost, source, destination_kind, destination, routing_key, arguments) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                op[1:],
            )
        elif kind == UNBIND:
            db.execute(
                "DELETE FROM bindings WHERE vhost = ? AND source = ? AND destination_kind = ? AND destination = ? "
                "AND routing_key = ? AND arguments = ?",
                op[1:],
            )
        elif kind == POLICY:
            db.execute(
                "INSERT OR REPLACE INTO policies (vhost, name, pattern, apply_to, definition, priority) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                op[1:],
            )
        elif kind == DROP_POLICY:
            db.execute("DELETE FROM policies WHERE vhost = ? AND name = ?", op[1:])
        elif kind == VHOST:
            db.execute("INSERT OR REPLACE INTO vhosts (name, metadata) VALUES (?, ?)", op[1:])
        else:  # pragma: no cover - a programming error
            raise ValueError(f"unknown store operation {kind!r}")

    def _flush(
        self, puts: list[tuple[Any, ...]], deletes: list[tuple[Any, ...]], updates: list[tuple[Any, ...]]
    ) -> None:
        db = self._db
        if puts:
            db.executemany(
                "INSERT OR REPLACE INTO messages "
                "(node, seq, priority, delivery_count, expiry, arrival, message_id, format, data) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
        ops = self._ops
        ops.append(op)
        if on_commit is not None:
            self._callbacks.append(on_commit)
        if len(ops) == 1:
            # The first since the committer took the last batch. With more, it is already
            # woken (or its commit loop takes them before it idles): no event calls per op.
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
