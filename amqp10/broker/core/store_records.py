"""The records the store gives back when a broker recovers (:meth:`SqlStore.load`), one
dataclass per table (:mod:`.store` re-exports them)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
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
    deferred: bool = False
    """Set aside by its consumer (Service Bus's defer): it comes back acquired, to be taken by its seq."""
    number: int | None = None
    """Its sequence number for life if not ``seq`` (a scheduled message moved when due)."""


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
