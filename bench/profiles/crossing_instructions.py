"""The broker's machine instructions per message, local and crossing, counted by callgrind.

``bench/internal_link_bench.py`` times the broker's calls in thread CPU time, which a
shared machine's neighbours move by a third from one run to the next (2026-12-02: a
local 0-9-1 message read 7.2 to 12.7 µs in one hour, the code unchanged). Instructions
do not move: this runs the same workloads under ``valgrind --tool=callgrind`` and counts,
for each, the instructions inside the broker's entry points the bench's driver calls
(the front end's ``handle`` and ``receive_data``, the internal link's ``data_received``
and ``_flush``): their inclusive cost at two message counts, the difference over the
difference in messages, so start-up, imports and the set-up of the links drop out.
The entry points are the compiled build's (mypyc's ``CPyPy_`` wrappers): run it on a
compiled tree (``make compiled``); on a pure one only the process total is counted.

    .venv/bin/python bench/profiles/crossing_instructions.py --trees /tmp/a /tmp/b \\
        --protocols 0-9-1 1.0 0-9-1-noack

Each tree is a checkout holding the ``amqp10`` package (put first on PYTHONPATH) and a
``.venv``; its runs go two at a time. Needs valgrind (Debian's ``valgrind``); about a
minute a run.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ENTRY = (
    "CPyPy_amqp091___handler___Amqp091Handler___handle",
    "CPyPy_broker___amqp091___connection___BrokerConnection___receive_data",
    "CPyPy_amqp10___amqp091___connection___Connection___poll_events",
    "CPyPy_amqp1___handler___ConnectionHandler___handle",
    "CPyPy_transport___connection___Connection___receive_data",
    "CPyPy_workers___link___InternalLink___data_received",
    "CPyPy_workers___link___InternalLink____flush",
)
"""What the bench's driver calls into the broker (bench/internal_link_bench.py's ``side``,
bench/profiles/counts.py's ``pump``); none of them calls another through its wrapper. The
1.0 clients' engine is the broker's class (:data:`CLIENTS` takes theirs out)."""
MODES = ("local", "crossing", "publish")
_LINE = re.compile(r"\s*([\d,]+) \([ \d.]+%\)\s+\S*?:(\S+) \[")
_TOTAL = re.compile(r"([\d,]+) \(100.0%\)\s+PROGRAM TOTALS")


def one(protocol: str, mode: str, n: int) -> None:
    """Run one workload (under callgrind, from :func:`measure`)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import internal_link_bench as bench

    from amqp10.cli.broker import _tune_gc

    _tune_gc()
    if protocol == "1.0":
        import amqp10.transport as transport

        engine = transport.Connection

        class Client:
            """A client of the bench, its ``receive_data`` through ``functools.partial``: the
            engine's wrapper is the broker's too, and callgrind tells the partial's apart."""

            def __init__(self, name: str) -> None:
                self._conn = engine(name)
                self.receive_data = functools.partial(engine.receive_data, self._conn)

            def __getattr__(self, name: str) -> Any:
                return getattr(self._conn, name)

        def made(name: str, **kw: Any) -> Any:  # (the broker's end: send_header=False)
            return engine(name, **kw) if kw else Client(name)

        transport.Connection = made  # type: ignore[misc,assignment]  # (run() imports it at each call)
        bench.run(n, mode, False)
    else:
        bench.run_091(n, mode, False, confirm=protocol == "0-9-1")


CLIENTS = "partial_vectorcall"
"""The 1.0 clients' receive (:func:`one`): taken from the engine's, which counts both."""


def _costs(path: Path) -> tuple[dict[str, int], int]:
    out = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = {}
    for line in out.splitlines():
        m = _LINE.match(line)
        if m and (m.group(2) in ENTRY or m.group(2) == CLIENTS):
            found[m.group(2)] = int(m.group(1).replace(",", ""))
    total = _TOTAL.search(out)
    return found, int(total.group(1).replace(",", "")) if total else 0


def measure(tree: Path, protocol: str, mode: str, n: int, out: Path) -> tuple[dict[str, int], int]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    env.pop(
        "PYTHONDONTWRITEBYTECODE", None
    )  # (start-up under valgrind: bytecode compiled once, not each run)
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            str(tree / ".venv/bin/python"),
            str(Path(__file__).resolve()),
            "--one",
            protocol,
            mode,
            str(n),
        ],
        cwd=tree,
        env=env,
        check=True,
        capture_output=True,
    )
    return _costs(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trees", type=Path, nargs="+", default=[Path(".")])
    p.add_argument(
        "--protocols", nargs="+", default=["0-9-1"], choices=("1.0", "0-9-1", "0-9-1-noack")
    )
    p.add_argument("--n", type=int, nargs=2, default=(2000, 6000), help="the two message counts")
    p.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        one(args.one[0], args.one[1], int(args.one[2]))
        return 0
    low, high = args.n
    runs = [
        (t.resolve(), proto, mode, n)
        for t in args.trees
        for proto in args.protocols
        for mode in MODES
        for n in (low, high)
    ]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(2) as pool:
        done = 0

        def job(run: tuple[Path, str, str, int]) -> tuple[dict[str, int], int]:
            nonlocal done
            tree, proto, mode, n = run
            result = measure(tree, proto, mode, n, Path(tmp) / f"{len(str(tree))}-{hash(run)}.out")
            done += 1
            print(f"[{done}/{len(runs)}] {tree} {proto} {mode} {n}", file=sys.stderr, flush=True)
            return result

        results = dict(zip(runs, pool.map(job, runs), strict=True))
    for tree in args.trees:
        tree = tree.resolve()
        for proto in args.protocols:
            per: dict[str, tuple[float, float]] = {}
            for mode in MODES:
                a, b = results[(tree, proto, mode, low)], results[(tree, proto, mode, high)]
                broker = sum(b[0].get(k, 0) - a[0].get(k, 0) for k in ENTRY)
                if proto == "1.0":
                    broker -= b[0].get(CLIENTS, 0) - a[0].get(CLIENTS, 0)
                broker /= high - low
                per[mode] = (broker, (b[1] - a[1]) / (high - low))
            local = per["local"][0]
            line = " ".join(f"{m} {v[0]:,.0f}" for m, v in per.items())
            ratios = (
                " ".join(f"{m}/local {per[m][0] / local:.3f}x" for m in MODES[1:]) if local else ""
            )
            print(f"{tree} {proto}: broker instructions/msg {line}; {ratios}")
            print(
                "    process instructions/msg "
                + " ".join(f"{m} {v[1]:,.0f}" for m, v in per.items())
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
