"""Bench workers on pika's ``BlockingConnection`` (AMQP 0-9-1), for ``bench/amqp091_bench.py``.

Line protocol and message body: those of ``amqp10 bench``'s workers
(:mod:`amqp10.cli.bench.harness`). They use pika as its documentation shows:

- producer: ``confirm_delivery()`` on the channel, then ``basic_publish`` per message
  (with confirms on, each call returns once the broker has confirmed it), to the
  default exchange with the queue's name as routing key;
- consumer: ``basic_qos(prefetch_count=--credit)``, ``basic_consume`` with a callback
  that acknowledges each message (``basic_ack``), or ``auto_ack`` with
  ``--settle at-most-once`` (the producer then does not ask for confirms).

    python bench/pika_clients.py producer --url amqp://127.0.0.1:5672 --count 1000 ...
    python bench/pika_clients.py consumer --url amqp://127.0.0.1:5672 --count 1000 ...
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any
from urllib.parse import urlsplit

import pika

from amqp10.cli.bench.harness import STAMP, run_worker, say, worker_parser

REPORT_EVERY_NS = 100_000_000


def connect(ns: argparse.Namespace) -> Any:
    u = urlsplit(ns.url)
    params = pika.ConnectionParameters(
        host=u.hostname or "127.0.0.1",
        port=u.port or 5672,
        credentials=pika.PlainCredentials(u.username or "guest", u.password or "guest"),
        heartbeat=0,
    )
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch.queue_declare(queue=ns.address)
    return conn, ch


def produce(ns: argparse.Namespace) -> None:
    conn, ch = connect(ns)
    confirms = ns.settle == "at-least-once"
    if confirms:
        ch.confirm_delivery()
    pad = b"\x00" * (ns.size - STAMP.size)
    say("ready")
    for line in sys.stdin:
        if line.strip() == "go":
            break
    else:
        conn.close()
        return
    cpu0 = time.process_time()
    first = time.monotonic_ns()
    deadline = first + int(ns.timeout * 1e9)
    last_report = 0
    publish = ch.basic_publish
    key = ns.address
    for seq in range(ns.count):
        now = time.monotonic_ns()
        if now > deadline:
            say(f"error timed out after {seq} messages")
            return
        publish("", key, STAMP.pack(now, seq) + pad)
        if now - last_report > REPORT_EVERY_NS:
            last_report = now
            say(f"n {seq}")
    last = time.monotonic_ns()
    done = {
        "count": ns.count,
        "first_ns": first,
        "last_ns": last,
        "cpu_s": time.process_time() - cpu0,
    }
    say("done " + json.dumps(done))
    conn.close()


def consume(ns: argparse.Namespace) -> None:
    conn, ch = connect(ns)
    auto_ack = ns.settle == "at-most-once"
    ch.basic_qos(prefetch_count=ns.credit)
    lat: list[int] = []
    state = {"first": 0, "last": 0, "report": 0}

    def on_message(channel: Any, method: Any, properties: Any, body: bytes) -> None:
        now = time.monotonic_ns()
        lat.append((now - STAMP.unpack_from(body)[0]) // 1000)
        if not state["first"]:
            state["first"] = now
        state["last"] = now
        if not auto_ack:
            channel.basic_ack(method.delivery_tag)
        if now - state["report"] > REPORT_EVERY_NS:
            state["report"] = now
            say(f"n {len(lat)}")

    ch.basic_consume(ns.address, on_message, auto_ack=auto_ack)
    cpu0 = time.process_time()
    say("ready")
    deadline = time.monotonic() + ns.timeout
    while len(lat) < ns.count:
        if time.monotonic() > deadline:
            say(f"error timed out after {len(lat)} messages")
            return
        conn.process_data_events(time_limit=0.5)
    done = {
        "count": len(lat),
        "first_ns": state["first"],
        "last_ns": state["last"],
        "cpu_s": time.process_time() - cpu0,
        "lat_us": lat,
    }
    say("done " + json.dumps(done))
    conn.close()


def main(argv: list[str] | None = None) -> int:
    p = worker_parser(description=__doc__.splitlines()[0] if __doc__ else None)
    ns = p.parse_args(argv)
    return run_worker(lambda: (produce if ns.role == "producer" else consume)(ns))


if __name__ == "__main__":
    sys.exit(main())
