"""RabbitMQ's HTTP API over real sockets: each endpoint family's status codes and JSON
shape, basic authentication by the users file's tags, and the quick start's loopback rule.

A broker on 127.0.0.1 with a users file: ``admin`` (administrator), ``watcher``
(monitoring), ``plain`` (no tag). The loopback rule for a peer that is not on loopback is
checked on :class:`RabbitApi` directly (a test cannot connect from another address).
``rabbitmqadmin`` itself drives the API in test_rabbitmqadmin.py.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from amqp10 import sync
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker
from amqp10.broker.guard import ConnectionGuard
from amqp10.broker.http_login import HttpLogin, is_loopback
from amqp10.broker.rabbitmq_api import RabbitApi, properties_key
from amqp10.broker.users import add_user
from amqp10.io.http import HttpRequest, HttpServer, Route
from tests.broker.conftest import RunningBroker, broker_with

T = 10.0
NOT_FOUND = {"error": "Object Not Found", "reason": "Not Found"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    users = tmp_path_factory.mktemp("api-users") / "users.toml"
    add_user(users, "admin", "s3cret", tags=["administrator"])
    add_user(users, "watcher", "w", tags=["monitoring"], iterations=1000)
    add_user(users, "plain", "p", iterations=1000)
    with broker_with(
        tmp_path_factory.mktemp("api-broker"),
        sasl={"users_file": users},
        security={"login_delay_base": 0.0},
    ) as b:
        yield b


def call(
    b: RunningBroker,
    method: str,
    path: str,
    body: Any = None,
    *,
    auth: tuple[str, str] | None = ("admin", "s3cret"),
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], Any]:
    """``method path`` with a JSON body (and more ``headers``); the status, headers and
    decoded JSON (None: empty)."""
    assert b.service.http_port is not None
    conn = http.client.HTTPConnection("127.0.0.1", b.service.http_port, timeout=T)
    try:
        headers = dict(headers or {})
        if auth is not None:
            headers["Authorization"] = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        raw = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(raw) if raw else None
    finally:
        conn.close()


def test_authentication_and_tags(broker: RunningBroker) -> None:
    status, headers, body = call(broker, "GET", "/api/overview", auth=None)
    assert status == 401 and headers["www-authenticate"] == 'Basic realm="RabbitMQ Management"'
    assert body["error"] == "not_authorised"
    assert call(broker, "GET", "/api/overview", auth=("admin", "wrong"))[0] == 401
    assert call(broker, "GET", "/api/overview", auth=("nobody", "x"))[0] == 401
    status, _, body = call(broker, "GET", "/api/overview", auth=("plain", "p"))
    assert (status, body["reason"]) == (401, "Not management user")
    # monitoring reads, but may not change anything
    assert call(broker, "GET", "/api/queues", auth=("watcher", "w"))[0] == 200
    status, _, body = call(broker, "PUT", "/api/queues/%2F/w", {}, auth=("watcher", "w"))
    assert status == 401 and "tag" in body["reason"]
    assert call(broker, "GET", "/api/whoami")[2] == {"name": "admin", "tags": ["administrator"]}
    assert call(broker, "GET", "/api/whoami", auth=("watcher", "w"))[2]["tags"] == ["monitoring"]


def test_overview_and_nodes(broker: RunningBroker) -> None:
    status, _, o = call(broker, "GET", "/api/overview")
    assert status == 200
    assert {"rabbitmq_version", "management_version", "cluster_name", "node"} <= o.keys()
    assert {"messages", "messages_ready", "messages_unacknowledged"} == o["queue_totals"].keys()
    assert {"connections", "channels", "exchanges", "queues", "consumers"} == o[
        "object_totals"
    ].keys()
    nodes = call(broker, "GET", "/api/nodes")[2]
    assert [n["name"] for n in nodes] == [o["node"]] and nodes[0]["running"] is True
    assert call(broker, "GET", f"/api/nodes/{o['node']}")[0] == 200


def test_queues(broker: RunningBroker) -> None:
    path = "/api/queues/%2F/api.q"
    assert call(broker, "GET", path)[:3:2] == (404, NOT_FOUND)
    args = {"x-max-length": 10}
    assert call(broker, "PUT", path, {"durable": False, "arguments": args})[0] == 201
    assert call(broker, "PUT", path, {"durable": False, "arguments": args})[0] == 204  # same: fine
    status, _, body = call(broker, "PUT", path, {"durable": True, "arguments": args})
    assert status == 400 and body["error"] == "bad_request" and "durable" in body["reason"]
    status, _, q = call(broker, "GET", path)
    assert status == 200
    assert {k: q[k] for k in ("name", "vhost", "durable", "auto_delete", "arguments", "type", "state")} == {
        "name": "api.q", "vhost": "/", "durable": False, "auto_delete": False,
        "arguments": args, "type": "classic", "state": "running",
    }  # fmt: skip
    assert (
        q["messages"] == q["messages_ready"] == q["messages_unacknowledged"] == q["consumers"] == 0
    )
    assert "api.q" in {x["name"] for x in call(broker, "GET", "/api/queues")[2]}
    assert "api.q" in {x["name"] for x in call(broker, "GET", "/api/queues/%2F")[2]}
    assert call(broker, "GET", "/api/queues/nohost")[0] == 404
    assert call(broker, "PUT", path, b"{not json")[0] == 400
    assert (
        call(broker, "PUT", "/api/queues/%2F/s", {"arguments": {"x-queue-type": "stream"}})[0]
        == 201
    )
    assert call(broker, "GET", "/api/queues/%2F/s")[2]["type"] == "stream"
    assert call(broker, "DELETE", "/api/queues/%2F/s")[0] == 204

    # publish to it through the default exchange, get with each ackmode, purge, delete
    pub = "/api/exchanges/%2F/amq.default/publish"
    for text in ("one", "two", "three"):
        body = {
            "routing_key": "api.q",
            "payload": text,
            "payload_encoding": "string",
            "properties": {},
        }
        assert call(broker, "POST", pub, body)[2] == {"routed": True}
    get = f"{path}/get"
    got = call(
        broker, "POST", get, {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}
    )[2]
    assert [(m["payload"], m["message_count"], m["redelivered"]) for m in got] == [
        ("one", 2, False)
    ]
    assert set(got[0]) == {"payload_bytes", "redelivered", "exchange", "routing_key", "message_count",
                           "properties", "payload", "payload_encoding"}  # fmt: skip
    got = call(
        broker, "POST", get, {"count": 5, "ackmode": "ack_requeue_false", "encoding": "base64"}
    )[2]
    assert [base64.b64decode(m["payload"]) for m in got] == [b"one", b"two", b"three"]
    assert got[0]["redelivered"] is True and got[0]["payload_encoding"] == "base64"
    assert call(broker, "POST", get, {"count": 1, "ackmode": "bogus"})[0] == 400
    call(
        broker, "POST", pub, {"routing_key": "api.q", "payload": "x", "payload_encoding": "string"}
    )
    assert call(broker, "GET", path)[2]["messages"] == 1
    assert call(broker, "DELETE", f"{path}/contents")[0] == 204
    assert call(broker, "GET", path)[2]["messages"] == 0
    assert call(broker, "DELETE", path)[0] == 204
    assert call(broker, "DELETE", path)[0] == 404


def test_a_queue_declared_again_is_compared_as_rabbitmq_compares(broker: RunningBroker) -> None:
    """A PUT of an existing queue is compared with it as RabbitMQ 3.10 compares a re-declaration
    (core/equivalence.py, as 0-9-1's queue.declare) and refused 400 with RabbitMQ's reason:
    an argument it does not compare may differ (it was refused), a float for an integer may
    not (it was taken), a stream is durable (its PUT non-durable said only 'durable'); JSON's
    integers are longs, as RabbitMQ's API types them."""
    path, stream = "/api/queues/%2F/api.eq", "/api/queues/%2F/api.es"
    assert call(broker, "PUT", path, {"arguments": {"x-max-length": 10}})[0] == 201
    assert call(broker, "PUT", path, {"arguments": {"x-max-length": 10, "x-consumer-timeout": 5000}})[0] == 204
    where = "for queue 'api.eq' in vhost '/'"
    for arguments, reason in (
        ({"x-max-length": 10.0}, f"inequivalent arg 'x-max-length' {where}: received '10.0' but current is '10'"),
        ({"x-max-length": 5}, f"inequivalent arg 'x-max-length' {where}: received '5' but current is '10'"),
        ({}, f"inequivalent arg 'x-max-length' {where}: received none but current is the value '10' of type 'long'"),
    ):
        status, _, body = call(broker, "PUT", path, {"arguments": arguments})
        assert (status, body) == (400, {"error": "bad_request", "reason": reason})
    assert call(broker, "PUT", stream, {"arguments": {"x-queue-type": "stream"}})[0] == 201
    status, _, body = call(broker, "PUT", stream, {"durable": False, "arguments": {"x-queue-type": "stream"}})
    assert (status, body["reason"]) == (400, "inequivalent arg 'durable' for queue 'api.es' in vhost '/': "
                                             "received 'false' but current is 'true'")  # fmt: skip
    for name in (path, stream):
        assert call(broker, "DELETE", name)[0] == 204


def test_exchanges_and_bindings(broker: RunningBroker) -> None:
    x = "/api/exchanges/%2F/api.x"
    assert call(broker, "PUT", x, {"type": "topic", "durable": "true"})[0] == 201
    assert call(broker, "PUT", x, {"type": "topic"})[0] == 204
    assert call(broker, "PUT", x, {"type": "fanout"})[0] == 400
    assert call(broker, "PUT", "/api/exchanges/%2F/bad", {"type": "nonsense"})[0] == 400
    got = call(broker, "GET", x)[2]
    assert {k: got[k] for k in ("name", "vhost", "type", "durable", "auto_delete", "internal")} == {
        "name": "api.x", "vhost": "/", "type": "topic", "durable": True, "auto_delete": False, "internal": False,
    }  # fmt: skip
    assert "amq.topic" in {e["name"] for e in call(broker, "GET", "/api/exchanges/%2F")[2]}
    ae = {"type": "fanout", "arguments": {"alternate-exchange": "amq.fanout"}}
    assert call(broker, "PUT", "/api/exchanges/%2F/api.ae", ae)[0] == 201
    assert call(broker, "GET", "/api/exchanges/%2F/api.ae")[2]["arguments"] == ae["arguments"]
    assert call(broker, "DELETE", "/api/exchanges/%2F/api.ae")[0] == 204
    call(broker, "PUT", "/api/queues/%2F/api.bq", {})
    b = "/api/bindings/%2F/e/api.x/q/api.bq"
    status, headers, _ = call(broker, "POST", b, {"routing_key": "a.*", "arguments": {}})
    assert status == 201 and headers["location"].endswith("/api.bq/a.%2A")
    call(broker, "POST", b, {"routing_key": "", "arguments": {"k": "v"}})
    listed = call(broker, "GET", b)[2]
    assert sorted(x["routing_key"] for x in listed) == ["", "a.*"]
    one = next(x for x in listed if x["routing_key"] == "a.*")
    assert one == {
        "source": "api.x", "vhost": "/", "destination": "api.bq", "destination_type": "queue",
        "routing_key": "a.*", "arguments": {}, "properties_key": "a.*",
    }  # fmt: skip
    assert call(broker, "GET", "/api/queues/%2F/api.bq/bindings")[2] == listed
    assert call(broker, "GET", "/api/exchanges/%2F/api.x/bindings/source")[2] == listed

    pub = f"{x}/publish"
    assert call(broker, "POST", pub, {"routing_key": "a.b", "payload": "hi"})[2] == {"routed": True}
    assert call(broker, "POST", pub, {"routing_key": "z", "payload": "hi"})[2] == {"routed": False}
    payload = base64.b64encode(b"\x00\xff").decode()
    body = {"routing_key": "a.c", "payload": payload, "payload_encoding": "base64",
            "properties": {"delivery_mode": 2, "headers": {"h": 1}, "message_id": "m-1"}}  # fmt: skip
    assert call(broker, "POST", pub, body)[2] == {"routed": True}
    got = call(
        broker, "POST", "/api/queues/%2F/api.bq/get", {"count": 2, "ackmode": "ack_requeue_false"}
    )[2]
    assert got[1]["payload"] == payload and got[1]["payload_encoding"] == "base64"
    assert got[1]["properties"] == {"delivery_mode": 2, "headers": {"h": 1}, "message_id": "m-1"}
    assert call(broker, "POST", pub, {"routing_key": 5})[0] == 400
    assert call(broker, "POST", "/api/exchanges/%2F/none/publish", {"routing_key": ""})[0] == 404

    assert call(broker, "GET", f"{b}/a.%2A")[2] == one
    assert call(broker, "DELETE", f"{b}/a.%2A")[0] == 204
    assert call(broker, "GET", f"{b}/a.%2A")[0] == 404
    key = properties_key("", {"k": "v"})
    assert call(broker, "DELETE", f"{b}/{key}")[0] == 204
    assert call(broker, "GET", b)[2] == []
    assert call(broker, "DELETE", x)[0] == 204
    assert call(broker, "GET", x)[0] == 404


def test_vhosts_policies_users_permissions(broker: RunningBroker) -> None:
    assert (
        call(broker, "PUT", "/api/vhosts/api-v", {"description": "made over HTTP", "tags": "a,b"})[
            0
        ]
        == 201
    )
    v = call(broker, "GET", "/api/vhosts/api-v")[2]
    assert (v["name"], v["description"], v["tags"]) == ("api-v", "made over HTTP", ["a", "b"])
    assert call(broker, "PUT", "/api/vhosts/api-v", {"description": "again"})[0] == 204
    assert "api-v" in {x["name"] for x in call(broker, "GET", "/api/vhosts")[2]}
    assert call(broker, "PUT", "/api/vhosts/api-w", {}, auth=("watcher", "w"))[0] == 401
    # its maker may use it at once, as RabbitMQ grants the user who made it (no one else)
    made = call(broker, "GET", "/api/permissions/api-v/admin")[2]
    assert (made["configure"], made["write"], made["read"]) == (".*", ".*", ".*")
    assert [p["user"] for p in call(broker, "GET", "/api/vhosts/api-v/permissions")[2]] == ["admin"]

    p = "/api/policies/%2F/api-p"
    body = {"pattern": "^api", "definition": {"max-length": 5}, "priority": 1, "apply-to": "queues"}
    assert call(broker, "PUT", p, body)[0] == 201
    assert call(broker, "GET", p)[2] == {"vhost": "/", "name": "api-p", **body}
    assert call(broker, "PUT", p, {**body, "priority": 2})[0] == 204
    assert [
        x["priority"] for x in call(broker, "GET", "/api/policies")[2] if x["name"] == "api-p"
    ] == [2]
    assert call(broker, "PUT", p, {"pattern": "^x"})[0] == 400
    assert call(broker, "DELETE", p)[0] == 204
    assert call(broker, "GET", p)[0] == 404

    users = {u["name"]: u for u in call(broker, "GET", "/api/users")[2]}
    assert users.keys() >= {"admin", "watcher", "plain"}
    assert users["admin"]["tags"] == ["administrator"] and "password_hash" in users["admin"]
    assert call(broker, "GET", "/api/users/nobody")[0] == 404
    perms = call(broker, "GET", "/api/permissions/%2F/admin")[2]
    assert {k: perms[k] for k in ("user", "vhost", "configure", "write", "read")} == {
        "user": "admin", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*",
    }  # fmt: skip
    assert perms in call(broker, "GET", "/api/users/admin/permissions")[2]
    assert perms in call(broker, "GET", "/api/vhosts/%2F/permissions")[2]
    assert call(broker, "GET", "/api/users", auth=("watcher", "w"))[0] == 401  # administrators only


def test_deleting_a_vhost_clears_its_permissions(broker: RunningBroker) -> None:
    assert call(broker, "PUT", "/api/vhosts/short-lived", {})[0] == 201
    assert call(broker, "PUT", "/api/permissions/short-lived/plain", {"configure": ".*", "write": ".*", "read": ".*"})[0] == 201
    assert call(broker, "GET", "/api/permissions/short-lived/plain")[0] == 200
    assert call(broker, "DELETE", "/api/vhosts/short-lived", auth=("watcher", "w"))[0] == 401
    assert call(broker, "DELETE", "/api/vhosts/short-lived")[0] == 204
    assert call(broker, "GET", "/api/permissions/short-lived/plain")[0] == 404
    assert all(p["vhost"] != "short-lived" for p in call(broker, "GET", "/api/permissions")[2])


def test_users_and_permissions_are_changed_in_the_users_file(broker: RunningBroker) -> None:
    u = "/api/users/dora"
    assert call(broker, "PUT", u, {"password": "pw1", "tags": "management"})[0] == 201
    assert call(broker, "GET", u)[2]["tags"] == ["management"]
    # a new user has no permissions: it is let in (its tag), but sees no host
    assert call(broker, "GET", "/api/queues/%2F", auth=("dora", "pw1"))[0] == 401
    p = "/api/permissions/%2F/dora"
    assert call(broker, "PUT", p, {"configure": "^dora", "write": ".*", "read": ".*"})[0] == 201
    assert call(broker, "PUT", p, {"configure": "^dora\\.", "write": ".*", "read": ".*"})[0] == 204
    assert call(broker, "GET", p)[2]["configure"] == "^dora\\."
    assert call(broker, "PUT", "/api/queues/%2F/dora.q", {}, auth=("dora", "pw1"))[0] == 201
    assert call(broker, "PUT", "/api/queues/%2F/other", {}, auth=("dora", "pw1"))[0] == 401
    assert call(broker, "PUT", p, {"configure": "(", "write": "", "read": ""})[0] == 400
    assert (
        call(
            broker,
            "PUT",
            "/api/permissions/nohost/dora",
            {"configure": "", "write": "", "read": ""},
        )[0]
        == 404
    )
    # a new password counts at once; the old one no longer does
    assert call(broker, "PUT", u, {"password": "pw2", "tags": ["management"]})[0] == 204
    assert call(broker, "GET", "/api/whoami", auth=("dora", "pw1"))[0] == 401
    assert call(broker, "GET", "/api/whoami", auth=("dora", "pw2"))[2]["name"] == "dora"
    assert call(broker, "PUT", u, {"password": "x", "tags": "nonsense-tag"})[0] == 400
    assert call(broker, "PUT", "/api/users/eve", {"password": "x"}, auth=("watcher", "w"))[0] == 401
    assert call(broker, "DELETE", p)[0] == 204
    assert call(broker, "DELETE", p)[0] == 404
    assert call(broker, "DELETE", u)[0] == 204
    assert call(broker, "GET", u)[0] == 404
    assert call(broker, "GET", "/api/whoami", auth=("dora", "pw2"))[0] == 401
    call(broker, "DELETE", "/api/queues/%2F/dora.q")


def test_definitions(broker: RunningBroker) -> None:
    call(broker, "PUT", "/api/queues/%2F/def.q", {})
    status, _, document = call(broker, "GET", "/api/definitions")
    assert status == 200 and "def.q" in {q["name"] for q in document["queues"]}
    assert {
        "users",
        "vhosts",
        "permissions",
        "exchanges",
        "bindings",
        "policies",
    } <= document.keys()
    one = call(broker, "GET", "/api/definitions/%2F")[2]
    assert "users" not in one and all("vhost" not in q for q in one["queues"])
    call(broker, "DELETE", "/api/queues/%2F/def.q")
    assert call(broker, "POST", "/api/definitions", document)[0] == 204
    assert call(broker, "GET", "/api/queues/%2F/def.q")[0] == 200
    call(broker, "PUT", "/api/vhosts/def-v", {})
    assert (
        call(
            broker,
            "POST",
            "/api/definitions/def-v",
            {"queues": [{"name": "in-v", "durable": True}]},
        )[0]
        == 204
    )
    assert call(broker, "GET", "/api/queues/def-v/in-v")[0] == 200
    assert call(broker, "POST", "/api/definitions", b"[1]")[0] == 400
    assert call(broker, "GET", "/api/definitions", auth=("watcher", "w"))[0] == 401


def test_connections_and_channels(broker: RunningBroker) -> None:
    with sync.connect(f"amqp://admin:s3cret@{broker.url}", timeout=T) as conn:
        conn.open_sender("conn.q")  # a session and a link
        conns = call(broker, "GET", "/api/connections")[2]
        assert len(conns) == 1
        c = conns[0]
        assert {
            "name",
            "user",
            "vhost",
            "protocol",
            "peer_host",
            "peer_port",
            "state",
            "channels",
            "node",
        } <= c.keys()
        assert (c["user"], c["vhost"], c["peer_host"]) == ("admin", "/", "127.0.0.1")
        assert call(broker, "GET", f"/api/connections/{c['name']}")[2]["name"] == c["name"]
        channels = call(broker, "GET", "/api/channels")[2]
        assert channels and channels[0]["connection_details"]["name"] == c["name"]
        status, _, _ = call(broker, "DELETE", f"/api/connections/{c['name']}")
        assert status == 204
    assert call(broker, "DELETE", "/api/connections/nobody")[0] == 404


def test_connections_are_listed_after_the_statistics_interval(tmp_path: Path) -> None:
    """``rabbitmq_api_statistics_interval``: as RabbitMQ's statistics collector, the API
    lists a connection (and finds it by name, to close it) only that long after its open;
    RabbitMQ's clients' suites wait for that before closing connections through it."""
    with broker_with(tmp_path, http={"rabbitmq_api_statistics_interval": 3600}) as b, sync.connect(f"amqp://{b.url}", timeout=T) as conn:
        assert call(b, "GET", "/api/connections", auth=None)[2] == []
        (name,) = [c.name for c in b.service.clients]
        assert call(b, "GET", f"/api/connections/{name}", auth=None)[0] == 404
        assert call(b, "DELETE", f"/api/connections/{name}", auth=None)[0] == 404
        conn.open_sender("still.open")  # not closed
    with broker_with(tmp_path / "short", http={"rabbitmq_api_statistics_interval": 0.2}) as b, sync.connect(f"amqp://{b.url}", timeout=T):
        listed: list[Any] = []
        for _ in range(100):  # bounded: 100 x 0.05 s
            listed = call(b, "GET", "/api/connections", auth=None)[2]
            if listed:
                break
            time.sleep(0.05)
        assert len(listed) == 1
        assert call(b, "DELETE", f"/api/connections/{listed[0]['name']}", auth=None)[0] == 204


def test_consumers(tmp_path: Path) -> None:
    """GET /api/consumers lists each 0-9-1 consumer and 1.0 receiving link as RabbitMQ
    does; /api/consumers/{vhost} a host's; GET /api/queues/{vhost}/{name} a queue's, in
    its ``consumer_details``."""
    import pika

    with broker_with(tmp_path) as b:
        assert call(b, "PUT", "/api/vhosts/other", {}, auth=None)[0] == 201
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
        other = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port, virtual_host="other"))
        try:
            ch = conn.channel()
            ch.queue_declare("work")
            ch.basic_qos(prefetch_count=7)
            ch.basic_consume("work", lambda *a: None, consumer_tag="mine", arguments={"x-priority": 3})
            ch.basic_consume("work", lambda *a: None, auto_ack=True, exclusive=False, consumer_tag="fast")
            och = other.channel()
            och.queue_declare("there")
            och.basic_consume("there", lambda *a: None, consumer_tag="theirs")
            with sync.connect(f"amqp://{b.url}", timeout=T) as amqp1:
                amqp1.open_receiver("work", credit=5)
                listed = call(b, "GET", "/api/consumers", auth=None)[2]
                by_tag = {c["consumer_tag"]: c for c in listed}
                assert by_tag.keys() - {"mine", "fast", "theirs"} and len(by_tag) == 4
                mine = by_tag["mine"]
                assert mine["queue"] == {"name": "work", "vhost": "/"}
                assert (mine["ack_required"], mine["exclusive"], mine["prefetch_count"]) == (True, False, 7)
                assert mine["arguments"] == {"x-priority": 3} and mine["active"] is True
                details = mine["channel_details"]
                assert details["number"] == ch.channel_number and details["peer_host"] == "127.0.0.1"
                assert details["name"] == f"{details['connection_name']} ({ch.channel_number})"
                assert by_tag["fast"]["ack_required"] is False
                (link,) = [c for t, c in by_tag.items() if t not in ("mine", "fast", "theirs")]
                assert link["queue"]["name"] == "work" and link["ack_required"] is True
                assert [c["consumer_tag"] for c in call(b, "GET", "/api/consumers/other", auth=None)[2]] == ["theirs"]
                # a queue's own page: its consumers, shaped as /api/consumers shapes them
                work = call(b, "GET", "/api/queues/%2F/work", auth=None)[2]
                assert work["consumers"] == 3
                assert {c["consumer_tag"]: c for c in work["consumer_details"]} == {
                    t: c for t, c in by_tag.items() if t != "theirs"
                }
                there = call(b, "GET", "/api/queues/other/there", auth=None)[2]["consumer_details"]
                assert [(c["consumer_tag"], c["activity_status"]) for c in there] == [("theirs", "up")]
                assert call(b, "GET", "/api/consumers/nowhere", auth=None)[0] == 404
            ch.basic_cancel("mine")
            assert "mine" not in {c["consumer_tag"] for c in call(b, "GET", "/api/consumers", auth=None)[2]}
        finally:
            conn.close()
            other.close()


def test_health_and_errors(broker: RunningBroker) -> None:
    assert call(broker, "GET", "/api/aliveness-test/%2F")[2] == {"status": "ok"}
    assert call(broker, "GET", "/api/aliveness-test/nohost")[0] == 404
    for check in ("alarms", "local-alarms", "virtual-hosts", "node-is-quorum-critical"):
        assert call(broker, "GET", f"/api/health/checks/{check}")[:3:2] == (
            200,
            {"status": "ok"},
        ), check
    assert call(broker, "GET", "/api/health/checks/port-listener/5672")[2]["status"] == "ok"
    assert call(broker, "GET", "/api/no-such-thing")[:3:2] == (404, NOT_FOUND)
    for empty in ("parameters", "operator-policies", "vhost-limits/%2F", "global-parameters"):
        assert call(broker, "GET", f"/api/{empty}")[:3:2] == (200, []), empty
    assert call(broker, "PATCH", "/api/queues")[0] == 405
    assert call(broker, "POST", "/api/queues/%2F/q")[0] == 405


def test_the_quick_start_lets_loopback_in(tmp_path: Path) -> None:
    with broker_with(tmp_path) as b:  # no users file, anonymous allowed
        for auth in (None, ("guest", "guest"), ("anyone", "anything")):
            assert call(b, "GET", "/api/overview", auth=auth)[0] == 200
        assert call(b, "GET", "/api/whoami", auth=None)[2] == {
            "name": "guest",
            "tags": ["administrator"],
        }
        assert call(b, "PUT", "/api/queues/%2F/q", {}, auth=None)[0] == 201
        status, _, body = call(b, "PUT", "/api/users/u", {"password": "p", "tags": ""}, auth=None)
        assert status == 400 and "no users file" in body["reason"]
        status, _, body = call(b, "DELETE", "/api/vhosts/%2F", auth=None)
        assert status == 400 and "default virtual host" in body["reason"]


def test_deleting_a_vhost_closes_its_connections_and_drops_what_it_held(tmp_path: Path) -> None:
    """As RabbitMQ: DELETE /api/vhosts/{name} closes the host's connections and deletes its
    queues (with their messages), exchanges and policies, in the store too."""
    import pika
    import pika.exceptions

    with broker_with(tmp_path) as b:
        assert call(b, "PUT", "/api/vhosts/doomed", {}, auth=None)[0] == 201
        assert call(b, "PUT", "/api/policies/doomed/p", {"pattern": ".*", "definition": {"max-length": 9}}, auth=None)[0] == 201
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port, virtual_host="doomed"))
        ch = conn.channel()
        ch.exchange_declare("x", "direct", durable=True)
        ch.queue_declare("q", durable=True)
        ch.queue_bind("q", "x", "k")
        ch.basic_publish("x", "k", b"kept?", pika.BasicProperties(delivery_mode=2))
        assert call(b, "GET", "/api/queues/doomed/q", auth=None)[2]["messages"] == 1
        assert call(b, "DELETE", "/api/vhosts/doomed", auth=None)[0] == 204
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            ch.queue_declare("q", passive=True)
            conn.process_data_events(time_limit=T)  # bounded: the close comes first
        assert closed.value.reply_code == 320 and "vhost 'doomed' is deleted" in closed.value.reply_text
        assert call(b, "GET", "/api/vhosts/doomed", auth=None)[0] == 404
        assert call(b, "DELETE", "/api/vhosts/doomed", auth=None)[0] == 404
        assert call(b, "PUT", "/api/vhosts/doomed", {}, auth=None)[0] == 201  # made again: empty
        assert call(b, "GET", "/api/queues/doomed", auth=None)[2] == []
        assert call(b, "GET", "/api/policies/doomed", auth=None)[2] == []
        assert "x" not in {x["name"] for x in call(b, "GET", "/api/exchanges/doomed", auth=None)[2]}
        assert call(b, "DELETE", "/api/vhosts/doomed", auth=None)[0] == 204
    with broker_with(tmp_path) as b:  # the same store: nothing of it comes back
        assert "doomed" not in {v["name"] for v in call(b, "GET", "/api/vhosts", auth=None)[2]}
        assert [q["vhost"] for q in call(b, "GET", "/api/queues", auth=None)[2] if q["name"] == "q"] == []


def test_rabbitmq_api_port_serves_the_same_routes(tmp_path: Path) -> None:
    with socket.socket() as s:  # a free port for the second listener (RabbitMQ's 15672)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with broker_with(tmp_path, http={"rabbitmq_api_port": port}) as b:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=T)
        try:
            conn.request("GET", "/api/overview")
            r = conn.getresponse()
            assert r.status == 200 and "rabbitmq_version" in json.loads(r.read())
            conn.request("GET", "/console/")
            r = conn.getresponse()
            assert r.status == 200 and b"<html" in r.read().lower()
        finally:
            conn.close()
        assert call(b, "GET", "/api/overview", auth=None)[0] == 200  # the main port too
    with socket.socket() as s:  # closed with the broker
        s.bind(("127.0.0.1", port))


def test_the_api_can_be_turned_off(tmp_path: Path) -> None:
    with broker_with(tmp_path, http={"rabbitmq_api": False}) as b:
        assert call(b, "GET", "/api/overview", auth=None)[0] == 404


def _request(peer: str) -> HttpRequest:
    return HttpRequest(
        method="GET", target="/api/overview", path="/api/overview", headers=(), peer=peer
    )


@pytest.mark.parametrize("allow_anonymous", [True, False])
def test_loopback_rule_without_a_users_file(allow_anonymous: bool) -> None:
    config = BrokerConfig()
    api = RabbitApi(
        Broker(config),
        HttpLogin(lambda: None, ConnectionGuard(config.security), allow_anonymous=allow_anonymous),
    )

    async def status(peer: str) -> int:
        return (await api.handle(_request(peer))).status

    for peer in ("127.0.0.1:4000", "127.8.9.1:1", "[::1]:4000"):
        assert anyio.run(status, peer) == (200 if allow_anonymous else 401), peer
    for peer in ("10.1.2.3:4000", "[2001:db8::1]:80", "192.168.0.2:5"):
        response = anyio.run(status, peer)
        assert response == 401, peer
    assert is_loopback("127.0.0.1:1") and not is_loopback("unknown peer")


def test_prefix_routes_exact_first_then_longest() -> None:
    exact, short, long = Route(), Route(), Route()
    server = HttpServer({"/api/overview": exact, "/api/*": short, "/api/queues/*": long})
    assert server.route_for("/api/overview") is exact
    assert server.route_for("/api/queues/%2F/q") is long
    assert server.route_for("/api/exchanges") is short
    assert server.route_for("/api") is None and server.route_for("/apix/y") is None


def test_a_vhosts_default_queue_type_applies_as_in_rabbitmq_3_10(tmp_path: Path) -> None:
    """PUT /api/vhosts/{name} with ``defaultqueuetype`` (RabbitMQ 3.10's body key; set when
    the host is made, ignored on an update) keeps it with the host: reported, exported in
    the definitions' vhost metadata, and a 0-9-1 queue.declare without x-queue-type there
    gets it where the type takes such a queue (durable, not exclusive, not auto-delete), so
    a re-declaration compares it (rabbit_amqqueue:augment_declare_args/5); it was ignored."""
    import pika

    with broker_with(tmp_path) as b:
        assert call(b, "PUT", "/api/vhosts/qv", {"defaultqueuetype": "quorum"}, auth=None)[0] == 201
        assert call(b, "PUT", "/api/vhosts/qv", {"defaultqueuetype": "stream", "description": "d"}, auth=None)[0] == 204
        assert call(b, "PUT", "/api/vhosts/bad", {"defaultqueuetype": "mirrored"}, auth=None)[0] == 400
        assert "bad" not in b.broker.vhosts
        listed = call(b, "GET", "/api/vhosts/qv", auth=None)[2]
        assert listed["default_queue_type"] == "quorum" and listed["metadata"]["default_queue_type"] == "quorum"
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port, virtual_host="qv"))
        try:
            ch = conn.channel()
            ch.queue_declare("dq", durable=True)
            ch.queue_declare("dq", durable=True)  # the same: equivalent
            ch.queue_declare("dq", durable=True, arguments={"x-queue-type": "quorum"})
            ch.queue_declare("transient", durable=False)
            ch.queue_declare("", exclusive=True)
            ch.queue_declare("mine", durable=True, arguments={"x-queue-type": "classic"})
            nodes = b.broker.vhosts["qv"].nodes
            assert nodes["dq"].arguments == {"x-queue-type": "quorum"}
            assert nodes["transient"].arguments == {} and nodes["mine"].arguments == {"x-queue-type": "classic"}
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
                ch.queue_declare("dq", durable=True, arguments={"x-queue-type": "classic"})
            assert refused.value.reply_code == 406
            assert "inequivalent arg 'x-queue-type' for queue 'dq' in vhost 'qv': received 'classic' but current is 'quorum'" in refused.value.reply_text
            ch = conn.channel()
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
                ch.queue_declare("transient", durable=False, arguments={"x-queue-type": "quorum"})
            assert "received the value 'quorum' of type 'longstr' but current is none" in refused.value.reply_text
        finally:
            conn.close()
        (vhost,) = [v for v in call(b, "GET", "/api/definitions", auth=None)[2]["vhosts"] if v["name"] == "qv"]
        assert vhost["metadata"]["default_queue_type"] == "quorum"
        queues = {q["name"]: q for q in call(b, "GET", "/api/definitions", auth=None)[2]["queues"]}
        assert queues["dq"]["type"] == "quorum"


def test_a_queue_put_over_http_gets_its_hosts_default_queue_type(tmp_path: Path) -> None:
    """PUT /api/queues in a host with a default queue type declares as a 0-9-1 declaration
    does (RabbitMQ 3.10's API declares through a channel): a durable queue without
    x-queue-type gets the host's type, and a re-declaration is compared with it; a transient
    one does not (it was declared classic, then refused as a quorum queue's re-declaration)."""
    with broker_with(tmp_path) as b:
        assert call(b, "PUT", "/api/vhosts/qv", {"defaultqueuetype": "quorum"}, auth=None)[0] == 201
        assert call(b, "PUT", "/api/queues/qv/hq", {"durable": True}, auth=None)[0] == 201
        assert b.broker.vhosts["qv"].nodes["hq"].arguments == {"x-queue-type": "quorum"}
        assert call(b, "PUT", "/api/queues/qv/hq", {"durable": True}, auth=None)[0] == 204
        status, _, body = call(b, "PUT", "/api/queues/qv/hq", {"durable": True, "arguments": {"x-queue-type": "classic"}}, auth=None)
        assert status >= 400 and "inequivalent arg 'x-queue-type'" in str(body)
        assert call(b, "PUT", "/api/queues/qv/tq", {"durable": False}, auth=None)[0] == 201
        assert b.broker.vhosts["qv"].nodes["tq"].arguments == {}
