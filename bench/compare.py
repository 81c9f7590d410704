"""One workload, several clients and brokers, measured side by side on this machine.

The workload (default): 200,000 messages of 100 bytes, one producer and one
consumer, at-least-once (the producer waits for ``accepted``; the consumer
accepts each message). Scenarios, each with a fresh broker:

    a  amqp10 client      -> amqp10 broker
    b  Proton Python      -> amqp10 broker
    c  Proton Python      -> Proton Python broker   (interop/proton_broker.py)
    d  Proton C           -> amqp10 broker
    e  Proton C           -> Proton C broker        (examples/c/broker.c)
    f1 amqp10 client      -> RabbitMQ (rabbitmq_amqp1_0)
    f2 Proton C           -> RabbitMQ

The Proton C pairings use ``bench/c/amqp10_bench_client.c``, this project's own
bench worker on Proton's C API (``libqpid-proton11-dev``), speaking the same line
protocol as the Python workers; Proton's stock ``broker.c`` is compiled from
Debian's ``libqpid-proton11-dev-examples``. Both are compiled into
``bench/.build/`` at run time. Missing pieces (no compiler, no Proton C, no
RabbitMQ) skip their scenarios with a note.

    .venv/bin/python bench/compare.py                      # the full run, writes bench/RESULTS.md
    .venv/bin/python bench/compare.py --count 20000 --no-write
    .venv/bin/python bench/compare.py --only a,d,e --rounds 3

The table gives msg/s, ratios to (c) and (e), latency percentiles and the
broker process's peak RSS (VmHWM); with ``--rounds N`` the scenarios run
interleaved N times and the median round is reported.
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
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from amqp10.cli.bench.harness import (  # noqa: E402
    BenchConfig,
    BenchError,
    BenchResult,
    BrokerProcess,
    WorkerSpec,
    our_worker,
    peak_rss,
    run_bench,
    start_our_broker,
    worker_argv,
)
from amqp10.cli.progress import Progress  # noqa: E402

BUILD = ROOT / "bench" / ".build"
C_SOURCES = ROOT / "bench" / "c"
EXAMPLES_C = Path("/usr/share/proton/examples/c")
RESULTS = ROOT / "bench" / "RESULTS.md"
BEGIN, END = "<!-- compare:begin -->", "<!-- compare:end -->"


# -------------------------------------------------------------------------------- clients


def proton_python_worker(
    role: str, index: int, url: str, cfg: BenchConfig, count: int
) -> WorkerSpec:
    argv = worker_argv([sys.executable, str(ROOT / "bench" / "proton_clients.py")], role, url, cfg, count)
    return WorkerSpec(argv, name=f"Proton Python {role}")


def proton_c_worker(role: str, index: int, url: str, cfg: BenchConfig, count: int) -> WorkerSpec:
    u = urlsplit(url)
    host, port = u.hostname or "127.0.0.1", str(u.port or 5672)
    presettled = "1" if cfg.settle == "at-most-once" else "0"
    program = str(BUILD / "amqp10_bench_client")
    if role == "producer":
        argv = [program, "send", host, port, cfg.address, str(count), str(cfg.size),
                presettled, "1" if cfg.durable else "0", str(cfg.credit)]  # fmt: skip
    else:
        argv = [program, "recv", host, port, cfg.address, str(count), str(cfg.credit), presettled]
    return WorkerSpec(argv, name=f"Proton C {role}")


CLIENTS: dict[str, tuple[str, Callable[..., WorkerSpec]]] = {
    "ours": ("amqp10 client", our_worker),
    "proton-py": ("Proton Python", proton_python_worker),
    "proton-c": ("Proton C", proton_c_worker),
}


def build_c(verbose: bool = False) -> str | None:
    """Compile the C clients and broker into bench/.build; None, or why not."""
    if not EXAMPLES_C.joinpath("broker.c").exists():
        return f"Proton's C examples are not installed ({EXAMPLES_C}: apt-get install libqpid-proton11-dev-examples)"
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return "no C compiler"
    client_c = C_SOURCES / "amqp10_bench_client.c"
    BUILD.mkdir(parents=True, exist_ok=True)
    jobs = [
        (BUILD / "amqp10_bench_client", client_c),
        (BUILD / "proton_c_broker", EXAMPLES_C / "broker.c"),
    ]
    for out, src in jobs:
        if out.exists() and out.stat().st_mtime >= src.stat().st_mtime:
            continue
        cmd = [cc, "-O2", "-w", "-o", str(out), str(src), "-lqpid-proton", "-lpthread"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["?"])[-1]
            return f"compiling {src.name} failed ({last}; apt-get install libqpid-proton11-dev)"
    return None


# -------------------------------------------------------------------------------- brokers


class _RabbitBroker:
    """RabbitMQ (interop/peers/rabbitmq.py) seen as a bench broker: pid is beam.smp's."""

    name = "RabbitMQ"

    def __init__(self, workdir: Path) -> None:
        from interop.peers.rabbitmq import RabbitMQ

        self.peer = RabbitMQ()
        why = self.peer.available()
        if why:
            raise BenchError(why)
        self.endpoint = self.peer.start(workdir, None)
        assert self.peer.proc is not None
        self.proc = self.peer.proc.proc
        self.tail: list[str] = []
        self.port = self.endpoint.port
        self.version = self.endpoint.version
        self._beam = _find_descendant(self.proc.pid, "beam.smp") or self.proc.pid

    @property
    def pid(self) -> int:
        return self._beam

    def peak_rss(self) -> int | None:
        return peak_rss(self._beam)

    def stop(self) -> None:
        self.peer.stop()


def _find_descendant(pid: int, name: str) -> int | None:
    children: dict[int, list[int]] = {}
    comm: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:
            continue
        p = int(entry)
        comm[p] = text[text.index("(") + 1 : text.rindex(")")]
        ppid = int(text.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(p)
    todo = [pid]
    while todo:
        p = todo.pop()
        if comm.get(p, "").startswith(name[:15]):
            return p
        todo.extend(children.get(p, []))
    return None


@contextlib.contextmanager
def broker_for(kind: str, workdir: Path) -> Iterator[tuple[Any, str, str]]:
    """Start a broker; yield (broker, url, address prefix)."""
    b: Any
    if kind == "ours":
        b = start_our_broker(str(workdir))
    elif kind == "proton-py":
        b = BrokerProcess(
            [sys.executable, "-m", "interop.proton_broker", "--port", "0"],
            name="Proton Python broker",
            cwd=str(ROOT),
        )
    elif kind == "proton-c":
        cwd = str(EXAMPLES_C) if EXAMPLES_C.is_dir() else None
        b = BrokerProcess(
            [str(BUILD / "proton_c_broker"), "127.0.0.1", "0"],
            name="Proton C broker (broker.c)",
            cwd=cwd,
        )
    elif kind == "rabbitmq":
        b = _RabbitBroker(workdir)
    else:
        raise ValueError(kind)
    try:
        port = b.port if kind == "rabbitmq" else b.wait_listening(30.0)
        prefix = "/queue/" if kind == "rabbitmq" else ""
        yield b, f"amqp://127.0.0.1:{port}", prefix
    finally:
        b.stop()


# -------------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Scenario:
    key: str
    client: str
    broker: str


SCENARIOS = [
    Scenario("a", "ours", "ours"),
    Scenario("b", "proton-py", "ours"),
    Scenario("c", "proton-py", "proton-py"),
    Scenario("d", "proton-c", "ours"),
    Scenario("e", "proton-c", "proton-c"),
    Scenario("f1", "ours", "rabbitmq"),
    Scenario("f2", "proton-c", "rabbitmq"),
]


@dataclass
class Outcome:
    scenario: Scenario
    client_label: str
    broker_label: str
    result: BenchResult | None = None
    error: str | None = None


def run_scenario(s: Scenario, base: BenchConfig, workdir: Path, *, progress: bool) -> Outcome:
    label, factory = CLIENTS[s.client]
    out = Outcome(s, label, s.broker)
    d = workdir / f"{s.key}-{os.urandom(3).hex()}"
    d.mkdir(parents=True)
    try:
        with broker_for(s.broker, d) as (broker, url, prefix):
            out.broker_label = getattr(broker, "version", None) or broker.name
            cfg = BenchConfig(**{**base.__dict__, "url": url, "address": prefix + base.address})
            bar = Progress(cfg.count, enabled=progress)
            if progress:
                sys.stderr.write(f"({s.key}) {label} -> {out.broker_label}\n")
            out.result = run_bench(
                cfg, worker=factory, broker=broker, broker_name=out.broker_label, progress=bar
            )
    except BenchError as exc:
        out.error = str(exc)
    except Exception as exc:  # a broker that would not start, etc.: report and go on
        out.error = f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return out


def _median_outcome(runs: list[Outcome]) -> Outcome:
    good = [o for o in runs if o.result is not None]
    if not good:
        return runs[-1]
    good.sort(key=lambda o: o.result.throughput if o.result else 0.0)
    return good[len(good) // 2]


# -------------------------------------------------------------------------------- output


def _fmt_rate(v: float | None) -> str:
    return "—" if v is None else f"{v:,.0f}"


def _fmt_ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "—"
    return f"{a / b:.2f}x"


def render_table(outcomes: list[Outcome], rounds: int) -> str:
    rate = {o.scenario.key: (o.result.throughput if o.result else None) for o in outcomes}
    rows = [
        "| | client → broker | msg/s | vs (c) | vs (e) | p50 ms | p99 ms | broker peak RSS | broker CPU µs/msg |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for o in outcomes:
        r = o.result
        k = o.scenario.key
        if r is None:
            rows.append(
                f"| ({k}) | {o.client_label} → {o.broker_label} | skipped: {o.error} | | | | | | |"
            )
            continue
        p50, p99 = r.latency(50), r.latency(99)
        rss = f"{r.broker_rss_kib / 1024:.1f} MiB" if r.broker_rss_kib else "—"
        cpu = f"{r.broker_cpu_s / r.received * 1e6:.0f}" if r.broker_cpu_s else "—"
        spread = ""
        if rounds > 1 and o.__dict__.get("all_rates"):
            rs = o.__dict__["all_rates"]
            spread = f" ({min(rs):,.0f} to {max(rs):,.0f})"
        rows.append(
            f"| ({k}) | {o.client_label} → {o.broker_label} | {_fmt_rate(r.throughput)}{spread} | "
            f"{_fmt_ratio(rate[k], rate.get('c'))} | {_fmt_ratio(rate[k], rate.get('e'))} | "
            f"{p50:.1f} | {p99:.1f} | {rss} | {cpu} |"
            if p50 is not None and p99 is not None
            else f"| ({k}) | {o.client_label} → {o.broker_label} | {_fmt_rate(r.throughput)} | | | | | {rss} | {cpu} |"
        )
    return "\n".join(rows)


def targets(outcomes: list[Outcome]) -> list[str]:
    rate = {o.scenario.key: (o.result.throughput if o.result else None) for o in outcomes}
    rounds = {o.scenario.key: o.__dict__.get("all_rates") or [] for o in outcomes}

    def check(name: str, a: str, b: str, factor: float) -> str:
        x, y = rate.get(a), rate.get(b)
        if x is None or y is None:
            return f"- {name}: not measured"
        ok = x >= factor * y
        line = f"- {name}: {x / y:.2f}x (medians) — {'met' if ok else 'NOT met'}"
        ra, rb = rounds.get(a, []), rounds.get(b, [])
        if len(ra) > 1 and len(ra) == len(rb):
            # the same round's pair ran back to back: the steadiest comparison
            per = [p / q for p, q in zip(ra, rb)]
            line += f"; round by round {', '.join(f'{r:.2f}x' for r in per)}"
            line += f" (met in {sum(r >= factor for r in per)} of {len(per)})"
        return line

    lines = [
        check("(a) ≥ 5x (c)", "a", "c", 5.0),
        check("(d) ≥ 0.5x (e)", "d", "e", 0.5),
    ]
    rabbit = rate.get("f2") or rate.get("f1")
    rkey = "f2" if rate.get("f2") else "f1"
    if rabbit is None:
        lines.append("- (d) ≥ 2x RabbitMQ: not measured")
    else:
        lines.append(check(f"(d) ≥ 2x RabbitMQ ({rkey})", "d", rkey, 2.0))
    return lines


def write_results(path: Path, section: str, begin: str = BEGIN, end: str = END) -> None:
    """Put ``section`` between the ``begin`` and ``end`` markers of ``path`` (appended the
    first time), leaving the rest of the file as it is."""
    text = path.read_text() if path.exists() else ""
    block = f"{begin}\n{section.rstrip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        tail = rest.split(end, 1)[1]
        text = head + block + tail
    else:
        text = (text.rstrip() + "\n\n" if text else "# Benchmark results\n\n") + block + "\n"
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument(
        "--count", type=int, default=200_000, help="messages per scenario (default 200000)"
    )
    p.add_argument("--size", type=int, default=100, help="body bytes (default 100)")
    p.add_argument("--settle", choices=["at-least-once", "at-most-once"], default="at-least-once")
    p.add_argument(
        "--credit", type=int, default=1000, help="consumer credit window / producer in-flight"
    )
    p.add_argument("--only", help="comma-separated scenario keys (a,b,c,d,e,f1,f2)")
    p.add_argument("--skip", help="comma-separated scenario keys to leave out")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the scenarios N times, interleaved; report medians",
    )
    p.add_argument(
        "--timeout", type=float, help="per scenario, seconds (default max(120, count/400))"
    )
    p.add_argument(
        "--no-write", action="store_true", help=f"do not update {RESULTS.relative_to(ROOT)}"
    )
    p.add_argument("--json", metavar="PATH", help="also write every number as JSON")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)

    chosen = SCENARIOS
    if args.only:
        keys = set(args.only.split(","))
        chosen = [s for s in SCENARIOS if s.key in keys]
    if args.skip:
        skip = set(args.skip.split(","))
        chosen = [s for s in chosen if s.key not in skip]
    timeout = args.timeout or max(120.0, args.count / 400)
    base = BenchConfig(
        count=args.count, size=args.size, settle=args.settle, credit=args.credit, timeout=timeout
    )

    notes: list[str] = []
    why_c = (
        build_c() if any(s.client == "proton-c" or s.broker == "proton-c" for s in chosen) else None
    )
    if why_c:
        notes.append(f"Proton C scenarios skipped: {why_c}")
    if not (ROOT / "interop" / "proton_broker.py").exists():
        notes.append("Proton Python broker missing (interop/proton_broker.py)")

    workdir = Path(tempfile.mkdtemp(prefix="amqp10-compare-"))
    runs: dict[str, list[Outcome]] = {s.key: [] for s in chosen}
    try:
        for rnd in range(args.rounds):
            for s in chosen:
                if why_c and "proton-c" in (s.client, s.broker):
                    runs[s.key].append(Outcome(s, CLIENTS[s.client][0], s.broker, error=why_c))
                    continue
                if not args.no_progress and args.rounds > 1:
                    sys.stderr.write(f"round {rnd + 1}/{args.rounds} ")
                o = run_scenario(s, base, workdir, progress=not args.no_progress)
                runs[s.key].append(o)
                if o.result is not None:
                    sys.stderr.write(f"({s.key}) {o.result.throughput:,.0f} msg/s\n")
                else:
                    sys.stderr.write(f"({s.key}) failed: {o.error}\n")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    outcomes = []
    for s in chosen:
        o = _median_outcome(runs[s.key])
        o.__dict__["all_rates"] = [x.result.throughput for x in runs[s.key] if x.result is not None]
        outcomes.append(o)

    command = "    " + shlex.join(
        [".venv/bin/python", "bench/compare.py", *(argv if argv is not None else sys.argv[1:])]
    )
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()
    try:
        import proton

        proton_version = ".".join(map(str, proton.VERSION))
    except Exception:
        proton_version = "?"
    head = [
        f"Measured {now} on this machine: {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"python-qpid-proton {proton_version}, load average before the run "
        f"{load[0]:.1f} (shared machine: compare ratios within one run, not across runs).",
        "",
        f"Workload: {args.count:,} messages of {args.size} bytes, 1 producer, 1 consumer, {args.settle}; "
        f"credit window {args.credit}; {args.rounds} round(s)"
        + (", median shown (range in brackets)" if args.rounds > 1 else "")
        + ".",
        "",
        "Command:",
        "",
        command,
        "",
    ]
    table = render_table(outcomes, args.rounds)
    section = "\n".join(
        [*head, table, "", "Targets:", "", *targets(outcomes), *(["", *notes] if notes else [])]
    )
    print(table)
    print()
    print("\n".join(targets(outcomes)))
    for n in notes:
        print(n)
    if not args.no_write:
        write_results(RESULTS, section)
        print(f"\nwritten to {RESULTS.relative_to(ROOT)}")
    if args.json:
        data = [
            {
                "key": o.scenario.key,
                "client": o.client_label,
                "broker": o.broker_label,
                "error": o.error,
                "rounds": o.__dict__.get("all_rates"),
                **(o.result.as_dict() if o.result else {}),
            }
            for o in outcomes
        ]
        Path(args.json).write_text(json.dumps(data, indent=2) + "\n")
    return 0 if all(o.result is not None for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
