"""Reading with Spark: batch reads of streams and queues, streaming reads of both."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from amqp10.broker.config import AddressRule, BrokerConfig, Listener, SaslConfig, StoreConfig
from amqp10.broker.core import Queue
from amqp10.broker.users import add_user
from amqp10.spark._client import BrokerClient
from amqp10.spark.options import SourceOptions
from tests.broker.conftest import start_broker
from tests.client.helpers import make_certs

from .conftest import load, node_count, numbered, wait_for


def stream_reader(spark: Any, url: str, address: str, **options: str) -> Any:
    return load(spark.readStream, url, address, **options)


def test_batch_read_of_a_stream_by_offset_range(spark: Any, url: str, publish: Any) -> None:
    publish("events-batch", numbered(250))
    df = (
        spark.read.format("amqp10")
        .option("url", url)
        .option("address", "events-batch")
        .option("messagesPerPartition", "100")
        .load()
    )
    assert df.rdd.getNumPartitions() == 3  # [0,100) [100,200) [200,250)
    rows = df.select("offset", "body_string", "properties", "message_annotations").collect()
    assert sorted(r.offset for r in rows) == list(range(250))
    for r in rows:
        assert r.body_string == f"m{r.offset}"
        assert r.properties.message_id == f"m-{r.offset}"
        assert r.message_annotations["x-opt-offset"] == str(r.offset)
        assert int(r.message_annotations["x-opt-timestamp"]) > 0

    window = (
        spark.read.format("amqp10")
        .option("url", url)
        .option("address", "events-batch")
        .option("startingOffset", "40")
        .option("endingOffset", "45")
        .load()
    )
    assert [r.offset for r in window.orderBy("offset").collect()] == [40, 41, 42, 43, 44]
    last = spark.read.format("amqp10").option("url", url).option("address", "events-batch")
    assert [r.offset for r in last.option("startingOffset", "last").load().collect()] == [249]


def test_batch_read_of_a_queue_browses(spark: Any, url: str, publish: Any, broker: Any) -> None:
    publish("orders-browse", numbered(30, "o"))
    df = spark.read.format("amqp10").option("url", url).option("address", "orders-browse").load()
    rows = df.collect()
    assert sorted(r.body_string for r in rows) == sorted(f"o{i}" for i in range(30))
    assert {r.offset for r in rows} == {None}
    assert node_count(broker, "orders-browse") == 30  # browsing takes nothing
    with pytest.raises(Exception, match="apply to streams"):
        spark.read.format("amqp10").option("url", url).option("address", "orders-browse").option(
            "startingOffset", "first"
        ).load().collect()


def test_batch_read_of_a_paged_queue_sees_every_message(spark: Any, tmp_path: Path) -> None:
    """A queue past its memory budget keeps most messages in the store only; the browse
    reads them back in order (it once saw only the in-memory part)."""
    config = BrokerConfig(
        listeners=[Listener(host="127.0.0.1", port=0)],
        store=StoreConfig(path=tmp_path / "store.sqlite3", commit_interval_ms=1),
        limits={"queue_memory_budget_bytes": 64 * 1024},
    )
    n = 2000  # about 150 of them fit in memory
    for b in start_broker(config):
        url = f"amqp://127.0.0.1:{b.port}"
        with BrokerClient(SourceOptions.parse({"url": url, "address": "paged"})) as client:
            client.publish("paged", [m.encode() for m in numbered(n, "p")])
        node = b.broker.default.nodes["paged"]
        assert isinstance(node, Queue) and node.pager is not None and node.pager.count > n // 2
        df = spark.read.format("amqp10").option("url", url).option("address", "paged").load()
        assert [r.body_string for r in df.select("body_string").collect()] == [f"p{i}" for i in range(n)]
        assert node_count(b, "paged") == n


def test_stream_available_now_in_limited_batches(
    spark: Any, url: str, publish: Any, checkpoint: Path
) -> None:
    publish("events-avail", numbered(250))
    batches: dict[int, list[int]] = {}

    def collect(df: Any, batch_id: int) -> None:
        batches[batch_id] = sorted(r.offset for r in df.select("offset").collect())

    def run() -> None:
        q = (
            stream_reader(
                spark, url, "events-avail", startingOffset="first", maxMessagesPerBatch="100"
            )
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert q.awaitTermination(120)
        assert q.exception() is None

    run()
    assert batches == {0: list(range(100)), 1: list(range(100, 200)), 2: list(range(200, 250))}
    publish("events-avail", numbered(30, start=250))
    run()  # resumes from the checkpoint: only the new messages
    assert batches[3] == list(range(250, 280))
    assert len(batches) == 4


def test_replayed_micro_batch_reads_the_same_range(
    spark: Any, url: str, publish: Any, checkpoint: Path
) -> None:
    """A micro-batch that failed is replayed with the same offsets: exactly once into a keyed sink."""
    publish("events-replay", numbered(120))
    sink: dict[int, str] = {}
    attempts: list[tuple[int, list[int]]] = []
    fail = {"batch": 1}

    def write(df: Any, batch_id: int) -> None:
        rows = df.select("offset", "body_string").collect()
        attempts.append((batch_id, sorted(r.offset for r in rows)))
        if batch_id == fail["batch"]:
            fail["batch"] = -1
            raise RuntimeError("the sink failed")
        for r in rows:
            sink[r.offset] = r.body_string

    def start() -> Any:
        return (
            stream_reader(
                spark, url, "events-replay", startingOffset="first", maxMessagesPerBatch="50"
            )
            .writeStream.foreachBatch(write)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )

    q = start()
    with pytest.raises(Exception, match="the sink failed"):
        q.awaitTermination(120)
    q = start()
    assert q.awaitTermination(120)
    assert attempts == [
        (0, list(range(50))),
        (1, list(range(50, 100))),
        (1, list(range(50, 100))),  # the replay: identical range
        (2, list(range(100, 120))),
    ]
    assert sink == {i: f"m{i}" for i in range(120)}


def test_queue_streaming_is_at_least_once(
    spark: Any, url: str, publish: Any, broker: Any, checkpoint: Path, tmp_path: Path
) -> None:
    """Messages are accepted only after their batch; a failed batch's messages come back."""
    n = 300
    publish("jobs-alo", numbered(n, "j"))
    seen: list[tuple[int, str]] = []
    state_dir = tmp_path / "queue-state"
    fail = {"batch": 2}

    def write(df: Any, batch_id: int) -> None:
        rows = df.select("body_string", "offset").collect()
        assert {r.offset for r in rows} <= {None}
        if batch_id == fail["batch"]:
            fail["batch"] = -1
            # while this batch runs, batches 0 and 1 are accepted and this one is held unsettled
            assert node_count(broker, "jobs-alo") == n - 150
            assert len(os.listdir(state_dir)) == 1
            raise RuntimeError("the sink failed")
        seen.extend((batch_id, r.body_string) for r in rows)

    def start() -> Any:
        return (
            stream_reader(spark, url, "jobs-alo", maxMessagesPerBatch="50", stateDir=str(state_dir))
            .writeStream.foreachBatch(write)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )

    q = start()
    with pytest.raises(Exception, match="the sink failed"):
        q.awaitTermination(120)
    # the reader stopped: its connection is gone, and the held batch went back to the queue;
    # the two batches before it stay accepted
    wait_for(
        lambda: node_count(broker, "jobs-alo") == n - 100, what="the failed batch to be released"
    )
    q = start()
    assert q.awaitTermination(120)
    bodies = [b for _batch, b in seen]
    assert set(bodies) == {f"j{i}" for i in range(n)}  # nothing lost
    replayed = [b for batch, b in seen if batch == 2]
    assert len(replayed) == 50  # batch 2, replayed from the state file...
    assert len(bodies) == n + 50  # ...and its messages once more from the queue: at least once
    assert sorted(b for b in bodies if bodies.count(b) > 1) == sorted(replayed * 2)
    wait_for(lambda: node_count(broker, "jobs-alo") == 0, what="every message to be accepted")
    assert os.listdir(state_dir) == []


def test_tls_and_credentials(spark: Any, tmp_path: Path) -> None:
    """``amqps://`` with a private CA, and SASL credentials given as options."""
    (tmp_path / "certs").mkdir()
    certs = make_certs(tmp_path / "certs")
    users = tmp_path / "users.toml"
    add_user(users, "spark", "s3cret:pass")
    config = BrokerConfig(
        listeners=[
            Listener(host="127.0.0.1", port=0, tls_cert=certs.server_cert, tls_key=certs.server_key)
        ],
        store=StoreConfig(path=tmp_path / "store.sqlite3", commit_interval_ms=1),
        sasl=SaslConfig(users_file=users, allow_anonymous=False),
        addresses=[AddressRule(pattern="events*", kind="stream")],
    )
    for secure in start_broker(config):
        url = f"amqps://127.0.0.1:{secure.port}"
        rows = spark.createDataFrame([(f"s{i}",) for i in range(10)], "body STRING")
        options = {"url": url, "address": "events-secure", "ca": str(certs.ca), "user": "spark"}
        rows.write.format("amqp10").options(**options, password="s3cret:pass").mode("append").save()
        got = spark.read.format("amqp10").options(**options, password="s3cret:pass").load()
        assert sorted(r.offset for r in got.collect()) == list(range(10))
        with pytest.raises(Exception, match=r"(?i)auth"):
            spark.read.format("amqp10").options(**options, password="wrong").load().collect()
