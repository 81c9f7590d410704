"""Selectors and filters end to end: our client and Proton against the broker.

A selector on a queue is its consumer's view (what it does not match stays, in
order, for the others); on a topic it decides what the subscription keeps.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from proton import Message as ProtonMessage
from proton.reactor import Selector
from proton.utils import BlockingConnection

import amqp10.sync
from amqp10 import errors
from amqp10.broker.config import AddressRule
from amqp10.broker.core import Topic
from amqp10.client import Connection
from amqp10.message import Message
from amqp10.types import Described, Properties, Source, symbol, ulong
from tests.broker.amqp1.test_e2e_client import (
    T,
    client,
    durable_source,
    in_broker,
    nothing_arrives,
    queue,
    take,
)
from tests.broker.conftest import RunningBroker, broker_with

SELECTOR = symbol("apache.org:selector-filter:string")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_with(tmp_path, addresses=[AddressRule(pattern="news.*", kind="topic")]) as b:
        yield b


def msg(i: int, color: str, **kw: Any) -> Message:
    return Message(body=i, application_properties={"n": i, "color": color}, **kw)


async def publish(conn: Connection, address: str, messages: list[Message]) -> None:
    sender = await conn.open_sender(address)
    for m in messages:
        await sender.send(m)


@pytest.mark.anyio
async def test_a_selective_consumer_leaves_the_rest_in_order_for_others(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        await publish(conn, "work", [msg(i, "red" if i % 3 == 0 else "blue") for i in range(12)])
        red = await conn.open_receiver("work", credit=20, selector="color = 'red' AND n >= 3")
        assert red.remote_source.filter[symbol("jms-selector")].value == "color = 'red' AND n >= 3"
        assert await take(red, 3) == [3, 6, 9]
        assert await nothing_arrives(red)
        rest = await conn.open_receiver("work", credit=20)
        assert await take(rest, 9) == [0, 1, 2, 4, 5, 7, 8, 10, 11]
        # new messages go to whichever consumer's view holds them
        await publish(conn, "work", [msg(20, "blue"), msg(21, "red")])
        assert await take(rest, 1) == [20]
        assert await take(red, 1) == [21]
    q = queue(broker, "work")
    assert await in_broker(broker, lambda: (q.count, q.stats.acked)) == (0, 14)


@pytest.mark.anyio
async def test_a_released_message_comes_back_to_the_selective_consumer(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        await publish(conn, "again", [msg(i, "red" if i in (2, 5) else "blue") for i in range(8)])
        r = await conn.open_receiver("again", credit=0, selector="color = 'red'")
        r.add_credit(1)
        d = await r.receive(timeout=T)
        assert d.message.body == 2
        await d.release()
        r.add_credit(2)
        assert await take(r, 2) == [2, 5]


@pytest.mark.anyio
async def test_a_selector_that_does_not_parse_refuses_the_attach(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        with pytest.raises(errors.LinkError) as info:
            await conn.open_receiver("work", selector="color = 'red' AND")
        text = str(info.value)
        assert "invalid-field" in text and "column 18" in text


@pytest.mark.anyio
async def test_jms_headers_and_amqp_fields_select(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        await publish(
            conn,
            "hdr",
            [
                Message(body=0, properties=Properties(correlation_id="c-1", subject="car"), priority=7),
                Message(body=1, properties=Properties(correlation_id="c-2", subject="car")),
                Message(body=2, properties=Properties(correlation_id=ulong(9)), durable=True),
            ],
        )
        r = await conn.open_receiver("hdr", credit=5, selector="JMSPriority > 5 AND JMSType = 'car'")
        assert await take(r, 1) == [0]
        r2 = await conn.open_receiver("hdr", credit=5, selector="amqp.correlation_id = 'c-2'")
        assert await take(r2, 1) == [1]
        r3 = await conn.open_receiver(
            "hdr", credit=5, selector="JMSDeliveryMode = 'PERSISTENT' AND JMSCorrelationID LIKE 'ID:AMQP_ULONG:%'"
        )
        assert await take(r3, 1) == [2]


@pytest.mark.anyio
async def test_a_topic_subscription_keeps_only_what_its_selector_matches(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        sub = await conn.open_receiver("news.weather", credit=0, selector="color = 'red'")
        await publish(conn, "news.weather", [msg(i, "red" if i % 2 else "blue") for i in range(10)])
        topic = broker.broker.nodes["news.weather"]
        assert isinstance(topic, Topic)
        kept = await in_broker(broker, lambda: [q.count for q in topic.subscriptions.values()])
        assert kept == [5]
        sub.add_credit(10)
        assert await take(sub, 5) == [1, 3, 5, 7, 9]


@pytest.mark.anyio
async def test_no_local_leaves_out_the_own_connections_messages(broker: RunningBroker) -> None:
    no_local = Described(symbol("apache.org:no-local-filter:list"), [])
    async with client(broker) as mine, client(broker) as other:
        sub = await mine.open_receiver(
            "news.local", credit=10, source=Source(address="news.local", filter={symbol("no-local"): no_local})
        )
        assert symbol("no-local") in sub.remote_source.filter
        await publish(mine, "news.local", [msg(0, "red")])
        await publish(other, "news.local", [msg(1, "red")])
        assert await take(sub, 1) == [1]
        assert await nothing_arrives(sub)


@pytest.mark.anyio
async def test_oasis_filters_and_unsupported_ones_left_out_of_the_answer(broker: RunningBroker) -> None:
    filters = {
        symbol("props"): Described(ulong(0x173), {symbol("subject"): "&p:orders."}),
        symbol("app"): Described(symbol("amqp:application-properties-filter"), {"color": "red"}),
        symbol("sql"): Described(symbol("amqp:sql-filter"), "a.n % 2 = 1 AND p.subject <> 'orders.x'"),
        symbol("mystery"): Described(symbol("example.org:unknown-filter"), "whatever"),
    }
    async with client(broker) as conn:
        r = await conn.open_receiver("oasis", credit=10, source=Source(address="oasis", filter=filters))
        assert set(r.remote_source.filter) == {symbol("props"), symbol("app"), symbol("sql")}
        await publish(
            conn,
            "oasis",
            [
                msg(1, "red", properties=Properties(subject="orders.eu")),
                msg(2, "red", properties=Properties(subject="orders.eu")),  # n even
                msg(3, "blue", properties=Properties(subject="orders.eu")),  # blue
                msg(5, "red", properties=Properties(subject="sales.eu")),  # subject
                msg(7, "red", properties=Properties(subject="orders.x")),  # sql
                msg(9, "red", properties=Properties(subject="orders.us")),
            ],
        )
        assert await take(r, 2) == [1, 9]
        assert await nothing_arrives(r)


def test_the_blocking_client_takes_a_selector(broker: RunningBroker) -> None:
    with amqp10.sync.connect(f"amqp://{broker.url}", timeout=T) as conn:
        sender = conn.open_sender("sync")
        for i in range(6):
            sender.send(msg(i, "red" if i >= 4 else "blue"))
        r = conn.open_receiver("sync", credit=10, selector="color = 'red'")
        got = []
        for _ in range(2):
            d = r.receive(timeout=T)
            got.append(d.message.body)
            d.accept()
        assert got == [4, 5]


@pytest.mark.proton
def test_proton_selector(broker: RunningBroker) -> None:
    conn = BlockingConnection(broker.url, timeout=T)
    try:
        sender = conn.create_sender("pq")
        for i in range(6):
            sender.send(ProtonMessage(body=i, properties={"color": "red" if i in (1, 4) else "blue"}))
        r = conn.create_receiver("pq", credit=10, options=Selector("color = 'red'"))
        got = []
        for _ in range(2):
            m = r.receive(timeout=T)
            got.append(m.body)
            r.accept()
        assert got == [1, 4]
        with pytest.raises(Exception, match="invalid-field"):
            conn.create_receiver("pq", options=Selector("color = = 'red'"))
    finally:
        conn.close()


@pytest.mark.anyio
async def test_deep_queue_is_walked_once(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        await publish(conn, "deep", [msg(i, "red" if i % 100 == 99 else "blue") for i in range(1000)])
        r = await conn.open_receiver("deep", credit=5, selector="color = 'red'")
        with anyio.fail_after(T):
            assert await take(r, 10) == list(range(99, 1000, 100))
    q = queue(broker, "deep")
    assert await in_broker(broker, lambda: q.count) == 990


def test_a_stream_consumer_reads_past_what_its_selector_leaves_out() -> None:
    from amqp10.broker.config import BrokerConfig
    from tests.broker.harness import Net

    net = Net(BrokerConfig(addresses=[AddressRule(pattern="events", kind="stream")]))
    c = net.client()
    s = c.sender("events")
    for i in range(6):
        c.send(s, msg(i, "red" if i % 2 else "blue"))
    offset = symbol("amqp10:stream-offset")
    selector = Described(SELECTOR, "color = 'red'")
    r = c.receiver(
        "events", credit=10, source=Source(address="events", filter={offset: "first", symbol("sel"): selector})
    )
    got = [Message.decode(d.payload).body for d in c.received(r)]
    assert got == [1, 3, 5]
    assert set(r.remote_source.filter) == {offset, symbol("sel")}
    plain = c.receiver("events", credit=10, source=Source(address="events", filter={offset: "first"}))
    assert len(c.received(plain)) == 6  # another consumer's view is its own


@pytest.mark.anyio
async def test_a_durable_subscription_filters_while_its_subscriber_is_away(broker: RunningBroker) -> None:
    def source() -> Source:
        s = durable_source("news.durable")
        s.filter = {symbol("jms-selector"): Described(SELECTOR, "color = 'red'")}
        return s

    async with client(broker) as pub_conn:
        async with client(broker, container_id="away") as c1:
            sub = await c1.open_receiver("news.durable", name="d", credit=0, source=source())
            await sub.detach()
        await publish(pub_conn, "news.durable", [msg(i, "red" if i in (1, 4) else "blue") for i in range(6)])
        async with client(broker, container_id="away") as c2:
            sub = await c2.open_receiver("news.durable", name="d", credit=10, source=source())
            assert await take(sub, 2) == [1, 4]
            assert await nothing_arrives(sub)
            await sub.close()


@pytest.mark.anyio
async def test_an_empty_selector_is_no_selector(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        await publish(conn, "empty", [msg(0, "blue"), msg(1, "red")])
        r = await conn.open_receiver("empty", credit=5, selector="  ")
        assert await take(r, 2) == [0, 1]


@pytest.mark.anyio
async def test_a_browser_sees_only_its_selection_and_takes_nothing(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        await publish(conn, "browsed", [msg(i, "red" if i % 2 else "blue") for i in range(6)])
        source = Source(
            address="browsed",
            distribution_mode=symbol("copy"),
            filter={symbol("jms-selector"): Described(SELECTOR, "color = 'red'")},
        )
        b = await conn.open_receiver("browsed", credit=10, source=source)
        assert await take(b, 3) == [1, 3, 5]
        assert await nothing_arrives(b)
    q = queue(broker, "browsed")
    assert await in_broker(broker, lambda: q.count) == 6
