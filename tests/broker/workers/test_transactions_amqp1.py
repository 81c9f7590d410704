"""AMQP 1.0 transactions (our client's API) over queues of both workers commit or roll back
as one (``amqp10 broker --workers 2``; the transaction's connection on worker 0, its
queues owned by worker 0 and worker 1). Every wait is bounded; none is a timed assertion."""

from __future__ import annotations

import pytest

from amqp10.client import Receiver
from amqp10.errors import AMQPError
from amqp10.message import Message
from amqp10.types import Accepted
from tests.broker.test_workers import WAIT, Parent

from .test_processes import one_on_each, owned_by

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _take(receiver: Receiver, n: int) -> list[object]:
    got = []
    for _ in range(n):
        d = await receiver.receive(timeout=WAIT)
        got.append(d.message.body)
        await d.accept()
    return got


async def _nothing(receiver: Receiver) -> bool:
    try:
        await receiver.receive(timeout=0.5)
    except AMQPError:
        return True
    return False


async def test_posted_messages_to_queues_of_both_workers_commit_and_roll_back_as_one(broker: Parent) -> None:
    async with one_on_each(broker) as conns:
        names = [owned_by(0, "tx1post"), owned_by(1, "tx1post")]
        senders = [await conns[0].open_sender(n) for n in names]
        receivers = [await conns[1].open_receiver(n) for n in names]
        async with conns[0].transaction() as txn:
            for s in senders:
                for i in range(3):
                    assert isinstance(await s.send(Message(body=i), txn=txn), Accepted)
            for r in receivers:
                assert await _nothing(r)  # nothing visible before the commit
        assert txn.state == "committed"
        for r in receivers:
            assert await _take(r, 3) == [0, 1, 2]
        txn = await conns[0].transaction()
        for s in senders:
            await s.send(Message(body="no"), txn=txn)
        await txn.rollback()
        for s in senders:
            assert isinstance(await s.send(Message(body="after")), Accepted)
        for r in receivers:
            assert await _take(r, 1) == ["after"]  # (the rolled back ones never came)


async def test_accepts_on_queues_of_both_workers_commit_and_roll_back_as_one(broker: Parent) -> None:
    async with one_on_each(broker) as conns:
        names = [owned_by(0, "tx1acc"), owned_by(1, "tx1acc")]
        for n in names:
            s = await conns[1].open_sender(n)
            for body in ("a", "b"):
                assert isinstance(await s.send(Message(body=body)), Accepted)
            await s.close()
        receivers = [await conns[0].open_receiver(n, credit=1) for n in names]
        firsts = [await r.receive(timeout=WAIT) for r in receivers]
        txn = await conns[0].transaction()
        for d in firsts:
            await d.accept(txn=txn)
        for r in receivers:
            await r.close()  # the transaction holds the messages, not the links
        await txn.rollback()  # so they go back, as failed deliveries
        others = [await conns[1].open_receiver(n, credit=1) for n in names]
        again = [await r.receive(timeout=WAIT) for r in others]
        assert [d.message.body for d in again] == ["a", "a"]
        assert [d.message.delivery_count for d in again] == [1, 1]
        out = owned_by(0, "tx1moved")
        mover = await conns[1].open_sender(out)
        async with conns[1].transaction() as txn:  # a move: taken from both, published on one
            for d in again:
                await d.accept(txn=txn)
            await mover.send(Message(body="moved"), txn=txn)
        for r in others:
            assert await _take(r, 1) == ["b"]  # the accepted "a"s are gone
            assert await _nothing(r)
        watcher = await conns[0].open_receiver(out)
        assert await _take(watcher, 1) == ["moved"]
