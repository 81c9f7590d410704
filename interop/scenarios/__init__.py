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
    "CONVENTIONS",
    "SCENARIOS",
    "Ctx",
    "NotApplicable",
    "Scenario",
    "ScenarioFailed",
    "scenario_ids",
]


@dataclass(frozen=True)
class Scenario:
    id: str
    title: str


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("sasl-anonymous", "connect + SASL ANONYMOUS"),
    Scenario("sasl-plain", "connect + SASL PLAIN"),
    Scenario("at-most-once", "send/receive at-most-once (pre-settled)"),
    Scenario("at-least-once", "send/receive at-least-once (unsettled)"),
    Scenario("rcv-settle-second", "send/receive, rcv-settle-mode second"),
    Scenario("outcome-accept", "outcome: accepted"),
    Scenario("outcome-reject", "outcome: rejected"),
    Scenario("outcome-release", "outcome: released"),
    Scenario("outcome-modify", "outcome: modified (delivery-failed)"),
    Scenario("large-message", "1 MiB message (multi-frame)"),
    Scenario("message-sections", "every message section round trip"),
    Scenario("drain", "drain"),
    Scenario("request-response", "request/response, dynamic reply-to"),
    Scenario("browse", "browse (distribution-mode copy)"),
    Scenario("tls", "TLS (amqps, throwaway CA)"),
    Scenario("idle-timeout", "idle timeout: heartbeats keep it alive"),
    Scenario("link-resume", "link resumption"),
    Scenario("transactions", "local transactions (commit, rollback)"),
    Scenario(
        "anonymous-relay", "anonymous relay: request/response through a sender with no target"
    ),
    Scenario("attach-answer", "attach answers fill both termini, with capabilities"),
    Scenario("selector", "JMS selector on a queue (the rest stays for others)"),
    Scenario("topic-wildcard", "topic:// prefix: every subscriber gets a copy; wildcards"),
    Scenario("durable-subscription", "durable topic subscription: kept while detached"),
    Scenario("shared-subscription", "shared topic subscription: load-balanced"),
    Scenario("scheduled-delivery", "scheduled delivery (x-opt-delivery-time)"),
    Scenario("message-groups", "message groups: one consumer per group-id"),
)


# the rows for the conventions of issue #14 (besides anonymous-relay and drain): a driver
# module names its function for row "a-b" a_b (see conventions_of)
CONVENTIONS = (
    "attach-answer",
    "selector",
    "topic-wildcard",
    "durable-subscription",
    "shared-subscription",
    "scheduled-delivery",
    "message-groups",
)


def conventions_of(namespace: dict[str, Any]) -> dict[str, Any]:
    """A driver's functions for :data:`CONVENTIONS`, from its module namespace."""
    return {sid: namespace[sid.replace("-", "_")] for sid in CONVENTIONS}


def scenario_ids() -> list[str]:
    return [s.id for s in SCENARIOS]


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
