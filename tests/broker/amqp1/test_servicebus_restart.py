"""What ``azure-servicebus`` keeps on a broker across a restart: deferred messages and
session state (in the store, as messages are), with the real SDK against a broker that
is stopped and started again on the same SQLite store."""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage

from amqp10.broker.core import Queue
from amqp10.broker.core.store import Store
from tests.broker.conftest import broker_with

from .test_servicebus_sdk import KEY, KEY_NAME, receive

SERVICEBUS = {
    "enabled": True,
    "shared_access_keys": [{"name": KEY_NAME, "key": KEY}],
    "queues": [{"name": "orders"}, {"name": "sessions"}],
}


def client(port: int) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(
        f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY};"
        "UseDevelopmentEmulator=true",
        retry_total=0,
    )


def stored(tmp_path: Path) -> Any:
    """What the (stopped) broker's store holds."""
    s = Store(tmp_path / "store.sqlite3")
    try:
        return s.load()
    finally:
        s.close()


def test_deferred_messages_survive_a_restart(tmp_path: Path) -> None:
    with broker_with(tmp_path, servicebus=SERVICEBUS) as b, client(b.port) as c:
        with c.get_queue_sender("orders") as s:
            s.send_messages([ServiceBusMessage("later"), ServiceBusMessage("now"), ServiceBusMessage("dead later")])
        with c.get_queue_receiver("orders") as r:
            got = receive(r, 3)
            assert [str(m) for m in got] == ["later", "now", "dead later"]
            r.defer_message(got[0])
            r.defer_message(got[2])
            r.abandon_message(got[1])
        seqs = [got[0].sequence_number, got[2].sequence_number]
    assert sorted(m.seq for m in stored(tmp_path).messages if m.deferred) == seqs

    with broker_with(tmp_path, servicebus=SERVICEBUS) as b, client(b.port) as c:
        q = b.broker.default.nodes["orders"]
        assert isinstance(q, Queue) and sorted(q.deferred) == seqs
        with c.get_queue_receiver("orders") as r:
            ready = r.receive_messages(max_message_count=3, max_wait_time=2)
            assert [str(m) for m in ready] == ["now"]  # the deferred ones are not delivered
            r.complete_message(ready[0])
            back = r.receive_deferred_messages(seqs)
            assert [(str(m), m.sequence_number) for m in back] == [("later", seqs[0]), ("dead later", seqs[1])]
            r.complete_message(back[0])
            r.dead_letter_message(back[1], reason="too late")
        assert q.deferred == {} and q.count == 0 and q.stats.unacked == 0
        with c.get_queue_receiver("orders/$deadletterqueue") as r:
            dead = r.receive_messages(max_message_count=1, max_wait_time=3)
            assert [(str(m), m.dead_letter_reason) for m in dead] == [("dead later", "too late")]
            r.complete_message(dead[0])
    assert [m for m in stored(tmp_path).messages if m.node == "orders"] == []  # settled: gone


def test_session_state_survives_a_restart_until_cleared(tmp_path: Path) -> None:
    with broker_with(tmp_path, servicebus=SERVICEBUS) as b, client(b.port) as c:
        with c.get_queue_sender("sessions") as s:
            s.send_messages([ServiceBusMessage("a1", session_id="A"), ServiceBusMessage("b1", session_id="B")])
        with c.get_queue_receiver("sessions", session_id="A") as r:
            got = r.receive_messages(max_message_count=1, max_wait_time=3)
            assert [str(m) for m in got] == ["a1"]
            r.complete_message(got[0])
            r.session.set_state(b"checkpoint A")
        with c.get_queue_receiver("sessions", session_id="B") as r:
            r.session.set_state(b"checkpoint B")
    assert sorted((g.group, g.state) for g in stored(tmp_path).group_states) == [
        ("A", b"checkpoint A"), ("B", b"checkpoint B")]  # fmt: skip

    with broker_with(tmp_path, servicebus=SERVICEBUS) as b, client(b.port) as c:
        with c.get_queue_receiver("sessions", session_id="A") as r:
            assert r.session.get_state() == b"checkpoint A"
            r.session.set_state(None)  # cleared
            assert r.session.get_state() is None
        with c.get_queue_receiver("sessions", session_id="B") as r:
            assert r.session.get_state() == b"checkpoint B"
            got = r.receive_messages(max_message_count=1, max_wait_time=3)
            assert [str(m) for m in got] == ["b1"]
            r.complete_message(got[0])
        b.portal.call(b.broker.default.delete_node, "sessions")  # a deleted queue takes its states along
    loaded = stored(tmp_path)
    assert loaded.group_states == [] and [m for m in loaded.messages if m.node == "sessions"] == []


def test_a_scheduled_message_keeps_its_sequence_number_across_a_restart(tmp_path: Path) -> None:
    """Due before the restart (moved to a new seq in the store), it comes back with the
    sequence number schedule_messages answered."""
    with broker_with(tmp_path, servicebus=SERVICEBUS) as b, client(b.port) as c:
        q = b.broker.default.nodes["orders"]
        with c.get_queue_sender("orders") as s:
            soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
            (number,) = s.schedule_messages([ServiceBusMessage("scheduled")], soon)
            s.send_messages([ServiceBusMessage("after")])
        for _ in range(50):  # until it is due (bounded: 5 s)
            if isinstance(q, Queue) and q.count == 2:
                break
            time.sleep(0.1)
        assert isinstance(q, Queue) and q.count == 2
    assert [(m.seq != number, m.number) for m in stored(tmp_path).messages if m.data.endswith(b"scheduled")] == [
        (True, number)
    ]

    with broker_with(tmp_path, servicebus=SERVICEBUS) as b, client(b.port) as c, c.get_queue_receiver("orders") as r:
        got = receive(r, 2)
        assert [str(m) for m in got] == ["after", "scheduled"]
        assert got[1].sequence_number == number
        r.defer_message(got[1])
        r.complete_message(got[0])
        (back,) = r.receive_deferred_messages([number])
        assert (str(back), back.sequence_number) == ("scheduled", number)
        r.complete_message(back)
    assert [m for m in stored(tmp_path).messages if m.node == "orders"] == []
