"""Engine benchmark: messages/s through two engines in memory, ours and Proton's, one run.

A sender pushes N messages of 100 bytes through a receiver that grants credit 1000
(topped up to 1000 whenever it falls below 500), with no sockets: the bytes each
engine writes are fed straight to the other. Four pairings, each in two modes:

- pairings: ours -> ours, ours -> proton, proton -> ours, proton -> proton
  (``a -> b``: engine ``a`` sends, engine ``b`` receives);
- modes: ``unsettled`` (the receiver accepts and settles each delivery, the sender
  settles when the outcome arrives) and ``settled`` (pre-settled at send).

Ours is driven through the event list ``receive_data`` returns. Proton is driven, by
default, by polling ``link.current`` and its deliveries' ``settled`` (its fastest way
from Python); ``--proton-driver events`` goes through its ``Collector`` instead (the
events every Proton handler and the reactor consume). Each measurement is a fresh connection; the
time runs from the first ``send`` to the sender's last settlement (unsettled) or the
receiver's last delivery (settled). Every pairing is timed 3 times, interleaved, and
reported as best and median messages/s, with the ratio to proton -> proton (medians).

    python bench/engine_bench.py              # N = 20000
    python bench/engine_bench.py --quick      # N = 2000, a few seconds
    python bench/engine_bench.py --n 50000 --json bench/out/engine.json
    python bench/engine_bench.py --profile    # always print the cProfile top 10 of ours -> ours

When ours -> ours is slower than proton -> proton (in either mode), the script also
profiles ours -> ours with cProfile and prints the 10 entries with the highest tottime.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import platform
import pstats
import shlex
import statistics
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, Protocol

# Run from a checkout without installing: make the repo root importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import proton
from proton import Collector, Disposition, Endpoint, Transport
from proton import Event as PEvent
from proton import Link as PLink

from amqp10.message import Message
from amqp10.transport import (
    Connection,
    ConnectionOpened,
    DeliveryReceived,
    DeliveryUpdated,
    LinkAttached,
    LinkState,
    SessionBegun,
    SessionState,
)
from amqp10.transport.connection_state import ConnectionState
from amqp10.types import ReceiverSettleMode, SenderSettleMode, Target

CREDIT = 1000
LOW_WATER = 500
REPEAT = 3
MODES = ("unsettled", "settled")
PAIRINGS = ("ours -> ours", "ours -> proton", "proton -> ours", "proton -> proton")


def make_payload() -> bytes:
    """A real AMQP message (one data section) of exactly 100 bytes."""
    probe = Message(b"", body_type="data").encode()
    payload = Message(b"x" * (100 - len(probe)), body_type="data").encode()
    assert len(payload) == 100, len(payload)
    return payload


PAYLOAD = make_payload()


class End(Protocol):
    """One side of the pump: writes bytes, reads bytes, runs its application logic."""

    def out(self) -> bytes: ...
    def feed(self, data: bytes) -> None: ...
    def ready(self) -> bool: ...
    def done(self) -> bool: ...


# --- our engine --------------------------------------------------------------------------------------
class OursSender:
    """Our client: opens, attaches a sender, sends while it has credit, settles on outcomes."""

    def __init__(self, n: int, settled: bool) -> None:
        self.n, self.settled = n, settled
        self.sent = self.acked = 0
        self.conn = Connection("bench-sender")
        self.conn.open()
        s = self.conn.session()
        s.begin()
        self.link = s.sender(
            "bench",
            target=Target(address="q"),
            snd_settle_mode=SenderSettleMode.SETTLED if settled else SenderSettleMode.UNSETTLED,
            rcv_settle_mode=ReceiverSettleMode.FIRST,
        )
        self.link.attach()

    def ready(self) -> bool:
        return self.link.is_attached and self.link.credit > 0

    def out(self) -> bytes:
        link = self.link
        k = min(link.credit, self.n - self.sent)
        if k > 0 and link.is_attached and not link.queued:
            send, payload = link.send, PAYLOAD
            for _ in range(k):
                send(payload)
            self.sent += k
        return self.conn.data_to_send()

    def feed(self, data: bytes) -> None:
        for ev in self.conn.receive_data(data):
            if type(ev) is DeliveryUpdated and ev.settled:
                ev.delivery.settle()
                self.acked += 1

    def done(self) -> bool:
        return self.acked == self.n if not self.settled else self.sent == self.n


class OursReceiver:
    """Our server: accepts what the peer opens, grants credit, accepts each delivery."""

    def __init__(self, n: int, settled: bool) -> None:
        self.n, self.settled = n, settled
        self.received = self.nbytes = 0
        self.conn = Connection("bench-receiver")
        self.link: Any = None

    def ready(self) -> bool:
        return self.link is not None

    def out(self) -> bytes:
        return self.conn.data_to_send()

    def feed(self, data: bytes) -> None:
        settled = self.settled
        for ev in self.conn.receive_data(data):
            tp = type(ev)
            if tp is DeliveryReceived:
                d = ev.delivery
                self.received += 1
                self.nbytes += len(d.payload)
                if not settled:
                    d.accept()
            elif tp is ConnectionOpened and self.conn.state is ConnectionState.OPEN_RCVD:
                self.conn.open()
            elif tp is SessionBegun and ev.session.state is SessionState.BEGIN_RCVD:
                ev.session.begin()
            elif tp is LinkAttached and ev.link.state is LinkState.ATTACH_RCVD:
                ev.link.attach(source=ev.link.remote_source, target=ev.link.remote_target)
                self.link = ev.link
        link = self.link
        if link is not None and link.credit < LOW_WATER and link.is_attached:
            link.flow(CREDIT)

    def done(self) -> bool:
        return self.received == self.n


# --- Proton's engine -------------------------------------------------------------------------------------
class _ProtonEnd:
    """Proton's Connection + Transport, driven by events (``poll=False``) or by polling.

    With a ``Collector``, every delivery and update becomes an ``Event`` whose context
    objects are wrapped for Python: the way handlers and the reactor work. Polling reads
    ``link.current`` and each sent delivery's ``settled`` directly, which skips those
    wrappers: Proton's fastest way from Python.
    """

    def __init__(self, server: bool, container: str, poll: bool) -> None:
        self.poll = poll
        self.conn = proton.Connection()
        self.conn.container = container
        self.transport = Transport(Transport.SERVER if server else Transport.CLIENT)
        self.collector = Collector()
        if not poll:
            self.conn.collect(self.collector)
        self.transport.bind(self.conn)

    def out(self) -> bytes:
        self.events()
        t = self.transport
        p = t.pending()
        if p <= 0:
            return b""
        data = t.peek(p)
        t.pop(p)
        return bytes(data)

    def feed(self, data: bytes) -> None:
        t = self.transport
        view = memoryview(data)
        while view:
            cap = t.capacity()
            if cap <= 0:
                raise RuntimeError("Proton's transport input is closed")
            t.push(bytes(view[:cap]))
            view = view[cap:]
        self.events()

    def events(self) -> None:
        raise NotImplementedError


class ProtonSender(_ProtonEnd):
    def __init__(self, n: int, settled: bool, poll: bool) -> None:
        super().__init__(server=False, container="bench-sender", poll=poll)
        self.n, self.settled = n, settled
        self.sent = self.acked = 0
        self.outstanding: deque[Any] = deque()
        self.conn.open()
        s = self.conn.session()
        s.open()
        link = s.sender("bench")
        link.target.address = "q"
        link.snd_settle_mode = PLink.SND_SETTLED if settled else PLink.SND_UNSETTLED
        link.rcv_settle_mode = PLink.RCV_FIRST
        link.open()
        self.link = link

    def ready(self) -> bool:
        return bool(self.link.state & Endpoint.REMOTE_ACTIVE) and self.link.credit > 0

    def out(self) -> bytes:
        link = self.link
        k = min(link.credit, self.n - self.sent)
        if k > 0:
            delivery, send, advance, payload = link.delivery, link.send, link.advance, PAYLOAD
            start = self.sent
            track = self.poll and not self.settled
            for i in range(start, start + k):
                d = delivery(str(i))
                send(payload)
                advance()
                if self.settled:
                    d.settle()
                elif track:
                    self.outstanding.append(d)
            self.sent += k
        return super().out()

    def events(self) -> None:
        if self.poll:
            # the receiver settles first and in order: settle from the front
            dq = self.outstanding
            while dq and dq[0].settled:
                dq.popleft().settle()
                self.acked += 1
            return
        coll = self.collector
        delivery_type = PEvent.DELIVERY
        while (ev := coll.peek()) is not None:
            if ev.type is delivery_type:
                d = ev.delivery
                if d.settled:  # the receiver settled (rcv-settle-mode first)
                    d.settle()
                    self.acked += 1
            coll.pop()

    def done(self) -> bool:
        return self.acked == self.n if not self.settled else self.sent == self.n


class ProtonReceiver(_ProtonEnd):
    def __init__(self, n: int, settled: bool, poll: bool) -> None:
        super().__init__(server=True, container="bench-receiver", poll=poll)
        self.n, self.settled = n, settled
        self.received = self.nbytes = 0
        self.link: Any = None

    def ready(self) -> bool:
        return self.link is not None

    def events(self) -> None:
        if self.poll:
            self._poll()
        else:
            self._events()
        link = self.link
        if link is not None and link.credit < LOW_WATER:
            link.flow(CREDIT - link.credit)

    def _poll(self) -> None:
        link = self.link
        if link is None:
            self._open_remote()
            return
        settled = self.settled
        while True:
            d = link.current
            if d is None or not d.readable or d.partial:
                return
            data = link.recv(d.pending)
            link.advance()
            self.received += 1
            self.nbytes += len(data)
            if not settled:
                d.update(Disposition.ACCEPTED)
            d.settle()

    def _open_remote(self) -> None:
        conn = self.conn
        if conn.state & Endpoint.LOCAL_UNINIT and conn.state & Endpoint.REMOTE_ACTIVE:
            conn.open()
        ssn = conn.session_head(Endpoint.LOCAL_UNINIT | Endpoint.REMOTE_ACTIVE)
        if ssn is not None:
            ssn.open()
        link = conn.link_head(Endpoint.LOCAL_UNINIT | Endpoint.REMOTE_ACTIVE)
        if link is not None:
            self._open_link(link)

    def _open_link(self, link: Any) -> None:
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        link.open()
        self.link = link

    def _events(self) -> None:
        coll = self.collector
        delivery_type = PEvent.DELIVERY
        settled = self.settled
        while (ev := coll.peek()) is not None:
            tp = ev.type
            if tp is delivery_type:
                d = ev.delivery
                if d.readable and not d.partial:
                    link = ev.link
                    data = link.recv(d.pending)
                    link.advance()
                    self.received += 1
                    self.nbytes += len(data)
                    if not settled:
                        d.update(Disposition.ACCEPTED)
                    d.settle()
            elif tp == PEvent.CONNECTION_REMOTE_OPEN:
                ev.connection.open()
            elif tp == PEvent.SESSION_REMOTE_OPEN:
                ev.session.open()
            elif tp == PEvent.LINK_REMOTE_OPEN:
                self._open_link(ev.link)
            coll.pop()

    def done(self) -> bool:
        return self.received == self.n


# --- running ------------------------------------------------------------------------------------
def make_pair(pairing: str, n: int, settled: bool, poll: bool = True) -> tuple[End, End]:
    a, b = pairing.split(" -> ")
    sender: End = OursSender(n, settled) if a == "ours" else ProtonSender(n, settled, poll)
    receiver: End = OursReceiver(n, settled) if b == "ours" else ProtonReceiver(n, settled, poll)
    return sender, receiver


def pump(sender: End, receiver: End, until: Any, max_idle: int = 3) -> None:
    idle = 0
    while not until():
        a = sender.out()
        if a:
            receiver.feed(a)
        b = receiver.out()
        if b:
            sender.feed(b)
        if a or b:
            idle = 0
        else:
            idle += 1
            if idle > max_idle:
                raise RuntimeError("the pump stalled: neither engine has anything to write")


def run_once(pairing: str, n: int, settled: bool, poll: bool) -> float:
    """Seconds to move ``n`` messages (handshake excluded)."""
    sender, receiver = make_pair(pairing, n, settled, poll)
    pump(sender, receiver, lambda: sender.ready() and receiver.ready())
    t0 = time.perf_counter()
    pump(sender, receiver, lambda: sender.done() and receiver.done())
    elapsed = time.perf_counter() - t0
    r: Any = receiver
    if r.received != n or r.nbytes != n * len(PAYLOAD):
        raise AssertionError(f"{pairing}: received {r.received} messages, {r.nbytes} bytes")
    return elapsed


def profile_ours(n: int, settled: bool, top: int = 10) -> list[dict[str, Any]]:
    """cProfile of ours -> ours: the ``top`` entries by tottime."""
    sender, receiver = make_pair("ours -> ours", n, settled)
    pump(sender, receiver, lambda: sender.ready() and receiver.ready())
    prof = cProfile.Profile()
    prof.enable()
    pump(sender, receiver, lambda: sender.done() and receiver.done())
    prof.disable()
    stats = pstats.Stats(prof)
    rows = []
    root = str(Path(__file__).resolve().parent.parent) + "/"
    for (file, line, func), (_cc, ncalls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append(
            {
                "where": f"{file.replace(root, '')}:{line}:{func}",
                "ncalls": ncalls,
                "tottime": tottime,
                "cumtime": cumtime,
            }
        )
    rows.sort(key=lambda r: r["tottime"], reverse=True)
    return rows[:top]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 2000 (a smoke run)")
    parser.add_argument(
        "--n", type=int, default=None, help="messages per measurement (default 20000)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--profile", action="store_true", help="always profile ours -> ours")
    parser.add_argument(
        "--proton-driver",
        choices=("poll", "events"),
        default="poll",
        help="drive Proton by polling links and deliveries (fastest, default) or through its Collector",
    )
    args = parser.parse_args(argv)
    n = args.n or (2000 if args.quick else 20000)
    poll = args.proton_driver == "poll"

    command = shlex.join([Path(sys.executable).name, *sys.argv])
    pyver = f"{platform.python_implementation()} {platform.python_version()}"
    pnver = ".".join(map(str, proton.VERSION))
    print(f"command: {command}")
    print(f"python:  {pyver} ({platform.machine()}, {platform.system()})")
    print(f"proton:  python-qpid-proton {pnver}")
    print(
        f"work:    {n} messages of {len(PAYLOAD)} bytes, credit {CREDIT} (topped up below "
        f"{LOW_WATER}); {REPEAT} timings per pairing, interleaved; messages/s"
    )
    print(f"proton driven by: {args.proton_driver}")
    print()

    times: dict[tuple[str, str], list[float]] = {(p, m): [] for p in PAIRINGS for m in MODES}
    for _ in range(REPEAT):
        for mode in MODES:
            for pairing in PAIRINGS:
                times[pairing, mode].append(run_once(pairing, n, mode == "settled", poll))

    rows = []
    for mode in MODES:
        base = statistics.median(n / t for t in times["proton -> proton", mode])
        for pairing in PAIRINGS:
            rates = [n / t for t in times[pairing, mode]]
            med = statistics.median(rates)
            rows.append(
                {
                    "pairing": pairing,
                    "mode": mode,
                    "best": max(rates),
                    "median": med,
                    "ratio_vs_proton_proton": med / base,
                    "seconds": times[pairing, mode],
                }
            )

    header = f"{'pairing (sender -> receiver)':<30} {'mode':<10} {'best msg/s':>12} {'median msg/s':>13} {'vs p->p':>8}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['pairing']:<30} {r['mode']:<10} {r['best']:>12,.0f} {r['median']:>13,.0f} "
            f"{r['ratio_vs_proton_proton']:>7.2f}x"
        )
    print()
    print("vs p->p = median / median of proton -> proton in the same mode")

    slower = [
        m
        for m in MODES
        if next(r for r in rows if r["pairing"] == "ours -> ours" and r["mode"] == m)[
            "ratio_vs_proton_proton"
        ]
        < 1.0
    ]
    profiles: dict[str, list[dict[str, Any]]] = {}
    for mode in MODES if args.profile else slower:
        profiles[mode] = prof = profile_ours(n, mode == "settled")
        print()
        print(f"cProfile, ours -> ours, {mode}: top 10 by tottime (s)")
        for p in prof:
            print(f"  {p['tottime']:8.3f}  {p['ncalls']:>8}  {p['where']}")

    if args.json:
        out = {
            "command": command,
            "python": pyver,
            "proton": pnver,
            "n": n,
            "payload_bytes": len(PAYLOAD),
            "credit": CREDIT,
            "repeat": REPEAT,
            "proton_driver": args.proton_driver,
            "results": rows,
            "profiles": profiles,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
