"""Consumer priorities over the wire: pika's ``x-priority`` consume argument and a 1.0
receiver's ``rabbitmq:priority`` link property (python-qpid-proton), counted."""

from __future__ import annotations

import time
from typing import Any

import pika
import pika.exceptions
import pytest
from proton import Link, Timeout, symbol
from proton.reactor import LinkOption
from proton.utils import BlockingConnection

from tests.broker.amqp091.test_amqp091_pika import T, broker, conn, wait_until

from .conftest import RunningBroker
from .workers_mode import worker_count

__all__ = ["broker", "conn"]  # fixtures

pytestmark = pytest.mark.proton


def consume(ch: Any, queue: str, got: list[bytes], **arguments: Any) -> None:
    ch.basic_consume(queue, lambda _ch, _m, _p, body: got.append(body), arguments=arguments or None)


def test_consumer_priorities_are_announced(conn: pika.BlockingConnection) -> None:
    assert conn._impl.server_properties["capabilities"]["consumer_priorities"] is True


def test_higher_x_priority_consumer_first_while_it_has_prefetch_room(conn: pika.BlockingConnection) -> None:
    pub, high, low = conn.channel(), conn.channel(), conn.channel()
    pub.queue_declare("prio")
    high.basic_qos(prefetch_count=2)
    got_high: list[bytes] = []
    got_low: list[bytes] = []
    consume(low, "prio", got_low)  # the default priority, 0, and no prefetch limit
    consume(high, "prio", got_high, **{"x-priority": 10})
    for i in range(10):
        pub.basic_publish("", "prio", b"%d" % i)
    wait_until(conn, lambda: len(got_high) + len(got_low) == 10)
    assert got_high == [b"0", b"1"]  # then it had no room: the rest went lower
    assert got_low == [b"%d" % i for i in range(2, 10)]
    high.basic_ack(0, multiple=True)  # room for 2 again
    for i in range(10, 13):
        pub.basic_publish("", "prio", b"%d" % i)
    wait_until(conn, lambda: len(got_high) + len(got_low) == 13)
    assert got_high[2:] == [b"10", b"11"] and got_low[8:] == [b"12"]


def test_equal_priorities_share_round_robin(conn: pika.BlockingConnection) -> None:
    pub, a, b, low = conn.channel(), conn.channel(), conn.channel(), conn.channel()
    pub.queue_declare("prio-rr")
    got: dict[str, list[bytes]] = {"a": [], "b": [], "low": []}
    consume(a, "prio-rr", got["a"], **{"x-priority": 5})
    consume(b, "prio-rr", got["b"], **{"x-priority": 5})
    consume(low, "prio-rr", got["low"], **{"x-priority": -3})
    for i in range(20):
        pub.basic_publish("", "prio-rr", b"%d" % i)
    wait_until(conn, lambda: sum(map(len, got.values())) == 20)
    assert (len(got["a"]), len(got["b"]), len(got["low"])) == (10, 10, 0)


def test_x_priority_must_be_an_integer(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.queue_declare("prio-bad")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_consume("prio-bad", lambda *a: None, arguments={"x-priority": "high"})
    assert info.value.reply_code == 406
    assert "invalid arg 'x-priority' for queue 'prio-bad'" in info.value.reply_text


class Priority(LinkOption):
    """A receiver asking for a consumer priority, as RabbitMQ's 1.0 clients do."""

    def __init__(self, value: int) -> None:
        self.value = value

    def apply(self, link: Link) -> None:
        link.properties = {symbol("rabbitmq:priority"): self.value}


def test_1_0_receiver_with_rabbitmq_priority_beats_a_0_9_1_consumer(
    broker: RunningBroker, conn: pika.BlockingConnection
) -> None:
    ch = conn.channel()
    ch.queue_declare("prio-10")
    got_low: list[bytes] = []
    c = BlockingConnection(f"amqp://{broker.url}", timeout=T)
    try:
        high = c.create_receiver("prio-10", credit=2, options=Priority(5))
        granted = high.link.credit  # (python-qpid-proton's prefetch window, 2, adds to it: 4)
        # its credit is at the queue once a message reaches it there alone (with workers = 2,
        # a receiver on another worker than the queue's grants its credit there after its
        # attach is answered, and a publish from the queue's worker could come first)
        ch.basic_publish("", "prio-10", b"probe", pika.BasicProperties(message_id="probe"))
        assert high.receive(timeout=T).id == "probe"
        high.accept()
        c.create_sender("prio-10-other")  # a round trip: what python-qpid-proton flowed meanwhile is in
        n = high.link.credit  # (once a message came, it lowered the credit: to 1)
        assert 0 < n < granted
        consume(ch, "prio-10", got_low)
        pub = conn.channel()
        pub.confirm_delivery()  # each confirmed once queued and handed on: before proton flows more
        for i in range(10):
            pub.basic_publish("", "prio-10", b"%d" % i, pika.BasicProperties(message_id=str(i)))
        taken: list[str] = []
        deadline = time.monotonic() + T
        while len(taken) + len(got_low) < 10:
            assert time.monotonic() < deadline, (taken, got_low)
            conn.process_data_events(time_limit=0.02)
            try:
                taken.append(high.receive(timeout=0.02).id)
            except Timeout:
                pass
        # the higher priority first, as far as its credit went: with workers = 2 the lowered
        # credit may reach the queue's worker during the publishes (or after: what was left
        # of the credit granted was there), and what the receiver no longer had credit for
        # waits on its own worker for its next credit, never for the lower consumer
        k = len(taken)
        assert k == n or (worker_count() > 1 and n <= k < granted), (taken, got_low)
        assert taken == [str(i) for i in range(k)]
        assert got_low == [b"%d" % i for i in range(k, 10)]
    finally:
        c.close()
