"""Restart time: how long a broker takes to recover N stored messages, streams and queues.

Builds a store directly through the store API (``Store.apply`` in large batches, with
``synchronous=OFF``: building is not what is measured), half the messages in streams
and half in queues, then times what the broker does at start before it listens:
open the store, ``Broker.recover`` (load every row, rebuild every node). Each size is
built once and recovered ``--rounds`` times in fresh processes' worth of objects.

    .venv/bin/python bench/restart_bench.py --sizes 1000000,2000000
    .venv/bin/python bench/restart_bench.py --sizes 20000,40000 --quick   # a smoke run

``--budget SECONDS`` skips sizes the previous ones predict would take longer to
build and recover than that (the machine is shared; 5M is big).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from amqp10.broker.amqp1 import Amqp1Message
from amqp10.broker.config import AddressRule, BrokerConfig
from amqp10.broker.core import Broker
from amqp10.broker.core import store as st
from amqp10.broker.core.broker import gc_paused
from amqp10.message import Message

BATCH = 50_000
CONFIG = BrokerConfig(addresses=[AddressRule(pattern="s*", kind="stream")])


class BatchJournal:
    """Writes what the nodes journal straight to the store, ``BATCH`` operations a transaction."""

    def __init__(self, store: st.Store) -> None:
        self.store = store
        self.ops: list[tuple[Any, ...]] = []

    def submit(self, op: tuple[Any, ...], on_commit: Callable[[], None] | None = None) -> None:
        self.ops.append(op)
        if len(self.ops) >= BATCH:
            self.flush()
        if on_commit is not None:
            on_commit()  # nothing waits on it here

    def flush(self) -> None:
        self.store.apply(self.ops)
        self.ops = []


def build(path: Path, n: int, streams: int = 4, queues: int = 4) -> float:
    """Write ``n`` messages (100-byte bodies), spread over the streams and queues; return seconds.

    The nodes make the store operations (whatever their shape), a journal applies them
    in large batches with ``synchronous=OFF``: no group committer, no client, no socket.
    """
    started = time.perf_counter()
    s = st.Store(path, synchronous="OFF")
    journal = BatchJournal(s)
    b = Broker(CONFIG, journal=journal)
    nodes = [b.lookup(f"s{i}", create=True) for i in range(streams)] + [b.lookup(f"q{i}", create=True) for i in range(queues)]
    data = Message(body=b"x" * 100, durable=True).encode()
    stored = lambda: None  # noqa: E731
    for i in range(n):
        node = nodes[i % len(nodes)]
        assert node is not None
        node.publish(Amqp1Message(data, durable=True, message_id=f"id-{i}"), stored)
    journal.flush()
    s.close()
    return time.perf_counter() - started


def recover(path: Path) -> tuple[float, int]:
    """Open the store and recover a broker from it, as the service does before it listens."""
    gc.collect()
    started = time.perf_counter()
    s = st.Store(path)
    b = Broker(CONFIG)
    with gc_paused():  # as the broker service does
        n = b.recover(s)
    elapsed = time.perf_counter() - started
    s.close()
    del b
    return elapsed, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000,2000000,5000000", help="comma-separated message counts")
    ap.add_argument("--rounds", type=int, default=3, help="recoveries per size (median reported)")
    ap.add_argument("--budget", type=float, default=600.0, help="skip a size predicted to take longer (seconds)")
    ap.add_argument("--dir", default=None, help="where to build the stores (default: a temp dir)")
    ap.add_argument("--json", default=None, help="also write the numbers here")
    ap.add_argument("--streams", type=int, default=4, help="streams the messages are spread over")
    ap.add_argument("--queues", type=int, default=4, help="queues the messages are spread over")
    ap.add_argument("--quick", action="store_true", help="one round")
    args = ap.parse_args()
    rounds = 1 if args.quick else args.rounds
    sizes = [int(x) for x in args.sizes.split(",")]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
          f"{args.streams} streams + {args.queues} queues, 100-byte bodies")
    print(f"command: {' '.join(sys.argv)}")
    results: list[dict[str, Any]] = []
    cost: tuple[float, float] | None = None
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for n in sizes:
            predicted = None if cost is None else (cost[0] + rounds * cost[1]) * n
            if predicted is not None and predicted > args.budget:
                print(f"{n:>10,}: skipped (predicted {predicted:.0f} s > budget {args.budget:.0f} s)")
                results.append({"messages": n, "skipped": True})
                continue
            path = Path(tmp) / f"store-{n}.sqlite3"
            built = build(path, n, args.streams, args.queues)
            times = []
            for _ in range(rounds):
                elapsed, got = recover(path)
                assert got == n, f"recovered {got} of {n}"
                times.append(elapsed)
            times.sort()
            median = times[len(times) // 2]
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            size_mb = path.stat().st_size / 2**20
            print(
                f"{n:>10,}: recover {median:6.2f} s median ({', '.join(f'{t:.2f}' for t in times)}), "
                f"{median / n * 1e6:5.2f} us/msg; store {size_mb:,.0f} MiB built in {built:.1f} s; peak RSS {rss:,.0f} MiB"
            )
            results.append({"messages": n, "recover_s": times, "build_s": built, "store_mib": size_mb, "peak_rss_mib": rss})
            cost = (built / n, max(times) / n)  # seconds per message: build, recover
            path.unlink()
            for extra in ("-wal", "-shm"):
                Path(str(path) + extra).unlink(missing_ok=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
