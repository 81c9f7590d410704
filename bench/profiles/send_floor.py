"""What bounds a waiting send: the engine alone over a blocking socket, beside the clients.

Against a running broker (``HOST:PORT``, no SASL: ours, or Proton's ``broker.c``), one
queue, 100-byte messages, each send waiting for its outcome, after 200 warm-up sends,
alternating round by round:

- ``engine``: the sans-IO :class:`amqp10.transport.Connection` driven over a blocking
  socket in this thread (``send``, ``data_to_send``, ``sendall``, ``recv``,
  ``receive_data``) with a message encoded once: no client, no event loop. Not an API
  anyone should use: the floor under what any client built on this engine can reach;
- ``sync``: ``amqp10.sync``'s ``send()`` (``bench/sync_bench.py``'s case);
- ``proton``: Proton's ``BlockingConnection`` ``send()`` (the same).

Prints msg/s and this process's CPU a send, the median of the rounds, and each client's
rate over Proton's. Run it from a tree's root to measure that tree:

    .venv/bin/python bench/profiles/send_floor.py 127.0.0.1:5672 --count 3000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
from collections.abc import Callable

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "bench"))

import sync_bench

from amqp10.message import Message
from amqp10.transport import Connection
from amqp10.types import Accepted, Source, Target

WARM = 200


def engine_send(url: str, queue: str, n: int, window: int) -> sync_bench.Timing:
    """``n`` waiting sends on the bare engine over a blocking socket."""
    host, port = url.removeprefix("amqp://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=sync_bench.WAIT)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = Connection("send-floor", hostname=host)
    conn.open()

    def turn() -> None:
        out = conn.data_to_send()
        if out:
            sock.sendall(out)
        data = sock.recv(65536)
        if not data:
            raise SystemExit(f"{url} closed the connection")
        conn.receive_data(data)

    try:
        session = conn.session()
        session.begin()
        link = session.sender("send-floor", source=Source(address="send-floor"), target=Target(address=queue))
        link.attach()
        while link.credit <= 0:
            turn()
        payload = Message(body=sync_bench.BODY).encode()

        def one() -> None:
            d = link.send(payload)
            while d.remote_state is None and not d.remote_settled:
                turn()
            if not isinstance(d.remote_state, Accepted):
                raise SystemExit(f"not accepted: {d.remote_state!r}")

        for _ in range(WARM):
            one()
        clock = sync_bench.Clock()
        for _ in range(n):
            one()
        return clock.stop()
    finally:
        sock.close()


CASES: dict[str, Callable[[str, str, int, int], sync_bench.Timing]] = {
    "engine": engine_send,
    "sync": sync_bench.sync_send,
    "proton": sync_bench.proton_send,
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("address", help="HOST:PORT of a running broker")
    p.add_argument("--count", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    url = f"amqp://{args.address}"
    rates: dict[str, list[float]] = {name: [] for name in CASES}
    cpus: dict[str, list[float]] = {name: [] for name in CASES}
    for r in range(args.rounds):
        for name, case in CASES.items():
            t = case(url, f"send-floor-{os.getpid()}-{r}-{name}", args.count, 100)
            rates[name].append(args.count / t.wall)
            cpus[name].append(t.cpu / args.count * 1e6)
            print(f"round {r + 1} {name}: {rates[name][-1]:,.0f} msg/s, CPU {cpus[name][-1]:.1f} µs/send", flush=True)
    proton = rates["proton"]
    for name in CASES:
        ratios = ", ".join(f"{a / b:.2f}x" for a, b in zip(rates[name], proton, strict=True))
        print(
            f"{name}: {statistics.median(rates[name]):,.0f} msg/s, CPU {statistics.median(cpus[name]):.1f} µs/send"
            f" (median); ÷ Proton by round {ratios}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
