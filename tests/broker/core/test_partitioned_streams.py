"""Partitioned streams: placed by partition key (crc32 mod N) or round robin, one offset
sequence per partition, each partition read by any client at ``<stream>/partition/<K>``."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

import amqp10
from amqp10 import errors
from amqp10.addresses import is_partition_address
from amqp10.broker.core.partitioned import partition_of_key
from amqp10.client import SettleMode
from amqp10.message import Message
from amqp10.types import Source, symbol
from tests.broker.conftest import broker_in_loop

pytestmark = pytest.mark.anyio

OFFSET = symbol("amqp10:stream-offset")
RULES = [
    {
        "pattern": "pev*",
        "kind": "stream",
        "policy": {"partitions": 3, "duplicate_window": 1000},
    }
]


def test_placement_and_addresses() -> None:
    assert partition_of_key("order-7", 4) == zlib.crc32(b"order-7") % 4
    assert is_partition_address("pev/partition/12")
    assert not is_partition_address("pev/partition/x") and not is_partition_address("pev")


async def read_partition(conn: Any, address: str) -> list[tuple[int, str]]:
    """Every (x-opt-offset, message-id) of one partition, from its first offset."""
    source = Source(address=address, filter={OFFSET: "first"}, capabilities=[symbol("stream")])
    rcv = await conn.open_receiver(
        address, source=source, credit=1000, settle_mode=SettleMode.AT_MOST_ONCE, timeout=10
    )
    out = []
    while True:
        with anyio.move_on_after(0.5) as scope:
            d = await rcv.receive()
        if scope.cancelled_caught:
            break
        m = d.message
        out.append((int(m.message_annotations["x-opt-offset"]), str(m.id)))
    await rcv.close(timeout=10)
    return out


async def stream_info(conn: Any, address: str) -> dict[str, int]:
    request = Message(application_properties={"operation": "stream-info", "address": address})
    reply = await conn.request("$management", request, timeout=10)
    return dict(reply.body)


@asynccontextmanager
async def connected(tmp_path: Path) -> AsyncIterator[Any]:
    """A connection to a broker with the partitioned rule and its store in ``tmp_path``."""
    async with (
        broker_in_loop(tmp_path, addresses=RULES) as service,
        await amqp10.connect(f"amqp://127.0.0.1:{service.ports[0]}") as conn,
    ):
        yield conn


def keyed(i: int) -> Message:
    return Message(body=i, id=f"k{i}", message_annotations={"x-opt-partition-key": f"key-{i % 5}"})


async def test_partitions_place_keep_offsets_and_survive_a_restart(tmp_path: Path) -> None:
    async with connected(tmp_path) as conn:
        snd = await conn.open_sender("pev", timeout=10)
        for i in range(30):
            await snd.send(keyed(i), timeout=10)
        for i in range(6):  # no key: round robin
            await snd.send(Message(body=i, id=f"r{i}"), timeout=10)
        await snd.send(Message(body=0, id="r0"), timeout=10)  # a resend: stored once

        parts = [await read_partition(conn, f"pev/partition/{k}") for k in range(3)]
        for k, got in enumerate(parts):
            # each partition its own offsets, from 0, without gaps
            assert [off for off, _ in got] == list(range(len(got)))
            keyed_ids = [mid for _, mid in got if mid.startswith("k")]
            want = [f"k{i}" for i in range(30) if partition_of_key(f"key-{i % 5}", 3) == k]
            assert keyed_ids == want, "a key's messages are on its partition, in order"
            assert [mid for _, mid in got if mid.startswith("r")] == [f"r{k}", f"r{k + 3}"]
        info = await stream_info(conn, "pev")
        assert (info["partitions"], info["count"]) == (3, 36) and info["bytes"] > 0
        info1 = await stream_info(conn, "pev/partition/1")
        assert info1 == {
            "first": 0,
            "next": len(parts[1]),
            "count": len(parts[1]),
            "bytes": info1["bytes"],
        }

        # the partitioned address itself is not read: the refusal names the partitions
        with pytest.raises(errors.LinkError, match="'pev' has 3 partitions: read one of them"):
            await conn.open_receiver("pev", timeout=10)

    async with connected(tmp_path) as conn:
        again = [await read_partition(conn, f"pev/partition/{k}") for k in range(3)]
        assert again == parts, "a restart restores every partition as it was"
        snd = await conn.open_sender("pev", timeout=10)
        await snd.send(keyed(30), timeout=10)
        await snd.send(Message(body=1, id="r1"), timeout=10)  # still a resend after the restart
        k = partition_of_key("key-0", 3)
        after = await read_partition(conn, f"pev/partition/{k}")
        assert after[-1] == (len(parts[k]), "k30"), "new offsets go on where the partition ended"
        assert (await stream_info(conn, "pev"))["count"] == 37
