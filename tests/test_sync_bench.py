"""``bench/sync_bench.py``: a tiny run prints every case and the issues' ratios."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def test_a_tiny_run_prints_the_table_and_the_targets(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "sync_bench.py"), "--count", "300",
         "--slow-count", "30", "--window", "100", "--rounds", "1", "--results", str(results)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    section = results.read_text()
    assert section.lstrip().startswith("## The blocking API (bench/sync_bench.py)")
    for label in (
        "amqp10 async",
        "amqp10.sync (fast path)",
        "Proton BlockingConnection",
        "amqp10.sync one by one",
        "amqp10.sync iteration",
        "amqp10 async one by one",
    ):
        assert f"| {label} |" in section
    targets = [line for line in section.splitlines() if line.startswith("- blocking")]
    assert len(targets) == 5 and all("x (medians)" in line for line in targets)
    # issue 34's ratios, message by message
    per_message = [line for line in section.splitlines() if line.startswith("- per message")]
    assert len(per_message) == 8 and all("x (medians)" in line for line in per_message)
    assert section in r.stdout
