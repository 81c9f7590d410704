"""Throughput with 1 and 2 worker processes (issue 31), against RabbitMQ and Proton's C broker,
with C clients, alternated rounds.

    .venv/bin/python bench/workers_bench.py --count 40000 --rounds 3        # everything, one run
    .venv/bin/python bench/workers_bench.py --clients proton-c --no-peers   # 1 and 2 workers only
    .venv/bin/python bench/workers_bench.py --count 40000 --rounds 3 --workers 1 2 --queues 1 4

Clients (``--clients``), each a family of workloads:

    proton-c            AMQP 1.0, Proton C (``bench/c/amqp10_bench_client.c``), at least once
                        (the producer waits for ``accepted``, the consumer accepts each);
                        against Proton's C example broker (``broker.c``, 4 threads)
    rabbitmq-c          AMQP 0-9-1, rabbitmq-c (``bench/c/amqp091_bench_client.c``), no
                        confirms, consumer with no-ack; against RabbitMQ 3.10
    rabbitmq-c-confirm  rabbitmq-c, publisher confirms (a window of 1,000) and a basic.ack per
                        message, consumer prefetch 1,000; against RabbitMQ 3.10
    ours                AMQP 1.0, our client pair (``amqp10 bench``'s workers); no peer

Workloads of each family: one queue (one producer, one consumer) and ``Q`` queues with a
producer and a consumer each (producer ``i`` and consumer ``i`` on queue ``wb<i>``),
100-byte messages. Brokers: ours with every ``--workers`` count and the family's peer (``--no-peers``: none). Each round runs
every workload on a fresh broker of each kind (RabbitMQ, slow to start, once a round, a
queue of its own per family), the order of the brokers alternating between rounds. Peers
are started as ``bench/compare.py`` and ``bench/amqp091_bench.py`` start them (RabbitMQ
privately on 127.0.0.1, ``interop/peers/rabbitmq.py``); a missing one is skipped with a
note.

Reported per workload and broker: the median msg/s, every run, the broker's CPU µs per
message (ours: the parent and every worker; RabbitMQ: beam.smp; user + system from
/proc), the ratios to one worker and to the peer; next to ours, what
``bench/workers_model.py`` predicts for the same shape (``--core``, ``--crossing``; it
assumes a free core for every worker: on a machine with as many cores as workers the
clients' CPU takes from the broker's). Then the issue's targets at the largest worker
count: against one worker (1.3x one queue, 1.5x more queues) and against the peer
(rabbitmq-c 0.8x, with confirms 1.0x, Proton C 1.0x), on the medians and round by round.
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from amqp10.cli.bench.harness import (  # noqa: E402
    BROKER_CONFIG,
    BenchConfig,
    BenchError,
    BrokerProcess,
    WorkerFactory,
    WorkerSpec,
    cpu_seconds,
    our_worker,
    run_bench,
)

PREFIX = "wb"
"""The bench's queues are ``wb0``, ``wb1``...: with 2 workers, wb0 and wb1 are owned by
worker 0, wb2 and wb3 by worker 1 (the model is told the same names)."""

PROTON_C, RABBITMQ = "Proton C broker", "RabbitMQ"


@dataclass(frozen=True)
class Family:
    """Clients and settlement of a family of workloads, and the broker ours is held against."""

    key: str
    title: str
    settle: str
    peer: str | None  # PROTON_C, RABBITMQ or None
    target: float | None  # the issue's: ours at the largest worker count >= target x the peer


FAMILIES = [
    Family("proton-c", "AMQP 1.0, Proton C clients, at least once", "at-least-once", PROTON_C, 1.0),
    Family(
        "rabbitmq-c", "AMQP 0-9-1, rabbitmq-c, no confirms, no-ack", "at-most-once", RABBITMQ, 0.8
    ),
    Family(
        "rabbitmq-c-confirm",
        "AMQP 0-9-1, rabbitmq-c, confirms + acks",
        "at-least-once",
        RABBITMQ,
        1.0,
    ),
    Family("ours", "AMQP 1.0, our client pair, at least once", "at-least-once", None, None),
]
SPEEDUP_ONE, SPEEDUP_MANY = 1.3, 1.5
"""The issue's targets against one worker: on one queue, on more."""


def family(pid: int) -> list[int]:
    """``pid`` and its children (the supervisor's workers)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [pid, *(int(c) for c in f.read().split())]
    except OSError:
        return [pid]


def family_cpu(pids: list[int]) -> float:
    return sum(cpu_seconds(p) or 0.0 for p in pids)


def per_queue(factory: WorkerFactory, prefix: str = PREFIX) -> WorkerFactory:
    """``factory``, with producer ``i`` and consumer ``i`` on queue ``<prefix><i>``; consumer
    ``i`` waits for what producer ``i`` sends (rabbitmq-c's does not stop when told)."""

    def make(role: str, index: int, url: str, cfg: BenchConfig, count: int) -> WorkerSpec:
        mine = BenchConfig(**{**cfg.__dict__, "address": f"{prefix}{index}"})
        if role == "consumer":  # the harness gives producer i this share of cfg.count
            base, extra = divmod(cfg.count, cfg.producers)
            count = base + (1 if index < extra else 0)
        return factory(role, index, url, mine, count)

    return make


def clients(fam: Family) -> WorkerFactory:
    import amqp091_bench
    import compare

    if fam.key == "proton-c":
        return compare.proton_c_worker
    if fam.key.startswith("rabbitmq-c"):
        worker: WorkerFactory = amqp091_bench.c_worker_for(1, False)
        return worker
    return our_worker


def host_busy() -> tuple[float, float]:
    """(CPU seconds every core of this host spent busy so far, seconds of all cores so far),
    from /proc/stat: busy is all but idle and iowait."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / hz, sum(ticks) / hz


Run = tuple[float, float, float, float]
"""One run: (msg/s, the broker's CPU µs per message, the host's busy share of all its cores
over the run, the CPU µs per message of everything else on the host: the clients, mostly)."""


def measure(
    b: Any, pids: list[int], url: str, fam: Family, queues: int, count: int, prefix: str
) -> Run:
    """One run of ``queues`` pairs against a started broker."""
    cfg = BenchConfig(count=count, producers=queues, consumers=queues, timeout=300, settle=fam.settle,
                      url=url)  # fmt: skip
    cpu0, (busy0, all0) = family_cpu(pids), host_busy()
    r = run_bench(cfg, worker=per_queue(clients(fam), prefix), broker=b)
    cpu, (busy1, all1) = family_cpu(pids) - cpu0, host_busy()
    n = max(r.received, 1)
    share = (busy1 - busy0) / max(all1 - all0, 1e-9)
    return r.throughput, cpu / n * 1e6, share, max(busy1 - busy0 - cpu, 0.0) / n * 1e6


def settings(p: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """Our broker's config lines for ``--move-connections``, ``--publishers-apart`` and
    ``--pin-workers`` (this bench's and ``profiles/worker_cpu.py``'s)."""
    if args.publishers_apart and not args.move_connections:
        p.error("--publishers-apart needs --move-connections")
    return (
        f"move_connections = {str(args.move_connections).lower()}\n"
        f"publishers_apart = {str(args.publishers_apart).lower()}\n"
        f"pin_workers = {str(args.pin_workers).lower()}\n"
    )


@contextlib.contextmanager
def started(workers: int, extra: str = "") -> Iterator[tuple[BrokerProcess, list[int], str]]:
    """A fresh broker of ours with ``workers`` processes (``extra``: more of its config's
    top-level lines): (it, its pids, its URL)."""
    tmp = Path(tempfile.mkdtemp(prefix="amqp10-wb-", dir="/tmp"))
    try:
        conf = tmp / "b.toml"
        conf.write_text(f"workers = {workers}\n{extra}" + BROKER_CONFIG)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        argv = [sys.executable, "-m", "amqp10.cli", "broker", "--port", "0", "--no-http",
                "--data-dir", str(tmp), "--config", str(conf)]  # fmt: skip
        b = BrokerProcess(argv, name=f"amqp10 broker, {workers} worker(s)", env=env, cwd=str(tmp))
        try:
            port = b.wait_listening(30)
            pids = family(b.pid)
            deadline = time.monotonic() + 30
            # the parent listens before it forks; a worker listens once its links, metadata and
            # hand-over socket are up: a connection accepted before every worker serves is not
            # moved (its owner's hand-over socket is not there yet) and goes to the workers up
            while workers > 1 and (len(pids) < workers + 1 or b.listening < workers + 1):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{b.name}: workers not started ({b.tail[-1:]})")
                time.sleep(0.05)
                pids = family(b.pid)
            yield b, pids, f"amqp://127.0.0.1:{port}"
        finally:
            b.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ours(workers: int, fam: Family, queues: int, count: int, extra: str = "") -> Run:
    """One run on a fresh broker of ours with ``workers`` processes (``extra``: config lines)."""
    with started(workers, extra) as (b, pids, url):
        return measure(b, pids, url, fam, queues, count, PREFIX)


class Peers:
    """The peer brokers of one round: Proton's C broker fresh for every run, RabbitMQ started
    at its first run and stopped with the round."""

    def __init__(self, stack: contextlib.ExitStack, workdir: Path) -> None:
        self.stack = stack
        self.workdir = workdir
        self.rabbit: tuple[Any, str] | None = None

    def run(self, peer: str, fam: Family, queues: int, count: int, rnd: int) -> Run:
        import compare

        if peer == PROTON_C:
            with self.fresh("proton-c") as (b, url):
                return measure(b, [b.pid], url, fam, queues, count, PREFIX)
        if self.rabbit is None:
            d = Path(tempfile.mkdtemp(prefix="rabbitmq-", dir=self.workdir))
            b, url, _prefix = self.stack.enter_context(compare.broker_for("rabbitmq", d))
            self.rabbit = (b, url)
        b, url = self.rabbit
        # a queue of its own per family and round: the broker outlives a run
        return measure(b, [b.pid], url, fam, queues, count, f"{fam.key}-{rnd}-{PREFIX}")

    @contextlib.contextmanager
    def fresh(self, kind: str) -> Iterator[tuple[Any, str]]:
        import compare

        d = Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=self.workdir))
        with compare.broker_for(kind, d) as (b, url, _prefix):
            yield b, url


def missing(fams: list[Family], peers: bool) -> tuple[list[Family], set[str], list[str]]:
    """The families whose clients build, the peers that can run, and notes on what is left out."""
    import amqp091_bench
    import compare

    notes: list[str] = []
    keep: list[Family] = []
    why_c = compare.build_c() if any(f.key == "proton-c" for f in fams) else None
    why_091 = amqp091_bench.build_c() if any(f.key.startswith("rabbitmq-c") for f in fams) else None
    for f in fams:
        why = why_c if f.key == "proton-c" else why_091 if f.key.startswith("rabbitmq-c") else None
        if why:
            notes.append(f"{f.title}: skipped ({why})")
        else:
            keep.append(f)
    can: set[str] = set()
    if peers and any(f.peer == PROTON_C for f in keep):
        can.add(PROTON_C)  # built with the Proton C clients
    if peers and any(f.peer == RABBITMQ for f in keep):
        from interop.peers.rabbitmq import RabbitMQ

        why = RabbitMQ().available()
        if why:
            notes.append(f"RabbitMQ: skipped ({why})")
        else:
            can.add(RABBITMQ)
    return keep, can, notes


Runs = dict[tuple[str, int, str], list[Run]]
"""(family, queues, broker) -> every run; broker ``"1"``, ``"2"``
for ours with that many workers, or the peer's name."""


def label(queues: int) -> str:
    return "1 queue, 1 producer + 1 consumer" if queues == 1 else f"{queues} queues, a pair each"


def broker_name(b: str) -> str:
    return b if not b.isdigit() else f"amqp10, {b} worker{'s' if b != '1' else ''}"


def median_rate(runs: list[Run]) -> float:
    return statistics.median(r[0] for r in runs)


def table(
    fam: Family, runs: Runs, brokers: list[str], queues: list[int], workers: list[int], model: Any
) -> list[str]:
    peer = fam.peer if fam.peer in brokers else None
    rows = [f"{fam.title}:", "",
            f"| workload | broker | msg/s (median) | runs | broker CPU µs/msg | rest of host µs/msg | host busy | vs 1 worker | vs {peer or 'peer'} | model |",
            "|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for q in queues:
        base = median_rate(runs[(fam.key, q, str(workers[0]))])
        ref = (
            median_rate(runs[(fam.key, q, peer)]) if peer and runs.get((fam.key, q, peer)) else None
        )
        for b in brokers:
            got = runs.get((fam.key, q, b))
            if not got:
                rows.append(f"| {label(q)} | {broker_name(b)} | failed | | | | | | | |")
                continue
            rate = median_rate(got)
            cpu = statistics.median(r[1] for r in got)
            busy = statistics.median(r[2] for r in got)
            rest = statistics.median(r[3] for r in got)
            every = ", ".join(f"{r[0]:,.0f}" for r in got)
            vs_peer = f"{rate / ref:.2f}x" if ref else "—"
            speed = f"{rate / base:.2f}x" if b.isdigit() else "—"
            m = f"{model(int(b), q):.2f}x" if b.isdigit() else "—"
            rows.append(
                f"| {label(q)} | {broker_name(b)} | {rate:,.0f} | {every} | {cpu:.1f} | {rest:.1f} | {busy:.0%} | {speed} | {vs_peer} | {m} |"
            )
    return rows


def check(name: str, a: list[Run], b: list[Run], factor: float) -> str:
    """``a`` >= ``factor`` x ``b``: on the medians, and round by round (the same round's runs
    ran back to back: the steadiest comparison on a shared machine)."""
    if not a or not b:
        return f"- {name}: not measured"
    x, y = median_rate(a), median_rate(b)
    line = f"- {name}: {x / y:.2f}x (medians) — {'met' if x >= factor * y else 'NOT met'}"
    if len(a) > 1 and len(a) == len(b):
        per = [p[0] / q[0] for p, q in zip(a, b)]
        line += f"; round by round {', '.join(f'{r:.2f}x' for r in per)} (met in {sum(r >= factor for r in per)} of {len(per)})"
    return line


def targets(
    fams: list[Family], runs: Runs, peers: set[str], queues: list[int], workers: list[int]
) -> list[str]:
    lines: list[str] = []
    one, most = str(workers[0]), str(workers[-1])
    for f in fams:
        for q in queues:
            a = runs.get((f.key, q, most), [])
            if most != one:
                want = SPEEDUP_ONE if q == 1 else SPEEDUP_MANY
                lines.append(check(f"{f.title}, {label(q)}: {broker_name(most)} ≥ {want:g}x {broker_name(one)}",
                                   a, runs.get((f.key, q, one), []), want))  # fmt: skip
            if f.peer in peers and f.target is not None:
                lines.append(check(f"{f.title}, {label(q)}: {broker_name(most)} ≥ {f.target:g}x {f.peer}",
                                   a, runs.get((f.key, q, f.peer), []), f.target))  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--count", type=int, default=40_000, help="messages per run (over all queues)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--queues", type=int, nargs="+", default=[1, 4])
    p.add_argument("--clients", nargs="+", choices=[f.key for f in FAMILIES],
                   default=["proton-c", "rabbitmq-c", "rabbitmq-c-confirm"])  # fmt: skip
    p.add_argument(
        "--no-peers", action="store_true", help="ours only: no RabbitMQ, no Proton C broker"
    )
    p.add_argument(
        "--core", type=float, default=0.15, help="the model's core share (docs/architecture.md)"
    )
    p.add_argument("--crossing", type=float, default=1.3, help="the model's crossing/local CPU")
    p.add_argument(
        "--move-connections", action="store_true",
        help="ours with move_connections = true (a 1.0 or 0-9-1 connection moved to its queue's worker)",
    )  # fmt: skip
    p.add_argument(
        "--publishers-apart", action="store_true",
        help="with --move-connections: publishers_apart = true (a 1.0 or 0-9-1 publisher moved to the worker after its queue's)",
    )  # fmt: skip
    p.add_argument(
        "--pin-workers", action="store_true",
        help="ours with pin_workers = true (each worker bound to one CPU; 2 workers and more)",
    )  # fmt: skip
    args = p.parse_args(argv)
    extra = settings(p, args)
    import workers_model

    fams, peers, notes = missing([f for f in FAMILIES if f.key in args.clients], not args.no_peers)
    for n in notes:
        print(n, flush=True)
    if not fams:
        return 1
    runs: Runs = {}
    errors: list[str] = []
    load0 = os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="amqp10-wb-peers-", dir="/tmp"))
    try:
        for i in range(args.rounds):
            with contextlib.ExitStack() as stack:
                round_peers = Peers(stack, workdir)
                for f in fams:
                    brokers = [str(n) for n in args.workers] + ([f.peer] if f.peer in peers else [])
                    order = brokers if i % 2 == 0 else brokers[::-1]
                    for q in args.queues:
                        for b in order:
                            assert b is not None
                            try:
                                if b.isdigit():
                                    run = ours(int(b), f, q, args.count, extra)
                                else:
                                    run = round_peers.run(b, f, q, args.count, i)
                            except (BenchError, RuntimeError, OSError) as exc:
                                errors.append(
                                    f"round {i + 1} {f.key} queues {q} {broker_name(b)}: {exc}"
                                )
                                print(errors[-1], flush=True)
                                continue
                            runs.setdefault((f.key, q, b), []).append(run)
                            print(f"round {i + 1} {f.key:18} queues {q} {broker_name(b):18} "
                                  f"load {os.getloadavg()[0]:4.1f}: {run[0]:9,.0f} msg/s {run[1]:6.1f} us/msg, "
                                  f"rest of host {run[3]:5.1f} us/msg, host {run[2]:4.0%} busy",
                                  flush=True)  # fmt: skip
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    load1 = os.getloadavg()
    costs = workers_model.Costs.of(args.core, args.crossing)

    def model(n: int, q: int) -> float:
        return float(
            workers_model.speedup(workers_model.busiest_a, n, q, 1, costs, 2000, prefix=PREFIX)
        )

    print(f"\n{args.count:,} messages a run, median of {args.rounds} rounds, load average "
          f"{load0[0]:.1f} before and {load1[0]:.1f} after; model: core share {args.core:g}, "
          f"crossing {args.crossing:g}x\n")  # fmt: skip
    for f in fams:
        brokers = [str(n) for n in args.workers] + ([f.peer] if f.peer in peers else [])
        if all(runs.get((f.key, q, str(args.workers[0]))) for q in args.queues):
            print("\n".join(table(f, runs, brokers, args.queues, args.workers, model)) + "\n")
    print("Targets:\n")
    print("\n".join(targets(fams, runs, peers, args.queues, args.workers)))
    for n in notes + errors:
        print(n)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
