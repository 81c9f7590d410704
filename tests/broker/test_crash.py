"""kill -9 of the broker at random moments loses no message whose acceptance was confirmed."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from proton import Message
from proton.utils import BlockingConnection

pytestmark = [pytest.mark.slow, pytest.mark.proton]


def start(data_dir: Path, port: int = 0, extra: Sequence[str] = ()) -> tuple[subprocess.Popen[bytes], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "amqp10.cli", "broker", "--port", str(port), "--http-port", "0", "--data-dir", str(data_dir), "--log-level", "info", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stderr.readline().decode()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if m:
            # keep the pipe drained, and close it when the broker is gone
            threading.Thread(target=_drain, args=(proc,), daemon=True).start()
            return proc, int(m.group(1))
        if not line and proc.poll() is not None:
            break
    proc.kill()
    proc.wait()
    proc.stderr.close()
    raise AssertionError("the broker did not start")


def _drain(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stderr is not None
    with proc.stderr:
        proc.stderr.read()


def produce(port: int, confirmed: list[int], start_at: int, stop: threading.Event) -> None:
    """Send durable messages until the connection dies; record those the broker accepted."""
    n = start_at
    try:
        conn = BlockingConnection(f"127.0.0.1:{port}", timeout=5)
        snd = conn.create_sender("crash-q")
        while not stop.is_set():
            snd.send(Message(body=n, durable=True))  # returns once accepted (or raises)
            confirmed.append(n)
            n += 1
    except Exception:
        return


def test_sigkill_loses_no_confirmed_message(tmp_path: Path) -> None:
    rng = random.Random(1234)
    confirmed: list[int] = []
    next_id = 0
    port = 0
    for _round in range(4):
        proc, port = start(tmp_path, port)
        stop = threading.Event()
        t = threading.Thread(target=produce, args=(port, confirmed, next_id, stop), daemon=True)
        t.start()
        time.sleep(rng.uniform(0.3, 1.2))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        stop.set()
        t.join(10)
        next_id += 1_000_000  # ids from a killed round never collide with the next
    assert len(confirmed) > 50, "the producer should have had messages accepted"

    proc, port = start(tmp_path, port)
    try:
        conn = BlockingConnection(f"127.0.0.1:{port}", timeout=10)
        rcv = conn.create_receiver("crash-q", credit=500)
        received: list[int] = []
        while True:
            try:
                m = rcv.receive(timeout=2)
            except Exception:
                break
            received.append(m.body)
            rcv.accept()
        conn.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
    missing = set(confirmed) - set(received)
    assert not missing, f"{len(missing)} confirmed messages lost, e.g. {sorted(missing)[:5]}"
    assert len(received) == len(set(received)), "a message was delivered twice"
