"""One broker and one local Spark session for the whole of tests/spark (Spark takes ~20 s to start).

The broker runs in a background thread (as in tests/broker); the Spark driver
is this process, its Python workers run this interpreter. Each test uses its
own addresses, so they share both.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from amqp10.broker.config import AddressRule, BrokerConfig, Listener, QueuePolicy, StoreConfig
from amqp10.message import Message
from amqp10.spark._client import BrokerClient
from amqp10.spark.options import SourceOptions
from tests.broker.conftest import RunningBroker, start_broker

DEDUP = QueuePolicy(duplicate_window=100_000)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    config = BrokerConfig(
        listeners=[Listener(host="127.0.0.1", port=0)],
        store=StoreConfig(
            path=tmp_path_factory.mktemp("broker") / "store.sqlite3", commit_interval_ms=1
        ),
        addresses=[
            AddressRule(pattern="events*", kind="stream", policy=DEDUP),
            AddressRule(pattern="dedup*", kind="queue", policy=DEDUP),
            AddressRule(
                pattern="retained*", kind="stream", policy=QueuePolicy(retention_bytes=2000)
            ),
            AddressRule(
                pattern="parts*",
                kind="stream",
                policy=QueuePolicy(partitions=3, duplicate_window=100_000),
            ),
        ],
    )
    yield from start_broker(config)


@pytest.fixture(scope="session")
def url(broker: RunningBroker) -> str:
    return f"amqp://{broker.url}"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    import amqp10.spark

    session = amqp10.spark.local_session("amqp10-tests")
    yield session
    session.stop()


@pytest.fixture
def publish(url: str) -> Callable[..., None]:
    """``publish(address, messages)``: send and wait until the broker accepted them all."""

    def send(address: str, messages: list[Message]) -> None:
        with BrokerClient(SourceOptions.parse({"url": url, "address": address})) as client:
            client.publish(address, [m.encode() for m in messages])

    return send


def load(reader: Any, url: str, address: str, **options: str) -> Any:
    """``reader`` (``spark.read`` or ``spark.readStream``) of ``format("amqp10")`` with options, loaded."""
    r = reader.format("amqp10").option("url", url).option("address", address)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def numbered(n: int, prefix: str = "m", start: int = 0) -> list[Message]:
    """``n`` messages with string bodies ``<prefix><i>`` and message-ids ``<prefix>-<i>``."""
    return [Message(body=f"{prefix}{i}", id=f"{prefix}-{i}") for i in range(start, start + n)]


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def node_count(broker: RunningBroker, address: str) -> int:
    """Messages in a queue (or a stream) right now, read in the broker's own thread."""

    def count() -> int:
        node = broker.broker.nodes.get(address)
        return 0 if node is None else int(node.count)

    return int(broker.portal.call(_sync, count))


async def _sync(fn: Callable[[], Any]) -> Any:
    return fn()


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    return tmp_path / "checkpoint"
