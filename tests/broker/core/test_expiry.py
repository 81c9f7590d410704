"""Expiry on time (core/expiry.py), on the core with a fake clock: messages at the heads of
queues leave when their time comes, dead-lettered, as RabbitMQ drops them; per-message TTLs
behind a longer-lived head wait until they reach it; priorities, paging, the store and
``x-expires``; and nothing armed for a queue without TTL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from amqp10.broker.amqp1.message import X_OPT_DEATHS, Amqp1Message
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker, Queue, RuntimePolicy
from amqp10.broker.core.message import QueuedMessage
from amqp10.broker.core.paging import MESSAGE_OVERHEAD
from amqp10.broker.core.store import Store
from amqp10.message import Message
from tests.broker.harness import HandJournal, Taker

T0 = 1000.0


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def broker(clock: Clock, **cfg: Any) -> Broker:
    return Broker(BrokerConfig.model_validate(cfg), now=clock)


def queue(b: Broker, name: str = "q", **kw: Any) -> Queue:
    q = b.default.declare_queue(name, **kw)
    assert isinstance(q, Queue)
    return q


def msg(body: Any, *, ttl: float | None = None, clock: Clock | None = None, durable: bool = False, priority: int = 4) -> Amqp1Message:
    """A 1.0 message; ``ttl`` (seconds): its own time to live, from the clock's now (as the
    front end reads the header's ttl)."""
    data = Message(body=body, durable=durable, priority=priority).encode()
    expiry = None if ttl is None or clock is None else clock.t + ttl
    return Amqp1Message(data, durable=durable, priority=priority, expiry=expiry)


def body(m: QueuedMessage) -> Any:
    return Message.decode(m.data).body


def publish(q: Queue, *msgs: QueuedMessage) -> None:
    for m in msgs:
        assert q.publish(m, lambda: None)


def with_dlq(b: Broker, **arguments: Any) -> tuple[Queue, Queue]:
    """A queue ``q`` dead-lettering into ``dlq`` through the default exchange."""
    dlq = queue(b, "dlq")
    q = queue(b, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq", **arguments})
    return q, dlq


def drain(q: Queue) -> list[Any]:
    c = Taker(10_000, cid=99)
    q.add_consumer(c)
    q.remove_consumer(c)
    return [body(m) for m in c.got]


def test_queue_ttl_expires_the_head_on_time_into_the_dead_letter_exchange() -> None:
    clock = Clock()
    b = broker(clock)
    q, dlq = with_dlq(b, **{"x-message-ttl": 300})
    for i in range(3):
        publish(q, msg(i))
        clock.t += 0.1
    assert b.expirations.next_deadline() == T0 + 0.3  # the head's, only
    assert len(b.expirations) == 1
    clock.t = T0 + 0.3
    assert b.expirations.expire_due() == 1
    assert (q.count, dlq.count, q.stats.expired) == (2, 1, 1)
    assert b.expirations.next_deadline() == T0 + 0.4  # the next head's
    clock.t = T0 + 1.5
    b.expirations.expire_due()
    assert (q.count, dlq.count, q.stats.dead_lettered) == (0, 3, 3)
    assert b.expirations.next_deadline() is None
    (dead, *_) = [m for m in dlq]
    (death,) = Message.decode(dead.data).message_annotations[X_OPT_DEATHS]
    assert death["queue"] == "q" and death["reason"] == "expired" and death["count"] == 1
    assert drain(dlq) == [0, 1, 2]


def test_a_runtime_policy_message_ttl_expires_on_time_too() -> None:
    clock = Clock()
    b = broker(clock)
    q = queue(b)
    b.default.declare_policy(RuntimePolicy("ttl", "^q$", "queues", {"message-ttl": 2000, "expires": 60_000}))
    publish(q, msg("x"))
    clock.t += 2
    b.expirations.expire_due()
    assert q.count == 0 and q.stats.expired == 1 and q.stats.dropped == 0
    assert b.expirations.next_deadline() == T0 + 60  # the policy's expires, from its declaration


def test_a_per_message_ttl_at_the_head_expires_on_time() -> None:
    clock = Clock()
    b = broker(clock)
    q, dlq = with_dlq(b)
    publish(q, msg("short", ttl=0.2, clock=clock))
    assert b.expirations.next_deadline() == T0 + 0.2
    clock.t += 0.2
    b.expirations.expire_due()
    assert q.count == 0 and drain(dlq) == ["short"]


def test_a_per_message_ttl_behind_a_longer_lived_head_waits_until_it_reaches_the_head() -> None:
    """RabbitMQ: 'only when expired messages reach the head of a queue will they actually be
    discarded (or dead-lettered)'; a consumer never receives one."""
    clock = Clock()
    b = broker(clock)
    q, dlq = with_dlq(b)
    publish(q, msg("long", ttl=10, clock=clock), msg("short-1", ttl=1, clock=clock), msg("short-2", ttl=1, clock=clock))
    assert b.expirations.next_deadline() == T0 + 10
    clock.t += 2
    assert b.expirations.expire_due() == 0
    assert q.count == 3  # counted, as RabbitMQ counts them, until they reach the head
    c = Taker(1)
    q.add_consumer(c)  # takes the head: the expired ones behind it are at the head now
    assert [body(m) for m in c.got] == ["long"]
    assert b.expirations.next_deadline() == T0 + 1  # past: they go at the next run
    b.expirations.expire_due()
    assert q.count == 0 and drain(dlq) == ["short-1", "short-2"]


def test_a_timed_message_behind_a_head_without_ttl_is_armed_when_the_head_is_taken() -> None:
    clock = Clock()
    b = broker(clock)
    q, dlq = with_dlq(b)
    publish(q, msg("forever"), msg("timed", ttl=1, clock=clock))
    assert b.expirations.next_deadline() is None  # the head never expires
    assert q.get() is not None  # basic.get takes the head
    assert b.expirations.next_deadline() == T0 + 1
    clock.t += 1
    b.expirations.expire_due()
    assert q.count == 0 and drain(dlq) == ["timed"]


def test_a_consumer_never_gets_an_expired_message() -> None:
    clock = Clock()
    b = broker(clock)
    q, dlq = with_dlq(b)
    publish(q, msg("long", ttl=10, clock=clock), msg("short", ttl=1, clock=clock), msg("plain"))
    clock.t += 2
    c = Taker(3)
    q.add_consumer(c)
    assert [body(m) for m in c.got] == ["long", "plain"]
    assert drain(dlq) == ["short"]


def test_a_released_message_past_its_time_expires_at_the_head() -> None:
    clock = Clock()
    b = broker(clock)
    q, dlq = with_dlq(b)
    publish(q, msg("m", ttl=1, clock=clock))
    c = Taker(1)
    q.add_consumer(c)
    (m,) = c.got
    q.remove_consumer(c)
    clock.t += 5
    b.expirations.expire_due()  # its deadline passes while it is out: nothing to expire
    assert q.stats.expired == 0 and b.expirations.next_deadline() is None
    q.release(m)
    assert q.count == 1 and b.expirations.next_deadline() == T0 + 1
    b.expirations.expire_due()
    assert q.count == 0 and drain(dlq) == ["m"]


def test_priorities_each_level_head_expires() -> None:
    clock = Clock()
    b = broker(clock)
    q, dlq = with_dlq(b, **{"x-max-priority": 9})
    publish(
        q,
        msg("low-short", ttl=1, clock=clock, priority=0),
        msg("low-long", ttl=9, clock=clock, priority=0),
        msg("high-long", ttl=5, clock=clock, priority=8),
        msg("high-short", ttl=1, clock=clock, priority=8),  # behind a longer-lived head
    )
    assert b.expirations.next_deadline() == T0 + 1
    clock.t += 1
    b.expirations.expire_due()
    assert drain(dlq) == ["low-short"]
    assert q.count == 3 and b.expirations.next_deadline() == T0 + 5
    clock.t = T0 + 5
    b.expirations.expire_due()  # high-long, and high-short now at the head behind it
    assert sorted(drain(dlq)) == ["high-long", "high-short"]
    assert q.count == 1 and b.expirations.next_deadline() == T0 + 9


def test_queues_without_ttl_arm_nothing() -> None:
    clock = Clock()
    b = broker(clock)
    plain = queue(b, "plain")
    timed = queue(b, "timed", arguments={"x-message-ttl": 60_000})
    for i in range(1000):
        publish(plain, msg(i))
        publish(timed, msg(i))
        clock.t += 0.001
    assert len(b.expirations) == 1  # one deadline for the timed queue's 1000 messages, none for the other
    assert b.expirations.next_deadline() == T0 + 60
    assert not plain._expiring and plain.head_deadline is None


def test_a_dead_letter_cycle_with_ttl_zero_does_not_keep_a_run_going() -> None:
    clock = Clock()
    b = broker(clock)
    q = queue(b, arguments={"x-message-ttl": 0, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q"})
    publish(q, msg("loop"))
    for _ in range(3):  # each run expires what was there when it began, once
        assert b.expirations.expire_due() == 1
        assert q.stats.expired <= 3 and q.count == 1


def test_x_expires_deletes_an_unused_queue_on_time() -> None:
    clock = Clock()
    b = broker(clock)
    v = b.default
    q = queue(b, "temp", arguments={"x-expires": 1500})
    assert b.expirations.next_deadline() == T0 + 1.5
    clock.t += 1
    v.declare_queue("temp")  # a redeclaration renews it
    clock.t = T0 + 1.5
    b.expirations.expire_due()
    assert "temp" in v.nodes
    assert b.expirations.next_deadline() == T0 + 2.5
    clock.t = T0 + 2
    assert q.get() is None  # so does a basic.get, even on an empty queue
    clock.t = T0 + 2.5
    b.expirations.expire_due()
    assert "temp" in v.nodes and b.expirations.next_deadline() == T0 + 3.5
    clock.t = T0 + 3
    c = Taker(1)
    q.add_consumer(c)
    clock.t = T0 + 10
    b.expirations.expire_due()
    assert "temp" in v.nodes  # a consumer keeps it in use
    q.remove_consumer(c)
    assert b.expirations.next_deadline() == T0 + 11.5
    clock.t = T0 + 11.5
    b.expirations.expire_due()
    assert "temp" not in v.nodes and len(b.expirations) == 0


def test_deleted_queues_leave_no_deadlines_behind() -> None:
    clock = Clock()
    b = broker(clock)
    for i in range(500):
        q = queue(b, f"rpc-{i}", arguments={"x-expires": 3_600_000, "x-message-ttl": 3_600_000})
        publish(q, msg(i))
        b.default.delete_node(q.name)
    assert len(b.expirations) == 0
    assert len(b.expirations._heap) < 200  # stale entries are swept, not kept for an hour


# -- with the store: paging, durable messages, a restart ------------------------------------

BUDGET = 4 * (100 + MESSAGE_OVERHEAD)  # about four 100-byte messages in memory


def stored(path: Path, clock: Clock, budget: int | None = BUDGET) -> tuple[Broker, HandJournal, Store]:
    store = Store(path)
    journal = HandJournal(store)
    config = BrokerConfig.model_validate({"limits": {"queue_memory_budget_bytes": budget}})
    b = Broker(config, journal=journal, pages=store, now=clock)
    b.recover(store)
    return b, journal, store


def padded(i: int, **kw: Any) -> Amqp1Message:
    return msg(f"{i:0100d}", **kw)


def test_paged_out_messages_expire_on_time(tmp_path: Path) -> None:
    clock = Clock()
    b, journal, _ = stored(tmp_path / "s.db", clock)
    q, dlq = with_dlq(b, **{"x-message-ttl": 1000})
    for i in range(40):
        publish(q, padded(i, durable=i % 2 == 0))
    assert q.pager is not None and q.pager.count > 30
    journal.commit()
    clock.t += 1
    for _ in range(100):  # bounded: each run expires what is in memory and reads on
        if not b.expirations.expire_due():
            break
        journal.commit()
    assert q.count == 0 and q.pager.count == 0 and q.stats.expired == 40
    assert dlq.count == 40
    journal.commit()
    assert sorted(int(x) for x in drain(dlq)) == list(range(40))


def test_a_paged_head_not_committed_yet_is_armed_once_it_is(tmp_path: Path) -> None:
    clock = Clock()
    b, journal, _ = stored(tmp_path / "s.db", clock, budget=0)  # every message paged out
    q = queue(b)
    publish(q, padded(1, ttl=1, clock=clock))  # its row is not committed: its expiry not known
    assert q.pager is not None and q.pager.count == 1
    journal.commit()  # the barrier's callback reads it back and arms its deadline
    assert b.expirations.next_deadline() == T0 + 1
    clock.t += 1
    b.expirations.expire_due()
    assert q.count == 0 and q.stats.expired == 1


def test_durable_expired_messages_are_deleted_from_the_store(tmp_path: Path) -> None:
    clock = Clock()
    b, journal, store = stored(tmp_path / "s.db", clock, budget=None)
    q = queue(b, arguments={"x-message-ttl": 1000})
    publish(q, *(msg(i, durable=True) for i in range(10)))
    journal.commit()
    assert len(store.load().messages) == 10
    clock.t += 1
    b.expirations.expire_due()
    journal.commit()
    assert q.count == 0 and store.load().messages == []
    assert b.stats.disk_bytes == 0


def test_durable_messages_restored_after_a_restart_expire_on_time(tmp_path: Path) -> None:
    clock = Clock()
    b, journal, store = stored(tmp_path / "s.db", clock)
    q = queue(b, arguments={"x-message-ttl": 5000})
    publish(q, *(padded(i, durable=True) for i in range(30)))
    journal.commit()
    store.close()
    clock.t += 2
    b, journal, store = stored(tmp_path / "s.db", clock)
    q = b.default.nodes["q"]  # type: ignore[assignment]
    assert isinstance(q, Queue) and q.count == 30
    assert b.expirations.next_deadline() == T0 + 5
    clock.t = T0 + 5
    for _ in range(100):
        if not b.expirations.expire_due():
            break
        journal.commit()
    journal.commit()
    assert q.count == 0 and store.load().messages == []
