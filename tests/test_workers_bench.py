"""``bench/workers_bench.py``: a tiny run with Proton C clients against 1 and 2 workers
(C clients on queues whose owner is another worker), the table and the model beside it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
HAVE_PROTON_C = shutil.which("cc") is not None and Path("/usr/share/proton/examples/c/broker.c").exists()


@pytest.mark.skipif(not HAVE_PROTON_C, reason="no C compiler or Proton C (libqpid-proton11-dev-examples)")
def test_a_tiny_run_moves_every_message_on_one_and_two_workers() -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "workers_bench.py"), "--count", "2000", "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    rows = [line for line in r.stdout.splitlines() if line.startswith("| 1 queue") or line.startswith("| 4 queues")]
    assert [row.split(" | ")[1] for row in rows] == ["1", "2", "1", "2"]
    model = [row.rstrip(" |").rsplit(" | ", 1)[1] for row in rows]
    assert model[0] == model[2] == "1.00x" and model[1] != "1.00x"
