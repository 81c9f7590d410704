"""Expiry on time with real clients (pika, and ours over 1.0), against a running broker: the
TTL-plus-dead-letter-exchange pattern as RabbitMQ's users run it. No timing is asserted
beyond "within a bounded wait"; the broker never removed these messages on its own before."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

import amqp10.sync
from amqp10.message import Message
from amqp10.types import Accepted
from tests.broker.conftest import RunningBroker, broker_with

T = 10  # the bound on every wait, in seconds


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_with(tmp_path) as b:
        yield b


@pytest.fixture
def conn(broker: RunningBroker) -> Iterator[pika.BlockingConnection]:
    c = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port, blocked_connection_timeout=T))
    yield c
    if c.is_open:
        c.close()


def depth(ch: Any, queue: str) -> int:
    count: int = ch.queue_declare(queue, passive=True).method.message_count
    return count


def wait_for(conn: pika.BlockingConnection, done: Callable[[], bool]) -> None:
    """Run ``conn``'s I/O until ``done()``, at most T seconds."""
    deadline = time.monotonic() + T
    while not done():
        assert time.monotonic() < deadline, "timed out"
        conn.process_data_events(time_limit=0.05)


def test_pika_ttl_and_dead_letter_exchange_on_a_queue_of_thousands(conn: pika.BlockingConnection) -> None:
    """Every message of a deep queue with ``x-message-ttl`` leaves it when its time comes
    and reaches the dead-letter exchange's queue, with its x-death record; no consumer."""
    n = 5000
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare("retry-dlx", "fanout")
    ch.queue_declare("retry-now")
    ch.queue_bind("retry-now", "retry-dlx")
    ch.queue_declare("wait-300", arguments={"x-message-ttl": 300, "x-dead-letter-exchange": "retry-dlx"})
    for i in range(n):
        ch.basic_publish("", "wait-300", str(i).encode())
    assert depth(ch, "retry-now") < n  # (most still waiting)
    wait_for(conn, lambda: depth(ch, "wait-300") == 0 and depth(ch, "retry-now") == n)
    method, props, body = ch.basic_get("retry-now", auto_ack=True)
    assert method is not None and body == b"0"  # in order
    (death,) = props.headers["x-death"]
    assert (death["queue"], death["reason"], death["count"]) == ("wait-300", "expired", 1)
    assert props.headers["x-first-death-reason"] == "expired"


def test_pika_a_message_behind_the_expired_ones_stays(conn: pika.BlockingConnection) -> None:
    """Per-message expiration: the short-lived head leaves on time; one without TTL stays."""
    ch = conn.channel()
    ch.queue_declare("dead-letters")
    ch.queue_declare("mixed", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead-letters"})
    ch.basic_publish("", "mixed", b"short", pika.BasicProperties(expiration="200"))
    ch.basic_publish("", "mixed", b"keeps")
    wait_for(conn, lambda: depth(ch, "mixed") == 1 and depth(ch, "dead-letters") == 1)
    _, _, body = ch.basic_get("mixed", auto_ack=True)
    assert body == b"keeps"


def test_pika_queue_delete_if_empty_succeeds_once_its_message_expired(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.queue_declare("short-lived")
    ch.basic_publish("", "short-lived", b"x", pika.BasicProperties(expiration="200"))
    assert depth(ch, "short-lived") == 1
    wait_for(conn, lambda: depth(ch, "short-lived") == 0)
    ch.queue_delete("short-lived", if_empty=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        depth(ch, "short-lived")
    assert info.value.reply_code == 404


def test_pika_x_expires_deletes_an_unused_queue(broker: RunningBroker, conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.queue_declare("idle", arguments={"x-expires": 300})
    vhost = broker.broker.default
    wait_for(conn, lambda: "idle" not in vhost.nodes)


def test_our_client_ttl_header_and_absolute_expiry_time(broker: RunningBroker, conn: pika.BlockingConnection) -> None:
    """A 1.0 ``header.ttl`` and ``properties.absolute-expiry-time``: each message leaves its queue
    when it expires and reaches the dead-letter exchange's queue, read back over 1.0."""
    ch = conn.channel()
    ch.queue_declare("expired-1.0")
    ch.queue_declare("timed-1.0", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "expired-1.0"})
    with amqp10.sync.connect(f"amqp://{broker.url}", timeout=T) as c:
        s = c.open_sender("timed-1.0")
        assert isinstance(s.send(Message(body="by-ttl", ttl=0.3)), Accepted)
        assert isinstance(s.send(Message(body="by-absolute-time", expiry_time=time.time() + 0.3)), Accepted)
        wait_for(conn, lambda: depth(ch, "timed-1.0") == 0)
        r = c.open_receiver("expired-1.0", credit=2)
        got = []
        for _ in range(2):
            d = r.receive(timeout=T)
            got.append(d.message)
            d.accept()
    assert [m.body for m in got] == ["by-ttl", "by-absolute-time"]
    annotations = {str(k): v for k, v in (got[0].message_annotations or {}).items()}
    (death,) = annotations["x-opt-deaths"]
    assert str(death["reason"]) == "expired" and death["queue"] == "timed-1.0"
