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
