"""``bench/amqp091_bench.py``: a tiny run against our broker prints the table and the targets."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
HAVE_C = shutil.which("cc") is not None and Path("/usr/include/amqp.h").exists()


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "amqp091_bench.py"), "--no-progress", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_a_tiny_run_against_two_trees_writes_the_section(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\nkept\n")
    r = _run("--brokers", "amqp10", "--before", str(ROOT), "--rounds", "1", "--count", "300",
             "--pika-count", "30", "--prefetch", "50", "--results", str(results))  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    text = results.read_text()
    assert text.startswith("# Benchmark results\n\nkept\n")
    assert "## AMQP 0-9-1 against RabbitMQ (bench/amqp091_bench.py)" in text
    rows = [line for line in text.splitlines() if line.startswith("| pika, confirms")]
    assert [row.split(" | ")[1] for row in rows] == ["amqp10", "amqp10 before"]
    assert all("failed" not in row for row in rows)
    c_rows = [line for line in text.splitlines() if line.startswith("| rabbitmq-c")]
    if HAVE_C:
        assert len(c_rows) == 6 and all("failed" not in row for row in c_rows)
    else:
        assert not c_rows and "rabbitmq-c workloads skipped" in text
    # without RabbitMQ in the run the targets are not measured, and say so
    assert "- pika, confirms + manual acks: amqp10 ≥ 1x RabbitMQ: not measured" in text
    # a second run replaces the section instead of adding one
    r = _run("--brokers", "amqp10", "--workloads", "pika", "--rounds", "1", "--pika-count", "20",
             "--results", str(results))  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert results.read_text().count("## AMQP 0-9-1 against RabbitMQ") == 1


def test_bad_arguments_are_one_line() -> None:
    r = _run("--workloads", "pika,nope")
    assert r.returncode == 2 and "unknown workload or broker: nope" in r.stderr
    r = _run("--before", "/nonexistent")
    assert r.returncode == 2 and "no amqp10 package there" in r.stderr
