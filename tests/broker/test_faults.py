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
from pathlib import Path

import pytest

from amqp10.broker.core.store import PUT, Store

from .conftest import cli

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
STORE = "amqp10.sqlite3"


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
