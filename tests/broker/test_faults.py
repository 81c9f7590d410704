"""The fault campaign's fast parts (issue #20): SIGKILLs under load, a store that is
corrupt or from a newer broker, a store whose filesystem fills up.

The long campaign (>= 20 kills) is ``bench/fault_campaign.py``; here it runs with a
few kills. A broker under test is a subprocess (``conftest.broker_process``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from amqp10.broker.core.store import PUT, Store
from amqp10.client import SettleMode, connect
from amqp10.message import Message
from amqp10.types import Accepted, Rejected

from .conftest import BrokerProcess, broker_process, cli

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
STORE = "amqp10.sqlite3"
T = 10.0  # seconds any single wait may take


def test_sigkills_lose_no_confirmed_message_and_redeliver_exactly_the_unsettled() -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fault_campaign.py"), "--kills", "3", "--json", "--seed", "7"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.stdout.strip(), r.stderr[-2000:]
    tally = json.loads(r.stdout.strip().splitlines()[-1])
    assert tally["confirmed"] > 100 and tally["settled"] > 50, tally
    assert tally["held_unsettled_at_kills"] > 0, tally
    assert tally["lost"] == 0, tally
    assert tally["settled_redelivered"] == 0, tally
    assert tally["unsettled_not_redelivered"] == 0, tally
    assert r.returncode == 0, r.stderr[-2000:]


# -- a store the broker cannot trust: refused, left as it was -------------------------------------
def _store_with_messages(path: Path, n: int = 3000) -> None:
    s = Store(path)
    s.apply([(PUT, "q", i, 4, 0, None, 0.0, None, "amqp1", os.urandom(300)) for i in range(n)])
    s.close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the main file
    db.close()


def _garbage(path: Path) -> None:
    path.write_bytes(os.urandom(20_000))


def _torn_page(path: Path) -> None:
    _store_with_messages(path)
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.seek(size // 2 // 4096 * 4096)
        f.write(os.urandom(4096))


def _newer(path: Path) -> None:
    _store_with_messages(path, 10)
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.close()


@pytest.mark.parametrize(
    ("spoil", "reason"),
    [
        (_garbage, "cannot be read"),
        (_torn_page, "cannot be read"),
        (_newer, "schema version 99 is newer than this broker's"),
    ],
    ids=["not-a-database", "torn-page", "newer-version"],
)
def test_a_corrupt_or_newer_store_is_refused_and_left_untouched(tmp_path: Path, spoil: object, reason: str) -> None:
    path = tmp_path / STORE
    spoil(path)  # type: ignore[operator]
    before = path.read_bytes()
    r = subprocess.run(
        cli("--port", "0", "--http-port", "0", "--data-dir", str(tmp_path)), capture_output=True, text=True, timeout=60
    )
    assert r.returncode != 0
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in r.stderr, r.stderr
    assert str(path) in err[0] and reason in err[0], err[0]
    assert "listening on" not in r.stderr
    assert path.read_bytes() == before, "the refused store was changed"


# -- the store's filesystem fills up -----------------------------------------------------------
@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs for the store (we are root in the test machine; else skipped, saying why)."""
    where = tmp_path / "tiny"
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(where)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the store ({(r.stderr or r.stdout).strip()})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _resize(where: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(where)], check=True)


async def _publish_until_refused(url: str, start: int, most: int) -> tuple[list[int], Rejected | None]:
    """Send durable messages one by one until one is rejected; the accepted ids and the refusal.
    A send that gets no outcome in time (its commit waits for room) is neither."""
    accepted: list[int] = []
    async with await connect(url, timeout=T) as conn:
        snd = await conn.open_sender("full", settle_mode=SettleMode.AT_LEAST_ONCE, timeout=T)
        waited = 0
        for i in range(start, start + most):
            try:
                outcome = await snd.send(Message(body=i, durable=True), timeout=3)
            except TimeoutError:
                waited += 1
                if waited == 5:  # no outcome, and no refusal either: stop (bounded)
                    break
                continue
            if isinstance(outcome, Rejected):
                return accepted, outcome
            assert isinstance(outcome, Accepted), outcome
            accepted.append(i)
    return accepted, None


async def _receive_all(url: str) -> list[int]:
    got: list[int] = []
    async with await connect(url, timeout=T) as conn:
        rcv = await conn.open_receiver("full", credit=500, timeout=T)
        for _ in range(20_000):
            try:
                d = await rcv.receive(timeout=3)
            except TimeoutError:
                break
            got.append(d.message.body)
            await d.accept()
    return got


def test_a_full_disk_rejects_publishers_keeps_what_it_accepted_and_recovers(tiny_fs: Path) -> None:
    # the disk alarm (limits.disk_free_limit_bytes, at least 50 MiB by default) would block
    # publishers on so small a filesystem before the store fills up: this is the store's
    # own out-of-space path, so the alarm is off
    cfg = tiny_fs.parent / "no-disk-alarm.toml"
    cfg.write_text("[limits]\ndisk_free_limit_bytes = 0\n")
    with broker_process("--port", "0", "--http-port", "0", "--data-dir", str(tiny_fs), "--config", str(cfg)) as bp:
        url = f"amqp://{bp.url}"
        before, refusal = anyio.run(_publish_until_refused, url, 0, 20_000)
        assert refusal is not None, "the store never filled up"
        assert len(before) > 50, before
        assert refusal.error is not None and refusal.error.condition == "amqp:resource-limit-exceeded", refusal
        assert "no room" in (refusal.error.description or "")
        bp.wait_log("the store has no room")
        assert bp.proc.poll() is None, "the broker went down with the disk\n" + bp.log
        _resize(tiny_fs, "64m")  # space returns
        after: list[int] = []
        for _ in range(40):  # until the stalled write went through (retried every 0.5 s)
            after, refusal = anyio.run(_publish_until_refused, url, 1_000_000, 20)
            if refusal is None:
                break
        assert refusal is None and len(after) == 20, (after, refusal)
        bp.wait_log("the store has room again")
        assert bp.terminate() == 0, bp.log
    with broker_process("--port", "0", "--http-port", "0", "--data-dir", str(tiny_fs)) as bp:
        got = anyio.run(_receive_all, f"amqp://{bp.url}")
        bp.terminate()
    lost = set(before + after) - set(got)
    assert not lost, f"{len(lost)} accepted messages lost, e.g. {sorted(lost)[:5]}"


# -- SIGTERM drains the work in flight -----------------------------------------------------------
async def _in_flight_then_sigterm(bp: BrokerProcess) -> tuple[list[object], BaseException | None]:
    async with await connect(f"amqp://{bp.url}", timeout=T) as conn:
        snd = await conn.open_sender("drained", settle_mode=SettleMode.AT_LEAST_ONCE, timeout=T)
        trackers = [snd.submit(Message(body=i, durable=True)) for i in range(100)]
        # an attach round trip: the broker has read (and journalled) every transfer before it,
        # and their commit waits out the long commit interval
        await conn.open_receiver("barrier", credit=0, timeout=T)
        assert not any(t.done for t in trackers), "a commit came early: nothing was in flight"
        code = await anyio.to_thread.run_sync(bp.terminate)
        assert code == 0, bp.log
        outcomes: list[object] = []
        for t in trackers:
            try:
                outcomes.append(await t)
            except Exception as exc:  # no outcome came before the close
                outcomes.append(exc)
        with anyio.fail_after(T):
            await conn.wait_closed()
        return outcomes, conn.error


def test_sigterm_answers_the_publishes_in_flight_then_closes_with_connection_forced(tmp_path: Path) -> None:
    cfg = tmp_path / "broker.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / STORE}"\ncommit_interval_ms = 3000\n')
    with broker_process("--port", "0", "--http-port", "0", "--config", str(cfg)) as bp:
        outcomes, error = anyio.run(_in_flight_then_sigterm, bp)
    assert all(isinstance(o, Accepted) for o in outcomes), outcomes[:3]
    assert error is not None and getattr(error, "condition", None) == "amqp:connection:forced", error
