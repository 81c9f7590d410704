"""Scheduled delivery in the broker core, with an injected clock (no sockets, no sleeps)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amqp10.broker.amqp1.message import parse_transfer
from amqp10.broker.config import AddressRule, BrokerConfig, QueuePolicy
from amqp10.broker.core import Broker, Queue
from amqp10.broker.core import store as st
from amqp10.message import Message
from amqp10.types import Accepted, Source, symbol, timestamp
from tests.broker.harness import Client, Net, SyncJournal

T0 = 1_700_000_000.0
DELAY = "x-opt-delivery-delay"
AT = "x-opt-delivery-time"
ENQUEUE_AT = "x-opt-scheduled-enqueue-time"


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def scheduled(body: Any, key: str, value: int, **kw: Any) -> Message:
    return Message(body=body, message_annotations={symbol(key): value}, **kw)


def bodies(c: Client, r: Any) -> list[Any]:
    return [Message.decode(d.payload).body for d in c.received(r)]


def queue(net: Net, name: str) -> Queue:
    q = net.broker.nodes[name]
    assert isinstance(q, Queue)
    return q


def setup(address: str, cfg: BrokerConfig | None = None) -> tuple[Clock, Net, Client, Any]:
    """A clock, a broker on it, a client and its sender to ``address``."""
    clock = Clock()
    net = Net(cfg, now=clock)
    c = net.client()
    return clock, net, c, c.sender(address)


def advance(net: Net, clock: Clock, seconds: float) -> None:
    clock.t += seconds
    net.broker.scheduler.release_due()
    net.pump()


def test_a_delayed_message_is_held_until_due() -> None:
    clock, net, c, s = setup("sq")
    r = c.receiver("sq", credit=10)
    d = c.send(s, scheduled("later", DELAY, 5000))
    assert isinstance(d.remote_state, Accepted)  # accepted at once: it is kept
    c.send(s, Message(body="now"))
    assert bodies(c, r) == ["now"]
    q = queue(net, "sq")
    assert q.count == 0 and q.stats.scheduled == 1
    assert net.broker.scheduler.next_deadline() == T0 + 5
    advance(net, clock, 4.99)
    assert bodies(c, r) == []
    advance(net, clock, 0.01)
    assert bodies(c, r) == ["later"]
    assert q.stats.scheduled == 0 and q.stats.enqueued == 2


def test_due_time_order_with_every_annotation_ties_by_arrival() -> None:
    clock, net, c, s = setup("order")
    ms = int(T0 * 1000)
    c.send(s, scheduled("a", DELAY, 3000))
    c.send(s, scheduled("b", AT, ms + 1000))
    c.send(s, scheduled("c", ENQUEUE_AT, timestamp(ms + 2000)))
    clock.t += 0.5
    c.send(s, scheduled("d", DELAY, 500))  # due with b, arrived after it
    c.send(s, Message(body="e"))
    r = c.receiver("order", credit=10)
    assert bodies(c, r) == ["e"]
    assert queue(net, "order").stats.scheduled == 4
    advance(net, clock, 10)
    assert bodies(c, r) == ["b", "d", "c", "a"]


def test_a_due_message_waits_behind_what_is_queued() -> None:
    clock, net, c, s = setup("behind")
    c.send(s, scheduled("held", DELAY, 1000))
    c.send(s, Message(body=1))
    advance(net, clock, 1)
    c.send(s, Message(body=2))
    r = c.receiver("behind", credit=10)
    assert bodies(c, r) == [1, "held", 2]


def test_a_past_or_present_due_time_is_immediate() -> None:
    clock, net, c, s = setup("past")
    r = c.receiver("past", credit=10)
    c.send(s, scheduled(1, AT, int(T0 * 1000) - 60_000))
    c.send(s, scheduled(2, ENQUEUE_AT, timestamp(int(T0 * 1000))))
    c.send(s, scheduled(3, DELAY, 0))
    assert bodies(c, r) == [1, 2, 3]
    assert queue(net, "past").stats.scheduled == 0


def test_browsers_do_not_see_held_messages_and_purge_drops_them() -> None:
    clock, net, c, s = setup("browse")
    c.send(s, scheduled("held", DELAY, 1000))
    c.send(s, Message(body="visible"))
    b = c.receiver(None, credit=10, source=Source(address="browse", distribution_mode=symbol("copy")))
    assert bodies(c, b) == ["visible"]
    q = queue(net, "browse")
    assert q.purge() == 2
    assert q.stats.scheduled == 0 and len(net.broker.scheduler) == 0
    advance(net, clock, 5)
    assert q.count == 0


def test_ttl_counts_from_the_due_time() -> None:
    cfg = BrokerConfig(addresses=[AddressRule(pattern="ttlq", kind="queue", policy=QueuePolicy(message_ttl=2))])
    clock, net, c, s = setup("ttlq", cfg)
    c.send(s, scheduled("queue-ttl", DELAY, 10_000))
    c.send(s, scheduled("own-ttl", DELAY, 10_000, ttl=1))  # seconds
    advance(net, clock, 10.5)  # both are past their ttl counted from arrival, not from due
    q = queue(net, "ttlq")
    assert q.count == 2
    assert sorted(m.expiry for m in q) == [T0 + 11, T0 + 12]
    advance(net, clock, 1)  # own-ttl has expired, queue-ttl has not
    r = c.receiver("ttlq", credit=10)
    assert bodies(c, r) == ["queue-ttl"]


def test_durable_scheduled_messages_survive_a_restart(open_store: Callable[[], st.SqlStore]) -> None:
    store = open_store()  # on each backend
    clock = Clock()
    net = Net(now=clock)
    net.broker = Broker(BrokerConfig(), journal=SyncJournal(store), now=clock)
    c = net.client()
    s = c.sender("dq")
    c.send(s, scheduled("late", DELAY, 5000, durable=True))
    c.send(s, scheduled("early", AT, int((T0 + 1) * 1000), durable=True))
    c.send(s, Message(body="plain", durable=True))
    advance(net, clock, 1)  # early enters the queue (its stored record moves behind plain)

    fresh = Broker(BrokerConfig(), now=clock)
    assert fresh.recover(store) == 3
    q = fresh.nodes["dq"]
    assert isinstance(q, Queue)
    assert [Message.decode(m.data).body for m in q] == ["plain", "early"]
    assert q.stats.scheduled == 1
    clock.t += 4
    fresh.scheduler.release_due()
    assert [Message.decode(m.data).body for m in q] == ["plain", "early", "late"]

    later = Broker(BrokerConfig(), now=clock)  # restarted after the due time passed
    clock.t += 100
    assert later.recover(store) == 3
    q2 = later.nodes["dq"]
    assert isinstance(q2, Queue)
    assert sorted(Message.decode(m.data).body for m in q2) == ["early", "late", "plain"]
    assert q2.stats.scheduled == 0


def test_tick_releases_and_open_offers_delayed_delivery() -> None:
    clock, net, c, s = setup("tq")
    assert symbol("DELAYED_DELIVERY") in (c.conn.remote_open.offered_capabilities or [])
    c.send(s, scheduled("x", DELAY, 1500))
    clock.t += 2
    net.broker.tick()
    assert queue(net, "tq").count == 1


def test_a_dead_lettered_scheduled_message_is_not_held_again() -> None:
    cfg = BrokerConfig(
        addresses=[AddressRule(pattern="dlsrc", kind="queue", policy=QueuePolicy(dead_letter_address="dlq"))]
    )
    clock, net, c, s = setup("dlsrc", cfg)
    c.receiver("dlq").detach()
    c.send(s, scheduled("x", DELAY, 1000))
    advance(net, clock, 1)
    r = c.receiver("dlsrc", credit=1)
    (d,) = c.received(r)
    d.reject()
    net.pump()
    assert queue(net, "dlq").count == 1 and queue(net, "dlq").stats.scheduled == 0


def test_a_scheduled_grouped_message_keeps_to_its_group() -> None:
    clock, net, c, s = setup("sg")
    a, b = net.client("a"), net.client("b")
    c.send(s, scheduled("g-1", DELAY, 1000, group_id="g"))  # the queue's first grouped messages
    c.send(s, scheduled("g-2", DELAY, 2000, group_id="g"))
    ra = a.receiver("sg", credit=1)
    advance(net, clock, 1)
    assert bodies(a, ra) == ["g-1"]  # a owns g, and has no credit left
    rb = b.receiver("sg", credit=10)
    advance(net, clock, 1)
    assert bodies(b, rb) == []
    ra.add_credit(1)
    net.pump()
    assert bodies(a, ra) == ["g-2"]


def test_the_due_time_is_read_once_and_only_when_annotated() -> None:
    plain = parse_transfer(Message(body=1).encode(), T0)
    assert plain._due is None  # no message annotations: nothing to read later
    other = parse_transfer(Message(body=1, message_annotations={"x-opt-other": 1}).encode(), T0)
    assert other.due is None
    delayed = parse_transfer(scheduled(1, DELAY, 2500).encode(), T0)
    assert delayed.due == T0 + 2.5
    assert delayed.copy().due == T0 + 2.5
