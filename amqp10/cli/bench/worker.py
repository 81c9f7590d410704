"""A bench worker on the amqp10 client: ``python -m amqp10.cli.bench.worker producer|consumer ...``.

The harness (:mod:`amqp10.cli.bench.harness`) starts one process per producer
and consumer and talks to it with the line protocol described there.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence

from .harness import MIN_SIZE, STAMP, BenchError, worker_parser

__all__ = ["main", "payload_for"]

PROGRESS_EVERY = 0.1  # seconds between a worker's progress lines


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _stdin_words(wanted: str) -> Callable[[], bool]:
    """Block until ``wanted`` (or EOF) comes on stdin; True if it was ``wanted``."""

    def wait() -> bool:
        return any(line.strip() == wanted for line in sys.stdin)

    return wait


def payload_for(seq: int, pad: bytes) -> bytes:
    """A message body: send time (ns), sequence number, padding."""
    return STAMP.pack(time.monotonic_ns(), seq) + pad


async def _producer(ns: argparse.Namespace) -> None:
    import anyio
    import anyio.to_thread

    from ...client import SettleMode, connect
    from ...message import Message
    from ...types import Accepted

    mode = SettleMode.AT_MOST_ONCE if ns.settle == "at-most-once" else SettleMode.AT_LEAST_ONCE
    presettled = mode is SettleMode.AT_MOST_ONCE
    pad = b"\x00" * (ns.size - MIN_SIZE)
    count = ns.count
    sent = 0
    async with await connect(ns.url, timeout=min(ns.timeout, 30.0)) as conn:
        sender = await conn.open_sender(ns.address, settle_mode=mode)
        _say("ready")
        if not await anyio.to_thread.run_sync(_stdin_words("go")):
            return
        durable = True if ns.durable else None
        window = max(1, min(ns.credit, count))

        async def produce() -> None:
            # one task keeps up to ``window`` messages in flight (Sender.pipeline)
            nonlocal sent
            messages = (
                Message([payload_for(i, pad)], body_type="data", durable=durable)
                for i in range(count)
            )
            async with contextlib.aclosing(
                sender.pipeline(messages, window=window, timeout=math.inf)
            ) as outcomes:
                async for outcome in outcomes:
                    if not presettled and not isinstance(outcome, Accepted):
                        raise BenchError(f"message {sent} was not accepted: {outcome!r}")
                    sent += 1

        async def report() -> None:
            while True:
                await anyio.sleep(PROGRESS_EVERY)
                _say(f"n {sent}")

        first_ns = time.monotonic_ns()
        cpu0 = time.process_time()
        with anyio.fail_after(ns.timeout):
            async with anyio.create_task_group() as tg:
                tg.start_soon(report)
                await produce()
                tg.cancel_scope.cancel()
        last_ns = time.monotonic_ns()
        _say(
            "done "
            + json.dumps(
                {
                    "count": sent,
                    "first_ns": first_ns,
                    "last_ns": last_ns,
                    "cpu_s": time.process_time() - cpu0,
                }
            )
        )
        await sender.close()


async def _consumer(ns: argparse.Namespace) -> None:
    from array import array

    import anyio
    import anyio.to_thread

    from ...client import SettleMode, connect

    mode = SettleMode.AT_MOST_ONCE if ns.settle == "at-most-once" else SettleMode.AT_LEAST_ONCE
    expected = None if ns.until_stopped else ns.count
    lat = array("q")
    received = 0
    first_ns = last_ns = 0
    unpack = STAMP.unpack_from
    async with await connect(
        ns.url, timeout=min(ns.timeout, 30.0), max_buffered=max(ns.credit, 1000)
    ) as conn:
        # auto_accept: each delivery is accepted as it is taken, without a scheduling
        # point per message, so the accepts of a burst go out as one disposition range
        receiver = await conn.open_receiver(
            ns.address, credit=ns.credit, settle_mode=mode, auto_accept=True
        )
        _say("ready")

        async def take(scope: anyio.CancelScope) -> None:
            nonlocal received, first_ns, last_ns
            from ...message import Message

            rate = ns.rate
            async for d in receiver:
                now = time.monotonic_ns()
                if rate and received:  # a slow consumer: pace to ``rate`` messages/s
                    due = first_ns + int(received / rate * 1e9)
                    if due > now:
                        await anyio.sleep((due - now) / 1e9)
                body = Message.decode(d.payload).body
                stamp = unpack(body[0])[0]
                lat.append((now - stamp) // 1000)
                if not received:
                    first_ns = now
                last_ns = now
                received += 1
                if expected is not None and received >= expected:
                    break
            scope.cancel()

        async def report() -> None:
            while True:
                await anyio.sleep(PROGRESS_EVERY)
                _say(f"n {received}")

        async def stopped(scope: anyio.CancelScope) -> None:
            await anyio.to_thread.run_sync(_stdin_words("stop"), abandon_on_cancel=True)
            scope.cancel()

        cpu0 = time.process_time()
        with anyio.fail_after(ns.timeout):
            async with anyio.create_task_group() as tg:
                tg.start_soon(take, tg.cancel_scope)
                tg.start_soon(report)
                tg.start_soon(stopped, tg.cancel_scope)
        _say(
            "done "
            + json.dumps(
                {
                    "count": received,
                    "first_ns": first_ns,
                    "last_ns": last_ns,
                    "cpu_s": time.process_time() - cpu0,
                    "lat_us": lat.tolist(),
                }
            )
        )
        with contextlib.suppress(Exception):
            await receiver.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one worker with the harness's command line ``argv``; the exit code."""
    p = worker_parser("python -m amqp10.cli.bench.worker", "an amqp10 bench worker")
    p.add_argument(
        "--until-stopped", action="store_true", help="consumer: run until 'stop' on stdin"
    )
    p.add_argument("--rate", type=float, default=0.0, help="consumer: at most this many messages/s")
    ns = p.parse_args(argv)
    import anyio

    backend_options: dict[str, object] = {}
    if importlib.util.find_spec("uvloop") is not None:
        backend_options["use_uvloop"] = True
    fn = _producer if ns.role == "producer" else _consumer
    profile_dir = os.environ.get("AMQP10_BENCH_PROFILE")  # for bench/profiles: cProfile the worker
    prof = None
    if profile_dir:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    try:
        anyio.run(fn, ns, backend_options=backend_options)
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:  # one line for the harness, whatever it was
        exc = _unwrap(exc)
        _say(f"error {type(exc).__name__}: {exc}".replace("\n", " "))
        return 1
    finally:
        if prof is not None:
            prof.disable()
            prof.dump_stats(os.path.join(profile_dir or ".", f"{ns.role}-{os.getpid()}.prof"))
    return 0


def _unwrap(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


if __name__ == "__main__":
    sys.exit(main())
