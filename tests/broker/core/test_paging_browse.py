"""Readers that take nothing see a paged queue whole (core/browsing.py): browsers (1.0's
``copy`` distribution mode), management's PEEK, Service Bus's peek; and consumers with a
selector find paged messages that match. Paged-out messages are read back from the store a
chunk at a time and stay paged out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import amqp10.sync
from amqp10.broker.core.paging import MAX_RUN, MESSAGE_OVERHEAD
from amqp10.broker.core.queues import Queue
from amqp10.message import Message
from amqp10.types import Source, symbol
from tests.broker.conftest import RunningBroker, broker_with

from .test_paging import BUDGET, Taker, body, make, msg, publish, queue

T = 10.0
SMALL = 64 * 1024  # about 150 messages of 100 bytes in memory
N = 600  # so most of them are paged out


class Browser(Taker):
    """A browsing consumer (1.0 ``copy``) with ``n`` credit."""

    browse = True


def reads(store: Any) -> list[int]:
    """Record how many rows each read of the paged-out part returns (into the list returned)."""
    sizes: list[int] = []
    read = store.read_paged

    def counted(*args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = read(*args, **kwargs)
        sizes.append(len(rows))
        return rows

    store.read_paged = counted
    return sizes


def test_a_browser_sees_every_message_of_a_paged_queue_in_order(tmp_path: Path) -> None:
    broker, journal, store = make(tmp_path / "s.db")
    q = queue(broker)
    publish(q, [msg(i, durable=i % 3 != 0) for i in range(300)])  # durable and not, mixed
    journal.commit()
    assert q.pager is not None and q.pager.count > 250
    paged = q.pager.count
    sizes = reads(store)
    b = Browser(0)
    q.add_consumer(b)
    for _ in range(40):  # credit 10 at a time, as a client's window refills
        if len(b.got) == 300:
            break
        b.n += 10
        q.consumer_ready(b)
        journal.commit()
        assert q.pager.count == paged and q.pager.memory() <= BUDGET  # all still paged out
    assert [body(m) for m in b.got] == list(range(300))
    assert sizes and max(sizes) <= 10  # read back as far as the credit reaches, no further
    assert q.count == 300
    c = Taker(300, cid=2)  # browsing took nothing
    q.add_consumer(c)
    journal.commit()
    assert [body(m) for m in c.got] == list(range(300))


def test_browsing_is_in_arrival_order_across_paged_priority_levels(tmp_path: Path) -> None:
    broker, journal, _ = make(tmp_path / "s.db")
    q = queue(broker, arguments={"x-max-priority": 9})
    publish(q, [msg(i, priority=i % 3 * 4) for i in range(90)])  # levels 0, 4, 8, each paged
    journal.commit()
    b = Browser(90)
    q.add_consumer(b)
    assert [body(m) for m in b.got] == list(range(90))


def test_a_browser_waits_for_a_row_not_committed_yet_and_skips_nothing(tmp_path: Path) -> None:
    broker, journal, _ = make(tmp_path / "s.db")
    q = queue(broker, arguments={"x-max-priority": 9})
    publish(q, [msg(i, priority=0) for i in range(10)])  # most paged out; nothing committed yet
    c = Taker(2, cid=2)
    q.add_consumer(c)  # takes two from memory, which makes room for ...
    publish(q, [msg(10, priority=8)])  # ... a newer message, kept in memory at another level
    assert q.pager is not None and q.pager.paged_count(8) == 0
    b = Browser(20)
    q.add_consumer(b)
    seen = [body(m) for m in b.got]  # what is in memory up to the first paged row; not 10,
    assert seen == list(range(2, 2 + len(seen))) and len(seen) < 8  # which comes after them
    journal.commit()  # the barrier's callback dispatches again
    assert [body(m) for m in b.got] == list(range(2, 11))


def test_a_browser_meets_new_arrivals_behind_the_paged_part(tmp_path: Path) -> None:
    broker, journal, _ = make(tmp_path / "s.db")
    q = queue(broker)
    publish(q, [msg(i) for i in range(50)])
    journal.commit()
    b = Browser(100)
    q.add_consumer(b)
    publish(q, [msg(i) for i in range(50, 60)])
    journal.commit()
    assert [body(m) for m in b.got] == list(range(60))


def test_peek_with_an_offset_reads_the_paged_region_in_delivery_order(tmp_path: Path) -> None:
    broker, journal, store = make(tmp_path / "s.db")
    q = queue(broker, arguments={"x-max-priority": 9})
    publish(q, [msg(i, priority=0) for i in range(100)])
    publish(q, [msg(i, priority=8) for i in range(100, 200)])  # higher, and all paged out
    journal.commit()
    assert q.pager is not None and q.pager.count > 180
    want = list(range(100, 200)) + list(range(100))  # delivery order: priority 8 first
    for offset, n in ((0, 10), (95, 10), (150, 30), (195, 10), (200, 5)):
        assert [body(m) for m in q.peek(n, offset)] == want[offset : offset + n]
    sizes = reads(store)
    q.peek(5, 150)
    assert sum(sizes) <= 5  # the skipped ones are counted, not read
    assert q.pager.count > 180 and q.count == 200


def test_a_selector_consumer_matches_on_properties_of_paged_messages(tmp_path: Path) -> None:
    from amqp10.broker.core.selector import compile_selector

    broker, journal, _ = make(tmp_path / "s.db")
    q = queue(broker)
    publish(q, [msg(i, application_properties={"n": i}) for i in range(200)])
    journal.commit()
    wanted = compile_selector("n >= 150 AND n < 160")
    c = Taker(20, selector=wanted)
    q.add_consumer(c)
    journal.commit()
    assert [body(m) for m in c.got] == list(range(150, 160))


def test_a_browser_with_a_selector_matches_on_properties_of_paged_messages(tmp_path: Path) -> None:
    from amqp10.broker.core.selector import compile_selector

    broker, journal, _ = make(tmp_path / "s.db")
    q = queue(broker)
    publish(q, [msg(i, application_properties={"n": i}) for i in range(200)])
    journal.commit()
    b = Browser(20, selector=compile_selector("n >= 150 AND n < 160"))
    q.add_consumer(b)
    assert [body(m) for m in b.got] == list(range(150, 160))
    assert q.count == 200 and q.pager is not None and q.pager.memory() <= BUDGET


def test_memory_of_browsing_a_deep_queue_stays_within_a_chunk(tmp_path: Path) -> None:
    broker, journal, store = make(tmp_path / "s.db", budget=0)
    q = queue(broker)
    publish(q, [msg(i, durable=False) for i in range(3 * MAX_RUN)])
    journal.commit()
    sizes = reads(store)
    b = Browser(3 * MAX_RUN)
    q.add_consumer(b)
    assert [body(m) for m in b.got] == list(range(3 * MAX_RUN))
    assert max(sizes) <= MAX_RUN and q.pager is not None and q.pager.memory() == 0
    assert MESSAGE_OVERHEAD > 0


# -- over the wire ---------------------------------------------------------------------------
@pytest.fixture
def paged(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_with(tmp_path, limits={"queue_memory_budget_bytes": SMALL}) as b:
        yield b


def fill(b: RunningBroker, address: str, n: int = N, **props: Any) -> Queue:
    """``n`` numbered messages of about 100 bytes on ``address``; the queue, mostly paged out."""
    with amqp10.sync.connect(b.url, timeout=T) as conn:
        sender = conn.open_sender(address)
        for outcome in sender.pipeline(
            (Message(body=f"{i:0100d}", application_properties={"n": i}, **props) for i in range(n)), window=100
        ):
            assert outcome is not None
    q = b.broker.default.nodes[address]
    assert isinstance(q, Queue) and q.pager is not None and q.pager.count > n // 2
    return q


def test_our_client_browses_a_paged_queue_whole(paged: RunningBroker) -> None:
    q = fill(paged, "browse-ours")
    with amqp10.sync.connect(paged.url, timeout=T) as conn:
        browser = conn.open_receiver("browse-ours", credit=50, source=Source(address="browse-ours", distribution_mode=symbol("copy")))
        got = [int(browser.receive(timeout=T).message.body) for _ in range(N)]
        assert got == list(range(N))
        browser.drain(timeout=T)  # then nothing more: the drain gives the credit back
        assert browser.buffered == 0
    assert q.count == N


def test_proton_browses_a_paged_queue_whole(paged: RunningBroker) -> None:
    from proton.reactor import Copy
    from proton.utils import BlockingConnection

    q = fill(paged, "browse-proton")
    conn = BlockingConnection(paged.url, timeout=T)
    try:
        browser = conn.create_receiver("browse-proton", credit=50, options=Copy(), name="browser")
        got = [int(browser.receive(timeout=T).body) for _ in range(N)]
    finally:
        conn.close()
    assert got == list(range(N))
    assert q.count == N


def test_management_peek_with_an_offset_in_the_paged_region(paged: RunningBroker) -> None:
    from tests.broker.management.test_management_amqp import ask

    fill(paged, "peek-q")
    with amqp10.sync.connect(paged.url, timeout=T) as conn:
        for offset in (0, 140, 400, N - 5):
            status, messages, p = ask(conn, "PEEK", "queue", "peek-q", count=20, offset=offset)
            want = list(range(offset, min(offset + 20, N)))
            assert (status, p["count"]) == (200, len(want))
            assert [int(m["body"]) for m in messages] == want
            assert [m["position"] for m in messages] == want
        assert ask(conn, "PEEK", "queue", "peek-q", count=5, offset=-1)[0] == 400


def test_a_selector_receiver_finds_paged_messages(paged: RunningBroker) -> None:
    q = fill(paged, "select-q")
    with amqp10.sync.connect(paged.url, timeout=T) as conn:
        receiver = conn.open_receiver("select-q", credit=20, selector="n >= 550 AND n < 560")
        got = []
        for _ in range(10):
            d = receiver.receive(timeout=T)
            got.append(int(d.message.body))
            d.accept()
        assert got == list(range(550, 560))
    assert q.count == N - 10
