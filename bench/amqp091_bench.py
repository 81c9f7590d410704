"""AMQP 0-9-1: the same workloads through RabbitMQ 3.10 and the amqp10 broker, in one run.

Workloads (100-byte messages, one producer, one consumer, one queue):

    pika       pika BlockingConnection: publisher confirms (each basic_publish waits for
               its confirm), consumer with prefetch and a basic_ack per message
    c          rabbitmq-c (librabbitmq): no confirms, consumer with no-ack
    c-confirm  rabbitmq-c: publisher confirms (a window of --prefetch unconfirmed),
               consumer with prefetch and a basic_ack per message (--ack-every)
    c-persistent  as c-confirm, on a durable queue with persistent messages (delivery-mode
               2): every message stored before its confirm; against c-confirm, what
               durability costs each broker (issue 20)

The compiled client is ``bench/c/amqp091_bench_client.c``, the project's own worker on
librabbitmq's public headers, built into ``bench/.build/`` at run time; the pika
workers are ``bench/pika_clients.py``. Both speak the line protocol of
``amqp10 bench``'s workers, and the harness (``amqp10.cli.bench.harness``) measures:
msg/s (first send to last receive) and the broker's CPU per message (user + system,
from /proc; beam.smp for RabbitMQ).

Each round starts each broker once (alternating which goes first), runs every
workload against it on a queue of its own, and stops it. Reported: the median
over rounds, the ratio amqp10 / RabbitMQ of the medians and round by round, and the
issue's targets (pika >= 1x RabbitMQ, rabbitmq-c >= 0.7x).

It needs Debian's ``rabbitmq-server`` (RabbitMQ 3.10: run privately on 127.0.0.1, a
free port, a temporary directory: ``interop/peers/rabbitmq.py``), ``librabbitmq-dev``
and a C compiler; ``--install`` apt-gets the first two (as root)::

    apt-get install rabbitmq-server librabbitmq-dev        # or: --install
    .venv/bin/python bench/amqp091_bench.py                # full run, writes bench/RESULTS.md
    .venv/bin/python bench/amqp091_bench.py --rounds 1 --count 20000 --pika-count 2000 --no-write
    .venv/bin/python bench/amqp091_bench.py --brokers amqp10 --before /tmp/base  # A/B two trees

``--before DIR`` adds a third broker: amqp10 run from the source tree in DIR (the
directory holding a copy of the ``amqp10`` package), to measure a change before and
after in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import compare  # noqa: E402  (bench/compare.py: RabbitMQ as a bench broker, RESULTS.md sections)

from amqp10.cli.bench.harness import (  # noqa: E402
    BenchConfig,
    BenchError,
    BenchResult,
    WorkerSpec,
    run_bench,
    start_our_broker,
    worker_argv,
)
from amqp10.cli.progress import Progress  # noqa: E402

BUILD = ROOT / "bench" / ".build"
C_SOURCE = ROOT / "bench" / "c" / "amqp091_bench_client.c"
C_PROGRAM = BUILD / "amqp091_bench_client"
PIKA_CLIENTS = ROOT / "bench" / "pika_clients.py"
RESULTS = ROOT / "bench" / "RESULTS.md"
BEGIN, END = "<!-- amqp091:begin -->", "<!-- amqp091:end -->"
HEADING = "## AMQP 0-9-1 against RabbitMQ (bench/amqp091_bench.py)"
DEBIAN = ("rabbitmq-server", "librabbitmq-dev")
RABBITMQ, OURS, BEFORE = "RabbitMQ", "amqp10", "amqp10 before"


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    client: str  # "pika" or "c"
    settle: str  # at-least-once: confirms + manual acks; at-most-once: neither
    target: float | None  # the issue's: amqp10 >= target x RabbitMQ (None: no target)
    persistent: bool = False  # a durable queue and persistent messages (delivery-mode 2)


WORKLOADS = [
    Workload("pika", "pika, confirms + manual acks", "pika", "at-least-once", 1.0),
    Workload("c", "rabbitmq-c, no confirms, no-ack", "c", "at-most-once", 0.7),
    Workload("c-confirm", "rabbitmq-c, confirms + manual acks", "c", "at-least-once", 0.7),
    Workload(
        "c-persistent",
        "rabbitmq-c, confirms + manual acks, persistent messages, durable queue",
        "c",
        "at-least-once",
        None,
        persistent=True,
    ),
]


def pika_worker(role: str, index: int, url: str, cfg: BenchConfig, count: int) -> WorkerSpec:
    argv = worker_argv([sys.executable, str(PIKA_CLIENTS)], role, url, cfg, count)
    return WorkerSpec(argv, name=f"pika {role}")


def c_worker_for(ack_every: int, persistent: bool) -> Any:
    def c_worker(role: str, index: int, url: str, cfg: BenchConfig, count: int) -> WorkerSpec:
        u = urlsplit(url)
        host, port = u.hostname or "127.0.0.1", str(u.port or 5672)
        confirms = cfg.settle == "at-least-once"
        if role == "producer":
            argv = [str(C_PROGRAM), "send", host, port, cfg.address, str(count), str(cfg.size),
                    "1" if confirms else "0", str(cfg.credit), str(cfg.timeout), str(int(persistent))]  # fmt: skip
        else:
            argv = [str(C_PROGRAM), "recv", host, port, cfg.address, str(count), str(cfg.credit),
                    "0" if confirms else "1", str(ack_every), str(cfg.timeout), str(int(persistent))]  # fmt: skip
        return WorkerSpec(argv, name=f"rabbitmq-c {role}")

    return c_worker


def build_c() -> str | None:
    """Compile the rabbitmq-c worker into bench/.build; None, or why not."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return "no C compiler (apt-get install gcc)"
    if C_PROGRAM.exists() and C_PROGRAM.stat().st_mtime >= C_SOURCE.stat().st_mtime:
        return None
    BUILD.mkdir(parents=True, exist_ok=True)
    cmd = [cc, "-O2", "-Wall", "-o", str(C_PROGRAM), str(C_SOURCE), "-lrabbitmq"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        return f"compiling {C_SOURCE.name} failed ({last}; apt-get install librabbitmq-dev)"
    return None


@contextlib.contextmanager
def broker(kind: str, workdir: Path, before: Path | None) -> Iterator[tuple[Any, str, str]]:
    """Start one broker; yield (broker, its amqp:// URL, its name with version)."""
    if kind == RABBITMQ:
        with compare.broker_for("rabbitmq", workdir) as (b, url, _prefix):
            yield b, url, b.version.split(" (")[0]
        return
    env = None
    if kind == BEFORE:
        assert before is not None
        env = {**os.environ, "PYTHONPATH": str(before.resolve())}
    b = start_our_broker(str(workdir), env=env, name=kind)
    try:
        port = b.wait_listening(30.0)
        yield b, f"amqp://127.0.0.1:{port}", kind
    finally:
        b.stop()


@dataclass
class Cell:
    """One workload on one broker, over the rounds."""

    results: list[BenchResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    name: str = ""

    def rates(self) -> list[float]:
        return [r.throughput for r in self.results]

    def median_rate(self) -> float | None:
        return statistics.median(self.rates()) if self.results else None

    def median_cpu_us(self) -> float | None:
        cpus = [r.broker_cpu_s / r.received * 1e6 for r in self.results if r.broker_cpu_s]
        return statistics.median(cpus) if cpus else None


def run(
    args: argparse.Namespace, brokers: list[str], workloads: list[Workload]
) -> dict[tuple[str, str], Cell]:
    cells = {(w.key, b): Cell(name=b) for w in workloads for b in brokers}

    def factory(w: Workload) -> Any:
        return pika_worker if w.client == "pika" else c_worker_for(args.ack_every, w.persistent)

    workdir = Path(tempfile.mkdtemp(prefix="amqp10-amqp091-bench-"))
    try:
        for rnd in range(args.rounds):
            order = brokers if rnd % 2 == 0 else brokers[::-1]
            for kind in order:
                d = workdir / f"{rnd}-{kind.replace(' ', '-')}"
                d.mkdir(parents=True)
                try:
                    with broker(kind, d, args.before) as (b, url, name):
                        for w in workloads:
                            cell = cells[(w.key, kind)]
                            cell.name = name
                            count = args.pika_count if w.client == "pika" else args.count
                            cfg = BenchConfig(count=count, size=args.size, settle=w.settle,
                                              credit=args.prefetch, timeout=args.timeout,
                                              url=url, address=f"bench-{w.key}-{rnd}")  # fmt: skip
                            bar = Progress(count, enabled=not args.no_progress)
                            try:
                                r = run_bench(cfg, worker=factory(w), broker=b,
                                              broker_name=name, progress=bar)  # fmt: skip
                            except BenchError as exc:
                                cell.errors.append(str(exc))
                                sys.stderr.write(f"round {rnd + 1} {w.key} {name}: failed: {exc}\n")
                                continue
                            cell.results.append(r)
                            cpu = (r.broker_cpu_s or 0) / r.received * 1e6
                            sys.stderr.write(
                                f"round {rnd + 1} {w.key:9} {name:22} {r.throughput:9,.0f} msg/s"
                                f"  broker {cpu:5.1f} µs/msg\n"
                            )
                except Exception as exc:  # a broker that would not start: every cell says so
                    for w in workloads:
                        cells[(w.key, kind)].errors.append(f"{type(exc).__name__}: {exc}")
                    sys.stderr.write(f"round {rnd + 1} {kind}: {exc}\n")
                finally:
                    shutil.rmtree(d, ignore_errors=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return cells


def _ratio(a: float | None, b: float | None) -> str:
    return "—" if a is None or b is None or not b else f"{a / b:.2f}x"


def render(
    cells: dict[tuple[str, str], Cell], brokers: list[str], workloads: list[Workload], rounds: int
) -> list[str]:
    base = RABBITMQ if RABBITMQ in brokers else BEFORE if BEFORE in brokers else None
    rows = [
        f"| workload | broker | msg/s | vs {base or '—'} | broker CPU µs/msg | p50 ms |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for w in workloads:
        ref = cells[(w.key, base)].median_rate() if base else None
        for b in brokers:
            c = cells[(w.key, b)]
            rate = c.median_rate()
            if rate is None:
                why = c.errors[-1] if c.errors else "not run"
                rows.append(f"| {w.title} | {c.name or b} | failed: {why} | | | |")
                continue
            rs = c.rates()
            spread = f" ({min(rs):,.0f} to {max(rs):,.0f})" if rounds > 1 else ""
            cpu = c.median_cpu_us()
            p50 = statistics.median(x for x in (r.latency(50) for r in c.results) if x is not None)
            rows.append(
                f"| {w.title} | {c.name} | {rate:,.0f}{spread} | {_ratio(rate, ref)} | "
                f"{'—' if cpu is None else f'{cpu:.1f}'} | {p50:.1f} |"
            )
    return rows


def targets(
    cells: dict[tuple[str, str], Cell], brokers: list[str], workloads: list[Workload]
) -> list[str]:
    lines = []
    for w in workloads:
        if w.target is None:
            continue
        name = f"{w.title}: amqp10 ≥ {w.target:g}x RabbitMQ"
        if RABBITMQ not in brokers or OURS not in brokers:
            lines.append(f"- {name}: not measured")
            continue
        ours, theirs = cells[(w.key, OURS)], cells[(w.key, RABBITMQ)]
        a, b = ours.median_rate(), theirs.median_rate()
        if a is None or b is None:
            lines.append(f"- {name}: not measured")
            continue
        target = w.target
        line = f"- {name}: {a / b:.2f}x (medians) — {'met' if a >= target * b else 'NOT met'}"
        ra, rb = ours.rates(), theirs.rates()
        if len(ra) > 1 and len(ra) == len(rb):
            per = [x / y for x, y in zip(ra, rb)]
            line += f"; round by round {', '.join(f'{r:.2f}x' for r in per)}"
            line += f" (met in {sum(r >= target for r in per)} of {len(per)})"
        lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument(
        "--count", type=int, default=200_000, help="messages per rabbitmq-c run (default 200000)"
    )
    p.add_argument(
        "--pika-count", type=int, default=20_000, help="messages per pika run (default 20000)"
    )
    p.add_argument("--size", type=int, default=100, help="body bytes (default 100)")
    p.add_argument("--prefetch", type=int, default=1000,
                   help="consumer prefetch count and the C producer's confirm window (default 1000)")  # fmt: skip
    p.add_argument("--ack-every", type=int, default=1,
                   help="the C consumer acks every Nth delivery with multiple=true (default 1: each)")  # fmt: skip
    p.add_argument("--rounds", type=int, default=3, help="rounds, brokers alternating (default 3)")
    p.add_argument("--workloads", default=",".join(w.key for w in WORKLOADS),
                   help="comma-separated: pika,c,c-confirm,c-persistent (default all)")  # fmt: skip
    p.add_argument("--brokers", default="rabbitmq,amqp10", help="comma-separated: rabbitmq,amqp10")
    p.add_argument("--before", type=Path, metavar="DIR",
                   help="also run amqp10 from this source tree (holding an amqp10 package copy)")  # fmt: skip
    p.add_argument("--timeout", type=float, default=300.0, help="per run, seconds (default 300)")
    p.add_argument("--install", action="store_true",
                   help=f"apt-get install {' '.join(DEBIAN)} first (as root)")  # fmt: skip
    p.add_argument("--results", type=Path, default=RESULTS, help="the Markdown file to update")
    p.add_argument("--no-write", action="store_true", help="do not update the results file")
    p.add_argument("--json", metavar="PATH", help="also write every number as JSON")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)

    known = {w.key: w for w in WORKLOADS}
    unknown = [k for k in args.workloads.split(",") if k not in known]
    names = {"rabbitmq": RABBITMQ, "amqp10": OURS}
    bad = [b for b in args.brokers.split(",") if b not in names]
    if unknown or bad or args.rounds < 1 or args.ack_every < 1:
        p.error(f"unknown workload or broker: {', '.join(unknown + bad)}" if unknown or bad
                else "--rounds and --ack-every must be at least 1")  # fmt: skip
    if args.before is not None and not (args.before / "amqp10" / "__init__.py").exists():
        p.error(f"--before {args.before}: no amqp10 package there")
    workloads = [known[k] for k in args.workloads.split(",")]
    brokers = [names[b] for b in args.brokers.split(",")] + ([BEFORE] if args.before else [])

    if args.install:
        from interop.peers.base import PeerUnavailable, apt_install

        try:
            apt_install(*DEBIAN)
        except PeerUnavailable as exc:
            print(f"amqp091_bench: {exc}", file=sys.stderr)
            return 1
    notes = []
    if any(w.client == "c" for w in workloads):
        why = build_c()
        if why:
            notes.append(f"rabbitmq-c workloads skipped: {why}")
            workloads = [w for w in workloads if w.client != "c"]
    if RABBITMQ in brokers:
        from interop.peers.rabbitmq import RabbitMQ

        why = RabbitMQ().available()
        if why:
            notes.append(f"RabbitMQ skipped: {why}")
            brokers.remove(RABBITMQ)
    if not workloads or not brokers:
        print("amqp091_bench: nothing to run: " + "; ".join(notes), file=sys.stderr)
        return 1

    load = os.getloadavg()
    cells = run(args, brokers, workloads)
    load_after = os.getloadavg()
    command = shlex.join([".venv/bin/python", "bench/amqp091_bench.py",
                          *(argv if argv is not None else sys.argv[1:])])  # fmt: skip
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    head = [
        HEADING,
        "",
        f"Measured {now}: {os.cpu_count()} cores, Python {platform.python_version()}, pika "
        f"{_version('pika')}, load average {load[0]:.1f} before the run and {load_after[0]:.1f} "
        "after (a shared machine: compare within one run).",
        "",
        f"{args.count:,} messages (pika: {args.pika_count:,}) of {args.size} bytes, one producer "
        f"and one consumer; prefetch {args.prefetch} (the C producer's confirm window too); "
        f"the C consumer acks every {args.ack_every} message(s); {args.rounds} round(s), "
        "brokers alternating, median shown (range in brackets).",
        "",
        "Command:",
        "",
        "    " + command,
        "",
    ]
    section = [*head, *render(cells, brokers, workloads, args.rounds), "", "Targets:", "",
               *targets(cells, brokers, workloads), *(["", *notes] if notes else [])]  # fmt: skip
    text = "\n".join(section)
    print(text)
    if not args.no_write:
        compare.write_results(args.results, text, BEGIN, END)
        print(f"\nwritten to {args.results}")
    if args.json:
        data = [
            {"workload": w.key, "broker": cells[(w.key, b)].name or b,
             "errors": cells[(w.key, b)].errors,
             "runs": [r.as_dict() for r in cells[(w.key, b)].results]}
            for w in workloads for b in brokers
        ]  # fmt: skip
        Path(args.json).write_text(json.dumps(data, indent=2) + "\n")
    return 0 if all(c.results for c in cells.values()) else 1


def _version(module: str) -> str:
    try:
        return str(__import__(module).__version__)
    except Exception:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
