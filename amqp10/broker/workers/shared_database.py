"""The workers of a broker on the PostgreSQL store: one shared database (issue 31).

Each worker keeps its store in a schema of its own, ``amqp10_w<K>`` (:func:`worker_schema`,
through its sessions' ``search_path``), apart as the SQLite files ``amqp10.worker<K>.sqlite3``
are, so each has its own fencing epoch (:mod:`..core.store_postgres`): a restarted worker
fences its predecessor's connection, and the workers of a standby that took over fence the
old active broker's. The parent's metadata log is in the database too, in schema
``amqp10_metadata`` (:class:`PostgresMetadataLog`), where a standby on another host reads it,
and so is what each worker applied of it (:class:`PostgresAppliedMarks`): a standby's
worker goes on from where the store it takes over left off, instead of replaying changes
its store has (a queue's delete and declare again would empty it).

The parent holds the database lock of the active/standby pair
(:class:`~..core.store_postgres.DatabaseLock`) and starts its workers only once it is active
(:mod:`.supervisor`); the workers take no lock of their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import BrokerConfig
from ..core.store_postgres import (
    StoreFenced,
    connect,
    create_schemas,
    describe_dsn,
    detach_in_child,
    in_schema,
)
from .metadata import METADATA_FILE, AppliedMarks, Change, MetadataLog

__all__ = [
    "METADATA_SCHEMA",
    "PostgresAppliedMarks",
    "PostgresMetadataLog",
    "applied_marks",
    "metadata_log",
    "prepare",
    "worker_schema",
]

METADATA_SCHEMA = "amqp10_metadata"
"""The schema of the parent's metadata log."""


def worker_schema(index: int) -> str:
    """The schema of worker ``index``'s store."""
    return f"amqp10_w{index}"


def prepare(dsn: str, workers: int) -> None:
    """Create the schemas of the metadata log and of each worker's store (if need be)."""
    create_schemas(dsn, [METADATA_SCHEMA, *(worker_schema(k) for k in range(workers))])


class PostgresMetadataLog(MetadataLog):
    """The parent's metadata log in the shared database (schema :data:`METADATA_SCHEMA`).

    Fenced as the store is: opening it raises its ``epoch`` (one row, waiting for the row
    lock of the previous parent's last append, so it reads every change that one made), and
    each append and compaction first checks, under a row lock, that the epoch is still its
    own: a parent that lost the database lock appends nothing after the standby took over
    (:class:`~..core.store_postgres.StoreFenced`, which stops it)."""

    PARAM = "%s"
    BEGIN = "BEGIN"
    TYPES: Mapping[str, str] = {"int": "BIGINT", "blob": "BYTEA"}

    def __init__(self, dsn: str) -> None:
        db = _connect(dsn)
        try:
            db.execute("CREATE TABLE IF NOT EXISTS writer (epoch BIGINT NOT NULL)")
            db.execute("INSERT INTO writer (epoch) SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM writer)")
            self.epoch = int(db.execute("UPDATE writer SET epoch = epoch + 1 RETURNING epoch").fetchone()[0])
            self._open(db, f"{describe_dsn(dsn)} ({METADATA_SCHEMA})")
        except BaseException:
            db.close()
            raise

    def _begin(self) -> None:
        super()._begin()
        epoch = self.db.execute("SELECT epoch FROM writer FOR SHARE").fetchone()[0]
        if epoch != self.epoch:
            self.db.execute("ROLLBACK")
            raise StoreFenced(f"{self.location}: another broker has taken the metadata log over (epoch {epoch})")

    def append(self, vhost: str, change: Change) -> int:
        self._begin()
        try:
            seq = super().append(vhost, change)
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return seq

    def close_in_child(self) -> None:
        detach_in_child(self.db)

    def marks(self, directory: Path) -> AppliedMarks:
        """The workers' marks: the table beside the log, on its connection (the parent's)."""
        return PostgresAppliedMarks(self.db)


class PostgresAppliedMarks(AppliedMarks):
    """What each worker applied of the metadata log: a table beside it (one row a worker)."""

    def __init__(self, db: Any) -> None:
        """``db``: a connection in :data:`METADATA_SCHEMA` that commits each statement."""
        self.db = db
        db.execute("CREATE TABLE IF NOT EXISTS applied (worker BIGINT PRIMARY KEY, seq BIGINT NOT NULL)")

    def read(self, worker: int) -> int:
        row = self.db.execute("SELECT seq FROM applied WHERE worker = %s", (worker,)).fetchone()
        return 0 if row is None else int(row[0])

    def write(self, worker: int, seq: int) -> None:
        self.db.execute(
            "INSERT INTO applied (worker, seq) VALUES (%s, %s) ON CONFLICT (worker) DO UPDATE SET seq = EXCLUDED.seq",
            (worker, seq),
        )


def _connect(dsn: str) -> Any:
    return connect(in_schema(dsn, METADATA_SCHEMA))


def applied_marks(config: BrokerConfig, directory: Path) -> AppliedMarks:
    """Where a worker keeps what it applied: a file in ``directory``, or (PostgreSQL) the
    shared database (a connection of its own, for the worker's life)."""
    store = config.store
    if store.backend == "postgresql":
        assert store.dsn is not None  # the config's validator says so
        return PostgresAppliedMarks(_connect(store.dsn))
    return AppliedMarks(directory)


def metadata_log(config: BrokerConfig) -> MetadataLog:
    """The parent's metadata log: ``metadata.sqlite3`` beside the store files, or (PostgreSQL)
    in the shared database."""
    store = config.store
    if store.backend == "postgresql":
        assert store.dsn is not None  # the config's validator says so
        return PostgresMetadataLog(store.dsn)
    return MetadataLog(store.path.with_name(METADATA_FILE))
