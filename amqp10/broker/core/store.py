"""The broker's durable store: SQL written once (:class:`SqlStore`) for two backends,
SQLite in WAL mode (:class:`Store`) and PostgreSQL (:mod:`.store_postgres`, for
active/standby failover), written with grouped commits.

Every durable message is in the database before the broker accepts it. Writes
are collected by :class:`~.committer.GroupCommitter` and applied in one transaction per
batch from a worker thread, so a burst of N messages costs one fsync, not N.
On restart, :meth:`Store.load` gives back every queue's messages in order, with
the delivery-count of those that were in flight when the broker stopped raised
by one (their delivery may have been attempted).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from .store_records import (
    DEFERRED,
    HELD_DEAD_LETTER,
    BindingRecord,
    ExchangeRecord,
    GroupStateRecord,
    Loaded,
    NodeRecord,
    PolicyRecord,
    PreparedPublish,
    PreparedRecord,
    StoredMessage,
    VhostRecord,
)

log = logging.getLogger("amqp10.broker")

__all__ = [
    "PAGE",
    "UNPAGE",
    "message_key",
    "split_message_key",
    "DEFERRED",
    "HELD_DEAD_LETTER",
    "NUMBER_COLUMN",
    "servicebus_limit_as_returns",
    "BindingRecord", "ExchangeRecord", "GroupStateRecord", "Loaded", "NodeRecord", "PolicyRecord", "PreparedPublish", "PreparedRecord", "SqlStore", "Store",
    "StoredMessage", "VhostRecord"]

SCHEMA_VERSION = 8
"""The version of the current schema (SQLite: ``PRAGMA user_version``). Version 0 is
the schema of the brokers before virtual hosts (nodes and messages keyed by name
alone, every message a 1.0 message); version 2 has no policies or vhosts tables;
version 3 no group_states table, and no deferred messages (``in_flight`` = 2); version 4
no ``messages.number`` column; version 5 no prepared transactions (the ``prepared``,
``prepared_publishes`` and ``prepared_taken`` tables); up to version 6 a Service Bus
queue's stored ``x-delivery-limit`` is its deliveries allowed, where it now counts
returns, as RabbitMQ's does (:func:`servicebus_limit_as_returns`); up to version 7 no
dead letters kept aside (``in_flight`` 3 to 6, :data:`HELD_DEAD_LETTER`: a broker of version 7
would make them ready). :meth:`SqlStore._migrate` migrates each in place when a store is opened."""

_SERVICEBUS_DEAD_LETTERS = "/$deadletterqueue"
"""The suffix of a Service Bus queue's dead-letter queue (how version 6 and older stored it)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    vhost TEXT NOT NULL DEFAULT '/',
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    properties TEXT NOT NULL DEFAULT '{{}}',
    PRIMARY KEY (vhost, name)
);
CREATE TABLE IF NOT EXISTS messages (
    node TEXT NOT NULL,
    seq {int} NOT NULL,
    priority {int} NOT NULL,
    delivery_count {int} NOT NULL DEFAULT 0,
    in_flight {int} NOT NULL DEFAULT 0,
    expiry {real},
    arrival {real} NOT NULL DEFAULT 0,
    message_id TEXT,
    format TEXT NOT NULL DEFAULT 'amqp1',
    data {blob} NOT NULL,
    number {int},
    PRIMARY KEY (node, seq)
){no_rowid};
CREATE TABLE IF NOT EXISTS exchanges (
    vhost TEXT NOT NULL,
    name TEXT NOT NULL,
    type TEXT NOT NULL,
    properties TEXT NOT NULL DEFAULT '{{}}',
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
    priority {int} NOT NULL,
    PRIMARY KEY (vhost, name)
);
CREATE TABLE IF NOT EXISTS vhosts (
    name TEXT PRIMARY KEY,
    metadata TEXT NOT NULL DEFAULT '{{}}'
);
CREATE TABLE IF NOT EXISTS group_states (
    node TEXT NOT NULL,
    group_id TEXT NOT NULL,
    state {blob} NOT NULL,
    PRIMARY KEY (node, group_id)
);
CREATE TABLE IF NOT EXISTS prepared (
    txn {blob} NOT NULL PRIMARY KEY,
    owner TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS prepared_publishes (
    txn {blob} NOT NULL,
    n {int} NOT NULL,
    vhost TEXT NOT NULL,
    exchange TEXT NOT NULL,
    routing_key TEXT,
    priority {int} NOT NULL,
    durable {int} NOT NULL,
    expiry {real},
    arrival {real} NOT NULL,
    message_id TEXT,
    format TEXT NOT NULL,
    data {blob} NOT NULL,
    PRIMARY KEY (txn, n)
){no_rowid};
CREATE TABLE IF NOT EXISTS prepared_taken (
    txn {blob} NOT NULL,
    node TEXT NOT NULL,
    seq {int} NOT NULL,
    PRIMARY KEY (txn, node, seq)
){no_rowid}
"""
"""Every table, with the column types as placeholders (``SqlStore.TYPES``)."""

_PAGED_SCHEMA = """
CREATE TEMP TABLE IF NOT EXISTS paged (
    node TEXT NOT NULL,
    seq {int} NOT NULL,
    delivery_count {int} NOT NULL DEFAULT 0,
    expiry {real},
    arrival {real} NOT NULL DEFAULT 0,
    message_id TEXT,
    format TEXT NOT NULL,
    data {blob} NOT NULL,
    PRIMARY KEY (node, seq)
){no_rowid}
"""
"""Where non-durable messages' bodies go when their queue is over its memory budget: a
temporary table, private to the store's connection and gone with it, so a restart never
brings a non-durable message back (and nothing in it is fsynced)."""

# SQLite, version 0 -> 3: the nodes move into the default virtual host (a new table, the
# rows copied); the messages keep their rows (the default host's message keys are the node
# names) and gain the format column (every old message is a 1.0 message). In the one
# transaction of the migration, so an interrupted one leaves the old store as it was.
_MIGRATE_FROM_0_BEFORE = [
    "ALTER TABLE nodes RENAME TO nodes_v0",
    "ALTER TABLE messages ADD COLUMN format TEXT NOT NULL DEFAULT 'amqp1'",
]
_MIGRATE_FROM_0_AFTER = [
    "INSERT INTO nodes (vhost, name, kind, properties) SELECT '/', name, kind, properties FROM nodes_v0",
    "DROP TABLE nodes_v0",
]
# Version 2 -> 3: new tables only (runtime policies, declared virtual hosts); 3 -> 4: the
# group_states table (the in_flight value DEFERRED is new, and no version-3 row has it);
# 4 -> 5: messages.number, the sequence number a scheduled message keeps when it is due
# and moves to a new seq (NULL: the same as seq, as in every older row); 5 -> 6: the
# tables of prepared transactions only.
NUMBER_COLUMN = "ALTER TABLE messages ADD COLUMN number {int}"


def servicebus_limit_as_returns(name: str, properties: str) -> str | None:
    """A queue's stored properties with its ``x-delivery-limit`` one lower, if it is a
    Service Bus queue as versions 6 and older stored it (dead-lettering through the
    default exchange to ``NAME/$deadletterqueue``, ``x-delivery-limit`` its max delivery
    count): that limit counted deliveries, and now counts returns (None: not one).
    Version 6 -> 7."""
    try:
        props = json.loads(properties)
    except ValueError:
        return None
    args = props.get("arguments") if isinstance(props, dict) else None
    if not isinstance(args, dict):
        return None
    limit = args.get("x-delivery-limit")
    if (
        args.get("x-dead-letter-exchange") != ""
        or args.get("x-dead-letter-routing-key") != name + _SERVICEBUS_DEAD_LETTERS
        or isinstance(limit, bool)
        or not isinstance(limit, int)
        or limit < 1
    ):
        return None
    args["x-delivery-limit"] = limit - 1
    return json.dumps(props, sort_keys=True)


def message_key(vhost: str, node: str) -> str:
    """The ``messages.node`` of a node's messages: its name in the default virtual host,
    else the host's name and the node's joined by a unit separator (a character no
    address holds). Messages are keyed by one short text: a key of two costs every write."""
    return node if vhost == "/" else f"{vhost}\x1f{node}"


def split_message_key(key: str) -> tuple[str, str]:
    """(vhost, node) of a :func:`message_key`."""
    vhost, sep, node = key.partition("\x1f")
    return (vhost, node) if sep else ("/", key)


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
PAGE = 14  # (PAGE, key, seq, delivery_count, expiry, arrival, message_id, format, data): a
# non-durable message's body paged out (core/paging.py), into a table that dies with the connection
UNPAGE = 15  # (UNPAGE, key, seq): a paged-out non-durable message is back in memory (seq None: all of the node's)
GROUP_STATE = 16  # (GROUP_STATE, key, group, state): a queue's message group's state (state None: cleared)
PREPARE = 17  # (PREPARE, txn, owner, publishes, taken): a transaction prepared for a two-phase commit
# (core/prepared.py): its publishes as rows (vhost, exchange, routing_key, priority, durable, expiry,
# arrival, message_id, format, data), the messages it took as (key, seq); replaces a record of txn
FORGET_PREPARED = 18  # (FORGET_PREPARED, txn): the prepared transaction was committed or rolled back
DROP_VHOST = 19  # (DROP_VHOST, name): the host's record (its nodes, exchanges and policies dropped before)
Op = tuple[Any, ...]


class SqlStore:
    """What every SQL backend of the store shares: the schema, the statements, recovery
    (:meth:`load`), batched writes (:meth:`apply`) and the schema version check.

    A backend (:class:`Store`: SQLite; :class:`~amqp10.broker.core.store_postgres.PostgresStore`)
    gives its spellings as class attributes and opens ``self._cur``, a DB-API cursor whose
    transactions are begun and ended by statements (autocommit mode). Synchronous: call
    from one thread at a time (the group committer's worker thread).
    """

    PARAM = "?"
    """The engine's query parameter marker (the statements below are written with ``?``)."""
    BEGIN = "BEGIN"
    """The statement that opens a write transaction."""
    TYPES: ClassVar[Mapping[str, str]] = {"int": "INTEGER", "real": "REAL", "blob": "BLOB", "no_rowid": ""}
    """The column types (and table suffix) the schema is written with."""

    def size_bytes(self) -> int | None:
        """What the store takes on disk, for metrics; None where the backend cannot say
        without a query (a database server's size is its own to report)."""
        return None

    def out_of_space(self, exc: BaseException) -> bool:
        """Whether ``exc`` (from :meth:`apply`) says the store has no room left: the
        write may succeed later, once space returns (the committer retries it)."""
        return isinstance(exc, OSError) and exc.errno == errno.ENOSPC

    _cur: Any
    _sql: ClassVar[_Statements]

    def __init__(self, location: str) -> None:
        self.location = location
        """Where the store is, for messages (a file, a database; never a password)."""
        self.migrated_from: int | None = None
        """The schema version this store was migrated from when it was opened (None: it was not)."""
        self._lock = threading.Lock()
        self.puts_skipped = 0
        """Puts never written, in batches committed: their message's delete came in the same
        batch (:meth:`apply`)."""
        self._paged_table = False  # the temporary table of paged-out non-durable messages exists

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls._sql = _Statements(cls)

    # -- what each backend provides -------------------------------------------------------
    def _schema_version(self) -> int | None:
        """The store's schema version; None for an empty database."""
        raise NotImplementedError

    def _migration(self, version: int | None) -> list[str]:
        """The statements that bring a store of ``version`` (None: empty) to
        :data:`SCHEMA_VERSION`, the version mark included."""
        raise NotImplementedError

    def _begin(self) -> None:
        """Open a write transaction (a backend may check there that it still may write)."""
        self._cur.execute(self.BEGIN)

    def close(self) -> None:
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------------
    def schema(self) -> list[str]:
        """The statements creating every table the store lacks, in this engine's types."""
        return [s.strip() for s in _SCHEMA.format(**self.TYPES).split(";") if s.strip()]

    def _migrate(self) -> None:
        """Bring the schema to :data:`SCHEMA_VERSION` in one transaction (a new store is
        simply created; one newer than this broker is refused, never touched)."""
        version = self._schema_version()
        if version == SCHEMA_VERSION:
            return
        if version is not None and version > SCHEMA_VERSION:
            raise ValueError(
                f"{self.location}: store schema version {version} is newer than this broker's ({SCHEMA_VERSION})"
            )
        statements = self._migration(version)

        def migrate() -> None:
            for statement in statements:
                self._cur.execute(statement)
            if version is not None and version < 7:
                self._limits_as_returns()

        self._transaction(migrate)
        self.migrated_from = version

    def _limits_as_returns(self) -> None:
        """Version 6 -> 7: each stored Service Bus queue's ``x-delivery-limit`` counts
        returns (:func:`servicebus_limit_as_returns`), in the migration's transaction."""
        cur = self._cur
        cur.execute("SELECT vhost, name, properties FROM nodes WHERE kind = 'queue'")
        changed = [
            (fixed, vhost, name)
            for vhost, name, props in cur.fetchall()
            if (fixed := servicebus_limit_as_returns(name, props)) is not None
        ]
        update = "UPDATE nodes SET properties = ? WHERE vhost = ? AND name = ?".replace("?", self.PARAM)
        for row in changed:
            cur.execute(update, row)

    def _transaction(self, work: Callable[[], object]) -> None:
        """Run ``work`` in one write transaction: all of it is committed, or none."""
        with self._lock:
            self._begin()
            try:
                work()
                self._cur.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(Exception):  # a broken connection: the error that broke it
                    self._cur.execute("ROLLBACK")
                raise

    def load(self, *, messages: bool = True) -> Loaded:
        """Every durable node, exchange and binding, and every stored message in (node key, seq) order
        (``messages`` False: none; :meth:`stored_messages` reads them a batch at a time).

        Messages marked in flight come back with delivery-count + 1, and the
        change is written back so a second crash does not lose the count; deferred
        ones (:data:`DEFERRED`) and dead letters kept aside (:data:`HELD_DEAD_LETTER`)
        come back as they were, with their mark (``StoredMessage.in_flight``).
        """
        sql = self._sql
        out: list[list[tuple[Any, ...]]] = []
        queries = sql.load if messages else sql.load[:-1]

        def read() -> None:
            cur = self._cur
            cur.execute(sql.recover_in_flight)
            for query in queries:
                cur.execute(query)
                out.append(cur.fetchall())

        self._transaction(read)
        if not messages:
            out.append([])
        nodes, exchanges, bindings, policies, vhosts, states, prepared, publishes, taken, rows = out
        return Loaded(
            [NodeRecord(*r) for r in nodes],
            [StoredMessage(*r) for r in rows],
            [ExchangeRecord(*r) for r in exchanges],
            [BindingRecord(*r) for r in bindings],
            [PolicyRecord(*r) for r in policies],
            [VhostRecord(*r) for r in vhosts],
            [GroupStateRecord(r[0], r[1], bytes(r[2])) for r in states],
            _prepared_records(prepared, publishes, taken),
        )

    def stored_messages(self, batch: int = 10_000) -> Iterator[StoredMessage]:
        """Every stored message in (node key, seq) order, read ``batch`` rows at a time: what
        recovery restores, so that only a batch of bodies is in memory at once (the queues
        page out what is over their budget). Call after :meth:`load` and before any write."""
        with self._lock:
            cur = self._cur
            cur.execute(self._sql.load[-1])
            while rows := cur.fetchmany(batch):
                for r in rows:
                    yield StoredMessage(*r)

    def apply(self, ops: Iterable[Op]) -> None:
        """Apply a batch of operations in one transaction (one fsync).

        A put whose delete is in the same batch is not written at all (with the updates
        between them): a message consumed before its put was committed. The delete is
        still run (a row of that key may be there from before), a range statement with
        its neighbours' deletes. Counted in :attr:`puts_skipped`."""
        # (key, seq) -> row, in order (a put of a key already pending replaces the row,
        # as the upsert would)
        puts: dict[tuple[Any, Any], tuple[Any, ...]] = {}
        deletes: list[tuple[Any, ...]] = []
        # (key, seq) -> row: an update replaces an earlier one of its key (they set absolute
        # values), and a delete drops it (a consumer's settlement after its delivery's
        # in-flight mark in one batch: the row goes, so the mark needs no write)
        updates: dict[tuple[Any, Any], tuple[Any, ...]] = {}
        # A flush writes its puts, then its updates, then its deletes, which is the order
        # of the operations whenever a put does not follow an update or delete of its key:
        # an update after a put of its key comes after it, a delete after anything of its
        # key comes after it, and operations on different keys commute. So only such a put
        # (rare: keys are not reused) flushes first. ``touched``: keys of pending updates
        # and deletes. Fewer, bigger statements: one of each kind per batch.
        touched: set[tuple[Any, Any]] = set()
        # PAGE and UNPAGE rows (their own table): a batch writes its pages, then its unpages,
        # which is their order (a seq is paged out once, and back in after); a node's
        # UNPAGE of everything flushes first and runs in its place
        pages: list[tuple[Any, ...]] = []
        unpages: list[tuple[Any, ...]] = []
        sql = self._sql

        def flush_pages() -> None:
            cur = self._cur
            if not self._paged_table:
                cur.execute(_PAGED_SCHEMA.format(**self.TYPES))
                self._paged_table = True
            if pages:
                cur.executemany(sql.page, pages)
                pages.clear()
            if unpages:
                cur.executemany(sql.unpage, unpages)
                unpages.clear()

        def flush() -> None:
            self._flush(puts, deletes, updates)
            touched.clear()
            if pages or unpages:
                flush_pages()

        skipped = 0

        def write() -> None:
            nonlocal skipped
            for op in ops:
                kind = op[0]
                if kind == PUT:
                    key = (op[1], op[2])
                    if touched and key in touched:
                        flush()
                    puts[key] = op[1:]
                elif kind == DELETE:
                    deletes.append(op[1:])
                    key = (op[1], op[2])
                    updates.pop(key, None)
                    if puts and puts.pop(key, None) is not None:
                        skipped += 1
                    touched.add(key)
                elif kind == UPDATE:
                    key = (op[1], op[2])
                    updates[key] = (op[3], op[4], op[1], op[2])
                    touched.add(key)
                elif kind == BARRIER:
                    pass
                elif kind == PAGE:
                    pages.append(op[1:])
                elif kind == UNPAGE:
                    if op[2] is None:  # every paged message of the node
                        flush_pages()
                        self._cur.execute(sql.unpage_all, op[1:2])
                    else:
                        unpages.append(op[1:])
                else:
                    flush()
                    self._definition(op)
            flush()

        self._transaction(write)
        self.puts_skipped += skipped

    def _definition(self, op: Op) -> None:
        """Apply one change to the durable definitions (nodes, exchanges, bindings, policies, vhosts,
        group states), or move a scheduled message to its place in its queue."""
        kind = op[0]
        if kind in (PREPARE, FORGET_PREPARED):
            self._prepared(op)
            return
        statements = self._sql.definitions.get(kind)
        if kind == DROP_NODE:
            key = message_key(op[1], op[2])
            self._cur.execute(self._sql.drop_node_messages, (key,))
            self._cur.execute(self._sql.drop_group_states, (key,))
        elif kind == GROUP_STATE and op[3] is None:
            op, statements = op[:3], [self._sql.clear_group_state]
        elif kind == MOVE:
            op = (MOVE, op[3], op[4], op[1], op[2])
        if statements is None:  # pragma: no cover - a programming error
            raise ValueError(f"unknown store operation {kind!r}")
        for sql in statements:
            self._cur.execute(sql, op[1:])

    def _prepared(self, op: Op) -> None:
        """Record a prepared transaction (any older record of its id replaced), or remove one."""
        sql, cur, txn = self._sql, self._cur, op[1]
        for statement in sql.forget_prepared:
            cur.execute(statement, (txn,))
        if op[0] == PREPARE:
            _, _, owner, publishes, taken = op
            cur.execute(sql.prepare, (txn, owner))
            cur.executemany(sql.prepare_publish, [(txn, n, *row) for n, row in enumerate(publishes)])
            cur.executemany(sql.prepare_taken, [(txn, key, seq) for key, seq in taken])

    def _flush(
        self,
        puts: dict[tuple[Any, Any], tuple[Any, ...]],
        deletes: list[tuple[Any, ...]],
        updates: dict[tuple[Any, Any], tuple[Any, ...]],
    ) -> None:
        if puts:
            self._write_rows("put", list(puts.values()))
            puts.clear()
        if updates:
            self._write_rows("update", list(updates.values()))
            updates.clear()
        if deletes:
            self._write_rows("delete", deletes)
            deletes.clear()

    def _write_rows(self, statement: str, rows: list[tuple[Any, ...]]) -> None:
        """Run the message statement ``put``, ``update`` or ``delete`` (``_Statements``) for each
        row, in order (a backend may send them at once, to the same effect). Updates or deletes
        of one node's consecutive seqs (same values) go as one ``seq BETWEEN`` statement: a
        batch's hundreds of deletes (consumers settle in about seq order) are a few statements."""
        cur = self._cur
        if statement == "put" or len(rows) < 2:
            cur.executemany(getattr(self._sql, statement), rows)
            return
        singles: list[tuple[Any, ...]] = []
        spans: list[tuple[Any, ...]] = []
        first, last = rows[0], rows[0][-1]
        for row in (*rows[1:], None):
            if row is not None and row[-1] == last + 1 and row[:-1] == first[:-1]:
                last = row[-1]
                continue
            if last == first[-1]:
                singles.append(first)
            else:
                spans.append((*first, last))
            if row is not None:
                first, last = row, row[-1]
        cur.executemany(getattr(self._sql, statement), singles)  # (none: nothing is run)
        cur.executemany(getattr(self._sql, statement + "_run"), spans)

    def read_paged(self, key: str, first: int, last: int, *, durable: bool, transient: bool) -> list[tuple[Any, ...]]:
        """The stored messages of node ``key`` with ``first <= seq <= last``, in seq order, as
        ``(seq, delivery_count, expiry, arrival, message_id, format, data)``: from the durable
        messages if ``durable``, from the paged-out non-durable ones if ``transient``.
        What a queue reads back, a run at a time, as its consumers reach its paged-out part
        (called from the event loop: a short read, serialised with the committer's writes)."""
        sql = self._sql
        rows: list[tuple[Any, ...]] = []
        with self._lock:
            cur = self._cur
            if durable:
                cur.execute(sql.read_messages, (key, first, last))
                rows.extend(cur.fetchall())
            if transient and self._paged_table:
                cur.execute(sql.read_paged, (key, first, last))
                rows.extend(cur.fetchall())
        if durable and transient:
            rows.sort(key=_first)
        return rows


def _first(row: tuple[Any, ...]) -> Any:
    return row[0]


def _prepared_records(
    prepared: list[tuple[Any, ...]], publishes: list[tuple[Any, ...]], taken: list[tuple[Any, ...]]
) -> list[PreparedRecord]:
    """The prepared transactions of the rows of their three tables (publishes in order)."""
    records = {bytes(txn): PreparedRecord(bytes(txn), owner, [], []) for txn, owner in prepared}
    for txn, vhost, exchange, key, priority, durable, expiry, arrival, message_id, fmt, data in publishes:
        rec = records.get(bytes(txn))
        if rec is not None:
            rec.publishes.append(
                PreparedPublish(vhost, exchange, key, priority, bool(durable), expiry, arrival, message_id, fmt, bytes(data))
            )
    for txn, key, seq in taken:
        rec = records.get(bytes(txn))
        if rec is not None:
            rec.taken.append((key, seq))
    return list(records.values())


_MESSAGE_COLUMNS = ("node", "seq", "priority", "delivery_count", "expiry", "arrival", "message_id", "format", "data")
_KEYS = {
    "nodes": ("vhost", "name"),
    "messages": ("node", "seq"),
    "exchanges": ("vhost", "name"),
    "bindings": ("vhost", "source", "destination_kind", "destination", "routing_key", "arguments"),
    "policies": ("vhost", "name"),
    "vhosts": ("name",),
    "group_states": ("node", "group_id"),
}


class _Statements:
    """Every statement of the store, written once and spelled for one backend."""

    def __init__(self, backend: type[SqlStore]) -> None:
        def q(text: str) -> str:
            return text.replace("?", backend.PARAM)

        def upsert(table: str, *columns: str, reset: str = "") -> str:
            """Insert a row, or replace the one with the same key (``ON CONFLICT``, which
            SQLite and PostgreSQL both spell this way); ``reset``: columns set back too."""
            key = _KEYS[table]
            values = ", ".join("?" * len(columns))
            rest = [f"{c} = excluded.{c}" for c in columns if c not in key]
            if reset:
                rest.append(reset)
            action = ("DO UPDATE SET " + ", ".join(rest)) if rest else "DO NOTHING"
            return q(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({values}) ON CONFLICT ({', '.join(key)}) {action}")

        self.put = upsert("messages", *_MESSAGE_COLUMNS, reset="in_flight = 0")
        self.put_conflict = self.put[self.put.index(" ON CONFLICT") :]
        """The put's ``ON CONFLICT`` clause (for a backend's own spelling of a batch of puts)."""
        self.update = q("UPDATE messages SET delivery_count = ?, in_flight = ? WHERE node = ? AND seq = ?")
        self.delete = q("DELETE FROM messages WHERE node = ? AND seq = ?")
        self.update_run = q("UPDATE messages SET delivery_count = ?, in_flight = ? WHERE node = ? AND seq BETWEEN ? AND ?")
        self.delete_run = q("DELETE FROM messages WHERE node = ? AND seq BETWEEN ? AND ?")
        self.drop_node_messages = q("DELETE FROM messages WHERE node = ?")
        self.drop_group_states = q("DELETE FROM group_states WHERE node = ?")
        self.clear_group_state = q("DELETE FROM group_states WHERE node = ? AND group_id = ?")
        paged_columns = "seq, delivery_count, expiry, arrival, message_id, format, data"
        self.page = q(
            f"INSERT INTO paged (node, {paged_columns}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (node, seq) DO UPDATE SET data = excluded.data"
        )
        self.unpage = q("DELETE FROM paged WHERE node = ? AND seq = ?")
        self.unpage_all = q("DELETE FROM paged WHERE node = ?")
        self.read_messages = q(f"SELECT {paged_columns} FROM messages WHERE node = ? AND seq BETWEEN ? AND ? ORDER BY seq")
        self.read_paged = q(f"SELECT {paged_columns} FROM paged WHERE node = ? AND seq BETWEEN ? AND ? ORDER BY seq")
        self.recover_in_flight = (
            "UPDATE messages SET delivery_count = delivery_count + 1, in_flight = 0 WHERE in_flight = 1"
        )
        self.load = [  # in the order of Loaded's fields as load() reads them
            "SELECT vhost, name, kind, properties FROM nodes",
            "SELECT vhost, name, type, properties FROM exchanges",
            "SELECT vhost, source, destination_kind, destination, routing_key, arguments FROM bindings",
            "SELECT vhost, name, pattern, apply_to, definition, priority FROM policies",
            "SELECT name, metadata FROM vhosts",
            "SELECT node, group_id, state FROM group_states",
            "SELECT txn, owner FROM prepared",
            "SELECT txn, vhost, exchange, routing_key, priority, durable, expiry, arrival, message_id, format, data "
            "FROM prepared_publishes ORDER BY txn, n",
            "SELECT txn, node, seq FROM prepared_taken",
            f"SELECT {', '.join(_MESSAGE_COLUMNS)}, in_flight, number FROM messages ORDER BY node, seq",
        ]
        self.prepare = q("INSERT INTO prepared (txn, owner) VALUES (?, ?)")
        self.prepare_publish = q(
            "INSERT INTO prepared_publishes (txn, n, vhost, exchange, routing_key, priority, durable, expiry, "
            "arrival, message_id, format, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        self.prepare_taken = q("INSERT INTO prepared_taken (txn, node, seq) VALUES (?, ?, ?)")
        self.forget_prepared = [
            q(f"DELETE FROM {table} WHERE txn = ?") for table in ("prepared", "prepared_publishes", "prepared_taken")
        ]
        drop_bindings_to = "DELETE FROM bindings WHERE vhost = ? AND destination_kind = '{}' AND destination = ?"
        self.definitions: dict[int, list[str]] = {
            # (the old seq is the message's number for life, unless it already has one)
            MOVE: [q("UPDATE messages SET number = COALESCE(number, seq), seq = ?, expiry = ? WHERE node = ? AND seq = ?")],
            NODE: [upsert("nodes", "vhost", "name", "kind", "properties")],
            DROP_NODE: [q("DELETE FROM nodes WHERE vhost = ? AND name = ?"), q(drop_bindings_to.format("queue"))],
            EXCHANGE: [upsert("exchanges", "vhost", "name", "type", "properties")],
            DROP_EXCHANGE: [
                q("DELETE FROM exchanges WHERE vhost = ? AND name = ?"),
                q("DELETE FROM bindings WHERE vhost = ? AND source = ?"),
                q(drop_bindings_to.format("exchange")),
            ],
            BIND: [upsert("bindings", *_KEYS["bindings"])],
            UNBIND: [
                q(
                    "DELETE FROM bindings WHERE vhost = ? AND source = ? AND destination_kind = ? "
                    "AND destination = ? AND routing_key = ? AND arguments = ?"
                )
            ],
            POLICY: [upsert("policies", "vhost", "name", "pattern", "apply_to", "definition", "priority")],
            DROP_POLICY: [q("DELETE FROM policies WHERE vhost = ? AND name = ?")],
            VHOST: [upsert("vhosts", "name", "metadata")],
            DROP_VHOST: [q("DELETE FROM vhosts WHERE name = ?")],
            GROUP_STATE: [upsert("group_states", "node", "group_id", "state")],
        }


class Store(SqlStore):
    """The embedded SQLite store: one file, in WAL mode."""

    BEGIN = "BEGIN IMMEDIATE"
    TYPES: ClassVar[Mapping[str, str]] = {"int": "INTEGER", "real": "REAL", "blob": "BLOB", "no_rowid": " WITHOUT ROWID"}

    def __init__(self, path: Path | str, *, synchronous: str = "FULL") -> None:
        super().__init__(str(path))
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            self._cur = self._db.cursor()
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise self._unreadable(exc) from exc
        except BaseException:
            self._db.close()
            raise

    def out_of_space(self, exc: BaseException) -> bool:
        full = isinstance(exc, sqlite3.DatabaseError) and getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
        return full or super().out_of_space(exc)

    def load(self, *, messages: bool = True) -> Loaded:
        try:
            return super().load(messages=messages)
        except sqlite3.DatabaseError as exc:
            raise self._unreadable(exc) from exc

    def stored_messages(self, batch: int = 10_000) -> Iterator[StoredMessage]:
        try:
            yield from super().stored_messages(batch)
        except sqlite3.DatabaseError as exc:
            raise self._unreadable(exc) from exc

    def _unreadable(self, exc: sqlite3.DatabaseError) -> ValueError:
        """The refusal to start on a file SQLite cannot read (not a database, a torn page):
        the broker never starts empty over, or beside, messages it could not recover."""
        return ValueError(
            f"{self.location}: the store cannot be read ({exc}); refusing to start rather than lose "
            "what it holds: restore the file from a backup, or move it aside to start empty"
        )

    def size_bytes(self) -> int | None:
        """The database file and its write-ahead log."""
        total = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(OSError):
                total += os.stat(f"{self.path}{suffix}").st_size
        return total

    def _schema_version(self) -> int | None:
        version: int = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            return 0 if "messages" in tables else None
        return version

    def _migration(self, version: int | None) -> list[str]:
        # version 0 -> 4: the nodes move into the default virtual host; versions 2, 3 -> 4 (and
        # an empty file): every table it lacks is created, nothing else changes.
        schema = self.schema()
        if version == 0:
            schema = _MIGRATE_FROM_0_BEFORE + schema + _MIGRATE_FROM_0_AFTER
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(messages)")}
        if version is not None and "number" not in columns:
            schema = [NUMBER_COLUMN.format(**self.TYPES), *schema]
        return [*schema, f"PRAGMA user_version = {SCHEMA_VERSION}"]

    def close(self) -> None:
        with self._lock:
            self._db.close()
