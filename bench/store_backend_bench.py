"""Durable throughput on the PostgreSQL store against the SQLite store, in one run.

Starts a PostgreSQL server (Debian's package, as tests/pgserver.py does, fsync and
synchronous_commit on: its defaults) and, round by round, our broker on each backend
(order alternated), each on a fresh store (a new file; a new database). Each run is
``amqp10 bench --durable``: one producer and one consumer process, COUNT messages of
SIZE bytes, at-least-once, CREDIT in flight; every message is committed before it is
accepted. Reported: msg/s, the broker's CPU per message, and on PostgreSQL the
database server's CPU per message (every postgres process: the broker's two sessions
and the server's writers), then the ratio PostgreSQL / SQLite of the medians.

    .venv/bin/python bench/store_backend_bench.py                # 3 rounds of 20,000
    .venv/bin/python bench/store_backend_bench.py --quick        # 1 round of 3,000
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from amqp10.cli.bench.harness import BenchConfig, cpu_seconds, run_bench, start_our_broker  # noqa: E402
from tests.pgserver import PostgresServer  # noqa: E402

PG_STORE = """
[store]
backend = "postgresql"
dsn = "{dsn}"
"""


def tree_cpu_seconds(root_pid: int) -> float:
    """CPU seconds (user + system) of a process and its live children (the postmaster
    and its backends and writers)."""
    try:
        with open(f"/proc/{root_pid}/task/{root_pid}/children") as f:
            children = [int(p) for p in f.read().split()]
    except OSError:
        children = []
    return sum(cpu_seconds(pid) or 0.0 for pid in [root_pid, *children])


def one_run(backend: str, pg: PostgresServer, args: argparse.Namespace) -> dict[str, float]:
    tmp = tempfile.mkdtemp(prefix="amqp10-storebench-")
    extra = PG_STORE.format(dsn=pg.new_database()) if backend == "postgresql" else ""
    broker = start_our_broker(tmp, extra_config=extra)
    try:
        broker.wait_listening(30)
        assert pg.proc is not None
        pg_before = tree_cpu_seconds(pg.proc.pid)
        cfg = BenchConfig(count=args.count, size=args.size, durable=True, credit=args.credit, timeout=300)
        r = run_bench(cfg, broker=broker, broker_name=f"amqp10 ({backend})")
        pg_cpu = tree_cpu_seconds(pg.proc.pid) - pg_before
    finally:
        broker.stop(15)
        shutil.rmtree(tmp, ignore_errors=True)
    per = r.received or 1
    return {
        "msgs_per_s": r.throughput,
        "broker_us": (r.broker_cpu_s or 0.0) / per * 1e6,
        "db_us": pg_cpu / per * 1e6 if backend == "postgresql" else 0.0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--credit", type=int, default=500, help="messages in flight (default 500)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1 round of 3,000 messages")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.count = 1, 3000
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(f"command: {' '.join(sys.argv)}")
    results: dict[str, list[dict[str, float]]] = {"sqlite": [], "postgresql": []}
    with PostgresServer(fsync=True) as pg:
        print(f"PostgreSQL {pg.bin.parent.name}, fsync on, synchronous_commit on")
        for rnd in range(args.rounds):
            order = ["sqlite", "postgresql"] if rnd % 2 == 0 else ["postgresql", "sqlite"]
            for backend in order:
                started = time.monotonic()
                res = one_run(backend, pg, args)
                results[backend].append(res)
                print(
                    f"round {rnd + 1} {backend:<10} {res['msgs_per_s']:>8,.0f} msg/s  broker "
                    f"{res['broker_us']:.0f} us/msg  database {res['db_us']:.0f} us/msg  "
                    f"({time.monotonic() - started:.1f}s)"
                )
    med = {b: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for b, rs in results.items()}
    print()
    print(f"| backend | msg/s (median of {args.rounds}) | broker CPU us/msg | database server CPU us/msg |")
    print("|---|---|---|---|")
    for b in ("sqlite", "postgresql"):
        m = med[b]
        db = f"{m['db_us']:.0f}" if b == "postgresql" else "(in the broker)"
        print(f"| {b} | {m['msgs_per_s']:,.0f} | {m['broker_us']:.0f} | {db} |")
    ratio = med["postgresql"]["msgs_per_s"] / med["sqlite"]["msgs_per_s"]
    print(f"\nPostgreSQL / SQLite throughput: {ratio:.2f}x")


if __name__ == "__main__":
    main()
