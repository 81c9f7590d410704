"""Our 1.0 client over real sockets against worker A's front end, for a queue worker B owns.

Worker A is a whole broker service in the test's event loop; worker B is a broker core
serving its nodes over an internal link (a Unix socketpair) in the same loop. A's
broker consults its placement (an :class:`Ownership` of two workers, the ``b.`` queues
placed on B) when the front end looks a node up, and gets a :class:`RemoteNode`.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker, Queue
from amqp10.broker.workers.link import InternalLink, run_link
from amqp10.broker.workers.owner import NodeServer
from amqp10.broker.workers.ownership import Ownership, Placement
from amqp10.broker.workers.remote import RemoteNodes
from amqp10.client import connect
from amqp10.message import Message
from amqp10.types import Accepted, ErrorCondition, Rejected, Released, Source, symbol
from tests.broker.conftest import broker_in_loop

from .test_internal_link import until

pytestmark = pytest.mark.anyio

T = 10.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Workers:
    def __init__(self, port: int, b: Broker, links: tuple[InternalLink, InternalLink]) -> None:
        self.url = f"amqp://127.0.0.1:{port}"
        self.b = b
        self.links = links

    def queue(self, name: str) -> Queue:
        q = self.b.default.queue(name)
        assert isinstance(q, Queue)
        return q


@asynccontextmanager
async def two_workers(tmp_path: Path) -> AsyncIterator[Workers]:
    b = Broker(BrokerConfig())
    for name in ("b.work", "b.dlq"):
        b.default.declare_queue(name)
    b.default.declare_queue(
        "b.dl", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "b.dlq"}
    )
    async with broker_in_loop(tmp_path) as service:
        remote = RemoteNodes("worker-a")
        sa, sb = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        link_b = await run_link(sb, NodeServer(b), "worker-b")
        link_a = await run_link(sa, remote, "worker-a")
        assert service.broker is not None
        # worker A of two, with every node under "b." placed on worker B (1)
        names = ("b.work", "b.dlq", "b.dl", "b.gone", "b.small")
        ownership = Ownership(2, 0, {("/", name): 1 for name in names})
        service.broker.placement = Placement(ownership, {1: remote})
        try:
            yield Workers(service.ports[0], b, (link_a, link_b))
        finally:
            link_a.fail("test over")
            link_b.fail("test over")


async def test_a_client_of_worker_a_publishes_and_consumes_a_queue_of_worker_b(tmp_path: Path) -> None:
    async with two_workers(tmp_path) as w, await connect(w.url, timeout=T) as conn:
        sender = await conn.open_sender("b.work")
        for i in range(20):
            assert isinstance(await sender.send(Message(body=i)), Accepted)  # B took it
        q = w.queue("b.work")
        assert q.count == 20 and q.stats.enqueued == 20
        receiver = await conn.open_receiver("b.work", credit=5)
        got: list[Any] = []
        for _ in range(20):
            d = await receiver.receive(timeout=T)
            got.append(d.message.body)
            await d.accept()
        assert got == list(range(20))  # the queue's order, through both links
        await until(lambda: q.stats.acked == 20)
        assert q.count == 0


async def test_what_the_owner_refuses_is_settled_with_its_outcome(tmp_path: Path) -> None:
    async with two_workers(tmp_path) as w, await connect(w.url, timeout=T) as conn:
        w.b.default.declare_queue("b.small", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
        sender = await conn.open_sender("b.small")
        assert isinstance(await sender.send(Message(body=1)), Accepted)
        full = await sender.send(Message(body=2))  # the owner's queue is full: rejected, with why
        assert isinstance(full, Rejected) and full.error is not None
        assert full.error.condition == ErrorCondition.RESOURCE_LIMIT_EXCEEDED
        assert "'b.small' is full" in str(full.error.description)
        w.links[1].fail("worker B went")  # the owner is unavailable: released, none left unsettled
        for i in range(3):
            assert isinstance(await sender.send(Message(body=i)), Released)


async def test_a_clients_outcomes_are_the_owners_queue_semantics(tmp_path: Path) -> None:
    async with two_workers(tmp_path) as w, await connect(w.url, timeout=T) as conn:
        sender = await conn.open_sender("b.dl")
        for body in ("rejected", "released", "failed"):
            await sender.send(Message(body=body))
        receiver = await conn.open_receiver("b.dl", credit=3)
        first = {}
        for _ in range(3):
            d = await receiver.receive(timeout=T)
            first[d.message.body] = d
        await first["rejected"].reject()
        await first["released"].release()
        await first["failed"].modify(delivery_failed=True)
        again = {}
        for _ in range(2):
            d = await receiver.receive(timeout=T)
            again[d.message.body] = d
        assert set(again) == {"released", "failed"}
        failed, released = again["failed"].message.header, again["released"].message.header
        assert failed is not None and failed.delivery_count == 1  # B counted the failed delivery
        assert released is None or not released.delivery_count
        for d in again.values():
            await d.accept()
        dlq = w.queue("b.dlq")
        await until(lambda: dlq.count == 1)  # B's queue dead-lettered the rejected one
        assert w.queue("b.dl").stats.rejected == 1


async def test_competing_consumers_on_both_workers(tmp_path: Path) -> None:
    async with two_workers(tmp_path) as w, await connect(w.url, timeout=T) as conn:
        q = w.queue("b.work")
        from .test_internal_link import Taker

        local = Taker()
        q.add_consumer(local)  # a consumer on the owner itself
        receiver = await conn.open_receiver("b.work", credit=100)
        await until(lambda: len(q.consumers) == 2)
        sender = await conn.open_sender("b.work")
        for i in range(40):
            await sender.send(Message(body=i))
        remote_got: list[Any] = []
        while len(remote_got) + len(local.got) < 40:
            d = await receiver.receive(timeout=T)
            remote_got.append(d.message.body)
            await d.accept()
        assert remote_got and local.got  # both competed, each message once
        assert len(remote_got) + len(local.got) == 40
        assert remote_got == sorted(remote_got)


async def test_a_kind_named_by_one_attach_is_not_carried_by_the_next(tmp_path: Path) -> None:
    # The stand-in is shared by every link to its name: a capability one attach named
    # (make it a stream) is that attach's, not the next plain attach's.
    async with two_workers(tmp_path) as w, await connect(w.url, timeout=T) as conn:
        source = Source(address="b.gone", capabilities=[symbol("stream")])
        receiver = await conn.open_receiver("b.gone", source=source)
        await until(lambda: "b.gone" in w.b.default.nodes)
        assert w.b.default.nodes["b.gone"].kind == "stream"
        await receiver.close()
        w.b.default.delete_node("b.gone")
        receiver = await conn.open_receiver("b.gone")  # a plain name: the rules make it, a queue
        await until(lambda: "b.gone" in w.b.default.nodes)
        assert w.b.default.nodes["b.gone"].kind == "queue"
        await receiver.close()
