"""AMQP 1.0 topics across N worker processes (``amqp10 broker --workers 2``).

A topic is on every worker (each copy holds that worker's subscriptions); a message
published to it on any worker reaches every subscriber on every worker, and the
publisher's outcome waits for every copy that took it. Real processes on 127.0.0.1, our
client pinned to a worker as ``test_processes`` does. A subscription attached on one
worker is at the other copies only once the metadata (the topic's existence) reached
them, so each test first publishes until a subscriber on each worker has had a message:
bounded, never a timed assertion.
"""

from __future__ import annotations

from typing import Any

import pytest

from amqp10.client import Connection, Receiver, Sender
from amqp10.errors import AMQPError
from amqp10.message import Message
from amqp10.types import Accepted, Source, symbol
from tests.broker.test_workers import Parent

from .test_processes import one_on_each

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def subscribe(conn: Connection, address: str, *, name: str | None = None, caps: tuple[str, ...] = (),
                    durable: bool = False, selector: str | None = None, credit: int = 100) -> Receiver:
    source = Source(
        address=address,
        capabilities=[symbol(c) for c in caps] or None,
        durable=2 if durable else 0,
        expiry_policy=symbol("never") if durable else None,
    )
    return await conn.open_receiver(address, name=name, source=source, selector=selector, credit=credit)


async def drain(r: Receiver) -> list[Any]:
    """What ``r`` gets until nothing more comes (each accepted)."""
    got = []
    while True:
        try:
            d = await r.receive(timeout=1.0)
        except AMQPError:
            return got
        got.append(d.message.body)
        await d.accept()


async def until_every_one_hears(sender: Sender, receivers: list[Receiver], marker: str = "ping") -> None:
    """Publish ``marker`` until each receiver got one (the topic reached every worker's
    copy), then take the extra markers away; bounded."""
    heard = [False] * len(receivers)
    for _ in range(100):
        assert isinstance(await sender.send(Message(body=marker)), Accepted)
        for i, r in enumerate(receivers):
            while True:
                try:
                    d = await r.receive(timeout=0.1)
                except AMQPError:
                    break
                await d.accept()
                heard[i] = heard[i] or d.message.body == marker
        if all(heard):
            break
    assert all(heard), heard
    for r in receivers:  # the last markers still on their way
        while True:
            try:
                d = await r.receive(timeout=0.5)
            except AMQPError:
                break
            assert d.message.body == marker
            await d.accept()


async def test_a_topic_message_reaches_subscribers_on_every_worker_in_order(broker: Parent) -> None:
    async with one_on_each(broker) as conns:
        subs = {w: await subscribe(conns[w], "topic://news") for w in (0, 1)}
        for publisher in (0, 1):  # published on either worker
            sender = await conns[publisher].open_sender("topic://news")
            await until_every_one_hears(sender, [subs[0], subs[1]])
            for i in range(100):
                assert isinstance(await sender.send(Message(body=i)), Accepted)
            for w in (0, 1):
                assert await drain(subs[w]) == list(range(100))  # each once, in order
            await sender.close()


async def test_plain_names_reach_a_topic_made_on_the_other_worker(broker: Parent) -> None:
    async with one_on_each(broker) as conns:
        mark = len(broker.lines)
        here = await subscribe(conns[0], "topic://alerts")
        # worker 1 learns from the metadata that "alerts" is a topic: plain names reach it there
        broker.wait_for(r"worker=1 logger=amqp10.broker msg=.created topic 'alerts'", mark)
        there = await subscribe(conns[1], "alerts")
        sender = await conns[1].open_sender("alerts")
        await until_every_one_hears(sender, [here, there])
        assert isinstance(await sender.send(Message(body=1)), Accepted)
        assert await drain(here) == [1]
        assert await drain(there) == [1]


async def test_selectors_and_wildcards_on_each_worker(broker: Parent) -> None:
    async with one_on_each(broker) as conns:
        sender = await conns[0].open_sender("topic://orders.eu")
        red = await subscribe(conns[1], "topic://orders.eu", selector="color = 'red'")
        every = await subscribe(conns[0], "topic://orders.eu")
        wildcard = await subscribe(conns[1], "topic://orders.*")
        await until_every_one_hears(sender, [every, wildcard])
        for i, color in enumerate(["red", "blue", "red", "green"]):
            msg = Message(body=i, application_properties={"color": color})
            assert isinstance(await sender.send(msg), Accepted)
        assert await drain(red) == [0, 2]
        assert await drain(every) == [0, 1, 2, 3]
        assert await drain(wildcard) == [0, 1, 2, 3]


async def test_a_shared_subscription_is_one_queue_for_consumers_on_every_worker(broker: Parent) -> None:
    caps = ("topic", "shared", "global")
    async with one_on_each(broker) as conns:
        sender = await conns[0].open_sender("topic://prices")
        a = await subscribe(conns[0], "topic://prices", name="sub", caps=caps, credit=5)
        b = await subscribe(conns[1], "topic://prices", name="sub|2", caps=caps, credit=5)
        await until_every_one_hears(sender, [a, b])
        for i in range(40):
            assert isinstance(await sender.send(Message(body=i)), Accepted)
        got_a, got_b = await drain(a), await drain(b)
        assert sorted(got_a + got_b) == list(range(40))  # each message once, to one of them
        assert got_a and got_b  # both consumers took some
        assert got_a == sorted(got_a) and got_b == sorted(got_b)


async def test_a_durable_subscription_is_kept_for_its_next_attach_on_either_worker(broker: Parent) -> None:
    caps = ("topic", "global")  # (global: named by its link name alone, so either connection finds it)
    async with one_on_each(broker) as conns:
        sender = await conns[1].open_sender("topic://ledger")
        for first, then in ((0, 1), (1, 0)):
            name = f"audit-{first}"
            sub = await subscribe(conns[first], "topic://ledger", name=name, caps=caps, durable=True)
            await until_every_one_hears(sender, [sub])
            await sub.detach()  # kept: what comes meanwhile waits for it
            for i in range(10):
                assert isinstance(await sender.send(Message(body=i)), Accepted)
            back = await subscribe(conns[then], "topic://ledger", name=name, caps=caps, durable=True)
            assert await drain(back) == list(range(10))  # the same subscription, from the other worker
            mark = len(broker.lines)
            await back.close()  # unsubscribed, on whichever worker keeps it
            broker.wait_for(rf"msg=.ended subscription '#{name}' of topic 'ledger'", mark)
            assert isinstance(await sender.send(Message(body="after")), Accepted)
            fresh = await subscribe(conns[first], "topic://ledger", name=name, caps=caps, durable=True)
            assert await drain(fresh) == []  # a new subscription: nothing of the old one
            await fresh.close()
