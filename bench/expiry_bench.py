"""What expiry on time costs in the broker core: publish+consume on queues without and
with a TTL, A/B against another checkout, and the cost of expiring a deep queue.

Each workload publishes 100-byte 1.0 messages into one non-durable queue through the
core (no network, no store: the queue's own cost is all there is to see) and consumes
them with one consumer that accepts each at once:

- ``flow``: the consumer is attached, so each publish is delivered at once;
- ``deep``: N messages are queued first, then the consumer drains them;

each on a queue without TTL (``plain``) and with ``x-message-ttl`` 60 s (``ttl``, none
expires). ``expire`` (this checkout only) fills a TTL queue with a dead-letter exchange,
moves the clock past the TTL and times the expiry run that drops them (no dead-letter
exchange) or dead-letters all of them into a second queue: microseconds per expired
message.

    python bench/expiry_bench.py                       # this checkout only
    python bench/expiry_bench.py --ab /work/main       # A/B: alternated runs, medians
    python bench/expiry_bench.py --quick               # a smoke run

Times are process CPU time (steadier than wall time on a shared machine). Each figure
is the median of ``--repeat`` timings in one process; with ``--ab`` the
processes of the two checkouts alternate ``--rounds`` times (ABBA), the table shows the
median of each side's figures, and A/B is the median of the rounds' ratios (the two runs
of a round ran side by side, so a change of machine load hits both alike).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
WORKLOADS = ("plain flow", "ttl flow", "plain deep", "ttl deep")


def _child(tree: Path, n: int, repeat: int, only: str | None = None) -> dict[str, float]:
    """Run in a process that imports ``amqp10`` from ``tree``: µs per message, per workload."""
    sys.path.insert(0, str(tree))
    from amqp10.broker.amqp1.message import parse_transfer
    from amqp10.broker.config import BrokerConfig
    from amqp10.broker.core import Broker, Queue
    from amqp10.message import Message

    assert Path(sys.modules["amqp10"].__file__ or "").resolve().is_relative_to(tree.resolve())
    data = Message(body=b"x" * 100, body_type="data").encode()
    clock = [1_000_000.0]

    class Acker:
        browse = False
        id = 1

        def __init__(self) -> None:
            self.got = 0

        def credit(self) -> int:
            return 1 << 30

        def deliver(self, node: Any, msg: Any) -> None:
            self.got += 1
            node.ack(msg)

        def cancelled(self) -> None:
            pass

    def make(arguments: dict[str, Any]) -> tuple[Any, Queue]:
        broker = Broker(BrokerConfig(), now=lambda: clock[0])
        q = broker.default.declare_queue("q", durable=False, arguments=arguments)
        assert isinstance(q, Queue)
        return broker, q

    def run(workload: str) -> float:
        arguments = {"x-message-ttl": 60_000} if workload.startswith("ttl") else {}
        _, q = make(arguments)
        c = Acker()
        msgs = [parse_transfer(data, clock[0], need_ids=False) for _ in range(n)]  # as the front end reads them
        if workload.endswith("flow"):
            q.add_consumer(c)
            started = time.process_time()
            for m in msgs:
                clock[0] += 0.000_01
                q.publish(m, _nothing)
        else:
            started = time.process_time()
            for m in msgs:
                clock[0] += 0.000_01
                q.publish(m, _nothing)
            q.add_consumer(c)
        elapsed = time.process_time() - started
        assert c.got == n and q.count == 0, (c.got, q.count)
        return elapsed / n * 1e6

    def expire(dead_letter: bool) -> float:
        dlx = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"} if dead_letter else {}
        broker, q = make({"x-message-ttl": 1000, **dlx})
        dead = broker.default.declare_queue("dead", durable=False)
        for _ in range(n):
            clock[0] += 0.000_01
            q.publish(parse_transfer(data, clock[0], need_ids=False), _nothing)
        clock[0] += 2
        started = time.process_time()
        broker.tick()
        elapsed = time.process_time() - started
        assert q.count == 0 and dead.count == (n if dead_letter else 0), (q.count, dead.count)
        return elapsed / n * 1e6

    if only is not None:  # one run of one workload (what --instructions counts)
        return {only: run(only)}
    out: dict[str, float] = {}
    for w in WORKLOADS:
        out[w] = statistics.median(run(w) for _ in range(repeat))
    if hasattr(Broker(BrokerConfig()), "expirations"):
        out["expire, dropped"] = statistics.median(expire(False) for _ in range(repeat))
        out["expire, dead-lettered"] = statistics.median(expire(True) for _ in range(repeat))
    return out


def _nothing() -> None:
    pass


def _spawn(tree: Path, n: int, repeat: int) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--child", str(tree), "-n", str(n), "--repeat", str(repeat)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    result: dict[str, float] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)
    return result


def _count(tree: Path, workload: str, n: int) -> int:
    """Instructions one process runs for ``workload`` with ``n`` messages (callgrind's count)."""
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__]
    cmd += ["--child", str(tree), "--only", workload, "-n", str(n)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    err = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stderr
    (line,) = [x for x in err.splitlines() if "Collected :" in x]
    return int(line.split(":")[-1])


def _instructions(trees: list[Path], n: int) -> int:
    """Instructions per message, per workload and checkout: the difference between a run
    of ``n`` messages and one of ``n // 10``, so start-up and imports cancel out. The count
    does not depend on the machine's load (valgrind's callgrind; deterministic but for
    hash seeds, which are fixed here)."""
    os.environ["PYTHONHASHSEED"] = "0"
    small = max(n // 10, 1)
    print(f"# {' '.join(sys.argv)}  (instructions per message: runs of {n} and {small} messages)")
    print("| instructions per message | " + " | ".join(("A: " if t == HERE else "B: ") + str(t) for t in trees) + (" | A/B |" if len(trees) > 1 else " |"))
    print("|---" * (len(trees) + 1 + (len(trees) > 1)) + "|")
    for w in WORKLOADS:
        per = [(_count(t, w, n) - _count(t, w, small)) / (n - small) for t in trees]
        ratio = f" | {per[0] / per[1]:.4f}" if len(per) > 1 else ""
        print(f"| {w} | " + " | ".join(f"{x:,.0f}" for x in per) + ratio + " |")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=20_000, help="messages per timing")
    ap.add_argument("--repeat", type=int, default=5, help="timings per process (median)")
    ap.add_argument("--rounds", type=int, default=5, help="alternated processes per side with --ab")
    ap.add_argument("--ab", type=Path, help="another checkout to compare with (B)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--instructions", action="store_true", help="count instructions per message under valgrind instead")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--only", choices=WORKLOADS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.n, args.repeat, args.rounds = 2000, 1, 1
    if args.child is not None:
        print(json.dumps(_child(args.child, args.n, args.repeat, args.only)))
        return 0
    if args.instructions:
        return _instructions([HERE] + ([args.ab] if args.ab else []), args.n)
    trees = [HERE] + ([args.ab] if args.ab else [])
    figures: dict[Path, list[dict[str, float]]] = {t: [] for t in trees}
    for r in range(args.rounds if args.ab else 1):
        for t in trees if r % 2 == 0 else trees[::-1]:  # ABBA: a drift of load hits both alike
            figures[t].append(_spawn(t, args.n, args.repeat))
    print(f"# {' '.join(sys.argv)}  (n={args.n}, repeat={args.repeat}, rounds={args.rounds if args.ab else 1})")
    names = [*WORKLOADS, "expire, dropped", "expire, dead-lettered"]
    header = "| µs per message | " + " | ".join(f"A: {HERE}" if t == HERE else f"B: {t}" for t in trees)
    print(header + (" | A/B |" if args.ab else " |"))
    print("|---" * (len(trees) + 1 + bool(args.ab)) + "|")
    for name in names:
        cells = []
        meds = []
        for t in trees:
            values = [f[name] for f in figures[t] if name in f]
            med = statistics.median(values) if values else None
            meds.append(med)
            cells.append("n/a" if med is None else f"{med:.3f}")
        ratio = ""
        if args.ab:  # the median of each round's ratio: the two runs of a round ran side by side
            pairs = [fa[name] / fb[name] for fa, fb in zip(figures[HERE], figures[args.ab], strict=True) if name in fa and name in fb]
            ratio = f" | {statistics.median(pairs):.3f}" if pairs else " | n/a"
        print(f"| {name} | " + " | ".join(cells) + ratio + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
