"""0-10 session resumption through the broker (0-10 §3.8): a session granted a timeout
and cut off by a network failure is kept, and a new connection that attaches its name
gets the deliveries it had not completed again (same ids) while the commands it replays
are not done twice; without a timeout the session ends with its transport."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amqp10.broker.amqp010.kept import KeptSessions
from tests.amqp010.peer import SocketPeer, struct
from tests.broker.amqp010.test_amqp010_e2e import publish, subscribe
from tests.broker.conftest import RunningBroker, broker_with


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_with(tmp_path) as b:
        yield b


def attach(p: SocketPeer, name: bytes, *, timeout: int | None = 60, command_id: int = 0) -> None:
    p.send("session.attach", 1, name=name)
    p.send("session.command-point", 1, command_id=command_id, command_offset=0)
    if timeout is not None:
        p.send("session.request-timeout", 1, timeout=timeout)
    p.flush()
    p.wait("session.attached")
    if timeout is not None:
        (granted,) = p.wait("session.timeout")
        assert granted["timeout"] == timeout


def cut(p: SocketPeer) -> None:
    """The network fails: the socket goes without ``connection.close``."""
    p.sock.close()


def unsynced_transfer(p: SocketPeer, key: str, body: bytes) -> None:
    headers = [struct("delivery-properties", routing_key=key)]
    p.command(
        "message.transfer",
        sync=False,
        destination="",
        accept_mode=1,
        acquire_mode=0,
        headers=headers,
        body=body,
    )


def kept(b: RunningBroker, name: bytes, *, present: bool = True) -> None:
    """Wait (bounded) until the broker has (or no longer has) session ``name`` kept."""
    sessions = KeptSessions.of(b.broker).sessions
    for _ in range(500):
        if any(key[2] == name for key in list(sessions)) == present:
            return
        time.sleep(0.01)
    raise AssertionError(f"session {name!r} {'not ' if present else ''}kept")


def test_deliveries_not_completed_are_replayed_to_the_resuming_connection(
    broker: RunningBroker,
) -> None:
    a = SocketPeer(broker.port)
    attach(a, b"reader")
    a.call("queue.declare", queue="rq")
    for body in (b"one", b"two"):
        publish(a, "rq", body)
    subscribe(a, "rq")
    sent = a.wait("message.transfer", 2)
    assert [t.body for t in sent] == [b"one", b"two"]
    cut(a)  # neither completed nor accepted
    kept(broker, b"reader")

    b = SocketPeer(broker.port)
    b.send("session.attach", 1, name=b"reader")
    b.send("session.command-point", 1, command_id=a.next_id[1], command_offset=0)
    b.next_id[1] = a.next_id[1]
    b.flush()
    b.wait("session.attached")
    again = b.wait("message.transfer", 2)
    assert [(t.id, t.body) for t in again] == [(t.id, t.body) for t in sent]
    kept(broker, b"reader", present=False)
    b.call("message.accept", transfers=((again[0].id, again[1].id),))
    result = b.call("queue.query", queue="rq")
    assert result is not None and result["message_count"] == 0
    publish(b, "rq", b"three")  # the subscription goes on, with the next id
    (more,) = b.wait("message.transfer")
    assert more.body == b"three" and more.id > again[1].id
    b.close()


def test_commands_the_client_replays_are_not_done_twice(broker: RunningBroker) -> None:
    a = SocketPeer(broker.port)
    attach(a, b"writer")
    a.call("queue.declare", queue="wq")
    for body in (b"1", b"2"):
        unsynced_transfer(a, "wq", body)
    a.call("execution.sync")  # the broker has them (the client does not know-complete them)
    cut(a)
    kept(broker, b"writer")

    b = SocketPeer(broker.port)
    attach(b, b"writer", timeout=None, command_id=0)  # the client replays from its point: 0
    b.call("queue.declare", queue="wq")  # ids 0 to 3 again, as sent before
    for body in (b"1", b"2"):
        unsynced_transfer(b, "wq", body)
    b.call("execution.sync")
    unsynced_transfer(b, "wq", b"3")  # id 4: new
    b.call("execution.sync")
    result = b.call("queue.query", queue="wq")
    assert result is not None and result["message_count"] == 3  # not 5
    b.close()


def test_without_a_timeout_the_session_ends_with_its_transport(broker: RunningBroker) -> None:
    a = SocketPeer(broker.port)
    attach(a, b"brief", timeout=None)
    a.call("queue.declare", queue="bq")
    publish(a, "bq", b"x")
    subscribe(a, "bq")
    (t,) = a.wait("message.transfer")
    cut(a)

    b = SocketPeer(broker.port)
    b.attach(1, b"brief")
    assert not KeptSessions.of(broker.broker).sessions
    subscribe(b, "bq", "d2")
    (again,) = b.wait("message.transfer")  # back on its queue, redelivered
    dp = again.header("delivery-properties")
    assert again.body == b"x" and dp is not None and dp["redelivered"] and t.body == b"x"
    b.close()


def test_a_session_not_resumed_in_time_ends_and_gives_its_messages_back(
    broker: RunningBroker,
) -> None:
    a = SocketPeer(broker.port)
    attach(a, b"late", timeout=1)
    a.call("queue.declare", queue="lq")
    publish(a, "lq", b"x")
    subscribe(a, "lq")
    a.wait("message.transfer")
    cut(a)
    kept(broker, b"late")
    kept(broker, b"late", present=False)  # its timeout ran out

    b = SocketPeer(broker.port)
    attach(b, b"late", timeout=None)  # a new session: nothing replayed
    subscribe(b, "lq")
    (again,) = b.wait("message.transfer")
    assert again.body == b"x" and again.id == 0
    b.close()
