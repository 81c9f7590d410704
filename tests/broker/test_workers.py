"""``workers`` > 1: the supervisor and its worker processes, as real processes on 127.0.0.1.

Each worker says which it is in its open frame's properties (``amqp10:worker``), so a
client can tell who served it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import anyio
import pytest

import amqp10
from amqp10.broker.amqp1.frontend import WORKER_PROPERTY
from amqp10.broker.config import ConfigError, load_config
from amqp10.broker.workers.supervisor import cpu_for, worker_config
from amqp10.cli._common import KeyValueFormatter
from amqp10.errors import ConnectError
from amqp10.io.net import REUSE_PORT_BALANCES, bind_for_workers
from tests.broker.conftest import make_config

pytestmark = pytest.mark.slow

WAIT = 30.0  # the bound of every wait here (a loaded machine); none is a timed assertion


class Parent:
    """``amqp10 broker --workers N`` in a session of its own; its log lines as they come."""

    def __init__(self, data_dir: Path, workers: int = 2, args: Sequence[str] = ("--no-http",)) -> None:
        """``args``: more of ``amqp10 broker``'s arguments (a config, the HTTP port)."""
        self._start(["--port", "0", *args, "--data-dir", str(data_dir)], workers)

    @classmethod
    def of_config(cls, config_file: Path, workers: int = 2, *, wait: bool = True) -> Parent:
        """``amqp10 broker --config FILE --workers N``: the file names the listeners and the store.
        ``wait=False``: return at once (a standby binds only once it is active: :meth:`wait_port`)."""
        p = cls.__new__(cls)
        p._start(["--config", str(config_file)], workers, wait=wait)
        return p

    def _start(self, args: Sequence[str], workers: int, *, wait: bool = True) -> None:
        self.workers = workers
        args = [*args, "--workers", str(workers)]
        env = dict(os.environ)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "amqp10.cli", "broker", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.port = 0
        if wait:
            self.wait_port()

    def wait_port(self) -> None:
        """Until the parent has bound its port (``port``)."""
        self.port = int(self.wait_for(r"listening on 127\.0\.0\.1:(\d+) for")[1])

    def wait_listening(self) -> None:
        """Until each worker listens (the parent's own line comes before theirs)."""
        for k in range(self.workers):
            self.wait_for(rf"worker={k} logger=amqp10.broker msg=.listening on")

    def _read(self) -> None:
        assert self.proc.stderr is not None
        with self.proc.stderr:
            for line in self.proc.stderr:
                with self._changed:
                    self.lines.append(line.rstrip())
                    self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, pattern: str, after: int = 0) -> re.Match[str]:
        """The first log line from index ``after`` on that matches ``pattern``."""
        deadline = time.monotonic() + WAIT
        with self._changed:
            while True:
                for line in self.lines[after:]:
                    m = re.search(pattern, line)
                    if m:
                        return m
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reading()):
                    raise AssertionError(f"no log line like {pattern!r}; last: {self.lines[-5:]}")
                self._changed.wait(min(left, 0.5))

    def _reading(self) -> bool:
        return self.proc.stderr is not None and not self.proc.stderr.closed

    def worker_pids(self) -> dict[int, int]:
        """The pid of each worker, as the latest "worker N started" lines say."""
        pids: dict[int, int] = {}
        with self._changed:
            for line in self.lines:
                m = re.search(r"worker (\d+) started \(pid (\d+)\)", line)
                if m:
                    pids[int(m[1])] = int(m[2])
        return pids

    def serving_worker(self) -> int:
        """Connect once; which worker served the connection."""

        async def ask() -> int:
            async with await amqp10.connect(f"amqp://127.0.0.1:{self.port}", timeout=WAIT) as conn:
                return int((conn.remote_properties or {})[WORKER_PROPERTY])

        return anyio.run(ask)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(WAIT)


@pytest.fixture
def parent(tmp_path: Path) -> Iterator[Parent]:
    p = Parent(tmp_path)
    try:
        yield p
    finally:
        p.stop()


def gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie that no one reaped yet counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_until_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + WAIT
    while not all(gone(p) for p in pids):
        assert time.monotonic() < deadline, f"still running: {[p for p in pids if not gone(p)]}"
        time.sleep(0.05)


def test_a_bad_workers_value_names_the_field(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "amqp10.cli", "broker", "--port", "0", "--data-dir", str(tmp_path), "--workers", "0"],
        capture_output=True, text=True, timeout=WAIT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.startswith("amqp10 broker: workers:") and r.stderr.count("\n") == 1


def test_publishers_apart_without_moved_connections_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"^publishers_apart: .*needs move_connections = true"):
        load_config(publishers_apart=True)
    assert load_config(publishers_apart=True, move_connections=True).publishers_apart


def test_the_config_model_and_what_each_worker_gets(tmp_path: Path) -> None:
    assert load_config().workers == 1
    assert load_config(workers="auto").worker_count() >= 1
    assert load_config(workers="3").worker_count() == 3
    one = load_config(store={"path": str(tmp_path / "amqp10.sqlite3")})
    three = one.model_copy(update={"workers": 3})
    on_postgresql = load_config(
        workers=3, store={"backend": "postgresql", "dsn": "host=127.0.0.1 dbname=x options='-c work_mem=8MB'"}
    )
    conninfo_to_dict = pytest.importorskip("psycopg.conninfo").conninfo_to_dict
    dsn = conninfo_to_dict(worker_config(on_postgresql, 2).store.dsn or "")  # a schema of its own
    assert dsn["options"] == "-c work_mem=8MB -c search_path=amqp10_w2" and dsn["dbname"] == "x"
    paths = {worker_config(three, i).store.path for i in (0, 1, 2)}
    assert paths == {tmp_path / f"amqp10.worker{i}.sqlite3" for i in (0, 1, 2)}
    assert worker_config(three, 2).listeners == three.listeners


def test_the_parent_binds_one_port_for_every_slot() -> None:
    bound = bind_for_workers("127.0.0.1", 0, 3)
    try:
        assert len(bound) == 3 and all(len(socks) == 1 for socks in bound)
        ports = {socks[0].getsockname()[1] for socks in bound}
        assert len(ports) == 1 and ports != {0}
        distinct = {id(socks[0]) for socks in bound}
        assert len(distinct) == (3 if REUSE_PORT_BALANCES else 1)
        with pytest.raises(ConnectError, match=r"cannot listen on 127\.0\.0\.1:"):
            bind_for_workers("127.0.0.1", ports.pop(), 1)  # taken: no joining a group
    finally:
        for sock in {id(s): s for socks in bound for s in socks}.values():
            sock.close()


def test_log_lines_carry_the_worker() -> None:
    import logging

    record = logging.LogRecord("amqp10.broker", logging.INFO, __file__, 1, "hello", None, None)
    assert " worker=2 logger=amqp10.broker " in KeyValueFormatter(worker=2).format(record)
    assert "worker=" not in KeyValueFormatter().format(record)


def test_two_workers_serve_one_port_a_killed_one_comes_back_and_sigterm_stops_all(
    parent: Parent,
) -> None:
    seen: set[int] = set()
    for _ in range(64):  # the kernel hashes each connection to a worker: both show up soon
        seen.add(parent.serving_worker())
        if seen == {0, 1}:
            break
    assert seen == {0, 1}

    first = parent.worker_pids()
    assert sorted(first) == [0, 1]
    mark = len(parent.lines)
    os.kill(first[1], signal.SIGKILL)
    died = parent.wait_for(
        r"worker 1 \(pid (\d+)\) ended after .* \(killed by SIGKILL\): restarting it in", mark
    )
    assert int(died[1]) == first[1]
    restarted = parent.wait_for(r"worker 1 started \(pid (\d+)\)", mark)
    assert int(restarted[1]) != first[1]
    parent.wait_for(r"worker=1 logger=amqp10.broker msg=.listening on", mark)
    served_by_1 = False
    for _ in range(64):  # worker 1 serves again (worker 0 was never interrupted)
        if parent.serving_worker() == 1:
            served_by_1 = True
            break
    assert served_by_1

    pids = list(parent.worker_pids().values())
    assert first[0] in pids
    parent.proc.send_signal(signal.SIGTERM)
    assert parent.proc.wait(WAIT) == 0
    wait_until_gone(pids)
    assert sum("stopped: exit code 0" in line for line in parent.lines) == 2


def test_cpu_for_takes_the_allowed_cpus_in_order_round_again() -> None:
    assert [cpu_for(i, {5, 1, 3}) for i in range(5)] == [1, 3, 5, 1, 3]


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="CPU affinity is Linux's")
def test_pinned_workers_are_each_bound_to_their_cpu_a_restarted_one_too(tmp_path: Path) -> None:
    from tests.broker.workers_mode import write_config  # (it imports this module)

    config = make_config(tmp_path, pin_workers=True)
    p = Parent.of_config(write_config(config, tmp_path / "broker.toml"), 2)
    try:
        p.wait_listening()
        allowed = os.sched_getaffinity(0)
        pids = p.worker_pids()
        for i in (0, 1):
            assert os.sched_getaffinity(pids[i]) == {cpu_for(i, allowed)}
            p.wait_for(rf"worker {i} bound to CPU {cpu_for(i, allowed)}")
        mark = len(p.lines)
        os.kill(pids[1], signal.SIGKILL)
        again = int(p.wait_for(r"worker 1 started \(pid (\d+)\)", mark)[1])
        p.wait_for(r"worker=1 logger=amqp10.broker msg=.listening on", mark)
        assert os.sched_getaffinity(again) == {cpu_for(1, allowed)}
    finally:
        p.stop()
    plain = Parent(tmp_path / "plain")  # pin_workers off: the kernel's to place
    try:
        plain.wait_listening()
        assert not any("bound to CPU" in line for line in plain.lines)
        assert os.sched_getaffinity(plain.worker_pids()[0]) == os.sched_getaffinity(0)
    finally:
        plain.stop()


def test_the_workers_stop_when_the_parent_is_sigkilled(parent: Parent) -> None:
    parent.wait_for(r"worker=0 logger=amqp10.broker msg=.listening on")
    parent.wait_for(r"worker=1 logger=amqp10.broker msg=.listening on")
    pids = list(parent.worker_pids().values())
    assert len(pids) == 2
    parent.proc.send_signal(signal.SIGKILL)
    parent.proc.wait(WAIT)
    wait_until_gone(pids)  # each asked the kernel for SIGTERM when its parent dies
    parent.wait_for(r"worker=0 logger=amqp10.broker msg=.broker stopped")  # gracefully
    parent.wait_for(r"worker=1 logger=amqp10.broker msg=.broker stopped")


def test_ctrl_c_on_the_terminal_stops_every_worker_once_and_cleanly(parent: Parent) -> None:
    parent.wait_for(r"worker=0 logger=amqp10.broker msg=.listening on")
    parent.wait_for(r"worker=1 logger=amqp10.broker msg=.listening on")
    os.killpg(parent.proc.pid, signal.SIGINT)  # what a terminal does: the foreground group
    assert parent.proc.wait(WAIT) == 0
    assert sum("stopped: exit code 0" in line for line in parent.lines) == 2
