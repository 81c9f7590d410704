"""kill -9 of the Spark driver mid-batch, restart from the checkpoint: every message exactly once."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import numbered

pytestmark = pytest.mark.slow

JOB = Path(__file__).with_name("stream_job.py")
N = 400
PER_BATCH = 40


def attempts(sink: Path) -> list[dict[str, Any]]:
    path = sink / "attempts.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_job(url: str, checkpoint: Path, sink: Path, *extra: str) -> subprocess.Popen[bytes]:
    with open(sink.parent / "job.log", "ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                str(JOB),
                "--url",
                url,
                "--address",
                "events-kill",
                "--checkpoint",
                str(checkpoint),
                "--sink",
                str(sink),
                "--max-per-batch",
                str(PER_BATCH),
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,  # its own process group: the JVM and its Python workers die with it
        )


def test_sigkill_of_the_driver_then_restart_is_exactly_once(
    url: str, publish: Any, tmp_path: Path
) -> None:
    publish("events-kill", numbered(N))
    checkpoint, sink = tmp_path / "checkpoint", tmp_path / "sink"
    sink.mkdir()

    job = run_job(url, checkpoint, sink, "--delay", "0.5")
    try:
        deadline = time.monotonic() + 180
        while len(attempts(sink)) < 3:  # batches 0 and 1 done, batch 2 in its sink
            assert job.poll() is None, (
                f"the job ended early: {(tmp_path / 'job.log').read_text()[-2000:]}"
            )
            assert time.monotonic() < deadline, "the job made no progress"
            time.sleep(0.05)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
    killed_in = attempts(sink)[-1]
    assert len(list((sink / "data").glob("*.json"))) < N

    job = run_job(url, checkpoint, sink, "--available-now")
    try:
        assert job.wait(240) == 0, (tmp_path / "job.log").read_text()[-3000:]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)

    # the sink holds every offset once, with its own message
    files = sorted((sink / "data").glob("*.json"), key=lambda p: int(p.stem))
    records = [json.loads(p.read_text()) for p in files]
    assert [r["offset"] for r in records] == list(range(N))
    assert all(r["body"] == f"m{r['offset']}" for r in records)

    # the batch the kill interrupted ran again with exactly the same offsets
    log = attempts(sink)
    runs_of_killed = [a for a in log if a["batch"] == killed_in["batch"]]
    assert len(runs_of_killed) == 2 and runs_of_killed[0] == runs_of_killed[1]
    # and, counting each batch once, the batches tile [0, N) without overlap
    by_batch = {a["batch"]: a for a in log}
    covered = sorted((a["first"], a["last"]) for a in by_batch.values() if a["count"])
    assert covered[0][0] == 0 and covered[-1][1] == N - 1
    assert all(prev[1] + 1 == nxt[0] for prev, nxt in itertools.pairwise(covered))
    assert sum(a["count"] for a in by_batch.values()) == N
