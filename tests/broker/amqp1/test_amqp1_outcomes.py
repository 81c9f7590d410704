"""The 1.0 outcome of a publish the node did not take: one table (publishers.OUTCOMES);
and the error a consumer's attach is refused with for each reason the core gives
(consumers.CONSUME_REFUSALS)."""

from __future__ import annotations

from amqp10.broker.amqp1.consumers import CONSUME_REFUSALS
from amqp10.broker.amqp1.publishers import OUTCOMES
from amqp10.broker.core import ConsumeResult, PublishResult
from amqp10.message import Message
from amqp10.types import Accepted, ErrorCondition, Rejected, Released
from tests.broker.harness import Net, Taker


def test_every_reason_a_node_gives_has_an_outcome() -> None:
    assert set(OUTCOMES) == {r for r in PublishResult if r is not PublishResult.TAKEN}


def test_unroutable_is_released_and_full_is_rejected_with_the_node_named() -> None:
    net = Net()
    v = net.broker.default
    v.declare_queue("small", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    v.declare_exchange("x", "direct")
    v.bind("x", "small", "k")
    c = net.client()
    to_queue = c.sender("small")
    assert isinstance(c.send(to_queue, Message(body=1)).remote_state, Accepted)
    d = c.send(to_queue, Message(body=2))
    assert isinstance(d.remote_state, Rejected)
    assert d.remote_state.error.condition == ErrorCondition.RESOURCE_LIMIT_EXCEEDED
    assert d.remote_state.error.description == "queue 'small' is full (x-max-length 1, overflow reject-publish)"
    to_exchange = c.sender("/exchanges/x")
    assert isinstance(c.send(to_exchange, Message(body=3, subject="nowhere")).remote_state, Released)
    # every queue the exchange reached is full: rejected, naming the exchange (RabbitMQ 4
    # rejects what a reject-publish queue refuses; before the table this was released)
    d = c.send(to_exchange, Message(body=4, subject="k"))
    assert isinstance(d.remote_state, Rejected)
    assert d.remote_state.error.condition == ErrorCondition.RESOURCE_LIMIT_EXCEEDED
    assert d.remote_state.error.description == "node 'x' is full: every queue it routed the message to refused it"


def test_a_management_request_that_cannot_be_answered_is_rejected_with_the_nodes_reason() -> None:
    net = Net()
    c = net.client()
    s = c.sender("$management")
    d = c.send(s, Message(body={}, application_properties={"operation": "READ"}))  # no reply-to
    assert isinstance(d.remote_state, Rejected)
    assert d.remote_state.error is not None and "reply-to" in str(d.remote_state.error.description)


def test_every_reason_a_node_refuses_a_consumer_has_an_error() -> None:
    assert set(CONSUME_REFUSALS) == {r for r in ConsumeResult if r is not ConsumeResult.ADMITTED}


class _Exclusive(Taker):
    """A 0-9-1 or 0-10 client's exclusive consumer, as the core sees it."""

    exclusive = True


def test_an_attach_to_a_queue_an_exclusive_consumer_holds_is_refused_resource_locked() -> None:
    net = Net()
    q = net.broker.default.declare_queue("held")
    holder = _Exclusive(0, cid=-1)
    q.add_consumer(holder)
    c = net.client()
    r = c.receiver("held")
    detach = r.remote_detach
    assert detach is not None and detach.error is not None
    assert detach.error.condition == ErrorCondition.RESOURCE_LOCKED
    assert detach.error.description == "cannot obtain exclusive access to locked queue 'held' in vhost '/'"
    assert q.consumers == [holder]
    q.remove_consumer(holder)
    assert c.receiver("held", credit=1).is_attached  # once it lets go
