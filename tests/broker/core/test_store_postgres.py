"""What only the PostgreSQL store has: the fencing epoch, the database lock, its config.

Against a real PostgreSQL server (Debian's package, started once for the session); each
test has a database of its own. The behaviour both backends share is tested on both in
test_store.py.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from amqp10.broker.config import ConfigError, load_config
from amqp10.broker.core import store as st
from amqp10.broker.core.committer import GroupCommitter
from amqp10.broker.core.store_postgres import (
    DatabaseLock,
    PostgresStore,
    StoreFenced,
    describe_dsn,
    in_schema,
)


def put(seq: int, data: bytes = b"x") -> tuple[object, ...]:
    return (st.PUT, "q", seq, 4, 0, None, 1.0, None, "amqp1", data)


def dbname(dsn: str) -> str:
    return dsn.rsplit("dbname=", 1)[1]


def test_a_new_writer_fences_off_the_old_one(pg_server: Any) -> None:
    dsn = pg_server.new_database()
    old = PostgresStore(dsn)
    old.apply([put(1)])
    new = PostgresStore(dsn)
    try:
        assert new.epoch == old.epoch + 1
        with pytest.raises(StoreFenced, match="another broker has taken the store over"):
            old.apply([put(2), (st.DELETE, "q", 1)])
        with pytest.raises(StoreFenced):
            old.load()  # recovery writes too (in-flight counts): fenced as well
        assert [m.seq for m in new.load().messages] == [1]  # nothing of the fenced batch
        new.apply([put(3)])
        assert [m.seq for m in new.load().messages] == [1, 3]
    finally:
        old.close()
        new.close()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_fenced_broker_confirms_nothing_more(pg_server: Any, anyio_backend: str) -> None:
    """The group committer of a broker whose store was taken over fails its next commit
    and calls none of that batch's callbacks (no message of it is accepted)."""
    dsn = pg_server.new_database()
    old = PostgresStore(dsn)
    committer = GroupCommitter(old, interval=0)
    confirmed: list[int] = []
    committer.submit(put(1), lambda: confirmed.append(1))
    await committer._commit_pending()
    new = PostgresStore(dsn)
    try:
        committer.submit(put(2), lambda: confirmed.append(2))
        with pytest.raises(StoreFenced):
            await committer._commit_pending()
        assert confirmed == [1]
        assert isinstance(committer.error, StoreFenced)
        assert [m.seq for m in new.load().messages] == [1]
    finally:
        old.close()
        new.close()


def test_taking_over_waits_for_the_old_writers_last_transaction(pg_server: Any) -> None:
    """The old writer's transaction in progress when the new one opens the store either
    commits before the new writer recovers (and is recovered) or does not commit at all."""
    dsn = pg_server.new_database()
    old = PostgresStore(dsn)
    opened: list[PostgresStore] = []
    try:
        old._begin()  # the fencing check holds the epoch row FOR SHARE until the end
        old._cur.execute(old._sql.put, put(7, b"in flight")[1:])
        taker = threading.Thread(target=lambda: opened.append(PostgresStore(dsn)), daemon=True)
        taker.start()
        with pg_server.connect(dbname(dsn)) as admin:  # the new writer waits for the row lock
            for _ in range(500):
                if admin.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0]:
                    break
                time.sleep(0.01)
            else:
                raise AssertionError("the new writer did not wait for the old one's transaction")
        assert opened == []
        old._cur.execute("COMMIT")
        taker.join(10)
        assert [(m.seq, m.data) for m in opened[0].load().messages] == [(7, b"in flight")]
    finally:
        old.close()
        for s in opened:
            s.close()


def test_a_store_of_a_newer_schema_is_refused_untouched(pg_server: Any) -> None:
    dsn = pg_server.new_database()
    PostgresStore(dsn).close()
    with pg_server.connect(dbname(dsn)) as admin:
        admin.execute("UPDATE amqp10_store SET version = 99")
    with pytest.raises(ValueError, match=rf"schema version 99 is newer than this broker's \({st.SCHEMA_VERSION}\)"):
        PostgresStore(dsn)
    with pg_server.connect(dbname(dsn)) as admin:
        assert admin.execute("SELECT version, epoch FROM amqp10_store").fetchone() == (99, 1)


def test_the_lock_is_held_by_one_and_freed_with_its_session(pg_server: Any) -> None:
    dsn = pg_server.new_database()
    first, second = DatabaseLock(dsn), DatabaseLock(dsn)
    try:
        assert first.try_acquire() and first.check()
        assert not second.try_acquire()
        assert second.last_error == "another broker holds the lock"
        with pg_server.connect(dbname(dsn)) as admin:  # as when the broker's process dies
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'")
        assert not first.check()
        assert second.try_acquire()
    finally:
        first.release()
        second.release()


def test_a_silent_lock_session_is_ended_by_the_server(pg_server: Any) -> None:
    """A frozen or cut-off active broker stops checking; its lock goes in bounded time."""
    dsn = pg_server.new_database()
    frozen, standby = DatabaseLock(dsn, session_timeout_seconds=1), DatabaseLock(dsn)
    try:
        assert frozen.try_acquire()
        for _ in range(100):  # idle_session_timeout = 1 s; 10 s at most
            if standby.try_acquire():
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the silent session kept the lock")
        assert not frozen.check()
    finally:
        frozen.release()
        standby.release()


def test_the_keepalive_holds_the_lock_while_its_owner_is_busy(pg_server: Any) -> None:
    """A broker recovering a large store (its event loop busy) keeps its lock: the
    keepalive thread talks for it, past several session time-outs."""
    dsn = pg_server.new_database()
    owner, standby = DatabaseLock(dsn, session_timeout_seconds=1), DatabaseLock(dsn)
    try:
        assert owner.try_acquire()
        owner.start_keepalive()
        time.sleep(2.5)  # the owner's own thread does nothing meanwhile
        assert not standby.try_acquire()
        assert owner.check()
    finally:
        owner.release()
        standby.release()
    assert not owner.held


def test_a_lost_lock_is_told_from_its_keepalive(pg_server: Any) -> None:
    """The workers' parent waits in select: the lock tells it its loss (``on_lost``, from the
    keepalive's failed check: the parent writes to its wake-up pipe), not by being looked at
    on a timer; nobody once released."""
    dsn = pg_server.new_database()
    lock = DatabaseLock(dsn, session_timeout_seconds=1)
    told = threading.Event()
    try:
        assert lock.try_acquire()
        lock.on_lost = told.set
        lock.start_keepalive()
        assert not told.is_set() and not lock.lost  # held
        with pg_server.connect(dbname(dsn)) as admin:  # as when the database ends the session
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'")
        assert told.wait(30)  # (a bound, not a timing: the keepalive checks every 0.25 s)
        assert lock.lost
    finally:
        lock.release()
    assert lock.on_lost != told.set  # (released: it tells nobody)


def test_an_unreachable_database_is_retried_with_the_reason() -> None:
    lock = DatabaseLock("host=127.0.0.1 port=1 dbname=x user=x connect_timeout=2")
    assert not lock.try_acquire()
    assert lock.last_error is not None and "127.0.0.1" in lock.last_error
    assert not lock.held


def test_describe_dsn_never_shows_the_password() -> None:
    where = describe_dsn("host=db.example port=5433 dbname=amqp user=broker password=s3cret")
    assert where == "postgresql://db.example:5433/amqp"
    assert "s3cret" not in describe_dsn("postgresql://broker:s3cret@db.example/amqp")


def test_in_schema_names_one_search_path_and_keeps_other_options() -> None:
    conninfo = pytest.importorskip("psycopg.conninfo")
    once = in_schema("host=db.example dbname=amqp options='-c statement_timeout=5000'", "amqp10_w1")
    twice = in_schema(once, "amqp10_metadata")  # a worker's dsn put in the metadata's schema
    assert conninfo.conninfo_to_dict(once)["options"] == "-c statement_timeout=5000 -c search_path=amqp10_w1"
    assert conninfo.conninfo_to_dict(twice)["options"] == "-c statement_timeout=5000 -c search_path=amqp10_metadata"
    assert conninfo.conninfo_to_dict(twice)["dbname"] == "amqp"


@pytest.mark.parametrize(
    ("store", "message"),
    [
        ({"backend": "postgresql"}, "store: Value error, dsn is required when backend = 'postgresql'"),
        ({"backend": "postgresql", "dsn": "nonsense"}, 'store: Value error, dsn: missing "=" after "nonsense"'),
        ({"dsn": "host=x"}, "store: Value error, dsn is for backend = 'postgresql' (backend is 'sqlite')"),
        ({"backend": "mysql"}, "store.backend: Input should be 'sqlite' or 'postgresql'"),
        ({"backend": "postgresql", "dsn": "host=x", "lock_retry_seconds": 0}, "store.lock_retry_seconds"),
    ],
)
def test_config_errors_name_the_field(store: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(store=store)
    assert str(info.value).startswith(message)
