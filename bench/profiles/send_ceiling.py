"""What bounds a send that waits for its outcome: the clients against the bare round trip.

Starts our broker (default configuration, or ``--broker-config``) and, alternating
round by round in this one process, sends 100-byte messages one at a time, each
waiting for the broker's outcome (at least once), with:

- ``socket``: no AMQP at all: a blocking socket and a trivial echo process (a
  write of a transfer's size, a read of a disposition's): the loopback's round trip;
- ``engine``: the sans-IO engine (``amqp10.transport``) driven in this thread over a
  blocking socket: write what it queued, read, feed it, until the delivery is
  settled. No event loop, no client layers, no second thread: what a blocking
  client that drives the engine in the caller's thread could reach;
- ``async``: ``await sender.send()`` of the async client;
- ``sync``: ``sender.send()`` of ``amqp10.sync`` (the async client, its event loop
  run in this thread by the waiting call: no second thread per send);
- ``proton``: Proton's ``BlockingSender.send``.

Prints msg/s and this process's CPU µs per message (medians of the rounds).

    .venv/bin/python bench/profiles/send_ceiling.py --count 3000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
from proton import Message as ProtonMessage  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

import amqp10  # noqa: E402
import amqp10.sync  # noqa: E402
from amqp10.cli.bench.harness import BrokerProcess  # noqa: E402
from amqp10.client import SettleMode  # noqa: E402
from amqp10.client.dial import ConnectOptions, client_protocol  # noqa: E402
from amqp10.client.url import parse_url  # noqa: E402
from amqp10.message import Message  # noqa: E402
from amqp10.transport import Connection as Engine  # noqa: E402
from amqp10.transport import ConnectionState  # noqa: E402
from amqp10.types import Source, Target  # noqa: E402

BODY = b"x" * 100
Case = Callable[[str, int], tuple[float, float]]


def timed(n: int, work: Callable[[], object]) -> tuple[float, float]:
    """(msg/s, CPU µs per message) of ``work()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return n / (time.perf_counter() - wall), (time.process_time() - cpu) * 1e6 / n


def bare_socket(url: str, n: int) -> tuple[float, float]:
    listener = socket.create_server(("127.0.0.1", 0))
    pid = os.fork()
    if pid == 0:  # the echo: a disposition's size for each read
        peer, _ = listener.accept()
        peer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while peer.recv(65536):
            peer.sendall(b"d" * 26)
        os._exit(0)
    address = listener.getsockname()
    listener.close()
    s = socket.create_connection(address)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def work() -> None:
        for _ in range(n):
            s.sendall(b"t" * 133)
            s.recv(65536)

    try:
        return timed(n, work)
    finally:
        s.close()
        os.waitpid(pid, 0)


def engine(url: str, n: int) -> tuple[float, float]:
    u = parse_url(url)
    conn = Engine("send-ceiling")
    protocol = client_protocol(conn, ConnectOptions(url=u, container_id="send-ceiling"))
    s = socket.create_connection((u.host, u.port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def until(done: Callable[[], bool]) -> None:
        while True:
            out = protocol.data_to_send()
            if out:
                s.sendall(out)
            if done():
                return
            data = s.recv(65536)
            if not data:
                raise SystemExit("the broker closed the connection")
            protocol.receive_data(data)

    conn.open()
    until(lambda: conn.state is ConnectionState.OPENED)
    session = conn.session()
    session.begin()
    sender = session.sender(
        "send-ceiling", source=Source(address="send-ceiling"), target=Target(address="ceiling")
    )
    sender.attach()
    until(lambda: sender.is_attached and sender.credit > 0)

    def work() -> None:
        for _ in range(n):
            d = sender.send(Message(body=BODY).encode())
            until(lambda d=d: d.remote_settled)  # type: ignore[misc]

    try:
        return timed(n, work)
    finally:
        s.close()


def async_send(url: str, n: int) -> tuple[float, float]:
    async def run() -> tuple[float, float]:
        async with await amqp10.connect(url) as conn:
            sender = await conn.open_sender("ceiling", settle_mode=SettleMode.AT_LEAST_ONCE)
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(n):
                await sender.send(Message(body=BODY))
            return n / (time.perf_counter() - wall), (time.process_time() - cpu) * 1e6 / n

    return anyio.run(run, backend="asyncio")


def sync_send(url: str, n: int) -> tuple[float, float]:
    with amqp10.sync.connect(url) as conn:
        sender = conn.open_sender("ceiling", settle_mode=SettleMode.AT_LEAST_ONCE)
        return timed(n, lambda: [sender.send(Message(body=BODY)) for _ in range(n)])


def proton_send(url: str, n: int) -> tuple[float, float]:
    conn = BlockingConnection(url)
    try:
        sender = conn.create_sender("ceiling")
        return timed(n, lambda: [sender.send(ProtonMessage(body=BODY)) for _ in range(n)])
    finally:
        conn.close()


CASES: dict[str, Case] = {
    "socket": bare_socket,
    "engine": engine,
    "async": async_send,
    "sync": sync_send,
    "proton": proton_send,
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--count", type=int, default=3000, help="messages per case and round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--broker-config", type=Path, default=None, help="the broker's TOML file")
    ns = p.parse_args()
    rates: dict[str, list[float]] = {k: [] for k in CASES}
    cpus: dict[str, list[float]] = {k: [] for k in CASES}
    print(f"load average before: {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="send-ceiling-") as data:
        argv = [sys.executable, "-m", "amqp10.cli", "broker", "--port", "0", "--no-http"]
        if ns.broker_config is not None:
            argv += ["--config", str(ns.broker_config)]
        broker = BrokerProcess([*argv, "--data-dir", data], name="amqp10 broker")
        try:
            url = f"amqp://127.0.0.1:{broker.wait_listening(30.0)}"
            keys = list(CASES)
            for r in range(ns.rounds):
                for key in keys[r % len(keys) :] + keys[: r % len(keys)]:
                    rate, cpu = CASES[key](url, ns.count)
                    rates[key].append(rate)
                    cpus[key].append(cpu)
                    print(
                        f"round {r + 1} {key:7} {rate:8,.0f} msg/s {cpu:7.1f} µs CPU/msg",
                        flush=True,
                    )
        finally:
            broker.stop()
    print("\n| case | msg/s (median) | rounds | CPU µs/msg (median) |\n|---|---:|---|---:|")
    for key in CASES:
        rounds = ", ".join(f"{v:,.0f}" for v in rates[key])
        print(
            f"| {key} | {statistics.median(rates[key]):,.0f} | {rounds} | "
            f"{statistics.median(cpus[key]):.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
