"""``bench/workers_bench.py``: tiny runs with C clients against 1 and 2 workers (C clients on
queues whose owner is another worker), the table and the model beside it, and the same
workloads against RabbitMQ and Proton's C broker in the same run."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
HAVE_PROTON_C = (
    shutil.which("cc") is not None and Path("/usr/share/proton/examples/c/broker.c").exists()
)
HAVE_RABBITMQ = (
    Path("/usr/lib/rabbitmq/bin/rabbitmq-server").exists()
    and Path("/usr/include/amqp.h").exists()
    and HAVE_PROTON_C
)


def bench(*args: str) -> list[list[str]]:
    """Run the bench tiny; the cells of its table rows."""
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "workers_bench.py"),
            "--count",
            "2000",
            "--rounds",
            "1",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    rows = [line for line in r.stdout.splitlines() if line.startswith(("| 1 queue", "| 4 queues"))]
    return [row.strip(" |").split(" | ") for row in rows]


@pytest.mark.skipif(
    not HAVE_PROTON_C, reason="no C compiler or Proton C (libqpid-proton11-dev-examples)"
)
@pytest.mark.parametrize(
    "extra",
    [(), ("--move-connections",), ("--move-connections", "--publishers-apart", "--pin-workers")],
    ids=["crossing", "moved", "apart-pinned"],
)
def test_a_tiny_run_moves_every_message_on_one_and_two_workers(extra: tuple[str, ...]) -> None:
    rows = bench("--clients", "proton-c", "--no-peers", *extra)
    assert [row[1] for row in rows] == ["amqp10, 1 worker", "amqp10, 2 workers"] * 2
    model = [row[-1] for row in rows]
    assert model[0] == model[2] == "1.00x" and model[1] != "1.00x"


@pytest.mark.skipif(
    not HAVE_RABBITMQ, reason="no RabbitMQ (rabbitmq-server), librabbitmq-dev or Proton C"
)
def test_the_same_run_measures_rabbitmq_and_protons_c_broker_beside_ours() -> None:
    rows = bench("--clients", "proton-c", "rabbitmq-c", "--queues", "1")
    assert [row[1] for row in rows] == [
        "amqp10, 1 worker", "amqp10, 2 workers", "Proton C broker",
        "amqp10, 1 worker", "amqp10, 2 workers", "RabbitMQ",
    ]  # fmt: skip
    assert [row[8] for row in rows][2::3] == ["1.00x", "1.00x"]  # the peer against itself
    for row in rows:  # the host's busy share of its cores over the run, and the rest's CPU
        # (from /proc/stat's 10 ms ticks: a tiny run's rest can round to nothing)
        assert row[6].endswith("%") and 0 <= int(row[6][:-1]) <= 100, row
        assert float(row[5]) >= 0, row


def bench_module(name: str) -> Any:
    """Module ``bench/<name>.py``, imported with ``bench/`` on the path (its siblings
    import each other by name)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "bench"))


def test_the_in_process_bench_moves_every_message_local_crossing_twice_and_once() -> None:
    """``bench/internal_link_bench.py``: each case (``publish``: the consumer on the queue's
    worker, each message crossing once) ends only when every message was received and its
    outcome reached the producer (it raises "no progress" otherwise)."""
    ilb = bench_module("internal_link_bench")
    calls = {}
    for mode in ("local", "crossing", "publish"):
        us, calls[mode], instructions = ilb.run(200, mode, True)
        assert us > 0 and instructions > 0, mode
    # (counted calls are deterministic) once costs more than none, twice more than once
    assert calls["local"] < calls["publish"] < calls["crossing"]


@pytest.mark.parametrize("confirm", [True, False], ids=["confirms", "no-ack"])
def test_the_0_9_1_bench_moves_every_message_local_crossing_twice_and_once(confirm: bool) -> None:
    """The same through the 0-9-1 front end (``--protocol 0-9-1``): B's queue is declared as
    the client declares it (the owner compares a re-declaration, as RabbitMQ does), and each
    mode ends only when every message was received (and, with confirms, confirmed)."""
    ilb = bench_module("internal_link_bench")
    calls = {}
    for mode in ("local", "crossing", "publish"):
        us, calls[mode], instructions = ilb.run_091(100, mode, True, confirm=confirm)
        assert us > 0 and instructions > 0, mode
    assert calls["local"] < calls["publish"] < calls["crossing"]


def test_the_model_places_connections_as_the_options_do() -> None:
    wm = bench_module("workers_model")
    c = wm.Costs.of(0.15, 1.43)

    def at_two(busiest: object, queues: int) -> float:
        return wm.speedup(busiest, 2, queues, 1, c, 200)

    # one queue: moved leaves the second worker idle, apart gives it the publisher
    assert at_two(wm.busiest_apart, 1) > 1.2 > at_two(wm.busiest_moved, 1)
    # many queues: moved crosses nothing and the hash spreads them, apart pays a crossing each
    assert at_two(wm.busiest_moved, 64) > at_two(wm.busiest_apart, 64) > 1.5
