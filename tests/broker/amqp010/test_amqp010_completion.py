"""When a 0-10 transfer completes: a durable one only once the store has it (while the
broker's store commits are held, later commands complete and the transfer does not), and
none while a resource alarm is raised (flow control: a sender stalls at its capacity)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amqp10.broker.core import store
from tests.amqp010.peer import SocketPeer, struct
from tests.broker.conftest import RunningBroker, broker_with, held_commits


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_with(tmp_path) as b:
        yield b


def completed(p: SocketPeer, cid: int) -> set[int]:
    """Read until a ``session.completed`` covers ``cid``; every id it says is completed."""
    deadline = time.monotonic() + p.timeout
    while True:
        for _, c in p.take("session.completed"):
            ids = {i for lo, hi in c.get("commands", ()) for i in range(lo, hi + 1)}
            if cid in ids:
                return ids
        assert time.monotonic() < deadline, f"command {cid} not completed; got {p.names()}"
        p.sock.settimeout(max(deadline - time.monotonic(), 0.01))
        data = p.sock.recv(65536)
        assert data, "the connection ended"
        p.feed(data)


def test_a_durable_transfer_completes_after_the_store_commit(broker: RunningBroker) -> None:
    p = SocketPeer(broker.port)
    p.attach()
    p.call("queue.declare", queue="dq", durable=True)
    headers = [
        struct("delivery-properties", routing_key="dq", delivery_mode=2),
        struct("message-properties"),
    ]
    with held_commits(broker) as reached:
        transfer = p.command(
            "message.transfer",
            destination="",
            accept_mode=1,
            acquire_mode=0,
            headers=headers,
            body=b"safe",
        )
        query = p.command("queue.query", queue="dq")
        p.flush()
        reached(lambda ops: any(op[0] == store.PUT for op in ops))
        assert transfer not in completed(p, query)  # the query done, the transfer not yet
    assert transfer in completed(p, transfer)  # the commit made: now it is
    p.close()


GiB = 1024**3


def set_readings(b: RunningBroker, *, rss: int = 1, free: int = 10 * GiB) -> str | None:
    """Give the broker's resource alarms these readings and check them, in its loop."""
    alarms = b.service.alarms
    assert alarms is not None

    def check() -> str | None:
        alarms.rss = lambda: rss
        alarms.disk_free = lambda: free
        return alarms.check()

    reason: str | None = b.portal.call(check)
    return reason


def test_transfers_are_not_completed_during_a_resource_alarm(tmp_path: Path) -> None:
    limits = {"memory_high_watermark_bytes": GiB, "disk_free_limit_bytes": GiB}
    with broker_with(tmp_path, limits=limits) as b:
        p = SocketPeer(b.port)
        p.attach()
        p.call("queue.declare", queue="aq")
        assert set_readings(b, rss=2 * GiB) is not None  # the memory alarm
        headers = [struct("delivery-properties", routing_key="aq")]
        transfer = p.command(
            "message.transfer",
            destination="",
            accept_mode=1,
            acquire_mode=0,
            headers=headers,
            body=b"x",
        )
        query = p.command("queue.query", queue="aq")
        p.flush()
        assert transfer not in completed(p, query)  # the later command completed, not the transfer
        assert set_readings(b) is None  # cleared
        assert transfer in completed(p, transfer)
        p.close()
