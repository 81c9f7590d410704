"""Does the broker's CPU per message stay flat as it holds more queues, consumers and connections?

The measure is the broker process's own CPU (user + system, from /proc) per
message moved, so the speed of the clients (this script, driving sans-IO
engines over plain sockets) does not blur it. Three families, each side by
side in one run, each on a fresh broker:

    idle queues   0 / 10,000 / 100,000 idle queues (made by 1.0 attaches, timed:
                  broker CPU per queue for the first and the last batch), then one
                  connection moves --count messages through one more queue
    consumers     1 / 1,000 / 10,000 consumers on one queue draining a backlog of
                  --backlog messages, credit 10 each (--credit; topped up when half used),
                  accepting every message (the broker's CPU read once it has taken the
                  last dispositions too; --no-count-tail: when the last message arrives)
    connections   1 / 1,000 / 5,000 connections open (each with a session), one of
                  them moving --count messages through a queue

"flat" means the largest figure of a family is within 1.3x of its smallest.
Each case is bounded in time (--case-timeout); --queues/--consumers/--connections
choose the sizes (the largest that fit a machine). The process's file limit is
raised to its hard limit here (the broker, a child, inherits it).

    .venv/bin/python bench/scale_bench.py
    .venv/bin/python bench/scale_bench.py --queues 0,10000 --connections 1,1000 --count 20000
    .venv/bin/python bench/scale_bench.py --broker-path /path/to/other/checkout   # the old code
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import selectors
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from amqp10.cli.bench.harness import BROKER_CONFIG, BrokerProcess, cpu_seconds  # noqa: E402
from amqp10.message import Message  # noqa: E402
from amqp10.transport import Connection, DeliveryReceived, FlowReceived, Receiver, Sender  # noqa: E402
from amqp10.types import Accepted, SenderSettleMode, Source, Target  # noqa: E402

LIMITS = """
[limits]
max_connections = 20000
max_links_per_session = 20000

[security]
connection_rate_per_address = 0  # the connections case opens thousands from 127.0.0.1 at once
"""
ACCEPTED = Accepted()


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Peer:
    """One 1.0 connection (and one session) driven over a blocking socket."""

    _n = 0

    def __init__(self, port: int) -> None:
        Peer._n += 1
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn = Connection(f"scale-{Peer._n}")
        self.conn.open()
        self.session = self.conn.session(incoming_window=1 << 20)
        self.session.begin()
        self.events: list[Any] = []

    def flush(self) -> None:
        out = self.conn.data_to_send()
        if out:
            self.sock.sendall(out)

    def read(self) -> None:
        data = self.sock.recv(1 << 20)
        if not data:
            raise RuntimeError(f"the broker closed a connection: {self.conn.remote_close}")
        self.events.extend(self.conn.receive_data(data))

    def close(self) -> None:
        self.sock.close()


def pump(peers: Iterable[Peer], until: Callable[[], bool], timeout: float, on_read: Callable[[Peer], None] | None = None) -> None:
    """Write, then read whatever comes, until ``until()`` (or fail after ``timeout`` s)."""
    peers = list(peers)
    sel = selectors.DefaultSelector()
    for p in peers:
        sel.register(p.sock, selectors.EVENT_READ, p)
    deadline = time.monotonic() + timeout
    try:
        while True:
            done = until()
            for p in peers:
                p.flush()  # what was read (flows, dispositions) and what until() sent
            if done:
                return
            if time.monotonic() > deadline:
                raise TimeoutError("a case ran out of time")
            for key, _ in sel.select(1.0):
                p = key.data
                p.read()
                if on_read is not None:
                    on_read(p)
    finally:
        sel.close()


def open_peers(port: int, n: int, timeout: float, batch: int = 200) -> list[Peer]:
    peers: list[Peer] = []
    while len(peers) < n:
        new = [Peer(port) for _ in range(min(batch, n - len(peers)))]
        pump(new, lambda new=new: all(p.session.state.name == "MAPPED" for p in new), timeout)
        peers.extend(new)
    return peers


def keepalive(peers: list[Peer]) -> None:
    """Send what the broker's idle timeout asks for (a heartbeat now and then)."""
    now = time.monotonic()
    for p in peers:
        p.conn.tick(now)
        p.flush()


class Case:
    def __init__(self, family: str, size: int) -> None:
        self.family = family
        self.size = size
        self.figures: dict[str, Any] = {}


class Broker:
    def __init__(self, broker_path: str | None) -> None:
        self.tmp = tempfile.mkdtemp(prefix="amqp10-scale-")
        config = os.path.join(self.tmp, "broker.toml")
        with open(config, "w") as f:
            f.write(BROKER_CONFIG + LIMITS)
        env = dict(os.environ)
        env["PYTHONPATH"] = broker_path or str(ROOT)
        argv = [sys.executable, "-m", "amqp10.cli", "broker", "--port", "0", "--data-dir", self.tmp, "--config", config]
        # run from that checkout: ``python -m`` puts the working directory first on sys.path
        self.proc = BrokerProcess(argv, name="amqp10 broker", env=env, cwd=env["PYTHONPATH"])
        self.port = self.proc.wait_listening(30)

    def cpu(self) -> float:
        value = cpu_seconds(self.proc.pid)
        assert value is not None
        return value

    def rss(self) -> int:
        return rss_kib(self.proc.pid)

    def stop(self) -> None:
        self.proc.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


PAYLOAD = Message(body=b"x" * 100).encode()


def move(peer: Peer, address: str, n: int, broker: Broker, timeout: float, idle: list[Peer] | None = None) -> float:
    """Send ``n`` messages through ``address`` on one connection (pre-settled in, accepted
    out, credit window 200); return the broker's CPU µs per message."""
    s = peer.session.sender(f"mv-out-{address}", target=Target(address=address), source=Source(), snd_settle_mode=SenderSettleMode.SETTLED)
    r = peer.session.receiver(f"mv-in-{address}", source=Source(address=address), target=Target())
    s.attach()
    r.attach()
    pump([peer], lambda: s.is_attached and r.is_attached, timeout)
    r.flow(200)
    sent = received = 0
    last_keepalive = time.monotonic()

    def on_read(p: Peer) -> None:
        nonlocal received
        events, p.events = p.events, []
        for e in events:
            if type(e) is DeliveryReceived:
                e.delivery.settle(ACCEPTED)
                received += 1
        if r.credit <= 100:
            r.flow(200)

    def until() -> bool:
        nonlocal sent, last_keepalive
        room = min(s.credit - s.queued, n - sent)
        for _ in range(max(room, 0)):
            s.send(PAYLOAD)
        sent += max(room, 0)
        if idle and time.monotonic() - last_keepalive > 5:
            keepalive(idle)
            last_keepalive = time.monotonic()
        return received >= n

    cpu0 = broker.cpu()
    pump([peer], until, timeout, on_read)
    cpu = broker.cpu() - cpu0
    s.detach(closed=True)
    r.detach(closed=True)
    peer.flush()
    return cpu / n * 1e6


def make_queues(peer: Peer, first: int, k: int, timeout: float) -> None:
    """Make queues idle-FIRST .. by attaching a sender to each (then detaching it)."""
    links: list[Sender] = []
    for i in range(first, first + k):
        link = peer.session.sender(f"idle-{i}", target=Target(address=f"idle-{i}"), source=Source())
        link.attach()
        links.append(link)
    pump([peer], lambda: all(link.is_attached for link in links), timeout)
    for link in links:
        link.detach(closed=True)
    pump([peer], lambda: all(link.state.name == "DETACHED" for link in links), timeout)


def case_idle_queues(sizes: list[int], args: argparse.Namespace) -> list[Case]:
    broker = Broker(args.broker_path)
    out: list[Case] = []
    try:
        peer = open_peers(broker.port, 1, args.case_timeout)[0]
        made = 0
        batch = 1000
        for size in sorted(sizes):
            case = Case("idle queues", size)
            rss0 = broker.rss()
            t0 = time.monotonic()
            cpu_batches: list[float] = []
            while made < size:
                k = min(batch, size - made)
                c0 = broker.cpu()
                make_queues(peer, made, k, args.case_timeout)
                cpu_batches.append((broker.cpu() - c0) / k * 1e6)
                made += k
            if cpu_batches:
                case.figures["create_s"] = round(time.monotonic() - t0, 1)
                case.figures["create_cpu_us_per_queue_first_batch"] = round(cpu_batches[0])
                case.figures["create_cpu_us_per_queue_last_batch"] = round(cpu_batches[-1])
            if size and size == made and out:
                grown = size - out[-1].size
                case.figures["rss_kib_per_new_queue"] = round((broker.rss() - rss0) / grown, 2)
            case.figures["cpu_us_per_msg"] = round(move(peer, f"active-{size}", args.count, broker, args.case_timeout), 1)
            out.append(case)
            print(f"  idle queues {size:>7,}: {case.figures}", flush=True)
    finally:
        broker.stop()
    return out


def one_consumers_case(broker: Broker, size: int, args: argparse.Namespace) -> Case:
    case = Case("consumers", size)
    address = f"drain-{size}"
    (prod,) = open_peers(broker.port, 1, args.case_timeout)
    s = prod.session.sender("fill", target=Target(address=address), source=Source(), snd_settle_mode=SenderSettleMode.SETTLED)
    s.attach()
    pump([prod], lambda: s.is_attached, args.case_timeout)
    left = [args.backlog]

    def fill() -> bool:
        room = min(s.credit - s.queued, left[0])
        for _ in range(max(room, 0)):
            s.send(PAYLOAD)
        left[0] -= max(room, 0)
        return left[0] == 0 and s.queued == 0

    pump([prod], fill, args.case_timeout)
    per_conn = 2000
    peers = open_peers(broker.port, (size + per_conn - 1) // per_conn, args.case_timeout)
    receivers: list[Receiver] = []
    for i in range(size):
        p = peers[i // per_conn]
        r = p.session.receiver(f"c{i}", source=Source(address=address), target=Target())
        r.attach()
        receivers.append(r)
    pump(peers, lambda: all(r.is_attached for r in receivers), args.case_timeout)
    received = [0]

    def on_read(p: Peer) -> None:
        events, p.events = p.events, []
        for e in events:
            if type(e) is DeliveryReceived:
                e.delivery.settle(ACCEPTED)
                received[0] += 1
                if e.link.credit <= args.credit // 2:
                    e.link.flow(args.credit)

    cpu0 = broker.cpu()
    t0 = time.monotonic()
    for r in receivers:
        r.flow(args.credit)
    pump(peers, lambda: received[0] >= args.backlog, args.case_timeout, on_read)
    if args.count_tail:
        settled_by_broker(peers, receivers[::per_conn], args.case_timeout)
    case.figures["cpu_us_per_msg"] = round((broker.cpu() - cpu0) / args.backlog * 1e6, 1)
    case.figures["drain_s"] = round(time.monotonic() - t0, 1)
    return case


def settled_by_broker(peers: list[Peer], probes: list[Receiver], timeout: float) -> None:
    """Return once the broker has read every disposition sent so far: one echoed flow per
    connection (``probes[i]`` is a receiver of ``peers[i]``), which it answers after
    the frames before it. Without this the broker's CPU is read while it still settles
    the last window (up to consumers x credit messages, for 10,000 consumers the whole
    backlog), so the larger cases leave part of their work out."""
    echoed: set[int] = set()
    for r in probes:
        r.flow(r.credit, echo=True)  # the same credit: the queue is empty anyway

    def on_read(p: Peer) -> None:
        events, p.events = p.events, []
        for e in events:
            if type(e) is FlowReceived:
                echoed.add(id(e.link))

    pump(peers, lambda: all(id(r) in echoed for r in probes), timeout, on_read)


def case_consumers(sizes: list[int], args: argparse.Namespace) -> list[Case]:
    out: list[Case] = []
    for size in sizes:
        broker = Broker(args.broker_path)
        try:
            case = one_consumers_case(broker, size, args)
            out.append(case)
            print(f"  consumers {size:>7,}: {case.figures}", flush=True)
        finally:
            broker.stop()
    return out


def case_connections(sizes: list[int], args: argparse.Namespace) -> list[Case]:
    out: list[Case] = []
    for size in sizes:
        broker = Broker(args.broker_path)
        try:
            case = Case("connections", size)
            (active,) = open_peers(broker.port, 1, args.case_timeout)
            rss0 = broker.rss()
            t0 = time.monotonic()
            idle = open_peers(broker.port, size - 1, args.case_timeout)
            if idle:
                case.figures["open_s"] = round(time.monotonic() - t0, 1)
                case.figures["rss_kib_per_connection"] = round((broker.rss() - rss0) / len(idle), 1)
            keepalive(idle)
            case.figures["cpu_us_per_msg"] = round(move(active, "conn-work", args.count, broker, args.case_timeout, idle), 1)
            out.append(case)
            print(f"  connections {size:>7,}: {case.figures}", flush=True)
            for p in idle:
                p.close()
        finally:
            broker.stop()
    return out


def sizes_of(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", default="0,10000,100000", help="idle queue counts (comma separated)")
    ap.add_argument("--consumers", default="1,1000,10000", help="consumer counts")
    ap.add_argument("--connections", default="1,1000,5000", help="connection counts")
    ap.add_argument("--count", type=int, default=50_000, help="messages moved per idle-queue/connection case")
    ap.add_argument("--credit", type=int, default=10, help="each consumer's credit in the consumer cases")
    ap.add_argument("--backlog", type=int, default=100_000, help="backlog drained per consumer case")
    ap.add_argument(
        "--count-tail",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="consumer cases: read the broker's CPU only once it has taken the last dispositions "
        "(the default; --no-count-tail reads it when the last message arrives, as before "
        "2026-11-26, leaving out the broker's work on the last window: up to consumers x credit messages)",
    )
    ap.add_argument("--case-timeout", type=float, default=300.0, help="seconds any one step may take")
    ap.add_argument("--broker-path", default=None, help="PYTHONPATH for the broker (another checkout)")
    ap.add_argument("--only", default="queues,consumers,connections", help="families to run")
    ap.add_argument("--json", default=None, help="also write the figures as JSON here")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"file limit raised from {soft} to {hard}; load average {os.getloadavg()[0]:.1f}", flush=True)
    families = args.only.split(",")
    cases: list[Case] = []
    if "queues" in families:
        cases += case_idle_queues(sizes_of(args.queues), args)
    if "consumers" in families:
        cases += case_consumers(sizes_of(args.consumers), args)
    if "connections" in families:
        cases += case_connections(sizes_of(args.connections), args)
    print()
    print("| family | size | broker CPU µs/msg | other figures |")
    print("|---|---:|---:|---|")
    for c in cases:
        other = ", ".join(f"{k} {v}" for k, v in c.figures.items() if k != "cpu_us_per_msg")
        print(f"| {c.family} | {c.size:,} | {c.figures['cpu_us_per_msg']} | {other} |")
    print()
    verdicts = {}
    for family in dict.fromkeys(c.family for c in cases):
        values = [c.figures["cpu_us_per_msg"] for c in cases if c.family == family]
        ratio = max(values) / min(values)
        verdicts[family] = ratio
        print(f"{family}: largest/smallest broker CPU per message {ratio:.2f}x ({'flat' if ratio <= 1.3 else 'NOT flat'} within 1.3x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cases": [{"family": c.family, "size": c.size, **c.figures} for c in cases], "ratios": verdicts}, f, indent=1)


if __name__ == "__main__":
    main()
