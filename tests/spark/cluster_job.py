"""A job for test_cluster.py: the source and the sink on a given Spark master.

Run as a script (its own driver, so that the master can be a multi-process one)::

    python tests/spark/cluster_job.py --url amqp://127.0.0.1:PORT --master 'local-cluster[2,1,1024]' \\
        --stream events-cluster --out dedup-cluster --checkpoint DIR [--connect]

Reads the stream in a batch query and in a streaming query (``availableNow``)
that writes every message to ``--out``, writes 100 rows to ``--out-batch``,
and prints one JSON line with what it saw. ``--connect`` runs the same
through a Spark Connect session (pyspark's own server, started locally).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def session(master: str, connect: bool) -> Any:
    import amqp10.spark

    if not connect:
        return amqp10.spark.local_session(
            "amqp10-cluster",
            master=master,
            conf={"spark.executor.memory": "512m", "spark.executor.cores": "1"},
        )
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.remote(master)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    amqp10.spark.register(spark)
    return spark


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--master", required=True)
    p.add_argument("--stream", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--out-batch", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--connect", action="store_true")
    args = p.parse_args()

    spark = session(args.master, args.connect)

    def reader(r: Any, address: str, **options: str) -> Any:
        r = r.format("amqp10").option("url", args.url).option("address", address)
        for k, v in options.items():
            r = r.option(k, v)
        return r.load()

    batch = reader(spark.read, args.stream, messagesPerPartition="30").select(
        "partition", "offset", "body_string"
    )
    rows = batch.collect()
    partitions = batch.rdd.getNumPartitions() if not args.connect else None

    q = (
        reader(spark.readStream, args.stream, startingOffsets="earliest", maxOffsetsPerTrigger="40")
        .selectExpr("body_string AS body", "properties")
        .writeStream.format("amqp10")
        .option("url", args.url)
        .option("address", args.out)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(300)
    batches = len(q.recentProgress)

    spark.range(100).selectExpr("CONCAT('b', CAST(id AS STRING)) AS body").repartition(
        2
    ).write.format("amqp10").option("url", args.url).option("address", args.out_batch).option(
        "writeId", "w1"
    ).mode("append").save()
    executors = app = None
    if not args.connect:
        sc = spark.sparkContext
        executors = sc._jsc.sc().getExecutorMemoryStatus().size() - 1  # less the driver
        app = sc.applicationId
    print(
        json.dumps(
            {
                "offsets": sorted(r.offset for r in rows),
                "bodies": sorted(r.body_string for r in rows),
                "partition_column": sorted({r.partition for r in rows}),
                "partitions": partitions,
                "micro_batches": batches,
                "executors": executors,
                "app": app,
                "session": type(spark).__module__,
            }
        ),
        flush=True,
    )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
