"""A 0-10 subscriber on one worker of a queue another worker owns is served as on one broker.

``amqp10 broker --workers 2`` on 127.0.0.1, bare 0-10 peers (tests/amqp010/peer.py) pinned
to a worker (``connection.start``'s server properties name it): byte credit counted by the
owner (workers/bytecredit.py), ``message.accept`` completed once the owner applied it,
and Qpid's ``no-local`` on a shared queue with an exclusive subscriber on another worker.
Every wait is bounded; none is a timed assertion.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.amqp010.peer import SocketPeer, struct
from tests.broker.test_workers import Parent

from .test_amqp010_processes import (
    BYTES,
    CREDIT,
    MESSAGES,
    UNLIMITED,
    counts,
    one_on_each,
    pinned,
    publish,
    subscribe,
)
from .test_processes import owned_by

pytestmark = pytest.mark.slow


@contextmanager
def on_worker(p: Parent, worker: int, count: int) -> Iterator[list[SocketPeer]]:
    """``count`` 0-10 peers (a session attached) served by worker ``worker``."""
    with pinned(p, {worker: count}) as by_worker:
        yield by_worker[worker]


def test_byte_credit_is_counted_by_the_owner_and_a_message_too_large_stays_first(broker: Parent) -> None:
    """The owner sends nothing larger than the byte credit left: the large message stays
    on its queue, first, until more credit comes (the queue's count says 2 meanwhile)."""
    with one_on_each(broker) as peers:
        name = owned_by(1, "q010bytes")
        p, at_owner = peers[0], peers[1]
        p.call("queue.declare", queue=name)
        publish(p, name, b"B" * 3000)
        publish(p, name, b"s")
        p.call("message.subscribe", queue=name, destination="d", accept_mode=1, acquire_mode=0)
        p.call("message.set-flow-mode", destination="d", flow_mode=CREDIT)
        p.call("message.flow", destination="d", unit=MESSAGES, value=UNLIMITED)
        p.call("message.flow", destination="d", unit=BYTES, value=1000)  # less than the first
        assert counts(p, name) == (2, 1)  # (asked of the owner after the credit went there)
        assert counts(at_owner, name) == (2, 1)
        assert p.take("message.transfer") == []
        p.call("message.flow", destination="d", unit=BYTES, value=5000)
        big, small = p.wait("message.transfer", 2)
        assert (len(big.body), small.body) == (3000, b"s")
        # and without a byte limit, the owner sends what the message credit allows
        for body in (b"x" * 2000, b"y"):
            publish(p, name, body)
        p.call("message.flow", destination="d", unit=BYTES, value=UNLIMITED)
        assert [t.body for t in p.wait("message.transfer", 2)] == [b"x" * 2000, b"y"]


def test_message_stop_takes_the_credit_back_from_the_owner(broker: Parent) -> None:
    """After ``message.stop`` the owner sends the subscriber nothing more: what is published
    next stays in the owner's queue (counted there), for a subscriber that has credit."""
    with one_on_each(broker) as peers:
        name = owned_by(1, "q010stop")
        p, at_owner = peers[0], peers[1]
        p.call("queue.declare", queue=name)
        subscribe(p, name, "d", 5)
        assert counts(p, name) == (0, 1)  # (asked of the owner after the credit went there)
        p.call("message.stop", destination="d")
        for body in (b"a", b"b"):
            publish(p, name, body)
        assert counts(at_owner, name) == (2, 1)  # not sent to wait on worker 0
        assert p.take("message.transfer") == []
        subscribe(at_owner, name, "e", 2)
        assert [t.body for t in at_owner.wait("message.transfer", 2)] == [b"a", b"b"]


def test_an_accept_completes_once_the_owner_freed_the_group(broker: Parent) -> None:
    """A shared message group held by a subscriber on another worker is free for the next
    subscriber as soon as that subscriber's ``message.accept`` completes (three queues:
    the owner's next transfer follows the accept's completion at once each time)."""
    with one_on_each(broker) as peers:
        holder, other = peers[0], peers[1]
        for r in range(3):
            name = owned_by(1, f"q010groups{r}x")
            holder.call(
                "queue.declare",
                queue=name,
                arguments={"qpid.group_header_key": "THE-GROUP", "qpid.shared_msg_group": 1},
            )
            for i, g in enumerate("AABB"):
                headers = [
                    struct("delivery-properties", routing_key=name),
                    struct("message-properties", application_headers={"THE-GROUP": g}),
                ]
                holder.call(
                    "message.transfer", destination="", accept_mode=1, acquire_mode=0, headers=headers, body=str(i).encode()
                )
            subscribe(holder, name, f"one{r}", 1)
            (a,) = holder.wait("message.transfer")
            subscribe(other, name, f"two{r}", 1)  # on the owner
            (b,) = other.wait("message.transfer")
            assert (a.body, b.body) == (b"0", b"2")  # A is the holder's while it holds A-0
            holder.call("message.accept", transfers=((a.id, a.id),))  # A is free again
            other.call("message.flow", destination=f"two{r}", unit=MESSAGES, value=1)
            (b1,) = other.wait("message.transfer")
            assert b1.body == b"1"


def test_a_shared_no_local_queue_of_another_worker_takes_none_of_its_exclusive_subscribers_connection(
    broker: Parent,
) -> None:
    """Qpid's ``no-local`` on a queue worker 1 owns, whose exclusive subscriber is on worker
    0: what that subscriber's connection publishes (on any session) is not the queue's;
    another connection's is."""
    with on_worker(broker, 0, 2) as (me, other):
        name = owned_by(1, "q010nolocal")
        me.attach(2, b"s2")
        me.call("queue.declare", queue=name, arguments={"no-local": True})
        me.call("message.subscribe", queue=name, destination="d", exclusive=True)
        me.call("message.flow", destination="d", unit=BYTES, value=UNLIMITED)
        me.call("message.flow", destination="d", unit=MESSAGES, value=UNLIMITED)
        me.call("exchange.bind", exchange="amq.fanout", queue=name)
        for body, peer, channel in ((b"local", me, 1), (b"local too", me, 2), (b"foreign", other, 1)):
            headers = [struct("delivery-properties", routing_key=""), struct("message-properties")]
            peer.call(
                "message.transfer", channel, destination="amq.fanout", accept_mode=1, acquire_mode=0, headers=headers, body=body
            )
        (t,) = me.wait("message.transfer")
        assert t.body == b"foreign"
        assert counts(me, name) == (0, 1)


def test_a_browsed_message_of_another_workers_queue_is_acquired_once(broker: Parent) -> None:
    """``message.acquire`` of transfers browsed from a queue worker 1 owns, on worker 0: the
    owner takes each still there once, and the acquired ones are settled there."""
    with one_on_each(broker) as peers:
        name = owned_by(1, "q010acquire")
        p, at_owner = peers[0], peers[1]
        p.call("queue.declare", queue=name)
        for body in (b"first", b"second", b"third"):
            publish(p, name, body)
        p.call("message.subscribe", queue=name, destination="browser", accept_mode=0, acquire_mode=1)
        p.call("message.flow", destination="browser", unit=BYTES, value=UNLIMITED)
        p.call("message.flow", destination="browser", unit=MESSAGES, value=UNLIMITED)
        first, second, third = p.wait("message.transfer", 3)
        assert [t.body for t in (first, second, third)] == [b"first", b"second", b"third"]
        assert counts(at_owner, name) == (3, 1)
        got = p.call("message.acquire", transfers=((first.id, first.id),))
        assert got is not None and got["transfers"] == ((first.id, first.id),)
        assert counts(at_owner, name) == (2, 1)
        subscribe(at_owner, name, "taker", 1)  # (on the owner: it takes "second")
        (taken,) = at_owner.wait("message.transfer")
        assert taken.body == b"second"
        again = p.call("message.acquire", transfers=((first.id, third.id),))
        assert again is not None and again["transfers"] == ((third.id, third.id),)  # not twice, not taken
        p.call("message.accept", transfers=((first.id, third.id),))
        at_owner.call("message.accept", transfers=((taken.id, taken.id),))
        assert counts(at_owner, name) == (0, 2)
