"""Session resumption in the 0-10 engine (0-10 §3.8): the timeout granted, the commands
sent kept until the peer completes them and replayed to a new connection attaching the
same name, and the peer's replayed commands taken once."""

from __future__ import annotations

from amqp10.amqp010 import CommandReceived, Connection, SessionAttached, op
from amqp10.amqp010.connection import Session
from tests.amqp010.peer import Pair, struct


def opened(max_session_timeout: int = 60) -> Pair:
    p = Pair(Connection(mechanisms=["ANONYMOUS"], max_session_timeout=max_session_timeout))
    p.open()
    p.attach(1, b"kept")
    p.client.take()
    return p


def transfer(body: bytes) -> object:
    t = op("message.transfer", destination="d", accept_mode=0, acquire_mode=0)
    t.headers = [struct("delivery-properties", routing_key="q")]
    t.body = body
    return t


def test_request_timeout_is_answered_with_the_timeout_granted() -> None:
    p = opened(max_session_timeout=60)
    p.client.send("session.request-timeout", 1, timeout=30)
    p.flush()
    ((_, t),) = p.client.take()
    assert t.name == "session.timeout" and t["timeout"] == 30
    p.client.send("session.request-timeout", 1, timeout=600)
    p.flush()
    ((_, t),) = p.client.take()
    assert t["timeout"] == 60 and p.server.sessions[1].timeout == 60


def test_without_a_timeout_the_broker_keeps_nothing() -> None:
    p = opened(max_session_timeout=0)
    p.client.send("session.request-timeout", 1, timeout=30)
    p.flush()
    ((_, t),) = p.client.take()
    assert t["timeout"] == 0
    p.server.send_command(1, transfer(b"x"))  # type: ignore[arg-type]
    assert p.server.sessions[1].replay is None


def test_sent_commands_are_kept_until_the_peer_completes_them() -> None:
    p = opened()
    p.client.send("session.request-timeout", 1, timeout=30)
    p.flush()
    ids = [p.server.send_command(1, transfer(b"m%d" % i)) for i in range(3)]  # type: ignore[arg-type]
    s = p.server.sessions[1]
    assert s.replay is not None and sorted(s.replay) == ids == [0, 1, 2]
    p.client.send("session.completed", 1, commands=((0, 1),))
    p.flush()
    assert sorted(s.replay) == [2]


def test_a_new_connection_resumes_the_session_with_a_replay() -> None:
    first = opened()
    first.client.send("session.request-timeout", 1, timeout=30)
    first.client.command("queue.declare", queue="a")
    first.client.command("queue.declare", queue="b")
    events = first.flush()
    cmds = [e.command for e in events if isinstance(e, CommandReceived)]
    for c in cmds:
        first.server.complete(1, c)
    for i in range(3):
        first.server.send_command(1, transfer(b"m%d" % i))  # type: ignore[arg-type]
    first.client.send("session.completed", 1, commands=((0, 0),))  # only the first delivery
    first.flush()
    first.server.receive_data(b"")  # the transport fails
    kept: Session = first.server.sessions[1]

    offered: list[tuple[int, bytes]] = []

    def resumable(channel: int, name: bytes) -> Session | None:
        offered.append((channel, name))
        return kept if name == b"kept" else None

    second = Pair(Connection(mechanisms=["ANONYMOUS"], max_session_timeout=60))
    second.server.resumable = resumable
    second.open()
    second.client.take()
    second.client.send("session.attach", 3, name=b"kept")
    # the peer replays from its own last known-completed point: both declares again, then new
    second.client.send("session.command-point", 3, command_id=0, command_offset=0)
    second.client.command("queue.declare", 3, queue="a")
    second.client.command("queue.declare", 3, queue="b")
    second.client.command("queue.declare", 3, queue="c")
    events = second.flush()
    assert offered == [(3, b"kept")]
    assert SessionAttached(3, b"kept", resumed=True) in events
    fresh = [e.command for e in events if isinstance(e, CommandReceived)]
    assert [(c.id, c["queue"]) for c in fresh] == [(2, "c")]  # a and b are not done twice
    got = second.client.take()
    names = [item.name for _, item in got]
    assert names[:2] == ["session.attached", "session.command-point"]
    assert got[1][1]["command_id"] == 1  # the first delivery not completed by the peer
    replayed = [item for _, item in got if item.name == "message.transfer"]
    assert [(t.id, t.body) for t in replayed] == [(1, b"m1"), (2, b"m2")]
    # what it completed before the failure is said again on the new transport
    completed = [item for _, item in got if item.name == "session.completed"]
    assert completed and completed[-1]["commands"] == ((0, 1),)
    # the session goes on: the next delivery takes the next id
    assert second.server.send_command(3, transfer(b"m3")) == 3  # type: ignore[arg-type]


def test_an_attach_with_no_session_kept_starts_a_new_one() -> None:
    p = Pair(Connection(mechanisms=["ANONYMOUS"], max_session_timeout=60))
    p.server.resumable = lambda channel, name: None
    p.open()
    p.attach(1, b"new")
    assert SessionAttached(1, b"new") in p.events
    cp = [item for _, item in p.client.got if item.name == "session.command-point"]
    assert cp[0]["command_id"] == 0
