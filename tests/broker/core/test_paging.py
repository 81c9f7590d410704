"""Bounded memory: a queue over its budget pages message bodies out to the store and reads
them back in order (core/paging.py), driven on the core with a real store and a journal
committed by hand (so a read can find a row not committed yet)."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from amqp10.broker.amqp1.message import Amqp1Message
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker
from amqp10.broker.core.message import QueuedMessage
from amqp10.broker.core.paging import MESSAGE_OVERHEAD
from amqp10.broker.core.queues import Queue
from amqp10.broker.core.store import Store
from amqp10.message import Message
from amqp10.types import symbol
from tests.broker.harness import HandJournal, Taker


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


BUDGET = 4 * (100 + MESSAGE_OVERHEAD)  # about four 100-byte messages in memory


def make(path: Path, budget: int | None = BUDGET, **limits: Any) -> tuple[Broker, HandJournal, Store]:
    store = Store(path)
    journal = HandJournal(store)
    config = BrokerConfig.model_validate({"limits": {"queue_memory_budget_bytes": budget, **limits}})
    broker = Broker(config, journal=journal, pages=store)
    broker.recover(store)
    return broker, journal, store


def queue(broker: Broker, name: str = "q", **kw: Any) -> Queue:
    q = broker.default.declare_queue(name, **kw)
    assert isinstance(q, Queue)
    return q


def msg(i: int, *, durable: bool = True, priority: int = 4, **props: Any) -> Amqp1Message:
    data = Message(body=f"{i:0100d}", durable=durable, priority=priority, **props).encode()
    return Amqp1Message(data, durable=durable, priority=priority)


def body(m: QueuedMessage) -> int:
    return int(Message.decode(m.data).body)


def publish(q: Queue, msgs: list[Amqp1Message]) -> None:
    for m in msgs:
        assert q.publish(m, lambda: None)


def test_over_budget_is_paged_and_read_back_in_order(tmp_path: Path) -> None:
    broker, journal, _ = make(tmp_path / "s.db")
    q = queue(broker)
    publish(q, [msg(i, durable=i % 2 == 0) for i in range(200)])  # durable and not, mixed
    assert q.pager is not None and q.pager.count >= 190
    assert broker.stats.paged_bytes == q.pager.bytes > 0
    assert q.pager.memory() <= BUDGET
    journal.commit()
    c = Taker(200)
    q.add_consumer(c)
    assert [body(m) for m in c.got] == list(range(200))
    assert q.count == 0 and q.pager.count == 0 and broker.stats.paged_bytes == 0


def test_a_row_not_committed_yet_is_waited_for(tmp_path: Path) -> None:
    broker, journal, _ = make(tmp_path / "s.db")
    q = queue(broker)
    publish(q, [msg(i) for i in range(20)])
    c = Taker(20)
    q.add_consumer(c)  # nothing committed: only what is in memory
    assert [body(m) for m in c.got] == list(range(len(c.got)))
    assert len(c.got) < 20
    journal.commit()  # the barrier's callback dispatches again
    journal.commit()
    assert [body(m) for m in c.got] == list(range(20))


def test_a_row_missed_while_waiting_for_another_is_waited_for_too(tmp_path: Path) -> None:
    """The group committer takes a batch, commits it while more is submitted, and only then
    runs its callbacks. A read that misses a row waits for a barrier; a second row missed
    while that barrier is pending, its write submitted after the barrier, needs a barrier
    of its own: the first one's commit does not cover it (it was skipped as lost)."""
    broker, journal, _ = make(tmp_path / "s.db")
    q = queue(broker)
    publish(q, [msg(i, durable=False) for i in range(6)])
    assert q.pager is not None and q.pager.count == 3  # 3, 4 and 5 paged out, their rows pending

    def take() -> tuple[list[tuple[Any, ...]], list[Callable[[], None]]]:
        batch = (journal.ops, journal.callbacks)
        journal.ops, journal.callbacks = [], []
        return batch

    def finish(batch: tuple[list[tuple[Any, ...]], list[Callable[[], None]]]) -> None:
        journal.store.apply(batch[0])
        for cb in batch[1]:
            cb()

    first = take()  # the rows of 3-5, being committed
    c = Taker(10)
    q.add_consumer(c)  # 0-2 from memory; 3 is not committed yet: a barrier
    assert [body(m) for m in c.got] == [0, 1, 2]
    second = take()  # the barrier, being committed after the first
    publish(q, [msg(6, durable=False)])  # paged out too: its row comes after the barrier
    finish(first)
    q.dispatch()  # 3-5 are read back; 6 is not committed yet
    assert [body(m) for m in c.got] == [0, 1, 2, 3, 4, 5]
    finish(second)  # the first barrier: 6 is still not committed
    journal.commit()
    journal.commit()
    assert [body(m) for m in c.got] == list(range(7))
    assert q.count == 0 and q.pager.count == 0


def test_the_budget_holds_while_draining(tmp_path: Path) -> None:
    broker, journal, _ = make(tmp_path / "s.db")
    q = queue(broker)
    publish(q, [msg(i) for i in range(100)])
    journal.commit()
    c = Taker(0)
    q.add_consumer(c)
    for _ in range(100):
        c.n += 1
        q.consumer_ready(c)
        journal.commit()
        assert q.pager is not None and q.pager.memory() <= BUDGET + 100 + MESSAGE_OVERHEAD
    assert [body(m) for m in c.got] == list(range(100))


def test_priorities_with_paged_levels(tmp_path: Path) -> None:
    broker, journal, _ = make(tmp_path / "s.db")
    q = queue(broker, arguments={"x-max-priority": 9})
    publish(q, [msg(i, priority=i % 3 * 4) for i in range(60)])  # levels 0, 4, 8
    journal.commit()
    c = Taker(60)
    q.add_consumer(c)
    want = [i for p in (8, 4, 0) for i in range(60) if i % 3 * 4 == p]
    assert [body(m) for m in c.got] == want


@pytest.mark.parametrize("selector", [None, lambda m: m.field("subject") == "none"], ids=["plain", "selective"])
def test_ttl_expiry_and_dead_lettering_of_paged_messages(tmp_path: Path, selector: Callable[[QueuedMessage], bool] | None) -> None:
    """A take expires the paged messages it meets, also a selective one that passes over them."""
    now = [1000.0]
    broker, journal, _ = make(tmp_path / "s.db")
    broker.now = lambda: now[0]
    dlq = queue(broker, "dlq")
    q = queue(broker, arguments={"x-message-ttl": 1000, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
    q.now = lambda: now[0]
    publish(q, [msg(i, durable=i % 2 == 0) for i in range(30)])
    journal.commit()
    now[0] += 5  # every message has expired
    c = Taker(30, selector=selector)
    q.add_consumer(c)
    journal.commit()
    assert c.got == [] and q.count == 0 and q.stats.expired == 30
    assert q.pager is not None and q.pager.count == 0
    assert dlq.count == 30
    d = Taker(30, cid=2)
    dlq.add_consumer(d)
    journal.commit()
    assert sorted(body(m) for m in d.got) == list(range(30))
    assert broker.stats.paged_bytes == 0


def test_a_selector_finds_a_paged_message(tmp_path: Path) -> None:
    broker, journal, _ = make(tmp_path / "s.db")
    q = queue(broker)
    publish(q, [msg(i, subject="late" if i == 150 else "other") for i in range(200)])
    journal.commit()
    c = Taker(1, selector=lambda m: m.field("subject") == "late")
    q.add_consumer(c)
    assert [body(m) for m in c.got] == [150]
    rest = Taker(199, cid=2)
    q.add_consumer(rest)
    journal.commit()
    assert [body(m) for m in rest.got] == [i for i in range(200) if i != 150]


def test_groups_with_paged_messages(tmp_path: Path) -> None:
    broker, journal, _ = make(tmp_path / "s.db")
    q = queue(broker)
    publish(q, [msg(i, group_id=f"g{i % 2}") for i in range(40)])
    journal.commit()
    a, b = Taker(40, cid=1), Taker(40, cid=2)
    q.add_consumer(a)
    q.add_consumer(b)
    journal.commit()
    got = a.got + b.got
    assert sorted(body(m) for m in got) == list(range(40))
    for g in ("g0", "g1"):  # each group goes to one consumer, in order
        owners = [t for t in (a, b) if any(m.group == g for m in t.got)]
        assert len(owners) == 1
        assert [body(m) for m in owners[0].got if m.group == g] == [i for i in range(40) if f"g{i % 2}" == g]


def test_restart_keeps_durable_and_drops_non_durable(tmp_path: Path) -> None:
    broker, journal, store = make(tmp_path / "s.db")
    q = queue(broker)
    publish(q, [msg(i, durable=i % 2 == 0) for i in range(100)])
    journal.commit()
    store.close()
    broker, journal, store = make(tmp_path / "s.db")
    q = queue(broker)
    assert q.count == 50
    assert q.pager is not None and q.pager.count >= 45  # recovery pages out what is over the budget
    c = Taker(100)
    q.add_consumer(c)
    journal.commit()
    assert [body(m) for m in c.got] == list(range(0, 100, 2))


def test_purge_forgets_the_paged_part(tmp_path: Path) -> None:
    broker, journal, store = make(tmp_path / "s.db")
    q = queue(broker)
    publish(q, [msg(i, durable=i % 2 == 0) for i in range(100)])
    journal.commit()
    assert q.purge() == 100
    journal.commit()
    assert broker.stats.paged_bytes == 0 and broker.stats.disk_bytes == 0
    assert store.load().messages == []


def test_memory_per_paged_message_is_small(tmp_path: Path) -> None:
    broker, journal, _ = make(tmp_path / "s.db", budget=0)
    q = queue(broker)
    ms = [msg(i, durable=False) for i in range(20_000)]
    data_size = sum(m.size for m in ms)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        publish(q, ms)
        del ms
        journal.ops.clear()  # what the committer would have written and dropped,
        for cb in journal.callbacks:  # once it has run the callbacks (the pager's among them)
            cb()
        journal.callbacks.clear()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    per = (after - before) / 20_000
    assert q.count == 20_000 and data_size > 20_000 * 100
    assert per < 40, per  # seq, size and flags in arrays: no object per message


def test_no_budget_keeps_everything_in_memory(tmp_path: Path) -> None:
    broker, journal, _ = make(tmp_path / "s.db", budget=None)
    q = queue(broker)
    publish(q, [msg(i) for i in range(50)])
    assert q.pager is None and broker.stats.paged_bytes == 0


def test_a_paged_non_durable_message_past_the_unstored_bound_is_answered_once_its_body_is_stored(tmp_path: Path) -> None:
    broker, journal, _ = make(tmp_path / "s.db", budget=0)  # a budget of 0 leaves no bound
    q = queue(broker, "transient", durable=False)  # a non-durable queue pages too
    done: list[int] = []
    assert q.publish(msg(1, durable=False), lambda: done.append(1))
    assert done == [] and q.pager is not None and q.pager.count == 1
    assert q.pager.unstored > q.pager.unstored_limit == 0
    journal.commit()
    assert done == [1]
    c = Taker(1)
    q.add_consumer(c)
    journal.commit()
    assert [body(m) for m in c.got] == [1]


def publish_answered(q: Queue, msgs: list[Amqp1Message]) -> list[int]:
    """Publish ``msgs``; the indexes of those answered (``on_stored``) so far."""
    done: list[int] = []
    for i, m in enumerate(msgs):
        assert q.publish(m, lambda i=i: done.append(i))  # type: ignore[misc]
    return done


UNSTORED_BUDGET = 16 * (100 + MESSAGE_OVERHEAD)  # a bound of a few 100-byte messages


def test_a_paged_non_durable_message_is_answered_at_once_under_the_unstored_bound(tmp_path: Path) -> None:
    """Nothing committed: the paged-out non-durable messages whose bodies fit the bound
    together are answered at once; the first past it, and those after, once committed."""
    broker, journal, _ = make(tmp_path / "s.db", budget=UNSTORED_BUDGET)
    q = queue(broker, "transient", durable=False)
    ms = [msg(i, durable=False) for i in range(40)]
    size = ms[0].size  # (all of one size)
    done = publish_answered(q, ms)
    pager = q.pager
    assert pager is not None and 0 < pager.count < 40
    first = 40 - pager.count  # the first paged out
    fit = pager.unstored_limit // size
    assert fit >= 2  # more than one body waits in memory for the committer
    assert done == list(range(first + fit))  # those in memory, and the paged ones that fit
    assert pager.unstored == pager.count * size > pager.unstored_limit
    journal.commit()
    assert done == list(range(40)) and pager.unstored == 0
    c = Taker(40)
    q.add_consumer(c)
    journal.commit()
    assert [body(m) for m in c.got] == list(range(40))


def test_the_unstored_bound_is_free_again_after_each_commit(tmp_path: Path) -> None:
    """A long run of paged-out non-durable messages, committed every few: after each
    commit as many are answered at once again (the bytes not committed go back down;
    the pager does not stay past its bound)."""
    broker, journal, _ = make(tmp_path / "s.db", budget=UNSTORED_BUDGET)
    q = queue(broker, "transient", durable=False)
    publish(q, [msg(i, durable=False) for i in range(20)])
    journal.commit()
    pager = q.pager
    assert pager is not None and pager.count > 0 and pager.unstored == 0
    size = msg(0, durable=False).size
    fit = pager.unstored_limit // size
    n = 20
    for _ in range(100):
        done = publish_answered(q, [msg(n + i, durable=False) for i in range(fit + 3)])
        assert done == list(range(fit))  # as many as fit, then the rest wait
        assert pager.unstored > pager.unstored_limit
        journal.commit()
        assert done == list(range(fit + 3)) and pager.unstored == 0
        n += fit + 3
    c = Taker(n)
    q.add_consumer(c)
    journal.commit()
    assert [body(m) for m in c.got] == list(range(n))


@pytest.mark.anyio
async def test_metrics_show_paged_bytes_and_the_alarm(tmp_path: Path) -> None:
    from amqp10.client import connect
    from tests.broker.conftest import broker_in_loop
    from tests.broker.management.test_metrics import one, scrape

    async with broker_in_loop(tmp_path, limits={"queue_memory_budget_bytes": 0}) as service:
        async with await connect(f"amqp://127.0.0.1:{service.ports[0]}", timeout=10) as conn:
            sender = await conn.open_sender("paged-q")
            for _ in range(5):
                await sender.send(Message(body=b"x" * 1000), timeout=10)
        m = await scrape(service)
        assert one(m, "amqp10_messages_paged_bytes") >= 5 * 1000
        assert one(m, "amqp10_messages_memory_bytes") == 0
        assert one(m, "amqp10_resource_alarm") == 0
        assert service.broker is not None
        service.broker.set_alarm("disk: a test")
        assert one(await scrape(service), "amqp10_resource_alarm") == 1
        service.broker.set_alarm(None)


@pytest.mark.anyio
async def test_through_a_restart_durable_paged_messages_come_back_and_others_do_not(tmp_path: Path) -> None:
    from amqp10.client import connect
    from amqp10.types import Accepted
    from tests.broker.conftest import broker_in_loop

    limits = {"queue_memory_budget_bytes": 0}
    async with broker_in_loop(tmp_path, limits=limits) as service:
        async with await connect(f"amqp://127.0.0.1:{service.ports[0]}", timeout=10) as conn:
            sender = await conn.open_sender("restart-q")
            for i in range(40):
                outcome = await sender.send(Message(body=i, durable=i % 2 == 0), timeout=10)
                assert isinstance(outcome, Accepted)
        q = service.broker.nodes["restart-q"] if service.broker else None
        assert isinstance(q, Queue) and q.pager is not None and q.pager.count == 40
    async with broker_in_loop(tmp_path, limits=limits) as service:
        async with await connect(f"amqp://127.0.0.1:{service.ports[0]}", timeout=10) as conn:
            receiver = await conn.open_receiver("restart-q", credit=100)
            got = []
            for _ in range(20):
                d = await receiver.receive(timeout=10)
                got.append(d.message.body)
                await d.accept()
            assert got == list(range(0, 40, 2))
        q = service.broker.nodes["restart-q"] if service.broker else None
        assert isinstance(q, Queue) and q.count == 0


def test_the_paged_table_keeps_the_order_of_a_batch(open_store: Callable[[], Any]) -> None:
    """On both backends: paged rows in a batch's order, read back by seq with the durable ones."""
    from amqp10.broker.core.store import PAGE, PUT, UNPAGE

    store = open_store()

    def page(seq: int) -> tuple[Any, ...]:
        return (PAGE, "q", seq, 0, None, 0.0, None, "amqp1", b"m%d" % seq)

    # paged out, one read back, the queue purged, then a new one paged out: one commit
    store.apply([page(1), page(2), (UNPAGE, "q", 1), (UNPAGE, "q", None), page(3), page(4), (UNPAGE, "q", 4)])
    assert [r[0] for r in store.read_paged("q", 0, 10, durable=False, transient=True)] == [3]
    store.apply([(PUT, "q", 5, 4, 0, None, 0.0, None, "amqp1", b"durable")])
    rows = store.read_paged("q", 0, 10, durable=True, transient=True)
    assert [(r[0], bytes(r[6])) for r in rows] == [(3, b"m3"), (5, b"durable")]
    store.close()
    store = open_store()  # the paged table does not outlive the store's connection
    assert [r[0] for r in store.read_paged("q", 0, 10, durable=True, transient=True)] == [5]


@pytest.mark.anyio
async def test_transactions_over_paged_messages(tmp_path: Path) -> None:
    """Posting and retirement in transactions, every message paged out (a budget of 0)."""
    from amqp10.client import connect
    from amqp10.types import Accepted
    from tests.broker.conftest import broker_in_loop

    async with broker_in_loop(tmp_path, limits={"queue_memory_budget_bytes": 0}) as service:
        async with await connect(f"amqp://127.0.0.1:{service.ports[0]}", timeout=10) as conn:
            sender = await conn.open_sender("txn-q")
            async with conn.transaction() as txn:
                for i in range(20):
                    assert isinstance(await sender.send(Message(body=i), txn=txn), Accepted)
            q = service.broker.nodes["txn-q"] if service.broker else None
            assert isinstance(q, Queue) and q.pager is not None and q.pager.count == 20
            receiver = await conn.open_receiver("txn-q", credit=20)
            got = [await receiver.receive(timeout=10) for _ in range(20)]
            assert [d.message.body for d in got] == list(range(20))
            txn = await conn.transaction()
            for d in got[:10]:
                await d.accept(txn=txn)
            await txn.rollback()  # the first ten come back, ahead of the rest
            for d in got[10:]:
                await d.accept()
            again = [await receiver.receive(timeout=10) for _ in range(10)]
            assert [d.message.body for d in again] == list(range(10))
            async with conn.transaction() as txn:
                for d in again:
                    await d.accept(txn=txn)
        assert q.count == 0 and q.stats.acked == 20


def test_drop_head_overflow_drops_the_oldest_even_when_paged(tmp_path: Path) -> None:
    broker, journal, _ = make(tmp_path / "s.db")
    q = queue(broker, arguments={"x-max-length": 50})
    for i in range(100):
        assert q.publish(msg(i), lambda: None)
        journal.commit()
    assert q.count == 50
    c = Taker(100)
    q.add_consumer(c)
    journal.commit()
    assert [body(m) for m in c.got] == list(range(50, 100))


def test_a_selector_takes_from_the_paged_part_without_pulling_it_into_memory(tmp_path: Path) -> None:
    broker, journal, store = make(tmp_path / "s.db")
    q = queue(broker)
    n = 2000
    publish(q, [msg(i, durable=i % 2 == 0, subject="late" if i in (1990, 1991) else "other") for i in range(n)])
    journal.commit()
    assert q.pager is not None
    c = Taker(2, selector=lambda m: m.field("subject") == "late")
    q.add_consumer(c)
    journal.commit()
    assert [body(m) for m in c.got] == [1990, 1991]
    assert q.pager.memory() <= BUDGET  # what it passed over stays paged out
    assert q.count == n - 2 and broker.stats.paged_bytes == q.pager.bytes
    want = [i for i in range(n) if i not in (1990, 1991)]
    assert [body(m) for m in q.peek(5, 1985)] == want[1985:1990]
    for m in c.got:  # back to their places in the paged part (one durable, one not)
        q.release(m)
    assert q.pager.memory() <= BUDGET and broker.stats.paged_bytes == q.pager.bytes
    want = list(range(n))
    rest = Taker(n, cid=2)
    q.add_consumer(rest)
    journal.commit()
    assert [body(m) for m in rest.got] == want
    assert q.count == 0 and q.pager.count == 0 and broker.stats.paged_bytes == 0


def test_purge_after_a_selective_take_from_the_paged_part(tmp_path: Path) -> None:
    broker, journal, store = make(tmp_path / "s.db")
    q = queue(broker)
    publish(q, [msg(i, durable=i % 2 == 0, subject="x" if i == 50 else "o") for i in range(100)])
    journal.commit()
    c = Taker(1, selector=lambda m: m.field("subject") == "x")
    q.add_consumer(c)
    assert [body(m) for m in c.got] == [50]
    assert q.purge() == 99
    journal.commit()
    assert [m.seq for m in store.load().messages] == [c.got[0].seq]  # the one with the consumer stays
    q.ack(c.got[0])
    journal.commit()
    assert store.load().messages == [] and broker.stats.paged_bytes == 0


def test_a_paged_out_scheduled_message_keeps_its_number(tmp_path: Path) -> None:
    """A scheduled message gets a new seq when due, behind what is queued, but keeps its
    number (Service Bus's sequence number) when its queue pages it out and reads it back."""
    broker, journal, _ = make(tmp_path / "s.db")
    q = queue(broker)
    delay = {symbol("x-opt-delivery-time"): int((time.time() + 60) * 1000)}
    held = [msg(1000 + i, durable=i == 0, message_annotations=delay) for i in range(2)]  # durable and not
    publish(q, held)
    numbers = [m.seq for m in held]
    publish(q, [msg(i) for i in range(20)])
    broker.scheduler.now = lambda: time.time() + 120
    assert broker.scheduler.release_due() == 2
    assert q.pager is not None and q.pager.count >= 2  # the due ones went to the paged tail
    journal.commit()
    c = Taker(22)
    q.add_consumer(c)
    assert [body(m) for m in c.got] == [*range(20), 1000, 1001]
    assert [(m.number, m.seq > m.number) for m in c.got[20:]] == [(n, True) for n in numbers]
    assert all(m.number == m.seq for m in c.got[:20])
