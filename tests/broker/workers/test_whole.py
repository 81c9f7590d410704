"""Management, limits and metrics of the whole broker at ``amqp10 broker --workers 2``.

Real processes on 127.0.0.1. The kernel gives each connection (AMQP and HTTP alike) to
one worker; every management answer here must be the whole broker's whichever worker
took the request, so each request is made several times, on HTTP connections of their
own (each lands on a worker by the kernel's hash). Every wait is bounded; none is a
timed assertion.
"""

from __future__ import annotations

import base64
import http.client
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from amqp10.broker.amqp1.frontend import WORKER_PROPERTY
from amqp10.client import Connection, connect
from amqp10.errors import AMQPError
from amqp10.message import Message
from amqp10.types import Accepted
from tests.broker.test_workers import WAIT, Parent
from tests.broker.workers.test_processes import owned_by

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

ASKS = 6
"""How many times a request is made (on as many HTTP connections): both workers take some,
but for a chance of 1 in 32."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Broker(Parent):
    """``amqp10 broker --workers 2`` with HTTP on (and ``config``, if given)."""

    def __init__(self, data_dir: Path, config: str = "") -> None:
        path = data_dir / "broker.toml"
        path.write_text(config)
        super().__init__(data_dir, args=("--http-port", "0", "--config", str(path)))
        self.http_port = int(self.wait_for(r"listening on 127\.0\.0\.1:(\d+) for 2 workers \(http\)")[1])
        self.wait_listening()

    def call(self, method: str, path: str, http: http.client.HTTPConnection | None = None) -> tuple[int, Any]:
        """One request (on ``http``, else on a connection of its own): the status and the body."""
        conn = http or self.http()
        try:
            auth = base64.b64encode(b"guest:guest").decode()
            conn.request(method, path, headers={"Authorization": f"Basic {auth}"})
            response = conn.getresponse()
            body = response.read()
        finally:
            if http is None:
                conn.close()
        if response.headers.get("content-type", "").startswith("application/json") and body:
            return response.status, json.loads(body)
        return response.status, body.decode()

    def http(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=WAIT)

    async def get(self, path: str) -> Any:
        status, body = await anyio.to_thread.run_sync(self.call, "GET", path)
        assert status == 200, body
        return body


BROKER = Broker
"""The ``broker`` fixture's (``conftest.py``): HTTP on."""


def worker_of(conn: Connection) -> int:
    return int((conn.remote_properties or {})[WORKER_PROPERTY])


@asynccontextmanager
async def on_both(b: Parent) -> AsyncIterator[list[Connection]]:
    """Connections until both workers serve one (all of them kept open)."""
    async with AsyncExitStack() as stack:
        conns: list[Connection] = []
        for _ in range(64):
            conns.append(await stack.enter_async_context(await connect(f"amqp://127.0.0.1:{b.port}", timeout=WAIT)))
            if {worker_of(c) for c in conns} == {0, 1}:
                break
        assert {worker_of(c) for c in conns} == {0, 1}
        yield conns


async def send(conn: Connection, address: str, n: int) -> None:
    sender = await conn.open_sender(address)
    for i in range(n):
        assert isinstance(await sender.send(Message(body=i)), Accepted)
    await sender.close()


async def test_connections_queues_and_overview_of_every_worker(broker: Broker) -> None:
    async with on_both(broker) as conns:
        queues = {owned_by(0, "mq"): 3, owned_by(1, "mq"): 5}
        for name, n in queues.items():
            await send(conns[0], name, n)
        receiver = await conns[-1].open_receiver(owned_by(0, "mq"), credit=0)  # a consumer on each worker's side
        for _ in range(ASKS):
            listed = await broker.get("/api/connections")
            assert len(listed) == len(conns)
            listed_queues = {q["name"]: q["messages"] for q in await broker.get("/api/queues")}
            assert listed_queues == queues
            for name, n in queues.items():
                assert (await broker.get(f"/api/queues/%2F/{name}"))["messages"] == n
            overview = await broker.get("/api/overview")
            assert overview["object_totals"]["connections"] == len(conns)
            assert overview["object_totals"]["queues"] == 2
            assert overview["queue_totals"]["messages"] == 8
            consumers = await broker.get("/api/consumers")
            assert [c["queue"]["name"] for c in consumers] == [owned_by(0, "mq")]
            channels = await broker.get("/api/channels")
            assert {c["connection_details"]["name"] for c in channels} <= {c["name"] for c in listed}
        await receiver.close()
        # $management (what `amqp10 admin` asks) on each worker: every worker's queues
        for conn in (conns[0], conns[-1]):
            async with conn.management(protocol="oasis", timeout=WAIT) as m:
                infos = await m.list_queues(timeout=WAIT)
                assert {q.name: q.message_count for q in infos} == queues
                for name, n in queues.items():  # READ: the queue of either owner
                    assert (await m.queue_info(name, timeout=WAIT)).message_count == n
        admin = [sys.executable, "-m", "amqp10.cli", "admin", "connections", "--json", "--url", f"amqp://127.0.0.1:{broker.port}"]
        for _ in range(ASKS // 2):  # `amqp10 admin` (QUERY on $management), on a connection of its own
            done = await anyio.to_thread.run_sync(
                lambda: subprocess.run(admin, capture_output=True, text=True, timeout=WAIT)
            )
            assert done.returncode == 0, done.stderr
            assert len(json.loads(done.stdout)) == len(conns) + 1


async def test_metrics_sum_the_workers(broker: Broker) -> None:
    async with on_both(broker) as conns:
        await send(conns[0], owned_by(0, "mx"), 2)
        await send(conns[0], owned_by(1, "mx"), 4)
        for _ in range(ASKS):
            text = await broker.get("/metrics")
            lines = text.splitlines()
            assert f"amqp10_connections {float(len(conns))}" in lines
            assert f'amqp10_node_messages{{kind="queue",node="{owned_by(0, "mx")}",vhost="/"}} 2.0' in lines
            assert f'amqp10_node_messages{{kind="queue",node="{owned_by(1, "mx")}",vhost="/"}} 4.0' in lines
            rss = [line for line in lines if line.startswith("process_resident_memory_bytes{")]
            assert sorted(line.split('worker="')[1][0] for line in rss) == ["0", "1"]


@pytest.mark.parametrize(
    "config", ["[limits]\nmax_connections = 3\n", "[security]\nmax_connections_per_address = 3\n"]
)
async def test_a_connection_limit_holds_across_the_workers(tmp_path: Path, config: str) -> None:
    b = Broker(tmp_path, config)
    try:
        url = f"amqp://127.0.0.1:{b.port}"
        async with AsyncExitStack() as stack:
            held = [await stack.enter_async_context(await connect(url, timeout=WAIT)) for _ in range(3)]
            for _ in range(4):  # each lands on one worker or the other: every one is refused
                with pytest.raises((AMQPError, OSError)):
                    async with await connect(url, timeout=WAIT):
                        pass
            await held.pop().close()
            with anyio.fail_after(WAIT):  # the count goes down on the worker it was on
                while True:
                    try:
                        async with await connect(url, timeout=WAIT):
                            break
                    except (AMQPError, OSError):
                        await anyio.sleep(0.05)
    finally:
        b.stop()


async def test_deleting_a_connection_on_the_other_worker_closes_it(broker: Broker) -> None:
    async with on_both(broker) as conns:  # $management DELETE, asked on one worker, of a connection on the other
        names = {c["client_properties"]["connection_name"]: c["name"] for c in await broker.get("/api/connections")}
        asked, other = conns[0], conns[-1]
        request = {"operation": "DELETE", "type": "connection", "name": names[other.container_id]}
        reply = await asked.request("$management", Message(application_properties=request), timeout=WAIT)
        assert (reply.application_properties or {})["statusCode"] == 204
        with anyio.fail_after(WAIT):
            await other.wait_closed()
        request["name"] = "nobody"
        reply = await asked.request("$management", Message(application_properties=request), timeout=WAIT)
        assert (reply.application_properties or {})["statusCode"] == 404
    async with on_both(broker) as conns:  # HTTP DELETE of every one, on one HTTP connection
        mine = {c.container_id for c in conns}
        http = broker.http()  # (one worker answers every request on it: some are on the other)
        try:
            _, listed = await anyio.to_thread.run_sync(broker.call, "GET", "/api/connections", http)
            for c in [c for c in listed if c["client_properties"]["connection_name"] in mine]:
                status, _ = await anyio.to_thread.run_sync(broker.call, "DELETE", f"/api/connections/{c['name']}", http)
                assert status == 204
            status, _ = await anyio.to_thread.run_sync(broker.call, "DELETE", "/api/connections/nobody", http)
            assert status == 404
        finally:
            http.close()
        with anyio.fail_after(WAIT):
            for conn in conns:
                await conn.wait_closed()
