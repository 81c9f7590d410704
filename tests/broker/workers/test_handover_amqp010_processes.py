"""An AMQP 0-10 connection moved to the worker that owns its queue (``move_connections``).

Real processes on 127.0.0.1 (``amqp10 broker --workers 2``), the bare 0-10 peer
(tests/amqp010/peer.py), as test_handover_amqp091_processes.py does for 0-9-1: a
connection is pinned to worker 0 by connecting until ``connection.start`` says it
(``amqp10:worker``: the accepting worker's number, on the owner too); its queue is one
worker 1 owns. Which worker serves it afterwards is told by worker 1's "moved here" line
(naming the client's port) and, beyond doubt, by SIGKILLing worker 0: a moved connection
carries on, one that stayed is lost with it. Every wait is bounded; none is a timed
assertion.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from amqp10.broker.amqp010.frontend import WORKER_PROPERTY
from tests.amqp010.peer import SocketPeer
from tests.broker.conftest import make_config
from tests.broker.test_workers import WAIT, Parent
from tests.broker.workers.test_amqp010_processes import publish, subscribe
from tests.broker.workers.test_handover_processes import MOVED, kill_worker, started
from tests.broker.workers.test_processes import owned_by
from tests.broker.workers_mode import write_config

pytestmark = pytest.mark.slow


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Parent]:
    """Two workers, connections moved."""
    yield from started(tmp_path)


@contextmanager
def on_worker(p: Parent, worker: int, *, heartbeat: int = 0) -> Iterator[SocketPeer]:
    """A 0-10 peer (a session attached) that worker ``worker`` accepted (the others closed)."""
    for _ in range(64):
        peer = SocketPeer(p.port, timeout=WAIT, heartbeat=heartbeat)
        if int(peer.server_properties[WORKER_PROPERTY]) == worker:
            try:
                peer.attach()
                yield peer
            finally:
                try:
                    peer.close()
                except OSError:  # (its worker was killed)
                    pass
            return
        peer.close()
    raise AssertionError(f"no connection on worker {worker}")  # pragma: no cover


def moved_line(p: Parent, peer: SocketPeer) -> None:
    p.wait_for(MOVED.format(owner=1, port=peer.sock.getsockname()[1], accepted=0))


def stayed(p: Parent, peer: SocketPeer) -> bool:
    return not any(f"127.0.0.1:{peer.sock.getsockname()[1]} moved here" in line for line in p.lines)


def take(peer: SocketPeer, n: int) -> list[bytes]:
    """``n`` transfers, accepted."""
    got = peer.wait("message.transfer", n)
    peer.call("message.accept", transfers=((got[0].id, got[-1].id),))
    return [t.body for t in got]


def lost(peer: SocketPeer, queue: str) -> bool:
    """Whether ``peer`` is gone (a query on it fails)."""
    try:
        peer.call("queue.query", queue=queue)
    except (AssertionError, OSError):
        return True
    return False


def test_a_subscriber_and_a_publisher_of_the_other_workers_queue_are_served_by_that_worker(broker: Parent) -> None:
    name = owned_by(1, "moved010")
    with ExitStack() as stack:
        sub = stack.enter_context(on_worker(broker, 0))
        pub = stack.enter_context(on_worker(broker, 0))
        sub.call("queue.declare", queue=name, durable=True)  # the deciding command: worker 1's queue
        moved_line(broker, sub)
        subscribe(sub, name, "d", 1000)
        bodies = [str(i).encode() for i in range(100)]
        for body in bodies[:1]:  # the first transfer to the default exchange decides
            publish(pub, name, body, durable=True)
        moved_line(broker, pub)
        for body in bodies[1:]:
            publish(pub, name, body, durable=True)
        assert take(sub, 100) == bodies  # in order, each once, accepted
        r = pub.call("queue.query", queue=name)
        assert r is not None and (r["message_count"], r["subscriber_count"]) == (0, 1)
        kill_worker(broker, 0)  # the worker that accepted both: they are not its any more
        for body in (b"a", b"b"):
            publish(pub, name, body)
        assert take(sub, 2) == [b"a", b"b"]


def test_a_connection_the_first_worker_sent_a_heartbeat_on_is_moved_too(broker: Parent) -> None:
    """The replay writes no heartbeat (no clock ran): it is compared without them."""
    name = owned_by(1, "beat010")
    with on_worker(broker, 0, heartbeat=3) as peer:
        peer.wait("connection.heartbeat")  # (worker 0 wrote it: in its record)
        peer.send("connection.heartbeat")
        peer.call("queue.declare", queue=name)
        moved_line(broker, peer)
        publish(peer, name, b"1")
        subscribe(peer, name, "d", 10)
        assert take(peer, 1) == [b"1"]


def test_a_connection_whose_first_command_names_no_queue_stays(broker: Parent) -> None:
    name = owned_by(1, "kept010")
    with ExitStack() as stack:
        staying = stack.enter_context(on_worker(broker, 0))
        moving = stack.enter_context(on_worker(broker, 0))
        staying.call("exchange.declare", exchange="x010moved", type="fanout")  # names no queue
        staying.call("queue.declare", queue=name)  # (a later command: not moved for it)
        publish(staying, name, b"1")
        moving.call("queue.query", queue=name)
        moved_line(broker, moving)
        subscribe(staying, name, "d", 10)
        assert take(staying, 1) == [b"1"]
        assert stayed(broker, staying)
        kill_worker(broker, 0)
        assert lost(staying, name)
        assert not lost(moving, name)


def test_without_the_flag_nothing_moves(tmp_path: Path) -> None:
    p = Parent.of_config(write_config(make_config(tmp_path), tmp_path / "broker.toml"), 2)
    try:
        p.wait_listening()
        name = owned_by(1, "unmoved010")
        with on_worker(p, 0) as peer:
            peer.call("queue.declare", queue=name)
            publish(peer, name, b"1")
            subscribe(peer, name, "d", 10)
            assert take(peer, 1) == [b"1"]
            assert not any("moved here" in line for line in p.lines)
            kill_worker(p, 0)
            assert lost(peer, name)
    finally:
        p.stop()
