"""Management's changes of one node, asked on a worker that does not own it (``--workers 2``).

The HTTP API's purge, get and delete, ``$management``'s READ, PEEK, PURGE and DELETE and
RabbitMQ 4's ``/management`` GET, purge and delete of a queue are made on the queue's owner
and answered with its answer, whichever worker the kernel gave the request to (each HTTP
request on a connection of its own; our client pinned to each worker for ``$management``). Real processes on 127.0.0.1; every wait is bounded.
"""

from __future__ import annotations

import base64
import http.client
import json
from typing import Any

import anyio
import pytest

from amqp10.client import Connection
from amqp10.message import Message
from tests.broker.amqp1.test_rabbitmq4 import Management
from tests.broker.test_workers import WAIT
from tests.broker.workers.test_processes import one_on_each, owned_by
from tests.broker.workers.test_whole import ASKS, Broker, send

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


BROKER = Broker
"""The ``broker`` fixture's (``conftest.py``): HTTP on."""


def _call(b: Broker, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One HTTP request with a JSON body, on a connection of its own (the kernel picks the worker)."""
    conn = http.client.HTTPConnection("127.0.0.1", b.http_port, timeout=WAIT)
    try:
        auth = base64.b64encode(b"guest:guest").decode()
        headers = {"Authorization": f"Basic {auth}", "Content-Type": "application/json"}
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    return response.status, (json.loads(data) if data and data[:1] in (b"[", b"{") else data.decode())


async def call(b: Broker, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    return await anyio.to_thread.run_sync(_call, b, method, path, body)


async def depth(b: Broker, name: str) -> int:
    status, q = await call(b, "GET", f"/api/queues/%2F/{name}")
    assert status == 200, q
    return int(q["messages"])


async def test_the_http_apis_get_purge_and_delete_are_made_on_the_owner(broker: Broker) -> None:
    async with one_on_each(broker) as conns:
        for owner in (0, 1):
            name = owned_by(owner, "mgmt")
            await send(conns[0], name, ASKS + 2)
            for i in range(ASKS):  # each on a connection of its own: both workers take some
                status, got = await call(broker, "POST", f"/api/queues/%2F/{name}/get", {"count": 1, "ackmode": "ack_requeue_false"})
                assert status == 200, got
                assert len(got) == 1 and got[0]["message_count"] == ASKS + 1 - i  # (the owner's count: one fewer each)
            assert await depth(broker, name) == 2
            for _ in range(ASKS):
                await send(conns[1], name, 2)
                status, body = await call(broker, "DELETE", f"/api/queues/%2F/{name}/contents")
                assert status == 204, body
                assert await depth(broker, name) == 0
            status, body = await call(broker, "DELETE", f"/api/queues/%2F/{name}")
            assert status == 204, body
            assert (await call(broker, "GET", f"/api/queues/%2F/{name}"))[0] == 404


async def _management(conn: Connection, operation: str, name: str, **more: Any) -> tuple[int, Any]:
    request = {"operation": operation, "type": "queue", "name": name, **more}
    reply = await conn.request("$management", Message(application_properties=request), timeout=WAIT)
    return int((reply.application_properties or {})["statusCode"]), reply.body


async def test_management_purge_and_delete_of_the_other_workers_queue(broker: Broker) -> None:
    async with one_on_each(broker) as conns:
        for asked in (0, 1):
            name = owned_by(1 - asked, "mgmt-amqp")
            await send(conns[asked], name, 3)
            status, body = await _management(conns[asked], "PEEK", name, count=2)
            assert status == 200 and [m["body"] for m in body] == [0, 1], body  # the owner's messages, left there
            status, body = await _management(conns[asked], "PURGE", name)
            assert status == 200 and body == {"purged": 3}, body
            assert await depth(broker, name) == 0
            status, body = await _management(conns[asked], "DELETE", name)
            assert status == 204, body
            assert (await call(broker, "GET", f"/api/queues/%2F/{name}"))[0] == 404


async def test_rabbitmq_4_management_purge_and_delete_of_the_other_workers_queue(broker: Broker) -> None:
    async with one_on_each(broker) as conns:
        for asked in (0, 1):
            name = owned_by(1 - asked, "mgmt-r4-")
            await send(conns[asked], name, 3)  # (made by the attach, on its owner only)
            m = await Management.open(conns[asked])
            assert await m.request("DELETE", f"/queues/{name}/messages") == (200, {"message_count": 3})
            await send(conns[asked], name, 2)
            assert await m.request("DELETE", f"/queues/{name}") == (200, {"message_count": 2})
            assert (await call(broker, "GET", f"/api/queues/%2F/{name}"))[0] == 404
            assert await m.request("DELETE", f"/queues/{name}") == (200, {"message_count": 0})  # gone: done


async def test_a_read_of_the_other_workers_queue_answers_the_owners_counts(broker: Broker) -> None:
    """A queue every worker has a record of (declared, not made by an attach): a
    ``$management`` READ and RabbitMQ 4's ``GET /queues/Q`` on the worker that does not own
    it answer the owner's counts, not that worker's record's (it holds none of its messages)."""
    async with one_on_each(broker) as conns:
        for asked in (0, 1):
            name = owned_by(1 - asked, "mgmt-read-")
            m = await Management.open(conns[asked])
            assert (await m.request("PUT", f"/queues/{name}", {}))[0] == 201
            await send(conns[asked], name, 3)
            status, body = await _management(conns[asked], "READ", name)
            assert status == 200 and body["depth"] == 3, body
            status, q = await m.request("GET", f"/queues/{name}")
            assert status == 200 and q["message_count"] == 3, q
            assert await m.request("DELETE", f"/queues/{name}") == (200, {"message_count": 3})
            assert await m.request("GET", f"/queues/{name}") == (404, f"queue '{name}' in vhost '/' not found")
