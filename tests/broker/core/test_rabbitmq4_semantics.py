"""RabbitMQ 4's queue semantics in the core, over 1.0 in memory (a fake clock): the
quorum queues' delivery limit, at-least-once dead-lettering, delayed retry by a
``modified`` outcome, strict priorities up to 32 levels, the leader locator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from amqp10.broker.amqp1.message import parse_transfer
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import (
    ArgumentError,
    Broker,
    PreconditionFailed,
    Queue,
    RuntimePolicy,
    Stream,
    VirtualHost,
    arguments_of,
    policy_with_arguments,
)
from amqp10.broker.core import store as store_
from amqp10.broker.core.queue_policy import QueuePolicy
from amqp10.message import Message
from amqp10.types import Accepted, Header, Modified, Rejected, symbol
from tests.broker.core.test_queue_arguments import Clock
from tests.broker.harness import Client, HeldJournal, Net, SyncJournal, Taker


def net_with(clock: Clock | None = None, journal: Any = None) -> tuple[Net, VirtualHost]:
    net = Net(BrokerConfig(), now=clock, journal=journal)
    return net, net.broker.vhosts["/"]


def body(d: Any) -> Any:
    return Message.decode(d.payload).body


def bounce(c: Client, r: Any, times: int) -> int:
    """Return the message ``times`` times with ``modified(delivery-failed)``; how many
    deliveries came."""
    n = 0
    for _ in range(times):
        got = c.received(r)
        if not got:
            break
        (d,) = got
        n += 1
        d.settle(Modified(delivery_failed=True))
        c.net.pump()
        r.flow(1)
        c.net.pump()
    return n


def poison_setup(v: VirtualHost, arguments: dict[str, Any]) -> None:
    v.declare_queue("dead")
    v.bind("amq.fanout", "dead", "")
    v.declare_queue("work", arguments={"x-dead-letter-exchange": "amq.fanout", **arguments})


# -- the delivery limit -----------------------------------------------------------------------
def test_a_quorum_queue_dead_letters_a_message_returned_more_than_20_times() -> None:
    net, v = net_with()
    poison_setup(v, {"x-queue-type": "quorum"})
    work = v.nodes["work"]
    assert isinstance(work, Queue) and work.policy.delivery_limit == 21
    c = net.client()
    c.send(c.sender("/queues/work"), Message(body="poison"))
    r = c.receiver("/queues/work", credit=1)
    assert bounce(c, r, 30) == 21  # delivered 21 times: the 21st return is one too many
    assert work.count == 0 and work.stats.dead_lettered == 1
    (d,) = c.received(c.receiver("/queues/dead", credit=1))
    assert body(d) == "poison"


def test_x_delivery_limit_counts_returns_and_minus_one_lifts_the_limit() -> None:
    net, v = net_with()
    poison_setup(v, {"x-queue-type": "quorum", "x-delivery-limit": 2})
    c = net.client()
    c.send(c.sender("/queues/work"), Message(body="p"))
    assert bounce(c, c.receiver("/queues/work", credit=1), 10) == 3
    v.declare_queue("forever", arguments={"x-queue-type": "quorum", "x-delivery-limit": -1})
    c.send(c.sender("/queues/forever"), Message(body="p"))
    assert bounce(c, c.receiver("/queues/forever", credit=1), 30) == 30
    q = v.nodes["forever"]
    assert isinstance(q, Queue) and q.policy.delivery_limit is None and q.count == 0  # (held by the consumer)
    classic = policy_with_arguments(QueuePolicy(), {"x-queue-type": "classic"})
    assert classic.delivery_limit is None  # a classic queue has no default limit


def test_a_policy_sets_the_delivery_limit_and_no_dead_letter_target_drops() -> None:
    net, v = net_with()
    v.declare_policy(RuntimePolicy("poison", "^p", apply_to="queues", definition={"delivery-limit": 0}))
    v.declare_queue("p1", arguments={"x-queue-type": "quorum"})
    c = net.client()
    c.send(c.sender("/queues/p1"), Message(body="x"))
    assert bounce(c, c.receiver("/queues/p1", credit=1), 5) == 1  # no return allowed
    q = v.nodes["p1"]
    assert isinstance(q, Queue) and q.count == 0 and q.stats.dropped == 1


def test_delivery_limit_arguments_round_trip_and_are_checked() -> None:
    p = policy_with_arguments(QueuePolicy(), {"x-delivery-limit": 5, "x-consumer-timeout": 1500})
    assert (p.delivery_limit, p.consumer_timeout) == (6, 1.5)
    assert arguments_of(p) == {"x-delivery-limit": 5, "x-consumer-timeout": 1500}
    for bad in ({"x-delivery-limit": -2}, {"x-delivery-limit": "5"}, {"x-consumer-timeout": 0}):
        with pytest.raises(ArgumentError):
            policy_with_arguments(QueuePolicy(), bad)


# -- leader locator and type --------------------------------------------------------------------
def test_leader_locator_is_checked_and_kept() -> None:
    _, v = net_with()
    q = v.declare_queue("led", arguments={"x-queue-type": "quorum", "x-queue-leader-locator": "client-local"})
    assert isinstance(q, Queue) and q.arguments["x-queue-leader-locator"] == "client-local"
    with pytest.raises(PreconditionFailed, match="x-queue-leader-locator"):
        v.declare_queue("bad", arguments={"x-queue-leader-locator": "nearest"})
    # RabbitMQ 3.10's deprecated locators are taken as it takes them
    assert v.declare_queue("old", arguments={"x-queue-leader-locator": "random"}).arguments == {"x-queue-leader-locator": "random"}
    v.declare_policy(RuntimePolicy("loc", "^led", definition={"queue-leader-locator": "balanced"}))
    with pytest.raises(PreconditionFailed):
        v.declare_policy(RuntimePolicy("bad", "^x", definition={"queue-leader-locator": "nearest"}))


# -- priorities ---------------------------------------------------------------------------------
def test_up_to_32_strict_priority_levels_where_asked() -> None:
    net, v = net_with()
    v.declare_queue("p32", arguments={"x-max-priority": 32})
    v.declare_queue("plain")
    c = net.client()
    for address in ("/queues/p32", "/queues/plain"):
        s = c.sender(address)
        for prio in (10, 31, 20, 255, 0):
            c.send(s, Message(body=prio, header=Header(priority=prio)))
    r = c.receiver("/queues/p32", credit=10)
    assert [body(d) for d in c.received(r)] == [31, 255, 20, 10, 0]  # 255 shares level 31
    r = c.receiver("/queues/plain", credit=10)
    assert [body(d) for d in c.received(r)] == [10, 31, 20, 255, 0]  # 0-9 without x-max-priority


# -- delayed retry --------------------------------------------------------------------------------
def test_modified_with_a_delivery_time_retries_later() -> None:
    clock = Clock()
    net, v = net_with(clock)
    v.declare_queue("retry", arguments={"x-queue-type": "quorum"})
    c = net.client()
    s = c.sender("/queues/retry")
    c.send(s, Message(body="job"))
    r = c.receiver("/queues/retry", credit=5)
    (d,) = c.received(r)
    at = int((clock.t + 10) * 1000)
    d.settle(Modified(delivery_failed=True, message_annotations={symbol("x-opt-delivery-time"): at}))
    net.pump()
    c.send(s, Message(body="next"))
    assert [body(d) for d in c.received(r)] == ["next"]  # the retried one waits
    q = v.nodes["retry"]
    assert isinstance(q, Queue) and q.stats.scheduled == 1
    clock.t += 9
    net.broker.tick()
    net.pump()
    assert c.received(r) == []
    clock.t += 1
    net.broker.tick()
    net.pump()
    (d,) = c.received(r)
    m = Message.decode(d.payload)
    assert m.body == "job" and m.header is not None and m.header.delivery_count == 1


def test_modified_annotations_and_the_retry_are_kept_in_the_store(tmp_path: Path) -> None:
    clock = Clock()
    st = store_.Store(tmp_path / "db.sqlite3")
    net, v = net_with(clock, SyncJournal(st))
    v.declare_queue("kept")
    c = net.client()
    c.send(c.sender("/queues/kept"), Message(body="job", header=Header(durable=True)))
    r = c.receiver("/queues/kept", credit=1)
    (d,) = c.received(r)
    at = int((clock.t + 60) * 1000)
    d.settle(Modified(message_annotations={symbol("x-opt-tries"): 1, symbol("x-opt-delivery-time"): at}))
    net.pump()
    st.close()
    fresh = Broker(BrokerConfig(), now=clock)
    fresh.recover(store_.Store(tmp_path / "db.sqlite3"))
    q = fresh.vhosts["/"].nodes["kept"]
    assert isinstance(q, Queue) and q.count == 0 and q.stats.scheduled == 1  # still waiting for its time
    clock.t += 61
    fresh.tick()
    assert q.count == 1
    (msg,) = list(q)
    ann = Message.decode(msg.data).message_annotations or {}
    assert ann.get("x-opt-tries") == 1


# -- at-least-once dead-lettering ---------------------------------------------------------------
def stored(st: store_.Store) -> list[str]:
    return sorted(m.node for m in st.stored_messages())


def test_a_dead_letter_leaves_the_store_only_once_its_target_has_it(tmp_path: Path) -> None:
    st = store_.Store(tmp_path / "db.sqlite3")
    journal = HeldJournal(st)
    net, v = net_with(journal=journal)
    poison_setup(v, {})
    c = net.client()
    c.send(c.sender("/queues/work"), Message(body="x", header=Header(durable=True)))
    journal.commit()
    work, dead = store_.message_key("/", "work"), store_.message_key("/", "dead")
    assert stored(st) == [work]
    r = c.receiver("/queues/work", credit=1)
    (d,) = c.received(r)
    d.settle(Rejected())
    net.pump()
    assert store_.DELETE not in [op[0] for op in journal.ops]  # only the dead letter's write so far
    journal.commit()  # its write is committed: now the source's delete is submitted
    assert [op[0] for op in journal.ops] == [store_.DELETE]
    assert stored(st) == [dead, work]  # a crash here keeps both: at least once, never neither
    journal.commit()
    assert stored(st) == [dead]


def test_accepted_after_all() -> None:  # the usual path is untouched: accept removes it at once
    net, v = net_with()
    v.declare_queue("plain")
    c = net.client()
    c.send(c.sender("/queues/plain"), Message(body=1))
    r = c.receiver("/queues/plain", credit=1)
    (d,) = c.received(r)
    d.settle(Accepted())
    net.pump()
    q = v.nodes["plain"]
    assert isinstance(q, Queue) and q.stats.acked == 1


# -- single active consumer of a stream ------------------------------------------------------------
def test_a_stream_with_a_single_active_consumer_hands_over_where_it_stopped() -> None:
    _, v = net_with()
    log = v.declare_queue("log", arguments={"x-queue-type": "stream", "x-single-active-consumer": True})
    assert isinstance(log, Stream)
    a, b = Taker(10, cid=1), Taker(10, cid=2)
    log.add_consumer_at(a, 0)
    log.add_consumer_at(b, 0)
    for i in range(3):
        log.publish(_queued(i), lambda: None)
    assert (len(a.got), len(b.got), log.active_consumer) == (3, 0, a)
    log.remove_consumer(a)
    log.publish(_queued(3), lambda: None)
    assert [m.seq for m in b.got] == [3] and log.active_consumer is b


def _queued(i: int) -> Any:
    return parse_transfer(Message(body=i).encode(), 0.0)
