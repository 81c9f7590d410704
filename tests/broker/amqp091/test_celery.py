"""Celery (from PyPI) against our broker over 0-9-1: real ``celery worker`` subprocesses
(py-amqp underneath, as Celery users run it) take tasks from the broker, send their results
back through it (the ``rpc://`` result backend: a reply queue per caller), retry failing
tasks, and a worker SIGKILLed in the middle of an ``acks_late`` task leaves it to the next
worker, which gets it redelivered and finishes it.

The tasks are in ``celery_app.py``. Every wait is bounded; nothing depends on timing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.broker.conftest import broker_with

from .celery_app import add, app, flaky, interrupted

T = 30.0
ROOT = Path(__file__).resolve().parents[3]


class Worker:
    """``celery -A tests.broker.amqp091.celery_app worker`` (solo pool: the task runs in the worker
    process itself, so killing that process kills the task) on ``queue``."""

    def __init__(self, env: dict[str, str], queue: str, name: str, logs: Path) -> None:
        self.log_path = logs / f"worker-{name}.log"
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable, "-m", "celery", "-A", "tests.broker.amqp091.celery_app", "worker",
                    "-P", "solo", "-Q", queue, "-n", f"{name}@localhost", "-l", "INFO",
                    "--without-mingle", "--without-gossip", "--without-heartbeat",
                ],
                env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        """Warm shutdown (SIGTERM: finish the current task, then exit), bounded."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


class Setup:
    def __init__(self, env: dict[str, str], scratch: Path) -> None:
        self.env = env
        self.scratch = scratch
        self.workers: list[Worker] = []

    def worker(self, queue: str, name: str) -> Worker:
        w = Worker(self.env, queue, name, self.scratch)
        self.workers.append(w)
        return w


@pytest.fixture(scope="module")
def celery_setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    base = tmp_path_factory.mktemp("celery")
    scratch = base / "scratch"
    scratch.mkdir()
    with broker_with(base) as b:
        url = f"amqp://guest:guest@{b.url}//"
        env = {**os.environ, "AMQP10_CELERY_BROKER": url, "AMQP10_CELERY_DIR": str(scratch)}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        os.environ["AMQP10_CELERY_DIR"] = str(scratch)
        app.conf.broker_url = url
        setup = Setup(env, scratch)
        try:
            yield setup
        finally:
            for w in setup.workers:
                w.stop()
            app.close()
            os.environ.pop("AMQP10_CELERY_DIR", None)


@pytest.fixture(scope="module")
def worker(celery_setup: Setup) -> Worker:
    return celery_setup.worker("celery", "main")


def result(r: Any, w: Worker) -> Any:
    try:
        return r.get(timeout=T)
    except Exception as exc:
        if type(exc).__name__ == "TimeoutError":
            raise AssertionError(f"no result in {T}s; the worker's log ends:\n{w.log()}") from exc
        raise


def test_tasks_run_and_their_results_come_back_through_the_broker(worker: Worker) -> None:
    assert result(add.delay(2, 3), worker) == 5
    pending = [add.delay(i, i) for i in range(20)]
    assert [result(r, worker) for r in pending] == [2 * i for i in range(20)]


def test_a_failing_task_retries_until_it_succeeds_or_gives_up(worker: Worker) -> None:
    assert result(flaky.delay(3), worker) == {"retries": 3}  # ran 4 times: 3 retries
    gives_up = flaky.delay(10)  # max_retries=5: the 6th failure is the result
    with pytest.raises(RuntimeError, match="failure 6"):
        result(gives_up, worker)
    assert gives_up.state == "FAILURE"


def test_a_worker_killed_mid_task_leaves_it_to_the_next(celery_setup: Setup) -> None:
    first = celery_setup.worker("kill", "first")
    r = interrupted.apply_async(("k1",), queue="kill")
    mark = celery_setup.scratch / "k1.started"
    deadline = time.monotonic() + T
    while not mark.exists():  # the first worker has taken the task and is running it
        assert time.monotonic() < deadline, f"the task did not start:\n{first.log()}"
        assert first.proc.poll() is None, f"the worker exited:\n{first.log()}"
        time.sleep(0.05)
    assert mark.read_text() == str(first.pid)
    first.kill()  # SIGKILL: no ack was sent (acks_late), the broker sees the socket close
    second = celery_setup.worker("kill", "second")
    done = result(r, second)
    assert done == {"finished_by": second.pid, "redelivered": True, "first_run": False}
