"""The workers of a broker on the PostgreSQL store: one shared database (issue 31).

Each worker keeps its store in a schema of its own, ``amqp10_w<K>`` (:func:`worker_schema`,
through its sessions' ``search_path``), apart as the SQLite files ``amqp10.worker<K>.sqlite3``
are, so each has its own fencing epoch (:mod:`..core.store_postgres`): a restarted worker
fences its predecessor's connection, and the workers of a standby that took over fence the
old active broker's. The parent's metadata log is in the database too, in schema
``amqp10_metadata`` (:class:`PostgresMetadataLog`), where a standby on another host reads it.

The parent holds the database lock of the active/standby pair
(:class:`~..core.store_postgres.DatabaseLock`) and starts its workers only once it is active
(:mod:`.supervisor`); the workers take no lock of their own.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..config import BrokerConfig
from ..core.store_postgres import create_schemas, describe_dsn, detach_in_child, in_schema
from .metadata import METADATA_FILE, MetadataLog

__all__ = ["METADATA_SCHEMA", "PostgresMetadataLog", "metadata_log", "prepare", "worker_schema"]

METADATA_SCHEMA = "amqp10_metadata"
"""The schema of the parent's metadata log."""


def worker_schema(index: int) -> str:
    """The schema of worker ``index``'s store."""
    return f"amqp10_w{index}"


def prepare(dsn: str, workers: int) -> None:
    """Create the schemas of the metadata log and of each worker's store (if need be)."""
    create_schemas(dsn, [METADATA_SCHEMA, *(worker_schema(k) for k in range(workers))])


class PostgresMetadataLog(MetadataLog):
    """The parent's metadata log in the shared database (schema :data:`METADATA_SCHEMA`)."""

    PARAM = "%s"
    BEGIN = "BEGIN"
    TYPES: Mapping[str, str] = {"int": "BIGINT", "blob": "BYTEA"}

    def __init__(self, dsn: str) -> None:
        import psycopg

        db = psycopg.connect(in_schema(dsn, METADATA_SCHEMA), autocommit=True, connect_timeout=10)
        try:
            self._open(db, f"{describe_dsn(dsn)} ({METADATA_SCHEMA})")
        except BaseException:
            db.close()
            raise

    def close_in_child(self) -> None:
        detach_in_child(self.db)


def metadata_log(config: BrokerConfig) -> MetadataLog:
    """The parent's metadata log: ``metadata.sqlite3`` beside the store files, or (PostgreSQL)
    in the shared database."""
    store = config.store
    if store.backend == "postgresql":
        assert store.dsn is not None  # the config's validator says so
        return PostgresMetadataLog(store.dsn)
    return MetadataLog(store.path.with_name(METADATA_FILE))
