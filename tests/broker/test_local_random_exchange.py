"""RabbitMQ 4's ``x-local-random`` exchange on one node: each message goes to one bound
queue chosen at random; a binding must have an empty key and a queue for destination
(RabbitMQ's ``rabbit_exchange_type_local_random``). Declared through the core, 0-9-1
(pika), RabbitMQ's HTTP API and its AMQP 1.0 management (test_rabbitmq4.py)."""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from amqp10.broker.core import PreconditionFailed
from amqp10.broker.core.exchanges import Binding, LocalRandomExchange, make_exchange
from amqp10.broker.core.message import QueuedMessage
from amqp10.broker.core.queue_policy import QueuePolicy
from amqp10.broker.core.queues import Queue
from amqp10.broker.core.streams import Stream
from tests.broker.conftest import RunningBroker, broker_with

T = 10


def _now() -> float:
    return 0.0


def test_core_routes_each_message_to_exactly_one_bound_queue() -> None:
    x = make_exchange("x-local-random", "lr")
    assert isinstance(x, LocalRandomExchange)
    queues = [Queue(f"q{i}", QueuePolicy(), now=_now) for i in range(3)]
    for q in queues:
        assert x.bind(Binding(x, q, ""))
    seen: dict[str, int] = {}
    msg = QueuedMessage(b"")  # (a message, not None: the compiled build checks the type)
    for _ in range(300):
        dests = list(x.match(msg, "any key"))
        assert len(dests) == 1
        seen[dests[0].name] = seen.get(dests[0].name, 0) + 1
    assert set(seen) == {"q0", "q1", "q2"}  # each picked (chance of a miss: 3 * (2/3)**300)
    assert list(make_exchange("x-local-random", "empty").match(msg, None)) == []


def test_core_refuses_a_key_or_a_destination_that_is_not_a_queue() -> None:
    x = make_exchange("x-local-random", "lr")
    with pytest.raises(ValueError, match="Non empty binding 'k' key not permitted"):
        x.bind(Binding(x, Queue("q", QueuePolicy(), now=_now), "k"))
    with pytest.raises(ValueError, match="not valid for this exchange type"):
        x.bind(Binding(x, Stream("s", QueuePolicy(), now=_now), ""))
    with pytest.raises(ValueError, match="not valid for this exchange type"):
        x.bind(Binding(x, make_exchange("fanout", "f"), ""))
    assert not x.bindings


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_with(tmp_path) as b:
        yield b


def test_vhost_bind_answers_precondition_failed(broker: RunningBroker) -> None:
    vh = broker.broker.vhost("/")

    def declare() -> None:
        vh.declare_exchange("lr-core", "x-local-random")
        vh.declare_queue("lr-core-q")
        with pytest.raises(PreconditionFailed, match="key not permitted"):
            vh.bind("lr-core", "lr-core-q", "rk")

    broker.portal.call(_sync, declare)


async def _sync(fn: Any) -> None:
    fn()


def test_pika_declares_binds_and_publishes(broker: RunningBroker) -> None:
    conn = pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", broker.port, blocked_connection_timeout=T)
    )
    try:
        ch = conn.channel()
        ch.exchange_declare("lr91", exchange_type="x-local-random")
        for q in ("lr91a", "lr91b"):
            ch.queue_declare(q)
            ch.queue_bind(q, "lr91", routing_key="")
        ch.confirm_delivery()
        for i in range(40):
            ch.basic_publish("lr91", "whatever", str(i).encode(), mandatory=True)
        counts = [
            ch.queue_declare(q, passive=True).method.message_count for q in ("lr91a", "lr91b")
        ]
        assert sum(counts) == 40 and min(counts) > 0  # (chance of all on one: 2 * 2**-40)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
            ch.queue_bind("lr91a", "lr91", routing_key="k")
        assert err.value.reply_code == 406 and "key not permitted" in err.value.reply_text
    finally:
        if conn.is_open:
            conn.close()


def _http(b: RunningBroker, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    assert b.service.http_port is not None
    conn = http.client.HTTPConnection("127.0.0.1", b.service.http_port, timeout=T)
    try:
        headers = {"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}
        data = None if body is None else json.dumps(body).encode()
        if data is not None:
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        raw = r.read()
        return r.status, json.loads(raw) if raw else None
    finally:
        conn.close()


def test_http_api_declares_lists_and_routes(broker: RunningBroker) -> None:
    status, overview = _http(broker, "GET", "/api/overview")
    assert status == 200
    assert "x-local-random" in [t["name"] for t in overview["exchange_types"]]
    assert _http(broker, "PUT", "/api/exchanges/%2F/lrh", {"type": "x-local-random"})[0] == 201
    assert _http(broker, "GET", "/api/exchanges/%2F/lrh")[1]["type"] == "x-local-random"
    for q in ("lrh1", "lrh2"):
        assert _http(broker, "PUT", f"/api/queues/%2F/{q}", {})[0] == 201
        assert (
            _http(broker, "POST", f"/api/bindings/%2F/e/lrh/q/{q}", {"routing_key": ""})[0] == 201
        )
    status, body = _http(broker, "POST", "/api/bindings/%2F/e/lrh/q/lrh1", {"routing_key": "k"})
    assert status == 400, body
    for _ in range(10):
        msg = {"routing_key": "x", "payload": "p", "payload_encoding": "string", "properties": {}}
        assert _http(broker, "POST", "/api/exchanges/%2F/lrh/publish", msg) == (
            200,
            {"routed": True},
        )
    counts = [_http(broker, "GET", f"/api/queues/%2F/{q}")[1]["messages"] for q in ("lrh1", "lrh2")]
    assert sum(counts) == 10
