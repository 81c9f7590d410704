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

Qpid's queue arguments (the C++ broker's and Broker-J's names, which Broker-J takes on
every protocol, as the core does) are a second table, :data:`QPID_ARGUMENTS`; their
values may be strings of digits, as Qpid's tools send them:

=================================  =======================  ====================================
argument                           policy field             value
=================================  =======================  ====================================
``qpid.max_count``                 ``max_length``           messages (0: no limit)
``qpid.max_size``                  ``max_bytes``            bytes (0: no limit)
``qpid.policy_type``               ``overflow``             ring (drop-head), reject
                                                            (reject-publish)
``qpid.priorities``                ``priority_levels``      1-10 levels (``x-qpid-priorities``)
``qpid.fairshare``                 ``fairshare``            messages in a row per level
                                                            (``x-qpid-fairshare``; ``-N``: level N)
``qpid.group_header_key``          ``group_key``            header name
``qpid.shared_msg_group``          ``shared_groups``        1 / true
``qpid.last_value_queue_key``      ``last_value_key``       header name
``qpid.queue_msg_sequence``        ``sequence_header``      header name
``qpid.auto_delete_timeout``       ``auto_delete_timeout``  seconds (0: none)
=================================  =======================  ====================================

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

from .qpid_queues import NODE_ARGUMENTS
from .queue_policy import QueuePolicy

__all__ = [
    "ACCEPTED",
    "ARGUMENTS",
    "LEADER_LOCATORS",
    "QPID_ARGUMENTS",
    "QUEUE_TYPES",
    "QUORUM_DELIVERY_LIMIT",
    "ArgumentError",
    "arguments_of",
    "is_known",
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

QPID_LEVELS = 10
"""The most priority levels Qpid keeps apart (its priorities are 0-9)."""
_FAIRSHARE = "qpid.fairshare"


def _whole(name: str, v: Any) -> int:
    """A Qpid count: a non-negative integer, or a string of digits."""
    if isinstance(v, str | bytes) and v.strip().isdigit():
        return int(v)
    return _non_negative_int(name, v)


def _limit(name: str, v: Any) -> int | None:
    """A Qpid limit: a count, 0 for none."""
    return _whole(name, v) or None


def _levels(name: str, v: Any) -> int:
    n = _whole(name, v)
    if not n:
        raise ArgumentError(f"{name} must be at least 1")
    return min(n, QPID_LEVELS)


def _flag(name: str, v: Any) -> bool:
    if isinstance(v, bool) or v in (0, 1, "0", "1", "true", "false", "True", "False"):
        return str(v).lower() in ("1", "true")
    raise ArgumentError(f"{name} must be 1, 0, true or false, not {v!r}")


def _policy_type(name: str, v: Any) -> str:
    types = {"ring": "drop-head", "reject": "reject-publish"}
    if v not in types:
        raise ArgumentError(f"{name} must be ring or reject, not {v!r}")
    return types[v]


QPID_ARGUMENTS: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    "qpid.max_count": ("max_length", _limit),
    "qpid.max_size": ("max_bytes", _limit),
    "qpid.policy_type": ("overflow", _policy_type),
    "qpid.priorities": ("priority_levels", _levels),
    "x-qpid-priorities": ("priority_levels", _levels),
    "qpid.group_header_key": ("group_key", _string),
    "qpid.shared_msg_group": ("shared_groups", _flag),
    "qpid.last_value_queue_key": ("last_value_key", _string),
    "qpid.queue_msg_sequence": ("sequence_header", _string),
    "qpid.auto_delete_timeout": ("auto_delete_timeout", _limit),
}
"""Qpid's argument name -> (QueuePolicy field, converter); ``qpid.fairshare`` (and
``qpid.fairshare-N``, ``x-qpid-fairshare``…) are read apart: :func:`_fairshare`."""


def is_known(name: str) -> bool:
    """Whether ``name`` is a queue argument the core takes (RabbitMQ's or Qpid's)."""
    return (
        name in ARGUMENTS
        or name in QPID_ARGUMENTS
        or name in NODE_ARGUMENTS
        or name in ACCEPTED
        or name in ("x-queue-type", "x-queue-leader-locator")
        or _fairshare_level(name) is not None
    )


def _fairshare_level(name: str) -> int | None:
    """-1 for ``qpid.fairshare`` (every level), N for ``qpid.fairshare-N`` (also spelt
    ``x-qpid-fairshare``); None: not a fair-share argument."""
    if name.startswith("x-qpid-"):
        name = "qpid." + name[len("x-qpid-") :]
    if name == _FAIRSHARE:
        return -1
    prefix = _FAIRSHARE + "-"
    if name.startswith(prefix) and name[len(prefix) :].isdigit():
        return int(name[len(prefix) :])
    return None


def _fairshare(arguments: Mapping[str, Any]) -> tuple[int, ...]:
    """The per-level limits the fair-share arguments set (level N's at index N; empty: none)."""
    default = 0
    levels: dict[int, int] = {}
    for name, value in arguments.items():
        level = _fairshare_level(name)
        if level is None:
            continue
        n = _whole(name, value)
        if level < 0:
            default = n
        elif level < QPID_LEVELS:
            levels[level] = n
    if not default and not any(levels.values()):
        return ()
    return tuple(levels.get(i, default) for i in range(QPID_LEVELS))


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
        if name in ACCEPTED or name in NODE_ARGUMENTS:  # (read by the virtual host: .qpid_queues)
            continue
        entry = ARGUMENTS.get(name) or QPID_ARGUMENTS.get(name)
        if entry is None:
            if _fairshare_level(name) is not None:
                continue  # (all of them at once, below)
            raise ArgumentError(f"unknown queue argument {name!r}")
        field, convert = entry
        changes[field] = convert(name, value)
    if arguments.get("x-queue-type") == "quorum" and "x-delivery-limit" not in arguments and base.delivery_limit is None:
        changes["delivery_limit"] = QUORUM_DELIVERY_LIMIT + 1  # RabbitMQ 4's poison-message default
    fairshare = _fairshare(arguments)
    if fairshare:
        changes["fairshare"] = fairshare
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
    for name, (field, _) in QPID_ARGUMENTS.items():
        value = getattr(policy, field)
        if not name.startswith("x-") and field in _FEATURES and value is not None and value is not False and name not in out:
            out[name] = value
    for level, n in enumerate(policy.fairshare):
        if n:
            out[f"{_FAIRSHARE}-{level}"] = n
    return out


_FEATURES = frozenset(
    ("priority_levels", "group_key", "shared_groups", "last_value_key", "sequence_header", "auto_delete_timeout")
)
"""The fields only Qpid's arguments set (the others are RabbitMQ's, listed by their names)."""
