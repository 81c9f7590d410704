"""kill -9 of the Spark driver, then of the broker, mid-batch; restarts: every message exactly once.

The broker here is a process of its own with a durable store (not the shared
in-thread one), so the test can SIGKILL it and start it again on the same
store and port.
"""

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

from amqp10.message import Message
from amqp10.spark._client import BrokerClient
from amqp10.spark.offsets import from_spark
from amqp10.spark.options import SourceOptions
from tests.broker.test_crash import start

from .conftest import numbered

pytestmark = pytest.mark.slow

JOB = Path(__file__).with_name("stream_job.py")
ADDRESS = "events-kill"
N = 160  # published before the query starts: 4 batches
LATE = 40  # published after the broker's restart: offsets N.. (none reused)
PER_BATCH = 40
BROKER_CONFIG = """
[[addresses]]
pattern = "events*"
kind = "stream"
policy = { duplicate_window = 100000 }
"""


def attempts(sink: Path) -> list[dict[str, Any]]:
    path = sink / "attempts.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def publish(url: str, messages: list[Message]) -> None:
    with BrokerClient(SourceOptions.parse({"url": url, "address": ADDRESS})) as client:
        client.publish(ADDRESS, [m.encode() for m in messages])


def planned(checkpoint: Path, batch: int) -> int:
    """The end offset Spark's offset log holds for ``batch`` (its last line, the source's offset)."""
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    return from_spark(json.loads(lines[-1]))[0]


def run_job(url: str, checkpoint: Path, sink: Path, *extra: str) -> subprocess.Popen[bytes]:
    with open(sink.parent / "job.log", "ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                str(JOB),
                "--url",
                url,
                "--address",
                ADDRESS,
                "--checkpoint",
                str(checkpoint),
                "--sink",
                str(sink),
                "--max-per-batch",
                str(PER_BATCH),
                "--timeout",
                "10",
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,  # its own process group: the JVM and its Python workers die with it
        )


def stop(job: subprocess.Popen[bytes]) -> None:
    if job.poll() is None:
        os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)


def wait_until(what: str, done: Any, job: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 180
    while not done():
        assert job.poll() is None, f"the job ended early: {log.read_text()[-2000:]}"
        assert time.monotonic() < deadline, f"the job made no progress: {what}"
        time.sleep(0.05)


def test_sigkill_of_the_driver_then_of_the_broker_is_exactly_once(tmp_path: Path) -> None:
    store, config = tmp_path / "store", tmp_path / "broker.toml"
    config.write_text(BROKER_CONFIG)
    broker, port = start(store, extra=["--config", str(config)])
    url = f"amqp://127.0.0.1:{port}"
    checkpoint, sink, log = tmp_path / "checkpoint", tmp_path / "sink", tmp_path / "job.log"
    sink.mkdir()
    try:
        publish(url, numbered(N))

        # 1. the driver dies while batch 2 is in its sink
        job = run_job(url, checkpoint, sink, "--delay", "0.5")
        try:
            wait_until("batch 2 in the sink", lambda: len(attempts(sink)) >= 3, job, log)
        finally:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)
        killed_in = attempts(sink)[-1]
        assert len(list((sink / "data").glob("*.json"))) < N

        # 2. restarted from the checkpoint, it replays that batch; a later one is planned
        # (its offsets in Spark's offset log) and held before it reads: the broker dies then
        hold = killed_in["batch"] + 1
        assert hold < N // PER_BATCH, "the driver died in its sink's delay: a batch is left to hold"
        job = run_job(url, checkpoint, sink, "--hold-batch", str(hold))
        try:
            wait_until(f"batch {hold} held", (sink / "holding").exists, job, log)
            held = (planned(checkpoint, hold - 1), planned(checkpoint, hold))
            assert held[0] < held[1], "the held batch has offsets to read"
            broker.send_signal(signal.SIGKILL)
            broker.wait(10)
            (sink / "go").touch()
            # the batch fails, and the query with it, rather than waiting for the broker
            assert job.wait(120) != 0, "the query went on without its broker"
        finally:
            stop(job)
        assert f"could not connect to 127.0.0.1:{port}: connection refused" in log.read_text()
        assert all(a["batch"] < hold for a in attempts(sink)), "the held batch was never read"

        # 3. the broker restarts on the same store and port; new messages take new offsets;
        # the query, restarted from its checkpoint, runs the failed batch again and reads on
        broker, _ = start(store, port, extra=["--config", str(config)])
        publish(url, numbered(LATE, start=N))
        job = run_job(url, checkpoint, sink, "--available-now")
        try:
            assert job.wait(240) == 0, log.read_text()[-3000:]
        finally:
            stop(job)
    finally:
        broker.kill()
        broker.wait(10)

    # the sink holds every offset once, with its own message
    total = N + LATE
    files = sorted((sink / "data").glob("*.json"), key=lambda p: int(p.stem))
    records = [json.loads(p.read_text()) for p in files]
    assert [r["offset"] for r in records] == list(range(total))
    assert all(r["body"] == f"m{r['offset']}" for r in records)

    log_ = attempts(sink)
    # the batch the driver's kill interrupted ran again with exactly the same offsets
    runs_of_killed = [a for a in log_ if a["batch"] == killed_in["batch"]]
    assert len(runs_of_killed) == 2 and runs_of_killed[0] == runs_of_killed[1]
    # the batch the broker's kill failed ran once, after the restart, with its planned offsets
    (run_of_held,) = [a for a in log_ if a["batch"] == hold]
    assert (run_of_held["first"], run_of_held["last"] + 1) == held
    # and, counting each batch once, the batches tile [0, total) without overlap
    by_batch = {a["batch"]: a for a in log_}
    covered = sorted((a["first"], a["last"]) for a in by_batch.values() if a["count"])
    assert covered[0][0] == 0 and covered[-1][1] == total - 1
    assert all(prev[1] + 1 == nxt[0] for prev, nxt in itertools.pairwise(covered))
    assert sum(a["count"] for a in by_batch.values()) == total
