"""Prometheus metrics: what ``/metrics`` serves, read from the broker when scraped.

Nothing here runs on the message path. The broker keeps plain integers where it
already works (node statistics, the running byte totals of
:mod:`~amqp10.broker.core.accounting`, each engine's frame and error counters,
the store committer's latency histogram); :class:`BrokerCollector` reads them
when Prometheus asks and hands them to ``prometheus_client``, which writes the
text exposition format (the per-node families, most of the samples, as rows that
:class:`~amqp10.broker.metrics_text.TextWriter` writes with the library's own
escaping, done once a family and kept between scrapes). Names follow Prometheus's conventions: the ``amqp10_``
prefix, ``_total`` for counters, base units (bytes, seconds).

Counters of connections that have ended are folded into :class:`EndedConnections`
when they end, so the ``_total`` series never go down while the broker runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import anyio
from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from ..amqp091 import Connection as Amqp091Connection
from ..amqp091 import ReplyCode
from ..transport import Connection as Amqp1Connection
from .core import Broker
from .core.accounting import Histogram
from .core.committer import GroupCommitter
from .core.store import SqlStore
from .metrics_text import LabelKey, LabelledFamily, TextWriter, samples_in

__all__ = [
    "CONTENT_TYPE",
    "INLINE_SAMPLES",
    "BrokerCollector",
    "EndedConnections",
    "MetricsSources",
    "TextWriter",
    "exposition",
    "metrics_registry",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text exposition format's content type."""

_NODE_COUNTERS = (
    # (statistic in core.nodes.Stats, metric name, help)
    ("enqueued", "amqp10_node_messages_published_total", "Messages stored into the node"),
    ("delivered", "amqp10_node_messages_delivered_total", "Messages handed to consumers"),
    (
        "acked",
        "amqp10_node_messages_acknowledged_total",
        "Deliveries acknowledged (accepted, basic.ack, or settled on sending)",
    ),
    ("released", "amqp10_node_messages_released_total", "Deliveries given back for redelivery"),
    ("rejected", "amqp10_node_messages_rejected_total", "Deliveries rejected by consumers"),
    (
        "dead_lettered",
        "amqp10_node_messages_dead_lettered_total",
        "Messages sent to the dead-letter address",
    ),
    ("expired", "amqp10_node_messages_expired_total", "Messages whose time-to-live ran out"),
    (
        "dropped",
        "amqp10_node_messages_dropped_total",
        "Messages dropped (overflow, rejected without a dead-letter address)",
    ),
)
_NODE_LABELS = ("vhost", "node", "kind")
_read_stats = attrgetter(*(stat for stat, _, _ in _NODE_COUNTERS))


def _condition_091(code: int) -> str:
    """A 0-9-1 reply code as the spec names it (``not-found``), or its number."""
    try:
        return ReplyCode(code).name.lower().replace("_", "-")
    except ValueError:
        return str(code)


@dataclass(frozen=True, slots=True)
class _Traffic:
    protocol: str
    frames_in: int
    frames_out: int
    errors: dict[str, int]


def _traffic(handler: Any) -> _Traffic | None:
    """The frame and error counters of a front end's connection handler (its engine's)."""
    engine = getattr(handler, "conn", None)
    if isinstance(engine, Amqp091Connection):
        errors = {_condition_091(code): n for code, n in engine.errors_sent.items()}
        return _Traffic("amqp091", engine.frames_in, engine.frames_out, errors)
    if isinstance(engine, Amqp1Connection):
        return _Traffic("amqp1", engine.frames_in, engine.frames_out, dict(engine.errors_sent))
    return None


class EndedConnections:
    """Frames and errors of the connections that have ended (their engines are gone)."""

    def __init__(self) -> None:
        self.frames_in: dict[str, int] = {}
        self.frames_out: dict[str, int] = {}
        self.errors: dict[tuple[str, str], int] = {}

    def add(self, handler: Any) -> None:
        """Fold ``handler``'s counters in (the service calls this as a connection ends)."""
        t = _traffic(handler)
        if t is not None:
            _add_traffic(t, self.frames_in, self.frames_out, self.errors)


def _add_traffic(
    t: _Traffic,
    frames_in: dict[str, int],
    frames_out: dict[str, int],
    errors: dict[tuple[str, str], int],
) -> None:
    frames_in[t.protocol] = frames_in.get(t.protocol, 0) + t.frames_in
    frames_out[t.protocol] = frames_out.get(t.protocol, 0) + t.frames_out
    for condition, n in t.errors.items():
        key = (t.protocol, condition)
        errors[key] = errors.get(key, 0) + n


@dataclass(frozen=True, slots=True)
class MetricsSources:
    """Where the collector reads from (the running service's parts)."""

    broker: Callable[[], Broker | None]
    store: Callable[[], SqlStore | None]
    committer: Callable[[], GroupCommitter | None]
    handlers: Callable[[], Iterable[Any]]
    """The front ends' connection handlers now running."""
    ended: EndedConnections

    @classmethod
    def of_core(cls, broker: Broker) -> MetricsSources:
        """A broker core alone: no store, no front ends (tests, benchmarks)."""
        return cls(lambda: broker, lambda: None, lambda: None, lambda: [], EndedConnections())


class BrokerCollector(Collector):
    """A ``prometheus_client`` collector over the broker's own counters."""

    def __init__(self, sources: MetricsSources) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        src = self.sources
        broker = src.broker()
        if broker is not None:
            yield from self._broker(broker)
        yield from self._traffic()
        yield from self._store(src.store(), src.committer())

    def _broker(self, broker: Broker) -> Iterator[Metric]:
        counts = broker.counts()
        for key, what in (
            ("connections", "Open client connections (every protocol)"),
            ("sessions", "Open sessions (0-9-1: channels)"),
            ("links", "Attached links (0-9-1: consumers)"),
            ("nodes", "Queues, streams and topics, subscription queues included"),
        ):
            yield GaugeMetricFamily(f"amqp10_{key}", what, value=counts[key])
        yield GaugeMetricFamily(
            "amqp10_messages_memory_bytes",
            "Bytes of the messages held in memory (queued, not with a consumer, not paged out)",
            value=counts["memory_bytes"] - counts["paged_bytes"],
        )
        yield GaugeMetricFamily(
            "amqp10_messages_paged_bytes",
            "Bytes of the queued messages paged out (their bodies in the store only)",
            value=counts["paged_bytes"],
        )
        yield GaugeMetricFamily(
            "amqp10_resource_alarm",
            "1 while a memory or disk alarm blocks publishers, else 0",
            value=0 if broker.alarm is None else 1,
        )
        yield GaugeMetricFamily(
            "amqp10_messages_disk_bytes",
            "Bytes of the persistent messages in the store",
            value=counts["disk_bytes"],
        )
        yield from _node_families(broker)

    def _traffic(self) -> Iterator[Metric]:
        ended = self.sources.ended
        frames_in = dict(ended.frames_in)
        frames_out = dict(ended.frames_out)
        errors = dict(ended.errors)
        for handler in self.sources.handlers():
            t = _traffic(handler)
            if t is not None:
                _add_traffic(t, frames_in, frames_out, errors)
        received = CounterMetricFamily(
            "amqp10_frames_received", "Protocol frames received", labels=["protocol"]
        )
        sent = CounterMetricFamily(
            "amqp10_frames_sent", "Protocol frames sent", labels=["protocol"]
        )
        for protocol in ("amqp1", "amqp091"):
            received.add_metric([protocol], frames_in.get(protocol, 0))
            sent.add_metric([protocol], frames_out.get(protocol, 0))
        yield received
        yield sent
        family = CounterMetricFamily(
            "amqp10_errors",
            "Errors the broker sent, by condition (1.0 close, end and detach; 0-9-1 connection and channel close)",
            labels=["protocol", "condition"],
        )
        for (protocol, condition), n in sorted(errors.items()):
            family.add_metric([protocol, condition], n)
        yield family

    def _store(self, store: SqlStore | None, committer: GroupCommitter | None) -> Iterator[Metric]:
        size = None if store is None else store.size_bytes()
        if size is not None:
            yield GaugeMetricFamily(
                "amqp10_store_size_bytes",
                "Size of the store's files (SQLite database and write-ahead log)",
                value=size,
            )
        if committer is not None:
            yield CounterMetricFamily(
                "amqp10_store_commits", "Store transactions committed", value=committer.commits
            )
            yield CounterMetricFamily(
                "amqp10_store_operations",
                "Store operations committed",
                value=committer.ops_committed,
            )
            if store is not None:
                yield CounterMetricFamily(
                    "amqp10_store_puts_skipped",
                    "Message writes never done: the message was settled in the batch that would have stored it",
                    value=store.puts_skipped,
                )
            yield _histogram(
                "amqp10_store_commit_seconds",
                "Time to commit one batch to the store (write and fsync)",
                committer.latency,
            )


def _node_families(broker: Broker) -> list[LabelledFamily]:
    """The per-node families: a row a node, all over one shared list of label tuples."""
    keys: list[LabelKey] = []
    rows: list[tuple[int, ...]] = []
    for vhost in broker.vhosts.values():
        vname = vhost.name
        for node in vhost.queues():
            stats = node.stats
            keys.append((vname, node.name, node.kind))
            rows.append(
                (node.count, node.bytes, len(node.consumers), stats.unacked, *_read_stats(stats))
            )
    columns = [list(column) for column in zip(*rows)]
    if not columns:  # no nodes
        columns = [[] for _ in range(4 + len(_NODE_COUNTERS))]
    depth, size, consumers, unacked, *counters = columns
    # a stream keeps what it delivers: nothing is unacked (usually every node is a queue,
    # and the families share one list of label tuples, so their label text is written once)
    queue_keys = keys
    if any(kind != "queue" for _, _, kind in keys):
        queue_keys = [k for k in keys if k[2] == "queue"]
        unacked = [n for k, n in zip(keys, unacked) if k[2] == "queue"]

    def gauge(name: str, what: str, keys: list[LabelKey], values: list[float]) -> LabelledFamily:
        return LabelledFamily(name, what, "gauge", _NODE_LABELS, keys, values)

    return [
        gauge("amqp10_node_messages", "Messages ready for delivery", keys, depth),
        gauge(
            "amqp10_node_messages_unacked",
            "Messages delivered and not yet settled by the consumer",
            queue_keys,
            unacked,
        ),
        gauge("amqp10_node_bytes", "Bytes of the messages ready for delivery", keys, size),
        gauge("amqp10_node_consumers", "Consumers attached", keys, consumers),
        *(
            LabelledFamily(name, what, "counter", _NODE_LABELS, keys, column)
            for (_, name, what), column in zip(_NODE_COUNTERS, counters)
        ),
    ]


def _histogram(name: str, what: str, h: Histogram) -> HistogramMetricFamily:
    buckets: list[tuple[str, float]] = []
    cumulative = 0
    for bound, n in zip(h.bounds, h.counts):
        cumulative += n
        buckets.append((repr(float(bound)), cumulative))
    buckets.append(("+Inf", h.count))
    return HistogramMetricFamily(name, what, buckets=buckets, sum_value=h.sum)


def metrics_registry(sources: MetricsSources) -> CollectorRegistry:
    """A registry with the broker's collector and the process's (memory, CPU, open files)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(sources))
    ProcessCollector(registry=registry)
    return registry


INLINE_SAMPLES = 5_000
"""A scrape of fewer samples (about 400 queues) is written in the event loop: handing
it to a worker thread costs more CPU than writing it (about 0.4 ms against 1 ms for
the ~1,200 samples of 100 queues), and it holds traffic up for a few ms at most."""


async def exposition(registry: CollectorRegistry, writer: TextWriter) -> bytes:
    """The text the ``/metrics`` endpoint serves (``writer``: the endpoint's, kept between scrapes).

    The numbers are read here, in the event loop, where the broker's state cannot
    change under the reading; the text of a big scrape is written in a worker
    thread, so that it does not hold up traffic.
    """
    collected = list(registry.collect())
    if samples_in(collected) < INLINE_SAMPLES:
        return writer.write(collected)
    return await anyio.to_thread.run_sync(writer.write, collected)
