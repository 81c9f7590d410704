"""Qpid's queue arguments (the core's, :mod:`amqp10.broker.core.qpid_queues`) over 1.0, the
queues declared on RabbitMQ 4's ``/management``: ``no-local`` on an exclusive queue, and a
deleted queue's ``alternate-exchange``."""

from __future__ import annotations

import pytest

from amqp10.message import Message
from amqp10.types import Accepted
from tests.broker.amqp1.e2e import bodies, client
from tests.broker.amqp1.test_rabbitmq4 import Management
from tests.broker.conftest import RunningBroker


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_an_exclusive_no_local_queue_skips_its_own_connections_messages(
    broker: RunningBroker,
) -> None:
    async with client(broker) as me, client(broker) as other:
        m = await Management.open(me)
        declared = {"exclusive": True, "durable": False, "arguments": {"no-local": True}}
        assert (await m.request("PUT", "/queues/nl", declared))[0] == 201
        bind = {
            "source": "amq.fanout",
            "destination_queue": "nl",
            "binding_key": "",
            "arguments": {},
        }
        assert await m.request("POST", "/bindings", bind) == (204, None)
        for conn, body in ((me, "local"), (other, "foreign")):
            s = await conn.open_sender("/exchanges/amq.fanout")
            assert isinstance(await s.send(Message(body=body)), Accepted)
        assert (await m.request("GET", "/queues/nl"))[1]["message_count"] == 1
        assert await bodies(me, "/queues/nl", 1) == ["foreign"]


@pytest.mark.anyio
async def test_a_deleted_queues_messages_go_to_its_alternate_exchange(
    broker: RunningBroker,
) -> None:
    async with client(broker) as conn:
        m = await Management.open(conn)
        assert (await m.request("PUT", "/queues/dead", {}))[0] == 201
        bind = {
            "source": "amq.fanout",
            "destination_queue": "dead",
            "binding_key": "",
            "arguments": {},
        }
        assert await m.request("POST", "/bindings", bind) == (204, None)
        declared = {"arguments": {"alternate-exchange": "amq.fanout"}}
        assert (await m.request("PUT", "/queues/q", declared))[0] == 201
        s = await conn.open_sender("/queues/q")
        assert isinstance(await s.send(Message(body="left")), Accepted)
        assert await m.request("DELETE", "/queues/q") == (200, {"message_count": 1})
        assert await bodies(conn, "/queues/dead", 1) == ["left"]
