"""Local transactions (Part 4) end to end: our client against our broker, over loopback.

Posting (§4.4.1) and retirement (§4.4.2) inside transactions, commit and
rollback, the errors for unknown transactions, roll back when the coordinator
link or the connection goes, and durability: a commit the broker acknowledged
survives SIGKILL, work not yet committed does not appear after it. Every wait
is bounded; nothing sleeps to synchronise.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

import amqp10.sync
from amqp10 import errors
from amqp10.broker.core import Queue
from amqp10.client import Connection, Receiver, TransactionError
from amqp10.client.transactions import _coordinator_of
from amqp10.message import Message
from amqp10.types import Accepted, ErrorCondition, Rejected
from amqp10.types.transactions import Coordinator, Declare, Declared, Discharge, TransactionalState
from tests.broker.amqp1.e2e import QUIET, T, client, nothing_arrives
from tests.broker.conftest import BrokerProcess, RunningBroker, broker_with

pytestmark = pytest.mark.anyio



@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def in_broker(b: RunningBroker, fn: Callable[[], Any]) -> Any:
    """Evaluate ``fn`` in the broker's event loop (no race with its thread)."""
    return await anyio.to_thread.run_sync(b.portal.call, fn)


async def count(b: RunningBroker, name: str) -> int:
    def read() -> int:
        node = b.broker.nodes.get(name)
        assert node is None or isinstance(node, Queue)
        return 0 if node is None else node.count

    return int(await in_broker(b, read))


async def take(r: Receiver, n: int) -> list[Any]:
    bodies = []
    for _ in range(n):
        d = await r.receive(timeout=T)
        bodies.append(d.message.body)
        await d.accept()
    return bodies


async def send_bodies(
    conn: Connection, address: str, bodies: list[Any], *, durable: bool = False
) -> None:
    s = await conn.open_sender(address)
    for body in bodies:
        assert isinstance(await s.send(Message(body=body, durable=durable)), Accepted)
    await s.close()


# -- declare and discharge ---------------------------------------------------------------------
async def test_coordinator_attach_declare_and_discharge(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        coordinator = await _coordinator_of(conn, None)
        target = coordinator.remote_target
        assert isinstance(target, Coordinator)
        assert "amqp:local-transactions" in (target.capabilities or [])
        declared = await coordinator.send(Message(body=Declare()))
        assert isinstance(declared, Declared) and isinstance(declared.txn_id, bytes)
        commit = await coordinator.send(Message(body=Discharge(txn_id=declared.txn_id)))
        assert isinstance(commit, Accepted)
        # discharged: the id is gone
        again = await coordinator.send(Message(body=Discharge(txn_id=declared.txn_id, fail=True)))
        assert isinstance(again, Rejected) and again.error is not None
        assert again.error.condition == ErrorCondition.TRANSACTION_UNKNOWN_ID
        # distributed transactions are not offered
        global_txn = await coordinator.send(Message(body=Declare(global_id=b"xid")))
        assert isinstance(global_txn, Rejected) and global_txn.error is not None
        assert global_txn.error.condition == ErrorCondition.NOT_IMPLEMENTED
        # the client API reuses the one coordinator link
        async with conn.transaction() as txn:
            assert txn.state == "open"
        assert txn.state == "committed"
        assert conn._coordinator is coordinator


# -- transactional posting (§4.4.1) ------------------------------------------------------------
async def test_commit_makes_posted_messages_visible_in_order(broker: RunningBroker) -> None:
    async with client(broker) as conn, client(broker) as watcher:
        sender = await conn.open_sender("post")
        receiver = await watcher.open_receiver("post")
        async with conn.transaction() as txn:
            for i in range(5):
                outcome = await sender.send(Message(body=i), txn=txn)
                assert isinstance(outcome, Accepted)  # the outcome within the transaction
            assert await count(broker, "post") == 0
            assert await nothing_arrives(receiver)
        assert txn.state == "committed"
        assert await take(receiver, 5) == [0, 1, 2, 3, 4]
        # a plain send after the transaction is untouched by it
        assert isinstance(await sender.send(Message(body="plain")), Accepted)
        assert await take(receiver, 1) == ["plain"]


async def test_rollback_discards_posted_messages(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        sender = await conn.open_sender("discard")
        receiver = await conn.open_receiver("discard")
        txn = await conn.transaction()
        tracker = sender.submit(Message(body="a"), txn=txn)
        assert isinstance(await sender.send(Message(body="b"), txn=txn), Accepted)
        assert isinstance(await tracker, Accepted)
        await txn.rollback()
        assert txn.state == "rolled back"
        assert await nothing_arrives(receiver)
        assert await count(broker, "discard") == 0
        with pytest.raises(errors.IllegalStateError):
            await sender.send(Message(body="late"), txn=txn)


async def test_exception_in_block_rolls_back_and_propagates(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        sender = await conn.open_sender("boom")
        with pytest.raises(ZeroDivisionError):
            async with conn.transaction() as txn:
                await sender.send(Message(body=1), txn=txn)
                1 / 0  # noqa: B018
        assert txn.state == "rolled back"
        assert await count(broker, "boom") == 0


# -- transactional retirement (§4.4.2) ---------------------------------------------------------
async def test_accept_in_rolled_back_transaction_redelivers(broker: RunningBroker) -> None:
    async with client(broker) as conn, client(broker) as other:
        await send_bodies(conn, "retire", ["m"])
        receiver = await conn.open_receiver("retire", credit=1)
        d = await receiver.receive(timeout=T)
        txn = await conn.transaction()
        await d.accept(txn=txn)
        # acquired until the transaction ends: nobody else gets it
        competitor = await other.open_receiver("retire")
        assert await nothing_arrives(competitor)
        await receiver.close()  # the transaction holds the message, not the link
        assert await nothing_arrives(competitor)
        await txn.rollback()
        again = await competitor.receive(timeout=T)
        assert again.message.body == "m"
        assert again.message.delivery_count == 1  # counted as a failed delivery
        await again.accept()
    assert await count(broker, "retire") == 0


async def test_accept_in_committed_transaction_removes(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        await send_bodies(conn, "gone", ["x", "y"])
        receiver = await conn.open_receiver("gone", credit=2)
        first = await receiver.receive(timeout=T)
        second = await receiver.receive(timeout=T)
        async with conn.transaction() as txn:
            await first.accept(txn=txn)
            await second.release(txn=txn)  # other outcomes go through the same path at commit
        stats = await in_broker(broker, lambda: broker.broker.nodes["gone"].stats.acked)
        assert stats == 1
        back = await receiver.receive(timeout=T)
        assert back.message.body == "y"
        await back.accept()
        assert await nothing_arrives(receiver)


async def test_consume_and_produce_in_one_transaction(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        await send_bodies(conn, "stage1", [1, 2, 3])
        receiver = await conn.open_receiver("stage1", credit=3)
        sender = await conn.open_sender("stage2")
        out = await conn.open_receiver("stage2")
        # a rolled back round: the input comes back, no output appears
        async with conn.transaction() as txn:
            d = await receiver.receive(timeout=T)
            await d.accept(txn=txn)
            await sender.send(Message(body=d.message.body * 10), txn=txn)
            await txn.rollback()
        assert await nothing_arrives(out)
        # the committed round: input gone, output there
        async with conn.transaction() as txn:
            for _ in range(3):
                d = await receiver.receive(timeout=T)
                await d.accept(txn=txn)
                await sender.send(Message(body=d.message.body * 10), txn=txn)
        assert sorted(await take(out, 3)) == [10, 20, 30]
        assert await count(broker, "stage1") == 0
        assert await nothing_arrives(receiver)


# -- errors ----------------------------------------------------------------------------------
async def test_transfer_with_unknown_txn_id_detaches_the_link(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        sender = await conn.open_sender("unknown")
        tracker = sender._submit(Message(body=1).encode(), None, TransactionalState(txn_id=b"nope"))
        with pytest.raises(errors.LinkError) as info:
            await tracker
        assert info.value.condition == ErrorCondition.TRANSACTION_UNKNOWN_ID
        assert not sender.is_open
        assert await count(broker, "unknown") == 0


async def test_disposition_with_unknown_txn_id_detaches_the_link(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        await send_bodies(conn, "unknown2", ["keep"])
        receiver = await conn.open_receiver("unknown2", credit=1)
        d = await receiver.receive(timeout=T)
        await d.settle(TransactionalState(txn_id=b"nope", outcome=Accepted()))
        with anyio.fail_after(T):
            while receiver.is_open:
                await conn._changed.wait()
        assert receiver.error is not None
        assert receiver.error.condition == ErrorCondition.TRANSACTION_UNKNOWN_ID
        # the message went back: a new receiver gets it
        again = await conn.open_receiver("unknown2")
        assert (await take(again, 1)) == ["keep"]


async def test_a_transaction_belongs_to_its_connection(broker: RunningBroker) -> None:
    async with client(broker) as a, client(broker) as b:
        txn = await a.transaction()
        sender = await b.open_sender("elsewhere")
        with pytest.raises(errors.IllegalStateError):
            await sender.send(Message(body=1), txn=txn)
        # the raw id on another connection is unknown there
        assert txn.txn_id is not None
        tracker = sender._submit(
            Message(body=1).encode(), None, TransactionalState(txn_id=txn.txn_id)
        )
        with pytest.raises(errors.LinkError) as info:
            await tracker
        assert info.value.condition == ErrorCondition.TRANSACTION_UNKNOWN_ID
        await txn.commit()


async def test_commit_refused_when_a_queue_cannot_take_the_messages(tmp_path: Path) -> None:
    rules = [{"pattern": "tiny", "policy": {"max_length": 2, "overflow": "reject"}}]
    with broker_with(tmp_path, addresses=rules) as b:
        async with client(b) as conn:
            sender = await conn.open_sender("tiny")
            txn = await conn.transaction()
            for i in range(3):
                await sender.send(Message(body=i), txn=txn)
            with pytest.raises(TransactionError) as info:
                await txn.commit()
            assert info.value.condition == ErrorCondition.TRANSACTION_ROLLBACK
            assert txn.state == "failed"
            assert await count(b, "tiny") == 0


# -- the scope of a transaction (§4.2) ---------------------------------------------------------
@pytest.mark.parametrize("how", ["close", "drop", "coordinator-detach"])
async def test_open_transactions_roll_back_when_their_scope_ends(
    broker: RunningBroker, how: str
) -> None:
    async with client(broker) as watcher:
        await send_bodies(watcher, "scope.in", ["work"])
        async with client(broker) as conn:
            receiver = await conn.open_receiver("scope.in", credit=1)
            sender = await conn.open_sender("scope.out")
            d = await receiver.receive(timeout=T)
            txn = await conn.transaction()
            await d.accept(txn=txn)
            assert isinstance(await sender.send(Message(body="posted"), txn=txn), Accepted)
            if how == "coordinator-detach":
                assert conn._coordinator is not None
                await conn._coordinator.close()
                await receiver.close()
                with pytest.raises(TransactionError):
                    await txn.commit()
            elif how == "drop":
                conn.driver.abort()  # no close: the socket just goes
                await conn.wait_closed()
        # the retired message is back, the posted one never appears
        again = await watcher.open_receiver("scope.in")
        assert await take(again, 1) == ["work"]
        out = await watcher.open_receiver("scope.out")
        assert await nothing_arrives(out)
        opened = await in_broker(
            broker, lambda: [len(h.txns.open) for h in broker.broker.connections if h.txns]
        )
        assert opened == [0] * len(opened)


# -- the blocking facade -----------------------------------------------------------------------
def test_blocking_transaction(broker: RunningBroker) -> None:
    with amqp10.sync.connect(f"amqp://{broker.url}", timeout=T) as conn:
        sender = conn.open_sender("sync-txn")
        receiver = conn.open_receiver("sync-txn")
        with conn.transaction() as txn:
            assert txn.state == "open" and txn.txn_id
            assert isinstance(sender.send(Message(body=1), txn=txn), Accepted)
            assert isinstance(sender.submit(Message(body=2), txn=txn).wait(), Accepted)
        assert txn.state == "committed"
        d1, d2 = receiver.receive(timeout=T), receiver.receive(timeout=T)
        assert [d1.message.body, d2.message.body] == [1, 2]
        with pytest.raises(KeyError), conn.transaction() as txn2:
            d1.accept(txn=txn2)
            d2.accept(txn=txn2)
            raise KeyError("undo")
        assert txn2.state == "rolled back"
        # both back (redelivered in order), then taken for good in an explicit transaction
        txn3 = conn.transaction().declare()
        again = [receiver.receive(timeout=T) for _ in range(2)]
        assert [d.message.body for d in again] == [1, 2]
        for d in again:
            d.accept(txn=txn3)
        txn3.commit()
        assert txn3.state == "committed"
        with pytest.raises(errors.TimeoutError):
            receiver.receive(timeout=QUIET)


# -- durability: SIGKILL around the commit -----------------------------------------------------
async def start_process(data: Path) -> BrokerProcess:
    return await anyio.to_thread.run_sync(
        lambda: BrokerProcess("--port", "0", "--data-dir", str(data))
    )


async def test_committed_transaction_survives_sigkill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    bp = await start_process(data)
    try:
        async with client(bp.url) as conn:
            await send_bodies(conn, "durable.in", ["old"], durable=True)
            receiver = await conn.open_receiver("durable.in", credit=1)
            sender = await conn.open_sender("durable.out")
            d = await receiver.receive(timeout=T)
            async with conn.transaction() as txn:
                await d.accept(txn=txn)
                for i in range(20):
                    await sender.send(Message(body=i, durable=True), txn=txn)
            assert txn.state == "committed"  # the discharge was accepted: it must be on disk
            await anyio.to_thread.run_sync(bp.kill)  # SIGKILL, with the connection still up
    finally:
        await anyio.to_thread.run_sync(bp.kill)
    bp = await start_process(data)
    try:
        async with client(bp.url) as conn:
            out = await conn.open_receiver("durable.out")
            assert await take(out, 20) == list(range(20))
            assert await nothing_arrives(out)
            retired = await conn.open_receiver("durable.in")
            assert await nothing_arrives(retired)
    finally:
        await anyio.to_thread.run_sync(bp.kill)


async def test_uncommitted_transaction_leaves_no_trace_after_sigkill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    bp = await start_process(data)
    try:
        async with client(bp.url) as conn:
            await send_bodies(conn, "pending.in", ["old"], durable=True)
            receiver = await conn.open_receiver("pending.in", credit=1)
            sender = await conn.open_sender("pending.out")
            d = await receiver.receive(timeout=T)
            txn = await conn.transaction()
            await d.accept(txn=txn)
            for i in range(20):
                assert isinstance(
                    await sender.send(Message(body=i, durable=True), txn=txn), Accepted
                )
            # a plain durable send acknowledged after them: the store has caught up
            await send_bodies(conn, "pending.marker", ["m"], durable=True)
            await anyio.to_thread.run_sync(bp.kill)
    finally:
        await anyio.to_thread.run_sync(bp.kill)
    bp = await start_process(data)
    try:
        async with client(bp.url) as conn:
            assert await take(await conn.open_receiver("pending.marker"), 1) == ["m"]
            out = await conn.open_receiver("pending.out")
            assert await nothing_arrives(out)
            back = await conn.open_receiver("pending.in")
            d = await back.receive(timeout=T)
            assert d.message.body == "old"
            assert d.message.delivery_count == 1  # it was out when the broker died
            await d.accept()
    finally:
        await anyio.to_thread.run_sync(bp.kill)


async def test_a_transaction_does_not_outlive_a_reconnect(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        sender = await conn.open_sender("after-reconnect")
        txn = await conn.transaction()
        conn.reconnects += 1  # as the reconnect logic counts a re-made connection
        with pytest.raises(TransactionError):
            await sender.send(Message(body=1), txn=txn)
        assert txn.state == "failed"
        with pytest.raises(errors.IllegalStateError):
            await txn.commit()
