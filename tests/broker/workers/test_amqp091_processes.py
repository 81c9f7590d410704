"""N worker processes are one broker for AMQP 0-9-1 clients (pika) on queues of either worker.

``amqp10 broker --workers 2`` on 127.0.0.1: pika connections are opened until one is
served by each worker (``connection.start`` names it), and each test uses queues one
worker owns from a connection of the other (and of its own). Every wait is bounded;
none is a timed assertion.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

import anyio
import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import AMQPConnectionError, ChannelClosedByBroker, NackError, UnroutableError

from amqp10.broker.amqp091.frontend import WORKER_PROPERTY
from amqp10.broker.amqp1.frontend import WORKER_PROPERTY as AMQP1_WORKER
from amqp10.client import connect
from amqp10.errors import AMQPError
from tests.broker.test_workers import WAIT, Parent

from .test_processes import owned_by

pytestmark = pytest.mark.slow


def _connect(p: Parent) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", p.port, heartbeat=0, socket_timeout=WAIT, blocked_connection_timeout=WAIT)
    )


def worker_of(conn: pika.BlockingConnection) -> int:
    return int(conn._impl.server_properties[WORKER_PROPERTY])


@contextmanager
def one_on_each(p: Parent) -> Iterator[dict[int, pika.BlockingConnection]]:
    """A pika connection served by worker 0 and one by worker 1 (the kernel spreads them)."""
    by_worker: dict[int, pika.BlockingConnection] = {}
    opened: list[pika.BlockingConnection] = []
    try:
        for _ in range(64):
            conn = _connect(p)
            opened.append(conn)
            by_worker.setdefault(worker_of(conn), conn)
            if len(by_worker) == 2:
                break
        assert sorted(by_worker) == [0, 1]
        for conn in opened:  # the spare ones
            if conn not in by_worker.values():
                conn.close()
        yield by_worker
    finally:
        for conn in opened:
            if conn.is_open:
                try:
                    conn.close()
                except AMQPConnectionError:  # its worker was killed
                    pass


def take(ch: BlockingChannel, queue: str, n: int, *, ack: bool = True) -> list[tuple[Any, bytes]]:
    """``n`` messages by ``basic.consume`` (each acknowledged unless not ``ack``): (method, body)."""
    got: list[tuple[Any, bytes]] = []
    for method, _, body in ch.consume(queue, inactivity_timeout=WAIT):
        assert method is not None, f"{len(got)} of {n} came"
        got.append((method, body))
        if ack:
            ch.basic_ack(method.delivery_tag)
        if len(got) == n:
            break
    return got


def test_published_with_confirms_on_one_worker_and_consumed_on_the_other_in_order(broker: Parent) -> None:
    with one_on_each(broker) as conns:
        for owner in (0, 1):
            name = owned_by(owner, "q91order")
            pub = conns[1 - owner].channel()  # publishes cross to the owner
            pub.queue_declare(name, durable=True)  # declared on the owner, from the other worker
            pub.confirm_delivery()
            for i in range(100):  # each confirmed only once the owner stored it
                pub.basic_publish("", name, str(i).encode(), pika.BasicProperties(delivery_mode=2), mandatory=True)
            for w in (0, 1):  # both workers answer with the owner's count
                ok = conns[w].channel().queue_declare(name, passive=True)
                assert ok.method.message_count == 100 and ok.method.consumer_count == 0
            sub = conns[1 - owner].channel()
            sub.basic_qos(prefetch_count=10)
            got = take(sub, name, 100)
            assert [body for _, body in got] == [str(i).encode() for i in range(100)]
            assert not any(m.redelivered for m, _ in got)
            sub.cancel()
            assert sub.queue_declare(name, passive=True).method.message_count == 0
            with pytest.raises(ChannelClosedByBroker) as e:  # not there: 404, from the owner
                conns[1 - owner].channel().queue_declare(owned_by(owner, "q91none"), passive=True)
            assert e.value.reply_code == 404


def filled(conn: pika.BlockingConnection, name: str, n: int) -> BlockingChannel:
    """A channel on ``conn`` that declared queue ``name`` and published ``n`` messages to it."""
    ch = conn.channel()
    ch.queue_declare(name)
    for i in range(n):
        ch.basic_publish("", name, str(i).encode())
    return ch


def test_prefetch_is_respected_across_workers(broker: Parent) -> None:
    with one_on_each(broker) as conns:
        name = owned_by(1, "q91prefetch")
        filled(conns[0], name, 50)
        sub = conns[0].channel()
        sub.basic_qos(prefetch_count=5)
        got = take(sub, name, 5, ack=False)
        conns[0].process_data_events(time_limit=0.3)  # nothing more comes while 5 are unacked
        owner = conns[1].channel()
        ok = owner.queue_declare(name, passive=True)
        assert ok.method.message_count == 45 and ok.method.consumer_count == 1
        sub.basic_ack(got[-1][0].delivery_tag, multiple=True)
        more = take(sub, name, 5, ack=False)
        assert [b for _, b in got + more] == [str(i).encode() for i in range(10)]
        assert owner.queue_declare(name, passive=True).method.message_count == 40


def test_a_smaller_prefetch_is_taken_back_from_the_owner(broker: Parent) -> None:
    """``basic.qos`` lowering a channel's prefetch (global: a consumer's own limit is fixed
    when it starts, as RabbitMQ's) on a queue the other worker owns: what the owner was
    granted beyond it is taken back, so what the consumer cannot take stays in the owner's
    queue (counted there), not waiting on the consumer's worker."""
    with one_on_each(broker) as conns:
        name = owned_by(1, "q91lowered")
        sub = conns[0].channel()
        sub.queue_declare(name)
        sub.basic_qos(prefetch_count=10, global_qos=True)
        got: list[bytes] = []
        sub.basic_consume(name, lambda c, m, p, b: got.append(b))
        owner = conns[1].channel()
        assert owner.queue_declare(name, passive=True).method.consumer_count == 1  # (its grant is there)
        sub.basic_qos(prefetch_count=2, global_qos=True)
        filled(conns[0], name, 6)
        deadline = time.monotonic() + WAIT
        while len(got) < 2:
            assert time.monotonic() < deadline, got
            conns[0].process_data_events(time_limit=0.05)
        conns[0].process_data_events(time_limit=0.3)  # nothing more comes while 2 are unacked
        assert got == [b"0", b"1"]
        assert owner.queue_declare(name, passive=True).method.message_count == 4


def test_competing_consumers_on_both_workers(broker: Parent) -> None:
    n = 200
    with one_on_each(broker) as conns:
        name = owned_by(1, "q91compete")
        chans = {w: conns[w].channel() for w in (0, 1)}
        chans[0].queue_declare(name)
        got: dict[int, list[int]] = {0: [], 1: []}
        for w, ch in chans.items():
            ch.basic_qos(prefetch_count=5)
            ch.basic_consume(name, lambda c, m, p, b, w=w: (got[w].append(int(b)), c.basic_ack(m.delivery_tag)))
        pub = conns[0].channel()
        pub.confirm_delivery()
        for i in range(n):
            pub.basic_publish("", name, str(i).encode())
        deadline = time.monotonic() + WAIT
        while len(got[0]) + len(got[1]) < n:
            assert time.monotonic() < deadline, f"{len(got[0])} + {len(got[1])} of {n}"
            for w in (0, 1):
                conns[w].process_data_events(time_limit=0.05)
        assert sorted(got[0] + got[1]) == list(range(n))  # each once
        assert got[0] and got[1]  # both workers' consumers took some
        assert got[0] == sorted(got[0]) and got[1] == sorted(got[1])


def test_outcomes_are_the_owners_queue_semantics(broker: Parent) -> None:
    with one_on_each(broker) as conns:
        dlq = owned_by(1, "q91dlq")
        name = next(n for n in (owned_by(1, f"q91dl{i}x") for i in range(20)) if n != dlq)
        ch = conns[0].channel()
        ch.queue_declare(dlq)
        ch.queue_declare(name, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
        for body in (b"requeued", b"rejected", b"recovered"):
            ch.basic_publish("", name, body)
        ch.basic_qos(prefetch_count=3)
        first = {body: m for m, body in take(ch, name, 3, ack=False)}
        ch.basic_nack(first[b"requeued"].delivery_tag, requeue=True)
        # the room the nack opened brings it back at once (on one broker too): taken before
        # the recover, which would requeue it again (its tag then unknown: the flaky 406)
        [(back, body)] = take(ch, name, 1, ack=False)
        assert body == b"requeued" and back.redelivered
        ch.basic_reject(first[b"rejected"].delivery_tag, requeue=False)  # dead-lettered by the owner
        ch.basic_recover(requeue=True)
        again = {body: m for m, body in take(ch, name, 2, ack=False)}
        assert set(again) == {b"requeued", b"recovered"}
        assert all(m.redelivered for m in again.values())
        for m in again.values():
            ch.basic_ack(m.delivery_tag)
        ch.cancel()
        other = conns[1].channel()
        assert other.queue_declare(dlq, passive=True).method.message_count == 1
        method, _, body = other.basic_get(dlq, auto_ack=True)
        assert body == b"rejected" and method is not None


def test_a_dead_letter_is_in_its_queue_on_another_owner_by_the_clients_next_method(broker: Parent) -> None:
    # the rejected message's queue on worker 1, its dead-letter queue on worker 0: the
    # client's get right after its reject (or nack) finds the dead letter, from either worker
    with one_on_each(broker) as conns:
        dlq = owned_by(0, "q91dead")
        name = owned_by(1, "q91work")
        ch = conns[0].channel()
        ch.queue_declare(dlq)
        ch.queue_declare(name, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
        for worker in (0, 1, 0, 1):
            ch = conns[worker].channel()
            for refuse in ("reject", "nack"):
                ch.basic_publish("", name, refuse.encode())
                method, _, _ = ch.basic_get(name)
                assert method is not None
                if refuse == "reject":
                    ch.basic_reject(method.delivery_tag, requeue=False)
                else:
                    ch.basic_nack(method.delivery_tag, requeue=False)
                method, _, body = ch.basic_get(dlq, auto_ack=True)
                assert method is not None and body == refuse.encode(), f"on worker {worker}"
            ch.close()


def test_get_purge_delete_and_a_channel_closing_with_unacked_messages(broker: Parent) -> None:
    with one_on_each(broker) as conns:
        name = owned_by(1, "q91get")
        ch = filled(conns[0], name, 5)
        method, _, body = ch.basic_get(name)  # taken on the owner, held here
        assert body == b"0" and method.message_count == 4 and not method.redelivered
        ch.basic_reject(method.delivery_tag, requeue=True)
        method, _, body = ch.basic_get(name)
        assert body == b"0" and method.redelivered  # back at the head, redelivered
        ch.basic_ack(method.delivery_tag)
        held = conns[0].channel()
        held.basic_qos(prefetch_count=2)
        assert len(take(held, name, 2, ack=False)) == 2
        owner = conns[1].channel()
        assert owner.queue_declare(name, passive=True).method.message_count == 2
        held.close()  # its unacked messages go back on the owner
        deadline = time.monotonic() + WAIT
        while owner.queue_declare(name, passive=True).method.message_count != 4:
            assert time.monotonic() < deadline
        assert ch.queue_purge(name).method.message_count == 4
        method, _, body = ch.basic_get(name)
        assert method is None
        ch.basic_publish("", name, b"last")
        assert ch.queue_delete(name).method.message_count == 1
        with pytest.raises(ChannelClosedByBroker) as e:
            owner.queue_declare(name, passive=True)
        assert e.value.reply_code == 404


def test_the_owners_consumer_timeout_closes_a_channel_on_the_other_worker(broker: Parent) -> None:
    with one_on_each(broker) as conns:
        name = owned_by(1, "q91slow")
        ch = conns[0].channel()  # (channel 1)
        ch.queue_declare(name, arguments={"x-consumer-timeout": 200})
        ch.basic_publish("", name, b"job")
        held: list[int] = []
        ch.basic_consume(name, lambda c, m, p, b: held.append(m.delivery_tag))
        conns[0].call_later(WAIT, ch.stop_consuming)  # (bounded: the test fails if it gets here)
        with pytest.raises(ChannelClosedByBroker) as e:
            ch.start_consuming()  # never acknowledged: closed by the timeout
        assert held == [1] and e.value.reply_code == 406
        assert e.value.reply_text.startswith("delivery acknowledgement on channel 1 timed out. Timeout value used: 200 ms")
        method, _, body = conns[1].channel().basic_get(name, auto_ack=True)  # back on the owner
        assert body == b"job" and method is not None and method.redelivered


def test_unroutable_and_full_are_answered_as_by_one_broker(broker: Parent) -> None:
    with one_on_each(broker) as conns:
        ch = conns[0].channel()
        ch.confirm_delivery()
        with pytest.raises(UnroutableError):  # no such queue on its owner: returned
            ch.basic_publish("", owned_by(1, "q91nowhere"), b"x", mandatory=True)
        small = owned_by(1, "q91small")
        ch.queue_declare(small, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
        ch.basic_publish("", small, b"1")
        with pytest.raises(NackError):  # the owner's queue is full: nacked
            ch.basic_publish("", small, b"2")
        for conn in conns.values():  # the empty name (amqplib's suite): no queue, on either worker
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_publish("", "", b"x")  # acked as unroutable, not nacked
            with pytest.raises(UnroutableError):
                ch.basic_publish("", "", b"x", mandatory=True)


def test_a_decimal_argument_is_declared_through_the_other_worker_and_again_on_both(broker: Parent) -> None:
    """A declaration put to the queue's owner carries its arguments as declared (a decimal
    has no AMQP 1.0 type: it aborted the client's connection), and the same declaration is
    answered again on either worker, a different one refused. (In x-queue-master-locator,
    which RabbitMQ 3.10 takes of any type and compares on a classic queue: a decimal in
    x-quorum-initial-group-size, as it was, it refuses at declaration.)"""
    name = owned_by(0, "q91decimal")
    arguments = {"x-queue-type": "classic", "x-queue-master-locator": Decimal("3.0")}
    with one_on_each(broker) as conns:
        ch = conns[1].channel()
        assert ch.queue_declare(name, durable=True, arguments=arguments).method.queue == name  # made on worker 0
        ch.basic_publish("", name, b"x")
        for worker in (1, 0, 1):
            ok = conns[worker].channel().queue_declare(name, durable=True, arguments=arguments)
            assert ok.method.message_count == 1
        for worker in (0, 1):
            with pytest.raises(ChannelClosedByBroker) as e:
                conns[worker].channel().queue_declare(
                    name, durable=True, arguments={**arguments, "x-queue-master-locator": Decimal("5")}
                )
            assert e.value.reply_code == 406


async def a_10_receiver_is_refused(port: int, worker: int, name: str) -> None:
    """A 1.0 receiver from ``name`` on ``worker`` is refused with amqp:resource-locked."""
    for _ in range(64):
        async with await connect(f"amqp://127.0.0.1:{port}", timeout=WAIT) as c:
            if int((c.remote_properties or {})[AMQP1_WORKER]) != worker:
                continue
            with pytest.raises(AMQPError) as refused:  # at the attach, or just after it
                receiver = await c.open_receiver(name, credit=1)
                await receiver.receive(timeout=WAIT)
            assert "amqp:resource-locked" in str(refused.value)
            return
    raise AssertionError("no connection on that worker")


def test_an_exclusive_consumer_holds_the_queue_on_every_worker(broker: Parent) -> None:
    with one_on_each(broker) as conns:
        for holder in (0, 1):  # the consumer on the owner, then on the other worker
            name = owned_by(1, f"q91excl{holder}")
            ch = conns[holder].channel()
            ch.queue_declare(name)
            tag = ch.basic_consume(name, lambda *a: None, exclusive=True)
            other = conns[1 - holder].channel()
            with pytest.raises(ChannelClosedByBroker) as e:
                other.basic_consume(name, lambda *a: None)
            assert e.value.reply_code == 403

            anyio.run(a_10_receiver_is_refused, broker.port, 1 - holder, name)
            ch.basic_cancel(tag)
            free = conns[1 - holder].channel()
            free.basic_consume(name, lambda *a: None, exclusive=True)  # free again
            with pytest.raises(ChannelClosedByBroker) as e:
                conns[holder].channel().basic_consume(name, lambda *a: None)
            assert e.value.reply_code == 403


def test_a_sigkilled_owner_loses_no_confirmed_message_and_consumers_carry_on(broker: Parent) -> None:
    name = owned_by(1, "q91durable")
    with one_on_each(broker) as conns:
        setup = conns[0].channel()
        setup.queue_declare(name, durable=True)
        consumer = conns[0].channel()  # on worker 0, consuming worker 1's queue throughout
        consumer.basic_qos(prefetch_count=20)
        got: list[int] = []
        consumer.basic_consume(name, lambda c, m, p, b: (got.append(int(b)), c.basic_ack(m.delivery_tag)))
        publisher = _connect(broker)
        while worker_of(publisher) != 0:
            publisher.close()
            publisher = _connect(broker)
        pub = publisher.channel()
        pub.confirm_delivery()
        confirmed: list[int] = []
        nacked = 0
        killed = False
        mark = len(broker.lines)
        deadline = time.monotonic() + WAIT * 3
        i = 0
        while len(confirmed) < 300:
            assert time.monotonic() < deadline, f"{len(confirmed)} confirmed, {nacked} nacked"
            try:
                pub.basic_publish("", name, str(i).encode(), pika.BasicProperties(delivery_mode=2))
                confirmed.append(i)
            except NackError:  # the owner was unavailable too long: never confirmed, so never counted as sent
                nacked += 1
                conns[0].process_data_events(time_limit=0.02)
            i += 1
            conns[0].process_data_events(time_limit=0)
            if len(confirmed) == 100 and not killed:
                killed = True
                os.kill(broker.worker_pids()[1], signal.SIGKILL)
                broker.wait_for(r"worker 1 \(pid \d+\) ended .*killed by SIGKILL", mark)
        # (published while the owner was down: held for it and confirmed once it is back;
        # nacked only if it was not back within worker_down_hold)
        deadline = time.monotonic() + WAIT * 2
        while not set(confirmed) <= set(got):  # the consumer on worker 0 carried on
            assert time.monotonic() < deadline, f"{len(set(confirmed) - set(got))} confirmed not received"
            conns[0].process_data_events(time_limit=0.1)
        publisher.close()
