"""A/B: the round trip of ``$management`` requests, two copies of the amqp10 package, one run.

    git archive HEAD amqp10 | tar -x -C /tmp/ab/base     # snapshot before a change
    .venv/bin/python bench/management_latency.py --a /tmp/ab/base --b . --rounds 3 --count 200

Each round starts, for ``--a`` and then ``--b`` (alternating which goes first), a broker
from that tree (the directory holding the ``amqp10`` package, first on PYTHONPATH) in a
child process with a store in a temporary directory, and sends ``--count`` requests of
each kind with that tree's blocking client, one at a time: ``READ`` of a durable queue
(nothing to store) and ``CREATE`` + ``DELETE`` of a durable queue (each a store
commit). Reported: the median round trip in ms per kind and tree, round by round, and
the ratio b/a of the medians over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import json, statistics, sys, tempfile, time
from pathlib import Path
import anyio.from_thread
import amqp10.sync
from amqp10.broker.config import BrokerConfig, Listener, StoreConfig
from amqp10.broker.service import BrokerService
from amqp10.message import Message

count = int(sys.argv[1])
tmp = Path(tempfile.mkdtemp(prefix="mgmt-latency-"))
cfg = BrokerConfig(listeners=[Listener(host="127.0.0.1", port=0)], store=StoreConfig(path=tmp / "store.sqlite3"))
with anyio.from_thread.start_blocking_portal() as portal:
    service = BrokerService(cfg)
    future, _ = portal.start_task(service.run)
    with amqp10.sync.connect(f"127.0.0.1:{service.ports[0]}", timeout=10) as conn:
        def ask(op, name, body=None):
            request = Message(body=body, application_properties={"operation": op, "type": "queue", "name": name})
            started = time.perf_counter()
            reply = conn.request("$management", request, timeout=10)
            assert reply.application_properties["statusCode"] < 300, reply.application_properties
            return time.perf_counter() - started
        ask("CREATE", "kept", {"durable": True})
        reads = [ask("READ", "kept") for _ in range(count)]
        writes = [ask("CREATE", f"q{i}", {"durable": True}) + ask("DELETE", f"q{i}") for i in range(count)]
    future.cancel()
print(json.dumps({"read": statistics.median(reads) * 1000, "create+delete": statistics.median(writes) * 1000}))
"""


def run(tree: Path, count: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(count)], env=env, capture_output=True, text=True, timeout=600, check=True
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", type=Path, required=True, help="the tree holding the amqp10 package before the change")
    p.add_argument("--b", type=Path, default=Path("."), help="the tree after the change (default: this one)")
    p.add_argument("--rounds", type=int, default=3, help="rounds, trees alternating (default 3)")
    p.add_argument("--count", type=int, default=200, help="requests of each kind per round (default 200)")
    args = p.parse_args()
    results: dict[str, list[dict[str, float]]] = {"a": [], "b": []}
    for r in range(args.rounds):
        order = ("a", "b") if r % 2 == 0 else ("b", "a")
        for side in order:
            got = run(getattr(args, side), args.count)
            results[side].append(got)
            print(f"round {r + 1} {side}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in got.items()), flush=True)
    for kind in results["a"][0]:
        a = statistics.median(x[kind] for x in results["a"])
        b = statistics.median(x[kind] for x in results["b"])
        print(f"{kind}: a {a:.2f} ms, b {b:.2f} ms, b/a {b / a:.2f}x")


if __name__ == "__main__":
    main()
