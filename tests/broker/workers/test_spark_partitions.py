"""Spark reads a partitioned stream whose partitions two worker processes own, in parallel
(``amqp10 broker --workers 2``, a local Spark session as tests/spark starts one): each
partition's reader gets that partition's messages, in order, from whichever worker its
connection landed on."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from amqp10.types import Accepted
from tests.broker.test_workers import Parent

from .test_processes import one_on_each
from .test_streams import PARTITIONS, keyed, partition_owners, partitioned, placed

pytest.importorskip("pyspark")  # (amqp10.spark needs it to import)
from tests.spark.conftest import load

pytestmark = [pytest.mark.slow]

__all__ = ["partitioned"]  # (the fixture, used here)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    import amqp10.spark

    session = amqp10.spark.local_session("amqp10-workers")
    yield session
    session.stop()


def test_spark_reads_partitions_of_different_owners_each_in_order(partitioned: Parent, spark: Any) -> None:
    name = next(f"parts-{i}" for i in range(100) if len(set(partition_owners(f"parts-{i}"))) == 2)
    sent = keyed(60, "m")

    async def publish() -> None:
        async with one_on_each(partitioned) as conns:
            for w in (0, 1):  # half from each worker
                sender = await conns[w].open_sender(name)
                for m in sent[w * 30 : (w + 1) * 30]:
                    assert isinstance(await sender.send(m), Accepted)

    anyio.run(publish, backend="asyncio")
    want = placed(sent)
    df = load(spark.read, f"amqp://127.0.0.1:{partitioned.port}", name, columns="partition,offset,body_string")
    assert df.rdd.getNumPartitions() == PARTITIONS  # one Spark partition (a reader) per stream partition
    got: dict[int, list[tuple[int, Any]]] = defaultdict(list)
    for r in sorted(df.collect(), key=lambda r: (r.partition, r.offset)):
        got[r.partition].append((r.offset, r.body_string))
    for k in range(PARTITIONS):
        assert [o for o, _ in got[k]] == list(range(len(want[k])))  # its own offsets, from 0
        assert [b for _, b in got[k]] == want[k]  # its messages, in order
