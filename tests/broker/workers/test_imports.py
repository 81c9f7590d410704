"""Each module of the broker's workers, and each of the broker's own modules and packages,
can be the first of amqp10.broker a program imports (an import cycle breaks one of them only
when it comes first: ``import amqp10.broker.workers.remote`` did, through the 1.0 front end).

One subprocess (this checkout's ``amqp10``: ``-c`` puts the working directory first on
the path) imports the layers below the broker, then forks once per module: each child
imports its module first, in an interpreter that has none of amqp10.broker yet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]

_SCRIPT = """
import os, pkgutil, sys
import amqp10, amqp10.types, amqp10.transport, amqp10.sasl, amqp10.amqp091, amqp10.amqp010
import amqp10.io, amqp10.client, amqp10.message  # (below the broker: the children share them)
assert not [m for m in sys.modules if m.startswith("amqp10.broker")]
broker = os.path.join(os.path.dirname(amqp10.__file__), "broker")
names = ["amqp10.broker"]
names += ["amqp10.broker." + m.name for m in pkgutil.iter_modules([broker])]
names += ["amqp10.broker.workers." + m.name for m in pkgutil.iter_modules([os.path.join(broker, "workers")])]
for name in names[:200]:
    pid = os.fork()
    if pid == 0:
        try:
            __import__(name)
        except BaseException as exc:
            print(f"{name}: {exc!r}", flush=True)
            os._exit(1)
        os._exit(0)
    os.waitpid(pid, 0)
print(f"imported {len(names)}", flush=True)
"""


def test_each_broker_and_workers_module_imports_first_in_a_fresh_interpreter() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("imported ") and int(lines[-1].split()[1]) > 40  # (every one was tried)
    assert lines[:-1] == []  # none failed (each line: a module and its error)
