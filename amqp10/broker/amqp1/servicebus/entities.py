"""Service Bus entities declared from ``[servicebus]``, as core queues and topics.

A queue ``Q`` is a core queue whose dead-letter target is the queue
``Q/$deadletterqueue`` (through the default exchange) and whose delivery limit is
its ``max_delivery_count``: abandoning a message counts a failed delivery, and the
core dead-letters it once the limit is reached. A topic is a core topic; its
subscription ``S`` is the topic's subscription queue ``S``, addressed
``TOPIC/Subscriptions/S``, dead-lettering to ``TOPIC/Subscriptions/S/$deadletterqueue``,
and keeping only the messages one of its rules matches (:mod:`.rules`). Every
entity stores every message it takes (its policy's ``durable``), as Service Bus does:
the SDK marks no message durable.
"""

from __future__ import annotations

from typing import Any

from ...config import ServiceBusConfig
from ...core import Node, Queue, Stream, Topic, VirtualHost
from .rules import apply_rules

__all__ = ["DEAD_LETTER_SUFFIX", "declare_entities", "entity_node"]

DEAD_LETTER_SUFFIX = "/$deadletterqueue"
_SUBSCRIPTIONS = "/subscriptions/"


def _kept(q: Queue | Stream, **update: Any) -> None:
    """Store every message of a Service Bus entity, as the service does (the SDK marks
    none durable), so a restart loses none, deferred ones included; and ``update``."""
    if isinstance(q, Queue):
        q.set_policy(q.policy.model_copy(update={"durable": True, **update}))


def _dead_letters_to(q: Queue, dead: str, max_delivery_count: int | None) -> None:
    update: dict[str, Any] = {"dead_letter_exchange": "", "dead_letter_routing_key": dead}
    if max_delivery_count is not None:
        update["delivery_limit"] = max_delivery_count
    _kept(q, **update)


def declare_entities(vhost: VirtualHost, config: ServiceBusConfig) -> None:
    """Declare the configured queues and topics (existing ones are kept), and give every
    subscription its rules (see :func:`.rules.apply_rules`)."""
    configured = {(t.name, s.name) for t in config.topics for s in t.subscriptions}
    for node in list(vhost.nodes.values()):
        if isinstance(node, Topic):
            for key, sub in node.subscriptions.items():
                if (node.name, key) not in configured:
                    apply_rules(vhost, sub, None)
    for qc in config.queues:
        dead = qc.name + DEAD_LETTER_SUFFIX
        _kept(vhost.declare_queue(dead))
        q = vhost.declare_queue(
            qc.name,
            arguments={
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": dead,
                "x-delivery-limit": qc.max_delivery_count - 1,  # RabbitMQ counts returns, not deliveries
            },
        )
        _kept(q)
    for tc in config.topics:
        topic = vhost.nodes.get(tc.name) or vhost.create_node(tc.name, "topic")
        if not isinstance(topic, Topic):
            raise ValueError(f"[servicebus] topic {tc.name!r} is a {topic.kind} already")
        for sc in tc.subscriptions:
            q = topic.subscribe(sc.name, durable=True)
            apply_rules(vhost, q, sc.rules)
            dead = f"{tc.name}/Subscriptions/{sc.name}{DEAD_LETTER_SUFFIX}"
            _kept(vhost.declare_queue(dead))
            _dead_letters_to(q, dead, sc.max_delivery_count)


def entity_node(vhost: VirtualHost, entity: str) -> Node | None:
    """The node an entity path names: a node, or a topic's subscription (``T/Subscriptions/S``:
    the stand-in for it if another worker owns it, which holds its one queue)."""
    node = vhost.nodes.get(entity)
    if node is not None:
        return node
    at = entity.lower().find(_SUBSCRIPTIONS)
    if at <= 0:
        return None
    topic = vhost.nodes.get(entity[:at])
    if not isinstance(topic, Topic):
        return None
    key = entity[at + len(_SUBSCRIPTIONS) :]
    sub = topic.subscriptions.get(key)
    return sub if sub is not None or "/" in key else vhost.subscription_elsewhere(topic.name, key)
