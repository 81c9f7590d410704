"""Each broker process's CPU a message, for ``bench/workers_bench.py``'s workloads.

    .venv/bin/python bench/profiles/worker_cpu.py rabbitmq-c --workers 2 --queues 1 --count 100000 [--move-connections]
    .venv/bin/python bench/profiles/worker_cpu.py proton-c --move-connections --publishers-apart --pin-workers

Starts ``amqp10 broker --workers N`` (from the tree it runs in: ``PYTHONPATH`` on a compiled
copy measures that build) as workers_bench does, runs one of its client families
(``proton-c``, ``rabbitmq-c``, ``rabbitmq-c-confirm``) on ``--queues`` queues, and prints,
round by round, the rate, the broker's CPU a message and each process's own (``/proc``
ticks of 10 ms over the run): the parent, and each worker by number, the owner of the first
queue (``wb0``) marked. Where a queue's work goes between workers (issue 31: the owner's side
of a crossing, a moved connection's worker), which the whole broker's figure hides. A
measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import amqp091_bench  # noqa: E402
import compare  # noqa: E402
import workers_bench as wb  # noqa: E402

from amqp10.broker.workers.ownership import Ownership  # noqa: E402

_STARTED = re.compile(r"worker (\d+) started \(pid (\d+)\)")


def cpu_seconds(pid: int) -> float:
    """User and system CPU of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_name(pid: int, parent: int, numbers: dict[int, int], owner: int) -> str:
    """``parent``, or ``worker N`` (the owner of the first queue marked)."""
    if pid == parent:
        return "parent"
    n = numbers.get(pid)
    return "worker ?" if n is None else f"worker {n}{' (owner of wb0)' if n == owner else ''}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("family", choices=[f.key for f in wb.FAMILIES])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--queues", type=int, default=1)
    p.add_argument("--count", type=int, default=100_000, help="messages a round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--move-connections", action="store_true")
    p.add_argument("--publishers-apart", action="store_true", help="with --move-connections")
    p.add_argument("--pin-workers", action="store_true", help="each worker bound to one CPU")
    ns = p.parse_args(argv)
    fam = {f.key: f for f in wb.FAMILIES}[ns.family]
    why = compare.build_c() if fam.key == "proton-c" else amqp091_bench.build_c()
    if why:
        print(f"cannot build the C clients: {why}", file=sys.stderr)
        return 1
    owner = Ownership(ns.workers).owner("/", f"{wb.PREFIX}0")
    extra = wb.settings(p, ns)
    for rnd in range(ns.rounds):
        with wb.started(ns.workers, extra) as (b, pids, url):
            numbers = {int(m.group(2)): int(m.group(1)) for m in map(_STARTED.search, b.tail) if m}
            before = {pid: cpu_seconds(pid) for pid in pids}
            rate, broker, busy, _rest = wb.measure(
                b, pids, url, fam, ns.queues, ns.count, wb.PREFIX
            )
            per = {pid: (cpu_seconds(pid) - before[pid]) / ns.count * 1e6 for pid in pids}

            names = {pid: process_name(pid, b.pid, numbers, owner) for pid in pids}
            each = ", ".join(
                f"{names[pid]} {per[pid]:.2f}" for pid in sorted(pids, key=names.__getitem__)
            )
            print(f"round {rnd + 1}: {rate:,.0f} msg/s, broker {broker:.1f} µs/msg, host {busy:.0%}; "
                  f"µs/msg: {each}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
