"""Spark connector benchmark: ``format("amqp10")`` side by side with the client and Spark's ceiling.

Starts a broker in a subprocess (a temporary store) and a local Spark session
(``local[2]``), then, for each of ``--rounds`` rounds, on the same broker:

- client publish:  the async client (``Sender.pipeline``, a window of 2,000)
                   encodes and publishes ``--messages`` messages to a queue
                   and waits until each is accepted: the sink's reference
- sink, batch:     ``df.write`` of as many rows (a string body) to a queue
- stream fill:     the client publishes the round's messages to a stream (untimed)
- client read:     the async client reads the stream from the first offset
                   (a receiver with a credit window of 10,000): the source's reference
- source, batch:   ``spark.read`` of the whole stream into Spark's ``noop`` sink,
                   all columns, then ``columns=offset,body``
- partitions:      the same messages in streams of 2 and 4 partitions (published
                   to the stream's address, round robin; untimed), each read
                   whole as above, all columns
- no-op source:    a Python data source that makes as many rows (an offset and
                   a 100-byte body) without any I/O, as tuples and as Arrow
                   batches: the ceiling of a Python source in this session
- streaming:       ``readStream`` (``availableNow``) of the stream into ``noop``,
                   and stream → ``writeStream`` to a queue

Each figure is rows / wall-clock seconds of that step, Spark's warm-up not
counted. Each step is compared with its reference measured just before it
(the client reads the stream again before each source step), so that a ratio
compares two runs under the same load; the table gives each step's median rate
over the rounds and the median of its per-round ratios (each round's in
brackets). Bounded: it stops by itself.

    python bench/spark_bench.py                    # 100,000 messages of ~100 bytes, 3 rounds
    python bench/spark_bench.py --messages 20000 --rounds 1   # quicker
    python bench/spark_bench.py --url amqp://127.0.0.1:5672   # an already running broker
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# Run from a checkout without installing: make the repo root importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio

from amqp10.client import SettleMode, connect
from amqp10.message import Message
from amqp10.types import Accepted, Source, Target, symbol

BROKER_CONFIG = """
[store]
commit_interval_ms = 2.0

[[addresses]]
pattern = "bench-stream-*"
kind = "stream"

[[addresses]]
pattern = "bench-p2-*"
kind = "stream"
policy = { partitions = 2 }

[[addresses]]
pattern = "bench-p4-*"
kind = "stream"
policy = { partitions = 4 }

[[addresses]]
pattern = "bench-out-*"
kind = "queue"
policy = { duplicate_window = 200000 }
"""

READ_WINDOW = 10_000
PUBLISH_WINDOW = 2_000


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


def messages(n: int, size: int) -> Iterator[bytes]:
    pad = "x" * max(size - 30, 0)
    for i in range(n):
        yield Message(body=f"event {i} {pad}", id=f"e-{i}", subject="bench", durable=True).encode()


async def client_publish(url: str, address: str, n: int, size: int, *, stream: bool) -> None:
    """Encode and publish ``n`` messages with the client's pipeline; every one must be accepted."""
    async with await connect(url, timeout=120) as conn:
        target = Target(address=address, capabilities=[symbol("stream")] if stream else None)
        sender = await conn.open_sender(
            address, target=target, settle_mode=SettleMode.AT_LEAST_ONCE, timeout=120
        )
        async for outcome in sender.pipeline(
            messages(n, size), window=PUBLISH_WINDOW, settled=False, timeout=120
        ):
            if not isinstance(outcome, Accepted):
                raise SystemExit(f"the broker refused a message: {outcome!r}")


async def client_read(url: str, address: str, n: int) -> None:
    """Read ``n`` messages of stream ``address`` from its first offset (bytes, not decoded)."""
    async with await connect(url, timeout=120) as conn:
        source = Source(
            address=address,
            filter={symbol("amqp10:stream-offset"): "first"},
            capabilities=[symbol("stream")],
        )
        receiver = await conn.open_receiver(
            address, source=source, credit=READ_WINDOW, settle_mode=SettleMode.AT_MOST_ONCE
        )
        for _ in range(n):
            await receiver.receive(timeout=120)


def noop_source(n: int, size: int, arrow: bool) -> type:
    """A Python data source of ``n`` rows ``(offset, body)`` made without I/O: the ceiling."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Part(InputPartition):
        def __init__(self, start: int, end: int) -> None:
            super().__init__((start, end))
            self.start, self.end = start, end

    class Reader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            step = max(n // 4, 1)
            return [Part(s, min(s + step, n)) for s in range(0, n, step)]

        def read(self, partition: Any) -> Iterator[Any]:
            body = b"x" * size
            if not arrow:
                for i in range(partition.start, partition.end):
                    yield (i, body)
                return
            import pyarrow as pa

            schema = pa.schema([("offset", pa.int64()), ("body", pa.binary())])
            for s in range(partition.start, partition.end, 5000):
                e = min(s + 5000, partition.end)
                yield pa.RecordBatch.from_arrays(
                    [pa.array(range(s, e), pa.int64()), pa.array([body] * (e - s), pa.binary())],
                    schema=schema,
                )

    class Noop(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_noop_arrow" if arrow else "bench_noop_rows"

        def schema(self) -> str:
            return "offset BIGINT, body BINARY"

        def reader(self, schema: Any) -> DataSourceReader:
            return Reader()

    return Noop


_TICK = os.sysconf("SC_CLK_TCK")


def _processes() -> dict[int, tuple[int, float]]:
    """Every process: pid -> (parent pid, CPU seconds used so far)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK)
    return out


def _machine_cpu() -> float:
    """CPU seconds the whole machine has been busy (all cores, all users)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / _TICK  # less idle and iowait


def cpu_snapshot(broker_pid: int | None) -> dict[str, float]:
    """CPU seconds so far: the broker, Spark (its JVM and Python workers), this process, all."""
    procs = _processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _cpu) in procs.items():
        children.setdefault(ppid, []).append(pid)

    def tree(root: int, skip: int | None) -> float:
        total, todo = 0.0, [root]
        while todo:
            pid = todo.pop()
            if pid == skip or pid not in procs:
                continue
            total += procs[pid][1]
            todo.extend(children.get(pid, []))
        return total

    me = os.getpid()
    own = procs[me][1]
    broker = tree(broker_pid, None) if broker_pid else 0.0
    return {
        "broker": broker,
        "spark": tree(me, broker_pid) - own,
        "bench": own,
        "machine": _machine_cpu(),
    }


CPU = {"broker": None}
"""The broker's pid, once started (None: an outside broker, not measured)."""


def timed(label: str, rows: int, fn: Callable[[], object]) -> tuple[float, dict[str, float]]:
    """Run ``fn``; print and return its rate in rows/s, and CPU µs per row by whom.

    ``others`` is the CPU the rest of the machine used meanwhile (other users),
    in cores: what this run competed with.
    """
    before = cpu_snapshot(CPU["broker"])
    started = time.perf_counter()
    note = fn()
    elapsed = time.perf_counter() - started
    after = cpu_snapshot(CPU["broker"])
    used = {k: (after[k] - before[k]) / rows * 1e6 for k in ("broker", "spark", "bench")}
    ours = sum(after[k] - before[k] for k in ("broker", "spark", "bench"))
    used["others"] = max(after["machine"] - before["machine"] - ours, 0.0) / elapsed
    rate = rows / elapsed
    print(
        f"  {label:<34} {rate:>9,.0f} rows/s   CPU µs/row: broker {used['broker']:4.0f}, "
        f"spark {used['spark']:4.0f}, bench {used['bench']:4.0f}; others {used['others']:.1f} cores",
        flush=True,
    )
    if isinstance(note, str):
        print(f"    ({note})", flush=True)
    return rate, used


STEPS = [
    # (label, the reference it is compared with)
    ("client publish (Sender.pipeline)", None),
    ("sink, batch (df.write)", "client publish (Sender.pipeline)"),
    ("client read (receiver, credit 10k)", None),
    ("source, batch, all columns", "client read (receiver, credit 10k)"),
    ("source, batch, columns=offset,body", "client read (receiver, credit 10k)"),
    ("source, batch, 2 partitions", "client read (receiver, credit 10k)"),
    ("source, batch, 4 partitions", "client read (receiver, credit 10k)"),
    ("no-op source, tuples", "client read (receiver, credit 10k)"),
    ("no-op source, Arrow", "client read (receiver, credit 10k)"),
    ("source, streaming (availableNow)", "client read (receiver, credit 10k)"),
    ("source + sink, streaming", "client publish (Sender.pipeline)"),
]


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--size", type=int, default=100, help="approximate body size in bytes")
    p.add_argument("--rounds", type=int, default=3)
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
            CPU["broker"] = broker.pid

        import amqp10.spark

        started = time.perf_counter()
        spark = amqp10.spark.local_session("amqp10-bench")
        for arrow in (False, True):
            spark.dataSource.register(noop_source(n, args.size, arrow))
        print(f"spark session in {time.perf_counter() - started:.1f} s")

        def reader(stream: str, **options: str) -> Any:
            r = spark.read.format("amqp10").option("url", url).option("address", stream)
            for k, v in {"messagesPerPartition": str(args.partition), **options}.items():
                r = r.option(k, v)
            return r.load()

        # warm-up: the first Spark jobs pay for JIT compilation and Python worker start-up
        started = time.perf_counter()
        warm = f"bench-stream-warm-{uuid.uuid4().hex[:8]}"
        anyio.run(lambda: client_publish(url, warm, 2000, args.size, stream=True))
        reader(warm).write.format("noop").mode("overwrite").save()
        spark.range(1000).selectExpr("CAST(id AS STRING) AS body").write.format("amqp10").option(
            "url", url
        ).option("address", f"bench-out-warm-{uuid.uuid4().hex[:8]}").mode("append").save()
        spark.read.format("bench_noop_rows").load().write.format("noop").mode("overwrite").save()
        print(f"warm-up in {time.perf_counter() - started:.1f} s")

        rows = (
            spark.range(n)
            .selectExpr(
                f"CONCAT('row ', CAST(id AS STRING), ' ', REPEAT('x', {args.size - 30})) AS body"
            )
            .repartition(2)
            .cache()
        )
        rows.count()

        rates: dict[str, list[float]] = {label: [] for label, _ in STEPS}
        ratios: dict[str, list[float]] = {label: [] for label, _ in STEPS}
        cpu: dict[str, list[dict[str, float]]] = {label: [] for label, _ in STEPS}

        def one_round(r: int) -> None:
            print(f"round {r}:", flush=True)
            run = uuid.uuid4().hex[:8]
            stream, out, out2 = f"bench-stream-{run}", f"bench-out-{run}", f"bench-out-{run}-s"

            def stream_to(fmt: str, address: str | None, checkpoint: str) -> str:
                src = (
                    spark.readStream.format("amqp10")
                    .option("url", url)
                    .option("address", stream)
                    .option("startingOffsets", "earliest")
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
                got = sum(pr["numInputRows"] for pr in q.recentProgress)
                if got != n:
                    raise SystemExit(f"the streaming query read {got} rows, not {n}")
                busy = sum(pr["durationMs"].get("triggerExecution", 0) for pr in q.recentProgress)
                return (
                    f"{len(q.recentProgress)} micro-batch(es) taking {busy / 1000:.2f} s: "
                    f"{got / busy * 1000:,.0f} rows/s without the query's start and stop"
                )

            def step(label: str, fn: Callable[[], object]) -> None:
                rate, used = timed(label, n, fn)
                rates[label].append(rate)
                cpu[label].append(used)
                ref = dict(STEPS)[label]
                if ref is not None:  # measured just before: the same load on the machine
                    ratios[label].append(rate / rates[ref][-1])

            def read_with_client() -> None:
                step(
                    "client read (receiver, credit 10k)",
                    lambda: anyio.run(client_read, url, stream, n),
                )

            step(
                "client publish (Sender.pipeline)",
                lambda: anyio.run(
                    lambda: client_publish(url, f"{out}-c", n, args.size, stream=False)
                ),
            )
            step(
                "sink, batch (df.write)",
                lambda: (
                    rows.write.format("amqp10")
                    .option("url", url)
                    .option("address", out)
                    .mode("append")
                    .save()
                ),
            )
            anyio.run(lambda: client_publish(url, stream, n, args.size, stream=True))
            read_with_client()
            step(
                "source, batch, all columns",
                lambda: reader(stream).write.format("noop").mode("overwrite").save(),
            )
            read_with_client()
            step(
                "source, batch, columns=offset,body",
                lambda: (
                    reader(stream, columns="offset,body")
                    .write.format("noop")
                    .mode("overwrite")
                    .save()
                ),
            )
            for parts in (2, 4):
                spread = f"bench-p{parts}-{run}"
                anyio.run(
                    lambda spread=spread: client_publish(url, spread, n, args.size, stream=True)
                )
                read_with_client()
                step(
                    f"source, batch, {parts} partitions",
                    lambda spread=spread: (
                        reader(spread).write.format("noop").mode("overwrite").save()
                    ),
                )
            for kind in ("rows", "arrow"):
                step(
                    f"no-op source, {'tuples' if kind == 'rows' else 'Arrow'}",
                    lambda kind=kind: (
                        spark.read.format(f"bench_noop_{kind}")
                        .load()
                        .write.format("noop")
                        .mode("overwrite")
                        .save()
                    ),
                )
            step(
                "source, streaming (availableNow)",
                lambda: stream_to("noop", None, f"{tmp.name}/cp1-{run}"),
            )
            step(
                "source + sink, streaming",
                lambda: stream_to("amqp10", out2, f"{tmp.name}/cp2-{run}"),
            )
            counts = [
                spark.read.format("amqp10").option("url", url).option("address", a).load().count()
                for a in (out, out2)
            ]
            if counts != [n, n]:
                raise SystemExit(f"the sink queues hold {counts} messages, not {n} each")

        for r in range(1, args.rounds + 1):
            one_round(r)
        spark.stop()

        medians = {label: statistics.median(v) for label, v in rates.items()}
        print(f"\nmedians of {args.rounds} round(s), {n:,} messages of ~{args.size} bytes:")
        print("| step | rows/s | vs the reference measured just before it |\n|---|---:|---|")
        for label, ref in STEPS:
            vs = ""
            if ref is not None:
                each = ", ".join(f"{x:.2f}" for x in ratios[label])
                vs = f"{statistics.median(ratios[label]):.2f}x {ref.split(' (')[0]} ({each})"
            print(f"| {label} | {medians[label]:,.0f} | {vs} |")
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
        print(
            "\nCPU µs per row (medians; spark = its JVM and Python workers, bench = this process):"
        )
        print(
            "| step | broker | spark | bench | other users' load (cores) |\n|---|---:|---:|---:|---:|"
        )
        for label, _ref in STEPS:
            m = {k: statistics.median(u[k] for u in cpu[label]) for k in cpu[label][0]}
            print(
                f"| {label} | {m['broker']:.0f} | {m['spark']:.0f} | {m['bench']:.0f} "
                f"| {m['others']:.1f} |"
            )
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
