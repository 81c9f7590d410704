"""RabbitMQ 4's queue semantics over sockets, with real clients (pika for 0-9-1, ours for
1.0): the quorum queues' default delivery limit, consumer timeouts, delayed retry by a
``modified`` outcome, strict priorities up to 32 levels, single active consumer on a
stream, the leader locator reported."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pika
import pika.exceptions
import pytest

from amqp10.client import connect
from amqp10.errors import LinkError
from amqp10.message import Message
from amqp10.types import symbol
from tests.broker.conftest import RunningBroker, broker_with
from tests.broker.management.test_rabbitmq_api import call

T = 10.0  # seconds any single wait may take


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_with(tmp_path) as b:
        yield b


@pytest.fixture
def channel(broker: RunningBroker) -> Iterator[Any]:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port, blocked_connection_timeout=T))
    yield conn.channel()
    if conn.is_open:
        conn.close()


def get_one(ch: Any, queue: str) -> tuple[Any, Any, bytes]:
    """The next message of ``queue`` by basic.get, waiting at most T seconds."""
    deadline = time.monotonic() + T
    while True:
        method, props, body = ch.basic_get(queue)
        if method is not None:
            return method, props, body
        assert time.monotonic() < deadline, f"nothing arrived in {queue!r}"
        ch.connection.process_data_events(time_limit=0.05)


# -- 0-9-1 with pika --------------------------------------------------------------------------
def test_pika_a_quorum_queue_dead_letters_a_message_requeued_more_than_20_times(channel: Any) -> None:
    ch = channel
    ch.queue_declare("dead")
    ch.queue_bind("dead", "amq.fanout")
    ch.queue_declare("work", durable=True, arguments={"x-queue-type": "quorum", "x-dead-letter-exchange": "amq.fanout"})
    ch.basic_publish("", "work", b"poison")
    for i in range(21):
        method, _, body = get_one(ch, "work")
        assert body == b"poison" and method.redelivered == (i > 0)
        ch.basic_nack(method.delivery_tag, requeue=True)
    _, props, body = get_one(ch, "dead")
    assert body == b"poison"
    (death,) = props.headers["x-death"]
    assert death["reason"] == "delivery_limit" and death["queue"] == "work"
    assert ch.queue_declare("work", passive=True).method.message_count == 0


def test_pika_strict_priorities_up_to_32_levels(channel: Any) -> None:
    ch = channel
    ch.queue_declare("prio", arguments={"x-max-priority": 32})
    for p in (3, 31, 17, 0, 9, 30):
        ch.basic_publish("", "prio", str(p).encode(), pika.BasicProperties(priority=p))
    got = [int(get_one(ch, "prio")[2]) for _ in range(6)]
    assert got == [31, 30, 17, 9, 3, 0]


def test_pika_consumer_timeout_closes_the_channel_and_the_message_goes_back(broker: RunningBroker, channel: Any) -> None:
    ch = channel
    ch.queue_declare("slow", durable=True, arguments={"x-queue-type": "quorum", "x-consumer-timeout": 200})
    ch.basic_publish("", "slow", b"job")
    held = []
    ch.basic_consume("slow", lambda c, m, p, b: held.append(m.delivery_tag))
    ch.connection.call_later(T, ch.stop_consuming)  # (bounded: the test fails if it gets here)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.start_consuming()  # never acknowledged: the broker closes the channel
    assert held == [1]
    assert err.value.reply_code == 406
    assert err.value.reply_text.startswith("delivery acknowledgement on channel 1 timed out. Timeout value used: 200 ms")
    other = ch.connection.channel()
    method, _, body = get_one(other, "slow")
    assert body == b"job" and method.redelivered


# -- 1.0 with our client ------------------------------------------------------------------------
@pytest.mark.anyio
async def test_amqp1_consumer_timeout_detaches_the_link_and_the_message_goes_back(broker: RunningBroker) -> None:
    async with await connect(f"amqp://{broker.url}", timeout=T) as conn:
        broker_vhost = broker.broker.default
        broker_vhost.declare_queue("slow1", arguments={"x-queue-type": "quorum", "x-consumer-timeout": 200})
        s = await conn.open_sender("/queues/slow1")
        await s.send(Message(body="job"))
        r = await conn.open_receiver("/queues/slow1", credit=1)
        d = await r.receive(timeout=T)
        assert d.message.body == "job"
        with pytest.raises(LinkError) as err, anyio.fail_after(T):
            await r.receive()
        assert err.value.condition == "amqp:precondition-failed"
        assert "consumer timeout of 200 ms" in str(err.value.description)
        r2 = await conn.open_receiver("/queues/slow1", credit=1)
        d = await r2.receive(timeout=T)
        assert d.message.body == "job" and d.message.header is not None and d.message.header.delivery_count == 1
        await d.accept()


@pytest.mark.anyio
async def test_amqp1_modified_with_a_delivery_time_retries_later(broker: RunningBroker) -> None:
    async with await connect(f"amqp://{broker.url}", timeout=T) as conn:
        broker.broker.default.declare_queue("retry", arguments={"x-queue-type": "quorum"})
        s = await conn.open_sender("/queues/retry")
        await s.send(Message(body="first"))
        r = await conn.open_receiver("/queues/retry", credit=5)
        d = await r.receive(timeout=T)
        at = int((time.time() + 1.5) * 1000)
        await d.modify(delivery_failed=True, message_annotations={symbol("x-opt-delivery-time"): at})
        await s.send(Message(body="second"))
        d = await r.receive(timeout=T)
        assert d.message.body == "second"  # the retried one waits for its time
        await d.accept()
        d = await r.receive(timeout=T)
        assert d.message.body == "first" and time.time() * 1000 >= at
        assert (d.message.message_annotations or {}).get("x-opt-delivery-time") == at
        await d.accept()


@pytest.mark.anyio
async def test_amqp1_single_active_consumer_of_a_stream_hands_over_where_it_stopped(broker: RunningBroker) -> None:
    async with await connect(f"amqp://{broker.url}", timeout=T) as conn:
        broker.broker.default.declare_queue("log", arguments={"x-queue-type": "stream", "x-single-active-consumer": True})
        s = await conn.open_sender("/queues/log")
        first = await conn.open_receiver("/queues/log", credit=10)
        second = await conn.open_receiver("/queues/log", credit=10)
        for i in range(3):
            await s.send(Message(body=i))
        assert [(await first.receive(timeout=T)).message.body for _ in range(3)] == [0, 1, 2]
        with pytest.raises(TimeoutError), anyio.fail_after(0.3):
            await second.receive()  # (it waits its turn)
        await first.close()
        for i in range(3, 5):
            await s.send(Message(body=i))
        assert [(await second.receive(timeout=T)).message.body for _ in range(2)] == [3, 4]


def test_pika_single_active_consumer_of_a_queue(channel: Any) -> None:
    ch = channel
    ch.queue_declare("sac", durable=True, arguments={"x-queue-type": "quorum", "x-single-active-consumer": True})
    got: dict[str, list[bytes]] = {"a": [], "b": []}
    ch.basic_consume("sac", lambda c, m, p, b: got["a"].append(b), auto_ack=True, consumer_tag="a")
    ch.basic_consume("sac", lambda c, m, p, b: got["b"].append(b), auto_ack=True, consumer_tag="b")
    for i in range(4):
        ch.basic_publish("", "sac", str(i).encode())
    deadline = time.monotonic() + T
    while len(got["a"]) < 4:
        assert time.monotonic() < deadline
        ch.connection.process_data_events(time_limit=0.05)
    ch.basic_cancel("a")
    ch.basic_publish("", "sac", b"4")
    while not got["b"]:
        assert time.monotonic() < deadline
        ch.connection.process_data_events(time_limit=0.05)
    assert got == {"a": [b"0", b"1", b"2", b"3"], "b": [b"4"]}


def test_http_api_reports_the_type_leader_and_leader_locator(broker: RunningBroker) -> None:
    args = {"x-queue-type": "quorum", "x-queue-leader-locator": "balanced", "x-delivery-limit": 5}
    assert call(broker, "PUT", "/api/queues/%2F/led", {"durable": True, "arguments": args}, auth=None)[0] == 201
    status, _, q = call(broker, "GET", "/api/queues/%2F/led", auth=None)
    assert status == 200 and q["type"] == "quorum" and q["arguments"] == args
    assert q["leader"] == q["node"] and q["members"] == [q["node"]]
    bad = {"arguments": {"x-queue-leader-locator": "nearest"}}
    assert call(broker, "PUT", "/api/queues/%2F/bad", bad, auth=None)[0] >= 400


def test_pika_a_consumer_s_own_timeout(channel: Any) -> None:
    ch = channel
    ch.queue_declare("plain")
    ch.basic_publish("", "plain", b"job")
    ch.basic_consume("plain", lambda c, m, p, b: None, arguments={"x-consumer-timeout": 150})
    ch.connection.call_later(T, ch.stop_consuming)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.start_consuming()
    assert err.value.reply_code == 406 and "Timeout value used: 150 ms" in err.value.reply_text
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.connection.channel().basic_consume("plain", lambda c, m, p, b: None, arguments={"x-consumer-timeout": "soon"})
    assert err.value.reply_code == 406
