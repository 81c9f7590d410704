"""The blocking API against the async one and against Proton's ``BlockingConnection``.

Starts our broker (default configuration: its SQLite store under a temporary
data directory) and runs, in this one process, side by side and alternating
round by round, on 100-byte messages, at least once:

- send: async ``sender.pipeline(window=W)`` (it fills a queue for each async
  receive case); blocking ``sender.pipeline(window=W)``; Proton's
  ``BlockingSender.send`` one by one (it waits for each outcome); the blocking
  ``send()`` and the async ``await send()`` one by one (each waits for its
  outcome too); the blocking ``send(wait=False)`` one by one and a ``flush()``
  at the end (each outcome checked at a later call);
- receive and accept: async ``async for d in receiver: await d.accept()``, and
  async ``await receiver.fetch(W)`` + ``await receiver.accept_all(batch)``;
  blocking ``receiver.fetch(W)`` + ``receiver.accept_all(batch)``; Proton's
  ``BlockingReceiver.receive`` + ``accept`` one by one; the blocking
  ``receive()`` + ``accept()`` one by one, and ``for d in receiver: d.accept()``.

Each receive case drains the queue its send case filled in that round. A rate
is messages / (first call → last outcome, or last accept; the blocking
per-message receive cases end with ``receiver.flush()``, so their queued
accepts are counted). Prints a table of medians and the targets of issues 21
and 34; ``--results`` appends it to RESULTS.md. ``--broker-config FILE`` starts
the broker with that configuration (e.g. ``[default_policy] durable = true``:
every message stored, which the default does not do for these non-durable
messages); ``--broker-tree DIR`` runs the broker from another tree, the clients
from this one (a compiled build's broker beside pure clients: both clients pay
the same broker's turn in every round trip).

    .venv/bin/python bench/sync_bench.py --count 20000 --rounds 3
    .venv/bin/python bench/sync_bench.py --count 2000 --rounds 1      # a smoke run
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
from proton import Message as ProtonMessage  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

import amqp10  # noqa: E402
import amqp10.sync  # noqa: E402
from amqp10.cli.bench.harness import BrokerProcess  # noqa: E402
from amqp10.client import SettleMode  # noqa: E402
from amqp10.message import Message  # noqa: E402
from amqp10.types import Accepted  # noqa: E402

SIZE = 100
BODY = b"x" * SIZE
WAIT = 60.0  # seconds any single wait may take


@dataclass(frozen=True)
class Timing:
    wall: float  # seconds
    cpu: float  # CPU seconds of this process (every thread: the event loop's, Proton's C)


class Clock:
    """Started when made; :meth:`stop` gives the wall and CPU time since."""

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def stop(self) -> Timing:
        return Timing(time.perf_counter() - self.wall, time.process_time() - self.cpu)


Case = Callable[[str, str, int, int], Timing]
"""``(url, queue, count, window) -> Timing`` of the timed part (not connecting)."""


def our_messages(n: int) -> Iterator[Message]:
    for _ in range(n):
        yield Message(body=BODY)


# -- send ---------------------------------------------------------------------------------
def async_pipeline(url: str, queue: str, n: int, window: int) -> Timing:
    async def run() -> Timing:
        async with await amqp10.connect(url, timeout=WAIT) as conn:
            sender = await conn.open_sender(queue, settle_mode=SettleMode.AT_LEAST_ONCE)
            clock = Clock()
            accepted = 0
            async for outcome in sender.pipeline(our_messages(n), window=window):
                accepted += isinstance(outcome, Accepted)
            elapsed = clock.stop()
        _check(accepted, n, "accepted")
        return elapsed

    return anyio.run(run, backend="asyncio")


def async_send(url: str, queue: str, n: int, window: int) -> Timing:
    async def run() -> Timing:
        async with await amqp10.connect(url, timeout=WAIT) as conn:
            sender = await conn.open_sender(queue, settle_mode=SettleMode.AT_LEAST_ONCE)
            clock = Clock()
            accepted = 0
            for message in our_messages(n):
                accepted += isinstance(await sender.send(message), Accepted)
            elapsed = clock.stop()
        _check(accepted, n, "accepted")
        return elapsed

    return anyio.run(run, backend="asyncio")


def sync_pipeline(url: str, queue: str, n: int, window: int) -> Timing:
    with amqp10.sync.connect(url, timeout=WAIT) as conn:
        sender = conn.open_sender(queue, settle_mode=SettleMode.AT_LEAST_ONCE)
        clock = Clock()
        accepted = 0
        for outcome in sender.pipeline(our_messages(n), window=window):
            accepted += isinstance(outcome, Accepted)
        elapsed = clock.stop()
    _check(accepted, n, "accepted")
    return elapsed


def sync_send(url: str, queue: str, n: int, window: int) -> Timing:
    with amqp10.sync.connect(url, timeout=WAIT) as conn:
        sender = conn.open_sender(queue, settle_mode=SettleMode.AT_LEAST_ONCE)
        clock = Clock()
        accepted = 0
        for message in our_messages(n):
            accepted += isinstance(sender.send(message), Accepted)
        elapsed = clock.stop()
    _check(accepted, n, "accepted")
    return elapsed


def sync_send_deferred(url: str, queue: str, n: int, window: int) -> Timing:
    with amqp10.sync.connect(url, timeout=WAIT) as conn:
        sender = conn.open_sender(queue, settle_mode=SettleMode.AT_LEAST_ONCE)
        clock = Clock()
        for message in our_messages(n):
            sender.send(message, wait=False)
        sender.flush()  # raises unless every one was accepted
        elapsed = clock.stop()
    return elapsed


def proton_send(url: str, queue: str, n: int, window: int) -> Timing:
    conn = BlockingConnection(url, timeout=WAIT)
    try:
        sender = conn.create_sender(queue)
        clock = Clock()
        for _ in range(n):
            sender.send(ProtonMessage(body=BODY))  # waits until the broker settles it
        elapsed = clock.stop()
    finally:
        conn.close()
    return elapsed


# -- receive and accept --------------------------------------------------------------------
def _async_receiving(consume: Callable[[Any, int, int], Awaitable[None]]) -> Case:
    """A receive case on the async client: ``consume(receiver, n, window)`` takes and accepts n."""

    def case(url: str, queue: str, n: int, window: int) -> Timing:
        async def run() -> Timing:
            async with await amqp10.connect(url, timeout=WAIT) as conn:
                receiver = await conn.open_receiver(
                    queue, credit=window, settle_mode=SettleMode.AT_LEAST_ONCE
                )
                clock = Clock()
                await consume(receiver, n, window)
                return clock.stop()

        return anyio.run(run, backend="asyncio")

    return case


async def _one_by_one(receiver: Any, n: int, window: int) -> None:
    got = 0
    async for d in receiver:
        await d.accept()
        got += 1
        if got == n:
            return


async def _in_batches(receiver: Any, n: int, window: int) -> None:
    got = 0
    while got < n:
        batch = await receiver.fetch(min(window, n - got))
        if not batch:
            raise SystemExit(f"nothing received for {WAIT:g}s after {got}")
        await receiver.accept_all(batch)
        got += len(batch)


async_receive = _async_receiving(_one_by_one)
async_fetch = _async_receiving(_in_batches)


def sync_fetch(url: str, queue: str, n: int, window: int) -> Timing:
    with amqp10.sync.connect(url, timeout=WAIT) as conn:
        receiver = conn.open_receiver(queue, credit=window, settle_mode=SettleMode.AT_LEAST_ONCE)
        clock = Clock()
        got = 0
        while got < n:
            batch = receiver.fetch(min(window, n - got))
            if not batch:
                raise SystemExit(f"{queue}: nothing received for {WAIT:g}s after {got}")
            receiver.accept_all(batch)
            got += len(batch)
        elapsed = clock.stop()
    return elapsed


def sync_receive(url: str, queue: str, n: int, window: int) -> Timing:
    with amqp10.sync.connect(url, timeout=WAIT) as conn:
        receiver = conn.open_receiver(queue, credit=window, settle_mode=SettleMode.AT_LEAST_ONCE)
        clock = Clock()
        for _ in range(n):
            receiver.receive().accept()
        _flushed(receiver)
        elapsed = clock.stop()
    return elapsed


def sync_iterate(url: str, queue: str, n: int, window: int) -> Timing:
    with amqp10.sync.connect(url, timeout=WAIT) as conn:
        receiver = conn.open_receiver(queue, credit=window, settle_mode=SettleMode.AT_LEAST_ONCE)
        clock = Clock()
        for got, d in enumerate(receiver, 1):
            d.accept()
            if got == n:
                break
        _flushed(receiver)
        elapsed = clock.stop()
    return elapsed


def _flushed(receiver: Any) -> None:
    """Wait for the queued accepts to be applied (a facade without ``flush`` has none queued)."""
    flush = getattr(receiver, "flush", None)
    if flush is not None:
        flush()


def proton_receive(url: str, queue: str, n: int, window: int) -> Timing:
    conn = BlockingConnection(url, timeout=WAIT)
    try:
        receiver = conn.create_receiver(queue, credit=window)
        clock = Clock()
        for _ in range(n):
            receiver.receive(timeout=WAIT)
            receiver.accept()
        elapsed = clock.stop()
    finally:
        conn.close()
    return elapsed


def _check(got: int, n: int, what: str) -> None:
    if got != n:
        raise SystemExit(f"only {got} of {n} {what}")


# (key, label, send case, receive case); the receive drains what the send filled
PAIRS: list[tuple[str, str, Case, Case]] = [
    ("async", "amqp10 async", async_pipeline, async_receive),
    ("asyncb", "amqp10 async, batches", async_pipeline, async_fetch),
    ("sync", "amqp10.sync (fast path)", sync_pipeline, sync_fetch),
    ("proton", "Proton BlockingConnection", proton_send, proton_receive),
    ("sync1", "amqp10.sync one by one", sync_send, sync_receive),
    ("synci", "amqp10.sync iteration", sync_pipeline, sync_iterate),
    ("async1", "amqp10 async one by one", async_send, async_fetch),
    ("sync1d", "amqp10.sync one by one, outcome later", sync_send_deferred, sync_receive),
]
SLOW = ("proton", "sync1", "async1")  # one by one sends: --slow-count messages
HOW = {
    "async": ("`pipeline(window=W)`", "`async for` + `await d.accept()`"),
    "asyncb": ("`pipeline(window=W)`", "`await fetch(W)` + `await accept_all(batch)`"),
    "sync": ("`pipeline(window=W)`", "`fetch(W)` + `accept_all(batch)`"),
    "proton": ("`send()` one by one", "`receive()` + `accept()` one by one"),
    "sync1": ("`send()` one by one", "`receive()` + `accept()` one by one"),
    "synci": ("`pipeline(window=W)`", "`for d in receiver: d.accept()`"),
    "async1": ("`await send()` one by one", "`await fetch(W)` + `await accept_all(batch)`"),
    "sync1d": ("`send(wait=False)` one by one, `flush()`", "`receive()` + `accept()` one by one"),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--count", type=int, default=20_000, help="messages per case and round")
    p.add_argument(
        "--slow-count",
        type=int,
        default=None,
        help="messages for the one-by-one cases (default: --count)",
    )
    p.add_argument("--rounds", type=int, default=3, help="rounds, the case order rotating")
    p.add_argument("--window", type=int, default=1000, help="pipeline window and receiver credit")
    p.add_argument("--skip", action="append", default=[], help="skip a case pair: sync1, ...")
    p.add_argument("--results", type=Path, default=None, help="append the section to this file")
    p.add_argument(
        "--broker-config", type=Path, default=None, help="the broker's TOML configuration file"
    )
    p.add_argument(
        "--broker-tree",
        type=Path,
        default=None,
        help="run the broker from this tree (its PYTHONPATH: a compiled build, say); the clients run from this one",
    )
    ns = p.parse_args(argv)
    slow = ns.slow_count or ns.count
    pairs = [pair for pair in PAIRS if pair[0] not in ns.skip]
    load = os.getloadavg()[0]
    rates: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}  # client CPU µs per message
    with tempfile.TemporaryDirectory(prefix="sync-bench-") as data:
        argv_broker = [sys.executable, "-m", "amqp10.cli", "broker", "--port", "0"]
        if ns.broker_config is not None:
            argv_broker += ["--config", str(ns.broker_config)]
        env = cwd = None
        if ns.broker_tree is not None:  # (``-m`` puts the working directory first on sys.path)
            cwd = str(ns.broker_tree.resolve())
            env = {**os.environ, "PYTHONPATH": cwd}
        broker = BrokerProcess(
            [*argv_broker, "--data-dir", data], name="amqp10 broker", env=env, cwd=cwd
        )
        try:
            url = f"amqp://127.0.0.1:{broker.wait_listening(30.0)}"
            for r in range(ns.rounds):
                order = pairs[r % len(pairs) :] + pairs[: r % len(pairs)]
                for phase in ("send", "receive"):
                    for key, _, send, receive in order:
                        n = slow if key in SLOW else ns.count
                        case = send if phase == "send" else receive
                        timing = case(url, f"sync-bench-{r}-{key}", n, ns.window)
                        rate = n / timing.wall
                        per_msg = timing.cpu * 1e6 / n
                        rates.setdefault((key, phase), []).append(rate)
                        cpu.setdefault((key, phase), []).append(per_msg)
                        print(
                            f"round {r + 1} {phase:7} {key:7} {rate:10,.0f} msg/s "
                            f"{per_msg:6.1f} µs CPU/msg",
                            flush=True,
                        )
        finally:
            broker.stop()
    section = report(ns, argv, pairs, rates, cpu, load, slow)
    print(section)
    if ns.results is not None:
        with ns.results.open("a") as f:
            f.write("\n" + section)
    return 0


def broker_setup(config: Path | None) -> str:
    """The broker's configuration, for the section's workload line."""
    if config is None:
        return "its default configuration (its SQLite store, which keeps durable messages only)"
    settings = "; ".join(line.strip() for line in config.read_text().splitlines() if line.strip())
    return f"the configuration `{settings}`"


def report(
    ns: argparse.Namespace,
    argv: list[str] | None,
    pairs: list[tuple[str, str, Case, Case]],
    rates: dict[tuple[str, str], list[float]],
    cpu: dict[tuple[str, str], list[float]],
    load: float,
    slow: int,
) -> str:
    def med(key: str, phase: str) -> float:
        return statistics.median(rates[(key, phase)])

    command = shlex.join([".venv/bin/python", "bench/sync_bench.py", *(argv or sys.argv[1:])])
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "## The blocking API (bench/sync_bench.py)",
        "",
        f"Measured {now} on this machine: {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, python-qpid-proton {version('python-qpid-proton')}, "
        f"load average before the run {load:.1f} (shared machine).",
        "",
        f"Workload: our broker with {broker_setup(ns.broker_config)}"
        f"{'' if ns.broker_tree is None else f', run from {ns.broker_tree} (the clients from this tree)'}"
        f", loopback, {SIZE}-byte "
        "messages (not durable), at least "
        f"once; {ns.count:,} messages per case ({slow:,} for the one-by-one cases), window and "
        f"credit {ns.window}; {ns.rounds} round(s), the case order rotating, median shown "
        "(rounds in brackets).",
        "",
        "Command:",
        "",
        f"    {command}",
        "",
        "| client | send | msg/s | CPU µs/msg | receive + accept | msg/s | CPU µs/msg |",
        "|---|---|---:|---:|---|---:|---:|",
    ]
    for key, label, _, _ in pairs:
        how_send, how_recv = HOW[key]
        cells = []
        for phase in ("send", "receive"):
            rounds = ", ".join(f"{v:,.0f}" for v in rates[(key, phase)])
            cells.append(
                f"{med(key, phase):,.0f} ({rounds}) | {statistics.median(cpu[(key, phase)]):.1f}"
            )
        lines.append(f"| {label} | {how_send} | {cells[0]} | {how_recv} | {cells[1]} |")

    def target(name: str, a: str, b: str, phase: str, factor: float) -> None:
        if (a, phase) not in rates or (b, phase) not in rates:
            lines.append(f"- {name} ≥ {factor:g}x: not measured (a case was skipped)")
            return
        ratio = med(a, phase) / med(b, phase)
        per_round = [x / y for x, y in zip(rates[(a, phase)], rates[(b, phase)], strict=True)]
        met = sum(1 for v in per_round if v >= factor)
        lines.append(
            f"- {name} ≥ {factor:g}x: {ratio:.2f}x (medians) — "
            f"{'met' if ratio >= factor else 'NOT met'}; round by round "
            f"{', '.join(f'{v:.2f}x' for v in per_round)} (met in {met} of {len(per_round)})"
        )

    lines += [
        "",
        "CPU µs/msg is this process's CPU time (every thread, Proton's C included) per",
        "message, median of the rounds: steadier than msg/s on a shared machine. The",
        "broker's CPU is not in it.",
        "",
        "Targets (issue 21):",
        "",
    ]
    target("blocking pipeline vs async pipeline", "sync", "async", "send", 0.8)
    target("blocking receive-and-accept vs async (per message)", "sync", "async", "receive", 0.8)
    target("blocking receive-and-accept vs async (batches)", "sync", "asyncb", "receive", 0.8)
    target("blocking send vs Proton BlockingConnection", "sync", "proton", "send", 3.0)
    target("blocking receive vs Proton BlockingConnection", "sync", "proton", "receive", 3.0)
    lines += ["", "Targets (issue 34, message by message):", ""]
    target("per message: blocking `send()` vs Proton `send()`", "sync1", "proton", "send", 3.0)
    target("per message: blocking `receive()` + `accept()` vs Proton", "sync1", "proton",
           "receive", 3.0)  # fmt: skip
    target("per message: `for d in receiver: d.accept()` vs async `async for`", "synci", "async",
           "receive", 0.8)  # fmt: skip
    target("per message: blocking `send()` vs blocking `pipeline`", "sync1", "sync", "send", 0.5)
    target("per message, outcome at `flush()`: blocking `send(wait=False)` vs Proton `send()`",
           "sync1d", "proton", "send", 3.0)  # fmt: skip
    target("per message, outcome at `flush()`: blocking `send(wait=False)` vs blocking `pipeline`",
           "sync1d", "sync", "send", 0.5)  # fmt: skip
    target("per message: blocking `receive()` + `accept()` vs `fetch` + `accept_all`", "sync1",
           "sync", "receive", 0.5)  # fmt: skip
    target("per message: `for d in receiver: d.accept()` vs `fetch` + `accept_all`", "synci",
           "sync", "receive", 0.5)  # fmt: skip
    target("per message: async `async for` vs async `fetch` + `accept_all`", "async", "asyncb",
           "receive", 0.5)  # fmt: skip
    lines += ["", "For reference (what bounds a send that waits for its outcome):", ""]
    target("per message: blocking `send()` vs async `await send()`", "sync1", "async1", "send",
           0.8)  # fmt: skip
    lines += ["", "Client CPU per message, blocking fast path / async (lower is cheaper):", ""]
    for phase, b in (("send", "async"), ("receive", "asyncb")):
        if ("sync", phase) not in cpu or (b, phase) not in cpu:
            lines.append(f"- {phase}: not measured (a case was skipped)")
            continue
        ratio = statistics.median(cpu[("sync", phase)]) / statistics.median(cpu[(b, phase)])
        lines.append(f"- {phase}: {ratio:.2f}x the CPU of `{b}`")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
