"""Broker CPU per message at 2 workers for messages that do not cross, against 1 worker (issue 31).

    .venv/bin/python bench/workers_local_bench.py --count 20000 --runs 8

A 1-worker and a 2-worker broker, each started once; one Proton C producer and consumer
on queue ``wb0``, the runs alternating between the brokers. The kernel puts each client
connection on a worker by its hash, so some 2-worker runs have both clients on the
queue's owner: a run in which one worker used no CPU (at most 3% of the broker's) is
*local*, nothing crossed; the others are *crossing*. Reported: the broker's CPU µs per
message (user + system of the parent and every worker, from /proc), per kind of run;
and before the runs, each process's CPU per second while idle (nothing connected): the
parent's select loop, the control links, the counters file.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare
import workers_bench as wb

from amqp10.cli.bench.harness import BenchConfig, cpu_seconds, run_bench


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--count", type=int, default=20_000, help="messages per run")
    p.add_argument("--runs", type=int, default=8, help="runs per broker")
    p.add_argument("--idle", type=float, default=10.0, help="seconds idle before the runs")
    args = p.parse_args(argv)
    why = compare.build_c()
    if why:
        print(why)
        return 1
    res: dict[str, list[float]] = {
        "1 worker": [],
        "2 workers, local": [],
        "2 workers, crossing": [],
    }
    with contextlib.ExitStack() as stack:
        brokers = {w: stack.enter_context(wb.started(w)) for w in (1, 2)}
        for w, (_, pids, _) in brokers.items():
            c0 = [cpu_seconds(pid) or 0.0 for pid in pids]
            time.sleep(args.idle)
            idle = [((cpu_seconds(pid) or 0.0) - c) / args.idle * 1e3 for pid, c in zip(pids, c0)]
            print(
                f"{w} worker(s), idle: {', '.join(f'{x:.1f}' for x in idle)} ms of CPU a second per process"
            )
        for i in range(args.runs):
            for w in (1, 2) if i % 2 == 0 else (2, 1):
                b, pids, url = brokers[w]
                c0 = [cpu_seconds(pid) or 0.0 for pid in pids]
                cfg = BenchConfig(count=args.count, producers=1, consumers=1, timeout=300, url=url)
                r = run_bench(cfg, worker=wb.per_queue(compare.proton_c_worker), broker=b)
                used = [(cpu_seconds(pid) or 0.0) - c for pid, c in zip(pids, c0)]
                us = sum(used) / max(r.received, 1) * 1e6
                kind = (
                    "1 worker"
                    if w == 1
                    else "2 workers, local"
                    if min(used[1:]) <= 0.03 * sum(used)
                    else "2 workers, crossing"
                )
                res[kind].append(us)
                print(f"run {i + 1} {kind:20} {r.throughput:8,.0f} msg/s {us:6.1f} us/msg "
                      f"(per process: {', '.join(f'{x:.2f}' for x in used)} s)", flush=True)  # fmt: skip
    for kind, v in res.items():
        if v:
            print(
                f"{kind:20} median {statistics.median(v):6.1f} us/msg over {len(v)}: {', '.join(f'{x:.1f}' for x in v)}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
