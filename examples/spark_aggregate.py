"""A Spark job: running totals per region of the orders on a stream, published to another address.

    python examples/spark_aggregate.py --url amqp://127.0.0.1:5672 --address orders \\
        --output order-totals --checkpoint /tmp/orders-checkpoint

Reads the stream with ``spark.readStream.format("amqp10")`` (from its first
offset), parses each JSON body, keeps running totals per region (orders, units,
revenue) and, after every micro-batch, publishes the up-to-date totals, one
message per region, to ``--output`` with ``df.write.format("amqp10")``.

By default the job processes what the stream holds and exits (``availableNow``);
``--follow`` keeps it running, one micro-batch every ``--interval``. Run it again
with the same ``--checkpoint`` and it carries on where it stopped. A micro-batch
replayed after a crash reads the same offsets and publishes with the same
message-ids (``writeId`` is the batch id), so an output address with a
duplicate window (``examples/broker.toml``) keeps one copy.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

ORDER_SCHEMA = "order_id LONG, region STRING, product STRING, quantity INT, price DOUBLE"


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--url", default="amqp://127.0.0.1:5672")
    p.add_argument("--address", default="orders", help="the stream of orders")
    p.add_argument("--output", default="order-totals", help="where the totals go")
    p.add_argument("--checkpoint", help="Spark checkpoint directory (default: a new temporary one)")
    p.add_argument("--max-per-batch", default="2000", help="most orders per micro-batch")
    p.add_argument("--follow", action="store_true", help="keep running (Ctrl-C stops)")
    p.add_argument("--interval", default="5 seconds", help="micro-batch interval with --follow")
    args = p.parse_args()

    from pyspark.sql import functions as F

    import amqp10.spark

    spark = amqp10.spark.local_session("orders-aggregate")
    checkpoint = args.checkpoint or tempfile.mkdtemp(prefix="orders-checkpoint-")

    orders = (
        spark.readStream.format("amqp10")
        .option("url", args.url)
        .option("address", args.address)
        .option("mode", "stream")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", args.max_per_batch)
        .option("columns", "offset,body_string")  # decode no more than the job needs
        .load()
        .select(amqp10.spark.body_json(ORDER_SCHEMA, body="").alias("o"))
        .select("o.*")
    )
    totals = orders.groupBy("region").agg(
        F.count("*").alias("orders"),
        F.sum("quantity").alias("units"),
        F.round(F.sum(F.col("quantity") * F.col("price")), 2).alias("revenue"),
    )

    def publish(batch: Any, batch_id: int) -> None:
        rows = batch.orderBy("region")
        messages = rows.select(
            F.to_json(
                F.struct("region", "orders", "units", "revenue", F.lit(batch_id).alias("batch"))
            ).alias("body"),
            F.lit("order-totals").alias("subject"),
            F.create_map(F.lit("region"), F.col("region")).alias("application_properties"),
        )
        (
            messages.write.format("amqp10")
            .option("url", args.url)
            .option("address", args.output)
            .option(
                "writeId", f"{args.output}-batch-{batch_id}"
            )  # the same ids if the batch is replayed
            .mode("append")
            .save()
        )
        print(f"batch {batch_id}:")
        for r in rows.collect():
            print(f"  {r.region:<6} {r.orders:>7} orders {r.units:>8} units {r.revenue:>12,.2f}")

    writer = (
        totals.writeStream.outputMode("complete")
        .foreachBatch(publish)
        .option("checkpointLocation", checkpoint)
    )
    writer = (
        writer.trigger(processingTime=args.interval)
        if args.follow
        else writer.trigger(availableNow=True)
    )
    query = writer.start()
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    spark.stop()
    print(f"totals published to {args.output!r}; checkpoint in {checkpoint}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
