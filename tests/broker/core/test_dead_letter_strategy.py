"""``x-dead-letter-strategy``: at-most-once (the default) drops a dead letter that reaches
no queue; at-least-once keeps it in its source queue, out of the ready messages, and sends
it again when a route may exist (a binding, a queue declared) or when its time-driven retry
is due (the broker's tick; a doubling, bounded interval), as RabbitMQ's dlx worker does.
Over 1.0 in memory with a fake clock."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from amqp10.broker.core import Binding, PreconditionFailed, Queue, VirtualHost, arguments_of
from amqp10.broker.core import store as store_
from amqp10.broker.core.dead_letters import FIRST_RETRY, MAX_RETRY
from amqp10.message import Message
from amqp10.types import Header, Rejected
from tests.broker.core.test_queue_arguments import Clock
from tests.broker.core.test_rabbitmq4_semantics import body, net_with, stored
from tests.broker.harness import Client, Net, SyncJournal

AT_LEAST_ONCE = {"x-dead-letter-exchange": "dlx", "x-dead-letter-strategy": "at-least-once"}


def reject_one(net: Net, c: Client, queue: str) -> None:
    r = c.receiver(f"/queues/{queue}", credit=1)
    (d,) = c.received(r)
    d.settle(Rejected())
    net.pump()


def work_queue(v: VirtualHost, arguments: Mapping[str, object]) -> Queue:
    q = v.declare_queue("work", arguments=arguments)
    assert isinstance(q, Queue)
    return q


def one_dead(
    net: Net, v: VirtualHost, message: Message, arguments: Mapping[str, object] = AT_LEAST_ONCE
) -> tuple[Client, Queue]:
    """A direct exchange dlx with no binding, queue work dead-lettering to it, and one
    message sent to work and rejected."""
    v.declare_exchange("dlx", "direct")
    work = work_queue(v, arguments)
    c = net.client()
    c.send(c.sender("/queues/work"), message)
    reject_one(net, c, "work")
    return c, work


def test_at_most_once_drops_a_dead_letter_that_reaches_no_queue() -> None:
    net, v = net_with()
    _, work = one_dead(net, v, Message(body="x"), {"x-dead-letter-exchange": "dlx"})
    assert work.held_dead is None and work.count == 0 and not v.holding


def test_at_least_once_keeps_it_and_a_new_binding_sends_it() -> None:
    net, v = net_with()
    c, work = one_dead(net, v, Message(body="kept"))
    assert work.held_dead is not None and len(work.held_dead) == 1
    assert work.count == 0  # not a ready message: no consumer gets it
    assert v.holding == {work}
    v.declare_queue("dead")  # a queue, but no route from dlx to it yet
    assert work.held_dead is not None and len(work.held_dead) == 1
    v.bind("dlx", "dead", "")  # the message's own routing key (its subject: none)
    assert work.held_dead is None and not v.holding
    (d,) = c.received(c.receiver("/queues/dead", credit=1))
    assert body(d) == "kept"
    annotations = {
        str(k): v for k, v in (Message.decode(d.payload).message_annotations or {}).items()
    }
    assert len(annotations["x-opt-deaths"]) == 1  # one death, however many tries it took


def test_a_missing_dead_letter_exchange_keeps_it_until_the_tick_finds_a_route() -> None:
    clock = Clock()
    net, v = net_with(clock)
    work = work_queue(v, AT_LEAST_ONCE)  # dlx does not exist yet
    c = net.client()
    c.send(c.sender("/queues/work"), Message(body="later"))
    reject_one(net, c, "work")
    held = work.held_dead
    assert held is not None and held.interval == FIRST_RETRY
    x = v.declare_exchange("dlx", "fanout")
    dead = v.declare_queue("dead")
    x.bind(Binding(x, dead, ""))
    assert len(held) == 1  # (bound behind the virtual host's back: nothing told it)
    net.broker.tick()
    assert len(held) == 1  # not due yet: the tick does not busy-retry
    clock.t = held.retry_at
    net.broker.tick()
    assert work.held_dead is None and dead.count == 1


def test_the_retry_interval_doubles_up_to_its_bound_while_nothing_goes() -> None:
    clock = Clock()
    net, v = net_with(clock)
    _, work = one_dead(net, v, Message(body="x"))
    held = work.held_dead
    assert held is not None
    intervals = []
    for _ in range(10):
        clock.t = held.retry_at
        net.broker.tick()
        intervals.append(held.interval)
    assert intervals[:3] == [2 * FIRST_RETRY, 4 * FIRST_RETRY, 8 * FIRST_RETRY]
    assert max(intervals) == MAX_RETRY and intervals[-1] == MAX_RETRY
    assert len(held) == 1


def test_a_full_target_is_retried_when_it_has_room() -> None:
    clock = Clock()
    net, v = net_with(clock)
    v.declare_exchange("dlx", "fanout")
    dead = v.declare_queue("dead", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    v.bind("dlx", "dead", "")
    work = work_queue(v, AT_LEAST_ONCE)
    c = net.client()
    s = c.sender("/queues/work")
    c.send(s, Message(body="a"))
    c.send(s, Message(body="b"))
    reject_one(net, c, "work")
    reject_one(net, c, "work")
    assert dead.count == 1 and work.held_dead is not None and len(work.held_dead) == 1
    r = c.receiver("/queues/dead", credit=1)
    (d,) = c.received(r)
    assert body(d) == "a"
    d.settle(Rejected())  # (dead has no dead-letter target: gone)
    net.pump()
    clock.t += FIRST_RETRY
    net.broker.tick()
    assert work.held_dead is None and dead.count == 1


def test_a_kept_dead_letter_stays_in_the_store_until_sent(tmp_path: Path) -> None:
    st = store_.Store(tmp_path / "db.sqlite3")
    net, v = net_with(journal=SyncJournal(st))
    one_dead(net, v, Message(body="x", header=Header(durable=True)))
    assert stored(st) == [store_.message_key("/", "work")]  # a crash now loses nothing
    v.declare_queue("dead")
    v.bind("dlx", "dead", "")
    assert stored(st) == [store_.message_key("/", "dead")]


def test_deleting_the_queue_gives_its_kept_dead_letters_up() -> None:
    net, v = net_with()
    _, work = one_dead(net, v, Message(body="x"))
    v.delete_node("work")
    assert work.held_dead is None
    v.declare_queue("dead")
    v.bind("dlx", "dead", "")
    assert v.nodes["dead"].count == 0 and not v.holding  # type: ignore[attr-defined]


def test_the_argument_is_checked_kept_and_reported() -> None:
    _, v = net_with()
    with pytest.raises(PreconditionFailed, match=r"x-dead-letter-strategy.*invalid_dlx_strategy"):
        v.declare_queue("bad", arguments={"x-dead-letter-strategy": "sometimes"})
    q = work_queue(v, AT_LEAST_ONCE)
    assert q.policy.dead_letter_strategy == "at-least-once"
    assert arguments_of(q.policy)["x-dead-letter-strategy"] == "at-least-once"


def test_a_kept_dead_letter_is_marked_in_the_store_with_its_reason(tmp_path: Path) -> None:
    st = store_.Store(tmp_path / "db.sqlite3")
    net, v = net_with(journal=SyncJournal(st))
    one_dead(net, v, Message(body="x", header=Header(durable=True)))
    (row,) = st.load().messages
    assert row.dead_reason == "rejected" and not row.deferred  # kept aside after a restart, not ready
    assert row.in_flight == store_.HELD_DEAD_LETTER["rejected"]
