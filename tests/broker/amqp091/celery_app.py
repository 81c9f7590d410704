"""The Celery app of tests/broker/amqp091/test_celery.py: its worker subprocesses import it (``-A``).

The broker URL and a scratch directory come from the environment, so the test process
and its workers share them: ``AMQP10_CELERY_BROKER`` (``amqp://127.0.0.1:PORT//``) and
``AMQP10_CELERY_DIR`` (where tasks leave marks the test reads).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from celery import Celery

app = Celery("amqp10_test", broker=os.environ.get("AMQP10_CELERY_BROKER", "amqp://127.0.0.1//"))
app.conf.update(
    result_backend="rpc://",  # results travel back through the broker, to the caller's reply queue
    task_acks_late=True,  # acknowledged once done: a worker lost mid-task leaves it to another
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)

BLOCK_SECONDS = 60.0  # how long the first run of ``interrupted`` waits to be killed


def _scratch() -> Path:
    return Path(os.environ["AMQP10_CELERY_DIR"])


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task(bind=True, max_retries=5)
def flaky(self: Any, fail_times: int) -> dict[str, int]:
    """Raises (and retries) ``fail_times`` times, then returns how often it ran."""
    if self.request.retries < fail_times:
        raise self.retry(exc=RuntimeError(f"failure {self.request.retries + 1}"), countdown=0)
    return {"retries": self.request.retries}


@app.task(bind=True)
def interrupted(self: Any, name: str) -> dict[str, Any]:
    """The first run marks that it started (with its worker's pid) and waits to be killed;
    a run that finds the mark (the redelivered message) finishes."""
    mark = _scratch() / f"{name}.started"
    redelivered = bool((self.request.delivery_info or {}).get("redelivered"))
    if not mark.exists():
        mark.write_text(str(os.getpid()))
        deadline = time.monotonic() + BLOCK_SECONDS
        while time.monotonic() < deadline:  # bounded: the test kills this worker long before
            time.sleep(0.05)
        return {"finished_by": os.getpid(), "redelivered": redelivered, "first_run": True}
    return {"finished_by": os.getpid(), "redelivered": redelivered, "first_run": False}
