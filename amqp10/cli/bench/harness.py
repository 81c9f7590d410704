"""``amqp10 bench``: throughput and latency of a broker under N producers and M consumers.

The run is a set of processes: a broker (ours, started here, unless ``--url``
names one), M consumers and N producers, each a separate Python process using
the amqp10 client. Every message body carries the producer's send time
(``CLOCK_MONOTONIC``, shared by all processes of the machine), so a consumer
measures each message's latency. The run is bounded: it ends when the
consumers have received ``--count`` messages, or fails after ``--timeout``
seconds, with one line on stderr.

Workers speak a line protocol, so that other clients (Proton's Python binding,
Proton's C examples: see ``bench/compare.py``) can be driven by the same
harness. On stdout a worker prints::

    ready                  attached, waiting for "go" on stdin (producers) or for messages
    n <count>              progress: messages sent (producers) or received (consumers) so far
    done <json>            finished: {"count", "first_ns", "last_ns"[, "lat_us": [...]]}
    error <text>           failed (one line)

and reads from stdin ``go`` (producers: start sending) or ``stop`` (consumers:
the others together received everything; also on EOF).

The message body is one ``data`` section of ``--size`` bytes: the send time in
nanoseconds (8 bytes, big-endian), the message's sequence number (8 bytes),
then padding.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import queue
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from ..progress import Progress

__all__ = [
    "BenchConfig",
    "BenchError",
    "BenchResult",
    "BrokerProcess",
    "WorkerSpec",
    "add_parser",
    "format_result",
    "percentile",
    "peak_rss",
    "run_bench",
]

SETTLE_MODES = ("at-least-once", "at-most-once")
STAMP = struct.Struct(">QQ")
MIN_SIZE = STAMP.size
PROGRESS_EVERY = 0.1  # seconds between a worker's progress lines


class BenchError(Exception):
    """A failed run, worded for one line on stderr."""


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark run: the workload and its bounds."""

    count: int = 10_000
    size: int = 100
    producers: int = 1
    consumers: int = 1
    settle: str = "at-least-once"
    durable: bool = False
    address: str = "bench"
    credit: int = 1000
    timeout: float = 120.0
    url: str | None = None
    rate: float = 0.0  # consumers take at most this many messages/s each (0: as fast as they can)

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError("count must be at least 1")
        if self.size < MIN_SIZE:
            raise ValueError(
                f"size must be at least {MIN_SIZE} bytes (the time stamp and sequence)"
            )
        if self.producers < 1 or self.consumers < 1:
            raise ValueError("at least one producer and one consumer")
        if self.settle not in SETTLE_MODES:
            raise ValueError(f"settle must be one of {', '.join(SETTLE_MODES)}")
        if self.credit < 1:
            raise ValueError("credit must be at least 1")
        if not self.timeout > 0:
            raise ValueError("timeout must be positive")
        if self.rate < 0:
            raise ValueError("rate must not be negative")


@dataclass
class BenchResult:
    """What a run measured."""

    config: BenchConfig
    received: int
    sent: int
    elapsed: float  # first send to last receive, seconds
    throughput: float  # messages/s over ``elapsed``
    send_rate: float  # messages/s the producers got through (outcomes included)
    latencies_us: list[int] = field(repr=False, default_factory=list)
    broker_rss_kib: int | None = None
    broker: str = ""
    broker_cpu_s: float | None = None  # CPU the broker used during the run
    producer_cpu_s: float | None = None  # summed over the producers (as they report it)
    consumer_cpu_s: float | None = None

    def latency(self, p: float) -> float | None:
        """The ``p``-th latency percentile in milliseconds (None without samples)."""
        v = percentile(self.latencies_us, p)
        return None if v is None else v / 1000.0

    def as_dict(self) -> dict[str, Any]:
        c = self.config
        return {
            "broker": self.broker,
            "count": c.count,
            "size": c.size,
            "producers": c.producers,
            "consumers": c.consumers,
            "settle": c.settle,
            "durable": c.durable,
            "received": self.received,
            "sent": self.sent,
            "elapsed_s": round(self.elapsed, 4),
            "msgs_per_s": round(self.throughput, 1),
            "send_msgs_per_s": round(self.send_rate, 1),
            "latency_ms": {
                "p50": self.latency(50),
                "p90": self.latency(90),
                "p99": self.latency(99),
                "max": self.latency(100),
            },
            "broker_peak_rss_kib": self.broker_rss_kib,
            "cpu_s": {
                "broker": self.broker_cpu_s,
                "producers": self.producer_cpu_s,
                "consumers": self.consumer_cpu_s,
            },
        }


def percentile(values: Sequence[int], p: float) -> float | None:
    """Nearest-rank percentile of ``values`` (unsorted is fine); None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1))
    return float(ordered[k])


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time a live process has used so far (None if unreadable)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def peak_rss(pid: int) -> int | None:
    """The peak resident set (VmHWM) of a live process, in KiB (None if unreadable)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


# =====================================================================================
# The broker under test
# =====================================================================================

_BROKER_CONFIG = """\
# written by amqp10 bench: messages are stored only if they ask to be (header.durable)
log_level = "info"

[default_policy]
durable = false
"""


class BrokerProcess:
    """A broker in a subprocess; ``port`` once it listens. Stop it with :meth:`stop`.

    ``argv`` must start a broker that prints ``listening on 127.0.0.1:PORT``
    (stdout or stderr, as a log line or bare) and stops on SIGTERM.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        name: str = "broker",
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.port: int | None = None
        self.tail: list[str] = []
        self._found = threading.Event()
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self, stream: IO[str] | None) -> None:
        assert stream is not None
        for line in stream:
            line = line.rstrip()
            self.tail = [*self.tail[-19:], line]
            if self.port is None and "listening on " in line:
                rest = line.split("listening on ", 1)[1]
                hostport = rest.split()[0].strip("'\"")
                try:
                    self.port = int(hostport.rsplit(":", 1)[-1])
                except ValueError:
                    continue
                self._found.set()
        self._found.set()

    def wait_listening(self, timeout: float) -> int:
        """Wait for the "listening on" line; return the port."""
        self._found.wait(timeout)
        if self.port is None:
            last = self.tail[-1] if self.tail else "no output"
            code = self.proc.poll()
            if code is None:
                self.stop()
                raise BenchError(
                    f"{self.name} did not start listening within {timeout:g}s ({last})"
                )
            raise BenchError(f"{self.name} exited with status {code}: {last}")
        return self.port

    def peak_rss(self) -> int | None:
        return peak_rss(self.proc.pid)

    def stop(self, timeout: float = 5.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        self._reader.join(1.0)


def start_our_broker(
    data_dir: str, *, extra_config: str = "", python: str = sys.executable
) -> BrokerProcess:
    """Our broker on an ephemeral port, storing into ``data_dir``."""
    config = os.path.join(data_dir, "bench-broker.toml")
    with open(config, "w") as f:
        f.write(_BROKER_CONFIG + extra_config)
    argv = [
        python,
        "-m",
        "amqp10.cli",
        "broker",
        "--port",
        "0",
        "--data-dir",
        data_dir,
        "--config",
        config,
    ]
    return BrokerProcess(argv, name="amqp10 broker")


# =====================================================================================
# Workers
# =====================================================================================


@dataclass(frozen=True)
class WorkerSpec:
    """How to start one worker: its command line (and environment additions)."""

    argv: list[str]
    env: dict[str, str] | None = None
    name: str = "worker"


WorkerFactory = Callable[[str, int, str, BenchConfig, int], WorkerSpec]
"""``(role, index, url, config, count) -> WorkerSpec``; role is "producer" or "consumer",
``count`` the messages that worker sends (producers) or the total expected (consumers)."""


def worker_argv(program: list[str], role: str, url: str, cfg: BenchConfig, count: int) -> list[str]:
    """The command line of a bench worker: ``program`` plus the workload's options."""
    argv = [
        *program,
        role,
        "--url",
        url,
        "--address",
        cfg.address,
        "--count",
        str(count),
        "--size",
        str(cfg.size),
        "--settle",
        cfg.settle,
        "--credit",
        str(cfg.credit),
        "--timeout",
        str(cfg.timeout),
    ]
    if cfg.durable:
        argv.append("--durable")
    return argv


def our_worker(role: str, index: int, url: str, cfg: BenchConfig, count: int) -> WorkerSpec:
    """A worker that uses the amqp10 client (this module run as ``-m amqp10.cli.bench.harness``)."""
    argv = worker_argv([sys.executable, "-m", "amqp10.cli.bench.harness"], role, url, cfg, count)
    if role == "consumer" and cfg.consumers > 1:
        argv.append("--until-stopped")
    if role == "consumer" and cfg.rate:
        argv += ["--rate", str(cfg.rate)]
    return WorkerSpec(argv, name=f"{role} {index}")


class _Worker:
    """A running worker process and the thread that reads its lines."""

    def __init__(
        self, role: str, spec: WorkerSpec, events: queue.Queue[tuple[_Worker, str, str]]
    ) -> None:
        self.role = role
        self.name = spec.name
        env = None
        if spec.env:
            env = {**os.environ, **spec.env}
        self.proc = subprocess.Popen(
            spec.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.count = 0
        self.ready = False
        self.done: dict[str, Any] | None = None
        self.error: str | None = None
        self.stderr_tail: list[str] = []
        self._events = events
        self._threads = [
            threading.Thread(target=self._read_out, daemon=True),
            threading.Thread(target=self._read_err, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            kind, _, rest = line.rstrip("\n").partition(" ")
            self._events.put((self, kind, rest))
        self._events.put((self, "eof", ""))

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_tail = [*self.stderr_tail[-9:], line.rstrip()]

    def tell(self, word: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(word + "\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):
            pass

    def close_stdin(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()

    def why(self) -> str:
        if self.error:
            return self.error
        for line in reversed(self.stderr_tail):
            if line.strip():
                return line.strip()
        code = self.proc.poll()
        return f"exited with status {code}" if code is not None else "no answer"

    def stop(self) -> None:
        self.close_stdin()
        if self.proc.poll() is None:
            try:
                self.proc.wait(2.0)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(2.0)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        for t in self._threads:
            t.join(1.0)


def run_bench(
    cfg: BenchConfig,
    *,
    worker: WorkerFactory = our_worker,
    consumer_worker: WorkerFactory | None = None,
    broker: BrokerProcess | None = None,
    broker_name: str = "",
    progress: Progress | None = None,
) -> BenchResult:
    """Run the workload against ``cfg.url`` (or a broker started here); return the result.

    ``broker``: a broker already started (its port is used unless ``cfg.url`` is
    set; its peak RSS is reported). Without either, our broker is started in a
    temporary directory and stopped afterwards.
    """
    tmp: str | None = None
    own_broker = False
    if cfg.url is None and broker is None:
        tmp = tempfile.mkdtemp(prefix="amqp10-bench-")
        broker = start_our_broker(tmp)
        own_broker = True
        broker_name = broker_name or "amqp10"
    try:
        url = cfg.url
        if url is None:
            assert broker is not None
            port = broker.wait_listening(15.0)
            url = f"amqp://127.0.0.1:{port}"
        result = _drive(cfg, url, worker, consumer_worker or worker, progress, broker)
        if broker is not None:
            result.broker_rss_kib = broker.peak_rss()
            if broker.proc.poll() is not None:
                raise BenchError(
                    f"{broker.name} exited during the run: {broker.tail[-1] if broker.tail else ''}"
                )
        result.broker = broker_name or (broker.name if broker is not None else url)
        return result
    finally:
        if own_broker and broker is not None:
            broker.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _split(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _drive(
    cfg: BenchConfig,
    url: str,
    producer_factory: WorkerFactory,
    consumer_factory: WorkerFactory,
    progress: Progress | None,
    broker: BrokerProcess | None,
) -> BenchResult:
    deadline = time.monotonic() + cfg.timeout
    events: queue.Queue[tuple[_Worker, str, str]] = queue.Queue()
    consumers: list[_Worker] = []
    producers: list[_Worker] = []
    bar = progress if progress is not None else Progress(cfg.count, enabled=False)

    def fail(why: str) -> BenchError:
        received = sum(c.count for c in consumers)
        return BenchError(f"{why} (received {received:,} of {cfg.count:,} messages)")

    def next_event(until: float) -> tuple[_Worker, str, str] | None:
        try:
            return events.get(timeout=max(min(until - time.monotonic(), 0.1), 0.0))
        except queue.Empty:
            return None

    def check_time(what: str) -> None:
        if time.monotonic() >= deadline:
            raise fail(f"timed out after {cfg.timeout:g}s {what}")
        if broker is not None and broker.proc.poll() is not None:
            raise fail(f"{broker.name} exited ({broker.tail[-1] if broker.tail else 'no output'})")

    def handle(ev: tuple[_Worker, str, str]) -> None:
        w, kind, rest = ev
        if kind == "ready":
            w.ready = True
        elif kind == "n":
            with contextlib.suppress(ValueError):
                w.count = int(rest)
        elif kind == "done":
            try:
                w.done = json.loads(rest)
            except ValueError:
                w.error = "sent an unreadable result"
                raise fail(f"{w.name}: {w.error}") from None
            w.count = int(w.done.get("count", w.count))
        elif kind == "error":
            w.error = rest or "failed"
            raise fail(f"{w.name}: {w.error}")
        elif kind == "eof":
            if w.done is None:
                w.proc.wait(2.0) if w.proc.poll() is None else None
                raise fail(f"{w.name} ended early: {w.why()}")

    try:
        # consumers first: they attach and wait for messages
        for i in range(cfg.consumers):
            consumers.append(
                _Worker("consumer", consumer_factory("consumer", i, url, cfg, cfg.count), events)
            )
        for i, n in enumerate(_split(cfg.count, cfg.producers)):
            producers.append(
                _Worker("producer", producer_factory("producer", i, url, cfg, n), events)
            )
        everyone = consumers + producers
        while not all(w.ready for w in everyone):
            check_time("waiting for the clients to attach")
            ev = next_event(deadline)
            if ev is not None:
                handle(ev)
        bar.started = time.monotonic()
        broker_cpu0 = cpu_seconds(broker.pid) if broker is not None else None
        for p in producers:
            p.tell("go")
        while True:
            received = sum(c.count for c in consumers)
            bar.update(received)
            if received >= cfg.count and all(c.done is not None for c in consumers):
                break
            if received >= cfg.count:
                for c in consumers:
                    if c.done is None:
                        c.tell("stop")
            check_time("")
            ev = next_event(deadline)
            if ev is not None:
                handle(ev)
        while not all(p.done is not None for p in producers):
            check_time("waiting for the producers to finish")
            ev = next_event(deadline)
            if ev is not None:
                handle(ev)
        bar.update(sum(c.count for c in consumers), force=True)
        broker_cpu1 = cpu_seconds(broker.pid) if broker is not None else None
    finally:
        bar.finish()
        for w in consumers + producers:
            w.stop()

    pdone = [p.done or {} for p in producers]
    cdone = [c.done or {} for c in consumers]
    first = min(int(d["first_ns"]) for d in pdone if d.get("first_ns"))
    last_recv = max(int(d["last_ns"]) for d in cdone if d.get("last_ns"))
    last_sent = max(int(d["last_ns"]) for d in pdone if d.get("last_ns"))
    received = sum(int(d.get("count", 0)) for d in cdone)
    sent = sum(int(d.get("count", 0)) for d in pdone)
    elapsed = max((last_recv - first) / 1e9, 1e-9)
    lat: list[int] = []
    for d in cdone:
        lat.extend(int(x) for x in d.get("lat_us", ()))

    def cpu(done: list[dict[str, Any]]) -> float | None:
        values = [float(d["cpu_s"]) for d in done if d.get("cpu_s") is not None]
        return sum(values) if values else None

    return BenchResult(
        config=cfg,
        received=received,
        sent=sent,
        elapsed=elapsed,
        throughput=received / elapsed,
        send_rate=sent / max((last_sent - first) / 1e9, 1e-9),
        latencies_us=lat,
        broker_cpu_s=None
        if broker_cpu0 is None or broker_cpu1 is None
        else broker_cpu1 - broker_cpu0,
        producer_cpu_s=cpu(pdone),
        consumer_cpu_s=cpu(cdone),
    )


def format_result(r: BenchResult) -> str:
    """The human-readable summary of a run."""
    c = r.config
    lines = [
        f"broker     {r.broker}",
        f"workload   {c.count:,} messages of {c.size} bytes, {c.producers} producer(s), "
        f"{c.consumers} consumer(s), {c.settle}{', durable' if c.durable else ''}",
        f"throughput {r.throughput:,.0f} msg/s  ({r.received:,} received in {r.elapsed:.2f}s; "
        f"producers {r.send_rate:,.0f} msg/s)",
    ]
    if r.latencies_us:
        parts = []
        for name, p in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100)):
            v = r.latency(p)
            parts.append(f"{name} {v:.2f}" if v is not None else f"{name} -")
        lines.append("latency ms " + "  ".join(parts))
    if r.broker_rss_kib is not None:
        lines.append(f"broker RSS {r.broker_rss_kib / 1024:.1f} MiB peak")
    cpu = [
        (n, v)
        for n, v in (
            ("broker", r.broker_cpu_s),
            ("producers", r.producer_cpu_s),
            ("consumers", r.consumer_cpu_s),
        )
        if v is not None
    ]
    if cpu:
        per = r.received or 1
        lines.append(
            "cpu        " + "  ".join(f"{n} {v:.2f}s ({v / per * 1e6:.0f} us/msg)" for n, v in cpu)
        )
    return "\n".join(lines)


# =====================================================================================
# The command line
# =====================================================================================


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``bench`` on the ``amqp10`` command's subparsers."""
    b: argparse.ArgumentParser = sub.add_parser(
        "bench",
        help="measure a broker's throughput and latency",
        description="Start a broker (ours, unless --url) and N producers and M consumers using "
        "the amqp10 client in separate processes; print messages/s and latency percentiles.",
    )
    b.add_argument("--url", help="an existing broker to measure (default: start ours)")
    b.add_argument("--producers", "-p", type=int, default=1, help="producer processes (default 1)")
    b.add_argument("--consumers", "-c", type=int, default=1, help="consumer processes (default 1)")
    b.add_argument(
        "--count", "-n", type=int, default=10_000, help="messages in all (default 10000)"
    )
    b.add_argument(
        "--size",
        "-s",
        type=int,
        default=100,
        help="body bytes per message (default 100, at least 16)",
    )
    b.add_argument(
        "--settle",
        choices=SETTLE_MODES,
        default="at-least-once",
        help="at-least-once (outcomes; default) or at-most-once (pre-settled)",
    )
    b.add_argument(
        "--durable", action="store_true", help="send durable messages (the broker stores them)"
    )
    b.add_argument("--address", default="bench", help="queue address (default bench)")
    b.add_argument(
        "--credit",
        type=int,
        default=1000,
        help="consumer credit window and producer in-flight limit (default 1000)",
    )
    b.add_argument(
        "--timeout", type=float, default=120.0, help="give up after this many seconds (default 120)"
    )
    b.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="slow consumers: each takes at most this many messages/s (default: no limit)",
    )
    b.add_argument(
        "--json", metavar="PATH", help="also write the result as JSON to PATH ('-' for stdout)"
    )
    b.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    b.set_defaults(func=cmd_bench)
    return b


def cmd_bench(args: argparse.Namespace) -> int:
    try:
        cfg = BenchConfig(
            count=args.count,
            size=args.size,
            producers=args.producers,
            consumers=args.consumers,
            settle=args.settle,
            durable=args.durable,
            address=args.address,
            credit=args.credit,
            timeout=args.timeout,
            url=args.url,
            rate=args.rate,
        )
    except ValueError as exc:
        print(f"amqp10 bench: {exc}", file=sys.stderr)
        return 2
    try:
        result = run_bench(cfg, progress=Progress(cfg.count, enabled=not args.no_progress))
    except BenchError as exc:
        print(f"amqp10 bench: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("amqp10 bench: interrupted", file=sys.stderr)
        return 130
    print(format_result(result))
    if args.json:
        text = json.dumps(result.as_dict(), indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    return 0


# =====================================================================================
# The workers (amqp10 client), run as ``python -m amqp10.cli.bench.harness producer|consumer ...``
# =====================================================================================


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _stdin_words(wanted: str) -> Callable[[], bool]:
    """Block until ``wanted`` (or EOF) comes on stdin; True if it was ``wanted``."""

    def wait() -> bool:
        return any(line.strip() == wanted for line in sys.stdin)

    return wait


def payload_for(seq: int, pad: bytes) -> bytes:
    """A message body: send time (ns), sequence number, padding."""
    return STAMP.pack(time.monotonic_ns(), seq) + pad


async def _producer(ns: argparse.Namespace) -> None:
    import anyio
    import anyio.to_thread

    from ...client import SettleMode, connect
    from ...message import Message
    from ...types import Accepted

    mode = SettleMode.AT_MOST_ONCE if ns.settle == "at-most-once" else SettleMode.AT_LEAST_ONCE
    presettled = mode is SettleMode.AT_MOST_ONCE
    pad = b"\x00" * (ns.size - MIN_SIZE)
    count = ns.count
    sent = 0
    async with await connect(ns.url, timeout=min(ns.timeout, 30.0)) as conn:
        sender = await conn.open_sender(ns.address, settle_mode=mode)
        _say("ready")
        if not await anyio.to_thread.run_sync(_stdin_words("go")):
            return
        durable = True if ns.durable else None
        window = max(1, min(ns.credit, count))

        async def produce() -> None:
            # one task keeps up to ``window`` messages in flight (Sender.pipeline)
            nonlocal sent
            messages = (
                Message([payload_for(i, pad)], body_type="data", durable=durable)
                for i in range(count)
            )
            async with contextlib.aclosing(
                sender.pipeline(messages, window=window, timeout=math.inf)
            ) as outcomes:
                async for outcome in outcomes:
                    if not presettled and not isinstance(outcome, Accepted):
                        raise BenchError(f"message {sent} was not accepted: {outcome!r}")
                    sent += 1

        async def report() -> None:
            while True:
                await anyio.sleep(PROGRESS_EVERY)
                _say(f"n {sent}")

        first_ns = time.monotonic_ns()
        cpu0 = time.process_time()
        with anyio.fail_after(ns.timeout):
            async with anyio.create_task_group() as tg:
                tg.start_soon(report)
                await produce()
                tg.cancel_scope.cancel()
        last_ns = time.monotonic_ns()
        _say(
            "done "
            + json.dumps(
                {
                    "count": sent,
                    "first_ns": first_ns,
                    "last_ns": last_ns,
                    "cpu_s": time.process_time() - cpu0,
                }
            )
        )
        await sender.close()


async def _consumer(ns: argparse.Namespace) -> None:
    from array import array

    import anyio
    import anyio.to_thread

    from ...client import SettleMode, connect

    mode = SettleMode.AT_MOST_ONCE if ns.settle == "at-most-once" else SettleMode.AT_LEAST_ONCE
    expected = None if ns.until_stopped else ns.count
    lat = array("q")
    received = 0
    first_ns = last_ns = 0
    unpack = STAMP.unpack_from
    async with await connect(
        ns.url, timeout=min(ns.timeout, 30.0), max_buffered=max(ns.credit, 1000)
    ) as conn:
        # auto_accept: each delivery is accepted as it is taken, without a scheduling
        # point per message, so the accepts of a burst go out as one disposition range
        receiver = await conn.open_receiver(
            ns.address, credit=ns.credit, settle_mode=mode, auto_accept=True
        )
        _say("ready")

        async def take(scope: anyio.CancelScope) -> None:
            nonlocal received, first_ns, last_ns
            from ...message import Message

            rate = ns.rate
            async for d in receiver:
                now = time.monotonic_ns()
                if rate and received:  # a slow consumer: pace to ``rate`` messages/s
                    due = first_ns + int(received / rate * 1e9)
                    if due > now:
                        await anyio.sleep((due - now) / 1e9)
                body = Message.decode(d.payload).body
                stamp = unpack(body[0])[0]
                lat.append((now - stamp) // 1000)
                if not received:
                    first_ns = now
                last_ns = now
                received += 1
                if expected is not None and received >= expected:
                    break
            scope.cancel()

        async def report() -> None:
            while True:
                await anyio.sleep(PROGRESS_EVERY)
                _say(f"n {received}")

        async def stopped(scope: anyio.CancelScope) -> None:
            await anyio.to_thread.run_sync(_stdin_words("stop"), abandon_on_cancel=True)
            scope.cancel()

        cpu0 = time.process_time()
        with anyio.fail_after(ns.timeout):
            async with anyio.create_task_group() as tg:
                tg.start_soon(take, tg.cancel_scope)
                tg.start_soon(report)
                tg.start_soon(stopped, tg.cancel_scope)
        _say(
            "done "
            + json.dumps(
                {
                    "count": received,
                    "first_ns": first_ns,
                    "last_ns": last_ns,
                    "cpu_s": time.process_time() - cpu0,
                    "lat_us": lat.tolist(),
                }
            )
        )
        with contextlib.suppress(Exception):
            await receiver.close()


def _worker_main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m amqp10.cli.bench.harness", description="an amqp10 bench worker"
    )
    p.add_argument("role", choices=["producer", "consumer"])
    p.add_argument("--url", required=True)
    p.add_argument("--address", default="bench")
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--settle", choices=SETTLE_MODES, default="at-least-once")
    p.add_argument("--credit", type=int, default=1000)
    p.add_argument("--durable", action="store_true")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument(
        "--until-stopped", action="store_true", help="consumer: run until 'stop' on stdin"
    )
    p.add_argument("--rate", type=float, default=0.0, help="consumer: at most this many messages/s")
    ns = p.parse_args(argv)
    import anyio

    backend_options: dict[str, Any] = {}
    try:
        import uvloop  # noqa: F401

        backend_options["use_uvloop"] = True
    except ImportError:
        pass
    fn = _producer if ns.role == "producer" else _consumer
    profile_dir = os.environ.get("AMQP10_BENCH_PROFILE")  # for bench/profiles: cProfile the worker
    prof = None
    if profile_dir:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    try:
        anyio.run(fn, ns, backend_options=backend_options)
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:  # one line for the harness, whatever it was
        exc = _unwrap(exc)
        _say(f"error {type(exc).__name__}: {exc}".replace("\n", " "))
        return 1
    finally:
        if prof is not None:
            prof.disable()
            prof.dump_stats(os.path.join(profile_dir or ".", f"{ns.role}-{os.getpid()}.prof"))
    return 0


def _unwrap(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


if __name__ == "__main__":
    sys.exit(_worker_main())
