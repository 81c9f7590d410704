"""``amqp10 bench``: the command line over the harness, and the summary it prints."""

from __future__ import annotations

import argparse
import json

from .._common import Subparsers, fail
from ..progress import Progress
from .harness import SETTLE_MODES, BenchConfig, BenchError, BenchResult, run_bench

__all__ = ["add_parser", "cmd_bench", "format_result"]


def format_result(r: BenchResult) -> str:
    """The human-readable summary of a run."""
    c = r.config
    lines = [
        f"broker     {r.broker}",
        f"workload   {c.count:,} messages of {c.size} bytes, {c.producers} producer(s), "
        f"{c.consumers} consumer(s), {c.settle}{', durable' if c.durable else ''}",
        f"throughput {r.throughput:,.0f} msg/s  ({r.received:,} received in {r.elapsed:.2f}s; "
        f"producers {r.send_rate:,.0f} msg/s)",
    ]
    if r.latencies_us:
        parts = []
        for name, p in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100)):
            v = r.latency(p)
            parts.append(f"{name} {v:.2f}" if v is not None else f"{name} -")
        lines.append("latency ms " + "  ".join(parts))
    if r.broker_rss_kib is not None:
        lines.append(f"broker RSS {r.broker_rss_kib / 1024:.1f} MiB peak")
    cpu = [
        (n, v)
        for n, v in (
            ("broker", r.broker_cpu_s),
            ("producers", r.producer_cpu_s),
            ("consumers", r.consumer_cpu_s),
        )
        if v is not None
    ]
    if cpu:
        per = r.received or 1
        lines.append(
            "cpu        " + "  ".join(f"{n} {v:.2f}s ({v / per * 1e6:.0f} us/msg)" for n, v in cpu)
        )
    return "\n".join(lines)


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    """Register ``bench`` on the ``amqp10`` command's subparsers."""
    b = sub.add_parser(
        "bench",
        help="measure a broker's throughput and latency",
        description="Start a broker (ours, unless --url) and N producers and M consumers using "
        "the amqp10 client in separate processes; print messages/s and latency percentiles.",
    )
    b.add_argument("--url", help="an existing broker to measure (default: start ours)")
    b.add_argument("--producers", "-p", type=int, default=1, help="producer processes (default 1)")
    b.add_argument("--consumers", "-c", type=int, default=1, help="consumer processes (default 1)")
    b.add_argument(
        "--count", "-n", type=int, default=10_000, help="messages in all (default 10000)"
    )
    b.add_argument(
        "--size",
        "-s",
        type=int,
        default=100,
        help="body bytes per message (default 100, at least 16)",
    )
    b.add_argument(
        "--settle",
        choices=SETTLE_MODES,
        default="at-least-once",
        help="at-least-once (outcomes; default) or at-most-once (pre-settled)",
    )
    b.add_argument(
        "--durable", action="store_true", help="send durable messages (the broker stores them)"
    )
    b.add_argument("--address", default="bench", help="queue address (default bench)")
    b.add_argument(
        "--credit",
        type=int,
        default=1000,
        help="consumer credit window and producer in-flight limit (default 1000)",
    )
    b.add_argument(
        "--timeout", type=float, default=120.0, help="give up after this many seconds (default 120)"
    )
    b.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="slow consumers: each takes at most this many messages/s (default: no limit)",
    )
    b.add_argument(
        "--json", metavar="PATH", help="also write the result as JSON to PATH ('-' for stdout)"
    )
    b.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    b.set_defaults(func=cmd_bench)
    return b


def cmd_bench(args: argparse.Namespace) -> int:
    """Run ``amqp10 bench``; the exit code: 0 done, 1 failed, 2 a bad workload, 130 interrupted."""
    try:
        cfg = BenchConfig(
            count=args.count,
            size=args.size,
            producers=args.producers,
            consumers=args.consumers,
            settle=args.settle,
            durable=args.durable,
            address=args.address,
            credit=args.credit,
            timeout=args.timeout,
            url=args.url,
            rate=args.rate,
        )
    except ValueError as exc:
        fail("bench", str(exc))
        return 2
    try:
        result = run_bench(cfg, progress=Progress(cfg.count, enabled=not args.no_progress))
    except BenchError as exc:
        fail("bench", str(exc))
        return 1
    except KeyboardInterrupt:
        fail("bench", "interrupted")
        return 130
    print(format_result(result))
    if args.json:
        text = json.dumps(result.as_dict(), indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    return 0
