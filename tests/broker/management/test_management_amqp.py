"""``$management`` over AMQP 1.0 (the OASIS AMQP Management draft) on a running broker,
driven by our own client and by python-qpid-proton: every operation, replies by a
dynamic node and by a receiver link's target address, correlation by message-id,
authorization by user tags, and hostile requests answered with 4xx while the broker
(and the requester's links) stay up."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Message as ProtonMessage
from proton.reactor import LinkOption
from proton.utils import BlockingConnection, SyncRequestResponse

import amqp10.sync
from amqp10 import errors
from amqp10.broker.users import add_user
from amqp10.message import Message
from amqp10.types import Rejected, Target
from tests.broker.conftest import RunningBroker, broker_with

T = 10.0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_with(tmp_path) as b:
        yield b


def props(operation: Any, type: str | None = None, name: str | None = None, **more: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"operation": operation, **more}
    if type is not None:
        out["type"] = type
    if name is not None:
        out["name"] = name
    return out


def ask(conn: amqp10.sync.Connection, operation: Any, type: str | None = None, name: str | None = None, body: Any = None, **more: Any) -> tuple[int, Any, dict[str, Any]]:
    request = Message(body=body, application_properties=props(operation, type, name, **more))
    request.id = f"req-{uuid.uuid4()}"
    reply = conn.request("$management", request, timeout=T)
    assert reply.correlation_id == request.id
    p = dict(reply.application_properties or {})
    assert isinstance(p["statusDescription"], str) and p["statusDescription"]
    assert p["status-code"] == p["statusCode"]
    return p["statusCode"], reply.body, p


def test_every_operation_with_our_client(broker: RunningBroker) -> None:
    with amqp10.sync.connect(broker.url, timeout=T) as conn:
        status, body, _ = ask(conn, "CREATE", "queue", "orders", {"durable": False})
        assert (status, body["name"], body["durable"], body["depth"]) == (201, "orders", False, 0)
        assert ask(conn, "CREATE", "queue", "orders")[0] == 409
        with conn.open_sender("orders") as s:
            for i in range(3):
                s.send(Message(body=f"order {i}", subject="new"))
        status, body, _ = ask(conn, "READ", "queue", "orders")
        assert (status, body["depth"], body["enqueued"]) == (200, 3, 3)
        status, body, p = ask(conn, "QUERY", body={"attributeNames": ["name", "depth"]}, entityType="queue")
        assert (status, body, p["count"]) == (200, {"attributeNames": ["name", "depth"], "results": [["orders", 3]]}, 1)
        status, body, p = ask(conn, "PEEK", "queue", "orders", count=2)
        assert (status, [m["body"] for m in body], p["count"]) == (200, ["order 0", "order 1"], 2)
        assert body[0]["subject"] == "new"
        status, body, _ = ask(conn, "PURGE", "queue", "orders")
        assert (status, body) == (200, {"purged": 3})
        assert ask(conn, "READ", "queue", "orders")[1]["depth"] == 0
        # exchanges, bindings, topics, streams, policies, virtual hosts
        assert ask(conn, "CREATE", "exchange", "events", {"exchange_type": "topic"})[0] == 201
        status, binding, _ = ask(conn, "CREATE", "binding", "", {"source": "events", "destination": "orders", "routing_key": "order.*"})
        assert (status, binding["routing_key"]) == (201, "order.*")
        assert ask(conn, "READ", "binding", binding["name"])[1]["source"] == "events"
        assert ask(conn, "CREATE", "topic", "news")[0] == 201
        assert ask(conn, "CREATE", "stream", "log")[0] == 201
        assert ask(conn, "CREATE", "policy", "ttl", {"pattern": "^orders$", "definition": {"message-ttl": 5000}})[0] == 201
        status, body, _ = ask(conn, "UPDATE", "policy", "ttl", {"priority": 3})
        assert (status, body["priority"], body["definition"]) == (200, 3, {"message-ttl": 5000})
        assert ask(conn, "CREATE", "vhost", "tenant", {"description": "a tenant"})[0] == 201
        assert ask(conn, "READ", "vhost", "tenant")[1]["description"] == "a tenant"
        # the connection itself is listed
        status, conns, _ = ask(conn, "QUERY", body={"attributeNames": ["name", "protocol", "container_id"]}, entityType="connection")
        assert status == 200 and [conn.container_id] == [row[2] for row in conns["results"]]
        assert conns["results"][0][1] == "AMQP 1.0"
        # node operations
        status, types, _ = ask(conn, "GET-TYPES", "org.amqp.management", "self")
        assert status == 200 and {"queue", "topic", "stream", "exchange", "binding", "connection"} <= set(types)
        status, attrs, _ = ask(conn, "GET-ATTRIBUTES", entityType="queue")
        assert status == 200 and "depth" in attrs["queue"] and "publish_rate" in attrs["queue"]
        status, ops, _ = ask(conn, "GET-OPERATIONS", entityType="queue")
        assert status == 200 and {"CREATE", "READ", "DELETE", "PURGE", "PEEK"} == set(ops["queue"])
        assert ask(conn, "GET-MGMT-NODES")[:2] == (200, [])
        # deletes: 204, then 404
        for kind, name in [("binding", binding["name"]), ("policy", "ttl"), ("topic", "news"), ("stream", "log"), ("exchange", "events"), ("queue", "orders")]:
            status, body, _ = ask(conn, "DELETE", kind, name)
            assert (kind, status, body) == (kind, 204, {})
            assert ask(conn, "READ", kind, name)[0] == 404
    assert "orders" not in broker.broker.default.nodes


def test_query_pages_with_offset_and_count(broker: RunningBroker) -> None:
    with amqp10.sync.connect(broker.url, timeout=T) as conn:
        for i in range(5):
            assert ask(conn, "CREATE", "queue", f"q{i}")[0] == 201
        pages = [ask(conn, "QUERY", body={"attributeNames": ["name"]}, entityType="queue", offset=off, count=2)[1]["results"] for off in (0, 2, 4, 6)]
        assert pages == [[["q0"], ["q1"]], [["q2"], ["q3"]], [["q4"]], []]


def test_replies_go_to_the_target_of_a_receiver_link_from_management(broker: RunningBroker) -> None:
    # the convention of Azure's and Qpid's clients: a receiver link whose source is
    # $management and whose target address is what requests name as reply-to
    with amqp10.sync.connect(broker.url, timeout=T) as conn:
        sender = conn.open_sender("$management")
        replies = conn.open_receiver("$management", target=Target(address="my-replies"), credit=10)
        for n in range(3):  # the link stays up for request after request
            request = Message(body=None, application_properties=props("GET-MGMT-NODES"))
            request.id = f"request-{n}"
            request.reply_to = "my-replies"
            sender.send(request)
            reply = replies.receive(timeout=T)
            reply.accept()
            assert reply.message.correlation_id == f"request-{n}"
            assert reply.message.application_properties["statusCode"] == 200
        # a request with no reply-to, or one naming nothing, is rejected (the link stays up)
        lost = Message(body=None, application_properties=props("GET-TYPES"))
        outcome = sender.send(lost)
        assert isinstance(outcome, Rejected) and outcome.error is not None
        assert (outcome.error.condition, "reply-to" in outcome.error.description) == ("amqp:invalid-field", True)
        lost.reply_to = "nobody-listens-here"
        outcome = sender.send(lost)
        assert isinstance(outcome, Rejected) and outcome.error is not None
        assert outcome.error.condition == "amqp:not-found" and "nobody-listens-here" in outcome.error.description
        replies.close()  # its address is forgotten with it
        gone = Message(body=None, application_properties=props("GET-TYPES"))
        gone.reply_to = "my-replies"
        assert isinstance(sender.send(gone), Rejected)
        assert ask(conn, "GET-MGMT-NODES")[0] == 200


HOSTILE: list[tuple[dict[str, Any], Any, int]] = [
    ({}, None, 400),  # no operation at all
    ({"operation": 42}, None, 400),
    ({"operation": "SELF-DESTRUCT"}, None, 501),
    (props("READ", name="q"), None, 400),  # no type
    (props("READ", "queue"), None, 400),  # no name
    (props("READ", "no-such-type", "q"), None, 404),
    (props("READ", "queue", "no-such-queue"), None, 404),
    ({"operation": "READ", "type": 3, "name": "q"}, None, 400),
    ({"operation": "READ", "type": "queue", "name": 7}, None, 400),
    (props("CREATE", "queue", "q"), [1, 2, 3], 400),  # attributes must be a map
    (props("CREATE", "queue", "q"), {"durable": "maybe"}, 400),
    (props("CREATE", "exchange", "x"), {"exchange_type": "sideways"}, 400),
    (props("QUERY", entityType="queue", count=2**40), {"attributeNames": ["name"]}, 400),
    (props("QUERY", entityType="queue", count=-5), None, 400),
    (props("QUERY", entityType="queue", offset="zero"), None, 400),
    (props("QUERY", entityType="unknown"), None, 404),
    (props("QUERY"), {"attributeNames": "name"}, 400),
    (props("QUERY"), "all of it", 400),
    (props("PEEK", "queue", "q", count=10**9), None, 400),
    (props("UPDATE", "queue", "q"), {}, 404),
    (props("DELETE", "exchange", "amq.direct"), None, 403),
]


def test_hostile_requests_get_4xx_and_the_broker_stays_up(broker: RunningBroker) -> None:
    with amqp10.sync.connect(broker.url, timeout=T) as conn:
        for app_props, body, expected in HOSTILE:
            request = Message(body=body, application_properties=app_props)
            reply = conn.request("$management", request, timeout=T)
            p = reply.application_properties or {}
            assert (app_props, p.get("statusCode")) == (app_props, expected), p.get("statusDescription")
            assert p.get("statusDescription")
        # no application-properties section at all
        reply = conn.request("$management", Message(body={"attributeNames": ["name"]}), timeout=T)
        assert (reply.application_properties or {}).get("statusCode") == 400
        assert "operation" in reply.application_properties["statusDescription"]
        # the same links answer a good request afterwards
        assert ask(conn, "CREATE", "queue", "after")[0] == 201
    assert len(broker.service.clients) <= 1


# -- python-qpid-proton ----------------------------------------------------------------------------
class _ReplyTarget(LinkOption):
    def __init__(self, address: str) -> None:
        self.address = address

    def apply(self, link: Any) -> None:
        link.target.address = self.address


def proton_ask(client: SyncRequestResponse, operation: Any, type: str | None = None, name: str | None = None, body: Any = None, **more: Any) -> tuple[int, Any]:
    request = ProtonMessage(body=body, properties=props(operation, type, name, **more))
    request.id = str(uuid.uuid4())
    reply = client.call(request)  # sets the request's correlation-id, and matches the reply's to it
    assert reply.correlation_id == request.correlation_id
    return reply.properties["statusCode"], reply.body


@pytest.mark.proton
def test_every_operation_with_proton(broker: RunningBroker) -> None:
    conn = BlockingConnection(f"amqp://{broker.url}", timeout=T)
    try:
        client = SyncRequestResponse(conn, "$management")  # replies by a dynamic node
        assert proton_ask(client, "CREATE", "queue", "pq")[0] == 201
        sender = conn.create_sender("pq")
        for i in range(2):
            sender.send(ProtonMessage(body=f"m{i}"))
        status, body = proton_ask(client, "READ", "queue", "pq")
        assert (status, body["depth"]) == (200, 2)
        status, body = proton_ask(client, "QUERY", body={"attributeNames": ["name", "depth"]}, entityType="queue")
        assert (status, body["results"]) == (200, [["pq", 2]])
        status, body = proton_ask(client, "PEEK", "queue", "pq", count=5)
        assert (status, [m["body"] for m in body]) == (200, ["m0", "m1"])
        assert proton_ask(client, "PURGE", "queue", "pq") == (200, {"purged": 2})
        assert proton_ask(client, "CREATE", "topic", "pt")[0] == 201
        assert proton_ask(client, "CREATE", "exchange", "px", {"exchange_type": "fanout"})[0] == 201
        assert proton_ask(client, "CREATE", "policy", "pp", {"pattern": "^pq$", "definition": {"max-length": 10}})[0] == 201
        assert proton_ask(client, "UPDATE", "policy", "pp", {"definition": {"max-length": 20}})[0] == 200
        for op in ("GET-TYPES", "GET-ATTRIBUTES", "GET-OPERATIONS", "GET-MGMT-NODES"):
            assert proton_ask(client, op, "org.amqp.management", "self")[0] == 200
        for kind, name in [("policy", "pp"), ("exchange", "px"), ("topic", "pt"), ("queue", "pq")]:
            assert proton_ask(client, "DELETE", kind, name) == (204, {})
        for app_props, body, expected in HOSTILE:
            request = ProtonMessage(body=body, properties=app_props)
            assert client.call(request).properties["statusCode"] == expected, app_props
        assert client.call(ProtonMessage(body="no properties")).properties["statusCode"] == 400
        assert proton_ask(client, "GET-TYPES")[0] == 200  # still answering on the same links
    finally:
        conn.close()


@pytest.mark.proton
def test_proton_replies_by_a_receiver_links_target(broker: RunningBroker) -> None:
    conn = BlockingConnection(f"amqp://{broker.url}", timeout=T)
    try:
        sender = conn.create_sender("$management")
        receiver = conn.create_receiver("$management", credit=5, options=_ReplyTarget("proton-replies"))
        request = ProtonMessage(body={"attributeNames": ["name"]}, properties=props("QUERY", entityType="vhost"), reply_to="proton-replies")
        request.id = "q-1"
        sender.send(request)
        reply = receiver.receive(timeout=T)
        receiver.accept()
        assert (reply.correlation_id, reply.properties["statusCode"], reply.body["results"]) == ("q-1", 200, [["/"]])
    finally:
        conn.close()


# -- connections and authorization -----------------------------------------------------------------
def test_close_a_connection(broker: RunningBroker) -> None:
    with amqp10.sync.connect(broker.url, timeout=T) as admin, amqp10.sync.connect(broker.url, timeout=T) as victim:
        status, body, _ = ask(admin, "QUERY", body={"attributeNames": ["name", "container_id"]}, entityType="connection")
        names = {cid: name for name, cid in body["results"]}
        assert set(names) == {admin.container_id, victim.container_id}
        assert ask(admin, "DELETE", "connection", names[victim.container_id])[0] == 204
        with pytest.raises(errors.AMQPError) as info:
            victim.open_sender("anything", timeout=T)
        assert info.value.condition == "amqp:connection:forced"
        assert ask(admin, "READ", "connection", names[admin.container_id])[0] == 200


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[RunningBroker]:
    users = tmp_path / "users.toml"
    add_user(users, "admin", "admin-pw", tags=["administrator"], iterations=1000)
    add_user(users, "mon", "mon-pw", tags=["monitoring"], iterations=1000)
    add_user(users, "bob", "bob-pw", iterations=1000)  # full access to '/', no tags
    add_user(users, "guest", "guest-pw", iterations=1000)
    sasl = {"users_file": users, "allow_anonymous": True, "anonymous_user": "guest"}
    with broker_with(tmp_path, sasl=sasl) as b:
        yield b


def login(b: RunningBroker, user: str | None) -> amqp10.sync.Connection:
    if user is None:
        return amqp10.sync.connect(b.url, sasl_mechanisms=["ANONYMOUS"], timeout=T)
    return amqp10.sync.connect(f"amqp://{user}:{user}-pw@{b.url}", sasl_mechanisms=["PLAIN"], timeout=T)


def test_authorization_by_user_tags(secured: RunningBroker) -> None:
    with login(secured, "admin") as admin:
        assert ask(admin, "CREATE", "queue", "work")[0] == 201
    with login(secured, "mon") as mon:
        assert ask(mon, "READ", "queue", "work")[0] == 200
        assert ask(mon, "CREATE", "queue", "mine")[0] == 403
        assert ask(mon, "PURGE", "queue", "work")[0] == 403
    with login(secured, "bob") as bob:
        status, _, p = ask(bob, "QUERY", entityType="queue")
        assert status == 403 and "bob" in p["statusDescription"]
        assert ask(bob, "GET-TYPES")[0] == 403
    with login(secured, None) as anonymous:
        assert ask(anonymous, "QUERY", entityType="queue")[0] == 401


def test_a_0_9_1_connection_is_listed_and_closed(broker: RunningBroker) -> None:
    import time

    import pika
    import pika.exceptions

    rabbit = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port, blocked_connection_timeout=T))
    try:
        channel = rabbit.channel()
        channel.queue_declare("from-pika")
        channel.basic_publish("", "from-pika", b"hello from 0-9-1")
        with amqp10.sync.connect(broker.url, timeout=T) as conn:
            _, body, _ = ask(conn, "QUERY", body={"attributeNames": ["name", "protocol", "user", "sessions"]}, entityType="connection")
            (row,) = [r for r in body["results"] if r[1] == "AMQP 0-9-1"]
            assert row[3] == 1  # one channel
            status, peeked, _ = ask(conn, "PEEK", "queue", "from-pika", count=1)
            assert (status, peeked[0]["body"], peeked[0]["format"]) == (200, "hello from 0-9-1", "amqp091")
            assert ask(conn, "DELETE", "connection", row[0])[0] == 204
            deadline = time.monotonic() + T
            with pytest.raises(pika.exceptions.ConnectionClosed) as info:
                while time.monotonic() < deadline:
                    rabbit.process_data_events(time_limit=0.05)
            assert info.value.reply_code == 320  # CONNECTION_FORCED
    finally:
        if rabbit.is_open:
            rabbit.close()


def test_requests_act_in_the_connections_virtual_host(broker: RunningBroker) -> None:
    with amqp10.sync.connect(broker.url, timeout=T) as conn:
        assert ask(conn, "CREATE", "vhost", "tenant-a")[0] == 201
    with amqp10.sync.connect(broker.url, hostname="vhost:tenant-a", timeout=T) as conn:
        assert ask(conn, "CREATE", "queue", "tenant-q")[0] == 201
        assert ask(conn, "QUERY", body={"attributeNames": ["name", "vhost"]}, entityType="queue")[1]["results"] == [["tenant-q", "tenant-a"]]
    assert "tenant-q" in broker.broker.vhosts["tenant-a"].nodes
    assert "tenant-q" not in broker.broker.default.nodes


def test_a_connection_may_close_itself(broker: RunningBroker) -> None:
    with amqp10.sync.connect(broker.url, container_id="closes-itself", timeout=T) as conn:
        _, body, _ = ask(conn, "QUERY", body={"attributeNames": ["name", "container_id"]}, entityType="connection")
        (name,) = [n for n, cid in body["results"] if cid == "closes-itself"]
        request = Message(body=None, application_properties=props("DELETE", "connection", name))
        with pytest.raises(errors.ConnectionError) as info:
            conn.request("$management", request, timeout=T)
        assert info.value.condition == "amqp:connection:forced"
        assert "closed by the broker's management" in str(info.value)
    with amqp10.sync.connect(broker.url, timeout=T) as other:
        assert ask(other, "GET-MGMT-NODES")[0] == 200


def test_a_closed_connections_consumers_get_nothing_more(broker: RunningBroker) -> None:
    from amqp10.broker.amqp1.message import Amqp1Message
    from amqp10.broker.management import Caller, Management

    with amqp10.sync.connect(broker.url, container_id="consumer-closed", timeout=T) as victim:
        victim.open_receiver("stop-q", credit=10)

        def credit() -> int:
            q = broker.broker.default.nodes["stop-q"]
            return sum(c.credit() for c in q.consumers)

        for _ in range(200):  # the receiver's flow arrives just after its attach
            if broker.portal.call(credit) > 0:
                break
            time.sleep(0.01)
        assert broker.portal.call(credit) == 10

        def close_then_publish() -> int:
            # in the broker's loop, at once: the close frame is out, the peer's is not in yet
            m = Management.of(broker.broker)
            (c,) = [c for c in m.connection_list() if c.info()["container_id"] == "consumer-closed"]
            m.close_connection(Caller(user=None), c.name)
            q = broker.broker.default.nodes["stop-q"]
            q.publish(Amqp1Message(Message(body="late").encode(), arrival=0.0), lambda: None)
            return int(q.count)

        assert broker.portal.call(close_then_publish) == 1  # kept for the next consumer


def test_a_request_through_the_anonymous_relay(broker: RunningBroker) -> None:
    with amqp10.sync.connect(broker.url, timeout=T) as conn:
        relay = conn.open_sender(None)  # a null target: each message's `to` routes it
        replies = conn.open_receiver("$management", target=Target(address="relay-replies"), credit=5)
        request = Message(body=None, application_properties=props("GET-MGMT-NODES"))
        request.to = "$management"
        request.id = "via-relay"
        request.reply_to = "relay-replies"
        relay.send(request)
        reply = replies.receive(timeout=T)
        reply.accept()
        assert (reply.message.correlation_id, reply.message.application_properties["statusCode"]) == ("via-relay", 200)


def test_replies_not_taken_count_against_memory_until_their_link_goes(broker: RunningBroker) -> None:
    def held() -> int:
        return int(broker.broker.stats.memory_bytes)

    with amqp10.sync.connect(broker.url, timeout=T) as conn:
        before = broker.portal.call(held)
        sender = conn.open_sender("$management")
        replies = conn.open_receiver("$management", target=Target(address="no-credit"), credit=0)
        for _ in range(5):
            request = Message(body=None, application_properties=props("GET-TYPES"))
            request.reply_to = "no-credit"
            sender.send(request)
        assert broker.portal.call(held) > before  # five replies wait for credit
        replies.close()
        assert broker.portal.call(held) == before
