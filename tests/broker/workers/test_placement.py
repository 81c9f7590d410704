"""Nodes placed on the worker of the connection that made them (``amqp10 broker --workers 2``).

An exclusive queue is made on its declaring connection's worker, whatever the hash of
its name says, and every worker knows it is there (workers/placing.py): another
connection, on either worker, is refused (0-9-1 RESOURCE_LOCKED 405, 1.0
``amqp:resource-locked``); it goes when its connection closes or its worker dies. Real
processes on 127.0.0.1, pika and our client pinned to a worker; every wait is bounded,
none is a timed assertion.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from functools import partial

import anyio
import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import ChannelClosedByBroker, UnroutableError

from amqp10.amqp091 import ConnectionState as ConnectionState091
from amqp10.amqp091 import MethodReceived
from amqp10.amqp091 import methods as m
from amqp10.broker.amqp091.frontend import WORKER_PROPERTY
from amqp10.broker.amqp1.frontend import WORKER_PROPERTY as AMQP1_WORKER
from amqp10.client import connect
from amqp10.message import Message
from amqp10.types import Accepted
from tests.broker.amqp091.test_amqp091_pika import EngineClient
from tests.broker.test_workers import WAIT, Parent

from .test_amqp091_processes import _connect, a_10_receiver_is_refused, one_on_each, worker_of
from .test_processes import owned_by

pytestmark = pytest.mark.slow


def _refused_405(conn: pika.BlockingConnection, what: Callable[[BlockingChannel], object]) -> None:
    """``what`` on a new channel of ``conn`` closes it with RESOURCE_LOCKED."""
    with pytest.raises(ChannelClosedByBroker) as e:
        what(conn.channel())
    assert e.value.reply_code == 405, e.value


def _locked_for(others: list[tuple[int, pika.BlockingConnection]], name: str, port: int) -> None:
    """Each of ``others`` (a worker, a connection on it) may publish to ``name`` but not use
    it otherwise; nor may a 1.0 receiver on that worker."""
    for w, other in others:
        _refused_405(other, lambda ch: ch.queue_declare(name, passive=True))
        _refused_405(other, lambda ch: ch.queue_declare(name))
        _refused_405(other, lambda ch: ch.queue_declare(name, exclusive=True))
        _refused_405(other, lambda ch: ch.basic_consume(name, lambda *a: None))
        _refused_405(other, lambda ch: ch.basic_get(name))
        _refused_405(other, lambda ch: ch.queue_purge(name))
        _refused_405(other, lambda ch: ch.queue_delete(name))
        pub = other.channel()
        pub.confirm_delivery()
        pub.basic_publish("", name, f"from {w}".encode(), mandatory=True)
        pub.close()  # publishing is anyone's
        anyio.run(a_10_receiver_is_refused, port, w, name)


def test_an_exclusive_queue_is_its_connections_on_every_worker(broker: Parent) -> None:
    for declarer in (0, 1):
        for hashed in (0, 1):  # its name's hash says this worker, or the other one
            name = owned_by(hashed, f"excl{declarer}{hashed}-")
            with one_on_each(broker) as conns:
                extra = _connect(broker)  # a second connection on the declarer's worker
                while worker_of(extra) != declarer:
                    extra.close()
                    extra = _connect(broker)
                mine = conns[declarer]
                ch = mine.channel()
                ch.queue_declare(name, exclusive=True)
                _locked_for([(1 - declarer, conns[1 - declarer]), (declarer, extra)], name, broker.port)
                bodies = sorted(b.decode() for _, _, b in _take(ch, name, 2))
                assert bodies == ["from 0", "from 1"]
                ok = ch.queue_declare(name, passive=True)  # its own connection may
                assert ok.method.message_count == 0
                mine.close()  # it goes with its connection: anyone may declare the name again
                free = conns[1 - declarer].channel()
                assert free.queue_declare(name).method.message_count == 0
                free.queue_delete(name)
                extra.close()


def test_an_exclusive_queues_bindings_are_every_workers_while_it_lives(broker: Parent) -> None:
    """A binding to an exclusive queue routes a message published on the other worker to it;
    when the queue goes with its connection, the binding goes there too: an exclusive queue
    of that name made again, and not bound, gets nothing through the exchange."""
    for declarer in (0, 1):
        name = owned_by(1 - declarer, f"exclbound{declarer}-")  # its name's hash: the other worker
        with one_on_each(broker) as conns:
            mine = conns[declarer].channel()
            mine.queue_declare(name, exclusive=True)
            mine.queue_bind(name, "amq.direct", routing_key=name)
            other = conns[1 - declarer].channel()
            other.confirm_delivery()
            other.basic_publish("amq.direct", name, b"routed", mandatory=True)  # confirmed: routed and taken
            assert _take(mine, name, 1)[0][2] == b"routed"
            conns[declarer].close()  # the queue goes, and with it its binding on every worker
        with one_on_each(broker) as conns:
            conns[declarer].channel().queue_declare(name, exclusive=True)  # (declare-ok: every worker placed it)
            other = conns[1 - declarer].channel()
            other.confirm_delivery()
            with pytest.raises(UnroutableError):
                other.basic_publish("amq.direct", name, b"unbound", mandatory=True)


def _take(ch: BlockingChannel, name: str, n: int) -> list[tuple[object, object, bytes]]:
    got = []
    for _ in range(n):
        for _ in range(200):  # (bounded: a publish from the other worker may still be crossing)
            method, props, body = ch.basic_get(name, auto_ack=True)
            if method is not None:
                got.append((method, props, body))
                break
            ch.connection.process_data_events(time_limit=WAIT / 200)
    assert len(got) == n
    return got


def test_an_exclusive_queue_goes_when_its_worker_dies(broker: Parent) -> None:
    name = owned_by(1, "excldies")
    with one_on_each(broker) as conns:
        conns[0].channel().queue_declare(name, exclusive=True)  # placed on worker 0
        _refused_405(conns[1], lambda ch: ch.queue_declare(name))
        mark = len(broker.lines)
        os.kill(broker.worker_pids()[0], signal.SIGKILL)
        broker.wait_for(r"worker=0 logger=amqp10.broker msg=.listening on", mark)
        ch = conns[1].channel()
        for _ in range(100):  # (bounded: the parent's unplace reaches worker 1 as worker 0 restarts)
            try:
                ch.queue_declare(name)
                break
            except ChannelClosedByBroker as exc:
                assert exc.reply_code == 405
                conns[1].process_data_events(time_limit=WAIT / 100)
                ch = conns[1].channel()
        ch.basic_publish("", name, b"x")
        assert ch.queue_declare(name, passive=True).method.message_count in (0, 1)
        assert _take(ch, name, 1)[0][2] == b"x"


def test_queue_delete_of_another_workers_queue_answers_before_the_cancels(broker: Parent) -> None:
    """RabbitMQ's order, as on one broker (tests/broker/amqp091/test_amqp091_rabbitmq_edges.py):
    delete-ok, then the basic.cancel of the channel's consumer it caused."""
    name = owned_by(1, "delorder")
    c = _engine_on(broker, 0)
    try:
        ch = c.open_channel()
        c.conn.send_method(ch, m.QueueDeclare(queue=name, durable=True))
        c.conn.send_method(ch, m.BasicConsume(queue=name, consumer_tag="c"))
        c.conn.send_method(ch, m.QueueDelete(queue=name))
        c.flush()

        def seen() -> list[str]:
            return [type(e.method).__name__ for e in c.events if isinstance(e, MethodReceived)]

        c.until(lambda: "BasicCancel" in seen() and "QueueDeleteOk" in seen())
        assert seen()[-2:] == ["QueueDeleteOk", "BasicCancel"]
    finally:
        c.close()


def _is_open(c: EngineClient) -> bool:
    return c.conn.state is ConnectionState091.OPEN


def _engine_on(p: Parent, worker: int) -> EngineClient:
    """The 0-9-1 engine as a client, on a connection served by ``worker``."""
    for _ in range(64):
        c = EngineClient(p.port)
        c.until(partial(_is_open, c))
        if int(c.conn.peer_properties[WORKER_PROPERTY]) == worker:
            return c
        c.close()
    raise AssertionError(f"no connection on worker {worker}")


def _gone(conn: pika.BlockingConnection, name: str) -> bool:
    """Whether ``name`` is no more (a passive declare from ``conn`` answers 404)."""
    ch = conn.channel()
    try:
        ch.queue_declare(name, passive=True)
    except ChannelClosedByBroker as exc:
        assert exc.reply_code == 404
        return True
    ch.close()
    return False


def _until_gone(conns: dict[int, pika.BlockingConnection], name: str) -> None:
    for _ in range(200):  # (bounded: the last consumer's cancel reaches the owner after its cancel-ok)
        if all(_gone(c, name) for c in conns.values()):
            return
        conns[0].process_data_events(time_limit=WAIT / 200)
    raise AssertionError(f"{name} is still there")


def test_an_auto_delete_queue_goes_with_its_last_consumer_on_any_worker(broker: Parent) -> None:
    name = owned_by(1, "autodel")
    with one_on_each(broker) as conns:
        conns[0].channel().queue_declare(name, auto_delete=True)  # its record on worker 0, the queue on 1
        ch0 = conns[0].channel()
        ch0.basic_get(name)  # a get is no consumer: it never had one, so it stays (RabbitMQ)
        assert not _gone(conns[1], name)
        consumers = {}
        for w in (0, 1):
            ch = conns[w].channel()
            consumers[w] = (ch, ch.basic_consume(name, lambda *a: None))
        for first in (1, 0):  # the owner's own consumer goes first, then the other worker's
            ch, tag = consumers[first]
            ch.basic_cancel(tag)
            if first == 1:
                assert not _gone(conns[0], name) and not _gone(conns[1], name)  # one consumer left
        _until_gone(conns, name)


def test_x_expires_runs_on_the_owner_only(broker: Parent) -> None:
    """Worker 0's record of worker 1's queue does not expire it while the owner has a consumer."""
    name = owned_by(1, "expires")
    with one_on_each(broker) as conns:
        conns[0].channel().queue_declare(name, arguments={"x-expires": 300})
        ch = conns[1].channel()
        tag = ch.basic_consume(name, lambda *a: None)
        for _ in range(10):  # well past x-expires, in use all along
            conns[0].process_data_events(time_limit=0.1)
            conns[1].process_data_events(time_limit=0.1)
        assert not _gone(conns[0], name) and not _gone(conns[1], name)
        ch.basic_cancel(tag)  # unused from now: its owner expires it
        _until_gone(conns, name)


def test_direct_reply_to_reaches_a_requester_on_the_other_worker(broker: Parent) -> None:
    """0-9-1 ``amq.rabbitmq.reply-to``: the reply address names the requester's worker, and a
    reply published on the other worker (pika, or a 1.0 sender) reaches it."""
    for mine in (0, 1):
        with one_on_each(broker) as conns:
            got: list[bytes] = []
            req = conns[mine].channel()
            req.basic_consume("amq.rabbitmq.reply-to", partial(_keep, got), auto_ack=True)
            requests = owned_by(1 - mine, f"rpc{mine}-")
            req.queue_declare(requests)
            req.basic_publish("", requests, b"ask", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to"))
            resp = conns[1 - mine].channel()
            props = _take(resp, requests, 1)[0][1]
            address = props.reply_to  # type: ignore[attr-defined]
            assert address.startswith(f"amq.rabbitmq.reply-to.w{mine}.")
            resp.confirm_delivery()
            resp.basic_publish("", address, b"answer", mandatory=True)  # confirmed: it was taken
            anyio.run(_send_10, broker.port, 1 - mine, address, "from 1.0")
            for _ in range(200):  # (bounded)
                if len(got) == 2:
                    break
                conns[mine].process_data_events(time_limit=WAIT / 200)
            assert got == [b"answer", b"from 1.0"]
            resp.queue_delete(requests)


def _keep(into: list[bytes], ch: object, method: object, props: object, body: bytes) -> None:
    into.append(body)


async def _send_10(port: int, worker: int, address: str, body: str) -> None:
    """Send ``body`` to ``address`` from a 1.0 connection on ``worker`` (accepted)."""
    for _ in range(64):
        async with await connect(f"amqp://127.0.0.1:{port}", timeout=WAIT) as c:
            if int((c.remote_properties or {})[AMQP1_WORKER]) != worker:
                continue
            sender = await c.open_sender(address)
            assert isinstance(await sender.send(Message(body=body)), Accepted)
            return
    raise AssertionError(f"no connection on worker {worker}")
