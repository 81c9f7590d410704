"""``bench/amqp010_bench.py``: a tiny run writes its section, a row per protocol."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from interop import qpid_messaging

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def test_a_tiny_run_writes_a_row_per_protocol(tmp_path: Path) -> None:
    try:
        qpid_messaging.python2()
        qpid_messaging.sdist()
    except qpid_messaging.Unavailable as exc:
        pytest.skip(str(exc))
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\nkept\n")
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "amqp010_bench.py"),
            "--count",
            "200",
            "--slow-count",
            "50",
            "--results",
            str(results),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    text = results.read_text()
    assert text.startswith("# Benchmark results\n\nkept\n")
    rows = [
        line.split(" | ")[:2]
        for line in text.splitlines()
        if line.startswith("| ") and "| msg/s |" not in line
    ]
    assert rows == [["| 1.0", "our client"], ["| 0-9-1", "pika"], ["| 0-10", "qpid.messaging"]]
