"""Where a message's broker CPU goes, by part of the broker, from a profile of a bench run.

    .venv/bin/python bench/profiles/profile_broker.py --client proton-c --count 60000 \
        --profiler py-spy --stats /tmp/p.spy
    .venv/bin/python bench/profiles/breakdown.py /tmp/p.spy --count 60000

A py-spy profile (raw samples of an unprofiled broker, every thread, full file names)
gives each sample to the part of its innermost frame (a built-in runs inside its
caller's frame); samples of threads waiting for work (``IDLE``) are left out.

Each function's own time and calls go to the part its module belongs to (``PARTS``,
first match of its path); a built-in's (``socket.send``, ``sqlite3`` calls, ``bytes``
methods) go to the part of the function that called it, edge by edge. Start-up (imports,
compiling, configuration) is left out. Calls per message are deterministic (they do not
depend on the machine's load); times are cProfile's, which inflates Python calls against
C ones: read the shares next to an unprofiled µs/msg.
"""

from __future__ import annotations

import argparse
import pstats
import sys
from collections import defaultdict

PARTS: list[tuple[str, tuple[str, ...]]] = [
    ("start-up", ("<frozen importlib", "importlib/", "pydantic", "typing.py", "dataclasses.py",
                  "enum.py", "/re/", "inspect.py", "argparse.py", "gettext.py", "pathlib.py",
                  "amqp10/cli/", "amqp10/broker/config", "tomllib", "<string>")),
    ("store", ("amqp10/broker/core/store", "amqp10/broker/core/committer", "sqlite3")),
    ("core", ("amqp10/broker/core/", "amqp10/broker/management", "amqp10/broker/alarms",
              "amqp10/broker/metrics", "amqp10/collector")),
    ("front end", ("amqp10/broker/amqp1/", "amqp10/broker/amqp091/", "amqp10/broker/amqp010/",
                   "amqp10/broker/frontend", "amqp10/broker/guard", "amqp10/broker/permissions",
                   "amqp10/broker/service", "amqp10/broker/")),
    ("engine + codec", ("amqp10/transport/", "amqp10/types/", "amqp10/message/", "amqp10/sasl/",
                        "amqp10/amqp091/", "amqp10/amqp010/")),
    ("driver + wake-ups", ("amqp10/io/", "anyio/", "asyncio/", "selectors.py", "socket.py",
                           "ssl.py", "threading.py", "contextlib.py", "sniffio")),
]  # fmt: skip
OTHER = "other"
IDLE = ("Condition.wait (", "_worker (", "select (", "EpollSelector.select (")
"""Innermost frames of a thread waiting (the store's thread pool, the event loop's poll)."""
BUILTIN_PART = {
    "{method 'execute'": "store",
    "{method 'executemany'": "store",
    "{method 'commit'": "store",
}


def part_of(filename: str, name: str) -> str | None:
    """The part a function belongs to; None for a built-in (its caller's part)."""
    if filename == "~":
        for prefix, part in BUILTIN_PART.items():
            if name.startswith(prefix) and "sqlite3" in name:
                return part
        if name.startswith(("<built-in method builtins.compile", "<built-in method builtins.exec",
                            "<built-in method builtins.__import__", "<built-in method _imp.")):  # fmt: skip
            return "start-up"
        return None
    for part, needles in PARTS:
        if any(n in filename for n in needles):
            return part
    return OTHER


def breakdown(stats: pstats.Stats) -> tuple[dict[str, float], dict[str, int]]:
    """Own time and calls per part."""
    raw = stats.stats  # type: ignore[attr-defined]
    time: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    parts: dict[tuple[str, int, str], str | None] = {f: part_of(f[0], f[2]) for f in raw}

    def resolve(func: tuple[str, int, str], depth: int = 0) -> dict[str, float]:
        """A built-in's share of each part, by the time its callers spent in it."""
        part = parts[func]
        if part is not None or depth > 4:
            return {part or OTHER: 1.0}
        callers = raw[func][4]
        total = sum(edge[2] for edge in callers.values()) or 1.0
        share: dict[str, float] = defaultdict(float)
        for caller, edge in callers.items():
            for p, s in resolve(caller, depth + 1).items():
                share[p] += s * (edge[2] or total / max(len(callers), 1)) / total
        return share or {OTHER: 1.0}

    for func, (_cc, nc, tt, _ct, _callers) in raw.items():
        for p, s in resolve(func).items():
            time[p] += tt * s
            calls[p] += round(nc * s)
    return time, calls


def spy_breakdown(path: str, rate: int) -> tuple[dict[str, float], dict[str, int]]:
    """Seconds and samples per part, from py-spy's raw output (``-f raw`` at ``rate`` Hz)."""
    time: dict[str, float] = defaultdict(float)
    samples: dict[str, int] = defaultdict(int)
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            leaf = stack.rsplit(";", 1)[-1]
            if leaf.startswith(IDLE) and "amqp10/" not in leaf:
                continue
            name, _, where = leaf.partition(" (")
            part = part_of(where.rsplit(":", 1)[0], name) or OTHER
            samples[part] += int(n)
            time[part] += int(n) / rate
    return time, samples


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument(
        "stats",
        nargs="+",
        help="profiles (profile_broker.py --stats): *.prof is cProfile's, else py-spy's raw",
    )
    ap.add_argument("--count", type=int, required=True, help="messages the profiled run moved")
    ap.add_argument("--rate", type=int, default=200, help="py-spy's samples a second")
    args = ap.parse_args(argv)
    for path in args.stats:
        spy = not path.endswith((".prof", ".pstats"))
        time, calls = spy_breakdown(path, args.rate) if spy else breakdown(pstats.Stats(path))
        work = {p: t for p, t in time.items() if p != "start-up"}
        total = sum(work.values())
        per_msg = total / args.count * 1e6
        print(f"{path}: {total:.2f} s profiled ({per_msg:.1f} µs/msg), start-up left out")
        what = "samples" if spy else "calls/msg"
        print(f"| part | share | profiled µs/msg | {what} |")
        print("|---|---:|---:|---:|")
        for p, t in sorted(work.items(), key=lambda kv: -kv[1]):
            n = str(calls[p]) if spy else f"{calls[p] / args.count:.1f}"
            print(f"| {p} | {t / total:.0%} | {t / args.count * 1e6:.1f} | {n} |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
