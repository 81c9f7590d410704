"""Writing with Spark: rows become messages, published at least once, landing once."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from .conftest import node_count, numbered


def read_queue(spark: Any, url: str, address: str) -> list[Any]:
    return (
        spark.read.format("amqp10").option("url", url).option("address", address).load().collect()
    )


def test_batch_write_round_trip_and_rerun_with_write_id(spark: Any, url: str, broker: Any) -> None:
    rows = [
        (
            f"body-{i}",
            {"correlation-id": f"c{i}", "content-type": "text/plain"},
            {"tenant": "t1" if i % 2 else "t2"},
            f"subject-{i}",
            i % 2 == 0,
            dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC),
        )
        for i in range(40)
    ]
    df = spark.createDataFrame(
        rows,
        "body STRING, properties MAP<STRING,STRING>, application_properties MAP<STRING,STRING>, "
        "subject STRING, durable BOOLEAN, creation_time TIMESTAMP",
    ).repartition(3)

    def save(**options: str) -> None:
        writer = (
            df.write.format("amqp10")
            .option("url", url)
            .option("address", "dedup-batch")
            .mode("append")
        )
        for k, v in options.items():
            writer = writer.option(k, v)
        writer.save()

    save(writeId="load-1")
    got = {r.body_string: r for r in read_queue(spark, url, "dedup-batch")}
    assert sorted(got) == sorted(f"body-{i}" for i in range(40))
    r7 = got["body-7"]
    assert r7.properties.correlation_id == "c7"
    assert r7.properties.content_type == "text/plain"
    assert r7.properties.subject == "subject-7"
    assert r7.properties.message_id.startswith("load-1:")
    assert r7.application_properties == {"tenant": "t1"}
    assert r7.durable is False and got["body-8"].durable is True
    # Spark hands timestamps to Python as naive local time
    assert r7.creation_time == dt.datetime.fromtimestamp(
        dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC).timestamp()
    )
    assert len({r.properties.message_id for r in got.values()}) == 40

    save(writeId="load-1")  # the same job again: the same message-ids, dropped as duplicates
    assert node_count(broker, "dedup-batch") == 40
    save()  # a new write: new ids
    assert node_count(broker, "dedup-batch") == 80

    # mode=stream asks for a stream node when the address is new
    df.write.format("amqp10").option("url", url).option("address", "log-new").option(
        "mode", "stream"
    ).mode("append").save()
    offsets = spark.read.format("amqp10").option("url", url).option("address", "log-new").load()
    assert sorted(r.offset for r in offsets.collect()) == list(range(40))


def test_write_stream_replayed_batch_lands_once(
    spark: Any, url: str, publish: Any, broker: Any, checkpoint: Path
) -> None:
    """A batch the sink published but Spark did not commit is sent again, and stored once."""
    publish("events-to-queue", numbered(200, "e"))

    def start() -> Any:
        return (
            spark.readStream.format("amqp10")
            .option("url", url)
            .option("address", "events-to-queue")
            .option("startingOffset", "first")
            .option("maxMessagesPerBatch", "50")
            .load()
            .selectExpr(
                "body_string AS body",
                "map('source-offset', CAST(offset AS STRING)) AS application_properties",
            )
            .writeStream.format("amqp10")
            .option("url", url)
            .option("address", "dedup-out")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )

    q = start()
    assert q.awaitTermination(120)
    assert [p["batchId"] for p in q.recentProgress] == [0, 1, 2, 3]
    assert node_count(broker, "dedup-out") == 200

    # the driver "died" after the sink published batch 3 and before Spark logged it as done
    (checkpoint / "commits" / "3").unlink()
    (checkpoint / "commits" / ".3.crc").unlink(missing_ok=True)
    q = start()
    assert q.awaitTermination(120)
    replay = [p for p in q.recentProgress if p["batchId"] == 3]
    assert replay and replay[0]["numInputRows"] == 50  # batch 3 ran (and published) again
    assert node_count(broker, "dedup-out") == 200

    rows = read_queue(spark, url, "dedup-out")
    assert sorted(r.body_string for r in rows) == sorted(f"e{i}" for i in range(200))
    assert sorted(int(r.application_properties["source-offset"]) for r in rows) == list(range(200))
    ids = [r.properties.message_id for r in rows]
    assert len(set(ids)) == 200
    query_id = q.id
    assert all(i.startswith(f"{query_id}:") for i in ids)  # <query id>:<batch>:<partition>:<row>
