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
from typing import Any

import anyio
import pika
import pytest
from pika.adapters.select_connection import SelectConnection

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
    """A 3 MiB tmpfs for the store (we are root in CI; not root: skipped, saying why)."""
    where = tmp_path / "tiny"
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(where)], capture_output=True, text=True)
    if r.returncode != 0:
        why = f"cannot mount a tmpfs for the store ({(r.stderr or r.stdout).strip()})"
        if os.geteuid() == 0:  # as root (CI, the test machine) a failed mount is a failure, not a skip
            pytest.fail(why)
        pytest.skip(why)
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
        # the stalled write is retried every 0.5 s; once it went through, publishers are accepted
        # again (waiting for the log line, not a count of attempts that may all come too soon)
        bp.wait_log("the store has room again")
        after, refusal = anyio.run(_publish_until_refused, url, 1_000_000, 20)
        assert refusal is None and len(after) == 20, (after, refusal)
        assert bp.terminate() == 0, bp.log
    with broker_process("--port", "0", "--http-port", "0", "--data-dir", str(tiny_fs)) as bp:
        got = anyio.run(_receive_all, f"amqp://{bp.url}")
        bp.terminate()
    lost = set(before + after) - set(got)
    assert not lost, f"{len(lost)} accepted messages lost, e.g. {sorted(lost)[:5]}"


class _PikaFullDisk:
    """A pika publisher (the asynchronous adapter, so that publishes stay in flight while the
    store is stuck) through a full disk: persistent messages with publisher confirms until
    the broker nacks some, a few publishes without confirms (dropped), a transaction (its
    commit refused), then the filesystem grows and publishing goes on until confirms come
    back as acks. Bounded in count and time."""

    BODY = 1000  # bytes a message: the 3 MiB filesystem fills after a few thousand

    def __init__(self, port: int, where: Path) -> None:
        self.port = port
        self.where = where
        self.tags: dict[int, int] = {}  # delivery tag -> message id (confirm channel)
        self.acked: set[int] = set()
        self.nacked: set[int] = set()
        self.dropped: list[int] = []  # published without confirms while the store was full
        self.after: set[int] = set()  # published once space had returned
        self.grown = False
        self.next_id = 0
        self.error: str | None = None

    def run(self) -> None:
        conn = SelectConnection(
            pika.ConnectionParameters("127.0.0.1", self.port), on_open_callback=self._on_open
        )
        self.conn = conn
        conn.ioloop.call_later(90, lambda: self._fail("took too long"))
        conn.add_on_close_callback(lambda *a: conn.ioloop.stop())
        try:
            conn.ioloop.start()
        finally:
            conn.ioloop.close()

    def _fail(self, why: str) -> None:
        self.error = why
        self.conn.ioloop.stop()

    def _on_open(self, conn: SelectConnection) -> None:
        conn.channel(on_open_callback=self._on_channel)

    def _on_channel(self, ch: Any) -> None:
        self.ch = ch
        ch.confirm_delivery(self._on_confirm)
        ch.queue_declare("full091", durable=True, callback=lambda _f: self.conn.channel(on_open_callback=self._on_plain))

    def _on_plain(self, plain: Any) -> None:
        self.plain = plain  # no confirms
        self._fill()

    def _publish(self, ch: Any, mid: int) -> None:
        body = str(mid).encode().ljust(self.BODY, b".")
        ch.basic_publish("", "full091", body, pika.BasicProperties(delivery_mode=2))

    def _fill(self) -> None:
        """50 persistent messages every 10 ms (no window: the batch the disk refused holds its
        publishes unconfirmed until space returns) until 5 are nacked."""
        if len(self.nacked) >= 5:
            for i in range(10):
                self.dropped.append(5_000_000 + i)
                self._publish(self.plain, 5_000_000 + i)
            self.conn.channel(on_open_callback=self._on_tx)
            return
        if self.next_id >= 30_000:
            return self._fail("the store never filled up")
        for _ in range(50):
            self.next_id += 1
            self.tags[len(self.tags) + 1] = self.next_id
            self._publish(self.ch, self.next_id)
        self.conn.ioloop.call_later(0.01, self._fill)

    def _on_tx(self, tx: Any) -> None:
        """A transaction publishing one message, committed while the store is full."""
        tx.add_on_close_callback(lambda _ch, reason: self._tx_done(reason))
        tx.tx_select(lambda _f: self._tx_publish(tx))

    def _tx_publish(self, tx: Any) -> None:
        self._publish(tx, 6_000_000)
        tx.tx_commit(lambda _f: self._tx_done(None))

    def _tx_done(self, refusal: Exception | None) -> None:
        if not hasattr(self, "tx_refusal"):
            self.tx_refusal = refusal
            self.conn.ioloop.call_later(0.5, self._grow)

    def _grow(self) -> None:
        _resize(self.where, "64m")  # space returns
        self.grown = True
        self.next_id = 1_000_000
        self._after()

    def _after(self) -> None:
        """One message every 20 ms until 20 sent after the growth are acked and nothing
        sent is unconfirmed (the stuck batch's retry went through)."""
        if len(self.acked & self.after) >= 20 and len(self.acked) + len(self.nacked) == len(self.tags):
            self.conn.close()
            return
        if self.next_id < 1_000_400:
            self.next_id += 1
            self.tags[len(self.tags) + 1] = self.next_id
            self.after.add(self.next_id)
            self._publish(self.ch, self.next_id)
        self.conn.ioloop.call_later(0.02, self._after)

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        tags = range(1, method.delivery_tag + 1) if method.multiple else [method.delivery_tag]
        into = self.acked if isinstance(method, pika.spec.Basic.Ack) else self.nacked
        for tag in tags:
            mid = self.tags[tag]
            if mid not in self.acked and mid not in self.nacked:
                into.add(mid)


def _drain_091(port: int) -> list[int]:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    got: list[int] = []
    try:
        ch = conn.channel()
        for _ in range(40_000):
            method, _props, body = ch.basic_get("full091", auto_ack=True)
            if method is None:
                break
            got.append(int(body.rstrip(b".")))
    finally:
        conn.close()
    return got


def test_0_9_1_publishers_on_a_full_disk_get_nacks_and_nothing_acked_is_lost(tiny_fs: Path) -> None:
    cfg = tiny_fs.parent / "no-disk-alarm.toml"  # as above: the store's own out-of-space path
    cfg.write_text("[limits]\ndisk_free_limit_bytes = 0\n")
    with broker_process("--port", "0", "--http-port", "0", "--data-dir", str(tiny_fs), "--config", str(cfg)) as bp:
        pub = _PikaFullDisk(bp.port, tiny_fs)
        pub.run()
        assert pub.error is None, f"{pub.error}: {len(pub.acked)} acked, {len(pub.nacked)} nacked\n" + bp.log
        assert len(pub.acked - pub.after) > 50 and len(pub.nacked) >= 5, (len(pub.acked), len(pub.nacked))
        assert len(pub.acked & pub.after) >= 20
        assert bp.proc.poll() is None, "the broker went down with the disk\n" + bp.log
        refusal = pub.tx_refusal  # tx.commit while full: the channel closed, nothing of it kept
        assert isinstance(refusal, pika.exceptions.ChannelClosedByBroker), refusal
        assert refusal.reply_code == 506 and "no room" in refusal.reply_text, refusal
        drops = [line for line in bp.lines if "dropping 0-9-1 publishes" in line]
        assert len(drops) == 1 and "no room" in drops[0], drops  # 10 dropped, said once
        assert bp.terminate() == 0, bp.log
    with broker_process("--port", "0", "--http-port", "0", "--data-dir", str(tiny_fs)) as bp:
        got = set(_drain_091(bp.port))
        bp.terminate()
    lost = pub.acked - got
    assert not lost, f"{len(lost)} acked messages lost, e.g. {sorted(lost)[:5]}"
    assert not pub.nacked & got, f"nacked messages were kept: {sorted(pub.nacked & got)[:5]}"
    assert not set(pub.dropped) & got, "publishes dropped without confirms were kept"
    assert 6_000_000 not in got, "the refused transaction's publish was kept"


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
