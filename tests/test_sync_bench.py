"""``bench/sync_bench.py``: a tiny run prints every case and the issues' ratios."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    """Run bench/sync_bench.py with ``args``; it must succeed."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "sync_bench.py"), *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return r


def test_a_tiny_run_prints_the_table_and_the_targets(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    r = bench("--count", "300", "--slow-count", "30", "--window", "100", "--rounds", "1",
              "--results", str(results))  # fmt: skip
    section = results.read_text()
    assert section.lstrip().startswith("## The blocking API (bench/sync_bench.py)")
    for label in (
        "amqp10 async",
        "amqp10.sync (fast path)",
        "Proton BlockingConnection",
        "amqp10.sync one by one",
        "amqp10.sync iteration",
        "amqp10 async one by one",
        "amqp10.sync one by one, outcome later",
    ):
        assert f"| {label} |" in section
    targets = [line for line in section.splitlines() if line.startswith("- blocking")]
    assert len(targets) == 5 and all("x (medians)" in line for line in targets)
    # issue 34's ratios, message by message
    per_message = [line for line in section.splitlines() if line.startswith("- per message")]
    assert len(per_message) == 10 and all("x (medians)" in line for line in per_message)
    assert "its default configuration" in section
    assert section in r.stdout


def test_the_broker_configuration_is_passed_and_stated(tmp_path: Path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text("[default_policy]\ndurable = true\n")
    skip = ["--skip", "async", "--skip", "asyncb", "--skip", "proton", "--skip", "synci",
            "--skip", "async1", "--skip", "sync1d"]  # fmt: skip
    r = bench("--count", "50", "--window", "10", "--rounds", "1", *skip,
              "--broker-config", str(config))  # fmt: skip
    assert "the configuration `[default_policy]; durable = true`" in r.stdout
    assert "run from" not in r.stdout


def test_the_broker_can_run_from_another_tree(tmp_path: Path) -> None:
    """``--broker-tree``: the broker from that tree (a compiled build, say), stated."""
    tree = tmp_path / "tree"
    tree.symlink_to(ROOT)
    skip = ["--skip", "async", "--skip", "asyncb", "--skip", "proton", "--skip", "synci",
            "--skip", "async1", "--skip", "sync1d"]  # fmt: skip
    r = bench("--count", "50", "--window", "10", "--rounds", "1", *skip, "--broker-tree", str(tree))
    assert f"run from {tree} (the clients from this tree)" in r.stdout
