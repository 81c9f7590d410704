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

A declaration's arguments are first checked as RabbitMQ 3.10 checks them
(:func:`check_declared`: each known argument's type and value, refused with its
``invalid arg 'x-max-length' for queue 'q' in vhost '/': {value_negative,-1}``); an argument
none of these tables names is kept and not read, as RabbitMQ keeps it (a declaration's:
:func:`known_arguments`; the config file's address rules and :func:`policy_with_arguments`
itself still refuse an unknown name, a typo there).

As in RabbitMQ, a queue given a length limit by its arguments and no
``x-overflow`` drops its oldest messages (``drop-head``); a queue limited by the
broker config keeps that config's overflow (``block`` by default: 1.0
publishers wait for credit).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from .field_terms import field_type_name
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
    "check_declared",
    "field_type_name",
    "given_queue_type",
    "is_known",
    "known_arguments",
    "policy_with_arguments",
    "queue_kind",
]

QUEUE_TYPES = {"classic": "queue", "quorum": "queue", "stream": "stream"}

def given_queue_type(value: Any) -> Any:
    """A host's default queue type as written, None for none: RabbitMQ's definitions export
    writes a host without one as ``undefined`` (Erlang's none), or leaves it empty."""
    return None if value in (None, "", "undefined") else value


QUORUM_DELIVERY_LIMIT = 20
"""RabbitMQ 4's delivery limit of a quorum queue declared without one: returns allowed."""

LEADER_LOCATORS = ("client-local", "balanced", "random", "least-leaders")
"""RabbitMQ 3.10's ``x-queue-leader-locator`` values, the last two deprecated (RabbitMQ 4
reads them as ``balanced``; a single node leads every queue here)."""

ACCEPTED = frozenset(
    {
        "x-quorum-initial-group-size",
        "x-quorum-target-group-size",
        "x-initial-group-size",
        "x-stream-max-segment-size-bytes",
        "x-stream-filter-size-bytes",
        "x-deliver-limit",  # RabbitMQ's Python AMQP 1.0 client's spelling; RabbitMQ keeps it, unused
        "x-initial-cluster-size",
        "x-max-in-memory-length",
        "x-max-in-memory-bytes",
        "x-queue-mode",
        "x-queue-version",
        "x-queue-master-locator",
    }
)
"""Arguments kept and reported that change nothing on a single node (replica placement)."""

_AGE_UNITS = {"Y": 365 * 86400, "M": 30 * 86400, "D": 86400, "h": 3600, "m": 60, "s": 1}


class ArgumentError(ValueError):
    """A queue argument with an unknown name or a value of the wrong kind. Its text is worded
    for a person (a config file's or a policy's error); one that :func:`check_declared`
    refused also has ``argument`` (its name) and ``reason`` (RabbitMQ's error term, as its
    ``invalid arg`` text prints it), for a declaration's reply."""

    def __init__(self, message: str, argument: str | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.argument = argument
        self.reason = reason


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


# -- RabbitMQ 3.10's checks at declaration (rabbit_amqqueue:check_declare_arguments/2) ----------

_INTEGER_TYPES = frozenset({"byte", "short", "signedint", "long", "unsignedbyte", "unsignedshort", "unsignedint"})
"""RabbitMQ's ``?INTEGER_ARG_TYPES``: the field types its integer arguments take."""

_MAX_EXPIRY = 315_360_000_000
"""``rabbit_misc:check_expiry/1``'s bound: ten years, in ms."""


def _erl_string(text: str) -> str:
    """A string (a char list) as Erlang's ``~p`` prints it."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class _Refused(Exception):
    """A check's refusal: RabbitMQ's error term (as printed) and a person's words."""

    def __init__(self, reason: str, words: str) -> None:
        super().__init__(words)
        self.reason = reason
        self.words = words


def _unacceptable(t: str, expected: str) -> _Refused:
    return _Refused(f"{{unacceptable_type,{t}}}", f"must be {expected}, not a {t}")


def _check_int(v: Any) -> int:
    t = field_type_name(v)
    if t not in _INTEGER_TYPES:
        raise _Refused(_erl_string(f"expected integer, got {t}"), f"must be an integer, not a {t}")
    return int(v)


def _check_non_neg_int(v: Any) -> int:
    n = _check_int(v)
    if n < 0:
        raise _Refused(f"{{value_negative,{n}}}", f"must not be negative ({n})")
    return n


def _check_expiry(n: int) -> None:
    if n < 0:
        raise _Refused(f"{{value_negative,{n}}}", f"must not be negative ({n})")
    if n > _MAX_EXPIRY:
        raise _Refused(f"{{value_too_large,{n}}}", f"must be at most {_MAX_EXPIRY} (ten years in ms), not {n}")


def _check_expires(v: Any, _: Mapping[str, Any]) -> None:
    n = _check_int(v)
    if n == 0:
        raise _Refused("{value_zero,0}", "must be above 0")
    _check_expiry(n)


def _check_message_ttl(v: Any, _: Mapping[str, Any]) -> None:
    _check_expiry(_check_int(v))


def _check_non_neg(v: Any, _: Mapping[str, Any]) -> None:
    _check_non_neg_int(v)


def _check_max_priority(v: Any, _: Mapping[str, Any]) -> None:
    n = _check_non_neg_int(v)
    if n > 255:
        raise _Refused(f"{{max_value_exceeded,{n}}}", f"must be at most 255, not {n}")


def _check_cluster_size(v: Any, _: Mapping[str, Any]) -> None:
    if _check_non_neg_int(v) == 0:
        raise _Refused("{value_zero,0}", "must be above 0")


def _check_bool(v: Any, _: Mapping[str, Any]) -> None:
    t = field_type_name(v)
    if t != "bool":
        raise _unacceptable(t, "true or false")


def _longstr(v: Any) -> str:
    """An argument's string (a ``longstr``): its text; a string of another type is refused."""
    t = field_type_name(v)
    if t != "longstr":
        raise _unacceptable(t, "a string")
    return bytes(v).decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _one_of(known: tuple[str, ...], error: str, words: str) -> Callable[[Any, Mapping[str, Any]], None]:
    def check(v: Any, _: Mapping[str, Any]) -> None:
        if _longstr(v) not in known:
            raise _Refused(error, f"must be {words}, not {v!r}")

    return check


def _check_dlx(v: Any, _: Mapping[str, Any]) -> None:
    _longstr(v)


def _check_dlrk(v: Any, arguments: Mapping[str, Any]) -> None:
    _longstr(v)
    if "x-dead-letter-exchange" not in arguments:
        raise _Refused("routing_key_but_no_dlx_defined", "needs x-dead-letter-exchange")


def _check_max_age(v: Any, _: Mapping[str, Any]) -> None:
    match = re.fullmatch(r"([0-9]*)(.*)", _longstr(v), re.DOTALL)
    digits, unit = match.groups() if match else ("", "")
    if not digits or int(digits) <= 0 or unit not in _AGE_UNITS:
        raise _Refused("invalid_max_age", f"must be a positive number and a unit (Y, M, D, h, m or s), not {v!r}")


def _check_named(what: str, known: tuple[str, ...]) -> Callable[[Any, Mapping[str, Any]], None]:
    """RabbitMQ's check of ``x-queue-mode`` and ``x-queue-type``: ``unsupported queue mode 'x'``."""

    def check(v: Any, _: Mapping[str, Any]) -> None:
        text = _longstr(v)
        if text not in known:
            raise _Refused(_erl_string(f"unsupported {what} '{text}'"), f"must be {' or '.join(known)}, not {v!r}")

    return check


def _check_queue_version(v: Any, _: Mapping[str, Any]) -> None:
    n = _check_non_neg_int(v)
    if n not in (1, 2):
        raise _Refused(_erl_string(f"unsupported queue version '{n}'"), f"must be 1 or 2, not {n}")


def _check_delivery_limit(v: Any, _: Mapping[str, Any]) -> None:
    # (not checked at declaration by RabbitMQ 3.10, which reads it later; RabbitMQ 4's -1: no limit)
    n = _check_int(v)
    if n < -1:
        raise _Refused(f"{{value_negative,{n}}}", f"must be -1 (no limit) or more, not {n}")


def _check_consumer_timeout(v: Any, _: Mapping[str, Any]) -> None:
    if _check_non_neg_int(v) == 0:
        raise _Refused("{value_zero,0}", "must be above 0")


_check_queue_type = _check_named("queue type", tuple(QUEUE_TYPES))

DECLARE_CHECKS: tuple[tuple[str, Callable[[Any, Mapping[str, Any]], None]], ...] = (
    ("x-expires", _check_expires),
    ("x-message-ttl", _check_message_ttl),
    ("x-dead-letter-exchange", _check_dlx),
    ("x-dead-letter-routing-key", _check_dlrk),
    ("x-dead-letter-strategy", _one_of(("at-most-once", "at-least-once"), "invalid_dlx_strategy", "at-most-once or at-least-once")),
    ("x-max-length", _check_non_neg),
    ("x-max-length-bytes", _check_non_neg),
    ("x-max-in-memory-length", _check_non_neg),
    ("x-max-in-memory-bytes", _check_non_neg),
    ("x-max-priority", _check_max_priority),
    ("x-overflow", _one_of(("drop-head", "reject-publish", "reject-publish-dlx"), "invalid_overflow", "drop-head, reject-publish or reject-publish-dlx")),
    ("x-queue-mode", _check_named("queue mode", ("default", "lazy"))),
    ("x-queue-version", _check_queue_version),
    ("x-single-active-consumer", _check_bool),
    ("x-queue-type", _check_queue_type),
    ("x-quorum-initial-group-size", _check_cluster_size),
    ("x-max-age", _check_max_age),
    ("x-stream-max-segment-size-bytes", _check_non_neg),
    ("x-initial-cluster-size", _check_cluster_size),
    ("x-queue-leader-locator", _one_of(LEADER_LOCATORS, "invalid_queue_locator_arg", " or ".join(LEADER_LOCATORS))),
    # not RabbitMQ 3.10's: it reads them after the declaration (x-delivery-limit) or has them not yet
    ("x-delivery-limit", _check_delivery_limit),
    ("x-consumer-timeout", _check_consumer_timeout),
)  # fmt: skip
"""RabbitMQ 3.10.8's ``rabbit_amqqueue:declare_args/0``, in its order, each argument's check
(``check_*_arg/2``); then the two this broker reads that it does not check at declaration."""


def check_declared(arguments: Mapping[str, Any] | None) -> None:
    """RabbitMQ's checks of a declaration's arguments (``check_declare_arguments/2``):
    ``x-queue-type`` first, then each of :data:`DECLARE_CHECKS` in its order. Raises
    :class:`ArgumentError` with ``argument`` and ``reason`` (``{value_negative,-1}``,
    ``{unacceptable_type,longstr}``, ``"expected integer, got decimal"``...) for the first
    refused. (RabbitMQ checks only the arguments of the queue's type and refuses the others
    by name; here every queue type takes them all, so each is checked.)"""
    if not arguments:
        return
    for name, check in (("x-queue-type", _check_queue_type), *DECLARE_CHECKS):
        if name not in arguments:
            continue
        value = arguments[name]
        try:
            check(value, arguments)
        except _Refused as refused:
            raise ArgumentError(f"{name} {refused.words}", argument=name, reason=refused.reason) from None


def known_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments the core gives a meaning to (:func:`is_known`); a declaration keeps the
    others (RabbitMQ keeps any argument) without reading them."""
    return {k: v for k, v in arguments.items() if is_known(k)}
