"""The metadata log compacted (``amqp10.broker.workers.compaction``): a worker catches up
to the same metadata from the compacted log as from the whole one, whether it applied
less than the snapshot (down across the compaction) or more. In one process: the
parent's :class:`Sequencer` and workers' :class:`SharedMetadata` over real Unix sockets
(``test_metadata_order.py``'s). Every wait is bounded; none is timed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker, RuntimePolicy
from amqp10.broker.workers import metadata
from amqp10.broker.workers.compaction import compacted
from amqp10.broker.workers.metadata import MetadataLog, SharedMetadata, apply_change
from amqp10.broker.workers.ownership import Ownership
from amqp10.broker.workers.placing import apply_placement
from tests.broker.workers.test_metadata_order import WAIT, answered, sequenced

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def shown(broker: Broker) -> dict[str, Any]:
    """What metadata ``broker`` holds, comparably."""
    v = broker.default
    return {
        "exchanges": {n: x.type for n, x in v.exchanges.items()},
        "nodes": sorted(v.nodes),
        "bindings": sorted(
            (n, b.destination.name, b.key) for n, x in v.exchanges.items() for b in x.bindings.values()
        ),
        "policies": {n: dict(p.definition) for n, p in v.policies.items()},
    }


@asynccontextmanager
async def serving(directory: Path, brokers: dict[int, Broker]) -> AsyncIterator[None]:
    """Workers ``brokers`` (index -> its core, kept across restarts as a store keeps it),
    each caught up and taking part in the order."""
    async with anyio.create_task_group() as tg:
        for k, b in brokers.items():
            await tg.start(SharedMetadata(b, k, directory / "workers").run)
        yield
        tg.cancel_scope.cancel()


def history(v: Any) -> None:
    """Changes that a compaction folds: deleted, declared again, redeclared, replaced."""
    v.declare_queue("orders")  # declared again below: its old binding must not come back
    v.bind("events", "orders", "new")
    v.delete_node("orders")
    v.declare_queue("orders")
    v.bind("events", "orders", "paid")
    v.delete_node("gone")  # deleted: its binding with it
    v.unbind("events", "kept", "k1")
    v.declare_policy(RuntimePolicy("limit", "^kept$", "queues", {"max-length": 7}))
    for _ in range(20):
        v.declare_exchange("events", "topic")  # equivalent again: nothing to keep
    v.declare_exchange("later", "fanout")


async def test_a_worker_down_across_a_compaction_catches_up_from_the_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metadata, "COMPACT_AFTER", 1)  # compact whenever the log has doubled
    b0, b1 = Broker(BrokerConfig()), Broker(BrokerConfig())
    with anyio.fail_after(WAIT):
        async with sequenced(tmp_path) as seq:
            async with serving(tmp_path, {0: b0, 1: b1}):
                v = b0.default
                v.declare_exchange("events", "topic")
                for name in ("kept", "gone"):
                    v.declare_queue(name)
                v.bind("events", "kept", "k1")
                v.bind("events", "kept", "k2")
                v.bind("events", "gone", "g")
                v.declare_policy(RuntimePolicy("limit", "^kept$", "queues", {"max-length": 5}))
                await answered(b0)
            down_at = int((tmp_path / "workers" / "1.applied").read_text())
            async with serving(tmp_path, {0: b0}):  # worker 1 is down
                history(b0.default)
                await answered(b0)
            assert seq.log.snapshot > down_at  # compacted while worker 1 was down
            assert len(seq.log.after(0)) < seq.log.last()  # and it left changes out
            async with serving(tmp_path, {0: b0, 1: b1}):  # worker 1 back, with its core
                assert shown(b1) == shown(b0)
                assert ("events", "orders", "new") not in shown(b1)["bindings"]
                assert "gone" not in shown(b1)["nodes"]
                assert shown(b1)["policies"] == {"limit": {"max-length": 7}}
                fresh = Broker(BrokerConfig())
            async with serving(tmp_path, {2: fresh}):  # a worker with nothing applied
                assert shown(fresh) == shown(b0)
    async with sequenced(tmp_path) as again:  # the parent restarted: its copy from the compacted log
        assert shown(again.mirror) == shown(b0)


def made(target: Broker, placed: Ownership, vhost: str, change: tuple[Any, ...]) -> None:
    """``change`` made as a worker makes it: a placement in its table, else in its core."""
    if not apply_placement(placed, vhost, change):
        apply_change(target, vhost, change, check=False)


class Recorder:
    """A metadata port that keeps the changes the core tells it, in order."""

    def __init__(self, changes: list[tuple[Any, ...]]) -> None:
        self.changes = changes

    def changed(self, vhost: str, change: tuple[Any, ...]) -> None:
        self.changes.append(change)

    def hold(self, answer: Any) -> bool:
        return False


def test_compaction_keeps_a_sub_sequence_that_gives_every_catch_up_the_same_metadata(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path / "metadata.sqlite3")
    maker = Broker(BrokerConfig())
    changes: list[tuple[Any, ...]] = []
    maker.metadata = Recorder(changes)
    v = maker.default
    v.declare_exchange("events", "topic")
    for name in ("kept", "gone"):
        v.declare_queue(name)
    v.bind("events", "kept", "k1")
    v.bind("events", "gone", "g")
    history(v)
    for change in changes:
        log.append("/", change)
    log.append("/", changes[0])  # declared again (by two workers at once): the first stands
    for change in (  # placements of exclusive queues (placing.py) and 1.0 topics among them
        ("place", "ex1", 1),
        ("place", "ex2", 0),
        ("topic", "prices"),
        ("unplace", "ex1"),
        ("place", "ex3", 1),
        ("place", "ex1", 0),
        ("unplace-worker", 1),
        ("place", "ex4", 1),
        ("topic", "prices"),
    ):
        log.append("/", change)
    whole = log.after(0)
    log.compact()
    kept = log.after(0)
    by_number = {r[0]: r for r in whole}
    assert all(by_number[r[0]] == r for r in kept) and len(kept) < len(whole)  # a sub-sequence
    assert kept == compacted(whole) and whole[-1] not in kept
    for applied in range(len(whole) + 1):  # a worker that applied up to each number
        from_whole, from_kept = Broker(BrokerConfig()), Broker(BrokerConfig())
        placed_whole, placed_kept = Ownership(2), Ownership(2)
        for target, placed in ((from_whole, placed_whole), (from_kept, placed_kept)):
            for seq, vhost, change in whole:
                if seq <= applied:
                    made(target, placed, vhost, change)
        for target, placed, rows in ((from_whole, placed_whole, whole), (from_kept, placed_kept, kept)):
            for seq, vhost, change in rows:
                if seq > applied:
                    made(target, placed, vhost, change)
        assert shown(from_kept) == shown(from_whole), applied
        assert placed_kept.placed() == placed_whole.placed(), applied
    n = log.append("/", ("exchange", "after", "direct", True, False, False, None, {}))
    assert n == whole[-1][0] + 1  # numbers go on after the compacted ones
    log.close()
    assert MetadataLog(tmp_path / "metadata.sqlite3").snapshot == whole[-1][0]
