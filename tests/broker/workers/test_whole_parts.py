"""The parts of the whole broker's management, in one process: the shared connection counts,
the control links between workers, the merge of the workers' metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from amqp10.broker.alarms import ResourceAlarms
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker
from amqp10.broker.guard import ConnectionGuard
from amqp10.broker.management import Forbidden, Management, NotFoundError
from amqp10.broker.workers import counters
from amqp10.broker.workers.control import ControlPoint, Unanswered, ask, control_path
from amqp10.broker.workers.counters import FILL, SharedCounts
from amqp10.broker.workers.ownership import Ownership
from amqp10.broker.workers.remote import RemoteNodes
from amqp10.broker.workers.whole import WholeBroker, merge_expositions


def views(tmp_path: Path, n: int = 3) -> list[SharedCounts]:
    counters.create(tmp_path, n)
    out = [SharedCounts.attach(tmp_path, n, k) for k in range(n)]
    assert all(v is not None for v in out)
    return [v for v in out if v is not None]


def test_each_worker_sees_the_others_counts(tmp_path: Path) -> None:
    a, b, c = views(tmp_path)
    a.publish_total(2)
    b.publish_total(5)
    a.publish_address("10.0.0.1", 2)
    b.publish_address("10.0.0.1", 1)
    b.publish_user("alice", 4)
    assert (a.total(), b.total(), c.total()) == (5, 2, 7)
    assert (a.address("10.0.0.1"), b.address("10.0.0.1"), c.address("10.0.0.1")) == (1, 2, 3)
    assert (a.user("alice"), c.user("alice"), c.user("bob"), c.address("10.0.0.2")) == (4, 4, 0, 0)
    b.publish_address("10.0.0.1", 0)
    assert c.address("10.0.0.1") == 2
    assert a.whole_rss(100) is not None
    assert c.whole_rss(10) == 110
    assert c.whole_rss(None) is None


def test_a_restarted_worker_starts_from_zero(tmp_path: Path) -> None:
    a, b, _ = views(tmp_path)
    b.publish_total(3)
    b.publish_user("alice", 3)
    again = SharedCounts.attach(tmp_path, 3, 1)  # worker 1's replacement
    assert again is not None
    assert (a.total(), a.user("alice")) == (0, 0)


def test_a_full_table_is_compacted_and_then_counts_locally(tmp_path: Path) -> None:
    a, b = views(tmp_path, 2)
    for i in range(FILL):
        a.publish_address(f"10.1.{i // 256}.{i % 256}", 1)
    for i in range(FILL // 2):
        a.publish_address(f"10.1.{i // 256}.{i % 256}", 0)  # closed: their slots can go
    a.publish_address("192.168.0.1", 1)  # compacts
    assert b.address("192.168.0.1") == 1
    assert b.address(f"10.1.{(FILL - 1) // 256}.{(FILL - 1) % 256}") == 1
    assert b.address("10.1.0.0") == 0
    for i in range(FILL):
        a.publish_address(f"172.16.{i // 256}.{i % 256}", 1)
    assert b.address("192.168.0.1") == 1  # what was counted stays counted
    assert b.address(f"172.16.{(FILL - 1) // 256}.{(FILL - 1) % 256}") == 0  # no room: counted locally


def test_no_file_counts_this_worker_only(tmp_path: Path) -> None:
    assert SharedCounts.attach(tmp_path, 2, 0) is None
    counters.create(tmp_path, 3)
    assert SharedCounts.attach(tmp_path, 2, 0) is None  # another size: another run's


def test_the_guard_counts_every_worker(tmp_path: Path) -> None:
    a, b = views(tmp_path, 2)
    config = BrokerConfig.model_validate({"security": {"max_connections_per_address": 3, "max_connections_per_user": 2}}).security
    guards = [ConnectionGuard(config), ConnectionGuard(config)]
    guards[0].elsewhere, guards[1].elsewhere = a, b
    assert guards[0].admit("10.0.0.1") is None
    assert guards[1].admit("10.0.0.1") is None
    assert guards[0].admit("10.0.0.1") is None
    refused = guards[1].admit("10.0.0.1")
    assert refused is not None and "3 connections" in refused.reason
    assert guards[1].counted_elsewhere() == 2 and guards[0].counted_elsewhere() == 1
    guards[0].release("10.0.0.1")
    assert guards[1].admit("10.0.0.1") is None
    assert guards[0].opened("alice") is None
    assert guards[1].opened("alice") is None
    assert guards[1].opened("alice") is not None
    guards[0].closed("alice")
    assert guards[1].opened("alice") is None


async def answering(op: str, args: Mapping[str, Any]) -> Any:
    if op == "echo":
        return {"args": dict(args)}
    if op == "refuse":
        raise Forbidden("no")
    if op == "slow":
        await asyncio.sleep(60)
    raise NotFoundError(op)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_workers_ask_each_other(tmp_path: Path) -> None:
    points = [ControlPoint(3, k, tmp_path, answering) for k in range(3)]
    async with anyio.create_task_group() as tg:
        for p in points[:2]:  # worker 2 is not running
            await tg.start(p.run)
        assert await points[0].ask_others("echo", {"x": [1, "y"]}) == {1: {"args": {"x": [1, "y"]}}}
        with pytest.raises(Forbidden, match="no"):
            await points[1].ask_others("refuse", {})
        with pytest.raises(Unanswered):
            await ask(control_path(tmp_path, 1), "test", "slow", {}, timeout=0.2)
        # garbage on a control link fails that link only
        reader, writer = await asyncio.open_unix_connection(str(control_path(tmp_path, 1)))
        writer.write(b"AMQP\x00\x01\x00\x00" + b"\xff" * 64)
        await writer.drain()
        with anyio.fail_after(10):
            await reader.read()  # closed by the worker
        writer.close()
        assert await points[0].ask_others("echo", {}) == {1: {"args": {}}}
        tg.cancel_scope.cancel()


def test_metrics_are_summed_with_process_series_per_worker() -> None:
    def text(connections: int, alarm: int, node: str, depth: int, rss: int) -> str:
        return (
            "# HELP amqp10_connections Open client connections\n# TYPE amqp10_connections gauge\n"
            f"amqp10_connections {connections}\n"
            "# HELP amqp10_resource_alarm alarm\n# TYPE amqp10_resource_alarm gauge\n"
            f"amqp10_resource_alarm {alarm}\n"
            "# HELP amqp10_frames_received Frames\n# TYPE amqp10_frames_received counter\n"
            f'amqp10_frames_received_total{{protocol="amqp1"}} {connections * 10}\n'
            "# HELP amqp10_node_messages Ready\n# TYPE amqp10_node_messages gauge\n"
            f'amqp10_node_messages{{kind="queue",node="{node}",vhost="/"}} {depth}\n'
            "# HELP process_resident_memory_bytes RSS\n# TYPE process_resident_memory_bytes gauge\n"
            f"process_resident_memory_bytes {rss}\n"
        )

    merged = merge_expositions({0: text(2, 0, "a", 3, 100), 1: text(5, 1, "b", 4, 200)}).decode().splitlines()
    assert "amqp10_connections 7.0" in merged
    assert "amqp10_resource_alarm 1.0" in merged
    assert 'amqp10_frames_received_total{protocol="amqp1"} 70.0' in merged
    assert 'amqp10_node_messages{kind="queue",node="a",vhost="/"} 3.0' in merged
    assert 'amqp10_node_messages{kind="queue",node="b",vhost="/"} 4.0' in merged
    assert 'process_resident_memory_bytes{worker="0"} 100.0' in merged
    assert 'process_resident_memory_bytes{worker="1"} 200.0' in merged


def test_the_limits_and_the_memory_alarm_count_every_worker(tmp_path: Path) -> None:
    config = BrokerConfig.model_validate({"limits": {"memory_high_watermark_bytes": 1000}})
    broker = Broker(config, now=lambda: 1000.0)
    guard = ConnectionGuard(config.security)
    alarms = ResourceAlarms(broker, config.limits, None)
    alarms.rss = lambda: 600
    counters.create(tmp_path, 2)
    WholeBroker(Management.of(broker), Ownership(2, 0), tmp_path).count_with(guard, alarms)
    assert guard.elsewhere is not None
    other = SharedCounts.attach(tmp_path, 2, 1)
    assert other is not None
    assert alarms.check() is None  # 600 of 1000 on this worker alone
    other.whole_rss(500)
    reason = alarms.check()
    assert reason is not None and reason.startswith("memory") and broker.alarm == reason
    other.publish_total(2)
    assert guard.counted_elsewhere() == 2


def test_the_memory_limit_counts_every_workers_queues_and_the_publishes_on_their_way(tmp_path: Path) -> None:
    config = BrokerConfig.model_validate({"limits": {"memory_limit_bytes": 4096}})
    broker = Broker(config, now=lambda: 1000.0)
    link = RemoteNodes("worker-0")
    counters.create(tmp_path, 2)
    WholeBroker(Management.of(broker), Ownership(2, 0), tmp_path).count_with(ConnectionGuard(config.security), None, {1: link})
    other = SharedCounts.attach(tmp_path, 2, 1)
    assert other is not None
    assert broker.memory_ok()
    assert other.whole_queued(3000) == 0  # (this worker's queues hold nothing)
    assert broker.memory_ok()
    link.sent_bytes = 2000  # sent to worker 1, not yet answered
    assert not broker.memory_ok()
    link.sent_bytes = 0
    other.whole_queued(5000)
    assert not broker.memory_ok()
    told: list[bool] = []

    class Publisher:
        def resource_counts(self) -> tuple[int, int]:
            return 0, 0

        def resource_alarm(self, raised: bool) -> None:
            told.append(raised)

    broker.connections.add(Publisher())
    broker.tick()
    assert told == []  # still over
    other.whole_queued(0)  # (its consumers took them)
    broker.tick()  # the publishers held back here are told, as when an alarm clears
    assert told == [False] and broker.memory_ok()
    broker.tick()
    assert told == [False]
