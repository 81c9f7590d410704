"""The protocol-neutral management layer (amqp10.broker.management) on a broker core:
entities, operations, paging, rates, peek and purge, and authorization by user tags."""

from __future__ import annotations

from typing import Any

import pytest

import amqp10.broker.amqp1  # noqa: F401  (registers the 1.0 message format peek decodes)
from amqp10.broker.amqp1.message import Amqp1Message
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker, Queue
from amqp10.broker.management import (
    ENTITY_TYPES,
    Caller,
    ManagedConnection,
    Management,
    ManagementError,
    Request,
)
from amqp10.broker.permissions import PermissionChecker, VhostPermissions
from amqp10.message import Message

ANY = Caller(user=None)
FULL = VhostPermissions(".*", ".*", ".*")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(tags: dict[str, list[str]] | None = None, perms: dict[str, Any] | None = None) -> tuple[Broker, Management, Clock]:
    clock = Clock()
    checker = None
    if tags is not None:
        table = perms if perms is not None else {u: {"/": FULL} for u in tags}
        checker = PermissionChecker(table, tags=tags, anonymous_user="guest")
    b = Broker(BrokerConfig(), now=clock, permissions=checker)
    return b, Management(b), clock


def put(q: Any, *bodies: str) -> None:
    for body in bodies:
        q.publish(Amqp1Message(Message(body=body, subject="s").encode(), arrival=0.0), lambda: None)


def status(fn: Any) -> int:
    with pytest.raises(ManagementError) as info:
        fn()
    return info.value.status


def test_queue_lifecycle_with_depth_peek_and_purge() -> None:
    b, m, _ = make()
    made = m.create(ANY, "queue", "orders", {"durable": False})
    assert (made["name"], made["type"], made["durable"], made["depth"]) == ("orders", "queue", False, 0)
    put(b.default.nodes["orders"], "a", "b", "c")
    assert m.read(ANY, "queue", "orders")["depth"] == 3
    peeked = m.peek(ANY, "queue", "orders", 2)
    assert [p["body"] for p in peeked] == ["a", "b"]
    assert [p["position"] for p in peeked] == [0, 1]
    assert peeked[0]["subject"] == "s"
    assert m.read(ANY, "queue", "orders")["depth"] == 3  # peek leaves them
    assert m.purge(ANY, "queue", "orders") == 3
    assert m.read(ANY, "queue", "orders")["depth"] == 0
    m.delete(ANY, "queue", "orders")
    assert status(lambda: m.read(ANY, "queue", "orders")) == 404
    assert "orders" not in b.default.nodes


def test_listing_is_sorted_and_paged() -> None:
    _, m, _ = make()
    for name in ["q3", "q1", "q2", "q4"]:
        m.create(ANY, "queue", name)
    assert [q["name"] for q in m.list(ANY, "queue")] == ["q1", "q2", "q3", "q4"]
    assert [q["name"] for q in m.list(ANY, "queue", offset=1, count=2)] == ["q2", "q3"]
    assert m.list(ANY, "queue", offset=10) == []
    assert status(lambda: m.list(ANY, "queue", count=10**9)) == 400


def test_rates_come_from_counters_between_reads() -> None:
    b, m, clock = make()
    m.create(ANY, "queue", "q")
    assert m.read(ANY, "queue", "q")["publish_rate"] == 0.0
    clock.t += 2.0
    put(b.default.nodes["q"], *["x"] * 10)
    assert m.read(ANY, "queue", "q")["publish_rate"] == 5.0  # 10 messages in 2 s


def test_every_entity_type() -> None:
    b, m, _ = make()
    m.create(ANY, "exchange", "x", {"exchange_type": "fanout"})
    m.create(ANY, "queue", "q")
    made = m.create(ANY, "binding", "", {"source": "x", "destination": "q"})
    assert (made["source"], made["destination"]) == ("x", "q")
    assert [x["name"] for x in m.list(ANY, "binding")] == [made["name"]]
    m.create(ANY, "stream", "s")
    put(b.default.nodes["s"], "one", "two")
    assert [p["body"] for p in m.peek(ANY, "stream", "s", 5)] == ["one", "two"]
    assert m.read(ANY, "stream", "s")["next_offset"] == 2
    topic = m.create(ANY, "topic", "t")
    assert topic["subscriptions"] == 0
    sub = b.default.nodes["t"].subscribe("client-1", durable=False)
    put(b.default.nodes["t"], "news")
    assert m.read(ANY, "topic", "t")["depth"] == 1
    assert [s["name"] for s in m.list(ANY, "subscription")] == [sub.name]
    assert m.purge(ANY, "subscription", sub.name) == 1
    m.create(ANY, "policy", "ttl", {"pattern": "^q$", "definition": {"message-ttl": 1000}})
    assert m.update(ANY, "policy", "ttl", {"priority": 5})["priority"] == 5
    assert b.default.nodes["q"].policy.message_ttl == 1.0
    m.delete(ANY, "policy", "ttl")
    m.create(ANY, "vhost", "other", {"description": "for tests"})
    assert m.read(ANY, "vhost", "other")["description"] == "for tests"
    m.delete(ANY, "binding", made["name"])
    assert m.list(ANY, "binding") == []
    m.delete(ANY, "topic", "t")
    assert "t" not in b.default.nodes and "t" not in b.default.exchanges
    m.delete(ANY, "exchange", "x")
    assert {t for t in ENTITY_TYPES} >= {"queue", "stream", "topic", "subscription", "exchange", "binding", "policy", "vhost", "connection"}


def test_refusals_have_the_drafts_codes() -> None:
    _, m, _ = make()
    m.create(ANY, "queue", "q")
    assert status(lambda: m.create(ANY, "queue", "q")) == 409
    assert status(lambda: m.create(ANY, "queue", "")) == 400
    assert status(lambda: m.create(ANY, "exchange", "x", {"exchange_type": "nope"})) == 400
    assert status(lambda: m.create(ANY, "queue", "q2", {"durable": "yes"})) == 400
    assert status(lambda: m.read(ANY, "nope", "q")) == 404
    assert status(lambda: m.read(ANY, "queue", "nope")) == 404
    assert status(lambda: m.update(ANY, "queue", "q", {})) == 501
    assert status(lambda: m.purge(ANY, "stream", "q")) == 404
    assert status(lambda: m.peek(ANY, "queue", "q", 10**6)) == 400
    assert status(lambda: m.delete(ANY, "exchange", "amq.direct")) == 403


class FakeConnection:
    """What the service registers (a ManagedConnection), closed by recording why."""

    def __init__(self, name: str, user: str | None) -> None:
        self.name = name
        self.user = user
        self.closed: str | None = None

    def info(self) -> dict[str, Any]:
        return {"protocol": "AMQP 1.0", "user": self.user, "vhost": "/", "peer": self.name, "container_id": "c",
                "connected_at": 0.0, "sessions": 1, "links": 2}  # fmt: skip

    def consumers(self) -> list[dict[str, Any]]:
        return []

    def close(self, reason: str) -> None:
        self.closed = reason


def test_connections_by_tag() -> None:
    _, m, _ = make(tags={"admin": ["administrator"], "mon": ["monitoring"], "alice": ["management"], "guest": []})
    alice, bob = FakeConnection("c1", "alice"), FakeConnection("c2", "bob")
    assert isinstance(alice, ManagedConnection)
    m.register_connection(alice)
    m.register_connection(bob)
    who = {u: Caller(user=u) for u in ("admin", "mon", "alice")}
    assert [c["name"] for c in m.connections(who["mon"])] == ["c1", "c2"]
    assert [c["name"] for c in m.connections(who["alice"])] == ["c1"]  # her own only
    assert status(lambda: m.close_connection(who["alice"], "c2")) == 403
    assert status(lambda: m.close_connection(who["mon"], "c1")) == 403
    m.close_connection(who["alice"], "c1", "bye")
    assert alice.closed == "bye"
    m.delete(who["admin"], "connection", "c2")
    assert bob.closed is not None
    assert status(lambda: m.close_connection(who["admin"], "c9")) == 404
    m.unregister_connection(bob)
    assert [c["name"] for c in m.connections(who["admin"])] == ["c1"]


def test_authorization_by_tags_and_permissions() -> None:
    tags = {"admin": ["administrator"], "mon": ["monitoring"], "mgr": ["management"], "bob": [], "guest": []}
    perms = {u: {"/": FULL} for u in tags}
    perms["mgr"] = {"/": VhostPermissions("^mine", ".*", "^mine")}
    b, m, _ = make(tags=tags, perms=perms)
    admin, mon, mgr, bob = (Caller(user=u) for u in ("admin", "mon", "mgr", "bob"))
    m.create(admin, "queue", "theirs")
    assert status(lambda: m.list(bob, "queue")) == 403
    assert status(lambda: m.list(ANY, "queue")) == 401  # anonymous (as guest, no tags): log in
    assert [q["name"] for q in m.list(mon, "queue")] == ["theirs"]
    assert status(lambda: m.create(mon, "queue", "q")) == 403
    assert status(lambda: m.create(mgr, "queue", "theirs2")) == 403  # configure is ^mine
    m.create(mgr, "queue", "mine")
    assert status(lambda: m.purge(mgr, "queue", "theirs")) == 403  # read is ^mine
    assert m.purge(mgr, "queue", "mine") == 0
    assert status(lambda: m.create(mgr, "policy", "p", {"pattern": "."})) == 403
    assert status(lambda: m.create(mgr, "vhost", "v")) == 403
    assert status(lambda: m.export_definitions(mgr)) == 403
    assert isinstance(b.default.nodes["mine"], Queue)


def test_execute_never_raises() -> None:
    _, m, _ = make()
    hostile = [
        (Request(operation=None), 400),
        (Request(operation=7), 400),
        (Request(operation="EXPLODE"), 501),
        (Request(operation="READ", name="q"), 400),  # no type
        (Request(operation="READ", type="queue"), 400),  # no name
        (Request(operation="READ", type=["queue"], name="q"), 400),
        (Request(operation="READ", type="nope", name="q"), 404),
        (Request(operation="READ", type="queue", name=5), 400),
        (Request(operation="CREATE", type="queue", name="q", body=[1, 2]), 400),
        (Request(operation="CREATE", type="queue", name="q", body={1: 2}), 400),
        (Request(operation="QUERY", properties={"count": 2**40}), 400),
        (Request(operation="QUERY", properties={"count": -1}), 400),
        (Request(operation="QUERY", properties={"offset": "0"}), 400),
        (Request(operation="QUERY", body={"attributeNames": "name"}), 400),
        (Request(operation="QUERY", body="everything"), 400),
        (Request(operation="PEEK", type="queue", name="q", properties={"count": True}), 400),
    ]
    for request, expected in hostile:
        response = m.execute(ANY, request)
        assert (response.status, request) == (expected, request)
        assert response.description
    created = m.execute(ANY, Request(operation="CREATE", type="queue", name="q"))
    assert (created.status, created.body["name"]) == (201, "q")
    query = m.execute(ANY, Request(operation="QUERY", properties={"entityType": "queue"}, body={"attributeNames": ["name", "depth"]}))
    assert query.body == {"attributeNames": ["name", "depth"], "results": [["q", 0]]}
    assert query.properties == {"count": 1}
    untyped = m.execute(ANY, Request(operation="QUERY", body={}))
    assert ["q", "q", "queue"] in untyped.body["results"]
    assert m.execute(ANY, Request(operation="DELETE", type="queue", name="q")).status == 204


class HoldingConsumer:
    """A consumer that takes what its credit allows and settles when told."""

    id = 991
    browse = False

    def __init__(self, credit: int) -> None:
        self.left = credit
        self.held: list[Any] = []

    def credit(self) -> int:
        return self.left

    def deliver(self, node: Any, msg: Any) -> None:
        self.left -= 1
        self.held.append(msg)

    def cancelled(self) -> None:
        pass


def test_consumers_and_unacked() -> None:
    b, m, _ = make()
    m.create(ANY, "queue", "held")
    q = b.default.nodes["held"]
    put(q, "a", "b", "c")
    c = HoldingConsumer(credit=2)
    q.add_consumer(c)
    seen = m.read(ANY, "queue", "held")
    assert (seen["depth"], seen["consumers"], seen["unacked"], seen["delivered"]) == (1, 1, 2, 2)
    q.ack(c.held[0])
    q.release(c.held[1])
    seen = m.read(ANY, "queue", "held")
    assert (seen["depth"], seen["unacked"], seen["acked"]) == (2, 0, 1)
