"""A backlog with no consumer: does the broker's memory stay bounded, and is nothing lost?

Starts our broker with its default configuration (queues page bodies out past
``limits.queue_memory_budget_bytes``: durable messages are in the store already,
non-durable ones go to its temporary table), publishes ``--count`` messages of
``--size`` bytes to one queue with no consumer (``--producers`` connections, each keeping
a window in flight), records the broker's resident size every second and its peak
(VmHWM), then drains the queue with one consumer and checks that every message came
back exactly once, each producer's in order. Bounded by count and ``--timeout``.

    .venv/bin/python bench/backlog_bench.py --count 5000000            # the issue's figure
    .venv/bin/python bench/backlog_bench.py --count 100000 --budget 1048576   # a smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402

from amqp10.cli.bench.harness import BrokerProcess, peak_rss, rss_kib  # noqa: E402
from amqp10.client import connect  # noqa: E402
from amqp10.message import Message  # noqa: E402
from amqp10.types import Accepted  # noqa: E402

STAMP = struct.Struct(">II")  # producer, sequence


async def produce(
    url: str, address: str, who: int, count: int, size: int, window: int, durable: bool, progress: list[int]
) -> None:
    pad = b"\x00" * (size - STAMP.size)
    async with await connect(url, timeout=30) as conn:
        sender = await conn.open_sender(address)
        flag = True if durable else None
        messages = (Message([STAMP.pack(who, i) + pad], body_type="data", durable=flag) for i in range(count))
        async with contextlib.aclosing(sender.pipeline(messages, window=window, timeout=math.inf)) as outcomes:
            async for outcome in outcomes:
                if not isinstance(outcome, Accepted):
                    raise SystemExit(f"producer {who}: a message was not accepted: {outcome!r}")
                progress[who] += 1
        await sender.close()


async def drain(url: str, address: str, producers: int, total: int, progress: list[int]) -> list[int]:
    """Take every message; per producer, the next sequence number expected (checks order)."""
    nxt = [0] * producers
    async with await connect(url, timeout=30, max_buffered=2000) as conn:
        receiver = await conn.open_receiver(address, credit=1000, auto_accept=True)
        got = 0
        async for d in receiver:
            who, seq = STAMP.unpack_from(Message.decode(d.payload).body[0])
            if seq != nxt[who]:
                raise SystemExit(f"producer {who}: got {seq}, expected {nxt[who]} (lost or out of order)")
            nxt[who] += 1
            got += 1
            progress[0] = got
            if got >= total:
                break
        await receiver.close()
    return nxt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=5_000_000, help="messages in the backlog")
    ap.add_argument("--size", type=int, default=1024, help="body bytes a message")
    ap.add_argument("--producers", type=int, default=2, help="publishing connections")
    ap.add_argument("--window", type=int, default=1000, help="messages in flight per producer")
    ap.add_argument("--budget", type=int, default=None, help="limits.queue_memory_budget_bytes (default: the broker's)")
    ap.add_argument("--durable", action="store_true", help="durable messages (header.durable): stored, fsynced")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds for the whole run")
    ap.add_argument("--json", type=Path, help="write the figures here too")
    ns = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="amqp10-backlog-")
    config = Path(tmp, "broker.toml")
    text = 'log_level = "info"\n'
    if ns.budget is not None:
        text += f"[limits]\nqueue_memory_budget_bytes = {ns.budget}\n"
    config.write_text(text)
    argv = [sys.executable, "-m", "amqp10.cli", "broker", "--port", "0", "--data-dir", tmp, "--config", str(config)]
    broker = BrokerProcess(argv, name="amqp10 broker")
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    try:
        port = broker.wait_listening(30)
        url = f"amqp://127.0.0.1:{port}"
        pid = broker.proc.pid
        idle = rss_kib(pid) or 0
        t0 = time.monotonic()
        phase = ["publish"]
        progress = [0] * ns.producers

        def sample() -> None:
            while not stop.is_set():
                v = rss_kib(pid)
                if v is not None:
                    samples.append((time.monotonic() - t0, v))
                    if len(samples) % 30 == 0:
                        print(f"  {samples[-1][0]:7.0f} s  {phase[0]}  {sum(progress):>9,}  RSS {v / 1024:7.1f} MiB", flush=True)
                stop.wait(1.0)

        threading.Thread(target=sample, daemon=True).start()
        per = [ns.count // ns.producers + (1 if i < ns.count % ns.producers else 0) for i in range(ns.producers)]

        async def publish_all() -> None:
            with anyio.fail_after(ns.timeout):
                async with anyio.create_task_group() as tg:
                    for who in range(ns.producers):
                        tg.start_soon(produce, url, "backlog", who, per[who], ns.size, ns.window, ns.durable, progress)

        anyio.run(publish_all)
        published_s = time.monotonic() - t0
        backlog_peak = peak_rss(pid) or 0
        backlog_rss = rss_kib(pid) or 0
        store_bytes = sum(f.stat().st_size for f in Path(tmp).rglob("*.sqlite3*"))
        print(
            f"backlog of {ns.count:,} published in {published_s:.0f} s; broker peak RSS "
            f"{backlog_peak / 1024:.1f} MiB (idle {idle / 1024:.1f} MiB), now {backlog_rss / 1024:.1f} MiB",
            flush=True,
        )
        phase[0] = "drain"
        progress = [0]
        t1 = time.monotonic()
        nxt = anyio.run(lambda: _bounded(drain(url, "backlog", ns.producers, ns.count, progress), ns.timeout))
        drained_s = time.monotonic() - t1
        lost = sum(p - n for p, n in zip(per, nxt, strict=True))
        result = {
            "count": ns.count,
            "size": ns.size,
            "producers": ns.producers,
            "durable": ns.durable,
            "budget": ns.budget,
            "idle_rss_mib": round(idle / 1024, 1),
            "peak_rss_publishing_mib": round(backlog_peak / 1024, 1),
            "rss_with_backlog_mib": round(backlog_rss / 1024, 1),
            "peak_rss_mib": round((peak_rss(pid) or 0) / 1024, 1),
            "store_mib": round(store_bytes / 2**20, 1),
            "publish_s": round(published_s, 1),
            "publish_msg_s": round(ns.count / published_s),
            "drain_s": round(drained_s, 1),
            "drain_msg_s": round(ns.count / drained_s),
            "drained": sum(nxt),
            "lost": lost,
            "command": " ".join(sys.argv),
        }
        print(json.dumps(result, indent=2), flush=True)
        if ns.json is not None:
            ns.json.write_text(json.dumps(result, indent=2) + "\n")
    finally:
        stop.set()
        broker.stop(timeout=120)  # a big store takes a while to close
        shutil.rmtree(tmp, ignore_errors=True)
    if lost:
        raise SystemExit(f"{lost} messages lost")


async def _bounded(work, seconds: float):  # type: ignore[no-untyped-def]
    with anyio.fail_after(seconds):
        return await work


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
