"""The records the store gives back when a broker recovers (:meth:`SqlStore.load`), one
dataclass per table (:mod:`.store` re-exports them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "DEFERRED",
    "HELD_DEAD_LETTER",
    "BindingRecord",
    "ExchangeRecord",
    "GroupStateRecord",
    "Loaded",
    "NodeRecord",
    "PolicyRecord",
    "PreparedPublish",
    "PreparedRecord",
    "StoredMessage",
    "VhostRecord",
]

DEFERRED: Final = 2
"""``messages.in_flight`` of a message its consumer set aside (Service Bus's defer): it
stays acquired across a restart, to be taken by its seq (0: ready; 1: delivered)."""

HELD_DEAD_LETTER: Final = {"rejected": 3, "expired": 4, "maxlen": 5, "delivery_limit": 6}
"""``messages.in_flight`` of an at-least-once dead letter that reached no queue, kept aside
in its own queue to be sent again (core/dead_letters.py), by the reason it died: after a
restart it is kept aside again, never ready (RabbitMQ's ``rabbit_fifo`` keeps its
dead letters so too)."""

_DEAD_REASONS: Final = {code: reason for reason, code in HELD_DEAD_LETTER.items()}


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message row as recovered from the store (``node``: its :func:`message_key`)."""

    node: str
    seq: int
    priority: int
    delivery_count: int
    expiry: float | None
    arrival: float
    message_id: str | None
    format: str
    data: bytes
    in_flight: int = 0
    """Its state in the store: 0 ready, :data:`DEFERRED`, or a :data:`HELD_DEAD_LETTER` mark
    (one delivered, 1, is ready again once the store is loaded)."""
    number: int | None = None
    """Its sequence number for life if not ``seq`` (a scheduled message moved when due)."""

    @property
    def deferred(self) -> bool:
        """Set aside by its consumer (Service Bus's defer): it comes back acquired, to be taken by its seq."""
        return self.in_flight == DEFERRED

    @property
    def dead_reason(self) -> str | None:
        """Why it died, if it is an at-least-once dead letter kept aside (else None)."""
        return _DEAD_REASONS.get(self.in_flight)


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A durable node (queue, topic subscription, stream) to recreate at start."""

    vhost: str
    name: str
    kind: str
    properties: str


@dataclass(frozen=True, slots=True)
class ExchangeRecord:
    """A durable exchange: its type and properties (JSON: auto_delete, internal, alternate, arguments)."""

    vhost: str
    name: str
    type: str
    properties: str


@dataclass(frozen=True, slots=True)
class BindingRecord:
    """A durable binding: source exchange to a queue or exchange, key and arguments (JSON)."""

    vhost: str
    source: str
    destination_kind: str
    destination: str
    routing_key: str
    arguments: str


@dataclass(frozen=True, slots=True)
class PolicyRecord:
    """A runtime policy (RabbitMQ's): queues whose names match ``pattern`` get ``definition`` (JSON)."""

    vhost: str
    name: str
    pattern: str
    apply_to: str
    definition: str
    priority: int


@dataclass(frozen=True, slots=True)
class VhostRecord:
    """A virtual host declared at run time (definitions import), with its metadata (JSON)."""

    name: str
    metadata: str


@dataclass(frozen=True, slots=True)
class GroupStateRecord:
    """The state a consumer kept for a message group of a queue (Service Bus's session state)."""

    node: str
    """The queue's :func:`~.store.message_key`."""
    group: str
    state: bytes


@dataclass(frozen=True, slots=True)
class PreparedPublish:
    """A message a prepared transaction publishes at its commit, and where to."""

    vhost: str
    exchange: str
    routing_key: str | None
    priority: int
    durable: bool
    expiry: float | None
    arrival: float
    message_id: str | None
    format: str
    data: bytes


@dataclass(frozen=True, slots=True)
class PreparedRecord:
    """A transaction prepared for a two-phase commit (core/prepared.py), as stored."""

    txn: bytes
    """Its id, as its front end spells it."""
    owner: str
    """The front end that prepared it (who takes it back after a restart)."""
    publishes: list[PreparedPublish]
    taken: list[tuple[str, int]]
    """The messages it took, still acquired: (the queue's :func:`~.store.message_key`, seq)."""


@dataclass(frozen=True, slots=True)
class Loaded:
    """Everything a store holds, as :meth:`Store.load` reads it."""

    nodes: list[NodeRecord]
    messages: list[StoredMessage]
    exchanges: list[ExchangeRecord]
    bindings: list[BindingRecord]
    policies: list[PolicyRecord] = field(default_factory=list)
    vhosts: list[VhostRecord] = field(default_factory=list)
    group_states: list[GroupStateRecord] = field(default_factory=list)
    prepared: list[PreparedRecord] = field(default_factory=list)
