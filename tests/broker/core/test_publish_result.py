"""Core operations say why: ``node.publish`` and ``VirtualHost.route`` return a
:class:`PublishResult` (taken, unroutable, full, refused), which each front end maps
to its protocol's answer; only ``TAKEN`` is true."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amqp10.broker.amqp1 import Amqp1Message
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import (
    Broker,
    NodeElsewhere,
    PublishResult,
    QueuedMessage,
    QueuePolicy,
    Refused,
    VirtualHost,
)
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


class _Elsewhere(NodeElsewhere):
    """A queue another worker owns: ``up``, it takes a message and answers later
    (:attr:`answers`); down past the bound, it refuses at once (as ``RemoteNode.publish``
    does: ``on_refused(None)`` before it returns ``TAKEN``)."""

    def __init__(self, name: str, *, up: bool) -> None:
        super().__init__(name, QueuePolicy())
        self.up = up
        self.answers: list[tuple[Callable[[], None], Refused]] = []

    def publish_answered(self, msg: QueuedMessage, on_stored: Callable[[], None], on_refused: Refused) -> PublishResult:
        if self.up:
            self.answers.append((on_stored, on_refused))
        else:
            on_refused(None)
        return PublishResult.TAKEN


def _route_to(queues: list[_Elsewhere]) -> tuple[PublishResult, list[str], list[PublishResult | None]]:
    v = vhost()
    x = v.declare_exchange("x", "direct", durable=False)
    stored: list[str] = []
    refused: list[PublishResult | None] = []
    reached: Any = queues
    result = v.route(x, message(), "k", lambda: stored.append("stored"), refused.append, reached)
    return result, stored, refused


def test_a_publish_to_queues_of_workers_down_past_the_bound_is_refused_once() -> None:
    """With a copy for a worker that is up and copies for workers down past the bound,
    the publisher is told "refused" exactly once: when the one up stores it or refuses it."""
    for up_answers in ("stores", "refuses"):
        up = _Elsewhere("up", up=True)
        result, stored, refused = _route_to([up, _Elsewhere("down1", up=False), _Elsewhere("down2", up=False)])
        assert (result, stored, refused) == (PublishResult.TAKEN, [], [])
        ((on_stored, on_refused),) = up.answers
        if up_answers == "stores":
            on_stored()
        else:
            on_refused(PublishResult.FULL)
        assert (stored, len(refused)) == ([], 1), up_answers


def test_a_publish_whose_first_queue_is_down_past_the_bound_is_refused_once() -> None:
    up = _Elsewhere("up", up=True)
    result, stored, refused = _route_to([_Elsewhere("down", up=False), up])
    assert (result, stored, refused) == (PublishResult.TAKEN, [], [])
    ((on_stored, _),) = up.answers
    on_stored()
    assert (stored, refused) == ([], [None])


def test_a_publish_to_queues_all_down_past_the_bound_is_refused_once_at_once() -> None:
    result, stored, refused = _route_to([_Elsewhere("down1", up=False), _Elsewhere("down2", up=False)])
    assert (result, stored, refused) == (PublishResult.TAKEN, [], [None])
