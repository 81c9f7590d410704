"""Soak: many connections publishing and consuming for a long time; is the broker flat?

Starts our broker (default configuration: every message stored) and ``--connections``
client connections in this process, each with one producer and one consumer on one of
``--queues`` queues, in mixed settle modes: producers alternate unsettled (at least
once) and pre-settled sends, consumers alternate at-least-once (accept each) and
at-most-once (pre-settled) links. The total publish rate is ``--rate`` messages/s.

Every minute it records the broker's resident set (VmRSS), its open file descriptors,
its CPU seconds, the messages sent and received in that minute and their end-to-end
latency percentiles (p50, p99: send time in the body, taken at receipt), as one row of
a Markdown table written (and flushed) to ``--out``. It stops by itself after
``--minutes`` (or ``--max-messages``) and then prints whether RSS, descriptors and p99
are flat: the mean of the last quarter of the rows against the second quarter.

    nice -n 10 .venv/bin/python bench/soak.py --minutes 60 --out bench/soak-results.md
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio

import amqp10
from amqp10.cli.bench.harness import BrokerProcess, cpu_seconds, percentile
from amqp10.client import SettleMode
from amqp10.message import Message


def rss_kib(pid: int) -> int | None:
    """The current resident set (VmRSS) of a live process, in KiB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def open_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


@dataclass
class Tally:
    sent: int = 0
    received: int = 0
    errors: int = 0
    latencies_us: list[int] = field(default_factory=list)

    def take(self) -> tuple[int, int, int, list[int]]:
        out = (self.sent, self.received, self.errors, self.latencies_us)
        self.sent = self.received = self.errors = 0
        self.latencies_us = []
        return out


BODY = struct.Struct("!d")


async def producer(port: int, index: int, queue: str, rate: float, tally: Tally, stop: anyio.Event, size: int) -> None:
    presettled = index % 2 == 1
    pad = b"x" * max(0, size - BODY.size)
    async with await amqp10.connect(f"amqp://127.0.0.1:{port}") as conn:
        snd = await conn.open_sender(queue, timeout=30)
        rcv_mode = SettleMode.AT_MOST_ONCE if index % 2 else SettleMode.AT_LEAST_ONCE
        rcv = await conn.open_receiver(queue, credit=50, settle_mode=rcv_mode, timeout=30)
        async with anyio.create_task_group() as tg:
            tg.start_soon(consumer, rcv, rcv_mode, tally, stop)
            period = 1.0 / rate
            next_at = time.monotonic()
            while not stop.is_set():
                body = BODY.pack(time.time()) + pad
                try:
                    await snd.send(Message(body=body, durable=True), settled=presettled, timeout=30)
                    tally.sent += 1
                except Exception:
                    tally.errors += 1
                next_at += period
                delay = next_at - time.monotonic()
                if delay > 0:
                    await anyio.sleep(delay)
                else:
                    next_at = time.monotonic()
            await anyio.sleep(2)  # let the consumer take what is in flight
            tg.cancel_scope.cancel()


async def consumer(rcv: amqp10.Receiver, mode: SettleMode, tally: Tally, stop: anyio.Event) -> None:
    async for d in rcv:
        (sent_at,) = BODY.unpack_from(d.payload if d.message.body is None else d.message.body)
        tally.latencies_us.append(int((time.time() - sent_at) * 1e6))
        tally.received += 1
        if mode is SettleMode.AT_LEAST_ONCE:
            await d.accept()


HEADER = "| minute | RSS MiB | fds | broker CPU s | sent | received | errors | p50 ms | p99 ms |"


async def soak(args: argparse.Namespace) -> int:
    data = tempfile.mkdtemp(prefix="amqp10-soak-")
    broker = BrokerProcess(
        [sys.executable, "-m", "amqp10.cli", "broker", "--port", "0", "--http-port", "0", "--data-dir", data],
        name="amqp10 broker",
    )
    rows: list[tuple[float, ...]] = []
    out = Path(args.out)
    try:
        port = broker.wait_listening(30)
        tally = Tally()
        stop = anyio.Event()
        per_conn = args.rate / args.connections
        with out.open("w") as f:
            f.write(
                f"Soak: {args.connections} connections (producer + consumer each, mixed settle modes), "
                f"{args.queues} queues, {args.rate:g} msg/s of {args.size} B durable messages in all; "
                f"started {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n\n{HEADER}\n"
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
            )
            f.flush()
            deadline = time.monotonic() + args.minutes * 60
            total = 0
            async with anyio.create_task_group() as tg:
                for i in range(args.connections):
                    tg.start_soon(producer, port, i, f"soak-{i % args.queues}", per_conn, tally, stop, args.size)
                minute = 0
                while time.monotonic() < deadline and total < args.max_messages and broker.proc.poll() is None:
                    await anyio.sleep(min(args.interval, max(0.0, deadline - time.monotonic())))
                    minute += 1
                    sent, received, errors, lat = tally.take()
                    total += sent
                    row = (
                        minute,
                        (rss_kib(broker.pid) or 0) / 1024,
                        open_fds(broker.pid) or 0,
                        cpu_seconds(broker.pid) or 0.0,
                        sent,
                        received,
                        errors,
                        (percentile(lat, 50) or 0) / 1000,
                        (percentile(lat, 99) or 0) / 1000,
                    )
                    rows.append(row)
                    f.write("| {} | {:.1f} | {} | {:.1f} | {} | {} | {} | {:.1f} | {:.1f} |\n".format(*row))
                    f.flush()
                stop.set()
            verdict = flatness(rows)
            f.write(f"\n{verdict}\n")
        print(out.read_text())
        return 0 if broker.proc.poll() is None else 1
    finally:
        broker.stop(15)
        shutil.rmtree(data, ignore_errors=True)


def flatness(rows: list[tuple[float, ...]]) -> str:
    """Mean RSS, fds and p99 over the last quarter of the rows against the second quarter
    (the first quarter is warm-up: caches, queues reaching their steady depth)."""
    if len(rows) < 4:
        return "too few rows to judge flatness"
    q = len(rows) // 4

    def mean(col: int, part: list[tuple[float, ...]]) -> float:
        return sum(r[col] for r in part) / len(part)

    early, late = rows[q : 2 * q], rows[-q:]
    parts = []
    for name, col in (("RSS", 1), ("fds", 2), ("p99", 8)):
        a, b = mean(col, early), mean(col, late)
        parts.append(f"{name} {a:.1f} -> {b:.1f} ({b / a:.2f}x)" if a else f"{name} {a:.1f} -> {b:.1f}")
    return "Second quarter -> last quarter (means): " + "; ".join(parts)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--connections", type=int, default=50)
    p.add_argument("--queues", type=int, default=10)
    p.add_argument("--rate", type=float, default=300.0, help="messages/s published in all")
    p.add_argument("--size", type=int, default=256, help="body bytes")
    p.add_argument("--minutes", type=float, default=60.0, help="stop after this long")
    p.add_argument("--interval", type=float, default=60.0, help="seconds per row (default a minute)")
    p.add_argument("--max-messages", type=int, default=10_000_000, help="or after this many sent")
    p.add_argument("--out", default="bench/soak-results.md", help="the per-minute table (Markdown)")
    args = p.parse_args()
    sys.exit(anyio.run(soak, args))


if __name__ == "__main__":
    main()
