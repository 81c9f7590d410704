"""A model of the broker's throughput on N workers, from measured per-message costs (issue 31).

    .venv/bin/python bench/workers_model.py --core 0.2 --crossing 1.3
    .venv/bin/python bench/workers_model.py --core 0.2 --crossing 1.3 3.6 --shape b

A message costs one worker process 1 (normalised: today's broker CPU per message). Of
that, ``--core`` (the core's and the store's share, measured with
``bench/profiles/breakdown.py``) runs where the message's node is; the rest is protocol
work (engine and codec, front end, driver), half on the publisher's connection's worker
and half on the consumer's. A message whose publisher, node and consumer are on three
different workers costs ``--crossing`` times a local one (both legs cross); each leg
that crosses costs (crossing - 1) / 4 on each of its two ends.

Shape (a): any worker serves any connection, each node on the worker its name hashes to
(as ``amqp10.broker.workers.ownership`` computes it); ``--placement`` says where the
connections are: ``random`` (the kernel spreads them uniformly at random,
``SO_REUSEPORT``), ``moved`` (``move_connections``: each on its queue's owner, nothing
crosses) or ``apart`` (``publishers_apart`` too: the consumer on the owner, the
publisher on the worker after it, the publishing leg crossing). Shape (b) on N processes: N - 1 protocol workers in
front of one core process, which every message crosses twice. Every queue carries the same rate (as the
bench's producer/consumer pairs do); the throughput is what the busiest worker allows,
averaged over connection placements (a fixed seed: the output is deterministic).
Cores are assumed free for every worker (the clients elsewhere).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqp10.broker.workers.ownership import Ownership


def owner(name: str, workers: int) -> int:
    """The worker owning node ``name`` of vhost ``/``."""
    return Ownership(workers).owner("/", name)


@dataclass(frozen=True)
class Costs:
    """A message's CPU in parts of one process's (today's broker's) per message."""

    core: float  # on the node's owner
    hop: float  # at each end of a leg that crosses
    proto: float  # on the publisher's worker, and again on the consumer's

    @classmethod
    def of(cls, core: float, crossing: float) -> Costs:
        return cls(core, (crossing - 1) / 4, (1 - core) / 2)


def busiest_a(workers: int, queues: int, pairs: int, c: Costs, rng: random.Random, prefix: str = "q") -> float:
    """Shape (a), one placement: the busiest worker's load (queues ``<prefix>0``, ``<prefix>1``...)."""
    loads = [0.0] * workers
    for q in range(queues):
        o = owner(f"{prefix}{q}", workers)
        loads[o] += c.core
        for _ in range(2 * pairs):  # a producer and a consumer per pair, each on a random worker
            w = rng.randrange(workers)
            loads[w] += c.proto / pairs
            if w != o:
                loads[w] += c.hop / pairs
                loads[o] += c.hop / pairs
    return max(loads)


def busiest_moved(workers: int, queues: int, pairs: int, c: Costs, rng: random.Random, prefix: str = "q") -> float:
    """Shape (a) with ``move_connections``: every connection on its queue's owner (the
    queues' names drawn anew each placement: how evenly the hash spreads them decides)."""
    loads = [0.0] * workers
    run = rng.randrange(1 << 30)
    for q in range(queues):
        loads[owner(f"{prefix}{run}-{q}", workers)] += c.core + 2 * c.proto
    return max(loads)


def busiest_apart(workers: int, queues: int, pairs: int, c: Costs, rng: random.Random, prefix: str = "q") -> float:
    """Shape (a) with ``publishers_apart``: a queue's consumers on its owner, its
    publishers on the worker after it (their leg crossing); names drawn as for ``moved``."""
    loads = [0.0] * workers
    run = rng.randrange(1 << 30)
    for q in range(queues):
        o = owner(f"{prefix}{run}-{q}", workers)
        loads[o] += c.core + c.proto + c.hop
        loads[(o + 1) % workers] += c.proto + c.hop
    return max(loads)


def busiest_b(workers: int, queues: int, pairs: int, c: Costs, rng: random.Random, prefix: str = "q") -> float:
    """Shape (b), one placement: ``workers`` - 1 protocol workers and the core process,
    which every message crosses twice."""
    loads = [0.0] * (workers - 1)
    for _ in range(queues * pairs * 2):
        loads[rng.randrange(workers - 1)] += (c.proto + c.hop) / pairs
    return max(queues * (c.core + 2 * c.hop), *loads)


def speedup(
    busiest: Callable[..., float], workers: int, queues: int, pairs: int, c: Costs, trials: int, prefix: str = "q"
) -> float:
    """Throughput on ``workers`` processes relative to one, mean over connection placements."""
    if workers == 1:
        return 1.0
    rng = random.Random(31)
    return sum(queues / busiest(workers, queues, pairs, c, rng, prefix) for _ in range(trials)) / trials


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument(
        "--core",
        type=float,
        required=True,
        help="the core's and the store's share of a message's CPU",
    )
    ap.add_argument(
        "--crossing", type=float, nargs="+", default=[1.3], help="crossing/local CPU per message"
    )
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--shape", choices=["a", "b"], default="a")
    ap.add_argument(
        "--placement",
        choices=["random", "moved", "apart"],
        default="random",
        help="shape (a): where the connections are (the kernel's, on the queue's owner, publishers apart)",
    )
    ap.add_argument("--trials", type=int, default=2000)
    args = ap.parse_args(argv)
    cases = [
        ("1 queue, 1 producer + 1 consumer", 1, 1),
        ("4 queues, a pair each", 4, 1),
        ("64 queues, a pair each", 64, 1),
    ]
    placements = {"random": busiest_a, "moved": busiest_moved, "apart": busiest_apart}
    busiest = placements[args.placement] if args.shape == "a" else busiest_b
    head = " | ".join(f"N={n}" for n in args.workers)
    print(
        f"shape ({args.shape}{', ' + args.placement if args.shape == 'a' else ''}), core share {args.core:g}: "
        "throughput on N processes / one process\n"
    )
    print(f"| workload | crossing/local | {head} |")
    print("|---|---:|" + "---:|" * len(args.workers))
    for label, queues, pairs in cases:
        for crossing in args.crossing:
            c = Costs.of(args.core, crossing)
            row = [
                f"{speedup(busiest, n, queues, pairs, c, args.trials):.2f}x" for n in args.workers
            ]
            print(f"| {label} | {crossing:g}x | {' | '.join(row)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
