"""The broker's per-message CPU without sockets: engine + core, in one process.

A producer and a consumer (our engine, in memory) talk to the broker's
``ConnectionHandler``s; only the broker side's calls (``receive_data``,
``handle``, ``data_to_send``) are timed. The workload is the bench one:
100-byte messages, at-least-once (or ``--settle at-most-once``), producer
window from the broker's credit, consumer credit window 1000, each message
accepted. No scheduler, no asyncio: the steadiest number for A/B work.

    .venv/bin/python bench/profiles/broker_inproc.py --n 50000
    .venv/bin/python bench/profiles/broker_inproc.py --profile      # cProfile of the broker side only
    .venv/bin/python bench/profiles/broker_inproc.py --ab /tmp/ab/base .   # two trees, interleaved

The producer's messages look like Proton C's (an empty header and
properties, then one data section) unless ``--shape ours`` (data only).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def run(n: int, settle: str, shape: str, profile: bool) -> float:
    from amqp10.broker.config import BrokerConfig, QueuePolicy
    from amqp10.broker.core import Broker

    try:
        from amqp10.broker.amqp1 import ConnectionHandler
    except ImportError:  # a tree from before the core split (for --ab)
        from amqp10.broker.core import ConnectionHandler  # type: ignore[attr-defined,no-redef]
    from amqp10.transport import Connection, DeliveryReceived, DeliveryUpdated
    from amqp10.types import SenderSettleMode, Source, Target

    presettled = settle == "at-most-once"
    broker = Broker(BrokerConfig(default_policy=QueuePolicy(durable=False)))
    body = b"\x00\x53\x75\xa0\x64" + bytes(100)
    payload = (b"\x00\x53\x70\x45\x00\x53\x73\x45" + body) if shape == "proton" else body
    clock = [0.0]
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()

    def side(conn: Connection, server: Connection, handler: ConnectionHandler) -> list:
        out = conn.data_to_send()
        events = []
        t0 = time.thread_time()
        if prof:
            prof.enable()
        if out:
            handler.handle(server.receive_data(out))
        back = server.data_to_send()
        if prof:
            prof.disable()
        clock[0] += time.thread_time() - t0
        if back:
            events = conn.receive_data(back)
        return events

    def client(name: str) -> tuple[Connection, Connection, ConnectionHandler]:
        c = Connection(name)
        s = Connection("broker", send_header=False)
        h = ConnectionHandler(broker, s)
        c.open()
        c.session().begin()
        return c, s, h

    pc, ps, ph = client("producer")
    cc, cs, ch = client("consumer")
    mode = SenderSettleMode.SETTLED if presettled else SenderSettleMode.UNSETTLED
    snd = pc.sessions[0].sender(
        "p", source=Source(), target=Target(address="q"), snd_settle_mode=mode
    )
    snd.attach()
    rcv = cc.sessions[0].receiver(
        "c", source=Source(address="q"), target=Target(), snd_settle_mode=mode
    )
    rcv.attach()
    for _ in range(5):
        side(pc, ps, ph)
        side(cc, cs, ch)
    rcv.flow(1000)
    sent = received = 0
    clock[0] = 0.0
    guard = 0
    while received < n:
        guard += 1
        if guard > 10 * n:
            raise SystemExit("no progress")
        while snd.credit > 0 and sent < n and snd.queued == 0:
            snd.send(payload)
            sent += 1
        for e in side(pc, ps, ph):
            if isinstance(e, DeliveryUpdated) and not e.delivery.settled:
                e.delivery.settle()
        for e in side(cc, cs, ch):
            if isinstance(e, DeliveryReceived):
                received += 1
                if not e.delivery.settled:
                    e.delivery.accept()
        if rcv.credit < 500:
            rcv.flow(1000)
    side(cc, cs, ch)
    side(pc, ps, ph)
    if prof:
        import pstats

        pstats.Stats(prof).strip_dirs().sort_stats("tottime").print_stats(45)
    return clock[0] / n * 1e6


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=50_000)
    p.add_argument("--settle", default="at-least-once")
    p.add_argument("--shape", choices=["proton", "ours"], default="proton")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument(
        "--ab", nargs=2, metavar=("A", "B"), help="two directories holding amqp10, compared"
    )
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.ab:
        res: dict[str, list[float]] = {k: [] for k in args.ab}
        for i in range(args.repeat):
            for k in args.ab if i % 2 == 0 else args.ab[::-1]:
                env = {**os.environ, "PYTHONPATH": str(Path(k).resolve())}
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--one",
                        "--n",
                        str(args.n),
                        "--settle",
                        args.settle,
                        "--shape",
                        args.shape,
                    ],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                    cwd="/",
                )
                res[k].append(float(out.stdout.strip()))
        a, b = (statistics.median(res[k]) for k in args.ab)
        for k in args.ab:
            print(
                f"{k}: median {statistics.median(res[k]):.2f} us/msg  (all: {', '.join(f'{x:.2f}' for x in res[k])})"
            )
        print(f"b/a: {b / a:.3f}")
        return 0
    if args.one:
        print(f"{run(args.n, args.settle, args.shape, False):.3f}")
        return 0
    us = run(args.n, args.settle, args.shape, args.profile)
    print(f"broker side: {us:.2f} us/msg ({args.settle}, {args.shape} shape, n={args.n})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
