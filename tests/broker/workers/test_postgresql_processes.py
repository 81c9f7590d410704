"""``amqp10 broker --workers 2`` on the PostgreSQL store: one shared database, each worker in
a schema of its own, the parent holding the database lock of an active/standby pair.

Real processes on 127.0.0.1 and a real PostgreSQL server (tests/pgserver.py). Every
message counted here was confirmed by the broker (pika's publisher confirms); every wait is
bounded and none is a timed assertion.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.broker.test_failover import pg_broker_config
from tests.broker.test_workers import WAIT, Parent, wait_until_gone

from .test_amqp091_processes import one_on_each
from .test_processes import owned_by

pytestmark = pytest.mark.slow

EXCHANGE = "pg.orders"
QUEUES = (owned_by(0, "pg.q"), owned_by(1, "pg.q"))
"""A queue worker 0 owns and one worker 1 owns."""


def config(tmp_path: Path, name: str, dsn: str) -> Path:
    """A config file: port 0, the store in ``dsn``, this broker's local files in ``tmp_path/name``."""
    return pg_broker_config(tmp_path, name, dsn, 0, path=str(tmp_path / name / "amqp10.sqlite3"))


@contextmanager
def running(parent: Parent) -> Iterator[Parent]:
    try:
        parent.wait_port()
        parent.wait_listening()
        yield parent
    finally:
        parent.stop()


def declare_and_publish(p: Parent, count: int, tag: str = "") -> set[bytes]:
    """Declare the exchange, both queues and their bindings; publish ``count`` durable
    messages (bodies ``<queue>/<tag><i>``) to each queue through the exchange: the bodies
    the broker confirmed."""
    confirmed: set[bytes] = set()
    with one_on_each(p) as conns:
        ch = conns[0].channel()
        ch.confirm_delivery()
        ch.exchange_declare(EXCHANGE, "direct", durable=True)
        for q in QUEUES:
            ch.queue_declare(q, durable=True)
            ch.queue_bind(q, EXCHANGE, routing_key=q)
        for i in range(count):
            for q in QUEUES:
                body = f"{q}/{tag}{i}".encode()
                ch.basic_publish(EXCHANGE, q, body, pika.BasicProperties(delivery_mode=2), mandatory=True)
                confirmed.add(body)  # returned: confirmed (a nack or a return raises)
    return confirmed


def drain(p: Parent) -> set[bytes]:
    """Every message in both queues (taken), and one more through the exchange to each: the
    exchange and its bindings are there (a message it cannot route raises)."""
    got: list[bytes] = []
    with one_on_each(p) as conns:
        ch = conns[1].channel()
        ch.confirm_delivery()
        for q in QUEUES:
            ch.queue_declare(q, durable=True, passive=True)
            ch.basic_publish(EXCHANGE, q, f"{q}/after".encode(), pika.BasicProperties(delivery_mode=2), mandatory=True)
        for q in QUEUES:
            while True:
                method, _, body = ch.basic_get(q, auto_ack=True)
                if method is None:
                    break
                got.append(body)
    assert len(got) == len(set(got))  # none twice
    return set(got)


def after(bodies: set[bytes]) -> set[bytes]:
    return bodies | {f"{q}/after".encode() for q in QUEUES}


def test_two_workers_share_the_database_a_killed_worker_and_a_restarted_broker_lose_nothing(
    tmp_path: Path, pg_server: Any
) -> None:
    dsn = pg_server.new_database()
    with running(Parent.of_config(config(tmp_path, "a", dsn), wait=False)) as broker:
        confirmed = declare_and_publish(broker, 100)
        mark = len(broker.lines)
        os.kill(broker.worker_pids()[1], signal.SIGKILL)
        broker.wait_for(r"worker 1 \(pid \d+\) ended .*killed by SIGKILL", mark)
        recovered = broker.wait_for(r"worker=1 logger=amqp10.broker msg=.recovered (\d+) messages", mark)
        assert int(recovered[1]) >= 100  # its queue's, from its schema
        more = declare_and_publish(broker, 20, "more")  # the metadata again: equivalent, so no change
        workers = list(broker.worker_pids().values())
    wait_until_gone(workers)  # the parent SIGKILLed (running's stop): its workers follow it
    # the whole broker started again: every queue and its metadata
    with running(Parent.of_config(config(tmp_path, "a", dsn), wait=False)) as broker:
        assert drain(broker) == after(confirmed | more)
    import psycopg

    with psycopg.connect(dsn) as conn:
        schemas = {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'amqp10_%'")}
    assert schemas == {"amqp10_metadata", "amqp10_w0", "amqp10_w1"}


def test_a_standby_pair_at_two_workers_takes_over_with_every_confirmed_message(tmp_path: Path, pg_server: Any) -> None:
    dsn = pg_server.new_database()
    active = Parent.of_config(config(tmp_path, "a", dsn))  # holds the lock once it listens
    standby = Parent.of_config(config(tmp_path, "b", dsn), wait=False)
    try:
        active.wait_listening()
        standby.wait_for(r"standby: waiting for the store lock")
        with one_on_each(active) as conns:  # in the metadata's history: both queues deleted once
            ch = conns[0].channel()
            for q in QUEUES:
                ch.queue_declare(q, durable=True)
                ch.queue_delete(q)
        # the standby's workers (a data directory of their own, as on another host) go on
        # from what their stores applied: a replay of that delete would empty the queue
        confirmed = declare_and_publish(active, 100)
        assert not any("listening on" in line for line in standby.lines)  # nothing bound, no worker
        third = Parent.of_config(config(tmp_path, "c", dsn), wait=False)
        third.wait_for(r"standby: waiting for the store lock")
        third.proc.send_signal(signal.SIGTERM)  # a standby stops as one process does: exit 0
        assert third.proc.wait(WAIT) == 0
        third.wait_for(r"received SIGTERM: stopping \(the standby\)")
        active.stop()  # SIGKILL: the lock's session ends; the workers lose their parent
        with running(standby):
            standby.wait_for(r"holding the store lock on")
            assert drain(standby) == after(confirmed)
    finally:
        active.stop()
        standby.stop()


def test_the_parent_that_loses_the_lock_stops_its_workers(tmp_path: Path, pg_server: Any) -> None:
    import psycopg

    dsn = pg_server.new_database()
    path = pg_broker_config(
        tmp_path, "a", dsn, 0, path=str(tmp_path / "a" / "amqp10.sqlite3"), lock_session_timeout_seconds=1
    )
    with running(Parent.of_config(path, wait=False)) as broker:
        workers = list(broker.worker_pids().values())
        with psycopg.connect(dsn, autocommit=True) as conn:  # the lock's session ended under it
            ended = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            ).fetchall()
        assert ended == [(True,)]
        broker.wait_for(r"lost the store lock on .*: stopping the workers")
        assert broker.proc.wait(60) == 1
        wait_until_gone(workers)


def test_the_metadata_log_in_the_database_is_fenced_as_the_store_is(tmp_path: Path, pg_server: Any) -> None:
    from amqp10.broker.core.store_postgres import StoreFenced, create_schemas
    from amqp10.broker.workers.shared_database import METADATA_SCHEMA, PostgresMetadataLog

    dsn = pg_server.new_database()
    create_schemas(dsn, [METADATA_SCHEMA])
    old = PostgresMetadataLog(dsn)
    assert old.append("/", ("queue", "q1")) == 1
    old.marks(tmp_path).write(1, 1)
    new = PostgresMetadataLog(dsn)  # a standby's parent, after the lock changed hands
    try:
        with pytest.raises(StoreFenced):
            old.append("/", ("queue", "q2"))  # the old parent writes nothing more
        assert [(seq, change) for seq, _, change in new.after(0)] == [(1, ("queue", "q1"))]
        assert new.append("/", ("queue", "q3")) == 2
        assert new.marks(tmp_path).read(1) == 1 and new.marks(tmp_path).read(0) == 0
    finally:
        old.close()
        new.close()
