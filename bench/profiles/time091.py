"""The broker's CPU per 0-9-1 message in process, two trees alternated: ``counts.run_091``
with a thread-CPU timer in place of the profiler (the broker side only).

    .venv/bin/python bench/profiles/time091.py --ab /tmp/base . --n 20000 --rounds 4

Each round runs A then B, each in a fresh process, both workloads (no confirms with a
no-ack consumer; confirms and a basic.ack each); it prints each run's µs a message and the
medians. Timings on a shared machine move: read them next to ``uptime``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


class _Timer:
    """The profiler interface run_091 drives: sums thread CPU time between enable and disable."""

    def __init__(self) -> None:
        self.total = 0.0
        self._start = 0.0

    def enable(self) -> None:
        self._start = time.thread_time()

    def disable(self) -> None:
        self.total += time.thread_time() - self._start

    def clear(self) -> None:
        self.total = 0.0


def one(n: int, confirm: bool) -> float:
    """µs of broker CPU a message, in this process's tree."""
    sys.path.insert(0, str(HERE))
    from counts import run_091

    timer = _Timer()
    run_091(n, confirm, timer)
    return timer.total / n * 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--ab", nargs=2, metavar=("A", "B"), required=True)
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(one(int(args.one[0]), args.one[1] == "confirm"))
        return 0
    got: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for tree in args.ab:
            for mode in ("no-confirm", "confirm"):
                env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
                out = subprocess.run(
                    [sys.executable, __file__, "--ab", *args.ab, "--one", str(args.n), mode],
                    env=env, capture_output=True, text=True, check=True, cwd="/",
                )  # fmt: skip
                us = float(out.stdout)
                got.setdefault((tree, mode), []).append(us)
                print(f"round {r + 1} {tree:24} {mode:10} {us:6.2f} µs/msg", flush=True)
    a, b = args.ab
    for mode in ("no-confirm", "confirm"):
        ma, mb = (statistics.median(got[t, mode]) for t in args.ab)
        print(f"{mode:10} median {ma:6.2f} -> {mb:6.2f} µs/msg ({mb / ma:.3f})  [{a} -> {b}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
