"""The 0-10 front end's exchange and routing rules, as Qpid's broker has them (each read
from qpid-python 1.36's ``qpid_tests.broker_0_10``): a binding named by exchange, queue
and key; headers bindings with ``x-match``; auto-delete exchanges; ``no-local`` queues;
and a deleted queue's messages, acquired ones too, to its alternate exchange."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.amqp010.peer import SocketPeer, struct
from tests.broker.conftest import RunningBroker, broker_with


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_with(tmp_path) as b:
        yield b


def publish(
    p: SocketPeer, key: str, body: bytes, exchange: str = "", channel: int = 1, **headers: object
) -> None:
    p.call(
        "message.transfer",
        channel,
        destination=exchange,
        accept_mode=1,
        acquire_mode=0,
        headers=[
            struct("delivery-properties", routing_key=key),
            struct("message-properties", application_headers=headers or None),
        ],
        body=body,
    )


def subscribe(
    p: SocketPeer, queue: str, destination: str, channel: int = 1, *, exclusive: bool = False
) -> None:
    p.call(
        "message.subscribe",
        channel,
        queue=queue,
        destination=destination,
        accept_mode=0,
        acquire_mode=0,
        exclusive=exclusive,
    )
    p.call("message.flow", channel, destination=destination, unit=0, value=0xFFFFFFFF)
    p.call("message.flow", channel, destination=destination, unit=1, value=0xFFFFFFFF)


def count(p: SocketPeer, queue: str) -> int:
    result = p.call("queue.query", queue=queue)
    assert result is not None
    return int(result["message_count"])


def failure(p: SocketPeer, name: str, **values: object) -> tuple[int, str]:
    p.command(name, **values)
    p.flush()
    (exc,) = p.wait("execution.exception")
    return exc["error_code"], exc["description"]


def test_unbind_names_exchange_queue_and_key_not_the_arguments(peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="q")
    peer.call(
        "exchange.bind",
        exchange="amq.match",
        queue="q",
        binding_key="k",
        arguments={"x-match": "all", "a": "b"},
    )
    publish(peer, "", b"one", "amq.match", a="b")
    peer.call("exchange.unbind", exchange="amq.match", queue="q", binding_key="k")
    publish(peer, "", b"two", "amq.match", a="b")
    assert count(peer, "q") == 1
    bound = peer.call("exchange.bound", exchange="amq.match", queue="q")
    assert bound is not None and bound["queue_not_matched"]


def test_unbinding_what_is_not_bound_is_not_found(peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="q")
    code, text = failure(peer, "exchange.unbind", exchange="amq.direct", queue="q", binding_key="k")
    assert code == 404 and "'amq.direct' to 'q' with key 'k'" in text


def test_a_headers_binding_needs_x_match(peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="q")
    code, text = failure(
        peer, "exchange.bind", exchange="amq.match", queue="q", arguments={"name": "fred", "age": 3}
    )
    assert code == 541 and "x-match" in text


def test_headers_match_all_and_any(peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="all")
    peer.call("queue.declare", queue="any")
    peer.call(
        "exchange.bind",
        exchange="amq.match",
        queue="all",
        binding_key="1",
        arguments={"x-match": "all", "name": "fred", "age": 3},
    )
    peer.call(
        "exchange.bind",
        exchange="amq.match",
        queue="any",
        binding_key="2",
        arguments={"x-match": "any", "name": "fred", "age": 3},
    )
    for headers in (
        {"name": "fred", "age": 3},
        {"name": "fred", "age": 3, "extra": 1},
        {"name": "fred"},
        {"name": 10},
        {},
    ):
        publish(peer, "", b"m", "amq.match", **headers)
    assert (count(peer, "all"), count(peer, "any")) == (2, 3)


def test_an_auto_delete_exchange_goes_when_its_last_binding_is_unbound(peer: SocketPeer) -> None:
    peer.call("exchange.declare", exchange="e", type="headers", auto_delete=True)
    peer.call("queue.declare", queue="q")
    peer.call(
        "exchange.bind", exchange="e", queue="q", arguments={"x-match": "all", "name": "fred"}
    )
    peer.call("exchange.unbind", exchange="e", queue="q", binding_key="")
    assert peer.call("exchange.query", name="e")["not_found"]  # type: ignore[index]
    peer.call(
        "exchange.declare", exchange="e", type="topic", auto_delete=True
    )  # a new one, of another type


def test_a_no_local_queue_takes_only_other_connections_messages(broker: RunningBroker) -> None:
    """Qpid's ``no-local``: not what its owner's connection publishes (on any session), nor
    what an exclusive subscriber's connection publishes."""
    me, other = SocketPeer(broker.port), SocketPeer(broker.port)
    try:
        me.attach()
        me.attach(2, b"s2")
        other.attach()
        me.call("queue.declare", queue="owned", exclusive=True, arguments={"no-local": "true"})
        me.call("queue.declare", queue="shared", arguments={"no-local": True})
        subscribe(me, "shared", "d", exclusive=True)
        for q in ("owned", "shared"):
            me.call("exchange.bind", exchange="amq.fanout", queue=q)
        publish(me, "", b"local", "amq.fanout")
        publish(me, "", b"local too", "amq.fanout", channel=2)
        publish(other, "", b"foreign", "amq.fanout")
        (t,) = me.wait("message.transfer")
        assert t.body == b"foreign"
        assert count(me, "owned") == 1
    finally:
        me.close()
        other.close()


def test_a_deleted_queues_messages_acquired_ones_too_go_to_its_alternate_exchange(
    broker: RunningBroker,
) -> None:
    """QPID-3481: deleting a queue sends what waits on it and what another session has
    acquired to its alternate exchange at once; that session's accept of them later does
    nothing, and its subscription stays until it cancels it."""
    owner, holder = SocketPeer(broker.port), SocketPeer(broker.port)
    try:
        owner.attach()
        holder.attach()
        owner.call("queue.declare", queue="dead")
        owner.call("exchange.bind", exchange="amq.fanout", queue="dead")
        owner.call("queue.declare", queue="q", alternate_exchange="amq.fanout")
        for body in (b"1", b"2", b"3"):
            publish(owner, "q", body)
        holder.call("message.subscribe", queue="q", destination="h", accept_mode=0, acquire_mode=0)
        holder.call("message.flow", destination="h", unit=0, value=2)
        holder.call("message.flow", destination="h", unit=1, value=0xFFFFFFFF)
        held = holder.wait("message.transfer", 2)
        owner.call("queue.delete", queue="q")
        assert count(owner, "dead") == 3
        holder.call("message.accept", transfers=tuple((t.id, t.id) for t in held))
        holder.call("message.cancel", destination="h")
        assert count(owner, "dead") == 3
    finally:
        owner.close()
        holder.close()


def test_an_auto_delete_queue_leaves_its_messages_to_its_alternate_exchange_in_order(
    broker: RunningBroker,
) -> None:
    """The session's own unaccepted message first, as it was first on the queue."""
    watcher, p = SocketPeer(broker.port), SocketPeer(broker.port)
    try:
        watcher.attach()
        watcher.call("queue.declare", queue="dead")
        watcher.call("exchange.bind", exchange="amq.fanout", queue="dead")
        p.attach()
        p.call("queue.declare", queue="q", auto_delete=True, alternate_exchange="amq.fanout")
        for body in (b"one", b"two", b"three"):
            publish(p, "q", body)
        p.call("message.subscribe", queue="q", destination="d", accept_mode=0, acquire_mode=0)
        p.call("message.flow", destination="d", unit=0, value=1)
        p.call("message.flow", destination="d", unit=1, value=0xFFFFFFFF)
        p.wait("message.transfer")
        p.close()
        subscribe(watcher, "dead", "w")
        got = watcher.wait("message.transfer", 3)
        assert [t.body for t in got] == [b"one", b"two", b"three"]
    finally:
        watcher.close()


def test_an_exclusive_queue_with_an_auto_delete_timeout_outlives_its_session(
    peer: SocketPeer,
) -> None:
    """``qpid.auto_delete_timeout``: kept (no longer exclusive) that long after its session
    ends (when it goes is the core's test: tests/broker/core/test_bindings_and_deletion.py)."""
    peer.attach(2, b"s2")
    peer.call(
        "queue.declare",
        2,
        queue="kept",
        exclusive=True,
        auto_delete=True,
        arguments={"qpid.auto_delete_timeout": 3600},
    )
    peer.send("session.detach", 2, name=b"s2")
    peer.flush()
    peer.wait("session.detached")
    result = peer.call("queue.query", queue="kept")
    assert result is not None and result["queue"] == "kept" and not result["exclusive"]
    assert result["arguments"]["qpid.auto_delete_timeout"] == 3600
