"""Spark connector benchmark: ``format("amqp10")`` side by side with the client and Spark's ceiling.

Starts a broker in a subprocess (a temporary store) and a local Spark session
(``local[2]``), then, for each of ``--rounds`` rounds, on the same broker:

- client publish:  the async client (``Sender.pipeline``, a window of 2,000)
                   encodes and publishes ``--messages`` messages to a queue
                   and waits until each is accepted: the sink's reference
- sink, batch:     ``df.write`` of as many rows (a string body) to a queue
- stream fill:     the client publishes the round's messages to a stream (untimed)
- client read:     the async client reads the stream from the first offset
                   (a receiver with a credit window of 10,000), the bytes of each
                   message, not decoded: the source's reference
- client decode:   the same read, decoding each message (``delivery.message``)
                   and touching every section, as a user reading all fields
                   would: a second reference for the all-columns source
- source, batch:   ``spark.read`` of the whole stream into Spark's ``noop`` sink,
                   all columns, then ``columns=offset,body``
- partitions:      the same messages in streams of 2 and 4 partitions (published
                   to the stream's address, round robin; untimed), each read
                   whole as above, all columns
- no-op source:    a Python data source that makes as many rows (an offset and
                   a 100-byte body) without any I/O, as tuples and as Arrow
                   batches: the ceiling of a Python source in this session;
                   and one that yields pre-built Arrow batches of the source's
                   whole default schema (the properties struct, the maps),
                   values as the stream's messages give them: what Spark itself
                   costs per row of that schema, the all-columns source's floor
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
    python bench/spark_bench.py --steps read,noop  # the reads and the ceilings only
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


async def client_read(url: str, address: str, n: int, decode: bool = False) -> None:
    """Read ``n`` messages of stream ``address`` from its first offset.

    The bytes only, or (``decode``) each message decoded and every section
    touched, as a reader of all its fields would."""
    async with await connect(url, timeout=120) as conn:
        source = Source(
            address=address,
            filter={symbol("amqp10:stream-offset"): "first"},
            capabilities=[symbol("stream")],
        )
        receiver = await conn.open_receiver(
            address, source=source, credit=READ_WINDOW, settle_mode=SettleMode.AT_MOST_ONCE
        )
        if not decode:
            for _ in range(n):
                await receiver.receive(timeout=120)
            return
        for _ in range(n):
            m = (await receiver.receive(timeout=120)).message
            _ = (m.header, m.message_annotations, m.properties, m.application_properties, m.body)


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


def noop_all_columns_source(n: int, size: int) -> type:
    """A Python data source of ``n`` rows of the source's default schema, without I/O.

    It yields pre-built Arrow batches (one 5,000-row batch, made once per
    partition, yielded again and again), their values as the benchmark's stream
    messages give them: what Spark costs per row of that schema (the JVM taking
    the properties struct and the maps) with no Python work per row.
    """
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from amqp10.spark.rows import PROPERTY_FIELDS, SCHEMA
    from amqp10.types import encode

    class Part(InputPartition):
        def __init__(self, start: int, end: int) -> None:
            super().__init__((start, end))
            self.start, self.end = start, end

    class Reader(DataSourceReader):
        def __init__(self, schema: Any) -> None:
            self.schema = schema

        def partitions(self) -> list[InputPartition]:
            step = max(n // 4, 1)
            return [Part(s, min(s + step, n)) for s in range(0, n, step)]

        def read(self, partition: Any) -> Iterator[Any]:
            import pyarrow as pa
            from pyspark.sql.pandas.types import to_arrow_schema

            schema = to_arrow_schema(self.schema, timezone="UTC")
            rows = 5000
            pad = "x" * max(size - 30, 0)
            strings = [f"event {i} {pad}" for i in range(rows)]
            ms = [1_764_000_000_000 + i for i in range(rows)]
            empty = {name: None for name in PROPERTY_FIELDS}
            columns = {
                "address": ["bench-stream-noop"] * rows,
                "partition": [0] * rows,
                "offset": list(range(rows)),
                "timestamp": [t * 1000 for t in ms],
                "body": [encode(b) for b in strings],
                "body_string": strings,
                "body_map": [None] * rows,
                "properties": [
                    {**empty, "message_id": f"e-{i}", "subject": "bench"} for i in range(rows)
                ],
                "application_properties": [None] * rows,
                "message_annotations": [
                    [("x-opt-offset", str(i)), ("x-opt-timestamp", str(t))]
                    for i, t in enumerate(ms)
                ],
                "durable": [True] * rows,
                "priority": [4] * rows,
                "creation_time": [None] * rows,
            }
            batch = pa.RecordBatch.from_arrays(
                [pa.array(columns[f.name], type=f.type) for f in schema], schema=schema
            )
            for s in range(partition.start, partition.end, rows):
                yield batch.slice(0, min(rows, partition.end - s))

    class NoopAll(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_noop_all_columns"

        def schema(self) -> str:
            return SCHEMA

        def reader(self, schema: Any) -> DataSourceReader:
            return Reader(schema)

    return NoopAll


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


READ = "client read (receiver, credit 10k)"
DECODE = "client decode (delivery.message)"
PUBLISH = "client publish (Sender.pipeline)"

STEPS = [
    # (label, the reference it is compared with, the group that runs it)
    (PUBLISH, None, "write"),
    ("sink, batch (df.write)", PUBLISH, "write"),
    (READ, None, "read"),
    (DECODE, READ, "read"),
    ("source, batch, all columns", READ, "read"),
    ("source, batch, columns=offset,body", READ, "read"),
    ("source, batch, 2 partitions", READ, "partitions"),
    ("source, batch, 4 partitions", READ, "partitions"),
    ("no-op source, tuples", READ, "noop"),
    ("no-op source, Arrow", READ, "noop"),
    ("no-op source, Arrow, all columns", READ, "noop"),
    ("source, streaming (availableNow)", READ, "streaming"),
    ("source + sink, streaming", PUBLISH, "streaming"),
]
GROUPS = ("write", "read", "partitions", "noop", "streaming")
SECOND_REFERENCE = {
    "source, batch, all columns": DECODE,
    "no-op source, Arrow, all columns": DECODE,
}
"""Steps also compared with the decoding client (its read just before the step's own reference)."""


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--size", type=int, default=100, help="approximate body size in bytes")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--url", help="use this broker instead of starting one")
    p.add_argument("--partition", type=int, default=25_000, help="messagesPerPartition")
    p.add_argument(
        "--steps",
        default=",".join(GROUPS),
        help=f"the groups of steps to run, comma-separated, of {', '.join(GROUPS)} (default: all)",
    )
    p.add_argument(
        "--full-jvm",
        action="store_true",
        help="run Spark's JVM with its default JIT (C2) instead of local_session's quick "
        "start (C1 only): slower to warm up, faster per row once warm",
    )
    args = p.parse_args()
    groups = {g.strip() for g in args.steps.split(",") if g.strip()}
    if not groups or groups - set(GROUPS):
        p.error(f"--steps takes groups of {', '.join(GROUPS)}, not {args.steps!r}")
    steps = [(label, ref) for label, ref, group in STEPS if group in groups]
    n = args.messages
    print("command:", shlex.join([Path(sys.executable).name, *sys.argv]))
    print(f"python {platform.python_version()}, {os.cpu_count()} cpus, local[2]")
    print(f"load average at the start: {os.getloadavg()[0]:.1f}")

    tmp = tempfile.TemporaryDirectory(prefix="amqp10-spark-bench-")
    broker = None
    url = args.url
    try:
        if url is None:
            broker, url = start_broker(Path(tmp.name))
            CPU["broker"] = broker.pid

        import amqp10.spark

        started = time.perf_counter()
        spark = amqp10.spark.local_session("amqp10-bench", quick_jvm=not args.full_jvm)
        for arrow in (False, True):
            spark.dataSource.register(noop_source(n, args.size, arrow))
        spark.dataSource.register(noop_all_columns_source(n, args.size))
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
        if "write" in groups or "streaming" in groups:
            spark.range(1000).selectExpr("CAST(id AS STRING) AS body").write.format(
                "amqp10"
            ).option("url", url).option("address", f"bench-out-warm-{uuid.uuid4().hex[:8]}").mode(
                "append"
            ).save()
        for name in ("bench_noop_rows", "bench_noop_all_columns"):
            spark.read.format(name).load().write.format("noop").mode("overwrite").save()
        print(f"warm-up in {time.perf_counter() - started:.1f} s")

        rows = None
        if "write" in groups:
            rows = (
                spark.range(n)
                .selectExpr(
                    f"CONCAT('row ', CAST(id AS STRING), ' ', REPEAT('x', {args.size - 30})) AS body"
                )
                .repartition(2)
                .cache()
            )
            rows.count()

        rates: dict[str, list[float]] = {label: [] for label, _ in steps}
        ratios: dict[str, list[float]] = {label: [] for label, _ in steps}
        second: dict[str, list[float]] = {label: [] for label in SECOND_REFERENCE}
        cpu: dict[str, list[dict[str, float]]] = {label: [] for label, _ in steps}

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
                if label not in rates:
                    return
                rate, used = timed(label, n, fn)
                rates[label].append(rate)
                cpu[label].append(used)
                ref = dict(steps)[label]
                if ref is not None and rates.get(ref):  # measured just before: the same load
                    ratios[label].append(rate / rates[ref][-1])
                if label in second and rates.get(SECOND_REFERENCE[label]):
                    second[label].append(rate / rates[SECOND_REFERENCE[label]][-1])

            def read_with_client(decode: bool = False) -> None:
                step(
                    DECODE if decode else READ,
                    lambda: anyio.run(client_read, url, stream, n, decode),
                )

            if "write" in groups:
                assert rows is not None
                sink_rows = rows
                step(
                    PUBLISH,
                    lambda: anyio.run(
                        lambda: client_publish(url, f"{out}-c", n, args.size, stream=False)
                    ),
                )
                step(
                    "sink, batch (df.write)",
                    lambda: (
                        sink_rows.write.format("amqp10")
                        .option("url", url)
                        .option("address", out)
                        .mode("append")
                        .save()
                    ),
                )
            if groups & {"read", "partitions", "noop", "streaming"}:
                anyio.run(lambda: client_publish(url, stream, n, args.size, stream=True))
                read_with_client()
            if "read" in groups:
                read_with_client(decode=True)
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
            if "partitions" in groups:
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
            if "noop" in groups:
                for kind, label in (
                    ("rows", "no-op source, tuples"),
                    ("arrow", "no-op source, Arrow"),
                    ("all_columns", "no-op source, Arrow, all columns"),
                ):
                    step(
                        label,
                        lambda kind=kind: (
                            spark.read.format(f"bench_noop_{kind}")
                            .load()
                            .write.format("noop")
                            .mode("overwrite")
                            .save()
                        ),
                    )
            if "streaming" in groups:
                step(
                    "source, streaming (availableNow)",
                    lambda: stream_to("noop", None, f"{tmp.name}/cp1-{run}"),
                )
                step(
                    "source + sink, streaming",
                    lambda: stream_to("amqp10", out2, f"{tmp.name}/cp2-{run}"),
                )
            sinks = [a for a, g in ((out, "write"), (out2, "streaming")) if g in groups]
            counts = [
                spark.read.format("amqp10").option("url", url).option("address", a).load().count()
                for a in sinks
            ]
            if counts != [n] * len(sinks):
                raise SystemExit(f"the sink queues hold {counts} messages, not {n} each")

        for r in range(1, args.rounds + 1):
            one_round(r)
        spark.stop()

        medians = {label: statistics.median(v) for label, v in rates.items() if v}
        print(f"\nmedians of {args.rounds} round(s), {n:,} messages of ~{args.size} bytes:")
        print(
            "| step | rows/s | vs the reference measured just before it | vs the decoding client |"
            "\n|---|---:|---|---|"
        )
        for label, ref in steps:
            if label not in medians:
                continue
            vs = also = ""
            if ratios[label]:
                assert ref is not None
                each = ", ".join(f"{x:.2f}" for x in ratios[label])
                vs = f"{statistics.median(ratios[label]):.2f}x {ref.split(' (')[0]} ({each})"
            if second.get(label):
                each = ", ".join(f"{x:.2f}" for x in second[label])
                also = f"{statistics.median(second[label]):.2f}x ({each})"
            print(f"| {label} | {medians[label]:,.0f} | {vs} | {also} |")
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
        print(
            "\nCPU µs per row (medians; spark = its JVM and Python workers, bench = this process):"
        )
        print(
            "| step | broker | spark | bench | other users' load (cores) |\n|---|---:|---:|---:|---:|"
        )
        for label, _ref in steps:
            if not cpu[label]:
                continue
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
