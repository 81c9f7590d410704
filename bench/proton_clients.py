"""Bench workers on Proton's Python binding (python-qpid-proton), for ``bench/compare.py``.

They speak the line protocol of :mod:`amqp10.cli.bench` (``ready``, ``go``, ``n``,
``done``, ``error``) and carry the same body: one data section holding the
send time (CLOCK_MONOTONIC ns), the sequence number, then padding. They use
Proton's usual high-level API: a ``MessagingHandler`` in a ``Container``.

    python bench/proton_clients.py producer --url amqp://127.0.0.1:5672 --count 1000 ...
    python bench/proton_clients.py consumer --url amqp://127.0.0.1:5672 --count 1000 ...
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import time
from typing import Any

from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import AtLeastOnce, AtMostOnce, Container

from amqp10.cli.bench.harness import run_worker, say, worker_parser

STAMP = struct.Struct(">QQ")
REPORT_EVERY_NS = 100_000_000


class Producer(MessagingHandler):  # type: ignore[misc]
    def __init__(self, ns: argparse.Namespace) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=True)
        self.ns = ns
        self.presettled = ns.settle == "at-most-once"
        self.pad = b"\x00" * (ns.size - STAMP.size)
        self.sent = 0
        self.confirmed = 0
        self.started = False
        self.finished = False
        self.first_ns = 0
        self.cpu0 = 0.0
        self.last_report = 0

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(
            self.ns.url,
            allowed_mechs="ANONYMOUS PLAIN",
            user=self.ns.user,
            password=self.ns.password,
        )
        opts = AtMostOnce() if self.presettled else AtLeastOnce()
        event.container.create_sender(conn, self.ns.address, options=opts)

    def on_sendable(self, event: Any) -> None:
        if not self.started:
            say("ready")
            for line in sys.stdin:
                if line.strip() == "go":
                    break
            else:
                event.connection.close()
                return
            self.started = True
            self.cpu0 = time.process_time()
            self.first_ns = time.monotonic_ns()
        sender = event.sender
        count = self.ns.count
        while sender.credit and self.sent < count:
            body = STAMP.pack(time.monotonic_ns(), self.sent) + self.pad
            msg = Message(body=body, inferred=True, durable=self.ns.durable)
            sender.send(msg)
            self.sent += 1
        if self.presettled:
            self.confirmed = self.sent
            self._report()
            if self.sent >= count:
                self._finish(event)

    def _report(self) -> None:
        now = time.monotonic_ns()
        if now - self.last_report > REPORT_EVERY_NS:
            self.last_report = now
            say(f"n {self.confirmed}")

    def _finish(self, event: Any) -> None:
        if self.finished:
            return
        self.finished = True
        say(
            "done "
            + json.dumps(
                {
                    "count": self.confirmed,
                    "first_ns": self.first_ns,
                    "last_ns": time.monotonic_ns(),
                    "cpu_s": time.process_time() - self.cpu0,
                }
            )
        )
        event.connection.close()

    def on_accepted(self, event: Any) -> None:
        self.confirmed += 1
        self._report()
        if self.confirmed >= self.ns.count:
            self._finish(event)

    def on_rejected(self, event: Any) -> None:
        say(f"error message rejected: {event.delivery.remote.condition}")
        event.connection.close()

    def on_released(self, event: Any) -> None:
        say("error message released")
        event.connection.close()

    def on_transport_error(self, event: Any) -> None:
        cond = event.transport.condition
        say(f"error transport: {cond.name if cond else ''} {cond.description if cond else ''}")

    def on_link_error(self, event: Any) -> None:
        cond = event.link.remote_condition
        say(f"error link: {cond.name if cond else ''} {cond.description if cond else ''}")
        event.connection.close()


class Consumer(MessagingHandler):  # type: ignore[misc]
    def __init__(self, ns: argparse.Namespace) -> None:
        super().__init__(prefetch=ns.credit, auto_accept=True, auto_settle=True)
        self.ns = ns
        self.presettled = ns.settle == "at-most-once"
        self.received = 0
        self.lat: list[int] = []
        self.first_ns = 0
        self.last_ns = 0
        self.cpu0 = time.process_time()
        self.last_report = 0
        self.finished = False

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(
            self.ns.url,
            allowed_mechs="ANONYMOUS PLAIN",
            user=self.ns.user,
            password=self.ns.password,
        )
        opts = AtMostOnce() if self.presettled else None
        event.container.create_receiver(conn, self.ns.address, options=opts)

    def on_link_opened(self, event: Any) -> None:
        if event.receiver is not None:
            self.cpu0 = time.process_time()
            say("ready")

    def on_message(self, event: Any) -> None:
        now = time.monotonic_ns()
        body = event.message.body
        stamp = STAMP.unpack_from(bytes(body[:16]))[0]
        self.lat.append((now - stamp) // 1000)
        if not self.received:
            self.first_ns = now
        self.last_ns = now
        self.received += 1
        if now - self.last_report > REPORT_EVERY_NS:
            self.last_report = now
            say(f"n {self.received}")
        if self.received >= self.ns.count and not self.finished:
            self.finished = True
            say(
                "done "
                + json.dumps(
                    {
                        "count": self.received,
                        "first_ns": self.first_ns,
                        "last_ns": self.last_ns,
                        "cpu_s": time.process_time() - self.cpu0,
                        "lat_us": self.lat,
                    }
                )
            )
            event.receiver.close()
            event.connection.close()

    def on_transport_error(self, event: Any) -> None:
        if not self.finished:
            cond = event.transport.condition
            say(f"error transport: {cond.name if cond else ''} {cond.description if cond else ''}")

    def on_link_error(self, event: Any) -> None:
        cond = event.link.remote_condition
        say(f"error link: {cond.name if cond else ''} {cond.description if cond else ''}")
        event.connection.close()


def main(argv: list[str] | None = None) -> int:
    p = worker_parser(description=__doc__.splitlines()[0])
    p.add_argument("--user")
    p.add_argument("--password")
    ns = p.parse_args(argv)
    handler = Producer(ns) if ns.role == "producer" else Consumer(ns)
    container = Container(handler)
    container.container_id = f"proton-bench-{ns.role}-{time.monotonic_ns()}"
    return run_worker(container.run)


if __name__ == "__main__":
    sys.exit(main())
