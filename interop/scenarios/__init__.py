"""The matrix's rows: one scenario id per behaviour, run by each client driver.

A driver (our client, Proton's Python clients, Proton's C examples) maps a
scenario id to a function ``fn(ctx) -> str | None``: None means pass, a string
is a pass with a note (a peer quirk worth knowing), :class:`NotApplicable`
means the pairing cannot do it (with the reason), any other exception is a
FAIL whose one-line text goes in the cell.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from ..peers.base import Endpoint

__all__ = [
    "BOTH",
    "CONVENTIONS",
    "FILTER_ROWS",
    "SCENARIOS",
    "V10",
    "V010",
    "V091",
    "Ctx",
    "NotApplicable",
    "Scenario",
    "ScenarioFailed",
    "scenario_ids",
]

V10, V091, V010 = "1.0", "0-9-1", "0-10"
"""The protocol a column's client speaks; a row is run by the columns of its protocols."""
BOTH = (V10, V091)


@dataclass(frozen=True)
class Scenario:
    id: str
    title: str
    protocols: tuple[str, ...] = (V10,)
    """The protocols whose columns run it (a 0-9-1 column reads the row in 0-9-1 terms:
    pre-settled is no-ack, accepted/rejected/released are ack/reject/nack with requeue,
    SASL PLAIN is the PLAIN login, the idle timeout is the heartbeat)."""


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("sasl-anonymous", "connect + SASL ANONYMOUS"),
    Scenario("sasl-plain", "connect + SASL PLAIN", BOTH),
    Scenario("at-most-once", "send/receive at-most-once (pre-settled)", BOTH),
    Scenario("at-least-once", "send/receive at-least-once (unsettled)", BOTH),
    Scenario("rcv-settle-second", "send/receive, rcv-settle-mode second"),
    Scenario("outcome-accept", "outcome: accepted"),
    Scenario("outcome-reject", "outcome: rejected", BOTH),
    Scenario("outcome-release", "outcome: released", BOTH),
    Scenario("outcome-modify", "outcome: modified (delivery-failed)"),
    Scenario("large-message", "1 MiB message (multi-frame)", BOTH),
    Scenario("message-sections", "every message section round trip", BOTH),
    Scenario("drain", "drain"),
    Scenario("request-response", "request/response, dynamic reply-to", BOTH),
    Scenario("browse", "browse (distribution-mode copy)"),
    Scenario("tls", "TLS (amqps, throwaway CA)", BOTH),
    Scenario("idle-timeout", "idle timeout: heartbeats keep it alive", BOTH),
    Scenario("link-resume", "link resumption"),
    Scenario("transactions", "local transactions (commit, rollback)", BOTH),
    Scenario("anonymous-relay", "anonymous relay: request/response through a sender with no target"),
    # the conventions of issue #14 (1.0)
    Scenario("attach-answer", "attach answers fill both termini, with capabilities"),
    Scenario("selector", "JMS selector on a queue (the rest stays for others)"),
    Scenario(
        "filter-expressions",
        "OASIS filter expressions (properties, application-properties, SQL) on a queue",
    ),
    Scenario("no-local", "no-local filter on a topic: not the own connection's messages"),
    Scenario("topic-wildcard", "topic:// prefix: every subscriber gets a copy; wildcards"),
    Scenario("durable-subscription", "durable topic subscription: kept while detached"),
    Scenario("shared-subscription", "shared topic subscription: load-balanced"),
    Scenario("scheduled-delivery", "scheduled delivery (x-opt-delivery-time)"),
    Scenario("message-groups", "message groups: one consumer per group-id"),
    # 0-9-1's own
    Scenario("publisher-confirms", "0-9-1: publisher confirms", (V091,)),
    Scenario("mandatory-return", "0-9-1: mandatory publish returned (312 NO_ROUTE)", (V091,)),
    Scenario("prefetch", "0-9-1: basic.qos prefetch limits unacked deliveries", (V091,)),
    Scenario("direct-reply-to", "0-9-1: direct reply-to (amq.rabbitmq.reply-to)", (V091,)),
    # across protocols: the column's 0-9-1 client and our 1.0 client on the same broker
    Scenario("cross-091-to-10", "0-9-1 publish → 1.0 receive, properties mapped", (V091,)),
    Scenario("cross-10-to-091", "1.0 send → 0-9-1 consume, properties mapped", (V091,)),
    # 0-10 (qpid.messaging) with 1.0 (our client) and 0-9-1 (pika) on the same queues
    Scenario("cross-010-to-10", "0-10 send → 1.0 receive, properties mapped", (V010,)),
    Scenario("cross-10-to-010", "1.0 send → 0-10 fetch, properties mapped", (V010,)),
    Scenario("cross-010-to-091", "0-10 send → 0-9-1 get, properties mapped", (V010,)),
    Scenario("cross-091-to-010", "0-9-1 publish → 0-10 fetch, properties mapped", (V010,)),
)


# the rows for the conventions of issue #14 (besides anonymous-relay and drain): a driver
# module names its function for row "a-b" a_b (see conventions_of)
CONVENTIONS = (
    "attach-answer",
    "selector",
    "filter-expressions",
    "no-local",
    "topic-wildcard",
    "durable-subscription",
    "shared-subscription",
    "scheduled-delivery",
    "message-groups",
)


@dataclass(frozen=True)
class FilterRows:
    """What the filter-expressions and no-local rows send and expect (every driver's)."""

    messages: tuple[tuple[str, str, str, int], ...]
    """(body, subject, colour, n) published to one queue in this order..."""
    filters: tuple[tuple[str, str, int, Any, list[str]], ...]
    """...then one consumer per OASIS filter in turn: (key, descriptor, code, value, the
    bodies it must get; a properties filter's keys are symbols, field names)..."""
    rest: list[str]
    """...then what a plain consumer must get."""
    no_local: str
    """The no-local row's descriptor: a no-local subscriber gets only the other
    connection's message, a plain subscriber on the same connection gets both (own first)."""


FILTER_ROWS = FilterRows(
    messages=tuple(
        (f"{kind}{i}", subject, colour, n)
        for i in (1, 2)
        for kind, subject, colour, n in [
            ("p", f"orders.{i}", "blue", 0),
            ("a", "sales", "red", 0),
            ("s", "sales", "blue", 7),
            ("x", "sales", "blue", 0),
        ]
    ),
    filters=(
        ("props", "amqp:properties-filter", 0x173, {"subject": "&p:orders."}, ["p1", "p2"]),
        ("app", "amqp:application-properties-filter", 0x174, {"colour": "red"}, ["a1", "a2"]),
        ("sql", "amqp:sql-filter", 0x120, "p.subject = 'sales' AND a.n > 5", ["s1", "s2"]),
    ),
    rest=["x1", "x2"],
    no_local="apache.org:no-local-filter:list",
)


def conventions_of(namespace: dict[str, Any]) -> dict[str, Any]:
    """A driver's functions for :data:`CONVENTIONS`, from its module namespace."""
    return {sid: namespace[sid.replace("-", "_")] for sid in CONVENTIONS}


def scenario_ids(protocol: str | None = None) -> list[str]:
    """The rows (of ``protocol``'s columns: None, every row)."""
    return [s.id for s in SCENARIOS if protocol is None or protocol in s.protocols]


class NotApplicable(Exception):
    """The pairing cannot do this scenario; ``str()`` says why."""


class ScenarioFailed(AssertionError):
    """A check of a scenario failed; ``str()`` is the one-line reason."""


@dataclass
class Ctx:
    """What a scenario function gets: the peer's endpoint and a unique address prefix."""

    ep: Endpoint
    scenario: str
    prefix: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    notes: list[str] = field(default_factory=list)

    def addr(self, name: str = "q") -> str:
        """A fresh address for this run, in the peer's syntax (``/queue/...`` on RabbitMQ)."""
        return self.ep.address(f"interop.{self.scenario}.{self.prefix}.{name}")


def check(condition: object, reason: str) -> None:
    """Fail the scenario with ``reason`` unless ``condition`` holds."""
    if not condition:
        raise ScenarioFailed(reason)
