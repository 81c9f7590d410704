"""Does the broker's memory stay bounded when a publisher outpaces its consumer?

One fast producer and one slow consumer (paced to ``--rate`` messages/s)
move ``--count`` messages of ``--size`` bytes through our broker, three ways:

    unbounded   no limits: the queue takes whatever the producer sends
    max-length  the queue holds at most ``--max-length`` messages, overflow "block":
                the broker stops granting the producer credit while it is full
    memory      no queue limit, but the broker's ``memory_limit_bytes`` is
                ``--memory-limit``: past it, no publisher gets credit

Each run is bounded (by count and ``--timeout``); the broker's resident set
is sampled every 50 ms and its peak (VmHWM) read at the end. Bounded means:
the peak under a limit stays near the idle broker's size plus the limit,
however much data goes through, while the unbounded run grows with the
backlog.

    .venv/bin/python bench/memory.py                     # 20,000 x 4 KiB, consumer at 1,000 msg/s
    .venv/bin/python bench/memory.py --count 10000 --rate 2000
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from amqp10.cli.bench.harness import (  # noqa: E402
    BenchConfig,
    BenchError,
    peak_rss,
    rss_kib,
    run_bench,
    start_our_broker,
)


def one(label: str, extra_config: str, cfg: BenchConfig) -> dict[str, object]:
    tmp = tempfile.mkdtemp(prefix="amqp10-memory-")
    broker = start_our_broker(tmp, extra_config=extra_config)
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    try:
        port = broker.wait_listening(20)
        idle = rss_kib(broker.pid) or 0
        t0 = time.monotonic()

        def sample() -> None:
            while not stop.is_set():
                v = rss_kib(broker.pid)
                if v is not None:
                    samples.append((time.monotonic() - t0, v))
                stop.wait(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        c = BenchConfig(**{**cfg.__dict__, "url": f"amqp://127.0.0.1:{port}"})
        try:
            r = run_bench(c, broker=broker, broker_name="amqp10 broker")
            error = None
        except BenchError as exc:
            r, error = None, str(exc)
        peak = peak_rss(broker.pid)
        stop.set()
        sampler.join(2)
    finally:
        stop.set()
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "label": label,
        "idle_kib": idle,
        "peak_kib": peak,
        "samples": samples,
        "received": r.received if r else 0,
        "throughput": r.throughput if r else None,
        "p99_ms": r.latency(99) if r else None,
        "error": error,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--count", type=int, default=20_000)
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--rate", type=float, default=1000.0, help="the consumer's pace, messages/s")
    p.add_argument("--max-length", type=int, default=1000)
    p.add_argument("--memory-limit", type=int, default=16 * 1024 * 1024, help="bytes")
    p.add_argument("--timeout", type=float, default=180.0)
    p.add_argument("--only", help="comma-separated: unbounded,max-length,memory")
    args = p.parse_args(argv)
    cfg = BenchConfig(
        count=args.count, size=args.size, rate=args.rate, timeout=args.timeout, address="mem.q"
    )
    runs = {
        "unbounded": "",
        "max-length": (
            '\n[[addresses]]\npattern = "mem.*"\n[addresses.policy]\ndurable = false\n'
            f'max_length = {args.max_length}\noverflow = "block"\n'
        ),
        "memory": f"\n[limits]\nmemory_limit_bytes = {args.memory_limit}\n",
    }
    chosen = args.only.split(",") if args.only else list(runs)
    volume = args.count * args.size
    print(
        f"{args.count:,} messages of {args.size} bytes ({volume / 2**20:.0f} MiB through the broker), "
        f"consumer paced to {args.rate:,.0f} msg/s; max-length {args.max_length:,}, "
        f"memory limit {args.memory_limit / 2**20:.0f} MiB"
    )
    print()
    print("| run | broker idle RSS | broker peak RSS | growth | delivered | msg/s | p99 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    ok = True
    for name in chosen:
        res = one(name, runs[name], cfg)
        idle = int(res["idle_kib"] or 0) / 1024  # type: ignore[call-overload]
        peak = (int(res["peak_kib"]) / 1024) if res["peak_kib"] else float("nan")  # type: ignore[call-overload]
        tp = res["throughput"]
        p99 = res["p99_ms"]
        print(
            f"| {name} | {idle:.1f} MiB | {peak:.1f} MiB | {peak - idle:+.1f} MiB | {res['received']:,} | "
            f"{tp:,.0f} | {p99:.0f} |"
            if tp is not None and p99 is not None
            else f"| {name} | {idle:.1f} MiB | {peak:.1f} MiB | {peak - idle:+.1f} MiB | failed: {res['error']} | | |"
        )
        ok = ok and res["error"] is None
    print()
    print(
        "command: "
        + " ".join(
            [".venv/bin/python", "bench/memory.py", *(argv if argv is not None else sys.argv[1:])]
        )
    )
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
