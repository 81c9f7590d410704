"""The AMQ model end to end over loopback: python-qpid-proton and our own client.

RabbitMQ 4's address forms (``/queues/Q``, ``/exchanges/X/KEY``,
``/exchanges/X`` with the key in ``subject``, a null target with ``to``),
virtual hosts chosen by the open frame's hostname, and durable exchanges and
bindings across a broker restart.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from proton import Delivery, Timeout
from proton import Message as PMessage
from proton.utils import BlockingConnection, LinkDetached, SendException

from amqp10.client import connect
from amqp10.message import Message
from amqp10.types import Accepted
from tests.broker.conftest import RunningBroker, broker_with

T = 10


def vhosts() -> list[dict[str, Any]]:
    return [
        {
            "name": "shop",
            "exchanges": [
                {"name": "orders", "type": "topic"},
                {"name": "hidden", "type": "fanout", "internal": True},
                {"name": "events", "type": "headers", "alternate_exchange": "amq.fanout"},
            ],
            "queues": ["eu", "all", "pdf", "leftovers"],
            "bindings": [
                {"source": "orders", "destination": "eu", "routing_key": "eu.#"},
                {"source": "orders", "destination": "all", "routing_key": "#"},
                {"source": "events", "destination": "pdf", "arguments": {"x-match": "all", "format": "pdf"}},
                {"source": "amq.fanout", "destination": "leftovers"},
            ],
        }
    ]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_with(tmp_path, vhosts=vhosts()) as b:
        yield b


@contextmanager
def proton(b: RunningBroker, vhost: str | None = "vhost:shop") -> Iterator[BlockingConnection]:
    conn = BlockingConnection(f"amqp://{b.url}", timeout=T, virtual_host=vhost)
    try:
        yield conn
    finally:
        conn.close()


def drain(conn: BlockingConnection, address: str) -> list[Any]:
    r = conn.create_receiver(address, credit=50)
    got = []
    while True:
        try:
            m = r.receive(timeout=0.5)
        except Timeout:  # nothing more queued; any other error fails the test
            break
        got.append(m.body)
        r.accept()
    r.close()
    return got


@pytest.mark.proton
def test_proton_reaches_exchanges_and_queues_by_address(broker: RunningBroker) -> None:
    with proton(broker) as conn:
        conn.create_sender("/exchanges/orders/eu.fr").send(PMessage(body="fr"))
        conn.create_sender("/exchanges/orders").send(PMessage(body="us", subject="us.ny"))
        conn.create_sender("/queues/eu").send(PMessage(body="direct"))
        anon = conn.create_sender(None)
        anon.send(PMessage(body="to-all", address="/queues/all"))
        conn.create_sender("/exchanges/events").send(PMessage(body="doc", properties={"format": "pdf"}))
        conn.create_sender("/exchanges/events").send(PMessage(body="img", properties={"format": "png"}))
        assert drain(conn, "/queues/eu") == ["fr", "direct"]
        assert drain(conn, "/queues/all") == ["fr", "us", "to-all"]
        assert drain(conn, "/queues/pdf") == ["doc"]
        assert drain(conn, "/queues/leftovers") == ["img"]  # through the alternate exchange


@pytest.mark.proton
def test_proton_sees_refusals_and_released_messages(broker: RunningBroker) -> None:
    with proton(broker) as conn, pytest.raises(LinkDetached, match="unauthorized-access"):
        conn.create_sender("/exchanges/hidden")
    with proton(broker) as conn, pytest.raises(LinkDetached, match="not-found"):
        conn.create_sender("/exchanges/absent/k")
    with proton(broker) as conn:
        s = conn.create_sender("/exchanges/orders")
        s.send(PMessage(body="ok", subject="eu.de"))
        with pytest.raises(SendException) as info:
            conn.create_sender("/exchanges/amq.direct/nobody").send(PMessage(body="lost"))
        assert info.value.state == Delivery.RELEASED


@pytest.mark.proton
def test_proton_default_vhost_does_not_see_shop(broker: RunningBroker) -> None:
    with proton(broker, vhost=None) as conn, pytest.raises(LinkDetached, match="not-found"):
        conn.create_sender("/exchanges/orders/eu.fr")


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_our_client_in_a_vhost_and_declared_bindings_survive_restart(tmp_path: Path, anyio_backend: str) -> None:
    with broker_with(tmp_path, vhosts=vhosts()) as b:
        async with await connect(f"amqp://{b.url}", timeout=T, hostname="vhost:shop") as conn:
            replies = await conn.open_receiver("replies", credit=5)
            mgmt = await conn.open_sender("$management")
            for op, args in (
                ("declare-exchange", {"name": "audit", "type": "direct"}),
                ("declare-queue", {"name": "audit-log"}),
                ("bind", {"source": "audit", "destination": "audit-log", "routing_key": "login"}),
            ):
                req = Message(body=args, reply_to="replies", application_properties={"operation": op})
                await mgmt.send(req)
                d = await replies.receive(timeout=T)
                assert d.message.application_properties["status-code"] in (200, 201)
                await d.accept()
            outcome = await (await conn.open_sender("/exchanges/audit/login")).send(Message(body="before", durable=True))
            assert isinstance(outcome, Accepted)
    with broker_with(tmp_path, vhosts=vhosts()) as b:
        async with await connect(f"amqp://{b.url}", timeout=T, hostname="vhost:shop") as conn:
            outcome = await (await conn.open_sender("/exchanges/audit/login")).send(Message(body="after", durable=True))
            assert isinstance(outcome, Accepted)
            r = await conn.open_receiver("/queues/audit-log", credit=5)
            got = []
            for _ in range(2):
                d = await r.receive(timeout=T)
                got.append(d.message.body)
                await d.accept()
            assert got == ["before", "after"]
