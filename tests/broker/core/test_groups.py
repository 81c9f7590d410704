"""Message groups on a queue, over in-memory engines: one consumer at a time per group."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from amqp10.broker.amqp1.message import parse_transfer
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker, Queue
from amqp10.broker.core import store as st
from amqp10.message import Message
from amqp10.types import Source, symbol
from tests.broker.harness import Client, Net, SyncJournal

SELECTOR = symbol("apache.org:selector-filter:string")


def grouped(group: str | None, n: int) -> Message:
    return Message(body=f"{group}-{n}", group_id=group, group_sequence=n)


def got(c: Client, r: Any) -> list[Any]:
    return c.received(r)


def bodies(ds: list[Any]) -> list[Any]:
    return [Message.decode(d.payload).body for d in ds]


def publish(c: Client, address: str, *pairs: tuple[str | None, int]) -> None:
    s = c.sender(address)
    for group, n in pairs:
        c.send(s, grouped(group, n))


def test_interleaved_groups_each_go_to_one_consumer_in_order() -> None:
    net = Net()
    a, b, p = net.client("a"), net.client("b"), net.client("p")
    ra = a.receiver("gq", credit=20)
    rb = b.receiver("gq", credit=20)
    publish(p, "gq", *[(g, n) for n in range(1, 5) for g in ("x", "y")])
    ga, gb = bodies(got(a, ra)), bodies(got(b, rb))
    assert {tuple(ga), tuple(gb)} == {("x-1", "x-2", "x-3", "x-4"), ("y-1", "y-2", "y-3", "y-4")}


def test_ungrouped_messages_are_unaffected() -> None:
    net = Net()
    a, b, p = net.client("a"), net.client("b"), net.client("p")
    ra = a.receiver("mixed", credit=20)
    rb = b.receiver("mixed", credit=20)
    publish(p, "mixed", ("g", 1), (None, 1), (None, 2), ("g", 2), (None, 3), (None, 4))
    ga, gb = bodies(got(a, ra)), bodies(got(b, rb))
    owner, other = (ga, gb) if "g-1" in ga else (gb, ga)
    assert [x for x in owner if x.startswith("g")] == ["g-1", "g-2"]
    assert not [x for x in other if x.startswith("g")]
    assert sorted(ga + gb) == ["None-1", "None-2", "None-3", "None-4", "g-1", "g-2"]
    assert len(other) >= 2  # the others still go round robin


def test_a_group_sticks_to_its_owner_while_it_has_no_credit() -> None:
    net = Net()
    a, b, p = net.client("a"), net.client("b"), net.client("p")
    ra = a.receiver("sticky", credit=1)
    publish(p, "sticky", ("g", 1))
    assert bodies(got(a, ra)) == ["g-1"]  # a owns g, holds it unsettled, has no more credit
    rb = b.receiver("sticky", credit=10)
    publish(p, "sticky", ("g", 2), ("h", 1), ("g", 3))
    assert bodies(got(b, rb)) == ["h-1"]  # g waits for a
    q = net.broker.nodes["sticky"]
    assert isinstance(q, Queue) and q.count == 2
    ra.add_credit(5)
    net.pump()
    assert bodies(got(a, ra)) == ["g-2", "g-3"]


def test_the_group_moves_on_when_its_owner_detaches_releases_first() -> None:
    net = Net()
    a, b, p = net.client("a"), net.client("b"), net.client("p")
    ra = a.receiver("move", credit=2)
    publish(p, "move", ("g", 1), ("g", 2), ("g", 3), ("g", 4))
    held = got(a, ra)
    assert bodies(held) == ["g-1", "g-2"]
    held[0].accept()
    net.pump()
    rb = b.receiver("move", credit=10)
    assert bodies(got(b, rb)) == []  # still a's
    ra.detach(closed=True)  # g-2 was unsettled: it goes back, before g-3
    net.pump()
    assert bodies(got(b, rb)) == ["g-2", "g-3", "g-4"]
    q = net.broker.nodes["move"]
    assert isinstance(q, Queue) and q.groups is not None
    assert q.groups.owners == {"g": next(c.id for c in q.consumers)}


def test_order_is_kept_after_a_release() -> None:
    net = Net()
    a, b, p = net.client("a"), net.client("b"), net.client("p")
    ra = a.receiver("rel", credit=3)
    rb = b.receiver("rel", credit=10)
    publish(p, "rel", ("g", 1), ("g", 2), ("g", 3), ("g", 4))
    first = got(a, ra)
    assert bodies(first) == ["g-1", "g-2", "g-3"]
    assert got(b, rb) == []
    first[1].release()
    first[0].release()
    net.pump()
    ra.add_credit(3)
    net.pump()
    assert bodies(got(a, ra)) == ["g-1", "g-2", "g-4"]  # back in publish order, to the owner
    assert got(b, rb) == []


def test_a_selective_consumer_skips_a_group_another_owns_without_losing_it() -> None:
    net = Net()
    a, b, p = net.client("a"), net.client("b"), net.client("p")
    ra = a.receiver("sel", credit=1)
    publish(p, "sel", ("g", 1))
    assert bodies(got(a, ra)) == ["g-1"]
    rb = b.receiver(None, credit=10, source=Source(address="sel", filter={SELECTOR: "JMSXGroupSeq > 0"}))
    publish(p, "sel", ("g", 2), ("h", 1), ("g", 3))
    assert bodies(got(b, rb)) == ["h-1"]
    ra.detach(closed=True)
    net.pump()
    assert bodies(got(b, rb)) == ["g-1", "g-2", "g-3"]


def test_the_group_is_read_once_as_the_message_arrives() -> None:
    payload = grouped("g", 1).encode()
    m = parse_transfer(payload, 0.0, need_ids=False)
    assert m._group == "g"  # set by the scan, nothing to decode later
    plain = parse_transfer(Message(body=1, subject="s").encode(), 0.0, need_ids=False)
    assert plain._group is None
    assert m.copy().group == "g"


def test_recovered_grouped_messages_are_grouped(tmp_path: Path) -> None:
    store = st.Store(tmp_path / "db.sqlite3")
    net = Net()
    net.broker = Broker(BrokerConfig(), journal=SyncJournal(store))
    p = net.client("p")
    s = p.sender("dgq")
    for n in (1, 2):
        p.send(s, Message(body=n, group_id="g", durable=True))
    fresh = Broker(BrokerConfig())
    assert fresh.recover(store) == 2
    q = fresh.nodes["dgq"]
    assert isinstance(q, Queue) and q.groups is not None


def test_an_owner_with_nothing_out_frees_its_group_at_once() -> None:
    net = Net()
    a, b, p = net.client("a"), net.client("b"), net.client("p")
    ra = a.receiver("free", credit=1)
    publish(p, "free", ("g", 1))
    (d,) = got(a, ra)
    d.accept()
    net.pump()
    rb = b.receiver("free", credit=10)
    publish(p, "free", ("g", 2))
    assert got(b, rb) == []  # a has no credit but still owns g
    ra.detach(closed=True)
    net.pump()
    assert bodies(got(b, rb)) == ["g-2"]


def test_a_get_holds_the_group_until_it_is_settled() -> None:
    net = Net()
    a, p = net.client("a"), net.client("p")
    publish(p, "pull", ("g", 1), ("g", 2), (None, 1))
    q = net.broker.nodes["pull"]
    assert isinstance(q, Queue)
    m = q.get()
    assert m is not None and m.group == "g"
    ra = a.receiver("pull", credit=10)
    assert bodies(got(a, ra)) == ["None-1"]
    q.ack(m)
    net.pump()
    assert bodies(got(a, ra)) == ["g-2"]
