"""Bench workers on ``qpid.messaging`` (qpid-python 1.36, AMQP 0-10), for ``bench/amqp010_bench.py``.

This file runs under **Python 2.7** (qpid-python's interpreter) and is kept to what both
2.7 and 3 parse, as ``interop/qpid_client.py`` is. Line protocol and message body: those of
``amqp10 bench``'s workers (:mod:`amqp10.cli.bench.harness`); the send time is
``CLOCK_MONOTONIC`` (read through libc: 2.7 has no ``time.monotonic_ns``), the clock the
other workers read. The client is used as its documentation shows:

- producer: ``Sender.send(message, sync=False)`` with the sender's capacity set to
  ``--credit`` (at most that many transfers not yet completed by the broker), then
  ``sync()`` at the end: the broker completes a transfer once it has it (stored, for a
  durable one), which is the 0-10 publisher's confirm;
- consumer: a receiver of capacity ``--credit`` (its prefetch), ``fetch()`` then
  ``acknowledge(message, sync=False)`` each (``--settle at-most-once``: an address with
  ``link: {reliability: unreliable}``, accept-mode none, nothing acknowledged).

    python2.7 bench/qpid_clients.py producer --url amqp://127.0.0.1:5672 --count 1000 ...
"""

import argparse
import ctypes
import json
import struct
import sys
import time

from qpid.messaging import Connection, Empty, Message  # type: ignore[import-not-found]

STAMP = struct.Struct(">QQ")
REPORT_EVERY_NS = 100000000


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_LIBC = ctypes.CDLL("libc.so.6", use_errno=True)


def monotonic_ns():
    ts = _Timespec()
    _LIBC.clock_gettime(1, ctypes.byref(ts))  # CLOCK_MONOTONIC
    return ts.tv_sec * 1000000000 + ts.tv_nsec


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def parse(argv):
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["producer", "consumer"])
    p.add_argument("--url", required=True)
    p.add_argument("--address", default="bench")
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--settle", default="at-least-once")
    p.add_argument("--credit", type=int, default=1000)
    p.add_argument("--durable", action="store_true")
    p.add_argument("--timeout", type=float, default=120.0)
    return p.parse_args(argv)


def address(ns):
    durable = "true" if ns.durable else "false"
    link = ", link: {reliability: unreliable}" if ns.settle == "at-most-once" else ""
    return "%s; {create: always, node: {type: queue, durable: %s}%s}" % (ns.address, durable, link)


def connect(ns):
    hostport = ns.url.split("://", 1)[-1].split("@")[-1]
    conn = Connection(hostport, sasl_mechanisms="ANONYMOUS")
    conn.open()
    return conn, conn.session()


def produce(ns):
    conn, ssn = connect(ns)
    snd = ssn.sender(address(ns))
    snd.capacity = ns.credit
    pad = b"\x00" * (ns.size - STAMP.size)
    say("ready")
    while True:  # (readline: 2.7's "for line in sys.stdin" reads ahead, waiting for more)
        line = sys.stdin.readline()
        if not line:
            conn.close()
            return
        if line.strip() == "go":
            break
    cpu0 = time.clock()
    first = monotonic_ns()
    deadline = first + int(ns.timeout * 1e9)
    last_report = 0
    durable = ns.durable
    for seq in range(ns.count):
        now = monotonic_ns()
        if now > deadline:
            say("error timed out after %d messages" % seq)
            return
        snd.send(Message(content=STAMP.pack(now, seq) + pad, durable=durable), sync=False)
        if now - last_report > REPORT_EVERY_NS:
            last_report = now
            say("n %d" % seq)
    ssn.sync()
    last = monotonic_ns()
    say(
        "done "
        + json.dumps(
            {"count": ns.count, "first_ns": first, "last_ns": last, "cpu_s": time.clock() - cpu0}
        )
    )
    conn.close()


def consume(ns):
    conn, ssn = connect(ns)
    rcv = ssn.receiver(address(ns))
    rcv.capacity = ns.credit
    ack = ns.settle != "at-most-once"
    lat = []
    first = last = report = 0
    cpu0 = time.clock()
    say("ready")
    deadline = time.time() + ns.timeout
    while len(lat) < ns.count:
        if time.time() > deadline:
            say("error timed out after %d messages" % len(lat))
            return
        try:
            msg = rcv.fetch(timeout=0.5)
        except Empty:
            continue
        now = monotonic_ns()
        body = msg.content
        if not isinstance(body, bytes):
            body = body.encode("latin-1")
        lat.append((now - STAMP.unpack_from(body)[0]) // 1000)
        if not first:
            first = now
        last = now
        if ack:
            ssn.acknowledge(msg, sync=False)
        if now - report > REPORT_EVERY_NS:
            report = now
            say("n %d" % len(lat))
    if ack:
        ssn.sync()
    say("done " + json.dumps({"count": len(lat), "first_ns": first, "last_ns": last,
                              "cpu_s": time.clock() - cpu0, "lat_us": lat}))  # fmt: skip
    conn.close()


def main(argv):
    ns = parse(argv)
    try:
        (produce if ns.role == "producer" else consume)(ns)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        say("error %s: %s" % (type(exc).__name__, exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
