"""The broker's 0-10 front end over TCP with a bare 0-10 peer (tests/amqp010/peer.py): the
login, the AMQ model, messages both ways, and 0-10 <-> 1.0 <-> 0-9-1 on the same queue."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

import amqp10.sync
from amqp10.broker.amqp010.messages import CONSUME_REFUSALS
from amqp10.broker.core import ConsumeResult
from amqp10.message import Message
from tests.amqp010.peer import SocketPeer, struct
from tests.broker.conftest import RunningBroker, broker_with

T = 10


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_with(tmp_path) as b:
        yield b


def subscribe(
    p: SocketPeer,
    queue: str,
    destination: str = "d",
    *,
    accept_mode: int = 0,
    acquire_mode: int = 0,
) -> None:
    p.call(
        "message.subscribe",
        queue=queue,
        destination=destination,
        accept_mode=accept_mode,
        acquire_mode=acquire_mode,
    )
    p.call("message.set-flow-mode", destination=destination, flow_mode=0)
    p.call("message.flow", destination=destination, unit=0, value=100)
    p.call("message.flow", destination=destination, unit=1, value=0xFFFFFFFF)


def publish(p: SocketPeer, key: str, body: bytes, exchange: str = "", **props: object) -> None:
    headers = [
        struct("delivery-properties", routing_key=key),
        struct("message-properties", **props),
    ]
    p.call(
        "message.transfer",
        destination=exchange,
        accept_mode=1,
        acquire_mode=0,
        headers=headers,
        body=body,
    )


def test_the_0_10_header_is_served_and_anonymous_login_works(broker: RunningBroker) -> None:
    p = SocketPeer(broker.port)
    assert p.header == b"AMQP\x01\x01\x00\x0a"
    p.close()


def test_a_login_refused_closes_with_connection_forced(broker: RunningBroker) -> None:
    with pytest.raises(AssertionError, match="authentication failed"):
        SocketPeer(broker.port, mechanism="PLAIN", response=b"\x00nobody\x00wrong")


def test_declare_query_publish_subscribe_accept(peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="q1")
    publish(peer, "q1", b"hello", content_type="text/plain", application_headers={"n": 1})
    result = peer.call("queue.query", queue="q1")
    assert result is not None and result["queue"] == "q1" and result["message_count"] == 1
    subscribe(peer, "q1")
    (t,) = peer.wait("message.transfer")
    assert t.body == b"hello" and t["destination"] == "d"
    mp = t.header("message-properties")
    assert (
        mp is not None
        and mp["content_type"] == "text/plain"
        and mp["application_headers"] == {"n": 1}
    )
    dp = t.header("delivery-properties")
    assert dp is not None and dp["routing_key"] == "q1" and not dp["redelivered"]
    peer.call("message.accept", transfers=((t.id, t.id),))
    assert peer.call("queue.query", queue="q1")["message_count"] == 0  # type: ignore[index]


def test_release_redelivers_and_browsing_does_not_take(peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="q2")
    publish(peer, "q2", b"m")
    subscribe(peer, "q2", "browser", acquire_mode=1)
    (b,) = peer.wait("message.transfer")
    assert b.body == b"m" and b["acquire_mode"] == 1
    subscribe(peer, "q2", "taker")
    (t,) = peer.wait("message.transfer")
    peer.call("message.release", transfers=((t.id, t.id),), set_redelivered=True)
    (again,) = peer.wait("message.transfer")
    dp = again.header("delivery-properties")
    assert again.body == b"m" and dp is not None and dp["redelivered"]


def test_exchanges_bindings_and_bound(peer: SocketPeer) -> None:
    peer.call("exchange.declare", exchange="news", type="topic")
    peer.call("queue.declare", queue="sport", exclusive=True, auto_delete=True)
    peer.call("exchange.bind", exchange="news", queue="sport", binding_key="*.sport")
    bound = peer.call("exchange.bound", exchange="news", queue="sport", binding_key="*.sport")
    assert bound is not None and bound.values == {}
    missing = peer.call("exchange.bound", exchange="news", queue="sport", binding_key="other")
    assert missing is not None and missing["key_not_matched"]
    publish(peer, "uk.sport", b"goal", exchange="news")
    subscribe(peer, "sport")
    (t,) = peer.wait("message.transfer")
    assert t.body == b"goal"
    q = peer.call("exchange.query", name="news")
    assert q is not None and q["type"] == "topic" and not q["not_found"]


def test_a_failed_command_raises_execution_exception_and_detaches(peer: SocketPeer) -> None:
    cid = peer.command("queue.delete", queue="no-such-queue")
    peer.flush()
    (exc,) = peer.wait("execution.exception")
    assert (
        exc["error_code"] == 404
        and exc["command_id"] == cid
        and "no-such-queue" in exc["description"]
    )
    (detach,) = peer.wait("session.detach")
    assert detach["name"] == b"s1"


def test_every_reason_a_queue_refuses_a_subscriber_has_an_error_code() -> None:
    assert set(CONSUME_REFUSALS) == {r for r in ConsumeResult if r is not ConsumeResult.ADMITTED}


def _refused_subscribe(broker: RunningBroker, queue: str, *, exclusive: bool) -> tuple[object, ...]:
    """A subscribe from a session of its own that the queue refuses: (code, text)."""
    other = SocketPeer(broker.port)
    try:
        other.attach()
        cid = other.command("message.subscribe", queue=queue, destination="late", exclusive=exclusive)
        other.flush()
        (exc,) = other.wait("execution.exception")
        assert exc["command_id"] == cid
        return exc["error_code"], exc["description"]
    finally:
        other.close()


def test_a_subscribe_the_queue_refuses_raises_the_tables_exception(
    broker: RunningBroker, peer: SocketPeer
) -> None:
    peer.call("queue.declare", queue="held")
    peer.call("message.subscribe", queue="held", destination="mine", exclusive=True)
    assert _refused_subscribe(broker, "held", exclusive=False) == (
        405,
        "queue 'held' in vhost '/' has an exclusive subscriber",
    )
    peer.call("queue.declare", queue="shared")
    peer.call("message.subscribe", queue="shared", destination="one")
    assert _refused_subscribe(broker, "shared", exclusive=True) == (  # in use
        405,
        "queue 'shared' in vhost '/' has an exclusive subscriber",
    )


def test_tx_commit_and_rollback(peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="txq")
    peer.call("tx.select")
    publish(peer, "txq", b"dropped")
    peer.call("tx.rollback")
    publish(peer, "txq", b"kept")
    assert peer.call("queue.query", queue="txq")["message_count"] == 0  # type: ignore[index]
    peer.call("tx.commit")
    assert peer.call("queue.query", queue="txq")["message_count"] == 1  # type: ignore[index]


# -- interop rows: the same queue from 0-10, 1.0 and 0-9-1 ---------------------------------------
def test_published_with_0_10_read_with_1_0_and_0_9_1(
    broker: RunningBroker, peer: SocketPeer
) -> None:
    peer.call("queue.declare", queue="cross", durable=True)
    mid = uuid.uuid4()
    props = dict(
        message_id=mid,
        correlation_id=b"corr",
        reply_to=struct("reply-to", routing_key="replies"),
        content_type="application/json",
        app_id=b"shop",
        application_headers={"n": 7, "s": "str"},
    )
    for _ in range(2):
        headers = [
            struct("delivery-properties", routing_key="cross", priority=6, delivery_mode=2),
            struct("message-properties", **props),
        ]
        peer.call(
            "message.transfer",
            destination="",
            accept_mode=1,
            acquire_mode=0,
            headers=headers,
            body=b'{"a": 1}',
        )
    with amqp10.sync.connect(f"amqp://{broker.url}", timeout=T) as c1:
        r = c1.open_receiver("cross", credit=1)
        d = r.receive(timeout=T)
        msg = d.message
        d.accept()
    assert msg.body in ([b'{"a": 1}'], b'{"a": 1}')
    assert msg.id == mid and msg.correlation_id == "corr" and msg.reply_to == "replies"
    assert msg.content_type == "application/json" and msg.durable and msg.priority == 6
    assert msg.application_properties == {"n": 7, "s": "str"}
    c = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    try:
        method, p, body = c.channel().basic_get("cross", auto_ack=True)
    finally:
        c.close()
    assert body == b'{"a": 1}' and method.routing_key == "cross"
    assert p.correlation_id == "corr" and p.reply_to == "replies" and p.app_id == "shop"
    assert p.headers == {"n": 7, "s": "str"} and p.priority == 6 and p.delivery_mode == 2


def test_published_with_1_0_and_0_9_1_read_with_0_10(
    broker: RunningBroker, peer: SocketPeer
) -> None:
    peer.call("queue.declare", queue="into-010")
    with amqp10.sync.connect(f"amqp://{broker.url}", timeout=T) as c1:
        s = c1.open_sender("into-010")
        s.send(
            Message(
                body="text from 1.0",
                application_properties={"k": "v"},
                correlation_id="c1",
                reply_to="back",
                subject="subj",
            )
        )
    c = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    try:
        c.channel().basic_publish(
            "",
            "into-010",
            b"from 0-9-1",
            pika.BasicProperties(headers={"h": 2}, correlation_id="c2", delivery_mode=2),
        )
    finally:
        c.close()
    subscribe(peer, "into-010")
    t1, t2 = peer.wait("message.transfer", 2)
    mp1, mp2 = t1.header("message-properties"), t2.header("message-properties")
    assert mp1 is not None and mp2 is not None
    assert t1.body == b"text from 1.0" and mp1["content_type"] == "text/plain"
    assert mp1["application_headers"] == {"k": "v", "qpid.subject": "subj"}
    assert mp1["correlation_id"] == b"c1" and mp1["reply_to"]["routing_key"] == "back"
    # (0-9-1's routing key is 1.0's subject, which 0-10 keeps where qpid.messaging reads a subject)
    assert mp2["application_headers"] == {"h": 2, "qpid.subject": "into-010"}
    assert t2.body == b"from 0-9-1" and mp2["correlation_id"] == b"c2"
    dp2 = t2.header("delivery-properties")
    assert dp2 is not None and dp2["delivery_mode"] == 2


def test_a_browsed_message_is_acquired_once(peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="qa")
    for body in (b"first", b"second"):
        publish(peer, "qa", body)
    subscribe(peer, "qa", "browser", acquire_mode=1)
    first, second = peer.wait("message.transfer", 2)
    assert peer.call("queue.query", queue="qa")["message_count"] == 2  # type: ignore[index]
    got = peer.call("message.acquire", transfers=((first.id, first.id),))
    assert got is not None and got["transfers"] == ((first.id, first.id),)
    assert peer.call("queue.query", queue="qa")["message_count"] == 1  # type: ignore[index]
    again = peer.call("message.acquire", transfers=((first.id, second.id),))
    assert again is not None and again["transfers"] == ((second.id, second.id),)  # not twice
    peer.call("message.accept", transfers=((first.id, second.id),))
    assert peer.call("queue.query", queue="qa")["message_count"] == 0  # type: ignore[index]


def test_byte_credit_is_never_exceeded(peer: SocketPeer) -> None:
    peer.call("queue.declare", queue="qb")
    publish(peer, "qb", b"B" * 3000)
    publish(peer, "qb", b"s")
    peer.call("message.subscribe", queue="qb", destination="d", accept_mode=1, acquire_mode=0)
    peer.call("message.set-flow-mode", destination="d", flow_mode=0)
    peer.call("message.flow", destination="d", unit=0, value=0xFFFFFFFF)
    peer.call("message.flow", destination="d", unit=1, value=1000)  # less than the first
    assert peer.call("queue.query", queue="qb")["message_count"] == 2  # type: ignore[index]
    assert peer.take("message.transfer") == []
    peer.call("message.flow", destination="d", unit=1, value=5000)
    big, small = peer.wait("message.transfer", 2)
    assert (len(big.body), small.body) == (3000, b"s")


def test_message_resume_starts_over(peer: SocketPeer) -> None:
    result = peer.call("message.resume", destination="d", resume_id="partly-sent")
    assert result is not None and result["offset"] == 0
