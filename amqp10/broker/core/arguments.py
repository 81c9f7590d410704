"""RabbitMQ's queue arguments, mapped onto :class:`~amqp10.broker.config.QueuePolicy`.

A queue's behaviour is one ``QueuePolicy``: from the broker config (address
rules, the default policy), with a declaration's arguments applied on top under
RabbitMQ's names. The table below is the whole mapping:

==============================  =============================  ==========================
argument                        policy field                   value
==============================  =============================  ==========================
``x-message-ttl``               ``message_ttl``                ms (seconds in the policy)
``x-expires``                   ``expires``                    ms (seconds in the policy)
``x-max-length``                ``max_length``                 messages
``x-max-length-bytes``          ``max_bytes``                  bytes
``x-overflow``                  ``overflow``                   drop-head, reject-publish,
                                                               reject-publish-dlx
``x-dead-letter-exchange``      ``dead_letter_exchange``       exchange name
``x-dead-letter-routing-key``   ``dead_letter_routing_key``    routing key
``x-dead-letter-strategy``      ``dead_letter_strategy``       at-most-once, at-least-once
``x-delivery-limit``            ``delivery_limit``             returns allowed (-1: no
                                                               limit); see below
``x-max-priority``              ``max_priority``               0-255 (levels above 31
                                                               share the top one)
``x-single-active-consumer``    ``single_active_consumer``     bool
``x-consumer-timeout``          ``consumer_timeout``           ms (seconds in the policy)
``x-queue-type``                (the node kind)                classic, quorum, stream
``x-max-age``                   ``max_age_seconds``            a stream's retention: 7D,
                                                               12h, 30m, 10s, 1M, 1Y
==============================  =============================  ==========================

A ``quorum`` queue is a classic core queue that reports its type as quorum (the
node is one broker: there is no replication to ask for), with RabbitMQ 4's
default delivery limit (:data:`QUORUM_DELIVERY_LIMIT`) unless its arguments, a
runtime policy or the broker config set one. ``x-delivery-limit`` counts as
RabbitMQ counts it: a message may be *returned* that many times (0-9-1 requeue,
1.0 ``modified`` with ``delivery-failed``, a consumer gone), and the next return
dead-letters it (or drops it, without a dead-letter target); so
``x-delivery-limit`` N is the policy's ``delivery_limit`` N + 1 deliveries, and
-1 lifts the limit (on a quorum queue, its default as well). The arguments of
replicated queues and streams that only place replicas (:data:`ACCEPTED`:
group sizes, segment and filter sizes; the leader locator, checked against
:data:`LEADER_LOCATORS`) are accepted, kept and reported, and change nothing
here. The dead-letter strategy says what becomes of a dead letter that reaches
no queue (core/dead_letters.py); on any queue type here, where RabbitMQ honours
it on quorum queues only.

As in RabbitMQ, a queue given a length limit by its arguments and no
``x-overflow`` drops its oldest messages (``drop-head``); a queue limited by the
broker config keeps that config's overflow (``block`` by default: 1.0
publishers wait for credit).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .queue_policy import QueuePolicy

__all__ = [
    "ACCEPTED",
    "ARGUMENTS",
    "LEADER_LOCATORS",
    "QUEUE_TYPES",
    "QUORUM_DELIVERY_LIMIT",
    "ArgumentError",
    "arguments_of",
    "policy_with_arguments",
    "queue_kind",
]

QUEUE_TYPES = {"classic": "queue", "quorum": "queue", "stream": "stream"}

QUORUM_DELIVERY_LIMIT = 20
"""RabbitMQ 4's delivery limit of a quorum queue declared without one: returns allowed."""

LEADER_LOCATORS = ("client-local", "balanced")
"""RabbitMQ 4's ``x-queue-leader-locator`` values (a single node leads every queue here)."""

ACCEPTED = frozenset(
    {
        "x-quorum-initial-group-size",
        "x-quorum-target-group-size",
        "x-initial-group-size",
        "x-stream-max-segment-size-bytes",
        "x-stream-filter-size-bytes",
        "x-deliver-limit",  # RabbitMQ's Python AMQP 1.0 client's spelling; RabbitMQ keeps it, unused
    }
)
"""Arguments kept and reported that change nothing on a single node (replica placement)."""

_AGE_UNITS = {"Y": 365 * 86400, "M": 30 * 86400, "D": 86400, "h": 3600, "m": 60, "s": 1}


class ArgumentError(ValueError):
    """A queue argument with an unknown name or a value of the wrong kind."""


def _non_negative_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ArgumentError(f"{name} must be a non-negative integer, not {v!r}")
    return v


def _ms_to_seconds(name: str, v: Any) -> float:
    return _non_negative_int(name, v) / 1000


def _positive_ms_to_seconds(name: str, v: Any) -> float:
    if _non_negative_int(name, v) == 0:
        raise ArgumentError(f"{name} must be above 0")
    return float(v) / 1000


def _string(name: str, v: Any) -> str:
    if not isinstance(v, str):
        raise ArgumentError(f"{name} must be a string, not {v!r}")
    return v


def _overflow(name: str, v: Any) -> str:
    if v not in ("drop-head", "reject-publish", "reject-publish-dlx"):
        raise ArgumentError(f"{name} must be drop-head, reject-publish or reject-publish-dlx, not {v!r}")
    return str(v)


def _priority(name: str, v: Any) -> int:
    n = _non_negative_int(name, v)
    if n > 255:
        raise ArgumentError(f"{name} must be at most 255, not {v!r}")
    return n


def _age(name: str, v: Any) -> float:
    """A stream's ``x-max-age`` as RabbitMQ writes it: a positive number and a unit (Y M D h m s)."""
    if isinstance(v, str) and len(v) > 1 and v[-1] in _AGE_UNITS and v[:-1].isdigit() and int(v[:-1]) > 0:
        return float(int(v[:-1]) * _AGE_UNITS[v[-1]])
    raise ArgumentError(f"{name} must be a positive number and a unit (Y, M, D, h, m or s), not {v!r}")


def _delivery_limit(name: str, v: Any) -> int | None:
    """RabbitMQ's returns allowed (-1: no limit) as deliveries before a message is dead."""
    if v == -1 and not isinstance(v, bool):
        return None
    return _non_negative_int(name, v) + 1


def _strategy(name: str, v: Any) -> str:
    if v not in ("at-most-once", "at-least-once"):
        raise ArgumentError(f"{name} must be at-most-once or at-least-once, not {v!r}")
    return str(v)


def _leader_locator(name: str, v: Any) -> str:
    if v not in LEADER_LOCATORS:
        raise ArgumentError(f"{name} must be {' or '.join(LEADER_LOCATORS)}, not {v!r}")
    return str(v)


def _bool(name: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise ArgumentError(f"{name} must be true or false, not {v!r}")
    return v


ARGUMENTS: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    "x-message-ttl": ("message_ttl", _ms_to_seconds),
    "x-expires": ("expires", _positive_ms_to_seconds),
    "x-max-length": ("max_length", _non_negative_int),
    "x-max-length-bytes": ("max_bytes", _non_negative_int),
    "x-overflow": ("overflow", _overflow),
    "x-dead-letter-exchange": ("dead_letter_exchange", _string),
    "x-dead-letter-routing-key": ("dead_letter_routing_key", _string),
    "x-dead-letter-strategy": ("dead_letter_strategy", _strategy),
    "x-delivery-limit": ("delivery_limit", _delivery_limit),
    "x-max-priority": ("max_priority", _priority),
    "x-single-active-consumer": ("single_active_consumer", _bool),
    "x-max-age": ("max_age_seconds", _age),
    "x-consumer-timeout": ("consumer_timeout", _positive_ms_to_seconds),
}
"""Argument name -> (QueuePolicy field, converter from the argument's value)."""


def queue_kind(arguments: Mapping[str, Any] | None) -> str:
    """The node kind ``x-queue-type`` asks for: ``queue`` (classic, the default) or ``stream``."""
    qt = (arguments or {}).get("x-queue-type", "classic")
    kind = QUEUE_TYPES.get(qt) if isinstance(qt, str) else None
    if kind is None:
        raise ArgumentError(f"x-queue-type must be one of {', '.join(QUEUE_TYPES)}, not {qt!r}")
    return kind


def policy_with_arguments(base: QueuePolicy, arguments: Mapping[str, Any] | None) -> QueuePolicy:
    """``base`` with ``arguments`` (RabbitMQ names) applied; unknown ``x-`` names are refused."""
    if not arguments:
        return base
    changes: dict[str, Any] = {}
    for name, value in arguments.items():
        if name == "x-queue-type":
            queue_kind(arguments)
            continue
        if name == "x-queue-leader-locator":  # kept and reported: one node leads every queue
            _leader_locator(name, value)
            continue
        if name in ACCEPTED:
            continue
        entry = ARGUMENTS.get(name)
        if entry is None:
            raise ArgumentError(f"unknown queue argument {name!r}")
        field, convert = entry
        changes[field] = convert(name, value)
    if arguments.get("x-queue-type") == "quorum" and "x-delivery-limit" not in arguments and base.delivery_limit is None:
        changes["delivery_limit"] = QUORUM_DELIVERY_LIMIT + 1  # RabbitMQ 4's poison-message default
    limited = "max_length" in changes or "max_bytes" in changes
    if limited and "overflow" not in changes:
        changes["overflow"] = "drop-head"  # RabbitMQ's default for a length-limited queue
    return base.model_copy(update=changes)


def arguments_of(policy: QueuePolicy) -> dict[str, Any]:
    """The RabbitMQ arguments that express ``policy``'s settings (for listings and definitions)."""
    out: dict[str, Any] = {}
    for name, (field, _) in ARGUMENTS.items():
        value = getattr(policy, field)
        if value is None or value is False:
            continue
        if field in ("message_ttl", "expires", "consumer_timeout"):
            value = round(value * 1000)
        elif field == "delivery_limit":
            value -= 1  # deliveries here, returns allowed there
        elif field == "max_age_seconds":
            value = f"{round(value)}s"
        elif field == "overflow":
            mode = policy.overflow_mode
            if mode == "block":
                continue
            value = {"drop": "drop-head", "reject": policy.overflow if policy.overflow == "reject-publish-dlx" else "reject-publish"}[mode]
        out[name] = value
    return out
