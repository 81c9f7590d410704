"""Runtime policies (RabbitMQ's): queues whose names match a pattern get settings.

A policy belongs to one virtual host and has a ``pattern`` (a regular expression,
searched in the queue's name as RabbitMQ does), ``apply_to`` (``queues``, ``all``,
``classic_queues``, ``streams``, ``exchanges``), a ``definition`` (settings under
RabbitMQ's policy names) and a ``priority``. Of the policies that match a queue, the
one with the highest priority applies (on a tie: the first by name), to queues
declared later and to the existing ones at once.

The settings this broker applies are the queue arguments of :mod:`.arguments`
without their ``x-`` (:data:`POLICY_KEYS`). They combine with a queue's own
arguments as in RabbitMQ: for ``max-length``, ``max-length-bytes``,
``message-ttl``, ``expires``, ``delivery-limit`` and ``consumer-timeout`` the lower value wins; for the
others the queue's argument wins over the policy. The address rules of the broker
config are applied first, under both. Other keys (``queue-mode``, ``ha-mode``,
federation, ...) are kept (a definitions export gives them back) and not applied.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .arguments import ArgumentError, policy_with_arguments
from .queue_policy import QueuePolicy

__all__ = ["APPLY_TO", "POLICY_KEYS", "RuntimePolicy", "combined_arguments", "pick_policy"]

POLICY_KEYS = frozenset(
    {
        "max-length",
        "max-length-bytes",
        "message-ttl",
        "expires",
        "overflow",
        "dead-letter-exchange",
        "dead-letter-routing-key",
        "dead-letter-strategy",
        "delivery-limit",
        "consumer-timeout",
        "queue-leader-locator",
    }
)
"""The policy keys applied to queues (each is the queue argument ``x-KEY``)."""

_LOWER_WINS = frozenset({"max-length", "max-length-bytes", "message-ttl", "expires", "delivery-limit", "consumer-timeout"})

APPLY_TO: dict[str, frozenset[str]] = {
    "all": frozenset({"queue", "stream", "exchange"}),
    "queues": frozenset({"queue", "stream"}),
    "classic_queues": frozenset({"queue"}),
    "quorum_queues": frozenset(),
    "streams": frozenset({"stream"}),
    "exchanges": frozenset({"exchange"}),
}
"""RabbitMQ's ``apply-to`` values and the kinds of node each covers here."""


@dataclass(frozen=True, slots=True)
class RuntimePolicy:
    """One policy; :meth:`check` validates it (the constructor does not)."""

    name: str
    pattern: str
    apply_to: str = "all"
    definition: dict[str, Any] = field(default_factory=dict)
    priority: int = 0

    def check(self) -> None:
        """Raise ArgumentError (worded for a person) if the policy cannot be applied."""
        if self.apply_to not in APPLY_TO:
            raise ArgumentError(f"apply-to must be one of {', '.join(APPLY_TO)}, not {self.apply_to!r}")
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise ArgumentError(f"pattern {self.pattern!r} is not a regular expression: {exc}") from None
        # the values must be what the queue arguments take
        policy_with_arguments(QueuePolicy(), self.arguments())

    def arguments(self) -> dict[str, Any]:
        """The applied part of the definition, as queue arguments (``x-max-length``, ...)."""
        return {f"x-{k}": v for k, v in self.definition.items() if k in POLICY_KEYS}

    def matches(self, name: str, kind: str) -> bool:
        return kind in APPLY_TO.get(self.apply_to, ()) and re.search(self.pattern, name) is not None

    def definition_json(self) -> str:
        return json.dumps(self.definition, sort_keys=True)


def pick_policy(policies: Mapping[str, RuntimePolicy], name: str, kind: str) -> RuntimePolicy | None:
    """The policy that applies to node ``name`` of ``kind``: the highest priority of those
    that match; on a tie, the first by name."""
    best: RuntimePolicy | None = None
    for p in sorted(policies.values(), key=lambda p: p.name):
        if p.matches(name, kind) and (best is None or p.priority > best.priority):
            best = p
    return best


def combined_arguments(own: Mapping[str, Any] | None, policy: RuntimePolicy | None) -> dict[str, Any]:
    """A queue's own arguments with ``policy``'s settings merged in, as RabbitMQ merges them."""
    merged = dict(own or {})
    if policy is None:
        return merged
    for key, value in policy.arguments().items():
        mine = merged.get(key)
        if mine is None or (key[2:] in _LOWER_WINS and _number(value) and _number(mine) and value < mine):
            merged[key] = value
    return merged


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)
