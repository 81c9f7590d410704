"""A message class's per-message shortcuts agree with what it does (issue 30's hot paths).

Routing asks a message for its extra routing keys (1.0's ``x-cc``) only when its
class says it may have some (``has_extra_routing_keys``): a format that overrides
``extra_routing_keys`` without the flag would silently lose them.
"""

from __future__ import annotations

from amqp10.broker.amqp1.message import X_CC, Amqp1Message
from amqp10.broker.config import BrokerConfig
from amqp10.broker.core import Broker
from amqp10.broker.core.message import FORMATS, QueuedMessage
from amqp10.message import Message


def test_a_format_that_reads_extra_keys_says_so() -> None:
    assert set(FORMATS) >= {"amqp1", "amqp091", "amqp010"}
    for cls in FORMATS.values():
        overrides = cls.extra_routing_keys is not QueuedMessage.extra_routing_keys
        assert cls.has_extra_routing_keys == overrides, cls


def test_x_cc_still_routes_and_a_plain_message_routes_by_its_key() -> None:
    broker = Broker(BrokerConfig())
    vh = broker.default
    x = vh.declare_exchange("x", "direct", durable=False)
    for name in ("a", "b", "c"):
        vh.declare_queue(name, durable=False)
        vh.bind("x", name, name)
    cc = Message(b"hi", message_annotations={X_CC: ["b", "c"]}).encode()
    assert sorted(q.name for q in vh.destinations(x, Amqp1Message(cc), "a")) == ["a", "b", "c"]
    plain = Message(b"hi").encode()
    assert [q.name for q in vh.destinations(x, Amqp1Message(plain), "a")] == ["a"]
    assert [q.name for q in vh.destinations(x, QueuedMessage(plain), "b")] == ["b"]
