"""A 1.0 link lost on one worker and resumed on the other (``amqp10 broker --workers 2``).

Our client reconnects (:class:`ReconnectPolicy`) through the test's TCP proxy
(tests/broker/amqp1/test_link_recovery.py's): the proxy drops the broker's answers, then
cuts the connection once the worker that served it has suspended the link (its log says
so); the kernel gives the new connection to either worker. Each attempt asserts what one
broker gives whichever worker the resume landed on, and attempts go on (a bounded number)
until one landed on the other worker. Every wait is bounded; none is a timed assertion.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pika
import pytest

from amqp10.broker.amqp1.frontend import WORKER_PROPERTY
from amqp10.client import Connection, SettleMode, connect
from amqp10.message import Message
from amqp10.types import Accepted, Source
from tests.broker.amqp1.test_link_recovery import Proxy, policy, proxy_to, until
from tests.broker.test_workers import WAIT, Parent

from .test_processes import owned_by

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

N = 6
ATTEMPTS = 12
"""Attempts until a resume lands on the other worker (each does with probability 1/2)."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def worker_of(conn: Connection) -> int:
    return int((conn.remote_properties or {})[WORKER_PROPERTY])


def logged(p: Parent, text: str) -> Callable[[], bool]:
    return lambda: any(text in line for line in p.lines)


def count(p: Parent, queue: str) -> int:
    """The messages ``queue`` holds (its owner answers)."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", p.port, heartbeat=0, socket_timeout=WAIT))
    try:
        return int(conn.channel().queue_declare(queue, passive=True).method.message_count)
    finally:
        conn.close()


async def holds(p: Parent, queue: str, n: int) -> None:
    """Wait (bounded) until ``queue`` holds ``n`` messages."""
    with anyio.fail_after(WAIT):
        while await anyio.to_thread.run_sync(count, p, queue) != n:
            await anyio.sleep(0.05)


def bodies_left(p: Parent, queue: str) -> list[int]:
    """What ``queue`` holds, taken (each acknowledged) over 0-9-1 (its owner answers)."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", p.port, heartbeat=0, socket_timeout=WAIT))
    try:
        ch = conn.channel()
        out = []
        while True:
            method, _, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                return out
            out.append(int(body.decode()))
    finally:
        conn.close()


async def cut_once_suspended(p: Parent, proxy: Proxy, record: str) -> None:
    """Cut the client's connection once its worker has suspended ``record``'s link."""
    proxy.hold()
    await proxy.cut()
    await until(logged(p, f"suspended SuspendedLink({record}"), "the worker suspended the link", WAIT)
    proxy.release()


async def test_a_producer_resumed_on_the_other_worker_sends_nothing_twice(broker: Parent) -> None:
    """rcv-settle-mode second: the worker that took the messages holds its accepted
    outcomes; the worker the resume lands on gets them handed over, so the sends resolve
    Accepted without being sent again: the queue holds each message once."""
    crossed = 0
    async with proxy_to(broker.port) as proxy:
        for k in range(ATTEMPTS):
            container = f"producer{k}"
            async with await connect(proxy.url, reconnect=policy(), timeout=WAIT, container_id=container) as conn:
                first = worker_of(conn)
                queue = owned_by(first, f"resumed{k}-")  # (its worker commits it before it hands over)
                sender = await conn.open_sender(queue, settle_mode=SettleMode.TWO_PHASE, name="s")
                proxy.freeze(up=False, down=True)  # our transfers arrive; the broker's answers do not
                trackers = [sender.submit(Message(body=str(i), durable=True)) for i in range(N)]
                await holds(broker, queue, N)  # they arrived (and its worker commits them before it hands over)
                await cut_once_suspended(broker, proxy, f"'{container}', 's'")
                outcomes = [await t.wait(timeout=WAIT) for t in trackers]
                assert all(isinstance(o, Accepted) for o in outcomes), outcomes
                assert conn.reconnects == 1
                landed = worker_of(conn)
            assert sorted(await anyio.to_thread.run_sync(bodies_left, broker, queue)) == list(range(N))
            if landed != first:
                assert logged(broker, f"handing SuspendedLink('{container}', 's'")()
                crossed += 1
                break
    assert crossed, f"no resume landed on the other worker in {ATTEMPTS} attempts"


async def test_a_consumer_resumed_on_the_other_worker_gets_exactly_once(broker: Parent) -> None:
    """Six messages delivered unsettled; the client accepts three, but the dispositions are
    lost with the connection. Resumed on the other worker, the link is handed over with
    the deliveries and their messages (still acquired on the worker that owns the queue):
    the three accepted are removed from the queue, not redelivered; the other three are
    resumed, once; nothing else comes."""
    crossed = 0
    async with proxy_to(broker.port) as proxy:
        for k in range(ATTEMPTS):
            container = f"consumer{k}"
            async with await connect(proxy.url, reconnect=policy(), timeout=WAIT, container_id=container) as conn:
                first = worker_of(conn)
                queue = owned_by(first, f"held{k}-")  # (a suspended consumer's queue is its worker's)
                sender = await conn.open_sender(queue)
                for i in range(N):
                    assert isinstance(await sender.send(Message(body=str(i))), Accepted)
                # kept for the broker's 60 s (its source asks for an hour): longer than any wait here
                kept = Source(address=queue, timeout=3600)
                rcv = await conn.open_receiver(queue, credit=N, settle_mode=SettleMode.TWO_PHASE, name="r", source=kept)
                got = [await rcv.receive(timeout=WAIT) for _ in range(N)]
                assert [d.message.body for d in got] == [str(i) for i in range(N)]
                proxy.freeze()
                for d in got[:3]:
                    await d.accept()  # rcv-settle-mode second: held unsettled, state accepted
                await cut_once_suspended(broker, proxy, f"'{container}', 'r'")
                again = [await rcv.receive(timeout=WAIT) for _ in range(3)]
                assert [d.message.body for d in again] == ["3", "4", "5"]
                for d in again:
                    await d.accept()
                landed = worker_of(conn)
                rcv.add_credit(N)
                await rcv.drain(timeout=WAIT)
                assert rcv.buffered == 0  # nothing else comes
            assert await anyio.to_thread.run_sync(bodies_left, broker, queue) == []
            if landed != first:
                assert logged(broker, f"handing SuspendedLink('{container}', 'r'")()
                crossed += 1
                break
    assert crossed, f"no resume landed on the other worker in {ATTEMPTS} attempts"
