"""The metadata's one order, in one process: the parent's :class:`Sequencer` and two
workers' :class:`SharedMetadata` over real Unix sockets, the sequencer pumped by a task
(as the supervisor's ``select`` loop does). Every wait is bounded; none is timed."""

from __future__ import annotations

import asyncio
import select
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest

from amqp10.addresses import partition_address
from amqp10.amqp091.fields import Float32, Int8, Int64, LongString, Timestamp
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker, PreconditionFailed, Stream
from amqp10.broker.workers.metadata import (
    Inequivalent,
    MetadataLog,
    Sequencer,
    SharedMetadata,
    apply_change,
)

pytestmark = pytest.mark.anyio

WAIT = 30.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def sequenced(directory: Path) -> AsyncIterator[Sequencer]:
    """The parent's sequencer over ``directory``, served while the block runs."""
    seq = Sequencer(BrokerConfig(), directory / "workers", MetadataLog(directory / "metadata.sqlite3"))

    async def pump() -> None:
        while True:
            readable, _, _ = select.select(seq.fds(), [], [], 0)
            for fd in readable:
                seq.ready(fd)
            await asyncio.sleep(0.001)

    task = asyncio.ensure_future(pump())
    try:
        yield seq
    finally:
        task.cancel()
        seq.close()


@asynccontextmanager
async def workers(directory: Path, n: int) -> AsyncIterator[list[Broker]]:
    """``n`` workers' cores, each caught up and taking part in the order."""
    brokers = [Broker(BrokerConfig()) for _ in range(n)]
    async with anyio.create_task_group() as tg:
        for k, b in enumerate(brokers):
            await tg.start(SharedMetadata(b, k, directory / "workers").run)
        yield brokers
        tg.cancel_scope.cancel()


async def answered(broker: Broker) -> None:
    """Wait for the answer to what ``broker`` just changed (as a front end's reply does)."""
    done = anyio.Event()
    broker.after_commit(done.set)
    await done.wait()


async def test_a_change_is_answered_once_every_worker_made_it(tmp_path: Path) -> None:
    with anyio.fail_after(WAIT):
        async with sequenced(tmp_path) as seq, workers(tmp_path, 2) as (b0, b1):
            b0.default.declare_exchange("orders", "topic")
            b0.default.declare_queue("shipping", arguments={"x-max-length": 5})
            b0.default.bind("orders", "shipping", "ship.#")
            seen: list[bool] = []
            done = anyio.Event()

            def answer() -> None:  # what the other worker holds when the maker answers
                x = b1.default.exchange("orders")
                seen.append(x is not None and x.type == "topic" and bool(x.bindings))
                done.set()

            b0.after_commit(answer)
            assert not done.is_set()  # held: the order has not come back yet
            await done.wait()
            assert seen == [True]
            assert b1.default.queue("shipping").arguments == {"x-max-length": 5}  # type: ignore[union-attr]
            assert seq.log.last() == 3


async def test_arguments_without_an_amqp_1_0_type_reach_every_copy_as_declared(tmp_path: Path) -> None:
    """A decimal, a timestamp, an integer beyond 64 bits and a 0-9-1 field type cross the
    control link with their types, to the other worker, the parent's copy and its log (they
    crossed as their text, or as an AMQP timestamp, an Int8 as an int: a re-declaration there
    was compared with that)."""
    arguments = {
        "x-queue-type": "stream",
        "x-app-segment-size": Decimal("1.50"),  # (kept unread: RabbitMQ keeps any argument)
        "x-stream-filter-size-bytes": [
            datetime(2024, 5, 1, 12, 0, tzinfo=UTC),
            {"n": 1 << 70},
            [Int8(3), {"n": Int64(3)}, Float32(2.5), LongString(b"\xff"), Timestamp(5), 3],
        ],
    }

    def shape(value: Any) -> Any:  # (a value with its type, all the way in: Int8(3) is not 3)
        if isinstance(value, dict):
            return {k: shape(v) for k, v in value.items()}
        if isinstance(value, list):
            return [shape(v) for v in value]
        return type(value), repr(value)

    def same(copy: dict[str, Any]) -> bool:
        return copy == arguments and shape(copy) == shape(arguments)

    with anyio.fail_after(WAIT):
        async with sequenced(tmp_path) as seq, workers(tmp_path, 2) as (b0, b1):
            b0.default.declare_queue("s", arguments=arguments)
            await answered(b0)
            assert same(b1.default.stream_arguments["s"])
            assert same(seq.mirror.default.stream_arguments["s"])
        async with sequenced(tmp_path) as again:  # the parent's copy from its log
            assert same(again.mirror.default.stream_arguments["s"])


async def test_a_stream_an_attach_or_a_partitioned_stream_makes_has_its_arguments_on_every_worker(tmp_path: Path) -> None:
    """A stream made by name (a 1.0 attach, an address rule; a partition) has a stream's
    arguments, its type, and every worker has its record with them, as of a declared one:
    a 0-9-1 re-declaration is compared with them wherever it comes (it had none anywhere,
    and no record but on its maker)."""
    with anyio.fail_after(WAIT):
        async with sequenced(tmp_path), workers(tmp_path, 2) as (b0, b1):
            b0.default.lookup("attached", create=True, kind="stream")
            b0.default.create_node(partition_address("partitioned", 0), "stream")
            await answered(b0)
            for name in ("attached", partition_address("partitioned", 0)):
                for vhost in (b0.default, b1.default):
                    assert isinstance(vhost.nodes[name], Stream)
                    assert vhost.stream_arguments[name] == {"x-queue-type": "stream"}


async def test_two_like_stream_declarations_without_its_type_reach_the_parent_alike(tmp_path: Path) -> None:
    """A stream declared by its kind (the management API's, HTTP's), without x-queue-type, is
    shared with a stream's arguments, its type among them: the same declaration from the
    other worker at once is compared with the parent's copy alike and is in the order too
    (it was shared without its type, and refused as a stream declared with other arguments)."""
    with anyio.fail_after(WAIT):
        async with sequenced(tmp_path) as seq, workers(tmp_path, 2) as (b0, b1):
            for vhost in (b0.default, b1.default):  # before either reached the parent
                vhost.declare_queue("s", kind="stream", arguments={"x-max-age": "1D"})
            await answered(b0)
            await answered(b1)
            assert seq.mirror.default.stream_arguments["s"] == {"x-queue-type": "stream", "x-max-age": "1D"}
            assert seq.log.last() == 2  # (both declarations in the order: neither refused)


async def test_two_workers_declaring_one_queue_at_once_are_compared_as_rabbitmq_compares(tmp_path: Path) -> None:
    """Two workers' declarations of one queue at once, over the control link: one with an
    argument RabbitMQ does not compare (``x-consumer-timeout``) is equivalent and in the order
    (it was refused as other arguments: the declaration stayed on its worker only); one with a
    float where the first had an integer, in an argument RabbitMQ 3.10 takes in any type and
    compares (``x-queue-master-locator``), is refused (it was taken: 3.0 == 3)."""
    with anyio.fail_after(WAIT):
        async with sequenced(tmp_path) as seq, workers(tmp_path, 2) as (b0, b1):
            b0.default.declare_queue("raced", arguments={"x-max-length": 5})
            b1.default.declare_queue("raced", arguments={"x-max-length": 5, "x-consumer-timeout": 1000})
            await answered(b0)
            await answered(b1)
            assert seq.log.last() == 2  # (both in the order: neither refused)
            b0.default.declare_queue("floated", arguments={"x-queue-master-locator": 3})
            b1.default.declare_queue("floated", arguments={"x-queue-master-locator": 3.0})
            await answered(b0)
            await answered(b1)
            assert seq.log.last() == 3  # the second refused: one declaration in the order


async def test_two_workers_declaring_one_name_at_once_are_put_in_order(tmp_path: Path) -> None:
    with anyio.fail_after(WAIT):
        async with sequenced(tmp_path) as seq, workers(tmp_path, 2) as (b0, b1):
            b0.default.declare_exchange("raced", "direct")
            b1.default.declare_exchange("raced", "fanout")  # before either reached the parent
            await answered(b0)
            await answered(b1)
            assert seq.mirror.default.exchanges["raced"].type in ("direct", "fanout")
            assert seq.log.last() == 1  # the second was refused: one declaration in the order


async def test_a_starting_worker_catches_up_from_its_last_applied_number(tmp_path: Path) -> None:
    with anyio.fail_after(WAIT):
        async with sequenced(tmp_path) as seq:
            async with workers(tmp_path, 2) as (b0, _):
                b0.default.declare_exchange("before", "direct")
                await answered(b0)
            applied = (tmp_path / "workers" / "1.applied").read_text()
            assert applied == "1"
            async with workers(tmp_path, 1) as (b0,):  # worker 0 again, its core empty
                b0.default.declare_exchange("meanwhile", "fanout")
                await answered(b0)
            async with workers(tmp_path, 2) as (_, b1):  # worker 1 missed one change
                assert b1.default.exchange("meanwhile") is not None
                assert b1.default.exchange("before") is None  # applied already: not again
            assert seq.log.last() == 2
    async with sequenced(tmp_path) as again:  # the parent restarted: its copy from the log
        assert {"before", "meanwhile"} <= set(again.mirror.default.exchanges)


def test_the_parent_compares_two_declarations_of_a_queue_as_rabbitmq_does() -> None:
    """Two workers' declarations of one name: the later is in the order if it is equivalent to
    the earlier as RabbitMQ 3.10 compares a re-declaration (core/equivalence.py), not if equal
    (an argument it does not compare, or another integer type, was refused: the queue stayed
    on that worker only; a float for an integer was taken), refused in RabbitMQ's words."""
    broker = Broker(BrokerConfig())
    apply_change(broker, "/", ("queue", "q", "queue", True, False, {"x-max-length": 5}), check=True)
    for same in ({"x-max-length": 5, "x-consumer-timeout": 1000}, {"x-max-length": Int8(5)}):
        apply_change(broker, "/", ("queue", "q", "queue", True, False, same), check=True)
    with pytest.raises(Inequivalent) as refused:
        apply_change(broker, "/", ("queue", "q", "queue", True, False, {"x-max-length": 5.0}), check=True)
    assert str(refused.value) == "inequivalent arg 'x-max-length' for queue 'q' in vhost '/': received '5.0' but current is '5'"
    stream = {"x-queue-type": "stream", "x-max-age": "1D"}
    apply_change(broker, "/", ("queue", "s", "stream", True, False, stream), check=True)
    apply_change(broker, "/", ("queue", "s", "stream", True, False, {**stream, "x-message-ttl": 5}), check=True)
    with pytest.raises(Inequivalent) as refused:
        apply_change(broker, "/", ("queue", "s", "stream", True, False, {**stream, "x-max-age": "2D"}), check=True)
    assert str(refused.value) == "inequivalent arg 'x-max-age' for queue 's' in vhost '/': received '2D' but current is '1D'"


def test_the_parent_refuses_a_declaration_that_differs() -> None:
    broker = Broker(BrokerConfig())
    apply_change(broker, "/", ("queue", "q", "queue", True, False, {"x-max-length": 5}), check=True)
    apply_change(broker, "/", ("queue", "q", "queue", True, False, {"x-max-length": 5}), check=True)
    with pytest.raises(Inequivalent):
        apply_change(broker, "/", ("queue", "q", "queue", True, False, {"x-max-length": 6}), check=True)
    apply_change(broker, "/", ("queue", "q", "queue", True, False, {"x-max-length": 6}), check=False)  # a worker: kept
    apply_change(broker, "/", ("exchange", "x", "direct", True, False, False, None, {}), check=True)
    with pytest.raises(PreconditionFailed):
        apply_change(broker, "/", ("exchange", "x", "topic", True, False, False, None, {}), check=True)
    with pytest.raises(ValueError):
        apply_change(broker, "/", ("nonsense",), check=True)
