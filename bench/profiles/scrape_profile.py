"""What one ``/metrics`` scrape costs, in process: the collector and ``generate_latest``.

Builds an in-memory broker core with ``--queues`` empty queues,
then times ``--scrapes`` scrapes (``time.process_time`` per scrape: the broker's CPU)
of what the endpoint serves, two ways alternating: ``ours`` (the endpoint's
:class:`TextWriter`) and ``library`` (every sample through ``prometheus_client``'s
``generate_latest``, as before the writer); the two texts must be equal. With
``--profile`` it prints the top of a cProfile of ``ours``. No sockets, no store.

    .venv/bin/python bench/profiles/scrape_profile.py --queues 100
    .venv/bin/python bench/profiles/scrape_profile.py --queues 10000 --scrapes 5 --profile
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import anyio
from prometheus_client import CollectorRegistry

from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker
from amqp10.broker.metrics import (
    MetricsSources,
    TextWriter,
    exposition,
    metrics_registry,
)
from amqp10.broker.metrics_text import library_text


def make_broker(queues: int) -> Broker:
    broker = Broker(BrokerConfig())
    for i in range(queues):
        broker.default.create_node(f"idle-{i}", "queue")
    return broker


async def through_the_endpoint(registry: CollectorRegistry, writer: TextWriter, n: int) -> float:
    """Median CPU ms of ``n`` scrapes as the endpoint makes them (one event loop)."""
    xs: list[float] = []
    for _ in range(n):
        t0 = time.process_time()
        await exposition(registry, writer)
        xs.append(time.process_time() - t0)
    return statistics.median(xs) * 1e3


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--queues", type=int, default=100, help="queues in the broker (default 100)")
    p.add_argument("--scrapes", type=int, default=20, help="scrapes timed (default 20)")
    p.add_argument("--profile", action="store_true", help="print a cProfile of the scrapes")
    args = p.parse_args()

    broker = make_broker(args.queues)
    registry = metrics_registry(MetricsSources.of_core(broker))

    writer = TextWriter()

    def ours() -> bytes:  # what /metrics does, less the hop to a worker thread
        return writer.write(list(registry.collect()))

    def library() -> bytes:  # every sample through prometheus_client's generate_latest
        return library_text(list(registry.collect()))

    text = ours()  # warm-up (imports, the label text kept between scrapes)
    collected = list(registry.collect())  # the same numbers (the process's CPU time moves)
    if writer.write(collected) != library_text(collected):
        raise SystemExit("the two texts differ")
    samples = sum(1 for line in text.splitlines() if not line.startswith(b"#"))
    cpu: dict[str, list[float]] = {"ours": [], "library": []}
    for _ in range(args.scrapes):  # alternating, so machine load hits both alike
        for name, scrape in (("ours", ours), ("library", library)):
            t0 = time.process_time()
            scrape()
            cpu[name].append(time.process_time() - t0)
    print(f"{args.queues} queues, {samples} samples, {len(text):,} bytes; CPU a scrape:")
    for name, xs in cpu.items():
        print(
            f"  {name:>7}: {statistics.median(xs) * 1e3:7.1f} ms "
            f"(median of {len(xs)}; min {min(xs) * 1e3:.1f}, max {max(xs) * 1e3:.1f})"
        )
    ratio = statistics.median(cpu["library"]) / statistics.median(cpu["ours"])
    print(f"  library / ours: {ratio:.1f}")
    writer_ms = anyio.run(through_the_endpoint, registry, writer, args.scrapes)
    print(f"  through exposition() (the endpoint's worker thread): {writer_ms:.1f} ms (median)")
    if args.profile:
        # the same two steps in this thread (cProfile sees one thread only)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.scrapes):
            ours()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
