"""``bench/amqp010_codec_bench.py``: a tiny run prints the three phases and their total."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_a_tiny_run_prints_each_phase() -> None:
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "amqp010_codec_bench.py"),
            "--count",
            "20",
            "--repeat",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(
        r"feed [\d.]+ from_transfer [\d.]+ deliver [\d.]+ total [\d.]+ us/msg\n", r.stdout
    )
