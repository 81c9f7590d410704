"""Prepared 0-10 ``dtx`` branches kept across a broker restart: the branch's held publish
and its accepted (still acquired) message come back from the store; ``dtx.recover`` lists
the xid, and a new session commits or rolls the branch back. Restarted in process (the
broker stopped and started on the same store), and killed with SIGKILL (a real process)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from amqp10.broker.config import StoreConfig
from tests.amqp010.peer import SocketPeer, struct
from tests.broker.amqp010.test_amqp010_dtx import OK, count, xid
from tests.broker.conftest import broker_process, broker_with

PERSISTENT = 2


def publish(p: SocketPeer, key: str, body: bytes) -> None:
    """A persistent message to queue ``key``."""
    headers = [struct("delivery-properties", routing_key=key, delivery_mode=PERSISTENT), struct("message-properties")]
    p.call("message.transfer", destination="", accept_mode=1, acquire_mode=0, headers=headers, body=body)


@contextmanager
def peer(port: int, name: bytes = b"s1") -> Iterator[SocketPeer]:
    p = SocketPeer(port)
    p.attach(1, name)
    try:
        yield p
    finally:
        p.close()


def prepare_a_move(port: int, x: object) -> None:
    """Durable queues a (holding "first" and "second") and b; in branch ``x``: accept the
    first message of a and publish "moved" to b; prepare the branch."""
    with peer(port) as p:
        for q in ("a", "b"):
            p.call("queue.declare", queue=q, durable=True)
        publish(p, "a", b"first")
        publish(p, "a", b"second")
        p.call("dtx.select")
        assert (p.call("dtx.start", xid=x) or {})["status"] == OK
        p.call("message.subscribe", queue="a", destination="mover", accept_mode=0, acquire_mode=0)
        p.call("message.flow", destination="mover", unit=0, value=1)
        p.call("message.flow", destination="mover", unit=1, value=0xFFFFFFFF)
        (t,) = p.wait("message.transfer")
        assert t.body == b"first"
        p.call("message.accept", transfers=((t.id, t.id),))
        p.call("message.cancel", destination="mover")
        publish(p, "b", b"moved")
        assert (p.call("dtx.end", xid=x) or {})["status"] == OK
        assert (p.call("dtx.prepare", xid=x) or {})["status"] == OK


def recovered(p: SocketPeer) -> list[bytes]:
    r = p.call("dtx.recover")
    assert r is not None
    return [x["global_id"] for x in r["in_doubt"]]


def bodies(p: SocketPeer, queue: str, n: int) -> list[bytes]:
    """The bodies of the first ``n`` messages of ``queue``, browsed (left on the queue)."""
    p.call("message.subscribe", queue=queue, destination="look", accept_mode=1, acquire_mode=1)
    p.call("message.flow", destination="look", unit=0, value=n)
    p.call("message.flow", destination="look", unit=1, value=0xFFFFFFFF)
    got = [t.body for t in p.wait("message.transfer", n)]
    p.call("message.cancel", destination="look")
    return got


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreConfig:
    """The store of the test's brokers, on each backend (PostgreSQL: a real server)."""
    if request.param == "sqlite":
        return StoreConfig(path=tmp_path / "store.sqlite3", commit_interval_ms=1)
    pg: Any = request.getfixturevalue("pg_server")
    return StoreConfig(backend="postgresql", dsn=pg.new_database(), commit_interval_ms=1)


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_a_prepared_branch_outlives_a_restart(tmp_path: Path, store: StoreConfig, outcome: str) -> None:
    x = xid(b"restarted")
    with broker_with(tmp_path, store=store) as b:
        prepare_a_move(b.port, x)
    with broker_with(tmp_path, store=store) as b, peer(b.port, b"coordinator") as p:
        assert recovered(p) == [b"restarted"]
        # the accepted message is still the branch's: no consumer gets it
        assert (count(p, "a"), count(p, "b")) == (1, 0)
        assert bodies(p, "a", 1) == [b"second"]
        if outcome == "commit":
            assert (p.call("dtx.commit", xid=x, one_phase=False) or {})["status"] == OK
            assert (count(p, "a"), count(p, "b")) == (1, 1)
            assert bodies(p, "b", 1) == [b"moved"]
        else:
            assert (p.call("dtx.rollback", xid=x) or {})["status"] == OK
            assert (count(p, "a"), count(p, "b")) == (2, 0)
            assert bodies(p, "a", 2) == [b"first", b"second"]
        assert recovered(p) == []
    with broker_with(tmp_path, store=store) as b, peer(b.port) as p:  # the outcome is as durable
        assert recovered(p) == []
        assert (count(p, "a"), count(p, "b")) == ((1, 1) if outcome == "commit" else (2, 0))


def test_sigkill_between_prepare_and_commit_loses_nothing(tmp_path: Path) -> None:
    x = xid(b"killed")
    args = ("--port", "0", "--http-port", "0", "--data-dir", str(tmp_path))
    with broker_process(*args) as bp:
        prepare_a_move(bp.port, x)
        bp.proc.kill()  # SIGKILL: right after the prepare was answered
        bp.proc.wait(10)
    with broker_process(*args) as bp:
        with peer(bp.port, b"coordinator") as p:
            assert recovered(p) == [b"killed"]
            assert (count(p, "a"), count(p, "b")) == (1, 0)
            assert (p.call("dtx.commit", xid=x, one_phase=False) or {})["status"] == OK
            assert (count(p, "a"), count(p, "b")) == (1, 1)
        bp.proc.kill()
        bp.proc.wait(10)
    with broker_process(*args) as bp, peer(bp.port) as p:
        assert recovered(p) == []
        assert (count(p, "a"), count(p, "b")) == (1, 1)
        assert bodies(p, "a", 1) == [b"second"] and bodies(p, "b", 1) == [b"moved"]
