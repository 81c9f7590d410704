"""``amqp10 bench``: a whole (small) run, its failure report, and its arithmetic."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from amqp10.cli.bench.harness import BenchConfig, percentile
from amqp10.cli.progress import Progress

pytestmark = pytest.mark.slow


def _bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "amqp10.cli", "bench", "--no-progress", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("settle", ["at-least-once", "at-most-once"])
def test_a_small_run_reports_throughput_latency_and_rss(settle: str) -> None:
    r = _bench(
        "--count",
        "300",
        "--settle",
        settle,
        "--producers",
        "2",
        "--consumers",
        "2",
        "--json",
        "-",
        "--timeout",
        "60",
    )
    assert r.returncode == 0, r.stderr
    assert "throughput" in r.stdout and "latency ms p50" in r.stdout
    data = json.loads(r.stdout[r.stdout.index("{") :])
    assert data["received"] == 300 and data["sent"] == 300
    assert data["msgs_per_s"] > 0
    assert data["latency_ms"]["p50"] <= data["latency_ms"]["p99"]
    assert data["broker_peak_rss_kib"] > 1000


def test_failure_is_one_line() -> None:
    r = _bench("--count", "10", "--url", "amqp://127.0.0.1:1", "--timeout", "30")
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("amqp10 bench: "), r.stderr


def test_bad_arguments() -> None:
    r = _bench("--size", "4")
    assert r.returncode == 2 and "size must be at least" in r.stderr
    with pytest.raises(ValueError):
        BenchConfig(settle="sometimes")


def test_percentile_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([5, 1, 3], 50) == 3
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile(list(range(1, 101)), 100) == 100


def test_progress_bar_draws_on_a_stream() -> None:
    out = io.StringIO()
    bar = Progress(1000, out)
    bar.update(500, force=True)
    assert "50.0%" in out.getvalue() and "500/1,000" in out.getvalue()
