"""Metadata is the same on every worker (``amqp10 broker --workers 2``, issue 31).

Real processes on 127.0.0.1. Our client opens connections until it has one served by
each worker (the open frame's ``amqp10:worker``); a pika connection's worker is read from
the broker's (debug) log line for its address. What one worker declares (through ``$management``,
0-9-1, RabbitMQ's HTTP API) routes, refuses and logs in on the other; a worker SIGKILLed
catches up on what changed while it was down. Every wait is bounded; none is timed.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pika
import pika.exceptions
import pytest

from amqp10.broker.users import add_user
from amqp10.client import Connection
from amqp10.errors import ConflictError
from amqp10.message import Message
from amqp10.types import Accepted, Rejected, Source, symbol
from tests.broker.amqp1.e2e import bodies
from tests.broker.test_workers import WAIT, Parent
from tests.broker.workers.test_processes import one_on_each, owned_by

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

ADMIN = ("admin", "s3cret")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def serving(p: Parent) -> None:
    p.wait_for(r"worker=0 logger=amqp10.broker msg=.listening on")
    p.wait_for(r"worker=1 logger=amqp10.broker msg=.listening on")


class WithHttp(Parent):
    http_port: int
    """Where RabbitMQ's HTTP API listens (both workers, as the AMQP port)."""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WithHttp]:
    """Two workers with a users file and RabbitMQ's HTTP API (shared by this module's tests:
    each uses names of its own)."""
    data = tmp_path_factory.mktemp("meta")
    users = data / "users.toml"
    add_user(users, *ADMIN, tags=["administrator"])
    # (debug: the 0-9-1 front end logs each connection's address there, which pika_on reads)
    p = WithHttp(data, args=("--http-port", "0", "--users-file", str(users), "--log-level", "debug"))
    try:
        serving(p)
        p.http_port = int(p.wait_for(r"listening on 127\.0\.0\.1:(\d+) for 2 workers \(http\)")[1])
        yield p
    finally:
        p.stop()


@asynccontextmanager
async def on_each(p: Parent, user: tuple[str, str] | None = ADMIN) -> AsyncIterator[dict[int, Connection]]:
    """A connection served by worker 0 and one by worker 1, as ``user`` (None: anonymous)."""
    async with one_on_each(p, user) as conns:
        yield conns


def pika_on(p: Parent, worker: int) -> pika.BlockingConnection:
    """A pika connection served by ``worker`` (the broker logs each login with its address)."""
    for _ in range(64):
        mark = len(p.lines)
        conn = pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", p.port, credentials=pika.PlainCredentials(*ADMIN))
        )
        port = conn._impl._transport._sock.getsockname()[1]  # (pika keeps its socket there)
        served = p.wait_for(rf"worker=(\d+) logger=\S+ msg=.0-9-1 \S+ connection from 127\.0\.0\.1:{port}\b", mark)
        if int(served[1]) == worker:
            return conn
        conn.close()
    raise AssertionError(f"no pika connection served by worker {worker}")  # pragma: no cover


def call(p: WithHttp, method: str, path: str, body: Any = None) -> int:
    """RabbitMQ's HTTP API (served by either worker): the status."""
    conn = http.client.HTTPConnection("127.0.0.1", p.http_port, timeout=WAIT)
    try:
        headers = {"Authorization": "Basic " + base64.b64encode(":".join(ADMIN).encode()).decode()}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


async def test_an_exchange_and_bindings_declared_on_one_worker_route_on_the_other(broker: Parent) -> None:
    async with on_each(broker) as conns:
        for maker in (0, 1):
            x = f"route-x{maker}"
            queues = {owner: owned_by(owner, f"route{maker}-") for owner in (0, 1)}
            m = conns[maker].management()
            await m.declare_exchange(x, "direct")
            for owner, q in queues.items():
                await m.declare_queue(q)
                await m.bind(x, destination_queue=q, binding_key=f"to{owner}")
            other = conns[1 - maker]
            for owner, q in queues.items():  # each queue owned by one of the two workers
                sender = await other.open_sender(f"/exchanges/{x}/to{owner}")
                for i in range(3):
                    assert isinstance(await sender.send(Message(body=i)), Accepted)
                await sender.close()
                assert await bodies(conns[owner], q, 3) == [0, 1, 2]


async def test_a_redeclare_that_differs_is_refused_on_the_other_worker(broker: Parent) -> None:
    async with on_each(broker) as conns:
        await conns[0].management().declare_exchange("redeclare-x", "direct")
        await conns[0].management().declare_queue("redeclare-q", arguments={"x-max-length": 10})
        m1 = conns[1].management()
        with pytest.raises(ConflictError):
            await m1.declare_exchange("redeclare-x", "fanout")
        with pytest.raises(ConflictError):
            await m1.declare_queue("redeclare-q", arguments={"x-max-length": 20})
        await m1.declare_exchange("redeclare-x", "direct")  # the same: fine
    for worker in (0, 1):  # 0-9-1 (pika) on each worker, as one broker answers
        conn = pika_on(broker, worker)
        try:
            ch = conn.channel()
            ch.exchange_declare("redeclare-x", "direct", durable=True)
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
                ch.exchange_declare("redeclare-x", "topic", durable=True)
            assert refused.value.reply_code == 406
            ch = conn.channel()
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
                ch.queue_declare("redeclare-q", durable=True, arguments={"x-max-length": 20})
            assert refused.value.reply_code == 406
        finally:
            conn.close()


async def test_a_stream_an_attach_made_is_declared_again_alike_on_either_worker(broker: Parent) -> None:
    """A stream a 1.0 attach made has a stream's arguments on every worker: declared again
    (0-9-1) with them it is answered, with others refused, on its owner and on the other
    worker alike (the other worker had no record of it, and answered both)."""
    name = owned_by(0, "attached-s")
    async with on_each(broker) as conns:
        receiver = await conns[0].open_receiver(name, source=Source(address=name, capabilities=[symbol("stream")]))
        await receiver.close()
    for worker in (0, 1):  # (the owner first: its answer waits for every worker to have the record)
        conn = pika_on(broker, worker)
        try:
            ch = conn.channel()
            ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
                ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream", "x-max-age": "1D"})
            assert refused.value.reply_code == 406
        finally:
            conn.close()


async def test_pika_declares_on_one_worker_and_publishes_on_the_other(broker: Parent) -> None:
    for maker in (0, 1):
        x, key = f"pika-x{maker}", "k"
        queues = [owned_by(owner, f"pika{maker}-") for owner in (0, 1)]
        conn = pika_on(broker, maker)
        try:
            ch = conn.channel()
            ch.exchange_declare(x, "topic", durable=True)
            for q in queues:
                ch.queue_declare(q, durable=True)
                ch.queue_bind(q, x, routing_key="#")
        finally:
            conn.close()
        conn = pika_on(broker, 1 - maker)
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_publish(x, key, b"fanned", mandatory=True)  # confirmed once both owners took it
        finally:
            conn.close()
        async with on_each(broker) as conns:  # (0-9-1 consumers of another worker's queue: not here)
            for owner, q in enumerate(queues):
                assert await bodies(conns[owner], q, 1) == [[b"fanned"]]  # (one data section)


async def test_a_policy_set_over_http_applies_on_both_workers(broker: WithHttp) -> None:
    definition = {"max-length": 2, "overflow": "reject-publish"}
    body = {"pattern": r"^policy\.", "definition": definition, "apply-to": "queues"}
    assert call(broker, "PUT", "/api/policies/%2F/two-at-most", body) == 201
    async with on_each(broker) as conns:
        for owner in (0, 1):
            q = owned_by(owner, "policy.")
            await conns[0].management().declare_queue(q)
            for publisher in (0, 1):  # publishing on the owner and on the other worker
                sender = await conns[publisher].open_sender(q)
                outcomes = [await sender.send(Message(body=i)) for i in range(3)]
                assert [type(o) for o in outcomes] == [Accepted, Accepted, Rejected]
                await sender.close()
                assert await bodies(conns[owner], q, 2) == [0, 1]


async def test_a_user_added_over_http_logs_in_on_both_workers(broker: WithHttp) -> None:
    assert call(broker, "PUT", "/api/users/newcomer", {"password": "pw", "tags": ""}) == 201
    perms = {"configure": ".*", "write": ".*", "read": ".*"}
    assert call(broker, "PUT", "/api/permissions/%2F/newcomer", perms) == 201
    async with on_each(broker, ("newcomer", "pw")) as conns:
        for w in (0, 1):
            sender = await conns[w].open_sender(f"newcomer-{w}")
            assert isinstance(await sender.send(Message(body=w)), Accepted)


async def test_a_sigkilled_worker_catches_up_on_what_changed_while_it_was_down(tmp_path: Path) -> None:
    p = Parent(tmp_path)
    try:
        serving(p)
        async with on_each(p, None) as conns:
            queue = owned_by(0, "late-")
            m0 = conns[0].management()
            await m0.declare_queue(queue)
            pid = p.worker_pids()[1]
            os.kill(pid, signal.SIGSTOP)  # worker 1 cannot apply what comes now
            mark = len(p.lines)
            async with anyio.create_task_group() as tg:
                tg.start_soon(m0.declare_exchange, "late-x", "direct")  # answered once 1 is gone
                parent_made = r"level=info logger=amqp10\.broker msg=.declared direct exchange .late-x"
                await anyio.to_thread.run_sync(p.wait_for, parent_made, mark)
                os.kill(pid, signal.SIGKILL)
            await anyio.to_thread.run_sync(p.wait_for, r"worker 1 \(pid \d+\) ended .*killed by SIGKILL", mark)
            await m0.bind("late-x", destination_queue=queue, binding_key="late")
        caught = p.wait_for(r"metadata: worker 1 caught up from \d+ \((\d+) changes\)", mark)
        assert int(caught[1]) >= 1  # at least the exchange it never applied
        p.wait_for(r"worker=1 logger=amqp10.broker msg=.listening on", mark)
        async with on_each(p, None) as conns:
            sender = await conns[1].open_sender("/exchanges/late-x/late")
            assert isinstance(await sender.send(Message(body="caught up")), Accepted)
            assert await bodies(conns[0], queue, 1) == ["caught up"]
    finally:
        p.stop()
    assert re.fullmatch(r"\d+", (tmp_path / "workers" / "1.applied").read_text())  # where it goes on from
