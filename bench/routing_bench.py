"""Routing cost per message in the broker core: direct and topic exchanges with 1, 1,000
and 10,000 bindings.

Each binding goes to its own (non-durable) queue; every message matches exactly one
binding, so the time is the exchange's lookup plus one enqueue. The routing key is
given (as ``/exchanges/X/KEY`` and 0-9-1's basic.publish give it), so no message is
decoded. Topic bindings are three-word patterns with a ``*`` or ``#`` in varying
places, so the trie's wildcard branches are walked too.

    python bench/routing_bench.py            # full run
    python bench/routing_bench.py --quick    # a smoke test
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

# Run from a checkout without installing: make the repo root importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amqp10.broker.amqp1 import Amqp1Message
from amqp10.broker.config import BrokerConfig, QueuePolicy
from amqp10.broker.core import Broker, Queue
from amqp10.message import Message

SIZES = (1, 1_000, 10_000)


def _topic_pattern(i: int) -> tuple[str, str]:
    """(binding pattern, a key only it matches) for binding ``i``."""
    shape = i % 3
    if shape == 0:
        return f"region{i}.*.orders", f"region{i}.eu.orders"
    if shape == 1:
        return f"region{i}.#", f"region{i}.eu.fr.orders"
    return f"*.dept{i}.orders", f"any.dept{i}.orders"


def measure(kind: str, bindings: int, messages: int) -> float:
    """Microseconds per routed message (route + enqueue + drain), best of three runs."""
    broker = Broker(BrokerConfig(default_policy=QueuePolicy()))
    vhost = broker.default
    vhost.declare_exchange("x", kind)
    keys = []
    for i in range(bindings):
        q = f"q{i}"
        vhost.declare_queue(q, durable=False)
        if kind == "topic":
            pattern, key = _topic_pattern(i)
        else:
            pattern = key = f"key.{i}"
        vhost.bind("x", q, pattern)
        keys.append(key)
    exchange = vhost.exchanges["x"]
    data = Message(body=b"x" * 100, body_type="data").encode()
    plan = [keys[(i * 7919) % bindings] for i in range(messages)]
    queues = [q for q in vhost.queues() if isinstance(q, Queue)]
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for key in plan:
            vhost.route(exchange, Amqp1Message(data), key, _nothing)
        elapsed = time.perf_counter() - started
        best = min(best, elapsed)
        routed = sum(q.count for q in queues)
        assert routed == messages, (routed, messages)
        for q in queues:
            q.purge()
    return best / messages * 1e6


def _nothing() -> None:
    pass


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="few messages: a smoke test")
    args = p.parse_args()
    messages = 2_000 if args.quick else 50_000
    rows = []
    for kind in ("direct", "topic"):
        for n in SIZES:
            rows.append((kind, n, measure(kind, n, messages)))
    print(f"{'exchange':<8} {'bindings':>9} {'us/msg':>8}")
    for kind, n, us in rows:
        print(f"{kind:<8} {n:>9,} {us:>8.2f}")
    by_kind = {k: [us for kk, _, us in rows if kk == k] for k in ("direct", "topic")}
    for k, values in by_kind.items():
        print(f"{k}: 10,000 bindings cost {values[-1] / values[0]:.2f}x one binding (median {statistics.median(values):.2f} us)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
