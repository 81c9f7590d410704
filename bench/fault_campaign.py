"""Fault campaign: SIGKILL the broker at random moments while producers publish durable
messages and consumers hold unsettled deliveries; then count what was lost or repeated.

Each round starts the broker on the same store, runs ``--producers`` publishers (each
keeping a window of unsettled sends; a message counts as *confirmed* once its outcome
is accepted) and ``--consumers`` consumers. A consumer accepts most deliveries and holds
every few unsettled; after a batch of accepts it publishes a durable marker on the
same connection and awaits its outcome: the broker handles a connection's frames in
order and commits in order, so once the marker is accepted the deletions of the batch
before it are committed, and that batch counts as *settled*. The broker is killed
(SIGKILL) after a random time; what the consumers held unsettled at that moment must
come back. After the last kill a final broker drains every queue.

Tallies (all must be 0 for a pass, the exit status says which):

- ``lost``: confirmed messages never received at all;
- ``settled_redelivered``: settled messages delivered again after their settlement;
- ``unsettled_not_redelivered``: messages held unsettled at a kill not delivered again.

    .venv/bin/python bench/fault_campaign.py --kills 20
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import anyio

import amqp10
from amqp10.cli.bench.harness import BrokerProcess
from amqp10.client import SettleMode
from amqp10.message import Message
from amqp10.types import Accepted

QUEUE = "campaign"
MARKS = "campaign-marks"


@dataclass
class Ledger:
    """What the clients know, across every round."""

    confirmed: set[int] = field(default_factory=set)
    settled: set[int] = field(default_factory=set)
    accepted_unconfirmed: set[int] = field(default_factory=set)  # in doubt at a kill: either is fine
    received: set[int] = field(default_factory=set)
    held_at_kill: dict[int, int] = field(default_factory=dict)  # id -> round it was held in
    redelivered_after_hold: set[int] = field(default_factory=set)
    settled_redelivered: set[int] = field(default_factory=set)
    deliveries: int = 0
    held_count: int = 0
    round: int = 0

    def delivered(self, mid: int) -> None:
        self.deliveries += 1
        if mid in self.settled:
            self.settled_redelivered.add(mid)
        if mid in self.held_at_kill and self.held_at_kill[mid] < self.round:
            self.redelivered_after_hold.add(mid)
        self.received.add(mid)


def broker_argv(data_dir: str, port: int) -> list[str]:
    return [sys.executable, "-m", "amqp10.cli", "broker", "--port", str(port), "--http-port", "0", "--data-dir", data_dir]


async def produce(port: int, ids: range, ledger: Ledger, window: int) -> None:
    async with await amqp10.connect(f"amqp://127.0.0.1:{port}") as conn:
        snd = await conn.open_sender(QUEUE, settle_mode=SettleMode.AT_LEAST_ONCE, timeout=10)
        inflight: list[tuple[int, Any]] = []
        for mid in ids:
            inflight.append((mid, snd.submit(Message(body=mid, durable=True))))
            if len(inflight) >= window:
                first, tracker = inflight.pop(0)
                if isinstance(await tracker, Accepted):
                    ledger.confirmed.add(first)


async def consume(port: int, ledger: Ledger, held: set[int], rng: random.Random, hold_every: int, batch: int) -> None:
    async with await amqp10.connect(f"amqp://127.0.0.1:{port}") as conn:
        rcv = await conn.open_receiver(QUEUE, credit=100, settle_mode=SettleMode.AT_LEAST_ONCE, timeout=10)
        marks = await conn.open_sender(MARKS, settle_mode=SettleMode.AT_LEAST_ONCE, timeout=10)
        pending: list[int] = []
        async for d in rcv:
            mid = d.message.body
            assert isinstance(mid, int)
            ledger.delivered(mid)
            if rng.randrange(hold_every) == 0:
                held.add(mid)  # kept unsettled: it must come back after the kill
                continue
            pending.append(mid)
            ledger.accepted_unconfirmed.add(mid)
            await d.accept()
            if len(pending) >= batch:
                await marks.send(Message(body=0, durable=True), timeout=10)
                ledger.settled.update(pending)
                ledger.accepted_unconfirmed.difference_update(pending)
                pending = []


async def one_round(
    port: int, proc: BrokerProcess, ledger: Ledger, rng: random.Random, args: argparse.Namespace, next_id: int
) -> None:
    held: set[int] = set()
    async with anyio.create_task_group() as tg:

        async def guarded(fn: object, *a: object) -> None:
            try:
                await fn(*a)  # type: ignore[operator]
            except Exception:
                pass  # the broker died under it: expected

        for p in range(args.producers):
            start = next_id + p * 1_000_000
            tg.start_soon(guarded, produce, port, range(start, start + 1_000_000), ledger, args.window)
        for _ in range(args.consumers):
            tg.start_soon(guarded, consume, port, ledger, held, rng, args.hold_every, args.batch)
        await anyio.sleep(rng.uniform(args.min_up, args.max_up))
        os.kill(proc.pid, signal.SIGKILL)
        await anyio.to_thread.run_sync(proc.proc.wait, 10)
        await anyio.sleep(0.2)
        tg.cancel_scope.cancel()
    for mid in held:
        ledger.held_at_kill.setdefault(mid, ledger.round)
    ledger.held_count += len(held)


async def drain(port: int, ledger: Ledger) -> None:
    async with await amqp10.connect(f"amqp://127.0.0.1:{port}") as conn:
        rcv = await conn.open_receiver(QUEUE, credit=500, settle_mode=SettleMode.AT_LEAST_ONCE, timeout=10)
        while True:
            with anyio.move_on_after(3) as scope:
                d = await rcv.receive()
            if scope.cancelled_caught:
                return
            ledger.delivered(d.message.body)
            await d.accept()


def campaign(args: argparse.Namespace) -> dict[str, object]:
    rng = random.Random(args.seed)
    ledger = Ledger()
    data = tempfile.mkdtemp(prefix="amqp10-campaign-")
    started = time.monotonic()
    try:
        for k in range(args.kills):
            ledger.round = k
            proc = BrokerProcess(broker_argv(data, 0), name="amqp10 broker")
            try:
                port = proc.wait_listening(60)
                anyio.run(one_round, port, proc, ledger, rng, args, k * 10_000_000)
            finally:
                proc.stop()
        ledger.round = args.kills
        proc = BrokerProcess(broker_argv(data, 0), name="amqp10 broker")
        try:
            anyio.run(drain, proc.wait_listening(60), ledger)
        finally:
            proc.stop()
    finally:
        shutil.rmtree(data, ignore_errors=True)
    lost = ledger.confirmed - ledger.received
    not_back = set(ledger.held_at_kill) - ledger.redelivered_after_hold - ledger.settled
    return {
        "kills": args.kills,
        "seconds": round(time.monotonic() - started, 1),
        "confirmed": len(ledger.confirmed),
        "deliveries": ledger.deliveries,
        "settled": len(ledger.settled),
        "held_unsettled_at_kills": ledger.held_count,
        "lost": len(lost),
        "settled_redelivered": len(ledger.settled_redelivered),
        "unsettled_not_redelivered": len(not_back),
        "examples": {
            "lost": sorted(lost)[:5],
            "settled_redelivered": sorted(ledger.settled_redelivered)[:5],
            "unsettled_not_redelivered": sorted(not_back)[:5],
        },
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=20, help="SIGKILLs of the broker (rounds)")
    p.add_argument("--producers", type=int, default=2)
    p.add_argument("--consumers", type=int, default=2)
    p.add_argument("--window", type=int, default=50, help="unsettled sends per producer")
    p.add_argument("--hold-every", type=int, default=10, help="a consumer holds about 1 in N unsettled")
    p.add_argument("--batch", type=int, default=20, help="accepts per marker (settlement confirmed)")
    p.add_argument("--min-up", type=float, default=0.5, help="seconds of traffic before a kill, at least")
    p.add_argument("--max-up", type=float, default=2.5, help="... and at most")
    p.add_argument("--seed", type=int, default=20)
    p.add_argument("--json", action="store_true", help="print the tallies as JSON")
    args = p.parse_args()
    result = campaign(args)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>28}: {v}")
    bad = result["lost"] or result["settled_redelivered"] or result["unsettled_not_redelivered"]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
