"""Qpid's queue features through the 0-10 front end with a bare 0-10 peer (the core's are in
tests/broker/core/test_queue_features.py): groups keyed by a header, last-value queues,
sequence numbers, priority levels, and consumer timeouts; and the same arguments on a
queue declared with 0-9-1 (pika)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

import amqp10.sync
from amqp10.message import Message
from tests.amqp010.peer import SocketPeer
from tests.broker.amqp010.test_amqp010_features import publish, subscribe
from tests.broker.conftest import RunningBroker, broker_with

T = 10


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_with(tmp_path) as b:
        yield b


def bodies(p: SocketPeer, n: int) -> list[bytes]:
    return [t.body for t in p.wait("message.transfer", n)]


def test_shared_groups_keyed_by_a_queue_header(broker: RunningBroker, peer: SocketPeer) -> None:
    peer.call(
        "queue.declare",
        queue="mg",
        arguments={"qpid.group_header_key": "THE-GROUP", "qpid.shared_msg_group": 1},
    )
    for i, g in enumerate("AABB"):
        publish(peer, "mg", str(i).encode(), application_headers={"THE-GROUP": g})
    subscribe(peer, "mg", "one", credit=1)
    (a0,) = peer.wait("message.transfer")
    other = SocketPeer(broker.port)
    try:
        other.attach(name=b"s2")
        subscribe(other, "mg", "two", credit=1)
        assert bodies(other, 1) == [b"2"]  # A is the first subscriber's while it holds A-0
        peer.call("message.accept", transfers=((a0.id, a0.id),))  # A is free again
        other.call("message.flow", destination="two", unit=0, value=1)
        assert bodies(other, 1) == [b"1"]
    finally:
        other.close()


def test_a_last_value_queue_browsed(peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="lvq", arguments={"qpid.last_value_queue_key": "k"})
    for body, k in ((b"a-1", "a"), (b"b-1", "b"), (b"a-2", "a"), (b"c-1", "c"), (b"a-3", "a")):
        publish(peer, "lvq", body, application_headers={"k": k})
    peer.call("message.subscribe", queue="lvq", destination="b", accept_mode=1, acquire_mode=1)
    peer.call("message.flow", destination="b", unit=0, value=100)
    peer.call("message.flow", destination="b", unit=1, value=0xFFFFFFFF)
    assert bodies(peer, 3) == [b"b-1", b"c-1", b"a-3"]
    result = peer.call("queue.query", queue="lvq")
    assert result is not None and result["message_count"] == 3


def test_sequence_numbers_in_a_header_with_a_gap_where_the_ring_dropped(peer: SocketPeer) -> None:
    peer.call(
        "queue.declare",
        queue="seq",
        arguments={"qpid.queue_msg_sequence": "qpid.seq", "qpid.policy_type": "ring", "qpid.max_count": 2},
    )
    for body in (b"1", b"2", b"3"):
        publish(peer, "seq", body, application_headers={"n": 1})
    subscribe(peer, "seq", "d")
    got = peer.wait("message.transfer", 2)
    headers = [t.header("message-properties")["application_headers"] for t in got]  # type: ignore[index]
    assert [(t.body, h["qpid.seq"], h["n"]) for t, h in zip(got, headers, strict=True)] == [(b"2", 2, 1), (b"3", 3, 1)]


def test_five_priority_levels_as_qpid_spreads_them(peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="p5", arguments={"qpid.priorities": 5})
    for body, priority in ((b"p1", 1), (b"p7", 7), (b"p2", 2), (b"p9", 9), (b"p4", 4)):
        publish(peer, "p5", body, priority=priority)
    subscribe(peer, "p5", "d")
    assert bodies(peer, 5) == [b"p7", b"p9", b"p4", b"p1", b"p2"]  # 6-9 one level, 0-2 one level


def test_a_transfer_held_past_the_consumer_timeout_ends_the_session(broker: RunningBroker, peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="slow", arguments={"x-consumer-timeout": 200})
    publish(peer, "slow", b"job")
    subscribe(peer, "slow", "d")
    assert bodies(peer, 1) == [b"job"]  # never accepted: the session ends at the next check
    (exc,) = peer.wait("execution.exception")
    assert exc["error_code"] == 406 and "consumer timeout of 200 ms" in exc["description"]
    peer.wait("session.detach")
    other = SocketPeer(broker.port)
    try:
        other.attach(name=b"s2")
        subscribe(other, "slow", "d")
        (t,) = other.wait("message.transfer")
        dp = t.header("delivery-properties")
        assert t.body == b"job" and dp is not None and dp["redelivered"]
    finally:
        other.close()


def test_a_subscription_timeout_argument_is_checked(peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="q")
    cid = peer.command(
        "message.subscribe", queue="q", destination="d", accept_mode=0, acquire_mode=0, arguments={"x-consumer-timeout": -1}
    )
    peer.flush()
    (exc,) = peer.wait("execution.exception")
    assert exc["error_code"] == 542 and exc["command_id"] == cid


def test_qpid_arguments_on_a_queue_declared_with_0_9_1(broker: RunningBroker) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port, blocked_connection_timeout=T))
    try:
        ch = conn.channel()
        ch.queue_declare("lv091", arguments={"qpid.last_value_queue_key": "k", "qpid.queue_msg_sequence": "seq"})
        for body, k in ((b"a-1", "a"), (b"b-1", "b"), (b"a-2", "a")):
            ch.basic_publish("", "lv091", body, pika.BasicProperties(headers={"k": k}))
        got = []
        for _ in range(3):
            method, props, body = ch.basic_get("lv091", auto_ack=True)
            if method is None:
                break
            got.append((body, props.headers["seq"]))
        assert got == [(b"b-1", 2), (b"a-2", 3)]
    finally:
        conn.close()


def test_the_group_reaches_0_9_1_as_the_jmsxgroupid_header_and_comes_back(broker: RunningBroker, peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="g091")
    publish(peer, "g091", b"from-0-10", application_headers={"JMSXGroupID": "G"})
    with amqp10.sync.connect(f"amqp://{broker.url}", timeout=T) as c1:
        c1.open_sender("g091").send(Message(body=b"from-1.0", group_id="H"))
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port, blocked_connection_timeout=T))
        try:
            ch = conn.channel()
            got = []
            for _ in range(2):
                method, props, body = ch.basic_get("g091", auto_ack=True)
                assert method is not None
                got.append((body, props.headers["JMSXGroupID"]))
            assert got == [(b"from-0-10", "G"), (b"from-1.0", "H")]
            ch.basic_publish("", "g091", b"from-0-9-1", pika.BasicProperties(headers={"JMSXGroupID": "K", "n": 1}))
        finally:
            conn.close()
        d = c1.open_receiver("g091", credit=1).receive(timeout=T)
        d.accept()
        assert d.message.group_id == "K" and d.message.application_properties == {"n": 1}
    q = broker.broker.default.queue("g091")
    assert q is not None and q.count == 0


def test_an_auto_deleted_queue_hands_what_is_left_and_held_to_its_alternate_exchange(
    broker: RunningBroker, peer: SocketPeer
) -> None:
    peer.call("exchange.declare", exchange="dlq", type="fanout")
    peer.call("queue.declare", queue="dead", exclusive=True, auto_delete=True)
    peer.call("exchange.bind", exchange="dlq", queue="dead", binding_key="")
    other = SocketPeer(broker.port)
    try:
        other.attach(name=b"s2")
        other.call("queue.declare", queue="mine", alternate_exchange="dlq", auto_delete=True)
        for body in (b"one", b"two", b"three"):
            publish(other, "mine", body)
        subscribe(other, "mine", "in", credit=1)
        assert bodies(other, 1) == [b"one"]  # acquired, never accepted
    finally:
        other.close()  # its session ends, the subscription goes: so does the queue
    subscribe(peer, "dead", "d")
    assert bodies(peer, 3) == [b"one", b"two", b"three"]


def test_a_subscription_outlives_its_deleted_queue_until_cancelled(peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="gone")
    subscribe(peer, "gone", "d")
    peer.call("queue.delete", queue="gone")
    peer.call("message.cancel", destination="d")  # as qpid.messaging closes a receiver: no 404


def test_a_deleted_queue_hands_what_its_subscribers_hold_to_its_alternate_at_once(
    broker: RunningBroker, peer: SocketPeer
) -> None:
    peer.call("exchange.declare", exchange="alt", type="fanout")
    peer.call("queue.declare", queue="kept")
    peer.call("exchange.bind", exchange="alt", queue="kept", binding_key="")
    peer.call("queue.declare", queue="doomed", alternate_exchange="alt")
    for body in (b"held", b"left"):
        publish(peer, "doomed", body)
    other = SocketPeer(broker.port)
    try:
        other.attach(name=b"s2")
        subscribe(other, "doomed", "in", credit=1)
        (t,) = other.wait("message.transfer")  # acquired, not accepted
        peer.call("queue.delete", queue="doomed")
        result = peer.call("queue.query", queue="kept")
        assert result is not None and result["message_count"] == 2  # (QPID-3481)
        other.call("message.release", transfers=((t.id, t.id),))  # no longer its: nothing more
        other.call("message.cancel", destination="in")
    finally:
        other.close()
    result = peer.call("queue.query", queue="kept")
    assert result is not None and result["message_count"] == 2


def test_x_message_ttl_in_a_0_10_declare_expires_messages(peer: SocketPeer) -> None:
    """RabbitMQ's arguments pass through a 0-10 ``queue.declare`` to the core: a queue
    TTL of 50 ms empties the queue; a queue without it keeps its message."""
    from tests.broker.amqp010.test_amqp010_dtx import count

    peer.call("queue.declare", queue="ttl-q", arguments={"x-message-ttl": 50})
    peer.call("queue.declare", queue="kept-q")
    publish(peer, "ttl-q", b"gone")
    publish(peer, "kept-q", b"kept")
    for _ in range(int(T / 0.02)):  # bounded poll: no timing asserted
        if count(peer, "ttl-q") == 0:
            break
        time.sleep(0.02)
    assert count(peer, "ttl-q") == 0
    assert count(peer, "kept-q") == 1
