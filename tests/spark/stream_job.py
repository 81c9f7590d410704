"""A streaming job for test_kill.py: a stream into an idempotent file sink keyed by offset.

Run as a script (it is the Spark driver the test kills)::

    python tests/spark/stream_job.py --url amqp://127.0.0.1:PORT --address events \\
        --checkpoint DIR --sink DIR [--max-per-batch 40] [--delay 1.0] [--available-now] \\
        [--hold-batch K]

Each micro-batch reads its messages, then appends ``{"batch", "first", "last",
"count"}`` to ``<sink>/attempts.jsonl`` (fsynced), sleeps ``--delay`` seconds
(the window in which the test kills the driver), then writes one file per
message, ``<sink>/data/<offset>.json``, atomically: a replayed batch overwrites
the same files with the same contents.

``--hold-batch K``: micro-batch K, planned but not yet read, creates
``<sink>/holding`` and waits (at most 120 s) for ``<sink>/go`` before it reads
(the window in which the test kills the broker). A replay of K, with ``go``
there, does not wait.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--address", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--sink", required=True)
    p.add_argument("--max-per-batch", default="40")
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--available-now", action="store_true")
    p.add_argument("--hold-batch", type=int, default=None)
    p.add_argument("--timeout", default="30")
    args = p.parse_args()

    import amqp10.spark

    data = os.path.join(args.sink, "data")
    os.makedirs(data, exist_ok=True)
    attempts = os.path.join(args.sink, "attempts.jsonl")
    holding, go = os.path.join(args.sink, "holding"), os.path.join(args.sink, "go")

    def hold() -> None:
        with open(holding, "w"):
            pass
        for _ in range(1200):
            if os.path.exists(go):
                return
            time.sleep(0.1)
        raise SystemExit("--hold-batch: no go file within 120 s")

    def write_batch(df: Any, batch_id: int) -> None:
        if batch_id == args.hold_batch and not os.path.exists(go):
            hold()
        rows = df.select("offset", "body_string").collect()
        offsets = sorted(r.offset for r in rows)
        line = {
            "batch": batch_id,
            "first": offsets[0] if offsets else None,
            "last": offsets[-1] if offsets else None,
            "count": len(offsets),
        }
        with open(attempts, "a") as f:
            f.write(json.dumps(line) + "\n")
            f.flush()
            os.fsync(f.fileno())
        time.sleep(args.delay)
        for r in rows:
            path = os.path.join(data, f"{r.offset}.json")
            with open(path + ".tmp", "w") as f:
                json.dump({"offset": r.offset, "body": r.body_string, "batch": batch_id}, f)
            os.replace(path + ".tmp", path)

    spark = amqp10.spark.local_session("amqp10-stream-job")
    writer = (
        spark.readStream.format("amqp10")
        .option("url", args.url)
        .option("address", args.address)
        .option("startingOffset", "first")
        .option("maxMessagesPerBatch", args.max_per_batch)
        .option("timeout", args.timeout)
        .load()
        .writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", args.checkpoint)
    )
    writer = (
        writer.trigger(availableNow=True)
        if args.available_now
        else writer.trigger(processingTime="0 seconds")
    )
    query = writer.start()
    print("started", flush=True)
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
