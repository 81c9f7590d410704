"""kill -9 while a commit is certainly pending: nothing a reader or consumer saw is erased.

The broker's group commit waits ``COMMIT_MS`` for company. A first batch is
published and awaited (it is committed: readers may see it); a second batch is
then submitted and the broker killed well inside the commit interval, so the
second batch is certainly uncommitted when the broker dies (the test checks
that no publisher had it accepted). A broker that hands readers uncommitted
entries fails here every time; one that is read-committed passes every time.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

import amqp10
from amqp10.client import SettleMode
from amqp10.message import Message
from amqp10.types import Source, symbol

from .test_crash import start

pytestmark = [pytest.mark.slow]

COMMIT_MS = 4000
KILL_AFTER = 0.8  # seconds after the second batch is submitted: far inside COMMIT_MS
OFFSET = symbol("amqp10:stream-offset")

CONFIG = """
[[addresses]]
pattern = "rc-ev"
kind = "stream"

[[addresses]]
pattern = "rc-q"
kind = "queue"
policy = {{ durable = true }}

[store]
commit_interval_ms = {interval}
"""


def config(tmp_path: Path, interval: float) -> Path:
    path = tmp_path / f"broker-{interval}.toml"
    path.write_text(CONFIG.format(interval=interval))
    return path


def stream_source(address: str) -> Source:
    return Source(address=address, filter={OFFSET: "first"}, capabilities=[symbol("stream")])


async def publish_then_kill(port: int, pid: int, address: str, source: Source | None, mode: SettleMode) -> list[tuple[Any, str]]:
    """Publish a committed batch and an uncommitted one, read all the while, SIGKILL the broker.

    Returns what the reader got: (x-opt-offset, message-id) for a stream, (None, id) for a queue.
    """
    seen: list[tuple[Any, str]] = []
    conn = await amqp10.connect(f"amqp://127.0.0.1:{port}")
    rcv = await conn.open_receiver(address, source=source, credit=10_000, settle_mode=mode, timeout=10)
    snd = await conn.open_sender(address, timeout=10)

    async def read() -> None:
        async for d in rcv:
            m = d.message
            seen.append(((m.message_annotations or {}).get("x-opt-offset"), str(m.id)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        committed = [snd.submit(Message(body=i, id=f"a{i}", durable=True)) for i in range(50)]
        with anyio.fail_after(COMMIT_MS / 1000 * 3):
            for t in committed:
                await t
            while len(seen) < len(committed):
                await anyio.sleep(0.05)
        # the consumer's own writes (a queue marks what it delivers in flight) are committed
        # at once, back to back with the batch before: let that finish, so the next
        # submission starts a fresh commit interval
        await anyio.sleep(1.0)
        pending = [snd.submit(Message(body=i, id=f"b{i}", durable=True)) for i in range(200)]
        await anyio.sleep(KILL_AFTER)
        assert not any(t.done for t in pending), "a commit came early: the test did not hold one open"
        os.kill(pid, signal.SIGKILL)
        await anyio.sleep(0.3)
        tg.cancel_scope.cancel()
    with anyio.move_on_after(2):
        await conn.close()
    assert {mid for _, mid in seen} >= {f"a{i}" for i in range(50)}, "the reader missed committed messages"
    return seen


async def read_all(port: int, address: str, source: Source | None, mode: SettleMode) -> list[tuple[Any, str]]:
    out: list[tuple[Any, str]] = []
    async with await amqp10.connect(f"amqp://127.0.0.1:{port}") as conn:
        snd = await conn.open_sender(address, timeout=10)
        await snd.send(Message(body="after", id="after-restart", durable=True), timeout=10)
        rcv = await conn.open_receiver(address, source=source, credit=10_000, settle_mode=mode, timeout=10)
        while True:
            with anyio.move_on_after(1.5) as scope:
                d = await rcv.receive()
            if scope.cancelled_caught:
                return out
            m = d.message
            out.append(((m.message_annotations or {}).get("x-opt-offset"), str(m.id)))


def crash_and_restart(tmp_path: Path, address: str, source: Source | None, mode: SettleMode) -> tuple[list[Any], list[Any]]:
    proc, port = start(tmp_path, extra=["--config", str(config(tmp_path, COMMIT_MS))])
    try:
        seen = anyio.run(publish_then_kill, port, proc.pid, address, source, mode)
    finally:
        proc.kill()
        proc.wait(10)
    proc, port = start(tmp_path, extra=["--config", str(config(tmp_path, 2))])
    try:
        after = anyio.run(read_all, port, address, source, mode)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
    return seen, after


def test_stream_offsets_a_reader_saw_survive_a_crash(tmp_path: Path) -> None:
    seen, after = crash_and_restart(tmp_path, "rc-ev", stream_source("rc-ev"), SettleMode.AT_MOST_ONCE)
    by_offset = dict(after)
    changed = [(off, mid, by_offset.get(off)) for off, mid in seen if by_offset.get(off) != mid]
    assert not changed, f"{len(changed)} offsets the reader saw are gone or hold another message: {changed[:5]}"
    assert by_offset.get(50) == "after-restart", "the next offset is one past the last committed entry"


def test_queue_messages_a_consumer_got_survive_a_crash(tmp_path: Path) -> None:
    seen, after = crash_and_restart(tmp_path, "rc-q", None, SettleMode.AT_LEAST_ONCE)
    kept = {mid for _, mid in after}
    lost = sorted({mid for _, mid in seen} - kept)
    assert not lost, f"{len(lost)} messages a consumer received were erased by the crash: {lost[:5]}"
