"""What the broker's turn for a lone message costs, counted: bytecodes and calls in the broker.

The broker's side of a waiting send's round trip (issue 34): one transfer in, its
disposition out, nothing else ready. Starts ``amqp10 broker`` (one process, a
temporary store) with a tracer that counts the ``opcode`` events of its main thread
between two signals (``SIGUSR1`` starts counting, ``SIGUSR2`` writes the counts), and
makes ``--count`` waiting blocking ``send()`` calls against it, one at a time, after
200 warm-up sends: every broker turn counted serves exactly one message. ``--by-function
K`` lists the K functions that run the most. Run it from a tree's root to count that
tree (the broker runs from it):

    .venv/bin/python bench/profiles/broker_turn_counts.py --count 500 --by-function 40
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())

import amqp10.sync
from amqp10.cli.bench.harness import BrokerProcess
from amqp10.client import SettleMode
from amqp10.message import Message

BODY = b"x" * 100

_RUNNER = """
import collections, json, os, signal, sys
from amqp10.cli import main

ops = collections.Counter()
calls = collections.Counter()

def short(code):
    parts = code.co_filename.split("/")
    where = "/".join(parts[-3:] if "amqp10" in parts[-3:-1] else parts[-2:])
    return f"{where}:{code.co_name}"

def tracer(frame, event, arg):
    if event == "call":
        frame.f_trace_opcodes = True
        calls[short(frame.f_code)] += 1
    elif event == "opcode":
        ops[short(frame.f_code)] += 1
    return tracer

def start(signum, frame):
    ops.clear()
    calls.clear()
    sys.settrace(tracer)

def stop(signum, frame):
    sys.settrace(None)
    with open(sys.argv[1], "w") as out:
        json.dump({"ops": ops, "calls": calls}, out)

signal.signal(signal.SIGUSR1, start)
signal.signal(signal.SIGUSR2, stop)
main(sys.argv[2:])
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=500)
    p.add_argument("--by-function", type=int, default=0, metavar="K")
    ns = p.parse_args()
    n = ns.count
    with tempfile.TemporaryDirectory(prefix="broker-turn-") as tmp:
        dump = Path(tmp) / "counts.json"
        argv = [sys.executable, "-c", _RUNNER, str(dump), "broker", "--port", "0", "--no-http"]
        broker = BrokerProcess([*argv, "--data-dir", tmp], name="amqp10 broker")
        try:
            url = f"amqp://127.0.0.1:{broker.wait_listening(30.0)}"
            with amqp10.sync.connect(url) as conn:
                sender = conn.open_sender("counts34t", settle_mode=SettleMode.AT_LEAST_ONCE)
                for _ in range(200):
                    sender.send(Message(body=BODY))
                time.sleep(0.2)  # (the broker's turns after the warm-up are over)
                os.kill(broker.pid, signal.SIGUSR1)
                time.sleep(0.2)
                for _ in range(n):
                    sender.send(Message(body=BODY))
                time.sleep(0.2)
                os.kill(broker.pid, signal.SIGUSR2)
                for _ in range(100):  # (bounded: 10 s)
                    if dump.exists() and dump.stat().st_size:
                        break
                    time.sleep(0.1)
            counts = json.loads(dump.read_text())
        finally:
            broker.stop()
    ops, calls = counts["ops"], counts["calls"]
    print(
        f"{os.getcwd()}: the broker's turn for a lone message: "
        f"{sum(ops.values()) / n:,.0f} bytecodes, {sum(calls.values()) / n:.1f} calls per message"
    )
    for name, k in sorted(ops.items(), key=lambda kv: -kv[1])[: ns.by_function]:
        print(f"{k / n:8.1f} bytecodes  {calls.get(name, 0) / n:5.2f} calls  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
