"""Read-committed streams, ``deliver_after_commit`` queues, and recovery linear in what it restores.

A :class:`HeldJournal` commits only when the test says so, so "the reader is ahead
of the commit" is a state the test builds, not a race it hopes to win.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from amqp10.broker.amqp1 import Amqp1Message
from amqp10.broker.config import AddressRule, BrokerConfig, QueuePolicy
from amqp10.broker.core import Broker, Queue, Stream
from amqp10.broker.core import store as st
from amqp10.broker.core import streams as _streams
from amqp10.broker.core.message import QueuedMessage
from amqp10.broker.core.nodes import NULL_JOURNAL
from amqp10.message import Message
from tests.broker.harness import HeldJournal


class Reader:
    """A consumer with unlimited credit that records what it got."""

    browse = False

    def __init__(self, ident: int) -> None:
        self.id = ident
        self.got: list[QueuedMessage] = []

    def credit(self) -> int:
        return 1_000_000

    def deliver(self, node: Any, msg: QueuedMessage) -> None:
        self.got.append(msg)


def message(i: int, *, durable: bool = True) -> Amqp1Message:
    data = Message(body=i, id=f"m{i}", durable=durable).encode()
    return Amqp1Message(data, durable=durable, message_id=f"m{i}")


def seen(reader: Reader) -> list[tuple[int, str | None]]:
    return [(m.seq, m.message_id) for m in reader.got]


def broker(journal: Any, **policy: Any) -> Broker:
    cfg = BrokerConfig(
        addresses=[
            AddressRule(pattern="ev*", kind="stream", policy=QueuePolicy(**policy)),
            AddressRule(pattern="q*", kind="queue", policy=QueuePolicy(**policy)),
        ]
    )
    return Broker(cfg, journal=journal)


def stream(b: Broker, name: str = "ev") -> Stream:
    node = b.lookup(name, create=True)
    assert isinstance(node, Stream)
    return node


def queue(b: Broker, name: str = "q") -> Queue:
    node = b.lookup(name, create=True)
    assert isinstance(node, Queue)
    return node


# -- streams -----------------------------------------------------------------------------------


def test_stream_readers_and_info_see_only_committed_entries(tmp_path: Path) -> None:
    j = HeldJournal(st.Store(tmp_path / "db.sqlite3"))
    ev = stream(broker(j))
    j.commit()
    r = Reader(1)
    ev.add_consumer_at(r, ev.start_offset("first"))
    accepted: list[int] = []
    for i in range(3):
        ev.publish(message(i), lambda i=i: accepted.append(i))
    assert r.got == [] and accepted == []
    assert ev.info()["next"] == 0 and ev.info()["count"] == 0
    assert ev.start_offset("next") == 0 and ev.start_offset("last") == 0
    # an explicit offset among those given out but not yet committed: the reader waits
    # there (it is handed nothing before the commit); beyond them, it waits at the next one
    assert ev.start_offset(2) == 2 and ev.start_offset(99) == 3
    j.commit()
    assert seen(r) == [(0, "m0"), (1, "m1"), (2, "m2")] and accepted == [0, 1, 2]
    assert ev.info()["next"] == 3 and ev.info()["count"] == 3
    late = Reader(2)  # attached at "next" while an entry is uncommitted: it gets that entry once stored
    ev.publish(message(3), lambda: None)
    ev.add_consumer_at(late, ev.start_offset("next"))
    assert late.got == [] and seen(r)[-1] == (2, "m2")
    j.commit()
    assert seen(late) == [(3, "m3")] and seen(r)[-1] == (3, "m3")


def test_stream_without_a_store_delivers_at_once() -> None:
    ev = stream(Broker(BrokerConfig(addresses=[AddressRule(pattern="ev*", kind="stream")])))
    r = Reader(1)
    ev.add_consumer_at(r, ev.start_offset("first"))
    ev.publish(message(0), lambda: None)
    assert seen(r) == [(0, "m0")] and ev.info()["next"] == 1


def test_stream_crash_never_reuses_an_offset_a_reader_saw(tmp_path: Path) -> None:
    store = st.Store(tmp_path / "db.sqlite3")
    j = HeldJournal(store)
    ev = stream(broker(j))
    r = Reader(1)
    ev.add_consumer_at(r, ev.start_offset("first"))
    for i in range(5):
        ev.publish(message(i), lambda: None)
    j.commit()
    for i in range(5, 9):  # in flight, never committed: the reader must not see them
        ev.publish(message(i), lambda: None)
    assert len(r.got) == 5
    j.crash()

    j2 = HeldJournal(store)
    b2 = broker(j2)
    assert b2.recover(store) == 5
    ev2 = stream(b2)
    assert ev2.info()["next"] == 5
    ev2.publish(message(100), lambda: None)
    j2.commit()
    again = Reader(2)
    ev2.add_consumer_at(again, ev2.start_offset("first"))
    after = dict(seen(again))
    assert all(after.get(off) == mid for off, mid in seen(r)), "an offset the reader saw now names another message"
    assert after[5] == "m100"  # one past the last committed entry


def test_replayed_stream_publish_is_accepted_after_the_first_copy_is_stored(tmp_path: Path) -> None:
    j = HeldJournal(st.Store(tmp_path / "db.sqlite3"))
    ev = stream(broker(j, duplicate_window=10))
    accepted: list[str] = []
    ev.publish(message(1), lambda: accepted.append("first"))
    ev.publish(message(1), lambda: accepted.append("replay"))
    assert accepted == []
    j.commit()
    assert accepted == ["first", "replay"] and ev.info()["next"] == 1


# -- queues ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "held"),
    [
        ({"durable": True}, True),  # the default for durable queues
        ({"durable": True, "deliver_after_commit": False}, False),
        ({"deliver_after_commit": True}, True),
        ({}, False),
    ],
)
def test_queue_deliver_after_commit(tmp_path: Path, policy: dict[str, Any], held: bool) -> None:
    j = HeldJournal(st.Store(tmp_path / "db.sqlite3"))
    q = queue(broker(j, **policy))
    j.commit()
    r = Reader(1)
    q.add_consumer(r)
    q.publish(message(0), lambda: None)
    assert q.count == (1 if held else 0)
    assert seen(r) == ([] if held else [(1, "m0")])
    j.commit()
    assert seen(r) == [(1, "m0")] and q.count == 0


def test_queue_deliver_after_commit_keeps_non_durable_messages_immediate(tmp_path: Path) -> None:
    j = HeldJournal(st.Store(tmp_path / "db.sqlite3"))
    q = queue(broker(j, deliver_after_commit=True))
    r = Reader(1)
    q.add_consumer(r)
    q.publish(message(0, durable=False), lambda: None)
    assert [m.message_id for m in r.got] == ["m0"]


def test_queue_purge_drops_messages_waiting_for_their_commit(tmp_path: Path) -> None:
    store = st.Store(tmp_path / "db.sqlite3")
    j = HeldJournal(store)
    q = queue(broker(j, durable=True))
    for i in range(3):
        q.publish(message(i), lambda: None)
    assert q.purge() == 3 and q.count == 0
    j.commit()
    r = Reader(1)
    q.add_consumer(r)
    assert r.got == [] and q.count == 0
    assert [m for m in store.load().messages if m.node == "q"] == []


def test_queue_crash_loses_nothing_a_consumer_received(tmp_path: Path) -> None:
    store = st.Store(tmp_path / "db.sqlite3")
    j = HeldJournal(store)
    q = queue(broker(j, durable=True))
    r = Reader(1)
    q.add_consumer(r)
    for i in range(4):
        q.publish(message(i), lambda: None)
    j.commit()
    for i in range(4, 8):
        q.publish(message(i), lambda: None)
    j.crash()
    b2 = broker(HeldJournal(store), durable=True)
    b2.recover(store)
    stored = {m.message_id for m in store.load().messages}
    assert {m.message_id for m in r.got} <= stored
    assert len(r.got) == 4


# -- recovery is linear ------------------------------------------------------------------------


class CountingList(list[Any]):
    """A list that counts the elements copied out of it by slicing or iteration."""

    copied = 0

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            out = super().__getitem__(i)
            CountingList.copied += len(out)
            return out
        return super().__getitem__(i)

    def __iter__(self) -> Any:
        CountingList.copied += len(self)
        return super().__iter__()


def fill(path: Path, n: int) -> st.Store:
    """A store holding ``n`` messages in a stream and ``n`` in a queue, written by the nodes themselves."""
    store = st.Store(path)
    j = HeldJournal(store)
    b = broker(j, duplicate_window=100)
    ev, q = stream(b), queue(b)
    for i in range(n):
        ev.publish(message(i), lambda: None)
        q.publish(message(i), lambda: None)
    j.commit()
    return store


def traced_lines(fn: Callable[[], object]) -> int:
    """Python lines executed by ``fn()``: the work a restart does, by count rather than time."""
    lines = 0

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal lines
        if event == "line":
            lines += 1
        return trace

    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(None)
    return lines


def test_recovery_work_is_linear_in_restored_messages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    init = _streams.Stream.__init__

    def counting_init(self: Stream, *a: Any, **kw: Any) -> None:
        init(self, *a, **kw)
        self._entries = CountingList()

    monkeypatch.setattr(_streams.Stream, "__init__", counting_init)
    work: dict[int, int] = {}
    for n in (1000, 4000):
        store = fill(tmp_path / f"{n}.sqlite3", n)
        CountingList.copied = 0
        b = broker(NULL_JOURNAL, duplicate_window=100)
        work[n] = traced_lines(lambda b=b, store=store: b.recover(store))
        assert CountingList.copied <= n, f"restoring {n} stream entries copied {CountingList.copied} list elements"
        ev = b.nodes["ev"]
        assert isinstance(ev, Stream) and ev.info() == {"first": 0, "next": n, "count": n, "bytes": ev.bytes}
        assert b.nodes["q"].count == n  # type: ignore[attr-defined]
    per_message = {n: w / n for n, w in work.items()}
    assert per_message[4000] <= per_message[1000] * 1.2, f"work per restored message grows with the store: {per_message}"
