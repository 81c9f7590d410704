"""``/metrics``: scraped over HTTP and read with Prometheus's own parser; the numbers are
what the test did (connections, links, per-node counters, frames, errors, the store)."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pika
import pytest
from prometheus_client.parser import text_string_to_metric_families

from amqp10 import errors
from amqp10.broker.service import BrokerService
from amqp10.client import connect
from amqp10.message import Message
from amqp10.types import Accepted
from tests.broker.conftest import broker_in_loop, broker_with
from tests.io.http_helpers import http_exchange

pytestmark = pytest.mark.anyio

T = 10.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse_metrics(text: str) -> Samples:
    """Every sample by (name, sorted labels); the text must parse as Prometheus's format."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def scrape(service: BrokerService) -> Samples:
    assert service.http_port is not None
    raw = await http_exchange(
        service.http_port,
        b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    )
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head
    assert b"content-type: text/plain; version=0.0.4" in head.lower()
    return parse_metrics(body.decode())


def node(samples: Samples, name: str, queue: str, kind: str = "queue") -> float:
    return samples[(name, (("kind", kind), ("node", queue), ("vhost", "/")))]


def one(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


async def test_node_counters_match_what_the_clients_did(tmp_path: Path) -> None:
    async with broker_in_loop(tmp_path, default_policy={"dead_letter_address": "dlq"}) as service:
        url = f"amqp://127.0.0.1:{service.ports[0]}"
        async with await connect(url, timeout=T) as conn:
            sender = await conn.open_sender("orders")
            for i in range(10):
                assert isinstance(await sender.send(Message(body=f"order {i}" * 10)), Accepted)
            receiver = await conn.open_receiver("orders", credit=0)
            receiver.add_credit(4)  # exactly 4: no window refilled behind the test's back
            got = [await receiver.receive(timeout=T) for _ in range(4)]
            await got[0].accept()
            await got[1].accept()
            await got[2].reject()
            # got[3] stays unsettled; a scrape sees the settlements once the broker has them
            with anyio.fail_after(T):
                while service.broker.nodes["orders"].stats.rejected < 1:  # type: ignore[union-attr]
                    await anyio.sleep(0.01)
            m = await scrape(service)
            assert one(m, "amqp10_connections") == 1
            assert one(m, "amqp10_sessions") == 1
            assert one(m, "amqp10_links") == 2
            assert node(m, "amqp10_node_messages", "orders") == 6
            orders = service.broker.nodes["orders"]  # type: ignore[union-attr]
            assert node(m, "amqp10_node_bytes", "orders") == orders.bytes > 0
            assert node(m, "amqp10_node_consumers", "orders") == 1
            assert node(m, "amqp10_node_messages_published_total", "orders") == 10
            assert node(m, "amqp10_node_messages_delivered_total", "orders") == 4
            assert node(m, "amqp10_node_messages_acknowledged_total", "orders") == 2
            assert node(m, "amqp10_node_messages_rejected_total", "orders") == 1
            assert node(m, "amqp10_node_messages_dead_lettered_total", "orders") == 1
            assert node(m, "amqp10_node_messages_unacked", "orders") == 1
            assert node(m, "amqp10_node_messages", "dlq") == 1
            assert node(m, "amqp10_node_messages_published_total", "dlq") == 1
            assert one(m, "amqp10_messages_memory_bytes") == service.broker.stats.memory_bytes > 0
            frames_in = one(m, "amqp10_frames_received_total", protocol="amqp1")
            frames_out = one(m, "amqp10_frames_sent_total", protocol="amqp1")
            # at least: open, begin, 2 attaches, 10 transfers, 3 dispositions in; open,
            # begin, 2 attaches, 4 transfers out
            assert frames_in >= 17 and frames_out >= 8
            assert one(m, "process_resident_memory_bytes") > 1_000_000
        # the connection has ended: nothing held, and the frame counters did not go back
        with anyio.fail_after(T):
            while service.clients:
                await anyio.sleep(0.01)
        m = await scrape(service)
        assert one(m, "amqp10_connections") == 0 and one(m, "amqp10_links") == 0
        assert node(m, "amqp10_node_messages", "orders") == 7  # the unsettled one came back
        assert node(m, "amqp10_node_messages_released_total", "orders") == 1
        assert node(m, "amqp10_node_messages_unacked", "orders") == 0
        assert one(m, "amqp10_frames_received_total", protocol="amqp1") > frames_in
        assert one(m, "amqp10_frames_sent_total", protocol="amqp1") > frames_out


async def test_store_commits_and_their_latency(tmp_path: Path) -> None:
    async with broker_in_loop(tmp_path) as service:
        before = await scrape(service)
        url = f"amqp://127.0.0.1:{service.ports[0]}"
        async with await connect(url, timeout=T) as conn:
            sender = await conn.open_sender("durable-q")
            for _ in range(5):
                msg = Message(body=b"x" * 1000, durable=True)
                assert isinstance(await sender.send(msg), Accepted)
        m = await scrape(service)
        committer = service.committer
        assert committer is not None
        commits = one(m, "amqp10_store_commits_total")
        assert commits == committer.commits >= one(before, "amqp10_store_commits_total") + 1
        assert one(m, "amqp10_store_operations_total") == committer.ops_committed >= 5
        assert service.store is not None
        assert one(m, "amqp10_store_puts_skipped_total") == service.store.puts_skipped == 0  # nobody consumed
        assert one(m, "amqp10_store_commit_seconds_count") == commits
        assert one(m, "amqp10_store_commit_seconds_bucket", le="+Inf") == commits
        assert one(m, "amqp10_store_commit_seconds_sum") > 0
        assert one(m, "amqp10_store_size_bytes") > 5 * 1000
        assert one(m, "amqp10_messages_disk_bytes") >= 5 * 1000


async def test_errors_by_condition(tmp_path: Path) -> None:
    async with broker_in_loop(tmp_path) as service:
        url = f"amqp://127.0.0.1:{service.ports[0]}"
        for _ in range(2):
            with pytest.raises(errors.ConnectionError):
                async with await connect(url, hostname="vhost:nope", timeout=T) as conn:
                    await conn.open_sender("q")
        m = await scrape(service)
        assert one(m, "amqp10_errors_total", protocol="amqp1", condition="amqp:not-found") == 2


def test_amqp091_frames_and_errors(tmp_path: Path) -> None:
    import urllib.request

    with broker_with(tmp_path) as b:
        params = pika.ConnectionParameters("127.0.0.1", b.port, blocked_connection_timeout=T)
        conn = pika.BlockingConnection(params)
        try:
            ch = conn.channel()
            ch.queue_declare("q091")
            for i in range(3):
                ch.basic_publish("", "q091", f"m{i}".encode())
            with pytest.raises(pika.exceptions.ChannelClosedByBroker):
                conn.channel().queue_declare("missing", passive=True)
            ch.queue_declare("q091", passive=True)  # the first channel is still open
            url = f"http://127.0.0.1:{b.service.http_port}/metrics"
            with urllib.request.urlopen(url, timeout=T) as r:
                m = parse_metrics(r.read().decode())
        finally:
            conn.close()
        assert one(m, "amqp10_errors_total", protocol="amqp091", condition="not-found") == 1
        assert one(m, "amqp10_frames_received_total", protocol="amqp091") >= 3 * 3
        assert node(m, "amqp10_node_messages", "q091") == 3
        assert node(m, "amqp10_node_messages_published_total", "q091") == 3


async def test_metrics_can_be_turned_off(tmp_path: Path) -> None:
    async with broker_in_loop(tmp_path, http={"metrics": False}) as service:
        assert service.http_port is not None
        raw = await http_exchange(
            service.http_port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        assert raw.startswith(b"HTTP/1.1 404 ")


async def test_every_metric_is_in_the_docs(tmp_path: Path) -> None:
    """docs/web.md lists each metric the broker serves (and no name it does not serve)."""
    docs = (Path(__file__).parents[3] / "docs" / "web.md").read_text()
    async with broker_in_loop(tmp_path) as service:
        url = f"amqp://127.0.0.1:{service.ports[0]}"
        async with await connect(url, timeout=T) as conn:
            await (await conn.open_sender("any")).send(Message(body="x"))
        with pytest.raises(errors.ConnectionError):  # so that an error is counted too
            async with await connect(url, hostname="vhost:nope", timeout=T) as conn:
                await conn.open_sender("q")
        served = {name for name, _ in await scrape(service)}
    families = {
        re.sub(r"_(bucket|count|sum)$", "", n) if "commit_seconds" in n else n for n in served
    }
    documented = set(re.findall(r"`((?:amqp10|process)_[a-z_]+)`", docs))
    assert families - documented == set()
    assert {n for n in documented if n.startswith("amqp10_")} - families == set()
