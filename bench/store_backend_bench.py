"""Durable throughput, measured side by side in one run: the PostgreSQL store against
the SQLite store (``--compare backends``, the default), or durable against non-durable
messages on the same workload (``--compare durability``, issue 20's 0.8x).

Each run is ``amqp10 bench``: one producer and one consumer process, COUNT messages of
SIZE bytes, at-least-once, CREDIT in flight, against our broker on a fresh store (a new
file; a new database); with ``--durable`` messages every message is committed before it
is accepted. The cases of a round run in alternated order. Reported per run: msg/s,
the broker's CPU per message (user + system from /proc), and on PostgreSQL the database
server's CPU per message (every postgres process: the broker's sessions and the
server's writers); then the medians, and the ratio of each round and its median.

``--compare backends``: durable on SQLite, durable on PostgreSQL (Debian's server,
started here as tests/pgserver.py does, fsync and synchronous_commit on).
``--compare durability``: non-durable and durable on SQLite; ``--postgresql`` adds
durable on PostgreSQL; ``--base PATH`` adds durable on SQLite with the broker of another
source tree (``PYTHONPATH``), and non-durable with it, for a before/after in the same run
(that tree's own ratio is its durable row over its non-durable row, round by round).

    .venv/bin/python bench/store_backend_bench.py                # 3 rounds of 20,000
    .venv/bin/python bench/store_backend_bench.py --quick        # 1 round of 3,000
    .venv/bin/python bench/store_backend_bench.py --compare durability --rounds 7
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Case:
    """One kind of run: a label, the store backend, durable messages or not, the broker's tree."""

    label: str
    backend: str = "sqlite"
    durable: bool = True
    tree: str | None = None  # another source tree's broker (PYTHONPATH), or this one


def tree_cpu_seconds(root_pid: int) -> float:
    """CPU seconds (user + system) of a process and its live children (the postmaster
    and its backends and writers)."""
    try:
        with open(f"/proc/{root_pid}/task/{root_pid}/children") as f:
            children = [int(p) for p in f.read().split()]
    except OSError:
        children = []
    return sum(cpu_seconds(pid) or 0.0 for pid in [root_pid, *children])


def one_run(case: Case, pg: PostgresServer | None, args: argparse.Namespace) -> dict[str, float]:
    tmp = tempfile.mkdtemp(prefix="amqp10-storebench-")
    on_pg = case.backend == "postgresql"
    assert pg is not None or not on_pg
    extra = PG_STORE.format(dsn=pg.new_database()) if pg is not None and on_pg else ""
    env = None if case.tree is None else {**os.environ, "PYTHONPATH": case.tree}
    broker = start_our_broker(tmp, extra_config=extra, env=env)
    try:
        broker.wait_listening(30)
        pg_before = tree_cpu_seconds(pg.proc.pid) if pg is not None and pg.proc is not None else 0.0
        cfg = BenchConfig(count=args.count, size=args.size, durable=case.durable, credit=args.credit, timeout=300)
        r = run_bench(cfg, broker=broker, broker_name=f"amqp10 ({case.label})")
        pg_cpu = tree_cpu_seconds(pg.proc.pid) - pg_before if pg is not None and pg.proc is not None else 0.0
    finally:
        broker.stop(15)
        shutil.rmtree(tmp, ignore_errors=True)
    per = r.received or 1
    return {
        "msgs_per_s": r.throughput,
        "broker_us": (r.broker_cpu_s or 0.0) / per * 1e6,
        "db_us": pg_cpu / per * 1e6 if on_pg else 0.0,
    }


def cases(args: argparse.Namespace) -> list[Case]:
    """The runs of a round; the first is what the ratios are taken against."""
    if args.compare == "backends":
        return [Case("SQLite"), Case("PostgreSQL", backend="postgresql")]
    out = [Case("non-durable", durable=False), Case("durable")]
    if args.base:
        out.append(Case(f"durable, {args.base}", tree=args.base))
        out.append(Case(f"non-durable, {args.base}", durable=False, tree=args.base))
    if args.postgresql:
        out.append(Case("durable, PostgreSQL", backend="postgresql"))
    return out


@contextlib.contextmanager
def postgres_if(needed: bool) -> Iterator[PostgresServer | None]:
    if not needed:
        yield None
        return
    with PostgresServer(fsync=True) as pg:
        print(f"PostgreSQL {pg.bin.parent.name}, fsync on, synchronous_commit on")
        yield pg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--compare", choices=("backends", "durability"), default="backends",
                    help="backends: durable on PostgreSQL against SQLite (default); durability: "
                    "durable against non-durable messages")  # fmt: skip
    ap.add_argument("--count", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--credit", type=int, default=500, help="messages in flight (default 500)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1 round of 3,000 messages")
    ap.add_argument("--postgresql", action="store_true", help="durability: add durable on PostgreSQL")
    ap.add_argument("--base", metavar="PATH", help="durability: add durable and non-durable with the broker of this source tree")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.count = 1, 3000
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(f"command: {' '.join(sys.argv)}")
    kinds = cases(args)
    results: dict[Case, list[dict[str, float]]] = {c: [] for c in kinds}
    with postgres_if(any(c.backend == "postgresql" for c in kinds)) as pg:
        for rnd in range(args.rounds):
            order = kinds if rnd % 2 == 0 else kinds[::-1]
            for case in order:
                started = time.monotonic()
                res = one_run(case, pg, args)
                results[case].append(res)
                db = f"  database {res['db_us']:.0f} us/msg" if case.backend == "postgresql" else ""
                print(
                    f"round {rnd + 1} {case.label:<22} {res['msgs_per_s']:>8,.0f} msg/s  broker "
                    f"{res['broker_us']:.0f} us/msg{db}  ({time.monotonic() - started:.1f}s)"
                )
    first = kinds[0]
    print()
    print(f"| case | msg/s (median of {args.rounds}) | broker CPU us/msg | database server CPU us/msg "
          f"| {first.label} = 1: each round | median |")  # fmt: skip
    print("|---|---:|---:|---:|---|---:|")
    for case in kinds:
        rs = results[case]
        ratios = [r["msgs_per_s"] / b["msgs_per_s"] for r, b in zip(rs, results[first], strict=True)]
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        db = f"{med['db_us']:.0f}" if case.backend == "postgresql" else "(in the broker)"
        print(
            f"| {case.label} | {med['msgs_per_s']:,.0f} | {med['broker_us']:.0f} | {db} "
            f"| {' / '.join(f'{x:.2f}' for x in ratios)} | {statistics.median(ratios):.2f}x |"
        )
    if args.compare == "durability" and args.base:  # the other tree's durable over its own non-durable
        dur, plain = (results[c] for c in kinds[2:4])
        own = [d["msgs_per_s"] / p["msgs_per_s"] for d, p in zip(dur, plain, strict=True)]
        print(f"\n{args.base}: durable / its non-durable, each round "
              f"{' / '.join(f'{x:.2f}' for x in own)}, median {statistics.median(own):.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
