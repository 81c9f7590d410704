"""Deterministic per-message cost, two trees side by side: Python calls and bytecodes.

On a shared machine timings move by tens of percent from run to run; what a change
does to a hot path is read more surely from counts that do not move: the Python
calls a message costs (cProfile) and the bytecodes it runs (a tracer counting
``opcode`` events, per function). Workloads, each in memory with no sockets:

    eng-oo-u, eng-op-u, eng-po-u, eng-oo-s, ...  engine_bench's pairings (oo: ours -> ours,
        op: ours -> proton, po: proton -> ours; u: unsettled, s: settled), both ends counted
    broker-u, broker-s   broker_inproc.py's workload, the broker side only (u: at-least-once)
    q091-c, q091-confirm the 0-9-1 front end, the broker side only: a producer and a
        consumer connection on one queue (rabbitmq-c's workloads: no confirms and no-ack;
        confirms and a basic.ack per message with prefetch 1000)

    .venv/bin/python bench/profiles/counts.py --ab /tmp/ab/base . --workloads eng-oo-u,broker-u
    .venv/bin/python bench/profiles/counts.py --ab /tmp/ab/base . --workloads q091-c --diff 20

``--diff K`` also lists the K functions whose calls per message moved the most (a
leading underscore dropped, so a private function made public is not a change).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORKLOADS = (
    "eng-oo-u",
    "eng-op-u",
    "eng-po-u",
    "eng-oo-s",
    "eng-op-s",
    "eng-po-s",
    "broker-u",
    "broker-s",
    "q091-c",
    "q091-confirm",
)


class _Bytecodes:
    """Counts the bytecodes run between enable() and disable(), by function."""

    def __init__(self, root: str) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.root = root

    def _trace(self, frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        key = f"{frame.f_code.co_filename.replace(self.root, '')}:{frame.f_code.co_name}"
        counts = self.counts

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "opcode":
                counts[key] += 1
            return local

        return local

    def clear(self) -> None:
        self.counts.clear()

    def enable(self) -> None:
        sys.settrace(self._trace)

    def disable(self) -> None:
        sys.settrace(None)


def run_091(
    n: int,
    confirm: bool,
    prof: Any,
    broker: Any = None,
    between: Any = None,
    consumer_broker: Any = None,
) -> None:
    """A producer and a consumer connection to the 0-9-1 front end; ``prof`` sees only the
    broker side. ``broker``: the one to use (else a fresh one); ``between``: called, under
    ``prof``, after the broker handled a client's bytes (bench/internal_link_bench.py runs
    the internal link there); ``consumer_broker``: the consumer's, if not ``broker``."""
    from amqp10.amqp091 import Connection as Client
    from amqp10.amqp091 import ContentReceived, MethodReceived
    from amqp10.amqp091 import methods as m
    from amqp10.broker.amqp091 import Amqp091Handler, BrokerConnection
    from amqp10.broker.config import BrokerConfig, QueuePolicy
    from amqp10.broker.core import Broker

    if broker is None:
        broker = Broker(BrokerConfig(default_policy=QueuePolicy(durable=False)))

    def pump(end: tuple[Any, Any, Any]) -> list[Any]:
        client, server, handler = end
        events: list[Any] = []
        for _ in range(8 if between is not None else 4):
            c2s = client.data_to_send()
            prof.enable()
            if c2s:
                handler.handle(server.receive_data(c2s))
            handler.handle(server.poll_events())
            if between is not None:
                between()
            s2c = server.data_to_send()
            prof.disable()
            if s2c:
                events += client.receive_data(s2c)
            if not c2s and not s2c:
                break
        return events

    prod, cons = (
        (Client("client"), s, Amqp091Handler(b, s))
        for s, b in (
            (BrokerConnection("server"), broker),
            (BrokerConnection("server"), consumer_broker or broker),
        )
    )
    for end in (prod, cons):
        pump(end)
        end[0].open_channel(1)
        pump(end)
    prod[0].send_method(1, m.QueueDeclare(queue="q"))
    if confirm:
        prod[0].send_method(1, m.ConfirmSelect())
        cons[0].send_method(1, m.BasicQos(prefetch_count=1000))
    cons[0].send_method(1, m.BasicConsume(queue="q", consumer_tag="c", no_ack=not confirm))
    pump(prod)
    pump(cons)
    prof.clear()  # the handshake is not counted
    props, body, publish = (
        m.BasicProperties(),
        bytes(100),
        m.BasicPublish(exchange="", routing_key="q"),
    )
    sent = got = acked = 0
    for _ in range(10 * n):
        if got >= n and (not confirm or acked >= n):
            return
        k = min(1000 - (sent - acked), n - sent) if confirm else min(200, n - sent)
        for _ in range(k):
            prod[0].send_content(1, publish, props, body)
        sent += k
        for e in pump(prod):
            if isinstance(e, MethodReceived) and type(e.method) is m.BasicAck:
                acked = e.method.delivery_tag if e.method.multiple else acked + 1
        for e in pump(cons):
            if isinstance(e, ContentReceived):
                got += 1
                if confirm:
                    cons[0].send_method(1, m.BasicAck(delivery_tag=e.method.delivery_tag))
    raise SystemExit("0-9-1 workload: no progress")


def measure(workload: str, n: int, kind: str) -> dict[str, float]:
    """Per message, by function: calls (``kind`` "calls") or bytecodes, in this process's tree."""
    import cProfile
    import pstats

    root = str(Path(__import__("amqp10").__file__).resolve().parent.parent) + "/"
    prof: Any = cProfile.Profile() if kind == "calls" else _Bytecodes(root)
    if workload.startswith("q091"):
        run_091(n, workload == "q091-confirm", prof)
    elif workload.startswith("broker"):
        sys.path.insert(0, str(HERE))
        import cProfile as cp

        import broker_inproc

        # broker_inproc's --profile: it enables our profiler around the broker side
        # only, then prints (here: nothing)
        real = cp.Profile, pstats.Stats
        cp.Profile, pstats.Stats = (lambda: prof), (lambda p: _Quiet())  # type: ignore[assignment,misc]
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                broker_inproc.run(
                    n, "at-most-once" if workload == "broker-s" else "at-least-once", "proton", True
                )
        finally:
            cp.Profile, pstats.Stats = real  # type: ignore[misc]
    else:
        sys.path.insert(0, str(HERE.parent))
        import engine_bench as eb

        pairing = {"oo": "ours -> ours", "op": "ours -> proton", "po": "proton -> ours"}[
            workload[4:6]
        ]
        s, r = eb.make_pair(pairing, n, workload.endswith("-s"))
        eb.pump(s, r, lambda: s.ready() and r.ready())
        prof.enable()
        eb.pump(s, r, lambda: s.done() and r.done())
        prof.disable()
    if kind == "calls":
        out: dict[str, float] = collections.defaultdict(float)
        # (the raw entries, not pstats': pstats keeps one of the code objects that share
        # a file, line and name, as the codec's generated decoders do)
        for entry in prof.getstats():
            code = entry.code
            name = (
                f"{code.co_filename.replace(root, '')}:{code.co_name}"
                if not isinstance(code, str)
                else f"~:{code}"
            )
            out[name] += entry.callcount / n
        return dict(out)
    return {k: v / n for k, v in prof.counts.items()}


class _Quiet:
    """pstats.Stats for broker_inproc's --profile print: prints nothing."""

    def strip_dirs(self) -> _Quiet:
        return self

    def sort_stats(self, *a: Any) -> _Quiet:
        return self

    def print_stats(self, *a: Any) -> None:
        pass


def _normal(counts: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = collections.defaultdict(float)
    for k, v in counts.items():
        k = re.sub(r" at 0x[0-9a-f]+", "", k)
        where, _, func = k.rpartition(":")
        out[f"{where}:{func if func.startswith('__') else func.lstrip('_')}"] += v
    return dict(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument(
        "--ab", nargs=2, metavar=("A", "B"), required=True, help="two directories holding amqp10"
    )
    p.add_argument(
        "--workloads", default="eng-oo-u,broker-u,q091-c,q091-confirm", help=", ".join(WORKLOADS)
    )
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--diff", type=int, default=0, metavar="K")
    p.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        workload, n, kind = args.one
        print(json.dumps(measure(workload, int(n), kind)))
        return 0
    for workload in args.workloads.split(","):
        res: dict[tuple[str, str], dict[str, float]] = {}
        for tree in args.ab:
            for kind in ("calls", "bytecodes"):
                env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
                out = subprocess.run(
                    [sys.executable, __file__, "--ab", *args.ab, "--one", workload, str(args.n), kind],
                    env=env, capture_output=True, text=True, check=True, cwd="/",
                )  # fmt: skip
                res[tree, kind] = _normal(json.loads(out.stdout))
        a, b = args.ab
        ca, cb = (sum(res[t, "calls"].values()) for t in args.ab)
        ba, bb = (sum(res[t, "bytecodes"].values()) for t in args.ab)
        print(
            f"{workload:13} calls/msg {ca:7.2f} -> {cb:7.2f} ({cb / ca:.3f})   bytecodes/msg {ba:7.1f} -> {bb:7.1f} ({bb / ba:.3f})"
        )
        if args.diff:
            ra, rb = res[a, "calls"], res[b, "calls"]
            for k in sorted(set(ra) | set(rb), key=lambda k: -abs(rb.get(k, 0) - ra.get(k, 0)))[
                : args.diff
            ]:
                d = rb.get(k, 0) - ra.get(k, 0)
                if abs(d) >= 0.01:
                    print(f"    {d:+6.2f} calls  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
