"""What read-committed costs: publish-to-read latency and throughput, before and after, in one run.

Starts brokers as subprocesses, each on its own fresh store, from two source trees:
this checkout ("after": durable streams deliver only committed entries; queues with
``deliver_after_commit``) and a baseline commit extracted with ``git archive``
("before": entries delivered as they arrive, before their commit). For each
commit interval (``[store] commit_interval_ms``) and each case it measures, with the
amqp10 client in this process (one connection publishing, one reading):

- ``max``: N durable messages pipelined (window 1000) while a reader attached at
  ``next`` (a queue consumer, pre-settled) reads them: msg/s from first send to last
  read, and publish-to-read latency p50/p99 (each body is its send time);
- ``paced``: ``--rate`` msg/s for ``--paced-seconds``: latency without saturation,
  which shows what waiting for the commit adds (at most one group commit).

Cases are interleaved round by round, so machine load hits them alike.

    .venv/bin/python bench/commit_latency_bench.py                     # 2 ms and 100 ms, 3 rounds
    .venv/bin/python bench/commit_latency_bench.py --quick             # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

import amqp10
from amqp10.cli.bench.harness import BrokerProcess
from amqp10.client import SettleMode
from amqp10.message import Message
from amqp10.types import Source, symbol

ROOT = Path(__file__).resolve().parents[1]
OFFSET = symbol("amqp10:stream-offset")

CONFIG = """
[[addresses]]
pattern = "lat-ev"
kind = "stream"

[[addresses]]
pattern = "lat-q"
kind = "queue"
policy = {{ durable = true{queue_policy} }}

[store]
commit_interval_ms = {interval}
"""

CASES: list[tuple[str, str, str, str]] = [
    # (label, tree, address, extra queue policy)
    ("stream, before (base)", "base", "lat-ev", ""),
    ("stream, after (read-committed)", "head", "lat-ev", ""),
    ("durable queue, deliver_after_commit off", "head", "lat-q", ", deliver_after_commit = false"),
    ("durable queue, deliver_after_commit on", "head", "lat-q", ", deliver_after_commit = true"),
]


def extract(rev: str, into: Path) -> Path:
    """The ``amqp10`` package of ``rev`` under ``into`` (for PYTHONPATH)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "amqp10"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def start_broker(tree: Path, data: Path, config: Path) -> BrokerProcess:
    """Our broker from source tree ``tree`` (its ``amqp10`` package first on the path).

    It runs in ``tree``: ``python -m`` puts the working directory ahead of PYTHONPATH,
    so from a checkout it would import the checkout's package instead."""
    argv = [sys.executable, "-m", "amqp10.cli", "broker", "--port", "0"]
    argv += ["--data-dir", str(data.resolve()), "--config", str(config.resolve())]
    env = dict(os.environ, PYTHONPATH=str(tree.resolve()))
    proc = BrokerProcess(argv, name=f"broker from {tree}", env=env, cwd=str(tree))
    proc.wait_listening(30)
    return proc


async def measure(port: int, address: str, count: int, rate: float | None) -> dict[str, float]:
    """Publish ``count`` durable messages (pipelined, or at ``rate``/s); read them; latency in ms."""
    latencies: list[float] = []
    stream = address.endswith("-ev")
    async with await amqp10.connect(f"amqp://127.0.0.1:{port}") as conn:
        source = Source(address=address, filter={OFFSET: "next"}, capabilities=[symbol("stream")]) if stream else None
        rcv = await conn.open_receiver(address, source=source, credit=2000, settle_mode=SettleMode.AT_MOST_ONCE)
        snd = await conn.open_sender(address)
        last = 0.0

        async def read() -> None:
            nonlocal last
            while len(latencies) < count:
                d = await rcv.receive(timeout=60)
                now = time.perf_counter()
                latencies.append((now - float(d.message.body)) * 1000)
                last = now

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            if rate is None:

                def messages() -> Any:
                    for _ in range(count):
                        yield Message(body=time.perf_counter(), durable=True)

                async for _ in snd.pipeline(messages(), window=1000, timeout=60):
                    pass
            else:
                trackers = []
                for i in range(count):
                    due = started + i / rate
                    delay = due - time.perf_counter()
                    if delay > 0:
                        await anyio.sleep(delay)
                    trackers.append(snd.submit(Message(body=time.perf_counter(), durable=True)))
                for t in trackers:
                    await t
    latencies.sort()
    return {
        "msgs_per_s": count / (last - started),
        "p50_ms": latencies[len(latencies) // 2],
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
    }


def run_case(tree: Path, tmp: Path, interval: float, address: str, queue_policy: str, args: argparse.Namespace) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(dir=tmp))
    config = data / "broker.toml"
    config.write_text(CONFIG.format(interval=interval, queue_policy=queue_policy))
    proc = start_broker(tree, data, config)
    port = proc.wait_listening(0)
    try:
        saturated = anyio.run(measure, port, address, args.count, None)
        paced = anyio.run(measure, port, address, int(args.rate * args.paced_seconds), args.rate)
    finally:
        proc.stop(15)
    return {"max": saturated, "paced": paced}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default="fdadc0d", help="the commit whose broker is 'before'")
    ap.add_argument("--intervals", default="2,100", help="commit_interval_ms values, comma-separated")
    ap.add_argument("--count", type=int, default=20_000, help="messages in the saturated run")
    ap.add_argument("--rate", type=float, default=1000.0, help="msg/s in the paced run")
    ap.add_argument("--paced-seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--quick", action="store_true", help="1 round, 3,000 messages, 1 s paced")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.count, args.paced_seconds = 1, 3000, 1.0
    intervals = [float(x) for x in args.intervals.split(",")]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(f"command: {' '.join(sys.argv)}")
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        (tmp / "base").mkdir()
        trees = {"base": extract(args.baseline, tmp / "base"), "head": ROOT}
        for r in range(args.rounds):
            for interval in intervals:
                for label, tree, address, policy in CASES:
                    res = run_case(trees[tree], tmp, interval, address, policy, args)
                    results.setdefault(f"{interval:g}|{label}", []).append(res)
                    print(f"round {r + 1}, {interval:g} ms, {label}: {res}", file=sys.stderr)
    print()
    print("| commit interval | case | max msg/s | max p50 ms | max p99 ms | paced p50 ms | paced p99 ms |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for key, runs in results.items():
        interval, label = key.split("|")

        def med(mode: str, field: str, runs: list[dict[str, Any]] = runs) -> float:
            return statistics.median(run[mode][field] for run in runs)

        print(
            f"| {interval} ms | {label} | {med('max', 'msgs_per_s'):,.0f} | {med('max', 'p50_ms'):.1f} | "
            f"{med('max', 'p99_ms'):.1f} | {med('paced', 'p50_ms'):.1f} | {med('paced', 'p99_ms'):.1f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
