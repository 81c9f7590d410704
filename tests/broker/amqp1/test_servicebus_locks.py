"""Peek-locks and session locks that run out, with the real ``azure-servicebus`` SDK
(a queue with a 1 s lock duration; waits are bounded by count and time)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.exceptions import MessageLockLostError, ServiceBusError

import amqp10.sync
from amqp10.broker.amqp1.servicebus.consumer import MESSAGE_LOCK_LOST
from amqp10.client import SettleMode
from amqp10.message import Message
from amqp10.types import Array, Rejected
from tests.broker.conftest import RunningBroker, make_config, start_broker

from .test_servicebus_sdk import JWT_SECRET, KEY, KEY_NAME, _jwt, _put, conn_str

LOCK = 1.0


@pytest.fixture(scope="module")
def lock_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    queues = [{"name": q, "lock_duration": LOCK, "max_delivery_count": 5} for q in ("l.expire", "l.renew", "l.rad", "l.session", "l.link")]
    queues.append({"name": "l.limit", "lock_duration": LOCK, "max_delivery_count": 1})
    cfg = make_config(
        tmp_path_factory.mktemp("sblocks"),
        servicebus={
            "enabled": True,
            "shared_access_keys": [{"name": KEY_NAME, "key": KEY}],
            "jwt_secret": JWT_SECRET,
            "queues": queues,
        },
    )
    yield from start_broker(cfg)


def _client(b: RunningBroker) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(conn_str(b), retry_total=0)


def _one(r: Any) -> Any:
    for _ in range(5):
        got = r.receive_messages(max_message_count=1, max_wait_time=2)
        if got:
            return got[0]
    raise AssertionError("no message")


def _send(c: ServiceBusClient, queue: str, msg: ServiceBusMessage) -> None:
    with c.get_queue_sender(queue) as s:
        s.send_messages(msg)


def _taken_back(queue: Any) -> None:
    """Wait (bounded) until the broker took back the message whose lock ran out."""
    deadline = time.monotonic() + 10 * LOCK
    while queue.stats.unacked and time.monotonic() < deadline:
        time.sleep(0.1)
    assert queue.stats.unacked == 0


def test_an_expired_lock_redelivers_and_settling_it_fails(lock_broker: RunningBroker) -> None:
    queue = lock_broker.broker.default.nodes["l.expire"]
    with _client(lock_broker) as c:
        _send(c, "l.expire", ServiceBusMessage("locked"))
        with c.get_queue_receiver("l.expire", prefetch_count=0) as r:
            first = _one(r)
            assert first.delivery_count in (0, None)  # no header: never delivered before
            _taken_back(queue)
            assert queue.count == 1
            again = _one(r)
            assert str(again) == "locked" and again.delivery_count == 1
            with pytest.raises(MessageLockLostError):
                r.complete_message(first)
            with pytest.raises(MessageLockLostError):  # the broker's answer, not the SDK's own check
                r.renew_message_lock(first)
            r.complete_message(again)
    assert queue.count == 0 and queue.stats.unacked == 0


def test_a_lock_running_out_past_the_max_delivery_count_dead_letters(lock_broker: RunningBroker) -> None:
    queue = lock_broker.broker.default.nodes["l.limit"]
    with _client(lock_broker) as c:
        _send(c, "l.limit", ServiceBusMessage("poison"))
        with c.get_queue_receiver("l.limit", prefetch_count=0) as r:
            _one(r)  # and never settled: max_delivery_count 1
            _taken_back(queue)
            assert queue.count == 0
        with c.get_queue_receiver("l.limit/$deadletterqueue") as r:
            dead = _one(r)
            assert str(dead) == "poison" and dead.dead_letter_reason == "MaxDeliveryCountExceeded"
            r.complete_message(dead)


def test_renew_lock_keeps_it_locked_past_the_first_expiry(lock_broker: RunningBroker) -> None:
    queue = lock_broker.broker.default.nodes["l.renew"]
    with _client(lock_broker) as c:
        _send(c, "l.renew", ServiceBusMessage("kept"))
        with c.get_queue_receiver("l.renew", prefetch_count=0) as r:
            msg = _one(r)
            first_end = msg.locked_until_utc
            for _ in range(4):  # 4 x 0.4 s: well past the first 1 s lock
                time.sleep(0.4 * LOCK)
                r.renew_message_lock(msg)
            assert msg.locked_until_utc > first_end
            assert queue.stats.unacked == 1 and queue.count == 0  # still ours
            r.complete_message(msg)
    assert queue.count == 0


def test_receive_and_delete_takes_no_lock(lock_broker: RunningBroker) -> None:
    queue = lock_broker.broker.default.nodes["l.rad"]
    with _client(lock_broker) as c:
        _send(c, "l.rad", ServiceBusMessage("gone"))
        with c.get_queue_receiver("l.rad", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            assert str(_one(r)) == "gone"
            time.sleep(2 * LOCK)
            assert r.receive_messages(max_message_count=1, max_wait_time=1) == []
    assert queue.count == 0 and len(lock_broker.broker.leases) == 0


def test_a_session_lock_runs_out_unless_renewed(lock_broker: RunningBroker) -> None:
    with _client(lock_broker) as c:
        _send(c, "l.session", ServiceBusMessage("s1", session_id="S"))
        with c.get_queue_receiver("l.session", session_id="S") as r:
            for _ in range(3):
                time.sleep(0.5 * LOCK)
                r.session.renew_lock()  # kept while renewed
            msg = _one(r)
            r.complete_message(msg)
            time.sleep(2 * LOCK)  # now it runs out: the broker detaches the link
            assert len(lock_broker.broker.leases) == 0  # the session's lock ran out on the broker
            with pytest.raises(ServiceBusError):
                r.session.renew_lock()


def _ours(b: RunningBroker) -> Any:
    conn = amqp10.sync.connect(f"amqp://127.0.0.1:{b.port}", sasl_mechanisms=["ANONYMOUS"], timeout=10)
    assert _put(conn, _jwt({"exp": time.time() + 600}), "sb://127.0.0.1/l.link")["status-code"] == 202
    return conn


def test_a_disposition_after_the_lock_ran_out_is_rejected_lock_lost(lock_broker: RunningBroker) -> None:
    """Our own client, rcv-settle-mode second: the broker's answer to a late accept is
    rejected with com.microsoft:message-lock-lost; update-disposition settles a live lock."""
    queue = lock_broker.broker.default.nodes["l.link"]
    with _ours(lock_broker) as conn:
        sender = conn.open_sender("l.link")
        sender.send(Message(body="late"), timeout=10)
        r = conn.open_receiver("l.link", credit=0, settle_mode=SettleMode.TWO_PHASE)
        r.add_credit(1)  # one at a time: nothing is redelivered before we ask
        first = r.receive(timeout=10)
        _taken_back(queue)
        assert queue.count == 1
        first.accept()
        engine = first._d._d  # the engine's delivery: what the broker answered
        deadline = time.monotonic() + 10
        while engine.remote_state is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert isinstance(engine.remote_state, Rejected)
        assert str(engine.remote_state.error.condition) == MESSAGE_LOCK_LOST
        r.add_credit(1)
        again = r.receive(timeout=10)
        assert again.message.body == "late" and again.message.header.delivery_count == 1
        token = uuid.UUID(bytes_le=again.tag)
        reply = conn.request(
            "l.link/$management",
            Message(
                body={"disposition-status": "completed", "lock-tokens": Array(uuid.UUID, [token])},
                application_properties={"operation": "com.microsoft:update-disposition"},
            ),
            timeout=10,
        )
        assert reply.application_properties["statusCode"] == 200, reply.application_properties
        assert queue.count == 0 and queue.stats.unacked == 0  # completed by its lock token
        reply = conn.request(
            "l.link/$management",
            Message(body={"lock-tokens": Array(uuid.UUID, [token])}, application_properties={"operation": "com.microsoft:renew-lock"}),
            timeout=10,
        )
        props = reply.application_properties
        assert (props["statusCode"], props["errorCondition"]) == (410, MESSAGE_LOCK_LOST)
