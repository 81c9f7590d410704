"""Core operations say why: ``node.publish`` and ``VirtualHost.route`` return a
:class:`PublishResult` (taken, unroutable, full, refused), which each front end maps
to its protocol's answer; only ``TAKEN`` is true."""

from __future__ import annotations

from amqp10.broker.amqp1 import Amqp1Message
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker, PublishResult, VirtualHost
from amqp10.message import Message


def vhost() -> VirtualHost:
    broker = Broker(BrokerConfig(), now=lambda: 1000.0)  # no store: the null journal
    return broker.vhosts["/"]


def message(subject: str = "") -> Amqp1Message:
    return Amqp1Message(Message("x", subject=subject or None).encode(), arrival=1000.0)


def test_only_taken_is_true() -> None:
    assert [bool(r) for r in PublishResult] == [r is PublishResult.TAKEN for r in PublishResult]


def test_a_queue_takes_a_message_and_says_so() -> None:
    v = vhost()
    q = v.declare_queue("q", durable=False)
    stored: list[int] = []
    assert q.publish(message(), lambda: stored.append(1)) is PublishResult.TAKEN
    assert (q.count, stored) == (1, [1])


def test_a_full_queue_that_rejects_publishes_says_full() -> None:
    v = vhost()
    q = v.declare_queue("q", durable=False, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    assert q.publish(message(), lambda: None) is PublishResult.TAKEN
    stored: list[int] = []
    assert q.publish(message(), lambda: stored.append(1)) is PublishResult.FULL
    assert (q.count, stored) == (1, [])


def test_route_says_unroutable_full_or_taken() -> None:
    v = vhost()
    x = v.declare_exchange("x", "direct", durable=False)
    stored: list[int] = []
    assert v.route(x, message(), "nowhere", lambda: stored.append(1)) is PublishResult.UNROUTABLE
    a = v.declare_queue("a", durable=False, arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    b = v.declare_queue("b", durable=False, arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    v.bind("x", "a", "k")
    v.bind("x", "b", "k")
    assert v.route(x, message(), "k", lambda: stored.append(1)) is PublishResult.FULL
    assert stored == []
    c = v.declare_queue("c", durable=False)
    v.bind("x", "c", "k")
    assert v.route(x, message(), "k", lambda: stored.append(1)) is PublishResult.TAKEN
    assert (a.count, b.count, c.count, stored) == (0, 0, 1, [1])


def test_an_exchange_published_to_as_a_node_routes_by_the_message_subject() -> None:
    v = vhost()
    x = v.declare_exchange("x", "direct", durable=False)
    q = v.declare_queue("q", durable=False)
    v.bind("x", "q", "red")
    assert x.publish(message("blue"), lambda: None) is PublishResult.UNROUTABLE
    assert x.publish(message("red"), lambda: None) is PublishResult.TAKEN
    assert q.count == 1


def test_route_with_the_queues_found_already_publishes_to_them_without_routing_again() -> None:
    """A transaction's commit with several workers routes a message once, to learn the
    workers it reaches, and publishes it to those queues: a binding made since does not
    reach it, and a queue deleted since is left out."""
    v = vhost()
    x = v.declare_exchange("x", "direct", durable=False)
    a = v.declare_queue("a", durable=False)
    gone = v.declare_queue("gone", durable=False)
    v.bind("x", "a", "k")
    v.bind("x", "gone", "k")
    msg = message()
    reached = v.destinations(x, msg, "k")
    assert {q.name for q in reached} == {"a", "gone"}
    late = v.declare_queue("late", durable=False)
    v.bind("x", "late", "k")
    v.delete_node("gone")
    stored: list[int] = []
    assert v.route(x, msg, "k", lambda: stored.append(1), None, reached) is PublishResult.TAKEN
    assert (a.count, gone.count, late.count, stored) == (1, 0, 0, [1])
    assert v.route(x, message(), "nowhere", lambda: stored.append(2), None, []) is PublishResult.UNROUTABLE
