"""The typed schema, column choice and the Kafka-source options, read through Spark."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from amqp10.message import Message
from amqp10.spark import body_json, body_text

from .conftest import load, numbered


def read(spark: Any, url: str, address: str, **options: str) -> Any:
    return load(spark.read, url, address, **options)


def test_typed_columns(spark: Any, url: str, publish: Any) -> None:
    m = Message(
        body='{"id": 7, "region": "eu"}',
        id=uuid.UUID(int=5),
        correlation_id=42,
        subject="order",
        content_type="application/json",
        user_id=b"ann",
        group_id="g",
        group_sequence=3,
        creation_time=1_700_000_000.25,
    )
    m.application_properties = {"n": 3, "ok": True, "who": "x"}
    before = dt.datetime.now()
    publish("events-typed", [m, Message([b"\xff\x00"], body_type="data")])
    df = read(spark, url, "events-typed")
    assert df.columns[:4] == ["address", "partition", "offset", "timestamp"]
    r, raw = df.orderBy("offset").collect()
    assert (r.address, r.partition, r.offset) == ("events-typed", 0, 0)
    # the broker's clock; Spark gives timestamps as naive local time
    assert before - dt.timedelta(seconds=5) <= r.timestamp <= dt.datetime.now()
    p = r.properties
    assert p.message_id == "00000000-0000-0000-0000-000000000005"
    assert p.correlation_id == "42" and p.subject == "order" and p.user_id == bytearray(b"ann")
    assert p.content_type == "application/json" and p.to is None
    assert (p.group_id, p.group_sequence) == ("g", 3)
    assert p.creation_time == dt.datetime.fromtimestamp(1_700_000_000.25)
    assert r.application_properties == {"n": "3", "ok": "true", "who": "x"}
    assert raw.body == bytearray(b"\xff\x00") and raw.body_string is None

    parsed = df.orderBy("offset").select(
        body_json("id LONG, region STRING").alias("o"), body_text().alias("t")
    )
    rows = parsed.collect()
    assert [(x.o.id, x.o.region) for x in rows] == [(7, "eu"), (None, None)]  # not JSON: nulls
    assert rows[0].t == '{"id": 7, "region": "eu"}'

    variant = read(spark, url, "events-typed", mapValues="variant", endingOffsets="1")
    got = variant.selectExpr(
        "variant_get(application_properties['n'], '$', 'int') AS n",
        "variant_get(application_properties['ok'], '$', 'boolean') AS ok",
        "variant_get(application_properties['who'], '$', 'string') AS who",
    ).collect()
    assert [tuple(g) for g in got] == [(3, True, "x")]
    given = (
        spark.read.format("amqp10")
        .schema("offset BIGINT, application_properties MAP<STRING, VARIANT>")
        .option("url", url)
        .option("address", "events-typed")
        .option("endingOffsets", "1")
        .load()
    )
    assert given.selectExpr("variant_get(application_properties['n'], '$', 'int')").first()[0] == 3

    legacy = read(spark, url, "events-typed", legacySchema="true").orderBy("offset").first()
    assert legacy.properties["message-id"] == "00000000-0000-0000-0000-000000000005"
    assert "address" not in legacy.asDict()


def test_columns_and_a_given_schema_choose_what_is_read(spark: Any, url: str, publish: Any) -> None:
    publish("events-cols", numbered(20))
    df = read(spark, url, "events-cols", columns="offset, body_string")
    assert df.columns == ["offset", "body_string"]
    assert sorted((r.offset, r.body_string) for r in df.collect()) == [
        (i, f"m{i}") for i in range(20)
    ]
    given = (
        spark.read.format("amqp10")
        .schema("offset BIGINT, properties MAP<STRING, STRING>")
        .option("url", url)
        .option("address", "events-cols")
        .load()
    )
    assert given.filter("offset = 3").first().properties == {"message-id": "m-3"}
    with pytest.raises(Exception, match="no column 'key' to read"):
        read(spark, url, "events-cols", columns="offset,key").collect()
    with pytest.raises(Exception, match="column 'offset' must be bigint, not string"):
        spark.read.format("amqp10").schema("offset STRING").option("url", url).option(
            "address", "events-cols"
        ).load().collect()


def test_kafka_offsets_and_timestamp(spark: Any, url: str, publish: Any) -> None:
    publish("events-kafka", numbered(10))
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    publish("events-kafka", numbered(5, start=10))

    def offsets(**options: str) -> list[int]:
        return sorted(r.offset for r in read(spark, url, "events-kafka", **options).collect())

    assert offsets(
        startingOffsets='{"events-kafka":{"0":3}}', endingOffsets='{"events-kafka":{"0":6}}'
    ) == [3, 4, 5]
    assert offsets(startingOffsets='{"events-kafka":{"0":-2}}', endingOffsets="2") == [0, 1]
    assert offsets(startingOffsets="latest") == []
    assert offsets(startingTimestamp=str(cut)) == list(range(10, 15))
    assert offsets(startingTimestamp=str(cut + 3_600_000)) == []
    with pytest.raises(Exception, match="names 'other', but the address is 'events-kafka'"):
        offsets(startingOffsets='{"other":{"0":1}}')

    # a streaming query starts at the timestamp too, and takes the Kafka name for its limit
    q = (
        load(
            spark.readStream,
            url,
            "events-kafka",
            startingTimestamp=str(cut),
            maxOffsetsPerTrigger="2",
            columns="offset",
        )
        .writeStream.format("memory")
        .queryName("from_timestamp")
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(120)
    assert sorted(r.offset for r in spark.table("from_timestamp").collect()) == list(range(10, 15))
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [2, 2, 1]


def test_fail_on_data_loss(spark: Any, url: str, publish: Any, tmp_path: Path) -> None:
    # "retained*" streams keep about 2,000 bytes: the first messages are gone
    publish("retained-loss", numbered(200))
    with pytest.raises(Exception, match=r"offsets \[0, \d+\) are no longer retained"):
        read(spark, url, "retained-loss", startingOffsets="0").collect()
    rows = read(spark, url, "retained-loss", startingOffsets="0", failOnDataLoss="false")
    got = sorted(r.offset for r in rows.collect())
    assert got and got[-1] == 199 and got[0] > 0
    assert got == list(range(got[0], 200))


def test_exactly_once_refuses_a_queue(spark: Any, url: str, publish: Any) -> None:
    publish("orders-eo", numbered(3))
    with pytest.raises(Exception, match="is a queue, read at least once") as info:
        spark.readStream.format("amqp10").option("url", url).option("address", "orders-eo").option(
            "exactlyOnce", "true"
        ).load().writeStream.format("noop").start().awaitTermination(60)
    line = next(x for x in str(info.value).splitlines() if "read at least once" in x)
    assert "exactlyOnce=true" in line
    assert read(spark, url, "orders-eo").count() == 3  # without the promise, a queue reads
