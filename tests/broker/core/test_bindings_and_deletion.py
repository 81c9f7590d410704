"""The core's bindings named without their arguments (0-10's binding identity), auto-delete
exchanges, no-local queues, and where a deleted queue's messages go (its alternate
exchange): each front end maps its protocol onto these."""

from __future__ import annotations

from amqp10.broker.amqp1 import Amqp1Message
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker, Queue, Stream, VirtualHost
from amqp10.message import Message


def vhost() -> VirtualHost:
    broker = Broker(BrokerConfig(), now=lambda: 1000.0)  # no store: the null journal
    return broker.vhosts["/"]


def message(body: str = "x", **props: object) -> Amqp1Message:
    return Amqp1Message(
        Message(body, application_properties=props or None).encode(), arrival=1000.0
    )


def test_unbind_key_removes_the_bindings_with_that_key_whatever_their_arguments() -> None:
    v = vhost()
    v.declare_queue("q", durable=False)
    v.bind("amq.match", "q", "k", {"x-match": "all", "a": "b"})
    v.bind("amq.match", "q", "k", {"x-match": "any", "c": "d"})
    v.bind("amq.match", "q", "other", {"x-match": "all", "a": "b"})
    assert v.unbind_key("amq.match", "q", "k") == 2
    assert [b.key for b in v.exchanges["amq.match"].bindings.values()] == ["other"]
    assert v.unbind_key("amq.match", "q", "k") == 0
    assert v.unbind_key("amq.match", "no-such-queue", "other") == 0


def test_an_auto_delete_exchange_goes_with_its_last_binding_unbound_by_key() -> None:
    v = vhost()
    v.declare_queue("q", durable=False)
    v.declare_exchange("e", "headers", durable=False, auto_delete=True)
    v.bind("e", "q", "", {"x-match": "all", "name": "fred"})
    v.bind("e", "q", "k", {"x-match": "any", "age": 3})
    assert v.unbind_key("e", "q", "") == 1
    assert v.exchange("e") is not None  # one binding left
    assert v.unbind_key("e", "q", "k") == 1
    assert v.exchange("e") is None


class Owner:
    """An exclusive owner or consumer as a front end makes it: with its connection's origin."""

    def __init__(self, origin: object) -> None:
        self.origin = origin
        self.id = 7
        self.browse = False
        self.exclusive = True
        self.got: list[object] = []

    def credit(self) -> int:
        return 0

    def deliver(self, node: object, msg: object) -> None:
        self.got.append(msg)

    def cancelled(self) -> None:
        pass


def from_(origin: object, body: str = "x") -> Amqp1Message:
    m = message(body)
    m.mark_origin(origin)
    return m


def bodies(q: Queue | Stream) -> list[object]:
    assert isinstance(q, Queue)
    return [Message.decode(m.data).body for m in q]


def test_a_no_local_queue_drops_what_its_owners_connection_publishes() -> None:
    v = vhost()
    here, there = object(), object()
    q = v.declare_queue(
        "q", durable=False, arguments={"no-local": "true"}, exclusive_owner=Owner(here)
    )
    plain = v.declare_queue("plain", durable=False, exclusive_owner=Owner(here))
    v.bind("amq.fanout", "q")
    v.bind("amq.fanout", "plain")
    fanout = v.exchanges["amq.fanout"]
    for m in (from_(here, "local"), from_(there, "foreign"), message("origin unknown")):
        v.route(fanout, m, "", lambda: None)
    assert bodies(q) == ["foreign", "origin unknown"]
    assert bodies(plain) == ["local", "foreign", "origin unknown"]  # (not no-local)
    assert q.arguments == {"no-local": "true"}


def test_a_no_local_queue_drops_what_its_exclusive_consumers_connection_publishes() -> None:
    v = vhost()
    here, there = object(), object()
    q = v.declare_queue("q", durable=False, arguments={"no-local": True})
    q.publish(from_(here), lambda: None)
    assert q.count == 1  # no exclusive consumer yet: nothing is local
    q.add_consumer(Owner(here))
    q.publish(from_(here), lambda: None)
    q.publish(from_(there), lambda: None)
    assert q.count == 2


def test_no_local_is_read_as_qpid_writes_it() -> None:
    from amqp10.broker.core.no_local import is_no_local

    assert [is_no_local({"no-local": v}) for v in (True, 1, "true", "True", b"1", "yes")] == [
        True
    ] * 6
    assert [
        is_no_local(a)
        for a in ({"no-local": False}, {"no-local": "false"}, {"no-local": 0}, {}, None)
    ] == [False] * 5
