"""The store on PostgreSQL, and the database lock that makes one broker of a pair active.

Active/passive failover in the manner of ActiveMQ's JDBC master/slave: two brokers
point at one database; the one holding the lock serves, the other waits for it.

- :class:`DatabaseLock` is a session-level advisory lock (``pg_try_advisory_lock``) held
  on a connection of its own. A standby tries it every ``lock_retry_seconds`` and only
  then opens the store, recovers and binds its listeners. The lock lives as long as
  its session: when the active broker dies, PostgreSQL ends the session and the lock
  is free. A lock session that stays silent for ``lock_session_timeout_seconds`` is
  ended by the server (``idle_session_timeout``), so an active broker cut off from the
  database (or frozen) loses the lock in bounded time. The active broker checks its
  session from a thread at a quarter of that (so a busy event loop does not starve it),
  with ``tcp_user_timeout`` bounding a check the network does not answer, and stops
  serving when a check fails (:meth:`DatabaseLock.watch`).
- Losing the lock does not by itself stop the active broker's *data* connection, which
  could otherwise go on committing while the standby has taken over. So the store is
  fenced as well: opening a :class:`PostgresStore` raises the store's ``epoch`` (one
  row), and every write transaction first reads the epoch ``FOR SHARE`` and fails unless
  it is still its own. The new writer's raise waits for the row lock that the old
  writer's last transaction holds, so recovery reads everything the old writer
  committed, and nothing the old writer tries later commits (nor is confirmed).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import anyio
import anyio.to_thread

from .store import NUMBER_COLUMN, SCHEMA_VERSION, SqlStore

__all__ = [
    "LOCK_KEY",
    "DatabaseLock",
    "PostgresStore",
    "StoreFenced",
    "connect",
    "create_schemas",
    "describe_dsn",
    "detach_in_child",
    "in_schema",
]

log = logging.getLogger("amqp10.broker")

LOCK_KEY = 0x616D717031300001
"""The advisory lock key of a broker pair ('amqp10' and 1): one pair per database."""

_KEEPALIVE = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3}
"""TCP keepalives on both connections: a dead peer is noticed in seconds, not hours."""


class StoreFenced(RuntimeError):
    """Another broker has taken the store over: this one must not write (nor serve)."""


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:  # pragma: no cover - the extra is not installed
        raise RuntimeError(
            "store.backend = 'postgresql' needs psycopg: pip install 'amqp10[postgres]'"
        ) from None
    return psycopg


def describe_dsn(dsn: str) -> str:
    """``postgresql://host:port/dbname`` of a connection string, without its password."""
    try:
        info = _psycopg().conninfo.conninfo_to_dict(dsn)
    except Exception:
        return "postgresql (a connection string that does not parse)"
    host = info.get("host") or "localhost"
    port = info.get("port") or 5432
    return f"postgresql://{host}:{port}/{info.get('dbname') or info.get('user') or ''}"


def in_schema(dsn: str, schema: str) -> str:
    """``dsn`` with its sessions in ``schema`` (``search_path`` in its ``options``, in place
    of one it names already): what each of the broker's workers keeps apart in the shared
    database."""
    conninfo = _psycopg().conninfo
    options = (conninfo.conninfo_to_dict(dsn).get("options") or "").split()
    kept: list[str] = []
    for i, word in enumerate(options):
        if word.startswith("search_path=") and i > 0 and options[i - 1] == "-c":
            kept.pop()  # (its "-c")
        elif not word.startswith("-csearch_path="):
            kept.append(word)
    return str(conninfo.make_conninfo(dsn, options=" ".join([*kept, "-c", f"search_path={schema}"])))


def connect(dsn: str, *, timeout: float = 10.0) -> Any:
    """A connection to ``dsn`` that commits each statement, with TCP keepalives and
    ``tcp_user_timeout``: a dead server or network is noticed in seconds, not hours."""
    seconds = max(1, math.ceil(timeout))
    return _psycopg().connect(
        dsn, autocommit=True, connect_timeout=seconds, tcp_user_timeout=seconds * 1000, **_KEEPALIVE
    )


def create_schemas(dsn: str, schemas: list[str]) -> None:
    """Create each of ``schemas`` that does not exist yet (a store made in one needs it)."""
    with connect(dsn) as conn:
        for schema in schemas:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')


def detach_in_child(conn: Any) -> None:
    """In a forked child: let go of the parent's connection ``conn`` without a word to the
    server (the parent's session, and the lock it holds, must end with the parent, not
    last while a child holds the socket): /dev/null takes the socket's place, so nothing
    the child's copy of ``conn`` might still say reaches the server."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        os.dup2(null, conn.pgconn.socket)
    finally:
        os.close(null)


class PostgresStore(SqlStore):
    """The store in a PostgreSQL database; opening it makes this broker its only writer."""

    PARAM = "%s"
    TYPES: ClassVar[Mapping[str, str]] = {
        "int": "BIGINT", "real": "DOUBLE PRECISION", "blob": "BYTEA", "no_rowid": ""}  # fmt: skip

    def __init__(self, dsn: str, *, timeout: float = 10.0) -> None:
        """``timeout``: for connecting, and for the network to acknowledge what is sent
        (``tcp_user_timeout``: a commit into a partition fails instead of hanging)."""
        super().__init__(describe_dsn(dsn))
        self._conn = connect(dsn, timeout=timeout)
        self._cur = self._conn.cursor()
        self.epoch = 0
        """This writer's fencing token: a write transaction commits only while it is the store's."""
        try:
            self._migrate()
            # waits for the row lock of the previous writer's last transaction (see the module)
            self._cur.execute("UPDATE amqp10_store SET epoch = epoch + 1 RETURNING epoch")
            self.epoch = self._cur.fetchone()[0]
        except BaseException:
            self._conn.close()
            raise

    def _schema_version(self) -> int | None:
        self._cur.execute("SELECT to_regclass('amqp10_store') IS NOT NULL")
        if not self._cur.fetchone()[0]:
            return None
        self._cur.execute("SELECT version FROM amqp10_store")
        row = self._cur.fetchone()
        return None if row is None else int(row[0])

    def _migration(self, version: int | None) -> list[str]:
        return [
            *self.schema(),
            NUMBER_COLUMN.replace("ADD COLUMN", "ADD COLUMN IF NOT EXISTS").format(**self.TYPES),
            "CREATE TABLE IF NOT EXISTS amqp10_store (version INTEGER NOT NULL, epoch BIGINT NOT NULL)",
            f"INSERT INTO amqp10_store (version, epoch) SELECT {SCHEMA_VERSION}, 0 "
            "WHERE NOT EXISTS (SELECT 1 FROM amqp10_store)",
            f"UPDATE amqp10_store SET version = {SCHEMA_VERSION}",
        ]

    def out_of_space(self, exc: BaseException) -> bool:
        # SQLSTATE 53100 disk_full: the server's disk; the committer retries when it has room
        return getattr(exc, "sqlstate", None) == "53100" or super().out_of_space(exc)

    def _begin(self) -> None:
        cur = self._cur
        cur.execute("BEGIN")
        if self.epoch:
            cur.execute("SELECT epoch FROM amqp10_store FOR SHARE")
            epoch = cur.fetchone()[0]
            if epoch != self.epoch:
                raise StoreFenced(f"{self.location}: another broker has taken the store over (epoch {epoch})")

    def _write_rows(self, statement: str, rows: list[tuple[Any, ...]]) -> None:
        # One statement per batch, its rows as arrays (unnest): executemany's pipeline costs
        # the broker about 12 us of CPU per row. Same effect as the rows in order: puts and
        # updates of one key keep the last (a key is written once per statement); a delete
        # of an absent row is a no-op either way.
        if statement == "delete":
            self._cur.execute(_DELETE_MANY, [list(c) for c in zip(*rows, strict=True)])
            return
        key = (0, 1) if statement == "put" else (2, 3)
        last = {(r[key[0]], r[key[1]]): r for r in rows}
        columns = [list(c) for c in zip(*last.values(), strict=True)]  # lists: arrays (tuples are records)
        if statement == "put":
            self._cur.execute(_PUT_MANY + self._sql.put_conflict, columns)
        else:
            self._cur.execute(_UPDATE_MANY, columns)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


_PUT_MANY = (
    "INSERT INTO messages (node, seq, priority, delivery_count, expiry, arrival, message_id, format, data) "
    "SELECT * FROM unnest(%b::text[], %b::bigint[], %b::bigint[], %b::bigint[], %b::float8[], %b::float8[], "
    "%b::text[], %b::text[], %b::bytea[])"
)
_UPDATE_MANY = (
    "UPDATE messages AS m SET delivery_count = u.delivery_count, in_flight = u.in_flight "
    "FROM unnest(%b::bigint[], %b::bigint[], %b::text[], %b::bigint[]) AS u(delivery_count, in_flight, node, seq) "
    "WHERE m.node = u.node AND m.seq = u.seq"
)
_DELETE_MANY = (
    "DELETE FROM messages AS m USING unnest(%b::text[], %b::bigint[]) AS d(node, seq) "
    "WHERE m.node = d.node AND m.seq = d.seq"
)


def _nobody() -> None:
    """:attr:`DatabaseLock.on_lost` before it is set, and after its release."""


class DatabaseLock:
    """The advisory lock of a broker pair, on a connection of its own (see the module).

    Once held, a thread of its own (:meth:`start_keepalive`) checks the session every
    quarter of ``session_timeout_seconds``, so a busy event loop (recovering a large
    store, say) does not leave the session silent long enough for the server to end it.
    """

    def __init__(self, dsn: str, *, retry_seconds: float = 1.0, session_timeout_seconds: float = 10.0) -> None:
        self.dsn = dsn
        self.location = describe_dsn(dsn)
        self.retry_seconds = retry_seconds
        self.session_timeout_seconds = session_timeout_seconds
        self._conn: Any = None
        self._lost = threading.Event()
        self.on_lost: Callable[[], None] = _nobody
        """Called from the keepalive's thread once it finds the lock lost (what :attr:`lost`
        says then), until :meth:`release`: how a loop that waits in ``select`` (the workers'
        parent) hears it, through its own wake-up pipe. Set after the loss, it is not
        called: look at :attr:`lost` once set."""
        self._stop = threading.Event()
        self._keepalive: threading.Thread | None = None
        self._warned = False
        self.last_error: str | None = None
        """Why the last attempt or check failed (None: it did not)."""

    @property
    def held(self) -> bool:
        return self._conn is not None

    @property
    def lost(self) -> bool:
        """Whether the keepalive found the lock's session gone (:meth:`watch` returns then)."""
        return self._lost.is_set()

    def try_acquire(self) -> bool:
        """One attempt: connect (if need be) and take the lock without waiting."""
        psycopg = _psycopg()
        try:
            if self._conn is None:
                timeout = max(1, math.ceil(self.session_timeout_seconds))
                self._conn = psycopg.connect(
                    self.dsn, autocommit=True, connect_timeout=timeout, tcp_user_timeout=timeout * 1000, **_KEEPALIVE
                )
                # the server ends this session when it stays silent this long: a lost or frozen
                # active broker frees the lock in bounded time (the keepalive keeps a live one busy)
                ms = max(1, int(self.session_timeout_seconds * 1000))
                if self._conn.info.server_version >= 140000:
                    self._conn.execute(f"SET idle_session_timeout = {ms}")
                elif not self._warned:  # PostgreSQL 13 and older: no such setting
                    self._warned = True
                    log.warning(
                        "%s: PostgreSQL before 14 cannot end a silent lock session; a standby takes "
                        "over from a broker cut off from the database only once TCP gives up on it",
                        self.location,
                    )
            got = bool(self._conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()[0])
        except psycopg.Error as exc:
            self.last_error = str(exc).strip() or type(exc).__name__
            self.release()
            return False
        self.last_error = None if got else "another broker holds the lock"
        return got

    def check(self) -> bool:
        """Whether the lock's session is still alive (a session-level lock lives as long as it).
        A network that stops answering fails it within ``session_timeout_seconds``
        (``tcp_user_timeout``)."""
        psycopg = _psycopg()
        if self._conn is None:
            return False
        try:
            self._conn.execute("SELECT 1").fetchone()
        except psycopg.Error as exc:
            self.last_error = str(exc).strip() or type(exc).__name__
            return False
        return True

    def detach_in_child(self) -> None:
        """In a forked child (a worker): the lock's session stays the parent's alone."""
        if self._conn is not None:
            detach_in_child(self._conn)

    def start_keepalive(self) -> None:
        """Check the session from a thread until :meth:`release`; a failed check marks
        the lock lost (:meth:`watch` returns)."""

        def run() -> None:
            while not self._stop.wait(self.session_timeout_seconds / 4):
                if not self.check():
                    self._lost.set()
                    self.on_lost()
                    return

        self._keepalive = threading.Thread(target=run, name="amqp10 store lock", daemon=True)
        self._keepalive.start()

    def release(self) -> None:
        self._stop.set()
        self.on_lost = _nobody  # (what it told may go once released: a check still running tells nobody)
        if self._keepalive is not None and self._keepalive is not threading.current_thread():
            self._keepalive.join(self.session_timeout_seconds)
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # pragma: no cover - closing a broken connection
                log.debug("closing the lock connection", exc_info=True)

    async def acquire(self) -> None:
        """Wait (as the standby) until this broker holds the lock; then keep it alive."""
        said: str | None = None
        while not await anyio.to_thread.run_sync(self.try_acquire, abandon_on_cancel=True):
            said = self._waiting(said)
            await anyio.sleep(self.retry_seconds)
        self._active()

    def wait(self) -> None:
        """:meth:`acquire` for a process without an event loop (the workers' parent): blocks
        until this broker holds the lock (an exception, from a signal handler say, ends it)."""
        said: str | None = None
        while not self.try_acquire():
            said = self._waiting(said)
            time.sleep(self.retry_seconds)
        self._active()

    def _waiting(self, said: str | None) -> str | None:
        """Say why this broker waits, once per reason; the reason said."""
        if self.last_error != said:
            log.info(
                "standby: waiting for the store lock on %s (%s); trying every %gs",
                self.location, self.last_error, self.retry_seconds,
            )  # fmt: skip
        return self.last_error

    def _active(self) -> None:
        self.start_keepalive()
        log.info("holding the store lock on %s: this broker is active", self.location)

    async def watch(self) -> str:
        """Return (with the reason) once the keepalive finds the lock's session gone."""
        while not self._lost.is_set():
            await anyio.sleep(min(0.5, self.session_timeout_seconds / 8))
        return self.last_error or "the lock's session ended"
