"""Resource alarms (amqp10/broker/alarms.py): the memory high-watermark and the disk free
limit block publishers — 1.0: credit taken back (our client and Proton), 0-9-1:
connection.blocked (pika) — and let them go once back under. The readings are set by
the test (``service.alarms.rss`` / ``disk_free``) and checked in the broker's loop."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pika
import pytest
from proton import Message as PMessage
from proton import Timeout
from proton.utils import BlockingConnection

from amqp10 import errors
from amqp10.broker.alarms import ResourceAlarms, default_disk_free_limit
from amqp10.client import connect
from amqp10.message import Message
from amqp10.types import Accepted

from .conftest import RunningBroker, broker_with

T = 10.0
QUIET = 0.5
GiB = 1024**3


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


LIMITS = {"memory_high_watermark_bytes": GiB, "disk_free_limit_bytes": GiB, "credit_window": 5}


def set_readings(b: RunningBroker, *, rss: int = 1, free: int = 10 * GiB) -> str | None:
    """Give the alarms these readings and check them now, in the broker's loop."""
    alarms = b.service.alarms
    assert alarms is not None

    def check() -> str | None:
        alarms.rss = lambda: rss
        alarms.disk_free = lambda: free
        return alarms.check()

    reason: str | None = b.portal.call(check)
    return reason


async def until(predicate: Callable[[], bool]) -> None:
    """Wait until ``predicate()`` holds (checked every 20 ms, at most T seconds): a flow
    that only changes a link's credit is not an event the client signals."""
    with anyio.fail_after(T):
        while not predicate():
            await anyio.sleep(0.02)


async def in_broker(b: RunningBroker, fn: Callable[[], Any]) -> Any:
    return await anyio.to_thread.run_sync(b.portal.call, fn)


@pytest.mark.anyio
@pytest.mark.parametrize("reading", [{"rss": 2 * GiB}, {"free": GiB // 2}], ids=["memory", "disk"])
async def test_our_publisher_has_no_credit_during_an_alarm(
    tmp_path: Path, reading: dict[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="amqp10.broker")
    with broker_with(tmp_path, limits=LIMITS) as b:
        set_readings(b)
        async with await connect(f"amqp://{b.url}", timeout=T) as conn:
            sender = await conn.open_sender("alarmed")
            assert isinstance(await sender.send(Message(body=b"before"), timeout=T), Accepted)
            reason = await anyio.to_thread.run_sync(lambda: set_readings(b, **reading))
            assert reason is not None and reason.startswith("memory" if "rss" in reading else "disk")
            await until(lambda: sender.credit == 0)  # the broker's flow took it back
            with pytest.raises(errors.TimeoutError, match="no credit"):
                await sender.send(Message(body=b"withheld"), timeout=QUIET)
            assert any("resource alarm" in r.getMessage() and "publishers are blocked" in r.getMessage() for r in caplog.records)
            await anyio.to_thread.run_sync(lambda: set_readings(b))
            assert isinstance(await sender.send(Message(body=b"after"), timeout=T), Accepted)
            assert any("resource alarm cleared" in r.getMessage() for r in caplog.records)
        assert await in_broker(b, lambda: b.broker.nodes["alarmed"].count) == 2


def test_proton_publisher_waits_out_an_alarm(tmp_path: Path) -> None:
    with broker_with(tmp_path, limits=LIMITS) as b:
        set_readings(b)
        conn = BlockingConnection(b.url, timeout=T)
        try:
            snd = conn.create_sender("alarmed")
            snd.send(PMessage(body="before"))
            set_readings(b, rss=2 * GiB)
            conn.wait(lambda: snd.link.credit == 0, timeout=T)
            with pytest.raises(Timeout):
                snd.send(PMessage(body="withheld"), timeout=QUIET)
            set_readings(b)
            conn.wait(lambda: snd.link.credit > 0, timeout=T)
            snd.send(PMessage(body="after"))
            rcv = conn.create_receiver("alarmed", credit=10)
            bodies = [rcv.receive(timeout=T).body for _ in range(3)]
            rcv.accept()
            assert bodies == ["before", "withheld", "after"]  # the withheld one went once credit came back
        finally:
            conn.close()


def test_pika_sees_connection_blocked_and_unblocked(tmp_path: Path) -> None:
    with broker_with(tmp_path, limits=LIMITS) as b:
        set_readings(b)
        publisher = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port, blocked_connection_timeout=T))
        try:
            events: list[str] = []
            publisher.add_on_connection_blocked_callback(lambda c, f: events.append("blocked:" + f.method.reason))
            publisher.add_on_connection_unblocked_callback(lambda c, f: events.append("unblocked"))
            ch = publisher.channel()
            ch.queue_declare("alarmed091")
            set_readings(b, free=1)
            ch.basic_publish("", "alarmed091", b"one")  # the publish that meets the alarm
            wait_until(publisher, lambda: len(events) == 1)
            assert events[0].startswith("blocked:")
            set_readings(b)
            wait_until(publisher, lambda: events[-1] == "unblocked")
            ch.basic_publish("", "alarmed091", b"two")
            assert ch.queue_declare("alarmed091", passive=True).method.message_count == 2
        finally:
            publisher.close()


def wait_until(conn: pika.BlockingConnection, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + T
    while not done():
        assert time.monotonic() < deadline, "timed out"
        conn.process_data_events(time_limit=0.05)


def test_alarm_limits_default_relative_to_the_machine(tmp_path: Path) -> None:
    from amqp10.broker.config import BrokerConfig, Limits
    from amqp10.broker.core import Broker

    alarms = ResourceAlarms(Broker(BrokerConfig()), Limits(), tmp_path)
    assert alarms.memory_limit is not None and alarms.memory_limit > 0  # 0.4 of the machine
    assert 50 * 2**20 <= alarms.disk_limit == default_disk_free_limit(tmp_path) <= 2**30
    assert ResourceAlarms(Broker(BrokerConfig()), Limits(), None).disk_limit == 0  # no local store: no disk alarm
    alarms.rss = lambda: 1
    alarms.disk_free = lambda: 2**40
    assert alarms.check() is None
