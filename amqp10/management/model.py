"""What management answers describe, whichever protocol carried it: a queue, an exchange."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["QUEUE_TYPES", "ExchangeInfo", "QueueInfo", "queue_type"]

QUEUE_TYPES = ("classic", "quorum", "stream")
"""RabbitMQ's queue types (its ``x-queue-type`` argument); a queue without one is classic."""


def queue_type(arguments: Mapping[str, Any] | None, *, stream: bool = False) -> str:
    """A queue's type: ``stream`` for a stream, else what ``x-queue-type`` says (classic)."""
    if stream:
        return "stream"
    return str((arguments or {}).get("x-queue-type", "classic"))


@dataclass(frozen=True)
class QueueInfo:
    """A queue as management reads it."""

    name: str
    type: str = "classic"
    """``classic``, ``quorum`` or ``stream`` (see :data:`QUEUE_TYPES`)."""
    durable: bool = True
    auto_delete: bool = False
    exclusive: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)
    message_count: int = 0
    consumer_count: int = 0
    vhost: str = "/"
    leader: str | None = None
    """The node that holds it (RabbitMQ: a quorum queue's leader); None where not said."""
    replicas: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ExchangeInfo:
    """An exchange as management reads it (RabbitMQ 4's protocol answers none: only OASIS lists them)."""

    name: str
    type: str = "direct"
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)
