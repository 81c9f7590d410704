"""The real ``azure-servicebus`` SDK, unmodified, against the broker's [servicebus] conventions.

One broker for the module (the SDK is slow to connect); each test uses its own queue.
The SDK connects through its emulator connection string (port kept, no TLS), logs in
with SASL ANONYMOUS and puts a SAS token on ``$cbs`` before each link.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AzureSasCredential
from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusMessageState,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.exceptions import ServiceBusAuthenticationError, ServiceBusError

import amqp10.sync
from amqp10.errors import AMQPError
from amqp10.message import Message
from tests.broker.conftest import RunningBroker, make_config, start_broker

KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"
JWT_SECRET = "jwt-secret"
QUEUES = ["q.send", "q.settle", "q.limit", "q.rad", "q.async", "q.mgmt", "q.defer", "q.sched", "q.sessions", "q.async-sessions"]


# the emulator's own format (its Config.json), read by [servicebus] emulator_config
EMULATOR_CONFIG = {
    "UserConfig": {
        "Namespaces": [
            {
                "Name": "sbemulatorns",
                "Queues": [{"Name": "emu.queue", "Properties": {"MaxDeliveryCount": 3, "LockDuration": "PT30S"}}],
                "Topics": [
                    {
                        "Name": "emu.topic",
                        "Subscriptions": [
                            {
                                "Name": "by-id",
                                "Rules": [
                                    {
                                        "Name": "sql",
                                        "Properties": {
                                            "FilterType": "Sql",
                                            "SqlFilter": {"SqlExpression": "sys.MessageId = 'id-1' AND p = 'v'"},
                                            "Action": {"SqlExpression": "SET p = 'seen'"},
                                        },
                                    }
                                ],
                            },
                            {
                                "Name": "by-corr",
                                "Rules": [
                                    {
                                        "Name": "corr",
                                        "Properties": {
                                            "FilterType": "Correlation",
                                            "CorrelationFilter": {"ContentType": "application/text", "Properties": {"p": "w"}},
                                        },
                                    }
                                ],
                            },
                        ],
                    }
                ],
            }
        ]
    }
}


@pytest.fixture(scope="module")
def sb_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    tmp: Path = tmp_path_factory.mktemp("servicebus")
    (tmp / "Config.json").write_text(json.dumps(EMULATOR_CONFIG))
    cfg = make_config(
        tmp,
        servicebus={
            "enabled": True,
            "emulator_config": str(tmp / "Config.json"),
            "shared_access_keys": [{"name": KEY_NAME, "key": KEY}],
            "jwt_secret": JWT_SECRET,
            "queues": [{"name": q, "max_delivery_count": 2 if q == "q.limit" else 10} for q in QUEUES],
            "topics": [
                {
                    "name": "t",
                    "subscriptions": [
                        {"name": "all"},
                        {"name": "red", "rules": [{"name": "red", "sql": "color = 'red' AND n > 0"}]},
                        {"name": "hot", "rules": [{"name": "c", "correlation": {"subject": "hot", "properties": {"n": 2}}}]},
                    ],
                }
            ],
        },
    )
    yield from start_broker(cfg)


def conn_str(b: RunningBroker, key: str = KEY) -> str:
    return (
        f"Endpoint=sb://127.0.0.1:{b.port};SharedAccessKeyName={KEY_NAME};"
        f"SharedAccessKey={key};UseDevelopmentEmulator=true"
    )


def client(b: RunningBroker, key: str = KEY) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(conn_str(b, key), retry_total=0)


def receive(r: Any, n: int) -> list[Any]:
    """Up to ``n`` messages from receiver ``r``, in at most five receives (2 s each)."""
    got: list[Any] = []
    for _ in range(5):
        got += r.receive_messages(max_message_count=n - len(got), max_wait_time=2)
        if len(got) >= n:
            break
    return got


def test_send_batch_and_peek_lock_receive(sb_broker: RunningBroker) -> None:
    with client(sb_broker) as c:
        with c.get_queue_sender("q.send") as s:
            s.send_messages(ServiceBusMessage("one", application_properties={"k": 1}))
            batch = s.create_message_batch()
            for i in range(3):
                batch.add_message(ServiceBusMessage(f"batch-{i}"))
            s.send_messages(batch)
        with c.get_queue_receiver("q.send") as r:
            got = receive(r, 4)
            assert [str(m) for m in got] == ["one", "batch-0", "batch-1", "batch-2"]
            assert got[0].application_properties == {b"k": 1}
            seqs = [m.sequence_number for m in got]
            assert seqs == sorted(seqs) and len(set(seqs)) == 4
            assert all(m.enqueued_time_utc is not None and m.locked_until_utc is not None for m in got)
            assert len({m.lock_token for m in got}) == 4
            for m in got:
                r.complete_message(m)
    nodes = sb_broker.broker.default.nodes
    assert nodes["q.send"].count == 0
    assert not [n for n in nodes if "://" in n]  # entity URIs name the entities, no new nodes


def test_abandon_dead_letter_and_dead_letter_queue(sb_broker: RunningBroker) -> None:
    with client(sb_broker) as c:
        with c.get_queue_sender("q.settle") as s:
            s.send_messages([ServiceBusMessage("abandoned"), ServiceBusMessage("dead")])
        with c.get_queue_receiver("q.settle") as r:
            first = r.receive_messages(max_message_count=2, max_wait_time=3)
            assert [str(m) for m in first] == ["abandoned", "dead"]
            r.abandon_message(first[0])
            r.dead_letter_message(first[1], reason="bad", error_description="very bad")
            again = r.receive_messages(max_message_count=1, max_wait_time=3)
            assert [str(m) for m in again] == ["abandoned"]
            assert again[0].delivery_count == 1
            r.complete_message(again[0])
        with c.get_queue_receiver("q.settle", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as r:
            dead = r.receive_messages(max_message_count=1, max_wait_time=3)
            assert [str(m) for m in dead] == ["dead"]
            assert (dead[0].dead_letter_reason, dead[0].dead_letter_error_description) == ("bad", "very bad")
            r.complete_message(dead[0])


def test_max_delivery_count_dead_letters(sb_broker: RunningBroker) -> None:
    with client(sb_broker) as c:
        with c.get_queue_sender("q.limit") as s:
            s.send_messages(ServiceBusMessage("poison"))
        with c.get_queue_receiver("q.limit") as r:
            for _ in range(2):  # max_delivery_count 2
                got = r.receive_messages(max_message_count=1, max_wait_time=3)
                assert [str(m) for m in got] == ["poison"]
                r.abandon_message(got[0])
            assert r.receive_messages(max_message_count=1, max_wait_time=1) == []
        with c.get_queue_receiver("q.limit/$deadletterqueue") as r:
            dead = r.receive_messages(max_message_count=1, max_wait_time=3)
            assert [(str(m), m.dead_letter_reason) for m in dead] == [("poison", "MaxDeliveryCountExceeded")]
            r.complete_message(dead[0])


def test_receive_and_delete(sb_broker: RunningBroker) -> None:
    with client(sb_broker) as c:
        with c.get_queue_sender("q.rad") as s:
            s.send_messages([ServiceBusMessage(f"m{i}") for i in range(3)])
        with c.get_queue_receiver("q.rad", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            got = receive(r, 3)
    assert [str(m) for m in got] == ["m0", "m1", "m2"]
    assert sb_broker.broker.default.nodes["q.rad"].count == 0


def test_async_send_receive_complete(sb_broker: RunningBroker) -> None:
    async def run() -> list[str]:
        async with AsyncServiceBusClient.from_connection_string(conn_str(sb_broker), retry_total=0) as c:
            async with c.get_queue_sender("q.async") as s:
                await s.send_messages([ServiceBusMessage("a1"), ServiceBusMessage("a2")])
            async with c.get_queue_receiver("q.async") as r:
                got: list[Any] = []
                for _ in range(5):
                    got += await r.receive_messages(max_message_count=2 - len(got), max_wait_time=2)
                    if len(got) >= 2:
                        break
                for m in got:
                    await r.complete_message(m)
                return [str(m) for m in got]

    assert asyncio.run(run()) == ["a1", "a2"]
    assert sb_broker.broker.default.nodes["q.async"].count == 0


def test_peek_schedule_cancel_and_renew_lock(sb_broker: RunningBroker) -> None:
    """The entity operations on q.mgmt/$management."""
    queue = sb_broker.broker.default.nodes["q.mgmt"]
    with client(sb_broker) as c:
        with c.get_queue_sender("q.mgmt") as s:
            s.send_messages([ServiceBusMessage(f"m{i}") for i in range(3)])
            later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
            seqs = s.schedule_messages([ServiceBusMessage("s1"), ServiceBusMessage("s2")], later)
            assert len(seqs) == 2 and queue.stats.scheduled == 2
            s.cancel_scheduled_messages(seqs[0])
            assert queue.stats.scheduled == 1
        with c.get_queue_receiver("q.mgmt") as r:
            peeked = r.peek_messages(max_message_count=5)
            assert [str(m) for m in peeked] == ["m0", "m1", "m2"]
            assert [m.sequence_number for m in r.peek_messages(max_message_count=5, sequence_number=peeked[1].sequence_number)] == [
                m.sequence_number for m in peeked[1:]
            ]
            assert queue.count == 3  # peeking leaves them there
            got = r.receive_messages(max_message_count=1, max_wait_time=3)
            assert isinstance(r.renew_message_lock(got[0]), datetime.datetime)
            r.complete_message(got[0])


def test_defer_and_receive_deferred(sb_broker: RunningBroker) -> None:
    queue = sb_broker.broker.default.nodes["q.defer"]
    with client(sb_broker) as c:
        with c.get_queue_sender("q.defer") as s:
            s.send_messages([ServiceBusMessage("later", partition_key="pk1"), ServiceBusMessage("dead later")])
        with c.get_queue_receiver("q.defer") as r:
            got = r.receive_messages(max_message_count=2, max_wait_time=3)
            assert [str(m) for m in got] == ["later", "dead later"]
            assert [m.partition_key for m in got] == ["pk1", None]
            assert [m.enqueued_sequence_number for m in got] == [m.sequence_number for m in got]
            assert {m.state for m in got} == {ServiceBusMessageState.ACTIVE}
            for m in got:
                r.defer_message(m)
            assert r.receive_messages(max_message_count=1, max_wait_time=1) == []  # set aside
            back = r.receive_deferred_messages([m.sequence_number for m in got])
            assert [str(m) for m in back] == ["later", "dead later"]
            assert {m.state for m in back} == {ServiceBusMessageState.DEFERRED}  # x-opt-message-state 1
            r.complete_message(back[0])
            r.dead_letter_message(back[1], reason="too late", error_description="deferred too long")
    assert queue.count == 0 and queue.stats.unacked == 0
    with c, c.get_queue_receiver("q.defer/$deadletterqueue") as r:
        dead = r.receive_messages(max_message_count=1, max_wait_time=3)
        assert [(str(m), m.dead_letter_reason) for m in dead] == [("dead later", "too late")]
        r.complete_message(dead[0])


def test_a_scheduled_message_keeps_its_sequence_number(sb_broker: RunningBroker) -> None:
    """Service Bus: the number schedule_messages answers is the message's sequence number
    for life, though the core gives it a new place (seq) in the queue when it is due."""
    queue = sb_broker.broker.default.nodes["q.sched"]
    with client(sb_broker) as c:
        with c.get_queue_sender("q.sched") as s:
            soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
            (number,) = s.schedule_messages([ServiceBusMessage("scheduled")], soon)
            s.send_messages([ServiceBusMessage(f"m{i}") for i in range(2)])  # numbers after it
        for _ in range(50):  # until it is due (bounded: 5 s)
            if queue.count == 3:
                break
            time.sleep(0.1)
        assert queue.count == 3 and [m.number for m in queue][-1] == number
        assert [m.seq for m in queue][-1] != number  # it did get a new place
        with c.get_queue_receiver("q.sched") as r:
            peeked = r.peek_messages(max_message_count=1, sequence_number=number)
            assert [(str(m), m.sequence_number) for m in peeked] == [("scheduled", number)]
            got = receive(r, 3)
            assert [str(m) for m in got] == ["m0", "m1", "scheduled"]
            assert got[2].sequence_number == number
            # x-opt-enqueue-sequence-number: the number it was enqueued with when due (a later one)
            assert got[2].enqueued_sequence_number is not None and got[2].enqueued_sequence_number > got[1].sequence_number
            r.defer_message(got[2])
            for m in got[:2]:
                r.complete_message(m)
            (back,) = r.receive_deferred_messages([number])
            assert (str(back), back.sequence_number) == ("scheduled", number)
            r.complete_message(back)
    assert queue.count == 0 and queue.deferred == {} and queue.stats.unacked == 0


def test_topic_subscriptions_with_sql_and_correlation_rules(sb_broker: RunningBroker) -> None:
    with client(sb_broker) as c:
        with c.get_topic_sender("t") as s:
            s.send_messages(
                [
                    ServiceBusMessage("red", application_properties={"color": "red", "n": 1}),
                    ServiceBusMessage("hot", application_properties={"color": "blue", "n": 2}, subject="hot"),
                    ServiceBusMessage("cold", application_properties={"color": "red", "n": 0}, subject="cold"),
                ]
            )
        seen = {}
        for sub in ("all", "red", "hot"):
            with c.get_subscription_receiver("t", sub) as r:
                got: list[Any] = []
                for _ in range(5):
                    got += r.receive_messages(max_message_count=10, max_wait_time=1)
                    if sub != "all" or len(got) >= 3:
                        break
                seen[sub] = [str(m) for m in got]
                for m in got[:-1]:
                    r.complete_message(m)
                if got:
                    r.dead_letter_message(got[-1], reason=f"from {sub}")
        assert seen == {"all": ["red", "hot", "cold"], "red": ["red"], "hot": ["hot"]}
        with c.get_subscription_receiver("t", "red", sub_queue="deadletter") as r:
            dead = r.receive_messages(max_message_count=1, max_wait_time=3)
            assert [(str(m), m.dead_letter_reason) for m in dead] == [("red", "from red")]
            r.complete_message(dead[0])


def test_sessions_named_next_available_locked_and_state(sb_broker: RunningBroker) -> None:
    with client(sb_broker) as c:
        with c.get_queue_sender("q.sessions") as s:
            s.send_messages(
                [
                    ServiceBusMessage("a1", session_id="A"),
                    ServiceBusMessage("b1", session_id="B"),
                    ServiceBusMessage("a2", session_id="A"),
                ]
            )
        with c.get_queue_receiver("q.sessions", session_id="B") as r:
            assert r.session.session_id == "B" and r.session.locked_until_utc is not None
            got = r.receive_messages(max_message_count=5, max_wait_time=2)
            assert [str(m) for m in got] == ["b1"] and got[0].session_id == "B"
            r.complete_message(got[0])
            r.session.set_state(b"checkpoint")
            assert r.session.get_state() == b"checkpoint"
            assert isinstance(r.session.renew_lock(), datetime.datetime)
            with pytest.raises(ServiceBusError), c.get_queue_receiver("q.sessions", session_id="B") as other:
                other.receive_messages(max_message_count=1, max_wait_time=1)
        with c.get_queue_receiver("q.sessions", session_id=NEXT_AVAILABLE_SESSION) as r:
            assert r.session.session_id == "A"
            got = []
            for _ in range(5):
                got += r.receive_messages(max_message_count=2 - len(got), max_wait_time=1)
                if len(got) >= 2:
                    break
            assert [str(m) for m in got] == ["a1", "a2"]
            for m in got:
                r.complete_message(m)


def test_async_session_receiver(sb_broker: RunningBroker) -> None:
    async def run() -> tuple[str | None, list[str]]:
        async with AsyncServiceBusClient.from_connection_string(conn_str(sb_broker), retry_total=0) as c:
            async with c.get_queue_sender("q.async-sessions") as s:
                await s.send_messages([ServiceBusMessage("x", session_id="S1")])
            async with c.get_queue_receiver("q.async-sessions", session_id=NEXT_AVAILABLE_SESSION) as r:
                got = await r.receive_messages(max_message_count=1, max_wait_time=3)
                for m in got:
                    await r.complete_message(m)
                return r.session.session_id, [str(m) for m in got]

    assert asyncio.run(run()) == ("S1", ["x"])


def test_entities_from_the_emulators_config(sb_broker: RunningBroker) -> None:
    with client(sb_broker) as c:
        with c.get_topic_sender("emu.topic") as s:
            s.send_messages(
                [
                    ServiceBusMessage("one", message_id="id-1", application_properties={"p": "v"}),
                    ServiceBusMessage("two", content_type="application/text", application_properties={"p": "w"}),
                    ServiceBusMessage("three", message_id="id-1", application_properties={"p": "x"}),
                ]
            )
        got = {}
        for sub in ("by-id", "by-corr"):
            with c.get_subscription_receiver("emu.topic", sub) as r:
                msgs = r.receive_messages(max_message_count=5, max_wait_time=2)
                got[sub] = [(str(m), m.application_properties[b"p"]) for m in msgs]
                for m in msgs:
                    r.complete_message(m)
        assert got == {"by-id": [("one", b"seen")], "by-corr": [("two", b"w")]}  # by-id's rule's action ran
        with c.get_queue_sender("emu.queue") as s:
            s.send_messages(ServiceBusMessage("q"))
        with c.get_queue_receiver("emu.queue") as r:
            msgs = r.receive_messages(max_message_count=1, max_wait_time=3)
            assert [str(m) for m in msgs] == ["q"]
            locked_for = (msgs[0].locked_until_utc - datetime.datetime.now(datetime.UTC)).total_seconds()
            assert 0 < locked_for <= 30  # LockDuration PT30S
            r.complete_message(msgs[0])


def test_wrong_key_is_an_authentication_error(sb_broker: RunningBroker) -> None:
    c = client(sb_broker, key="not-the-key")
    with c, pytest.raises(ServiceBusAuthenticationError), c.get_queue_sender("q.send") as s:
        s.send_messages(ServiceBusMessage("never"))


def _sas(b: RunningBroker, entity: str, expiry: int) -> str:
    from urllib.parse import quote_plus, urlencode

    uri = f"sb://127.0.0.1:{b.port}/{entity}"
    sig = base64.b64encode(hmac.new(KEY.encode(), f"{quote_plus(uri)}\n{expiry}".encode(), hashlib.sha256).digest())
    return "SharedAccessSignature " + urlencode({"sr": uri, "sig": sig, "se": str(expiry), "skn": KEY_NAME})


def test_expired_token_is_an_authentication_error(sb_broker: RunningBroker) -> None:
    expired = AzureSasCredential(_sas(sb_broker, "q.send", int(time.time()) - 60))
    c = ServiceBusClient(f"127.0.0.1:{sb_broker.port}", expired, use_tls=False, retry_total=0)
    with c, pytest.raises(ServiceBusAuthenticationError), c.get_queue_sender("q.send") as s:
        s.send_messages(ServiceBusMessage("never"))


def _jwt(claims: dict[str, Any]) -> str:
    def part(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    head = part({"alg": "HS256", "typ": "JWT"}) + "." + part(claims)
    sig = hmac.new(JWT_SECRET.encode(), head.encode(), hashlib.sha256).digest()
    return head + "." + base64.urlsafe_b64encode(sig).rstrip(b"=").decode()


def _put(conn: Any, token: str, audience: str, token_type: str = "jwt") -> Any:
    reply = conn.request(
        "$cbs",
        Message(body=token, application_properties={"operation": "put-token", "type": token_type, "name": audience}),
        timeout=10,
    )
    return reply.application_properties


def test_links_need_a_token_and_are_detached_when_it_expires(sb_broker: RunningBroker) -> None:
    """Our own client, anonymous: refused until a JWT is put; detached once it expires."""
    with amqp10.sync.connect(f"amqp://127.0.0.1:{sb_broker.port}", sasl_mechanisms=["ANONYMOUS"], timeout=10) as conn:
        with pytest.raises(AMQPError, match=r"unauthorized-access|token"):
            conn.open_sender("q.send")
        bad = _put(conn, _jwt({"exp": time.time() - 5}), "sb://127.0.0.1/q.send")
        assert bad["status-code"] == 401 and "expired" in bad["status-description"]
        forged = _put(conn, _jwt({"exp": time.time() + 60})[:-2] + "xx", "sb://127.0.0.1/q.send")
        assert forged["status-code"] == 401
        ok = _put(conn, _jwt({"exp": time.time() + 2, "rights": ["Send"]}), "sb://127.0.0.1/q.send")
        assert ok["status-code"] == 202
        sender = conn.open_sender("q.send")  # Send right: let in
        with pytest.raises(AMQPError, match=r"unauthorized-access|token"):
            conn.open_receiver("q.send")  # no Listen right
        deadline = time.monotonic() + 15
        detached = False
        while time.monotonic() < deadline and not detached:  # the tick detaches it after expiry
            try:
                sender.send(Message(body="late"), timeout=2)
                time.sleep(0.5)
            except AMQPError as exc:
                detached = "expired" in str(exc) or "unauthorized" in str(exc)
        assert detached


def test_a_client_without_sasl_needs_tokens_too(sb_broker: RunningBroker) -> None:
    conn = amqp10.sync.connect(f"amqp://127.0.0.1:{sb_broker.port}", sasl=False, timeout=10)
    with conn, pytest.raises(AMQPError, match=r"unauthorized-access|token"):
        conn.open_sender("q.send")
