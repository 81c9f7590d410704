"""What one waiting blocking ``send()`` costs, counted: loop turns, CPU, bytecodes.

Against a running broker (``URL``), after 200 warm-up sends, one sender at least once:

- ``time`` (the default): msg/s and this process's CPU per send (user and system
  apart) and asyncio loop turns per send (``_run_once`` wrapped with a counter);
- ``ops``: Python bytecodes and calls per send (``sys.settrace`` counting ``opcode``
  events; the keeper thread held off, since tracing makes a call slow enough for it
  to take the loop); ``--by-function K`` lists the K functions that run the most;
- ``recv``: the same for ``receive()`` + ``accept()`` one by one.

Run it from a tree's root to count that tree (``sys.path`` starts there), e.g. before
and after a change, with ``strace -f -c`` around it for the system calls:

    .venv/bin/python bench/profiles/sync_send_counts.py amqp://127.0.0.1:5672 --count 3000
    .venv/bin/python bench/profiles/sync_send_counts.py amqp://127.0.0.1:5672 --mode ops --count 500
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import math
import os
import resource
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

sys.path.insert(0, os.getcwd())

import amqp10
import amqp10.sync
from amqp10.client import SettleMode
from amqp10.message import Message

BODY = b"x" * 100


def short(path: str) -> str:
    """A code object's file named from its package (``amqp10/io/direct.py``, ``asyncio/events.py``)."""
    parts = path.split("/")
    return "/".join(parts[-3:] if "amqp10" in parts[-3:-1] else parts[-2:])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url")
    p.add_argument("--count", type=int, default=3000)
    p.add_argument("--mode", choices=("time", "ops", "recv"), default="time")
    p.add_argument("--by-function", type=int, default=0, metavar="K")
    ns = p.parse_args()
    n = ns.count
    turns = [0]
    run_once = asyncio.base_events.BaseEventLoop._run_once  # type: ignore[attr-defined]

    def counted(self: Any) -> None:
        turns[0] += 1
        run_once(self)

    asyncio.base_events.BaseEventLoop._run_once = counted  # type: ignore[attr-defined]
    with amqp10.sync.connect(ns.url) as conn:
        loop = conn._loop
        step: Callable[[], object]
        if ns.mode == "recv":
            sender = conn.open_sender("counts34r", settle_mode=SettleMode.AT_LEAST_ONCE)
            for _ in range(n + 200):
                sender.send(Message(body=BODY), wait=False)
            sender.flush()
            receiver = conn.open_receiver("counts34r")

            def step() -> None:
                receiver.receive().accept()

        else:
            sender = conn.open_sender("counts34", settle_mode=SettleMode.AT_LEAST_ONCE)

            def step() -> None:
                sender.send(Message(body=BODY))

        for _ in range(200):
            step()
        if ns.mode == "time":
            t0 = turns[0]
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            w0 = time.perf_counter()
            for _ in range(n):
                step()
            wall = time.perf_counter() - w0
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            user = (r1.ru_utime - r0.ru_utime) / n * 1e6
            system = (r1.ru_stime - r0.ru_stime) / n * 1e6
            print(
                f"{amqp10.__file__}: {n / wall:,.0f} msg/s, CPU {user + system:.1f} µs/send "
                f"(user {user:.1f}, system {system:.1f}), loop turns {(turns[0] - t0) / n:.3f} per send"
            )
            return 0
        loop.grace = math.inf  # the keeper stays off while tracing slows the calls
        ops = collections.Counter[tuple[str, str]]()
        calls = collections.Counter[tuple[str, str]]()

        def tracer(frame: FrameType, event: str, arg: object) -> Any:
            key = (short(frame.f_code.co_filename), frame.f_code.co_name)
            if event == "call":
                calls[key] += 1
                frame.f_trace_opcodes = True
            elif event == "opcode":
                ops[key] += 1
            return tracer

        sys.settrace(tracer)
        try:
            for _ in range(n):
                step()
        finally:
            sys.settrace(None)
        print(
            f"{amqp10.__file__} {ns.mode}: {sum(ops.values()) / n:,.0f} bytecodes, "
            f"{sum(calls.values()) / n:.1f} calls per message"
        )
        for (file, name), k in ops.most_common(ns.by_function):
            print(f"{k / n:8.1f} bytecodes {calls[(file, name)] / n:5.2f} calls  {file}:{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
