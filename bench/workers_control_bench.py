"""What one question between workers costs (``amqp10.broker.workers.control``).

    .venv/bin/python bench/workers_control_bench.py --questions 500

Both ends in one process (one event loop): a :class:`ControlPoint` answering a constant,
asked ``--questions`` times one after another, each a connection of its own as the
management of the whole broker asks. A measurement for docs/architecture.md, not a test.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

from amqp10.broker.workers.control import ControlPoint, ask, control_path


async def answer(op: str, args: Mapping[str, Any]) -> Any:
    return {"op": op}


async def measure(questions: int) -> float:
    """Milliseconds per question."""
    directory = Path(tempfile.mkdtemp(prefix="amqp10-control-"))
    point = ControlPoint(2, 1, directory, answer)
    path = control_path(directory, 1)
    async with anyio.create_task_group() as tg:
        await tg.start(point.run)
        for _ in range(20):  # warm up
            await ask(path, "bench", "echo", {})
        started = time.perf_counter()
        for _ in range(questions):
            await ask(path, "bench", "echo", {})
        elapsed = time.perf_counter() - started
        tg.cancel_scope.cancel()
    return elapsed / questions * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=500)
    args = parser.parse_args()
    print(f"{anyio.run(measure, args.questions):.2f} ms per question (both ends in one process)")


if __name__ == "__main__":
    main()
