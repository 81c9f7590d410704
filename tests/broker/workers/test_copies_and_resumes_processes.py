"""A topic's copy made by its first message, and a consumer of another worker's queue
resumed (``amqp10 broker --workers 2``): the interop matrix's topic-wildcard and
link-resume scenarios with each client pinned to a worker.

- A wildcard subscriber on worker ``a``, a publisher on worker ``b`` to a topic nobody
  made before, while the parent (the metadata's sequencer) is stopped: ``a`` does not
  know the topic yet when ``b``'s copy of the message arrives; it makes its copy then,
  so its wildcard subscriber gets the message (before, the copy was unroutable there
  and the message lost for it, though the publisher had it accepted).
- A receiver on worker ``w`` of a queue the other worker owns, detached with two
  deliveries unsettled and attached again resuming (§2.6.13): its worker kept the link
  (the messages stay held for it on the owner), so the answer carries the unsettled
  map and the deliveries are resumed and settled on the new link (before, such a
  consumer was not suspended at all: the answer carried no unsettled map).
- A durable wildcard subscription made on one worker and attached again (same container
  id, same link name) on the other: one queue, on the worker that owns its name, with
  what matched meanwhile; closing it there ends it (before, each worker made its own).

Real processes on 127.0.0.1; every wait is bounded, none is a timed assertion.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest

from amqp10.client import Connection, Sender, connect
from amqp10.client.receiver import Receiver as ClientReceiver
from amqp10.message import Message
from amqp10.types import Accepted, Source, symbol
from tests.broker.test_workers import WAIT, Parent

from .test_processes import one_on_each, owned_by
from .test_resumption_processes import worker_of
from .test_topics import drain, subscribe

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_topic_new_to_the_subscribers_worker_reaches_its_wildcard_subscribers(
    broker: Parent,
) -> None:
    async with one_on_each(broker) as conns:
        for a in (0, 1):
            b = 1 - a
            star = await subscribe(conns[a], f"topic://fresh{a}.*")
            deep = await subscribe(conns[a], f"fresh{a}.#", caps=("topic",))
            os.kill(broker.proc.pid, signal.SIGSTOP)  # worker a hears of the new topic only later
            try:
                sender = await conns[b].open_sender(f"topic://fresh{a}.new")
                assert isinstance(await sender.send(Message(body="n"), timeout=WAIT), Accepted)
            finally:
                os.kill(broker.proc.pid, signal.SIGCONT)
            assert await drain(star) == ["n"]
            assert await drain(deep) == ["n"]
            for link in (star, deep, sender):
                await link.close()


async def reattached(conn: Connection, queue: str, name: str, deliveries: list[Any], *, window: int, **attach: Any) -> ClientReceiver:
    """Receiving link ``name`` of ``conn`` attached again, resuming ``deliveries`` (§2.6.13;
    ``attach``: the engine link's source, target and modes); the broker's attach answer has
    its unsettled map (asserted)."""
    session = conn._session_for(None)
    link = session._session.receiver(name, resume_deliveries=deliveries, **attach)
    again = ClientReceiver(conn, session, link, address=queue, window=window)
    await conn._attach(again, WAIT)
    assert link.remote_attach is not None and link.remote_attach.unsettled is not None
    return again


async def _resume(conn: Connection, queue: str) -> None:
    """The matrix's link-resume scenario (interop/scenarios/ours.py) on ``conn``."""
    sender = await conn.open_sender(queue)
    for body in ("r0", "r1"):
        assert isinstance(await sender.send(Message(body=body), timeout=WAIT), Accepted)
    kept = Source(address=queue, timeout=60)  # outlives the link: kept for its resumption
    rcv = await conn.open_receiver(queue, credit=2, name=f"resume-{queue}", source=kept)
    held = [await rcv.receive(timeout=WAIT) for _ in range(2)]
    assert [d.message.body for d in held] == ["r0", "r1"]
    old = rcv._link
    deliveries = list(old.unsettled.values())
    await rcv.detach(timeout=WAIT)
    again = await reattached(
        conn,
        queue,
        f"resume-{queue}",
        deliveries,
        window=2,
        source=kept,
        target=old.target,
        snd_settle_mode=old.snd_settle_mode,
        rcv_settle_mode=old.rcv_settle_mode,
    )
    resumed = [d for d in again._link.unsettled.values() if not d.settled]
    got = [await again.receive(timeout=WAIT) for _ in resumed]
    assert sorted(d.message.body for d in got) == ["r0", "r1"]  # neither was settled: both resumed
    for d in got:
        await d.accept()
    await again.close()
    empty = await conn.open_receiver(queue, credit=1)
    assert await drain(empty) == []  # each accepted once: nothing went back to the queue
    await empty.close()
    await sender.close()


async def test_a_consumer_of_the_other_workers_queue_is_resumed(broker: Parent) -> None:
    async with one_on_each(broker) as conns:
        for w in (0, 1):
            await _resume(conns[w], owned_by(1 - w, f"resumed-elsewhere{w}-"))


@asynccontextmanager
async def on_worker(p: Parent, worker: int, container_id: str) -> AsyncIterator[Connection]:
    """A connection of ``container_id`` that worker ``worker`` serves (the others opened
    on the way are closed after)."""
    async with AsyncExitStack() as stack:
        for _ in range(64):
            conn = await stack.enter_async_context(
                await connect(f"amqp://127.0.0.1:{p.port}", timeout=WAIT, container_id=container_id)
            )
            if worker_of(conn) == worker:
                yield conn
                return
        raise AssertionError(f"no connection landed on worker {worker}")


async def subscribed_meanwhile(conn: Connection, durable: Source, topic: str) -> Sender:
    """Durable subscription ``durable`` (link ``sub``) made on ``conn`` and detached, then 0,
    1 and 2 published to ``topic``: the sender."""
    await (await conn.open_receiver(None, name="sub", source=durable, credit=0)).detach()
    sender = await conn.open_sender(topic)
    for i in range(3):
        assert isinstance(await sender.send(Message(body=i), timeout=WAIT), Accepted)
    return sender


async def test_a_durable_wildcard_subscription_is_one_on_every_worker(broker: Parent) -> None:
    for made, again in ((0, 1), (1, 0)):
        cid = f"wild{made}"
        durable = Source(address=f"topic://wild{made}.*", durable=2, expiry_policy=symbol("never"))
        async with on_worker(broker, made, cid) as conn:
            await subscribed_meanwhile(conn, durable, f"topic://wild{made}.x")
        async with on_worker(broker, again, cid) as conn:
            r = await conn.open_receiver(None, name="sub", source=durable, credit=10)
            assert await drain(r) == [0, 1, 2]  # what matched while it was detached
            await r.close()  # closed: unsubscribed, on whichever worker keeps it
        async with on_worker(broker, made, cid) as conn:
            sender = await conn.open_sender(f"topic://wild{made}.x")
            assert isinstance(await sender.send(Message(body="gone"), timeout=WAIT), Accepted)
            r = await conn.open_receiver(None, name="sub", source=durable, credit=10)
            assert await drain(r) == []  # a new subscription: the old one and its message went
            await r.close()
