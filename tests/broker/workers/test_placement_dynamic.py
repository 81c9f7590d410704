"""Dynamic nodes are placed on the worker of the connection that asked (``--workers 2``).

A 1.0 dynamic source's node is made on its receiver's worker, with that worker in its
name (``amqp10.dynamic.w<K>.``), so a reply sent to it from a connection on either worker
(a named sender, or the anonymous relay with ``to``) reaches it. Real processes on
127.0.0.1, our client pinned to each worker; every wait is bounded.
"""

from __future__ import annotations

import anyio
import pytest

from amqp10.message import Message
from amqp10.types import Accepted, Source, symbol
from tests.broker.amqp1.test_rabbitmq4 import Management
from tests.broker.test_workers import WAIT, Parent

from .test_amqp091_processes import _connect, a_10_receiver_is_refused, worker_of
from .test_processes import one_on_each, owned_by

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_dynamic_node_is_on_its_receivers_worker_and_reached_from_either(broker: Parent) -> None:
    async with one_on_each(broker) as conns:
        for mine in (0, 1):
            replies = await conns[mine].open_receiver(dynamic=True, credit=10)
            address = replies.address
            assert address is not None and address.startswith(f"amqp10.dynamic.w{mine}.")
            for w in (1 - mine, mine):
                named = await conns[w].open_sender(address)
                assert isinstance(await named.send(Message(body=f"named from {w}")), Accepted)
                relay = await conns[w].open_sender(None)
                assert isinstance(await relay.send(Message(body=f"relayed from {w}", to=address)), Accepted)
                for expected in (f"named from {w}", f"relayed from {w}"):
                    d = await replies.receive(timeout=WAIT)
                    assert d.message.body == expected
                    await d.accept()
                await named.close()
                await relay.close()
            await replies.close()


async def test_rabbitmq_4_direct_reply_to_is_reached_from_either_worker(broker: Parent) -> None:
    """A volatile dynamic source (RabbitMQ 4's direct reply-to for 1.0): its address names
    its worker; a 1.0 sender, the relay and a pika publish on the other worker reach it."""
    async with one_on_each(broker) as conns:
        for mine in (0, 1):
            source = Source(dynamic=True, capabilities=[symbol("rabbitmq:volatile-queue")], expiry_policy=symbol("link-detach"))
            r = await conns[mine].open_receiver(None, source=source, credit=10)
            address = r.remote_source.address if r.remote_source is not None else None
            assert address is not None and address.startswith(f"/queues/amq.rabbitmq.reply-to.w{mine}.")
            other = conns[1 - mine]
            s = await other.open_sender(address)
            assert isinstance(await s.send(Message(body="answer")), Accepted)
            relay = await other.open_sender(None)
            assert isinstance(await relay.send(Message(body="via to", to=address)), Accepted)
            await anyio.to_thread.run_sync(_publish_091, broker, 1 - mine, address[len("/queues/") :])
            got = [(await r.receive(timeout=WAIT)).message.body for _ in range(3)]
            assert got == ["answer", "via to", [b"from pika"]]  # (a 0-9-1 body is a data section)
            await s.close()
            await relay.close()
            await r.close()


def _publish_091(p: Parent, worker: int, key: str) -> None:
    """A confirmed, mandatory pika publish to ``key`` from a connection on ``worker``."""
    conn = _connect(p)
    try:
        while worker_of(conn) != worker:
            conn.close()
            conn = _connect(p)
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("", key, b"from pika", mandatory=True)
    finally:
        conn.close()


async def test_a_management_reply_reaches_a_dynamic_queue_on_the_other_worker(broker: Parent) -> None:
    """``$management`` asked on one worker with a reply-to of a dynamic queue made on the
    other: the reply is put on that queue, on its worker."""
    async with one_on_each(broker) as conns:
        for mine in (0, 1):
            replies = await conns[mine].open_receiver(dynamic=True, credit=10)
            assert replies.address is not None
            asker = await conns[1 - mine].open_sender("$management")
            request = Message(
                id="q1",
                reply_to=replies.address,
                application_properties={"operation": "QUERY", "type": "org.amqp.management", "entityType": "queue"},
                body={"attributeNames": []},
            )
            assert isinstance(await asker.send(request), Accepted)
            d = await replies.receive(timeout=WAIT)
            assert d.message.correlation_id == "q1"
            assert (d.message.application_properties or {})["statusCode"] == 200
            await d.accept()
            await asker.close()
            await replies.close()


async def test_an_exclusive_queue_declared_over_rabbitmq_4_management_is_locked_on_the_other_worker(
    broker: Parent,
) -> None:
    for mine in (0, 1):
        name = owned_by(1 - mine, f"excl10-{mine}-")  # its hash names the other worker
        async with one_on_each(broker) as conns:
            m = await Management.open(conns[mine])
            status, q = await m.request("PUT", f"/queues/{name}", {"exclusive": True, "durable": False})
            assert status == 201 and q["exclusive"] is True, q
            other = await Management.open(conns[1 - mine])
            status, why = await other.request("PUT", f"/queues/{name}", {"exclusive": True, "durable": False})
            assert status == 409 and "locked" in str(why), why
            await a_10_receiver_is_refused(broker.port, 1 - mine, name)
            sender = await conns[1 - mine].open_sender(name)  # publishing is anyone's
            assert isinstance(await sender.send(Message(body="to the owner's")), Accepted)
            receiver = await conns[mine].open_receiver(name, credit=1)
            assert (await receiver.receive(timeout=WAIT)).message.body == "to the owner's"
            await conns[mine].close()  # it goes with its connection
            for _ in range(100):  # (bounded: the unplace goes through the parent's order)
                status, q = await other.request("PUT", f"/queues/{name}", {"exclusive": True, "durable": False})
                if status == 201:
                    break
                await anyio.sleep(WAIT / 100)
            assert status == 201, q
