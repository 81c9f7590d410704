"""Service Bus entities declared from ``[servicebus]``, as core queues.

A queue ``Q`` is a core queue whose dead-letter target is the queue
``Q/$deadletterqueue`` (through the default exchange) and whose delivery limit is
its ``max_delivery_count``: abandoning a message counts a failed delivery, and the
core dead-letters it once the limit is reached.
"""

from __future__ import annotations

from ...config import ServiceBusConfig
from ...core import VirtualHost

__all__ = ["DEAD_LETTER_SUFFIX", "declare_entities"]

DEAD_LETTER_SUFFIX = "/$deadletterqueue"


def declare_entities(vhost: VirtualHost, config: ServiceBusConfig) -> None:
    """Declare the configured queues (an existing queue is kept as it is)."""
    for q in config.queues:
        dead = q.name + DEAD_LETTER_SUFFIX
        vhost.declare_queue(dead)
        vhost.declare_queue(
            q.name,
            arguments={
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": dead,
                "x-delivery-limit": q.max_delivery_count,
            },
        )
