"""AMQP 0-10 next to 0-9-1 and 1.0: one broker (ours), one run, three clients.

Workloads (100-byte messages, one producer, one consumer, one queue each, on one broker
started once; the port serves every protocol):

    1.0     our client (``amqp10 bench``'s worker): at-least-once, credit 1000
    0-9-1   pika ``BlockingConnection``: publisher confirms (each publish waits for its
            confirm), prefetch 1000 and a ``basic_ack`` per message
    0-10    ``qpid.messaging`` (qpid-python 1.36 under Python 2.7, ``bench/qpid_clients.py``):
            sends with a capacity of 1000 transfers not yet completed (0-10's confirms),
            a receiver of capacity 1000 acknowledging each message

Reported per workload: msg/s (first send to last receive), the broker's CPU per message,
and each client's CPU per message, which says whether the client or the broker is the
bottleneck. ``--profile`` runs the broker under cProfile during the 0-10 workload alone
and prints its top functions (where the broker's time goes for 0-10).

    .venv/bin/python bench/amqp010_bench.py                       # writes bench/RESULTS.md
    .venv/bin/python bench/amqp010_bench.py --count 5000 --no-write --profile

It needs Python 2.7 (pyenv's, ``$QPID_PYTHON2``) and the qpid-python sdist, which
``interop/qpid_messaging.py`` fetches into ``interop/.build``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import pstats
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from amqp10.cli.bench.harness import (  # noqa: E402
    BenchConfig,
    BenchResult,
    BrokerProcess,
    WorkerSpec,
    our_worker,
    run_bench,
    start_our_broker,
    worker_argv,
)
from interop import qpid_messaging  # noqa: E402

QPID_CLIENTS = ROOT / "bench" / "qpid_clients.py"
PIKA_CLIENTS = ROOT / "bench" / "pika_clients.py"
RESULTS = ROOT / "bench" / "RESULTS.md"
BEGIN, END = "<!-- amqp010:begin -->", "<!-- amqp010:end -->"
HEADING = "## AMQP 0-10 next to 0-9-1 and 1.0 (bench/amqp010_bench.py)"


def qpid_worker(role: str, index: int, url: str, cfg: BenchConfig, count: int) -> WorkerSpec:
    argv = worker_argv([qpid_messaging.python2(), str(QPID_CLIENTS)], role, url, cfg, count)
    return WorkerSpec(
        argv, env={"PYTHONPATH": str(qpid_messaging.sdist())}, name=f"qpid.messaging {role}"
    )


def pika_worker(role: str, index: int, url: str, cfg: BenchConfig, count: int) -> WorkerSpec:
    return WorkerSpec(
        worker_argv([sys.executable, str(PIKA_CLIENTS)], role, url, cfg, count), name=f"pika {role}"
    )


WORKLOADS = [
    ("1.0", "our client", our_worker),
    ("0-9-1", "pika", pika_worker),
    ("0-10", "qpid.messaging", qpid_worker),
]


def per_msg_us(seconds: float | None, n: int) -> str:
    return "—" if not seconds or not n else f"{seconds / n * 1e6:.0f}"


def profiled_broker(workdir: str, out: str) -> BrokerProcess:
    """Our broker under cProfile (its stats written to ``out`` when it stops)."""
    b = start_our_broker(workdir)  # (for its config file), stopped at once
    b.stop()
    config = os.path.join(workdir, "bench-broker.toml")
    argv = [sys.executable, "-m", "cProfile", "-o", out, "-m", "amqp10.cli", "broker",
            "--port", "0", "--data-dir", workdir, "--config", config]  # fmt: skip
    return BrokerProcess(argv, name="amqp10 broker (cProfile)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--count", type=int, default=20000, help="messages (1.0)")
    p.add_argument("--slow-count", type=int, default=5000, help="messages (pika, qpid.messaging)")
    p.add_argument(
        "--profile", action="store_true", help="profile the broker during the 0-10 workload"
    )
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--results", type=Path, default=RESULTS, help="the RESULTS.md to write")
    args = p.parse_args(argv)
    rows: list[tuple[str, str, BenchResult]] = []
    with tempfile.TemporaryDirectory(prefix="amqp10-amqp010-bench-") as d:
        broker = start_our_broker(d)
        try:
            port = broker.wait_listening(30.0)
            for key, client, factory in WORKLOADS:
                count = args.count if key == "1.0" else args.slow_count
                cfg = BenchConfig(
                    count=count, url=f"amqp://127.0.0.1:{port}", address=f"bench-{key}"
                )
                r = run_bench(cfg, worker=factory, broker=broker, broker_name="amqp10")
                rows.append((key, client, r))
                sys.stderr.write(f"{key:6} {client:15} {r.throughput:8,.0f} msg/s\n")
        finally:
            broker.stop()
        profile = ""
        if args.profile:
            out = os.path.join(d, "broker.prof")
            pd = os.path.join(d, "profiled")
            os.mkdir(pd)
            b = profiled_broker(pd, out)
            try:
                port = b.wait_listening(30.0)
                cfg = BenchConfig(
                    count=args.slow_count, url=f"amqp://127.0.0.1:{port}", address="bench-prof"
                )
                run_bench(cfg, worker=qpid_worker, broker=b, broker_name="amqp10 (cProfile)")
            finally:
                b.stop(timeout=30.0)
            if os.path.exists(out):
                import io

                buf = io.StringIO()
                pstats.Stats(out, stream=buf).sort_stats("tottime").print_stats(15)
                profile = buf.getvalue()
                sys.stderr.write(profile)
    section = render(rows, args, profile)
    print(section)
    if not args.no_write:
        write(section, args.results)
    return 0


def render(rows: list[tuple[str, str, BenchResult]], args: argparse.Namespace, profile: str) -> str:
    when = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        BEGIN,
        HEADING,
        "",
        f"`python bench/amqp010_bench.py --count {args.count} --slow-count {args.slow_count}`, {when}: "
        "one broker (ours, one process), 100-byte messages, one producer and one consumer per "
        "protocol, run one after the other.",
        "",
        "| protocol | client | messages | msg/s | broker µs/msg | producer µs/msg | consumer µs/msg |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, client, r in rows:
        lines.append(
            f"| {key} | {client} | {r.received} | {r.throughput:,.0f} | {per_msg_us(r.broker_cpu_s, r.received)} "
            f"| {per_msg_us(r.producer_cpu_s, r.received)} | {per_msg_us(r.consumer_cpu_s, r.received)} |"
        )
    if profile:
        lines += ["", "The broker under cProfile during the 0-10 workload (top 15 by own time):", "", "```",
                  *[ln for ln in profile.strip().splitlines()[-22:]], "```"]  # fmt: skip
    lines.append(END)
    return "\n".join(lines)


def write(section: str, results: Path = RESULTS) -> None:
    text = results.read_text()
    if BEGIN in text and END in text:
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    results.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
