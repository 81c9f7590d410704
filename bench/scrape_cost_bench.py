"""What one ``/metrics`` scrape costs a running broker, this tree against another commit's.

Starts two of our brokers as subprocesses, each on its own fresh store with ``--queues``
idle queues and ``/metrics`` on: ``new`` runs this tree, ``old`` the code of ``--baseline``
(git archive; a commit that has ``/metrics``). No message traffic: in each round, each
broker in turn (the order alternating) is scraped ``--scrapes`` times back to back over
HTTP (a new connection each, as ``metrics_bench.py``'s scraper does), and its CPU time
(/proc, user + system) over those scrapes, less what it used idle for as long, divided
by the scrapes, is its CPU per scrape; the figure is the median over the rounds. The
HTTP exchange is in it (``--path /healthz`` measures that alone).

    .venv/bin/python bench/scrape_cost_bench.py --baseline 8bbb36f
    .venv/bin/python bench/scrape_cost_bench.py --baseline 8bbb36f --queues 1000 --scrapes 20
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from commit_latency_bench import extract, start_broker
from metrics_bench import free_port, make_idle_queues

from amqp10.cli.bench.harness import BROKER_CONFIG, BrokerProcess, cpu_seconds, start_our_broker


def cpu_per_scrape(broker: BrokerProcess, url: str, scrapes: int, idle_s: float) -> float:
    """Broker CPU ms per GET of ``url``, less its idle CPU over the same time."""
    c0, t0 = cpu_seconds(broker.pid), time.monotonic()
    time.sleep(idle_s)
    c1, t1 = cpu_seconds(broker.pid), time.monotonic()
    assert c0 is not None and c1 is not None
    idle_rate = (c1 - c0) / (t1 - t0)
    for _ in range(scrapes):
        with urllib.request.urlopen(url, timeout=30) as r:
            if r.status != 200:
                raise RuntimeError(f"{url} answered {r.status}")
            r.read()
    c2, t2 = cpu_seconds(broker.pid), time.monotonic()
    assert c2 is not None
    return (c2 - c1 - idle_rate * (t2 - t1)) / scrapes * 1e3


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", required=True, metavar="REV", help="the 'old' broker's commit")
    p.add_argument("--queues", type=int, default=100, help="idle queues in each (default 100)")
    p.add_argument("--scrapes", type=int, default=100, help="scrapes a round (default 100)")
    p.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    p.add_argument("--path", default="/metrics", help="what to GET (default /metrics)")
    args = p.parse_args()

    dirs = {name: Path(tempfile.mkdtemp(prefix=f"amqp10-scrape-{name}-")) for name in ("new", "old")}
    ports = {name: free_port() for name in dirs}
    brokers: dict[str, BrokerProcess] = {}
    ms: dict[str, list[float]] = {"new": [], "old": []}
    try:
        brokers["new"] = start_our_broker(
            str(dirs["new"]), extra_config=f"[http]\nport = {ports['new']}\nmetrics = true\n"
        )
        tree = extract(args.baseline, dirs["old"])
        config = dirs["old"] / "bench-broker.toml"
        config.write_text(BROKER_CONFIG + f"[http]\nport = {ports['old']}\nmetrics = true\n")
        brokers["old"] = start_broker(tree, dirs["old"] / "data", config)
        for b in brokers.values():
            make_idle_queues(b.wait_listening(15.0), args.queues)
        for r in range(args.rounds):
            for name in ("new", "old") if r % 2 == 0 else ("old", "new"):
                url = f"http://127.0.0.1:{ports[name]}{args.path}"
                ms[name].append(cpu_per_scrape(brokers[name], url, args.scrapes, 1.0))
                print(f"round {r + 1} {name}: {ms[name][-1]:.2f} ms broker CPU a GET", flush=True)
    finally:
        for b in brokers.values():
            b.stop()
        for d in dirs.values():
            shutil.rmtree(d, ignore_errors=True)
    new, old = statistics.median(ms["new"]), statistics.median(ms["old"])
    print(
        f"GET {args.path}, {args.queues} idle queues, median of {args.rounds} rounds of "
        f"{args.scrapes}: new {new:.2f} ms, old ({args.baseline}) {old:.2f} ms; old/new {old / new:.1f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
