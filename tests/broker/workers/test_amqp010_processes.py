"""N worker processes are one broker for AMQP 0-10 clients on queues of either worker.

``amqp10 broker --workers 2`` on 127.0.0.1, a bare 0-10 peer (tests/amqp010/peer.py):
connections are opened until one is served by each worker (``connection.start``'s server
properties name it), and each test uses queues one worker owns from a session on the
other (and on its own). Every wait is bounded; none is a timed assertion.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from amqp10.amqp010 import Compound
from amqp10.broker.amqp010.frontend import WORKER_PROPERTY
from tests.amqp010.peer import SocketPeer, struct
from tests.broker.test_workers import WAIT, Parent

from .test_processes import owned_by

pytestmark = pytest.mark.slow

CREDIT, WINDOW = 0, 1
MESSAGES, BYTES = 0, 1
UNLIMITED = 0xFFFFFFFF


@contextmanager
def pinned(p: Parent, wanted: dict[int, int]) -> Iterator[dict[int, list[SocketPeer]]]:
    """``wanted[K]`` 0-10 peers (a session attached each) served by worker ``K``, by worker;
    the connections the kernel put elsewhere are closed."""
    by_worker: dict[int, list[SocketPeer]] = {k: [] for k in wanted}
    opened: list[SocketPeer] = []
    try:
        for _ in range(64 * sum(wanted.values())):
            peer = SocketPeer(p.port, timeout=WAIT)
            opened.append(peer)
            worker = int(peer.server_properties[WORKER_PROPERTY])
            if len(by_worker.get(worker, ())) < wanted.get(worker, 0):
                by_worker[worker].append(peer)
                if all(len(by_worker[k]) == n for k, n in wanted.items()):
                    break
        assert {k: len(v) for k, v in by_worker.items()} == wanted
        chosen = [peer for peers in by_worker.values() for peer in peers]
        for peer in opened:
            if peer in chosen:
                peer.attach()
            else:
                peer.close()
        yield by_worker
    finally:
        for peer in opened:
            try:
                peer.close()
            except OSError:
                pass


@contextmanager
def one_on_each(p: Parent) -> Iterator[dict[int, SocketPeer]]:
    """A 0-10 peer (a session attached) served by worker 0 and one by worker 1."""
    with pinned(p, {0: 1, 1: 1}) as by_worker:
        yield {k: peers[0] for k, peers in by_worker.items()}


def another_session(peer: SocketPeer, channel: int, name: bytes) -> int:
    peer.attach(channel, name)
    return channel


def publish(p: SocketPeer, key: str, body: bytes, exchange: str = "", *, durable: bool = False) -> None:
    """``message.transfer``, waited for until completed (the owner took it, and stored it if durable)."""
    headers = [
        struct("delivery-properties", routing_key=key, delivery_mode=2 if durable else 1),
        struct("message-properties"),
    ]
    p.call("message.transfer", destination=exchange, accept_mode=1, acquire_mode=0, headers=headers, body=body)


def subscribe(
    p: SocketPeer, queue: str, destination: str, credit: int, *, mode: int = CREDIT, accept_mode: int = 0, channel: int = 1
) -> None:
    p.call("message.subscribe", channel, queue=queue, destination=destination, accept_mode=accept_mode)
    p.call("message.set-flow-mode", channel, destination=destination, flow_mode=mode)
    p.call("message.flow", channel, destination=destination, unit=BYTES, value=UNLIMITED)
    p.call("message.flow", channel, destination=destination, unit=MESSAGES, value=credit)


def counts(p: SocketPeer, queue: str) -> tuple[int, int]:
    r = p.call("queue.query", queue=queue)
    assert r is not None
    return r["message_count"], r["subscriber_count"]


def counts_become(p: SocketPeer, queue: str, want: tuple[int, int]) -> None:
    """The owner's counts reach ``want``: a cancel completes at the client's worker, and
    the owner drops the consumer when its link's detach arrives, a moment later."""
    deadline = time.monotonic() + WAIT
    while (got := counts(p, queue)) != want:
        assert time.monotonic() < deadline, f"counts of {queue} stayed {got}, not {want}"
        time.sleep(0.02)


def redelivered(t: Compound) -> bool:
    dp = t.header("delivery-properties")
    return bool(dp is not None and dp.get("redelivered"))


def refused(p: SocketPeer, name: str, channel: int, **values: object) -> tuple[int, str]:
    """Command ``name`` on session ``channel`` fails: its error code and text."""
    cid = p.command(name, channel, **values)
    p.flush()
    (exc,) = p.wait("execution.exception")
    assert exc["command_id"] == cid
    return exc["error_code"], exc["description"]


def test_declare_transfer_subscribe_accept_release_reject_purge_delete_across_workers(broker: Parent) -> None:
    with one_on_each(broker) as peers:
        for owner in (0, 1):
            name = owned_by(owner, "q010")
            p, at_owner = peers[1 - owner], peers[owner]
            p.call("queue.declare", queue=name, durable=True)  # made on the owner
            for i in range(20):  # each completed once the owner stored it
                publish(p, name, str(i).encode(), durable=True)
            for peer in (p, at_owner):  # both workers answer with the owner's counts
                r = peer.call("queue.query", queue=name)
                assert r is not None and r["queue"] == name and r["message_count"] == 20
            subscribe(p, name, "d", 5)
            first = p.wait("message.transfer", 5)
            assert [t.body for t in first] == [str(i).encode() for i in range(5)]
            assert counts(at_owner, name) == (15, 1)  # the credit was respected: 5 left it
            ids = [t.id for t in first]
            p.call("message.accept", transfers=((ids[0], ids[3]),))
            p.call("message.release", transfers=((ids[4], ids[4]),), set_redelivered=True)
            p.call("message.flow", destination="d", unit=MESSAGES, value=16)
            rest = p.wait("message.transfer", 16)
            assert [t.body for t in rest] == [str(i).encode() for i in range(4, 20)]
            assert [redelivered(t) for t in rest] == [True] + [False] * 15
            p.call("message.accept", transfers=((rest[0].id, rest[-2].id),))
            p.call("message.reject", transfers=((rest[-1].id, rest[-1].id),), code=0, text="no")
            p.call("message.cancel", destination="d")
            counts_become(at_owner, name, (0, 0))
            for _ in range(3):
                publish(p, name, b"x")
            p.call("queue.purge", queue=name)
            assert counts(at_owner, name) == (0, 0)
            p.call("queue.delete", queue=name)
            gone = at_owner.call("queue.query", queue=name)
            assert gone is not None and "queue" not in gone.values
            # not there: not-found, from the owner (the session ends)
            ch = another_session(p, 2, b"doomed")
            assert refused(p, "queue.delete", ch, queue=name)[0] == 404
            p.wait("session.detach")
            assert refused(p, "queue.declare", another_session(p, 3, b"doomed2"), queue=name, passive=True)[0] == 404
            p.wait("session.detach")


def test_window_mode_and_accept_mode_none_across_workers(broker: Parent) -> None:
    with one_on_each(broker) as peers:
        name = owned_by(1, "q010window")
        p, at_owner = peers[0], peers[1]
        p.call("queue.declare", queue=name)
        for i in range(6):
            publish(p, name, str(i).encode())
        subscribe(p, name, "w", 3, mode=WINDOW)
        got = p.wait("message.transfer", 3)
        assert counts(at_owner, name) == (3, 1)  # the window is full
        p.send("session.completed", 1, commands=((got[0].id, got[-1].id),))  # gives it back
        p.flush()
        more = p.wait("message.transfer", 3)
        assert [t.body for t in got + more] == [str(i).encode() for i in range(6)]
        p.call("message.accept", transfers=((got[0].id, more[-1].id),))
        assert counts(at_owner, name) == (0, 1)
        p.call("message.cancel", destination="w")
        for i in range(4):
            publish(p, name, str(i).encode())
        subscribe(p, name, "none", UNLIMITED, accept_mode=1)  # nothing to accept: done as sent
        assert [t.body for t in p.wait("message.transfer", 4)] == [str(i).encode() for i in range(4)]
        p.call("message.cancel", destination="none")
        counts_become(at_owner, name, (0, 0))


def test_exclusive_subscriptions_hold_the_queue_across_workers(broker: Parent) -> None:
    text = "queue '{}' in vhost '/' has an exclusive subscriber"
    with one_on_each(broker) as peers:
        name = owned_by(1, "q010excl")
        peers[0].call("queue.declare", queue=name)
        peers[0].call("message.subscribe", queue=name, destination="mine", exclusive=True)
        for w, ch in ((1, 2), (0, 3)):  # on the owner, and on the subscriber's own worker
            assert refused(peers[w], "message.subscribe", another_session(peers[w], ch, b"late"), queue=name, destination="d") == (
                405,
                text.format(name),
            )
            peers[w].wait("session.detach")
        peers[0].call("message.cancel", destination="mine")
        counts_become(peers[1], name, (0, 0))  # (the owner drops it when the detach arrives)
        peers[1].call("message.subscribe", queue=name, destination="owner")  # free again
        # and the other way: a subscriber on the owner keeps an exclusive one out elsewhere
        assert refused(
            peers[0], "message.subscribe", another_session(peers[0], 4, b"late2"), queue=name, destination="x", exclusive=True
        ) == (405, text.format(name))


def test_exchange_routes_and_bound_answers_for_a_queue_another_worker_owns(broker: Parent) -> None:
    with one_on_each(broker) as peers:
        name = owned_by(1, "q010bound")
        p = peers[0]
        p.call("exchange.declare", exchange="x010", type="topic")
        p.call("queue.declare", queue=name)
        p.call("exchange.bind", exchange="x010", queue=name, binding_key="a.*")
        bound = p.call("exchange.bound", exchange="x010", queue=name, binding_key="a.*")
        assert bound is not None and bound.values == {}
        other = p.call("exchange.bound", exchange="x010", queue=name, binding_key="b.*")
        assert other is not None and other["key_not_matched"]
        missing = p.call("exchange.bound", exchange="x010", queue=owned_by(1, "q010nobody"))
        assert missing is not None and missing["queue_not_found"]
        publish(p, "a.one", b"routed", exchange="x010")
        publish(p, "b.one", b"not routed", exchange="x010")
        subscribe(peers[1], name, "d", 10)  # on the owner
        (t,) = peers[1].wait("message.transfer")
        assert t.body == b"routed"
        assert counts(p, name) == (0, 1)


def test_exchange_unbind_of_a_queue_another_worker_owns_is_every_workers(broker: Parent) -> None:
    """0-10 names a binding by its key alone (``VirtualHost.unbind_key``): it finds the
    binding to the owner's stand-in, and every worker unbinds it."""
    with one_on_each(broker) as peers:
        name = owned_by(1, "q010unbind")
        p, other = peers[0], peers[1]
        p.call("exchange.declare", exchange="x010u", type="direct")
        p.call("queue.declare", queue=name)
        p.call("exchange.bind", exchange="x010u", queue=name, binding_key="k")
        p.call("exchange.unbind", exchange="x010u", queue=name, binding_key="k")
        p.call("exchange.bind", exchange="x010u", queue=name, binding_key="later")  # after it, in the one order
        publish(other, "k", b"unbound", exchange="x010u")  # (completed once worker 1 has both)
        publish(other, "later", b"later", exchange="x010u")
        assert counts(other, name)[0] == 1


def test_a_transfer_the_owners_full_queue_refuses_fails_as_on_one_broker(broker: Parent) -> None:
    with one_on_each(broker) as peers:
        name = owned_by(1, "q010full")
        p = peers[0]
        p.call("queue.declare", queue=name, arguments={"qpid.max_count": 2, "qpid.policy_type": "reject"})
        publish(p, name, b"1")
        publish(p, name, b"2")
        ch = another_session(p, 2, b"full")
        headers = [struct("delivery-properties", routing_key=name), struct("message-properties")]
        code, text = refused(p, "message.transfer", ch, destination="", accept_mode=1, acquire_mode=0, headers=headers, body=b"3")
        assert (code, text) == (506, f"the queues exchange '' routed '{name}' to are full")
        assert counts(peers[1], name) == (2, 0)


def test_an_exclusive_queue_is_bound_on_its_sessions_worker_whoever_owns_the_name(broker: Parent) -> None:
    """(qpid.messaging's receiver on ``amq.topic``: an exclusive queue and a binding.)"""
    with one_on_each(broker) as peers:
        for owner in (0, 1):
            p = peers[1 - owner]
            name = owned_by(owner, "q010mine")  # the name hashes to the other worker
            p.call("queue.declare", queue=name, exclusive=True, auto_delete=True)
            p.call("exchange.bind", exchange="amq.topic", queue=name, binding_key="news.#")
            bound = p.call("exchange.bound", exchange="amq.topic", queue=name, binding_key="news.#")
            assert bound is not None and bound.values == {}
            publish(p, "news.sport", b"goal", exchange="amq.topic")
            subscribe(p, name, "d", 10)
            (t,) = p.wait("message.transfer")
            assert t.body == b"goal"


def test_what_a_subscriber_on_another_worker_holds_goes_to_the_deleted_queues_alternate_at_once(
    broker: Parent,
) -> None:
    """QPID-3481 across workers: deleting a queue sends what a subscriber on another worker
    holds (acquired, not accepted) to its alternate exchange with what waits on it, before
    delete-ok; that subscriber's accept of it later does nothing."""
    with one_on_each(broker) as peers:
        doomed, kept = owned_by(1, "q010doomed"), owned_by(1, "q010kept")
        at_owner, holder = peers[1], peers[0]
        at_owner.call("exchange.declare", exchange="alt010", type="fanout")
        at_owner.call("queue.declare", queue=kept)
        at_owner.call("exchange.bind", exchange="alt010", queue=kept, binding_key="")
        at_owner.call("queue.declare", queue=doomed, alternate_exchange="alt010")
        for body in (b"held", b"left"):
            publish(at_owner, doomed, body)
        subscribe(holder, doomed, "d", 1, accept_mode=0)
        (t,) = holder.wait("message.transfer")
        assert t.body == b"held"
        at_owner.call("queue.delete", queue=doomed)
        assert counts(at_owner, kept) == (2, 0)
        holder.call("message.accept", transfers=((t.id, t.id),))
        assert counts(holder, kept) == (2, 0)  # (asked after the accept went to the owner)


def test_unbind_by_key_of_a_queue_another_worker_owns_unbinds_it_on_every_worker(broker: Parent) -> None:
    """0-10's ``exchange.unbind`` names exchange, queue and key: the binding to the owner's
    stand-in goes, on the other worker too before it completes (a publish on either no
    longer reaches the queue)."""
    with one_on_each(broker) as peers:
        name = owned_by(1, "q010unbound")
        p = peers[0]
        p.call("queue.declare", queue=name)
        p.call("exchange.bind", exchange="amq.match", queue=name, binding_key="k", arguments={"x-match": "all", "a": "b"})
        headers = [struct("delivery-properties", routing_key=""), struct("message-properties", application_headers={"a": "b"})]
        p.call("message.transfer", destination="amq.match", accept_mode=1, acquire_mode=0, headers=headers, body=b"one")
        p.call("exchange.unbind", exchange="amq.match", queue=name, binding_key="k")
        for peer in (p, peers[1]):
            r = peer.call("exchange.bound", exchange="amq.match", queue=name)
            assert r is not None and r["queue_not_matched"], "the binding stayed on the other worker"
            peer.call("message.transfer", destination="amq.match", accept_mode=1, acquire_mode=0, headers=headers, body=b"two")
        assert counts(peers[1], name) == (1, 0)
