"""The core's bindings named without their arguments (0-10's binding identity), auto-delete
exchanges, no-local queues, and where a deleted queue's messages go (its alternate
exchange): each front end maps its protocol onto these."""

from __future__ import annotations

import pytest

from amqp10.broker.amqp1 import Amqp1Message
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker, Queue, Stream, VirtualHost
from amqp10.message import Message
from tests.broker.core.test_leases import Clock


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


def test_has_a_name_while_a_node_or_an_exchange_of_it_is_here() -> None:
    v = vhost()
    assert [v.has(n) for n in ("q", "e", "t", "amq.direct", "")] == [False, False, False, True, True]
    v.declare_queue("q", durable=False)
    v.declare_exchange("e", "fanout", durable=False)
    v.create_node("t", "topic", persist=False)  # (in both: a 1.0 topic is an exchange too)
    assert [v.has(n) for n in ("q", "e", "t", "nothing")] == [True, True, True, False]
    v.delete_node("q")
    v.delete_exchange("e")
    assert [v.has(n) for n in ("q", "e", "t")] == [False, False, True]


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
    from amqp10.broker.core.qpid_queues import is_no_local

    assert [is_no_local({"no-local": v}) for v in (True, 1, "true", "True", b"1", "yes")] == [
        True
    ] * 6
    assert [
        is_no_local(a)
        for a in ({"no-local": False}, {"no-local": "false"}, {"no-local": 0}, {}, None)
    ] == [False] * 5


def clocked() -> tuple[VirtualHost, Clock]:
    clock = Clock()
    return Broker(BrokerConfig(), now=clock).vhosts["/"], clock


def after(v: VirtualHost, clock: Clock, seconds: float) -> None:
    clock.t += seconds
    v.broker.tick()  # (an unused queue's ``expires``: how its auto-delete timeout runs)


def test_a_deleted_queues_messages_go_to_its_alternate_exchange_held_ones_as_released() -> None:
    v = vhost()
    q = v.declare_queue("q", durable=False, arguments={"alternate-exchange": "amq.fanout"})
    dlq = v.declare_queue("dlq", durable=False)
    v.bind("amq.fanout", "dlq")
    for body in ("one", "two", "three"):
        q.publish(message(body), lambda: None)
    held = q.get()
    assert held is not None
    v.delete_node("q")
    assert bodies(dlq) == ["two", "three"]
    q.release(held, delivery_failed=True)  # (its consumer lets it go after the queue went)
    assert bodies(dlq) == ["two", "three", "one"]


def test_a_dead_letter_exchange_alone_takes_nothing_when_its_queue_is_deleted() -> None:
    """RabbitMQ drops a deleted queue's messages, whatever its x-dead-letter-exchange."""
    v = vhost()
    q = v.declare_queue("q", durable=False, arguments={"x-dead-letter-exchange": "amq.fanout"})
    dlq = v.declare_queue("dlq", durable=False)
    v.bind("amq.fanout", "dlq")
    q.publish(message(), lambda: None)
    held = q.get()
    q.publish(message(), lambda: None)
    v.delete_node("q")
    assert held is not None
    q.release(held)
    assert dlq.count == 0


def test_an_exclusive_queue_with_an_auto_delete_timeout_outlives_its_owner_that_long() -> None:
    v, clock = clocked()
    owner = Owner(object())
    q = v.declare_queue(
        "q", durable=False, exclusive_owner=owner, arguments={"qpid.auto_delete_timeout": 3}
    )
    v.owner_gone(owner)
    assert v.queue("q") is q and q.owner is None  # (anyone may use it meanwhile)
    after(v, clock, 2.9)
    assert v.queue("q") is q
    after(v, clock, 0.2)
    assert v.queue("q") is None


def test_an_auto_delete_queue_used_again_within_its_timeout_stays() -> None:
    v, clock = clocked()
    q = v.declare_queue(
        "q", durable=False, auto_delete=True, arguments={"qpid.auto_delete_timeout": "2"}
    )
    first, second = Owner(object()), Owner(object())
    q.add_consumer(first)
    q.remove_consumer(first)
    after(v, clock, 1)
    q.add_consumer(second)
    after(v, clock, 5)
    assert v.queue("q") is q  # a consumer came back
    q.remove_consumer(second)
    after(v, clock, 1)
    assert v.queue("q") is q
    after(v, clock, 1)
    assert v.queue("q") is None


def test_an_auto_delete_queue_without_a_timeout_goes_with_its_last_consumer() -> None:
    v = vhost()
    q = v.declare_queue("q", durable=False, auto_delete=True)
    c = Owner(object())
    q.add_consumer(c)
    q.remove_consumer(c)
    assert v.queue("q") is None


def test_qpid_arguments_are_read_as_qpid_writes_them() -> None:
    from amqp10.broker.core.arguments import ArgumentError, policy_with_arguments
    from amqp10.broker.core.qpid_queues import alternate_exchange
    from amqp10.broker.core.queue_policy import QueuePolicy

    base = QueuePolicy()
    assert [
        policy_with_arguments(base, {"qpid.auto_delete_timeout": v}).auto_delete_timeout
        for v in (3, "3", b"1")
    ] == [3, 3, 1]
    with pytest.raises(ArgumentError):
        policy_with_arguments(base, {"qpid.auto_delete_timeout": "x"})
    assert alternate_exchange({"alternate-exchange": b"ae"}) == "ae"
    assert alternate_exchange({"alternate-exchange": ""}) is None


def test_the_default_exchange_reaches_the_queue_named_its_extra_keys_and_its_alternate() -> None:
    """``destinations`` from the default exchange: the queue the key names (a new list each
    time), the extra keys' queues (1.0's ``x-cc``) each once, and with an alternate exchange
    set, the alternate's queues for a key that names no queue."""
    v = vhost()
    for name in ("q", "q2", "ae-q"):
        v.declare_queue(name, durable=False)
    default = v.exchange("")
    assert default is not None
    first = v.destinations(default, message(), "q")
    assert [q.name for q in first] == ["q"]
    first.clear()
    assert [q.name for q in v.destinations(default, message(), "q")] == ["q"]
    assert v.destinations(default, message(), "nothing") == []
    cc = Amqp1Message(
        Message("x", message_annotations={"x-cc": ["q2", "q", "nothing"]}).encode(), arrival=1000.0
    )
    assert sorted(q.name for q in v.destinations(default, cc, "q")) == ["q", "q2"]
    v.declare_exchange("ae", "fanout", durable=False)
    v.bind("ae", "ae-q", "")
    default.alternate = "ae"
    assert [q.name for q in v.destinations(default, message(), "nothing")] == ["ae-q"]
    assert [q.name for q in v.destinations(default, message(), "q")] == ["q"]
