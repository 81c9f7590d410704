"""What /metrics costs the broker: broker CPU per message with metrics on vs off, in one run.

Starts two of our brokers as subprocesses, each on its own fresh store:

- ``on``: ``[http] metrics = true`` and a scraper in this process that GETs
  ``/metrics`` every ``--scrape-interval`` seconds while the workload runs (Prometheus
  scrapes every 15 s by default; 1 s is the pessimistic case);
- ``off``: ``[http] metrics = false`` and no scraper.

Both hold ``--idle-queues`` extra queues, so a scrape has nodes to report. The
``amqp10 bench`` workload (one producer, one consumer processes, at-least-once) runs
against each in turn, the order alternating round by round (on/off, off/on, ...), so
machine load hits both alike. The figure is the broker process's CPU time
(user + system, /proc) per message received; the ratio on/off of the medians is
the cost of metrics. The counters themselves are plain integers the broker keeps
either way, so ``metrics = false`` removes the endpoint and its scrapes only; with
``--baseline REV`` the ``off`` broker runs the code of commit REV instead (say, the one
before the counters were added), so the ratio covers the counting too.

    .venv/bin/python bench/metrics_bench.py                      # 5 rounds of 20,000 messages
    .venv/bin/python bench/metrics_bench.py --rounds 2 --count 5000   # a smoke run
    .venv/bin/python bench/metrics_bench.py --baseline e8a2d18    # off = the code before metrics
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

from commit_latency_bench import extract, start_broker

from amqp10 import sync
from amqp10.cli.bench.harness import (
    BROKER_CONFIG,
    BenchConfig,
    BrokerProcess,
    run_bench,
    start_our_broker,
)
from amqp10.message import Message


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Scraper:
    """GETs ``url`` every ``interval`` seconds while started; counts the scrapes."""

    def __init__(self, url: str, interval: float) -> None:
        self.url = url
        self.interval = interval
        self.scrapes = 0
        self.bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            with urllib.request.urlopen(self.url, timeout=5) as r:
                if r.status != 200:
                    raise RuntimeError(f"/metrics answered {r.status}")
                self.bytes += len(r.read())
            self.scrapes += 1
            self._stop.wait(self.interval)


def make_idle_queues(port: int, n: int) -> None:
    """``n`` queues holding one message each (what a scrape reports besides the bench queue)."""
    with sync.connect(f"amqp://127.0.0.1:{port}", timeout=10) as conn:
        for i in range(n):
            sender = conn.open_sender(f"idle-{i}")
            sender.send(Message(body=b"idle"))
            sender.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="rounds, each running both (default 5)")
    p.add_argument("--count", type=int, default=20_000, help="messages per run (default 20000)")
    p.add_argument("--size", type=int, default=100, help="body bytes (default 100)")
    p.add_argument("--idle-queues", type=int, default=100, help="extra queues (default 100)")
    p.add_argument("--scrape-interval", type=float, default=1.0, help="seconds (default 1)")
    p.add_argument(
        "--baseline",
        metavar="REV",
        help="run 'off' from this commit's code (git archive; e.g. one before the counters) "
        "instead of this tree with metrics = false",
    )
    p.add_argument("--json", metavar="PATH", help="also write every number as JSON")
    args = p.parse_args()

    port = free_port()
    dirs = {name: tempfile.mkdtemp(prefix=f"amqp10-metrics-{name}-") for name in ("on", "off")}
    brokers: dict[str, BrokerProcess] = {}
    scraper = Scraper(f"http://127.0.0.1:{port}/metrics", args.scrape_interval)
    per_msg: dict[str, list[float]] = {"on": [], "off": []}
    try:
        brokers["on"] = start_our_broker(
            dirs["on"], extra_config=f"[http]\nport = {port}\nmetrics = true\n"
        )
        if args.baseline is None:
            brokers["off"] = start_our_broker(
                dirs["off"], extra_config="[http]\nport = 0\nmetrics = false\n"
            )
        else:  # the code of another commit: no counters, no /metrics at all
            tree = extract(args.baseline, Path(dirs["off"]))
            config = Path(dirs["off"]) / "bench-broker.toml"
            config.write_text(BROKER_CONFIG + "[http]\nport = 0\n")
            brokers["off"] = start_broker(tree, Path(dirs["off"]) / "data", config)
        for b in brokers.values():
            make_idle_queues(b.wait_listening(15.0), args.idle_queues)
        cfg = BenchConfig(count=args.count, size=args.size)
        for r in range(args.rounds):
            order = ("on", "off") if r % 2 == 0 else ("off", "on")
            for name in order:
                if name == "on":
                    scraper.start()
                try:
                    result = run_bench(cfg, broker=brokers[name], broker_name=name)
                finally:
                    if name == "on":
                        scraper.stop()
                assert result.broker_cpu_s is not None
                us = result.broker_cpu_s / max(result.received, 1) * 1e6
                per_msg[name].append(us)
                print(
                    f"round {r + 1} {name:>3}: broker {us:6.1f} us/msg, "
                    f"{result.throughput:,.0f} msg/s",
                    flush=True,
                )
    finally:
        scraper.stop()
        for b in brokers.values():
            b.stop()
        for d in dirs.values():
            shutil.rmtree(d, ignore_errors=True)
    on, off = statistics.median(per_msg["on"]), statistics.median(per_msg["off"])
    ratios = [a / b for a, b in zip(per_msg["on"], per_msg["off"])]
    print(" ".join(sys.argv))
    print(
        f"broker CPU per message, median of {args.rounds}: metrics on {on:.1f} us, "
        f"off {off:.1f} us; on/off {on / off:.3f} (rounds: {', '.join(f'{x:.3f}' for x in ratios)}); "
        f"{scraper.scrapes} scrapes of ~{scraper.bytes // max(scraper.scrapes, 1):,} bytes"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"per_msg_us": per_msg, "ratio": on / off, "scrapes": scraper.scrapes}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
