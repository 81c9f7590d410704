"""Throughput with 1 and 2 worker processes (issue 31), with the C clients, alternated rounds.

    .venv/bin/python bench/workers_bench.py                                   # 3 rounds
    .venv/bin/python bench/workers_bench.py --count 40000 --rounds 3 --workers 1 2 --queues 1 4

Workloads: one queue (one producer, one consumer) and ``Q`` queues with a producer and a
consumer each (producer ``i`` and consumer ``i`` on queue ``wb<i>``), at least once (the
producer waits for ``accepted``, the consumer accepts each), 100-byte messages. Each
round runs every workload on a fresh broker of every worker count, the order of the
worker counts alternating between rounds. Clients: Proton C (``bench/c/amqp10_bench_client.c``,
built as bench/compare.py builds it), or ``--client ours``. ``workers`` > 1 runs with
``AMQP10_WORKERS_PREVIEW=1``.

Reported per workload and worker count: the median msg/s, the broker's CPU µs per message
(the parent and every worker, user + system from /proc), and the ratio to one worker;
next to it, what ``bench/workers_model.py`` predicts for the same shape (``--core``,
``--crossing``). The model assumes a free core for every worker; on a machine with as
many cores as workers the clients' CPU takes from the broker's.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from amqp10.broker.workers.supervisor import PREVIEW_ENV  # noqa: E402
from amqp10.cli.bench.harness import (  # noqa: E402
    BROKER_CONFIG,
    BenchConfig,
    BrokerProcess,
    WorkerFactory,
    WorkerSpec,
    cpu_seconds,
    run_bench,
)

PREFIX = "wb"
"""The bench's queues are ``wb0``, ``wb1``...: with 2 workers, wb0 and wb1 are owned by
worker 0, wb2 and wb3 by worker 1 (the model is told the same names)."""


def family(pid: int) -> list[int]:
    """``pid`` and its children (the supervisor's workers)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [pid, *(int(c) for c in f.read().split())]
    except OSError:
        return [pid]


def family_cpu(pids: list[int]) -> float:
    return sum(cpu_seconds(p) or 0.0 for p in pids)


def per_queue(factory: WorkerFactory) -> WorkerFactory:
    """``factory``, with producer ``i`` and consumer ``i`` on queue ``wb<i>``."""

    def make(role: str, index: int, url: str, cfg: BenchConfig, count: int) -> WorkerSpec:
        mine = BenchConfig(**{**cfg.__dict__, "address": f"{PREFIX}{index}"})
        return factory(role, index, url, mine, count)

    return make


def one(workers: int, queues: int, count: int, factory: WorkerFactory) -> tuple[float, float]:
    """One run on a fresh broker: (msg/s, broker CPU µs per message)."""
    tmp = Path(tempfile.mkdtemp(prefix="amqp10-wb-", dir="/tmp"))
    try:
        conf = tmp / "b.toml"
        conf.write_text(f"workers = {workers}\n" + BROKER_CONFIG)
        env = {**os.environ, PREVIEW_ENV: "1", "PYTHONPATH": str(ROOT)}
        argv = [sys.executable, "-m", "amqp10.cli", "broker", "--port", "0", "--no-http",
                "--data-dir", str(tmp), "--config", str(conf)]  # fmt: skip
        b = BrokerProcess(argv, name=f"amqp10 broker, {workers} worker(s)", env=env, cwd=str(tmp))
        try:
            port = b.wait_listening(30)
            cfg = BenchConfig(count=count, producers=queues, consumers=queues, timeout=300,
                              url=f"amqp://127.0.0.1:{port}")  # fmt: skip
            pids = family(b.pid)
            deadline = time.monotonic() + 30
            while workers > 1 and len(pids) < workers + 1:  # the parent listens before it forks
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{b.name}: workers not started ({b.tail[-1:]})")
                time.sleep(0.05)
                pids = family(b.pid)
            cpu0 = family_cpu(pids)
            r = run_bench(cfg, worker=per_queue(factory), broker=b)
            cpu = family_cpu(pids) - cpu0
        finally:
            b.stop()
        return r.throughput, cpu / max(r.received, 1) * 1e6
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--count", type=int, default=40_000, help="messages per run (over all queues)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--queues", type=int, nargs="+", default=[1, 4])
    p.add_argument("--client", choices=["proton-c", "ours"], default="proton-c")
    p.add_argument("--core", type=float, default=0.15, help="the model's core share (docs/architecture.md)")
    p.add_argument("--crossing", type=float, default=1.3, help="the model's crossing/local CPU")
    args = p.parse_args(argv)
    import compare
    import workers_model

    if args.client == "proton-c":
        why = compare.build_c()
        if why:
            print(why)
            return 1
    factory: WorkerFactory = compare.proton_c_worker if args.client == "proton-c" else compare.our_worker
    res: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for i in range(args.rounds):
        order = list(args.workers) if i % 2 == 0 else list(reversed(args.workers))
        for q in args.queues:
            for n in order:
                rate, cpu = one(n, q, args.count, factory)
                res.setdefault((q, n), []).append((rate, cpu))
                print(f"round {i + 1} queues {q} workers {n} load {os.getloadavg()[0]:4.1f}: "
                      f"{rate:9,.0f} msg/s {cpu:6.1f} us/msg", flush=True)  # fmt: skip
    costs = workers_model.Costs.of(args.core, args.crossing)
    print(f"\n{args.client} clients, {args.count:,} messages a run, median of {args.rounds} rounds; "
          f"model: core share {args.core:g}, crossing {args.crossing:g}x\n")  # fmt: skip
    print("| workload | workers | msg/s (median) | runs | broker CPU µs/msg | vs 1 worker | model |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for q in args.queues:
        base = statistics.median(r for r, _ in res[(q, args.workers[0])])
        for n in args.workers:
            runs = res[(q, n)]
            rate = statistics.median(r for r, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            model = workers_model.speedup(workers_model.busiest_a, n, q, 1, costs, 2000, prefix=PREFIX)
            label = "1 queue, 1 producer + 1 consumer" if q == 1 else f"{q} queues, a pair each"
            every = ", ".join(f"{r:,.0f}" for r, _ in runs)
            print(f"| {label} | {n} | {rate:,.0f} | {every} | {cpu:.1f} | {rate / base:.2f}x | {model:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
