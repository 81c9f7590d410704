"""Spark connector benchmark: rows per second through ``format("amqp10")`` as a source and a sink.

Starts a broker in a subprocess (a temporary store), publishes ``--messages``
messages to a stream, then times, in a local Spark session (``local[2]``):

- source, batch:     ``spark.read`` of the whole stream into Spark's ``noop`` sink
- source, streaming: ``readStream`` (``availableNow``) of the stream into ``noop``
- sink, batch:       ``df.write`` of ``--messages`` rows to a queue (each accepted)
- sink, streaming:   ``readStream`` of the stream → ``writeStream`` to a queue

Each figure is rows / wall-clock seconds of that step, Spark's warm-up not
counted (a small read and write run first). Bounded: it stops by itself.

    python bench/spark_bench.py                    # 100,000 messages of ~100 bytes
    python bench/spark_bench.py --messages 20000   # quicker
    python bench/spark_bench.py --url amqp://127.0.0.1:5672   # an already running broker
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

# Run from a checkout without installing: make the repo root importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amqp10.message import Message
from amqp10.spark._client import BrokerClient
from amqp10.spark.options import SourceOptions

BROKER_CONFIG = """
[store]
commit_interval_ms = 2.0

[[addresses]]
pattern = "bench-stream-*"
kind = "stream"

[[addresses]]
pattern = "bench-out-*"
kind = "queue"
policy = { duplicate_window = 200000 }
"""


def start_broker(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    config = data_dir / "broker.toml"
    config.write_text(BROKER_CONFIG)
    proc = subprocess.Popen(
        [sys.executable, "-m", "amqp10.cli", "broker", "--config", str(config), "--port", "0",
         "--data-dir", str(data_dir), "--log-level", "info"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline().decode()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
            return proc, f"amqp://127.0.0.1:{m.group(1)}"
        if not line and proc.poll() is not None:
            break
    proc.kill()
    proc.wait()
    raise SystemExit("the broker did not start")


def publish(url: str, address: str, n: int, size: int) -> float:
    pad = "x" * max(size - 30, 0)
    started = time.perf_counter()
    with BrokerClient(
        SourceOptions.parse({"url": url, "address": address, "timeout": "120"})
    ) as client:
        for base in range(0, n, 5000):
            batch = [
                Message(body=f"event {i} {pad}", id=f"e-{i}", subject="bench").encode()
                for i in range(base, min(base + 5000, n))
            ]
            client.publish(address, batch, stream=True)
    return time.perf_counter() - started


def timed(label: str, rows: int, fn: Any) -> tuple[str, int, float]:
    """Run ``fn`` and print its rate; ``fn`` may return a note to print under it."""
    started = time.perf_counter()
    note = fn()
    elapsed = time.perf_counter() - started
    print(
        f"  {label:<22} {rows:>9,} rows in {elapsed:7.2f} s = {rows / elapsed:>9,.0f} rows/s",
        flush=True,
    )
    if note:
        print(f"    ({note})", flush=True)
    return label, rows, elapsed


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--size", type=int, default=100, help="approximate body size in bytes")
    p.add_argument("--url", help="use this broker instead of starting one")
    p.add_argument("--partition", type=int, default=25_000, help="messagesPerPartition")
    args = p.parse_args()
    n = args.messages
    print("command:", shlex.join([Path(sys.executable).name, *sys.argv]))
    print(f"python {platform.python_version()}, {os.cpu_count()} cpus, local[2]")

    tmp = tempfile.TemporaryDirectory(prefix="amqp10-spark-bench-")
    broker = None
    url = args.url
    try:
        if url is None:
            broker, url = start_broker(Path(tmp.name))
        run = uuid.uuid4().hex[:8]
        stream, out, out2 = f"bench-stream-{run}", f"bench-out-{run}", f"bench-out-{run}-s"

        elapsed = publish(url, stream, n, args.size)
        print(
            f"published {n:,} messages to {stream} at {n / elapsed:,.0f} msg/s (context, not Spark)"
        )

        import amqp10.spark

        started = time.perf_counter()
        spark = amqp10.spark.local_session("amqp10-bench")
        print(f"spark session in {time.perf_counter() - started:.1f} s")

        def reader(**options: str) -> Any:
            r = spark.read.format("amqp10").option("url", url).option("address", stream)
            for k, v in {"messagesPerPartition": str(args.partition), **options}.items():
                r = r.option(k, v)
            return r.load()

        # warm-up: the first Spark job pays for JIT compilation and Python worker start-up
        started = time.perf_counter()
        reader(endingOffset="1000").write.format("noop").mode("overwrite").save()
        spark.range(1000).selectExpr("CAST(id AS STRING) AS body").write.format("amqp10").option(
            "url", url
        ).option("address", f"{out}-warm").mode("append").save()
        print(f"warm-up in {time.perf_counter() - started:.1f} s")

        results = [
            timed(
                "source, batch",
                n,
                lambda: reader().write.format("noop").mode("overwrite").save(),
            )
        ]

        def stream_to(fmt: str, address: str | None, checkpoint: str) -> str:
            src = (
                spark.readStream.format("amqp10")
                .option("url", url)
                .option("address", stream)
                .option("startingOffset", "first")
                .option("messagesPerPartition", str(args.partition))
                .load()
            )
            if address is not None:
                src = src.selectExpr("body_string AS body", "properties")
            w = src.writeStream.format(fmt).option("checkpointLocation", checkpoint)
            if address is not None:
                w = w.option("url", url).option("address", address)
            q = w.trigger(availableNow=True).start()
            if not q.awaitTermination(1800):
                q.stop()
                raise SystemExit("the streaming query did not finish in 30 minutes")
            if q.exception() is not None:
                raise SystemExit(f"the streaming query failed: {q.exception()}")
            rows = sum(pr["numInputRows"] for pr in q.recentProgress)
            if rows != n:
                raise SystemExit(f"the streaming query read {rows} rows, not {n}")
            busy = (
                sum(pr["durationMs"].get("triggerExecution", 0) for pr in q.recentProgress) / 1000
            )
            return (
                f"{len(q.recentProgress)} micro-batch(es) taking {busy:.2f} s: "
                f"{rows / busy:,.0f} rows/s without the query's start and stop"
            )

        results.append(
            timed("source, streaming", n, lambda: stream_to("noop", None, f"{tmp.name}/cp1"))
        )
        rows = (
            spark.range(n)
            .selectExpr("CONCAT('row ', CAST(id AS STRING)) AS body")
            .repartition(2)
            .cache()
        )
        rows.count()
        results.append(
            timed(
                "sink, batch",
                n,
                lambda: (
                    rows.write.format("amqp10")
                    .option("url", url)
                    .option("address", out)
                    .mode("append")
                    .save()
                ),
            )
        )
        results.append(
            timed("source+sink, streaming", n, lambda: stream_to("amqp10", out2, f"{tmp.name}/cp2"))
        )
        counts = [
            spark.read.format("amqp10").option("url", url).option("address", a).load().count()
            for a in (out, out2)
        ]
        if counts != [n, n]:
            raise SystemExit(f"the sink queues hold {counts} messages, not {n} each")
        spark.stop()
        print("figures (rows/s):", ", ".join(f"{label} {r / e:,.0f}" for label, r, e in results))
    finally:
        if broker is not None:
            broker.send_signal(signal.SIGTERM)
            try:
                broker.wait(30)
            except subprocess.TimeoutExpired:
                broker.kill()
                broker.wait()
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
