"""0-10 ``dtx`` (XA branches) through the broker with a bare 0-10 peer: a message moved
between queues in a branch, committed in one and two phases, rolled back, recovered
while prepared, and the branch's work kept past the end of the session that did it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.amqp010.peer import SocketPeer, struct
from tests.broker.amqp010.test_amqp010_e2e import publish, subscribe
from tests.broker.conftest import RunningBroker, broker_with

OK, RBROLLBACK = 0, 1


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_with(tmp_path) as b:
        yield b


def xid(name: bytes) -> object:
    return struct("xid", format=0, global_id=name, branch_id=b"b1")


def count(p: SocketPeer, queue: str) -> int:
    r = p.call("queue.query", queue=queue)
    assert r is not None
    return int(r["message_count"])


def move_in_branch(p: SocketPeer, x: object) -> None:
    """In branch ``x``: take the message on queue a, publish its body to queue b."""
    p.call("dtx.select")
    status = p.call("dtx.start", xid=x)
    assert status is not None and status["status"] == OK
    subscribe(p, "a", "mover")
    (t,) = p.wait("message.transfer")
    p.call("message.accept", transfers=((t.id, t.id),))
    p.call("message.cancel", destination="mover")
    publish(p, "b", t.body)
    status = p.call("dtx.end", xid=x)
    assert status is not None and status["status"] == OK


@pytest.fixture
def peer(broker: RunningBroker) -> Iterator[SocketPeer]:
    p = SocketPeer(broker.port)
    p.attach()
    for q in ("a", "b"):
        p.call("queue.declare", queue=q)
    publish(p, "a", b"moved")
    yield p
    if p.sock.fileno() != -1:  # (some tests close it themselves)
        p.close()


def test_two_phase_commit_after_the_session_ended(broker: RunningBroker, peer: SocketPeer) -> None:
    move_in_branch(peer, xid(b"two-phase"))
    assert (count(peer, "a"), count(peer, "b")) == (0, 0)  # taken, not yet published
    peer.close()
    other = SocketPeer(broker.port)
    other.attach(1, b"coordinator")
    result = other.call("dtx.prepare", xid=xid(b"two-phase"))
    assert result is not None and result["status"] == OK
    recovered = other.call("dtx.recover")
    assert recovered is not None
    assert [x["global_id"] for x in recovered["in_doubt"]] == [b"two-phase"]
    result = other.call("dtx.commit", xid=xid(b"two-phase"), one_phase=False)
    assert result is not None and result["status"] == OK
    assert (count(other, "a"), count(other, "b")) == (0, 1)
    other.close()


def test_rollback_puts_the_taken_message_back(peer: SocketPeer) -> None:
    move_in_branch(peer, xid(b"undone"))
    result = peer.call("dtx.rollback", xid=xid(b"undone"))
    assert result is not None and result["status"] == OK
    assert (count(peer, "a"), count(peer, "b")) == (1, 0)


def test_one_phase_commit_and_the_wrong_phase_refused(
    broker: RunningBroker, peer: SocketPeer
) -> None:
    move_in_branch(peer, xid(b"one-phase"))
    cid = peer.command("dtx.commit", xid=xid(b"one-phase"), one_phase=False)
    peer.flush()
    (exc,) = peer.wait("execution.exception")
    assert exc["error_code"] == 409 and exc["command_id"] == cid  # not prepared
    other = SocketPeer(broker.port)
    other.attach(1, b"second")
    result = other.call("dtx.commit", xid=xid(b"one-phase"), one_phase=True)
    assert result is not None and result["status"] == OK
    assert (count(other, "a"), count(other, "b")) == (0, 1)
    other.close()


def test_a_session_ending_inside_a_branch_leaves_it_rollback_only(
    broker: RunningBroker, peer: SocketPeer
) -> None:
    peer.call("dtx.select")
    peer.call("dtx.start", xid=xid(b"abandoned"))
    publish(peer, "b", b"never")
    peer.close()
    other = SocketPeer(broker.port)
    other.attach(1, b"after")
    result = other.call("dtx.prepare", xid=xid(b"abandoned"))
    assert result is not None and result["status"] == RBROLLBACK
    other.call("dtx.rollback", xid=xid(b"abandoned"))
    assert count(other, "b") == 0
    other.close()


def test_a_session_of_another_connection_joins_a_branch_and_commits_with_it(
    broker: RunningBroker, peer: SocketPeer
) -> None:
    """The joining connection may be served by another worker (``workers`` > 1): its work
    is prepared and committed with the branch all the same."""
    x = xid(b"joined")
    move_in_branch(peer, x)
    other = SocketPeer(broker.port)
    other.attach(1, b"joiner")
    other.call("dtx.select")
    status = other.call("dtx.start", xid=x, join=True)
    assert status is not None and status["status"] == OK
    publish(other, "b", b"joined")
    assert count(peer, "b") == 0  # held in the branch
    refused = peer.command("dtx.prepare", xid=x)  # (still associated: illegal-state)
    peer.flush()
    (exc,) = peer.wait("execution.exception")
    assert exc["command_id"] == refused and exc["error_code"] == 409
    status = other.call("dtx.end", xid=x)
    assert status is not None and status["status"] == OK
    result = other.call("dtx.prepare", xid=x)
    assert result is not None and result["status"] == OK
    result = other.call("dtx.commit", xid=x, one_phase=False)
    assert result is not None and result["status"] == OK
    assert (count(other, "a"), count(other, "b")) == (0, 2)
    other.close()
