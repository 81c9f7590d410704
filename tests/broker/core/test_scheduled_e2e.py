"""Scheduled delivery end to end over loopback: our client (async and blocking) and Proton,
against our broker; a durable scheduled message across a broker restart."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import amqp10.sync
from amqp10.client import connect
from amqp10.message import Message
from tests.broker.conftest import broker_with

T = 10.0  # seconds any single wait may take
LATE = 0.25  # how late a due message may arrive here (the broker aims at ~10 ms; the CPU is shared)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_async_client_delay_is_kept_to_the_millisecond_timer(tmp_path: Path) -> None:
    with broker_with(tmp_path) as b:
        async with await connect(f"amqp://{b.url}", timeout=T) as conn:
            assert "DELAYED_DELIVERY" in conn.remote_offered_capabilities
            r = await conn.open_receiver("sched-async", credit=10)
            s = await conn.open_sender("sched-async")
            sent = time.time()
            await s.send(Message(body="in 400 ms", message_annotations={"x-opt-delivery-delay": 400}))
            await s.send(Message(body="now"))
            first = await r.receive(timeout=T)
            assert first.message.body == "now"
            await first.accept()
            later = await r.receive(timeout=T)
            arrived = time.time()
            assert later.message.body == "in 400 ms"
            assert 0.4 <= arrived - sent < 0.4 + LATE  # the precise timer, not the 1 s tick
            await later.accept()


def test_blocking_client_absolute_time_and_enqueue_time(tmp_path: Path) -> None:
    with broker_with(tmp_path) as b, amqp10.sync.connect(f"amqp://{b.url}", timeout=T) as conn:
        assert "DELAYED_DELIVERY" in conn.remote_offered_capabilities
        s = conn.open_sender("sched-sync")
        due_ms = int((time.time() + 0.5) * 1000)
        s.send(Message(body="b", message_annotations={"x-opt-scheduled-enqueue-time": due_ms + 100}))
        s.send(Message(body="a", message_annotations={"x-opt-delivery-time": due_ms}))
        r = conn.open_receiver("sched-sync", credit=10)
        got = [r.receive(timeout=T) for _ in range(2)]
        assert [d.message.body for d in got] == ["a", "b"]
        assert time.time() * 1000 >= due_ms + 100
        for d in got:
            d.accept()


def test_a_durable_scheduled_message_survives_a_restart(tmp_path: Path) -> None:
    with broker_with(tmp_path) as b, amqp10.sync.connect(f"amqp://{b.url}", timeout=T) as conn:
        s = conn.open_sender("sched-durable")
        due = time.time() + 1.5
        s.send(Message(body="kept", durable=True, message_annotations={"x-opt-delivery-time": int(due * 1000)}))
    with broker_with(tmp_path) as b:
        q = b.broker.nodes["sched-durable"]
        assert q.count == 0 and q.stats.scheduled == 1
        with amqp10.sync.connect(f"amqp://{b.url}", timeout=T) as conn:
            r = conn.open_receiver("sched-durable", credit=1)
            d = r.receive(timeout=T)
            assert d.message.body == "kept"
            assert time.time() >= due
            d.accept()


@pytest.mark.proton
def test_proton_client_schedules_with_a_delay(tmp_path: Path) -> None:
    from proton import Message as ProtonMessage
    from proton.utils import BlockingConnection

    with broker_with(tmp_path) as b:
        conn = BlockingConnection(b.url, timeout=T)
        try:
            assert "DELAYED_DELIVERY" in (conn.conn.remote_offered_capabilities or [])
            r = conn.create_receiver("sched-proton", credit=10)
            s = conn.create_sender("sched-proton")
            sent = time.time()
            s.send(ProtonMessage(body="later", annotations={"x-opt-delivery-delay": 300}))
            s.send(ProtonMessage(body="first"))
            assert r.receive(timeout=T).body == "first"
            r.accept()
            assert r.receive(timeout=T).body == "later"
            assert time.time() - sent >= 0.3
            r.accept()
        finally:
            conn.close()
