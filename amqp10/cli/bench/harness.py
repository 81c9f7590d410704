"""The bench harness: a broker, N producers and M consumers as processes; what they measured.

The library behind ``amqp10 bench`` (:mod:`amqp10.cli.bench.command`), and behind
``bench/compare.py``, which drives other clients and brokers with it.

The run is a set of processes: a broker (ours, started here, unless ``--url``
names one), M consumers and N producers, each a separate Python process using
the amqp10 client (:mod:`amqp10.cli.bench.worker`). Every message body carries
the producer's send time (``CLOCK_MONOTONIC``, shared by all processes of the
machine), so a consumer measures each message's latency. The run is bounded: it
ends when the consumers have received ``--count`` messages, or fails after
``--timeout`` seconds, with one line on stderr.

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
    "BROKER_CONFIG",
    "MIN_SIZE",
    "SETTLE_MODES",
    "STAMP",
    "BenchConfig",
    "BenchError",
    "BenchResult",
    "BrokerProcess",
    "WorkerFactory",
    "WorkerSpec",
    "cpu_seconds",
    "our_worker",
    "peak_rss",
    "rss_kib",
    "percentile",
    "run_bench",
    "start_our_broker",
    "worker_argv",
    "worker_parser",
]

SETTLE_MODES = ("at-least-once", "at-most-once")
STAMP = struct.Struct(">QQ")
MIN_SIZE = STAMP.size


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

    def as_dict(self) -> dict[str, object]:
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
    return _status_kib(pid, "VmHWM:")


def rss_kib(pid: int) -> int | None:
    """The resident set (VmRSS) of a live process now, in KiB (None if unreadable)."""
    return _status_kib(pid, "VmRSS:")


def _status_kib(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


# =====================================================================================
# The broker under test
# =====================================================================================

BROKER_CONFIG = """\
# written by amqp10 bench: messages are stored only if they ask to be (header.durable)
log_level = "info"

[default_policy]
durable = false
"""
"""Our broker's configuration in a run (:func:`start_our_broker` may append more TOML)."""


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
        self.listening = 0
        """How many "listening on" lines it printed (a broker of several workers: the
        parent's, then each worker's once it serves)."""
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
            if "listening on " in line:
                self.listening += 1
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
    data_dir: str,
    *,
    extra_config: str = "",
    python: str = sys.executable,
    env: dict[str, str] | None = None,
    name: str = "amqp10 broker",
) -> BrokerProcess:
    """Our broker on an ephemeral port, storing into ``data_dir``.

    ``env``: the broker's environment (``PYTHONPATH`` naming another source tree
    runs that tree's broker, for an A/B).
    """
    config = os.path.join(data_dir, "bench-broker.toml")
    with open(config, "w") as f:
        f.write(BROKER_CONFIG + extra_config)
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
    return BrokerProcess(argv, name=name, env=env)


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


def worker_parser(
    prog: str | None = None, description: str | None = None
) -> argparse.ArgumentParser:
    """The command line :func:`worker_argv` writes, as a worker reads it (add your own options)."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("role", choices=["producer", "consumer"])
    p.add_argument("--url", required=True)
    p.add_argument("--address", default="bench")
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--settle", choices=SETTLE_MODES, default="at-least-once")
    p.add_argument("--credit", type=int, default=1000)
    p.add_argument("--durable", action="store_true")
    p.add_argument("--timeout", type=float, default=120.0)
    return p


def say(line: str) -> None:
    """One line of a worker's protocol (``ready``, ``done {...}``, ``error ...``) on stdout, flushed."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run_worker(work: Callable[[], object]) -> int:
    """Run a third-party client worker's ``work``: its exit status, 130 on Ctrl-C, and 1 with an
    ``error`` line on any other failure (so the harness reports it rather than a traceback)."""
    try:
        work()
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        say(f"error {type(exc).__name__}: {exc}")
        return 1
    return 0


def our_worker(role: str, index: int, url: str, cfg: BenchConfig, count: int) -> WorkerSpec:
    """A worker that uses the amqp10 client (:mod:`amqp10.cli.bench.worker`)."""
    argv = worker_argv([sys.executable, "-m", "amqp10.cli.bench.worker"], role, url, cfg, count)
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
        # the "done" line's JSON, from any client: each field is converted where it is read
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
