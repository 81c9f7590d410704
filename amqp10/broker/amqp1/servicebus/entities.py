"""Service Bus entities declared from ``[servicebus]``, as core queues and topics.

A queue ``Q`` is a core queue whose dead-letter target is the queue
``Q/$deadletterqueue`` (through the default exchange) and whose delivery limit is
its ``max_delivery_count``: abandoning a message counts a failed delivery, and the
core dead-letters it once the limit is reached. A topic is a core topic; its
subscription ``S`` is the topic's subscription queue ``S``, addressed
``TOPIC/Subscriptions/S``, dead-lettering to ``TOPIC/Subscriptions/S/$deadletterqueue``,
and keeping only the messages one of its rules matches (the queue's ``admit``):
SQL filters are the broker's selectors (SQL dialect, with Service Bus's ``sys.``
system properties), correlation filters its properties filters. Every entity stores
every message it takes (its policy's ``durable``), as Service Bus does: the SDK marks
no message durable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...config import ServiceBusConfig, ServiceBusRule
from ...core import Node, Queue, QueuedMessage, Stream, Topic, VirtualHost
from ...core.selector import compile_selector, match_properties, sql_field

__all__ = ["DEAD_LETTER_SUFFIX", "declare_entities", "entity_node", "rule_filter"]

DEAD_LETTER_SUFFIX = "/$deadletterqueue"
_SUBSCRIPTIONS = "/subscriptions/"

# a correlation filter's names, as the properties fields they match
_CORRELATION = {
    "correlation_id": "correlation-id",
    "message_id": "message-id",
    "to": "to",
    "reply_to": "reply-to",
    "subject": "subject",
    "label": "subject",
    "session_id": "group-id",
    "reply_to_session_id": "reply-to-group-id",
    "content_type": "content-type",
}


def _sql_field(name: str) -> Any:
    """A SQL filter's identifier: Service Bus's ``sys.X`` system properties, else the SQL dialect's."""
    if name.lower().startswith("sys."):
        field = _SYSTEM.get(name[4:].lower())
        if field is None:
            raise KeyError(name)
        return sql_field("properties." + field)
    return sql_field(name)


def rule_filter(rule: ServiceBusRule) -> Callable[[QueuedMessage], bool]:
    """What a rule keeps; raises ValueError (or the selector's error) for a bad filter."""
    checks: list[Callable[[Any], bool]] = []
    if rule.sql is not None:
        checks.append(compile_selector(rule.sql, "sql", resolve=_sql_field))
    if rule.correlation is not None:
        spec: dict[str, Any] = dict(rule.correlation)
        app = spec.pop("properties", None) or {}
        if not isinstance(app, dict):
            raise ValueError("a correlation filter's properties is a table")
        unknown = [k for k in spec if k not in _CORRELATION]
        if unknown:
            raise ValueError(f"unknown correlation filter field(s) {unknown}; known: {sorted(_CORRELATION)}")
        checks.append(match_properties({_CORRELATION[k]: v for k, v in spec.items()}, section="properties"))
        if app:
            checks.append(match_properties(app, section="application-properties"))
    return lambda m: all(c(m) for c in checks)


_SYSTEM = {
    "messageid": "message-id",
    "correlationid": "correlation-id",
    "label": "subject",
    "to": "to",
    "replyto": "reply-to",
    "sessionid": "group-id",
    "replytosessionid": "reply-to-group-id",
    "contenttype": "content-type",
}


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
    """Declare the configured queues and topics (existing ones are kept, rules replaced)."""
    for qc in config.queues:
        dead = qc.name + DEAD_LETTER_SUFFIX
        _kept(vhost.declare_queue(dead))
        q = vhost.declare_queue(
            qc.name,
            arguments={
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": dead,
                "x-delivery-limit": qc.max_delivery_count,
            },
        )
        _kept(q)
    for tc in config.topics:
        topic = vhost.nodes.get(tc.name) or vhost.create_node(tc.name, "topic")
        if not isinstance(topic, Topic):
            raise ValueError(f"[servicebus] topic {tc.name!r} is a {topic.kind} already")
        for sc in tc.subscriptions:
            q = topic.subscribe(sc.name, durable=True)
            filters = [rule_filter(r) for r in sc.rules]
            q.admit = lambda m, filters=filters: any(f(m) for f in filters)
            dead = f"{tc.name}/Subscriptions/{sc.name}{DEAD_LETTER_SUFFIX}"
            _kept(vhost.declare_queue(dead))
            _dead_letters_to(q, dead, sc.max_delivery_count)


def entity_node(vhost: VirtualHost, entity: str) -> Node | None:
    """The node an entity path names: a node, or a topic's subscription (``T/Subscriptions/S``)."""
    node = vhost.nodes.get(entity)
    if node is not None:
        return node
    at = entity.lower().find(_SUBSCRIPTIONS)
    if at <= 0:
        return None
    topic = vhost.nodes.get(entity[:at])
    if not isinstance(topic, Topic):
        return None
    return topic.subscriptions.get(entity[at + len(_SUBSCRIPTIONS) :])
