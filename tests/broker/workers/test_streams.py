"""Streams across N worker processes (``amqp10 broker --workers 2``): a stream one worker
owns, published to from either worker with outcomes once stored, read from either with
offsets (first, last, next, a number, a timestamp), filters and credit, all applied by the
owner. Real processes on 127.0.0.1, our client pinned to a worker as ``test_processes``
does."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from amqp10.addresses import partition_address
from amqp10.broker.core.partitioned import partition_of_key
from amqp10.broker.workers.ownership import Ownership
from amqp10.client import Connection, Receiver
from amqp10.errors import AMQPError
from amqp10.message import Message
from amqp10.types import Accepted, Described, Source, symbol, timestamp
from tests.broker.test_workers import WAIT, Parent
from tests.broker.workers.conftest import running

from .test_processes import one_on_each, owned_by

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

OFFSET = symbol("rabbitmq:stream-offset-spec")
FILTER = symbol("rabbitmq:stream-filter")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def reader(conn: Connection, name: str, start: Any, *, credit: int = 100, only: str | None = None) -> Receiver:
    """A stream reader from ``start``; ``only``: the messages of that filter value."""
    filters = {OFFSET: start}
    if only is not None:
        filters[FILTER] = Described(FILTER, only)
    source = Source(address=name, filter=filters, capabilities=[symbol("stream")])
    return await conn.open_receiver(name, source=source, credit=credit)


async def bodies(r: Receiver, n: int | None = None) -> list[Any]:
    """What ``r`` gets: ``n`` messages, or (None) until nothing more comes."""
    got = []
    while n is None or len(got) < n:
        try:
            d = await r.receive(timeout=WAIT if n is not None else 1.0)
        except AMQPError:
            if n is None:
                return got
            raise
        got.append(d.message.body)
        await d.accept()
    return got


async def test_a_stream_is_read_from_either_worker_with_offsets_filters_and_credit(broker: Parent) -> None:
    async with one_on_each(broker) as conns:
        name = owned_by(1, "stream")  # owned by worker 1: worker 0's clients cross
        await conns[0].management().declare_queue(name, type="stream")
        for w in (0, 1):  # published from either worker, accepted once stored
            sender = await conns[w].open_sender(name)
            for i in range(5 * w, 5 * w + 5):
                colour = "red" if i % 2 else "blue"
                msg = Message(body=i, message_annotations={"x-stream-filter-value": colour})
                assert isinstance(await sender.send(msg), Accepted)
            await sender.close()
        middle = time.time()
        sender = await conns[0].open_sender(name)
        log: list[Any] = list(range(10))
        for w in (0, 1):
            first = await reader(conns[w], name, "first")
            assert await bodies(first, len(log)) == log
            assert await bodies(await reader(conns[w], name, 7)) == log[7:]
            assert await bodies(await reader(conns[w], name, "last")) == log[-1:]
            red = await reader(conns[w], name, "first", only="red")
            assert await bodies(red) == [1, 3, 5, 7, 9]
            tail = await reader(conns[w], name, "next")
            assert isinstance(await sender.send(Message(body=f"new{w}")), Accepted)
            log.append(f"new{w}")
            assert await bodies(tail, 1) == [f"new{w}"]
            assert await bodies(first, 1) == [f"new{w}"]  # a reader goes on with what comes
        since = await reader(conns[1], name, timestamp(int(middle * 1000)))
        assert await bodies(since) == ["new0", "new1"]  # what arrived since then
        # credit: a reader granting 3 at a time gets 3, then 3 more once it grants them
        slow = await reader(conns[0], name, "first", credit=0)
        slow.add_credit(3)
        assert await bodies(slow, 3) == [0, 1, 2]
        with pytest.raises(AMQPError):
            await slow.receive(timeout=1.0)  # no more than it granted
        slow.add_credit(3)
        assert await bodies(slow, 3) == [3, 4, 5]


PARTITIONS = 3


@pytest.fixture
def partitioned(tmp_path: Path) -> Iterator[Parent]:
    """``amqp10 broker --workers 2`` where ``parts*`` are streams of 3 partitions."""
    config = tmp_path / "broker.toml"
    config.write_text(
        f'[[addresses]]\npattern = "parts*"\nkind = "stream"\npolicy = {{ partitions = {PARTITIONS} }}\n'
    )
    yield from running(Parent(tmp_path / "data", args=("--no-http", "--config", str(config))))


def keyed(n: int, tag: str) -> list[Message]:
    return [
        Message(body=f"{tag}{i}", message_annotations={"x-opt-partition-key": f"k{i % 7}"})
        for i in range(n)
    ]


def placed(messages: list[Message]) -> dict[int, list[Any]]:
    """Each partition's messages, in publish order (where their keys place them)."""
    out: dict[int, list[Any]] = {k: [] for k in range(PARTITIONS)}
    for m in messages:
        key = (m.message_annotations or {})["x-opt-partition-key"]
        out[partition_of_key(key, PARTITIONS)].append(m.body)
    return out


async def stream_info(conn: Connection, address: str) -> dict[str, Any]:
    request = Message(application_properties={"operation": "stream-info", "address": address})
    reply = await conn.request("$management", request, timeout=WAIT)
    assert (reply.application_properties or {}).get("status-code", 200) == 200, reply.body
    return dict(reply.body)


def partition_owners(name: str) -> list[int]:
    return [Ownership(2).owner("/", partition_address(name, k)) for k in range(PARTITIONS)]


async def test_partitions_of_several_owners_are_published_to_and_read_from_either_worker(partitioned: Parent) -> None:
    name = next(f"parts-{i}" for i in range(100) if len(set(partition_owners(f"parts-{i}"))) == 2)
    async with one_on_each(partitioned) as conns:
        sent: list[Message] = []
        for w in (0, 1):  # the partitioned address is on every worker: each places by key
            sender = await conns[w].open_sender(name)
            for m in keyed(20, f"w{w}-"):
                assert isinstance(await sender.send(m), Accepted)
                sent.append(m)
        want = placed(sent)
        for w in (0, 1):
            assert (await stream_info(conns[w], name))["partitions"] == PARTITIONS
            for k in range(PARTITIONS):
                address = partition_address(name, k)
                info = await stream_info(conns[w], address)  # from the partition's owner
                assert (info["first"], info["next"]) == (0, len(want[k]))
                assert await bodies(await reader(conns[w], address, "first")) == want[k]
