"""The conventions other clients rely on, end to end: our client (async and blocking)
against our broker over loopback. Anonymous relay, echoed termini, drain, topics."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import amqp10.sync
from amqp10.message import Message
from amqp10.types import Accepted, ErrorCondition, Rejected, Source, symbol
from tests.broker.amqp1.e2e import T, bodies, client
from tests.broker.conftest import RunningBroker, broker_with

pytestmark = pytest.mark.anyio



@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- the anonymous relay ------------------------------------------------------------------------
async def test_client_sender_with_no_address_uses_the_relay(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        assert conn.anonymous_relay
        await (await conn.open_receiver("relay-a", credit=0)).close()  # both queues exist
        await (await conn.open_receiver("relay-b", credit=0)).close()
        s = await conn.open_sender(None)
        assert isinstance(await s.send(Message(body=1, to="relay-a")), Accepted)
        assert isinstance(await s.send(Message(body=2, to="/queues/relay-b")), Accepted)
        assert await s.send(Message(body=3, to="relay-a"), settled=True) is None
        outcome = await s.send(Message(body=4, to="no-such-queue"))
        assert isinstance(outcome, Rejected) and outcome.error is not None
        assert outcome.error.condition == ErrorCondition.NOT_FOUND
        assert isinstance(await s.send(Message(body=5, to="relay-b")), Accepted)  # still up
        assert await bodies(conn, "relay-a", 2) == [1, 3]
        assert await bodies(conn, "relay-b", 2) == [2, 5]


def test_blocking_client_relay(broker: RunningBroker) -> None:
    with amqp10.sync.connect(f"amqp://{broker.url}", timeout=T) as conn:
        assert conn.anonymous_relay
        assert "ANONYMOUS-RELAY" in conn.remote_offered_capabilities
        conn.open_receiver("relay-sync", credit=0).close()
        s = conn.open_sender(None)
        assert isinstance(s.send(Message(body="x", to="relay-sync")), Accepted)
        outcome = s.send(Message(body="y", to="/queues/absent"))
        assert isinstance(outcome, Rejected)
        r = conn.open_receiver("relay-sync", credit=1)
        d = r.receive(timeout=T)
        assert d.message.body == "x"
        d.accept()


async def test_request_response_through_the_relay(broker: RunningBroker) -> None:
    """Proton's server.py/client.py shape: the server answers every request through one
    anonymous sender, to each request's reply-to (a dynamic queue)."""
    async with client(broker) as server_conn, client(broker) as client_conn:
        requests = await server_conn.open_receiver("rpc-examples", credit=10)
        replier = await server_conn.open_sender(None)
        replies = await client_conn.open_receiver(dynamic=True, credit=10)
        ask = await client_conn.open_sender("rpc-examples")

        async def serve() -> None:
            for _ in range(3):
                d = await requests.receive(timeout=T)
                m = d.message
                await replier.send(Message(body=str(m.body).upper(), to=m.reply_to, correlation_id=m.id))
                await d.accept()

        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            for i, word in enumerate(["tic", "tac", "toe"]):
                await ask.send(Message(body=word, reply_to=replies.address, id=i))
            got = []
            for _ in range(3):
                d = await replies.receive(timeout=T)
                got.append((d.message.correlation_id, d.message.body))
                await d.accept()
        assert got == [(0, "TIC"), (1, "TAC"), (2, "TOE")]


# -- topics ------------------------------------------------------------------------------------
async def test_a_durable_wildcard_subscription_survives_a_broker_restart(tmp_path: Path) -> None:
    """rhea's durable subscriber (its example's default, topic://PRICE.STOCK.NYSE.*), with our
    client: what matched while it was away, the broker restarted meanwhile, is there for it."""
    durable = Source(address="topic://PRICE.STOCK.NYSE.*", durable=2, expiry_policy=symbol("never"))
    with broker_with(tmp_path) as b:
        async with client(b, container_id="rhea") as conn:
            await (await conn.open_receiver(None, name="sub", source=durable, credit=0)).detach()
            for address in ("topic://PRICE.STOCK.NYSE.IBM", "topic://PRICE.STOCK.NYSE.HPQ"):
                s = await conn.open_sender(address)
                assert isinstance(await s.send(Message(body=address[-3:], durable=True)), Accepted)
    with broker_with(tmp_path) as b:
        async with client(b, container_id="rhea") as conn:
            s = await conn.open_sender("topic://PRICE.STOCK.NYSE.IBM")
            assert isinstance(await s.send(Message(body="after", durable=True)), Accepted)
            r = await conn.open_receiver(None, name="sub", source=durable, credit=10)
            got = []
            for _ in range(3):
                d = await r.receive(timeout=T)
                got.append(d.message.body)
                await d.accept()
            assert sorted(got) == ["HPQ", "IBM", "after"]
            await r.close()


async def test_wildcard_and_shared_subscriptions_with_our_client(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        wild = await conn.open_receiver("topic://e2e.orders.*", credit=10)
        assert list(wild.remote_source.capabilities) == ["topic"]
        shared = Source(address="topic://e2e.prices", capabilities=[symbol("topic"), symbol("shared")])
        a = await conn.open_receiver(None, name="prices-sub", source=shared, credit=0)
        b = await conn.open_receiver(None, name="prices-sub|2", source=shared, credit=0)
        for address, body in [("topic://e2e.orders.new", "o1"), ("topic://e2e.orders.eu.new", "no"), ("topic://e2e.prices", "p")]:
            s = await conn.open_sender(address)
            n = 4 if address.endswith("prices") else 1
            for i in range(n):
                assert isinstance(await s.send(Message(body=f"{body}{i}")), Accepted)
            await s.close()
        d = await wild.receive(timeout=T)
        assert d.message.body == "o10"  # orders.eu.new is two words: no match for '*'
        await d.accept()
        a.add_credit(2)
        b.add_credit(2)
        got = []
        for r in (a, b):
            for _ in range(2):
                d = await r.receive(timeout=T)
                got.append(d.message.body)
                await d.accept()
        assert sorted(got) == ["p0", "p1", "p2", "p3"]  # one subscription, shared by both
