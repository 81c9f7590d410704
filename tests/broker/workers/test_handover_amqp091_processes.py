"""An AMQP 0-9-1 connection moved to the worker that owns its queue (``move_connections``).

Real processes on 127.0.0.1 (``amqp10 broker --workers 2``), pika clients, as
test_handover_processes.py does for 1.0: a connection is pinned to worker 0 by connecting
until ``connection.start`` says it (``amqp10:worker``); its queue is one worker 1 owns.
Which worker serves it afterwards is told by worker 1's "moved here" line (naming the
client's port) and, beyond doubt, by SIGKILLing worker 0: a moved connection carries on,
one that stayed is lost with it. Every wait is bounded; none is a timed assertion.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import AMQPError

from amqp10.broker.amqp091.frontend import WORKER_PROPERTY
from tests.broker.conftest import make_config
from tests.broker.test_workers import Parent
from tests.broker.workers.test_amqp091_processes import WAIT, _connect
from tests.broker.workers.test_amqp091_processes import take as take_acked
from tests.broker.workers.test_handover_processes import MOVED, kill_worker, started
from tests.broker.workers.test_processes import owned_by
from tests.broker.workers_mode import write_config

pytestmark = pytest.mark.slow


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Parent]:
    """Two workers, connections moved."""
    yield from started(tmp_path)


@contextmanager
def on_worker(
    p: Parent, worker: int, connect: Callable[[Parent], pika.BlockingConnection] = _connect
) -> Iterator[pika.BlockingConnection]:
    """A pika connection (made by ``connect``) that worker ``worker`` accepted (the others closed)."""
    for _ in range(64):
        conn = connect(p)
        if int(conn._impl.server_properties[WORKER_PROPERTY]) == worker:
            try:
                yield conn
            finally:
                if conn.is_open:
                    try:
                        conn.close()
                    except AMQPError:  # (its worker was killed)
                        pass
            return
        conn.close()
    raise AssertionError(f"no connection on worker {worker}")  # pragma: no cover


def local_port(conn: pika.BlockingConnection) -> int:
    return int(conn._impl._transport._sock.getsockname()[1])


def moved_line(p: Parent, conn: pika.BlockingConnection) -> None:
    p.wait_for(MOVED.format(owner=1, port=local_port(conn), accepted=0))


def take(ch: BlockingChannel, queue: str, n: int) -> list[bytes]:
    """``n`` messages by ``basic.consume``, each acknowledged; then the consumer cancelled."""
    got = [body for _, body in take_acked(ch, queue, n)]
    ch.cancel()
    return got


def publish_confirmed(ch: BlockingChannel, queue: str, bodies: list[bytes]) -> None:
    for body in bodies:  # (a nack or an unroutable message raises)
        ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2), mandatory=True)


def lost(conn: pika.BlockingConnection, queue: str) -> bool:
    """Whether ``conn`` is gone (a declare on it fails)."""
    try:
        conn.channel().queue_declare(queue, passive=True)
    except AMQPError:
        return True
    return False


def test_a_publisher_and_a_consumer_of_the_other_workers_queue_are_served_by_that_worker(broker: Parent) -> None:
    name = owned_by(1, "moved91")
    with ExitStack() as stack:
        sub_conn = stack.enter_context(on_worker(broker, 0))
        pub_conn = stack.enter_context(on_worker(broker, 0))
        sub = sub_conn.channel()
        sub.basic_qos(prefetch_count=10)  # (replayable: still movable after it)
        sub.queue_declare(name, durable=True)  # the deciding method: worker 1's queue
        moved_line(broker, sub_conn)
        pub = pub_conn.channel()
        pub.confirm_delivery()  # (replayable)
        pub.queue_declare(name, durable=True)
        moved_line(broker, pub_conn)
        bodies = [str(i).encode() for i in range(200)]
        publish_confirmed(pub, name, bodies)
        assert take(sub, name, 200) == bodies  # in order, each once, acknowledged
        assert sub.queue_declare(name, passive=True).method.message_count == 0
        kill_worker(broker, 0)  # the worker that accepted both: they are not its any more
        more = [b"a", b"b", b"c"]
        publish_confirmed(pub, name, more)
        assert take(sub, name, 3) == more
        assert int(pub_conn._impl.server_properties[WORKER_PROPERTY]) == 0  # (what its start said)


def test_a_publisher_to_the_default_exchange_is_moved_at_its_first_publish(broker: Parent) -> None:
    name = owned_by(1, "direct91")
    with ExitStack() as stack:
        owner = stack.enter_context(on_worker(broker, 1))
        owner.channel().queue_declare(name)  # (on its owner: nothing moves)
        pub_conn = stack.enter_context(on_worker(broker, 0))
        pub = pub_conn.channel()
        for i in range(20):  # no declare: the first publish names the queue
            pub.basic_publish("", name, str(i).encode())
        moved_line(broker, pub_conn)
        kill_worker(broker, 0)
        pub.basic_publish("", name, b"after")
        assert take(owner.channel(), name, 21) == [*(str(i).encode() for i in range(20)), b"after"]


def _beating(p: Parent) -> pika.BlockingConnection:
    """A pika connection with a heartbeat every second (the broker sends one each half)."""
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", p.port, heartbeat=1, socket_timeout=WAIT, blocked_connection_timeout=WAIT)
    )


def test_a_connection_that_heartbeats_before_its_first_queue_method_is_moved(broker: Parent) -> None:
    """Heartbeats both ways between ``channel.open`` and the deciding method: the worker
    that takes the connection over replays it all the same, then beats on its own timer."""
    name = owned_by(1, "beating91")
    with on_worker(broker, 0, _beating) as conn:
        ch = conn.channel()
        conn.sleep(2.0)  # (pika reads and sends heartbeats meanwhile)
        ch.confirm_delivery()
        ch.queue_declare(name)  # the deciding method
        moved_line(broker, conn)
        kill_worker(broker, 0)
        conn.sleep(2.0)  # worker 1's heartbeats keep it open
        publish_confirmed(ch, name, [b"1", b"2"])
        assert take(ch, name, 2) == [b"1", b"2"]


def test_a_connection_that_published_to_an_exchange_first_stays_and_works(broker: Parent) -> None:
    """A publish to ``amq.fanout`` is not replayable: that connection is served where it
    landed; one beside it that declared the queue first is moved."""
    name = owned_by(1, "kept91")
    with ExitStack() as stack:
        moving = stack.enter_context(on_worker(broker, 0))
        staying = stack.enter_context(on_worker(broker, 0))
        ch = staying.channel()
        ch.basic_publish("amq.fanout", "", b"to no one")
        ch.confirm_delivery()
        ch.queue_declare(name)
        publish_confirmed(ch, name, [b"1", b"2"])
        assert take(ch, name, 2) == [b"1", b"2"]
        moving.channel().queue_declare(name, passive=True)
        moved_line(broker, moving)
        assert not any(f"127.0.0.1:{local_port(staying)} moved here" in line for line in broker.lines)
        kill_worker(broker, 0)
        assert lost(staying, name)
        assert not lost(moving, name)


def test_a_connection_whose_first_queue_is_local_stays(broker: Parent) -> None:
    with on_worker(broker, 0) as conn:
        ch = conn.channel()
        ch.queue_declare(owned_by(0, "local91"))
        remote = owned_by(1, "remote91")
        ch.queue_declare(remote)  # (a later method: not moved for it)
        publish_confirmed(ch, remote, [b"x"])
        assert take(ch, remote, 1) == [b"x"]
        kill_worker(broker, 0)
        assert lost(conn, remote)


def test_a_connection_the_owner_cannot_take_stays_and_works(tmp_path: Path) -> None:
    for p in started(tmp_path):
        (tmp_path / "workers" / "handover-1.sock").unlink()  # worker 1 cannot be reached
        name = owned_by(1, "unreached91")
        with on_worker(p, 0) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.queue_declare(name)  # (set aside, then handled here)
            publish_confirmed(ch, name, [b"1", b"2", b"3"])
            assert take(ch, name, 3) == [b"1", b"2", b"3"]
            kill_worker(p, 0)
            assert lost(conn, name)


def test_without_the_flag_nothing_moves(tmp_path: Path) -> None:
    p = Parent.of_config(write_config(make_config(tmp_path), tmp_path / "broker.toml"), 2)
    try:
        p.wait_listening()
        name = owned_by(1, "unmoved91")
        with on_worker(p, 0) as conn:
            ch = conn.channel()
            ch.queue_declare(name)
            publish_confirmed(ch, name, [b"1"])
            assert take(ch, name, 1) == [b"1"]
            assert not any("moved here" in line for line in p.lines)
            kill_worker(p, 0)
            assert lost(conn, name)
    finally:
        p.stop()


def test_publishers_apart_moves_a_publisher_at_its_first_publish_and_a_consumer_at_its_consume(tmp_path: Path) -> None:
    """``publishers_apart``: connections that declare their queue first (as most clients
    do) are moved when they next publish or consume: a publisher to the worker after the
    queue's owner, a consumer to the owner. Each declaration was answered where the
    connection was accepted, with the queue's counts then (the other worker's replay
    answers it from the metadata, not sent); every message reaches the consumer once, in
    order, each confirmed."""
    for p in started(tmp_path, publishers_apart=True):
        name = owned_by(1, "apart91")
        with ExitStack() as stack:
            stays = stack.enter_context(on_worker(p, 0))  # accepted by the worker after the owner
            ch0 = stays.channel()
            ch0.confirm_delivery()
            assert ch0.queue_declare(name, durable=True).method.message_count == 0
            ch0.queue_declare(owned_by(0, "after91"))
            publish_confirmed(ch0, name, [b"a", b"b"])  # a publisher already where it goes: not moved
            pub_conn = stack.enter_context(on_worker(p, 1))  # accepted by the owner
            pub = pub_conn.channel()
            pub.confirm_delivery()
            assert pub.queue_declare(name, durable=True).method.message_count == 2  # answered by worker 1
            publish_confirmed(pub, name, [b"c"])  # the deciding method: moved away from the owner
            p.wait_for(MOVED.format(owner=0, port=local_port(pub_conn), accepted=1))
            big_conn = stack.enter_context(on_worker(p, 1))  # a first message of 200 KiB: recorded whole, moved too
            big = big_conn.channel()
            big.queue_declare(name, durable=True)
            large = bytes(range(256)) * 800
            publish_confirmed(big, name, [large])
            p.wait_for(MOVED.format(owner=0, port=local_port(big_conn), accepted=1))
            sub_conn = stack.enter_context(on_worker(p, 0))
            sub = sub_conn.channel()
            declared = sub.queue_declare(name, durable=True).method  # answered through worker 0
            assert (declared.message_count, declared.consumer_count) == (4, 0)
            sub.basic_qos(prefetch_count=10)
            bodies = [str(i).encode() for i in range(100)]
            for i, body in enumerate(bodies):
                publish_confirmed(pub if i % 2 else ch0, name, [body])
            assert take(sub, name, 104) == [b"a", b"b", b"c", large, *bodies]  # its consume moved it to the owner
            p.wait_for(MOVED.format(owner=1, port=local_port(sub_conn), accepted=0))
            assert not any(f"127.0.0.1:{local_port(stays)} moved here" in line for line in p.lines)
            kill_worker(p, 1)  # the owner, where the consumer is now: the publisher moved away is not
            assert lost(sub_conn, name)
            assert not lost(pub_conn, owned_by(0, "after91"))
            assert not lost(big_conn, owned_by(0, "after91"))
            assert not lost(stays, owned_by(0, "after91"))
