"""How ``workers = 2`` spreads connections: SO_REUSEPORT slots against one shared socket.

    .venv/bin/python bench/workers_spread.py --connections 32 --rounds 3

Starts ``amqp10 broker --workers 2`` once with the
supervisor's SO_REUSEPORT slots and once with one socket shared by both workers (what
it does where SO_REUSEPORT does not balance), opens the connections all at once, then
one after another, and counts which worker took each (the ``amqp10:worker`` open
property). A measurement for docs/architecture.md, not a test.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading

import anyio

import amqp10
from amqp10.broker.amqp1.frontend import WORKER_PROPERTY

_RUNNER = """
import sys
import amqp10.io.net as net
net.REUSE_PORT_BALANCES = sys.argv[1] == "reuseport"
from amqp10.cli import main
sys.exit(main(sys.argv[2:]))
"""


def start(mode: str, data_dir: str) -> tuple[subprocess.Popen[str], int]:
    """The broker with 2 workers; its port once both listen."""
    env = dict(os.environ)
    argv = [sys.executable, "-c", _RUNNER, mode, "broker", "--port", "0", "--no-http",
            "--data-dir", data_dir, "--workers", "2"]  # fmt: skip
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    assert proc.stderr is not None
    port, up = 0, 0
    for line in proc.stderr:
        m = re.search(r"listening on 127\.0\.0\.1:(\d+) for", line)
        port = int(m[1]) if m else port
        up += "worker=" in line and "listening on" in line
        if up == 2:
            break
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    return proc, port


async def spread(port: int, connections: int, at_once: bool) -> dict[int, int]:
    """Open ``connections`` (at once, or each once the last is open); which worker took each."""
    seen: list[int] = []
    opened = anyio.Event()

    async def one() -> None:
        async with await amqp10.connect(f"amqp://127.0.0.1:{port}", timeout=30) as conn:
            seen.append(int((conn.remote_properties or {})[WORKER_PROPERTY]))
            if len(seen) == connections:
                opened.set()
            await opened.wait()

    async with anyio.create_task_group() as tg:
        for i in range(connections):
            tg.start_soon(one)
            while not at_once and len(seen) <= i:
                await anyio.sleep(0.001)
    return dict(sorted(collections.Counter(seen).items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    for mode in ("reuseport", "shared"):
        with tempfile.TemporaryDirectory() as data_dir:
            proc, port = start(mode, data_dir)
            try:
                for _ in range(args.rounds):
                    burst = anyio.run(spread, port, args.connections, True)
                    serial = anyio.run(spread, port, args.connections, False)
                    print(f"{mode:9}  at once {burst}  one after another {serial}", flush=True)
            finally:
                os.kill(proc.pid, signal.SIGTERM)
                proc.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
