"""Partitioned streams through Spark: one input partition per stream partition, offsets and lag
per partition in the query's progress, per-partition JSON offsets, and the sink placing by key."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from amqp10.broker.core.partitioned import partition_of_key
from amqp10.message import Message
from amqp10.spark import lag

from .conftest import load

N = 90


def keyed(n: int) -> list[Message]:
    return [
        Message(body=f"m{i}", id=f"p-{i}", message_annotations={"x-opt-partition-key": f"k{i % 7}"})
        for i in range(n)
    ]


def by_partition(rows: list[Any]) -> dict[int, list[tuple[int, str]]]:
    out: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r.partition, r.offset)):
        out[r.partition].append((r.offset, r.body_string))
    return dict(out)


def got_sizes(seen: list[tuple[int, int]]) -> Counter[int]:
    return Counter(k for k, _ in seen)


def partition_sizes(sizes: Counter[int]) -> dict[str, int]:
    return {str(k): sizes[k] for k in sorted(sizes)}


def test_batch_reads_by_partition(spark: Any, url: str, publish: Any) -> None:
    publish("parts-read", keyed(N))
    df = load(spark.read, url, "parts-read", columns="partition,offset,body_string")
    assert df.rdd.getNumPartitions() == 3, "one Spark partition per stream partition"
    got = by_partition(df.collect())
    assert sorted(got) == [0, 1, 2]
    for k, rows in got.items():
        assert [o for o, _ in rows] == list(range(len(rows))), "each partition its own offsets"
        bodies = [b for _, b in rows]
        assert bodies == [f"m{i}" for i in range(N) if partition_of_key(f"k{i % 7}", 3) == k]
    split = load(spark.read, url, "parts-read", minPartitions="8")
    assert split.rdd.getNumPartitions() >= 8 and split.count() == N

    some = load(
        spark.read,
        url,
        "parts-read",
        startingOffsets='{"parts-read": {"0": 2, "2": -1}}',
        endingOffsets='{"parts-read": {"1": 3}}',
    ).collect()
    part = by_partition(some)
    assert [o for o, _ in part[0]] == list(range(2, len(got[0])))
    assert [o for o, _ in part[1]] == [0, 1, 2]
    assert 2 not in part, "partition 2 starts at its end (-1, latest)"


def test_streaming_progress_has_offsets_and_lag_per_partition(
    spark: Any, url: str, publish: Any, checkpoint: Path
) -> None:
    publish("parts-stream", keyed(N))
    seen: list[tuple[int, int]] = []

    def collect(df: Any, _batch: int) -> None:
        seen.extend((r.partition, r.offset) for r in df.select("partition", "offset").collect())

    query = (
        load(
            spark.readStream,
            url,
            "parts-stream",
            startingOffsets="earliest",
            maxOffsetsPerTrigger="30",
        )
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(240)
    assert len(seen) == N and len(set(seen)) == N
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    assert len(progress) == 3, "90 messages in batches of 30"
    first = progress[0]["sources"][0]
    # a Python source's offsets are in the progress as JSON text
    ends = json.loads(first["endOffset"])["parts-stream"]
    assert set(ends) == {"0", "1", "2"} and sum(ends.values()) == 30, first
    assert json.loads(first["latestOffset"]) == {"parts-stream": partition_sizes(got_sizes(seen))}
    assert sum(lag(progress[0])["parts-stream"].values()) == N - 30
    assert sum(lag(progress[-1])["parts-stream"].values()) == 0


def test_the_sink_places_by_partition_key(spark: Any, url: str) -> None:
    rows = [(f"w{i}", {"x-opt-partition-key": f"k{i % 4}"}) for i in range(40)]
    df = spark.createDataFrame(rows, "body STRING, message_annotations MAP<STRING,STRING>")
    df.write.format("amqp10").option("url", url).option("address", "parts-write").option(
        "mode", "stream"
    ).mode("append").save()
    got = by_partition(load(spark.read, url, "parts-write").collect())
    for k, part in got.items():
        keys = {int(b[1:]) % 4 for _, b in part}
        assert all(partition_of_key(f"k{key}", 3) == k for key in keys)
    assert sum(len(p) for p in got.values()) == 40
