"""Broker CPU per message for a message whose node is local and one that crosses to another worker.

In one process, without sockets or asyncio (as ``bench/profiles/broker_inproc.py``): a
producer and a consumer (our engine, in memory) talk AMQP 1.0 to worker A's front end
(``ConnectionHandler``), 100-byte messages in Proton C's shape, at-least-once, producer
window from the broker's credit, consumer credit 1000, each message accepted.

- ``local``: A owns queue ``q`` (today's broker, exactly);
- ``crossing``: worker B owns ``q``; A's lookup answers a :class:`RemoteNode`, and every
  message, delivery and outcome crosses the internal link (A's :class:`RemoteNodes` and
  B's :class:`NodeServer`, each over our engine, joined in memory): both clients on A,
  each message crosses twice (to B and back);
- ``publish``: the same, but the consumer is B's (as the ``publishers_apart`` setting
  places a queue's connections): each message and its outcome cross once.

Only the broker's calls are timed (thread CPU time): A's front end and core, the internal
link's two ends, B's core. ``--count`` also counts Python function calls (``sys.setprofile``)
and bytecode instructions (``sys.settrace`` with opcode events) per message in those calls
(slow: use a small ``--n``).

    .venv/bin/python bench/internal_link_bench.py --n 20000 --repeat 5
    .venv/bin/python bench/internal_link_bench.py --n 2000 --count
    .venv/bin/python bench/internal_link_bench.py --protocol 0-9-1 --n 20000 --repeat 5

``--protocol 0-9-1`` (or ``0-9-1-noack``) drives the 0-9-1 front end instead, in
rabbitmq-c's shapes (bench/profiles/counts.py's q091 workloads): crossing, worker A's
placement answers the stand-in, so the publishes, deliveries, acks and confirms cross;
publish, the consumer is B's (its acks stay on B; the publishes and confirms cross).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


class _Counter:
    """Counts calls and bytecode instructions while enabled."""

    def __init__(self) -> None:
        self.calls = 0
        self.instructions = 0

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call" or event == "c_call":
            self.calls += 1

    def _trace(self, frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        if event == "opcode":
            self.instructions += 1
        return self._trace

    def enable(self) -> None:
        sys.setprofile(self._profile)
        sys.settrace(self._trace)

    def disable(self) -> None:
        sys.settrace(None)
        sys.setprofile(None)


class _MemTransport(asyncio.Transport):
    """One end of an in-memory internal link: what it writes waits in ``outbox`` for the peer."""

    def __init__(self, outbox: list[tuple[Any, bytes]]) -> None:
        super().__init__()
        self.outbox = outbox
        self.peer: Any = None
        self._closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.outbox.append((self.peer, bytes(data)))

    def close(self) -> None:
        self._closing = True

    def is_closing(self) -> bool:
        return self._closing


class _World:
    """Worker A (the front ends' broker) and, crossing, worker B owning ``q`` over an
    in-memory internal link; ``pump_links`` runs the link until it is quiet. ``durable``:
    B's ``q`` as the clients declare it (an owner compares a re-declaration with its queue,
    as RabbitMQ does: 0-9-1's ``queue.declare`` without flags is a transient queue)."""

    def __init__(self, mode: str, *, declare: bool = True, durable: bool = True) -> None:
        from amqp10.broker.config import BrokerConfig, QueuePolicy
        from amqp10.broker.core import Broker
        from amqp10.broker.workers.link import InternalLink
        from amqp10.broker.workers.owner import NodeServer
        from amqp10.broker.workers.remote import RemoteNodes

        config = BrokerConfig(default_policy=QueuePolicy(durable=False))
        self.a = Broker(config)
        self.soon: list[Callable[[], None]] = []
        self.outbox: list[tuple[Any, bytes]] = []
        if mode not in ("crossing", "publish"):
            if declare:
                self.a.default.create_node("q", "queue")
            return
        self.b = b = Broker(config)
        if durable:
            b.default.create_node("q", "queue")
        else:
            b.default.declare_queue("q", durable=False)
        remote = RemoteNodes("worker-a")
        link_a = InternalLink(remote, "worker-a", call_soon=self.soon.append)
        link_b = InternalLink(NodeServer(b), "worker-b", call_soon=self.soon.append)
        ta, tb = _MemTransport(self.outbox), _MemTransport(self.outbox)
        ta.peer, tb.peer = link_b, link_a
        link_b.connection_made(tb)
        link_a.connection_made(ta)
        self.pump_links()
        stand_in = remote.node("/", "q")
        # (as Placement answers: the stand-in for the node B owns)
        self.a.placement = lambda vhost, address: stand_in if address == "q" else None

    def pump_links(self) -> None:
        soon, outbox = self.soon, self.outbox
        guard = 0
        while soon or outbox:
            guard += 1
            if guard > 100_000:
                raise SystemExit("the internal link does not settle")
            while soon:
                soon.pop(0)()
            while outbox:
                peer, data = outbox.pop(0)
                peer.data_received(data)


def run(n: int, mode: str, count: bool) -> tuple[float, float, float]:
    from amqp10.broker.amqp1 import ConnectionHandler
    from amqp10.transport import Connection, DeliveryReceived, DeliveryUpdated
    from amqp10.types import SenderSettleMode, Source, Target

    world = _World(mode)
    a = world.a
    pump_links = world.pump_links

    body = b"\x00\x53\x75\xa0\x64" + bytes(100)
    payload = b"\x00\x53\x70\x45\x00\x53\x73\x45" + body
    clock = [0.0]
    counter = _Counter() if count else None

    def side(conn: Connection, server: Connection, handler: ConnectionHandler) -> list[Any]:
        out = conn.data_to_send()
        t0 = time.thread_time()
        if counter:
            counter.enable()
        if out:
            handler.handle(server.receive_data(out))
        pump_links()
        back = server.data_to_send()
        if counter:
            counter.disable()
        clock[0] += time.thread_time() - t0
        return conn.receive_data(back) if back else []

    def client(name: str, broker: Any = a) -> tuple[Connection, Connection, ConnectionHandler]:
        c = Connection(name)
        s = Connection("broker", send_header=False)
        h = ConnectionHandler(broker, s)
        c.open()
        c.session().begin()
        return c, s, h

    pc, ps, ph = client("producer")
    cc, cs, ch = client("consumer", world.b if mode == "publish" else a)
    mode_ = SenderSettleMode.UNSETTLED
    snd = pc.sessions[0].sender("p", source=Source(), target=Target(address="q"), snd_settle_mode=mode_)
    snd.attach()
    rcv = cc.sessions[0].receiver("c", source=Source(address="q"), target=Target(), snd_settle_mode=mode_)
    rcv.attach()
    for _ in range(5):
        side(pc, ps, ph)
        side(cc, cs, ch)
    rcv.flow(1000)
    side(cc, cs, ch)
    sent = received = accepted = 0
    clock[0] = 0.0
    if counter:
        counter.calls = counter.instructions = 0
    guard = 0
    while received < n or accepted < n:
        guard += 1
        if guard > 10 * n:
            raise SystemExit(f"no progress: sent {sent}, received {received}, accepted {accepted}")
        while snd.credit > 0 and sent < n and snd.queued == 0:
            snd.send(payload)
            sent += 1
        for e in side(pc, ps, ph):
            if isinstance(e, DeliveryUpdated) and e.delivery.remote_settled:
                accepted += 1
                if not e.delivery.settled:
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
    us = clock[0] / n * 1e6
    if counter:
        return us, counter.calls / n, counter.instructions / n
    return us, 0.0, 0.0


class _Clock:
    """What ``bench/profiles/counts.py``'s 0-9-1 workload enables around the broker's side:
    the thread CPU time it takes, and (``counter``) its calls and instructions."""

    def __init__(self, counter: _Counter | None) -> None:
        self.counter = counter
        self.seconds = 0.0
        self._t0 = 0.0

    def enable(self) -> None:
        if self.counter:
            self.counter.enable()
        self._t0 = time.thread_time()

    def disable(self) -> None:
        self.seconds += time.thread_time() - self._t0
        if self.counter:
            self.counter.disable()

    def clear(self) -> None:
        self.seconds = 0.0
        if self.counter:
            self.counter.calls = self.counter.instructions = 0


def run_091(n: int, mode: str, count: bool, confirm: bool = True) -> tuple[float, float, float]:
    """The same through the 0-9-1 front end, in rabbitmq-c's shapes (counts.py's q091
    workloads): ``confirm``: publisher confirms and a basic.ack per message with prefetch
    1000, else neither (no-ack)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "profiles"))
    from counts import run_091 as workload

    world = _World(mode, declare=False, durable=False)  # (as the client declares ``q``)
    clock = _Clock(_Counter() if count else None)
    consumer = world.b if mode == "publish" else world.a
    workload(n, confirm, clock, broker=world.a, between=world.pump_links, consumer_broker=consumer)
    us = clock.seconds / n * 1e6
    c = clock.counter
    return (us, c.calls / n, c.instructions / n) if c else (us, 0.0, 0.0)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--count", action="store_true", help="count calls and instructions per message (slow)")
    p.add_argument(
        "--protocol",
        choices=("1.0", "0-9-1", "0-9-1-noack"),
        default="1.0",
        help="the clients' protocol (0-9-1: confirms and acks; 0-9-1-noack: neither)",
    )
    p.add_argument(
        "--gc",
        choices=("broker", "default"),
        default="broker",
        help="the collector as `amqp10 broker` sets it (thresholds 50,000/20/100, start-up frozen), or Python's default",
    )
    args = p.parse_args()
    if args.gc == "broker":
        from amqp10.cli.broker import _tune_gc

        _tune_gc()

    def one(n: int, mode: str, count: bool) -> tuple[float, float, float]:
        if args.protocol == "1.0":
            return run(n, mode, count)
        return run_091(n, mode, count, confirm=args.protocol == "0-9-1")

    modes = ("local", "crossing", "publish")
    results: dict[str, list[tuple[float, float, float]]] = {m: [] for m in modes}
    for i in range(1 if args.count else args.repeat):
        for mode in modes[i % len(modes) :] + modes[: i % len(modes)]:  # each first in turn
            results[mode].append(one(args.n, mode, args.count))
    for mode, rows in results.items():
        us = [r[0] for r in rows]
        line = f"{mode:9s} median {statistics.median(us):6.2f} us/msg (all: {', '.join(f'{x:.2f}' for x in us)})"
        if args.count:
            line += f"; {rows[0][1]:.0f} calls/msg, {rows[0][2]:.0f} instructions/msg"
        print(line)
    loc = statistics.median(r[0] for r in results["local"])
    lc = results["local"][0]
    for mode in modes[1:]:
        cross = statistics.median(r[0] for r in results[mode])
        tail = " (timed under tracing: compare the counts)" if args.count else ""
        print(f"{mode}/local: {cross / loc:.2f}x CPU{tail}")
        if args.count:
            cc = results[mode][0]
            print(f"{mode}/local: {cc[1] / lc[1]:.2f}x calls, {cc[2] / lc[2]:.2f}x instructions")
            print(f"{mode} minus local: {cc[1] - lc[1]:.2f} calls/msg, {cc[2] - lc[2]:.2f} instructions/msg")
    return 0


if __name__ == "__main__":
    sys.exit(main())
