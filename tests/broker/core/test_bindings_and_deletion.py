"""The core's bindings named without their arguments (0-10's binding identity), auto-delete
exchanges, no-local queues, and where a deleted queue's messages go (its alternate
exchange): each front end maps its protocol onto these."""

from __future__ import annotations

from amqp10.broker.amqp1 import Amqp1Message
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker, VirtualHost
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
