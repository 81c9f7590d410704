"""The protocol-neutral broker core: nodes, the message container, store, transactions.

Nothing here imports a protocol engine (``amqp10.transport``, ``amqp10.sasl``,
``amqp10.io``; a test holds the package to that). Front ends
(:mod:`amqp10.broker.amqp1`; 0-9-1 later) turn their engine's events into the
core's operations:

- declare / look up: :meth:`Broker.lookup`, :meth:`Broker.create_node`,
  :meth:`Broker.create_dynamic`, :meth:`Broker.delete_node`;
- publish: ``node.publish(msg, on_stored)`` with a :class:`QueuedMessage`
  subclass of the publisher's protocol (False: the node refused it);
- consume / cancel: ``node.add_consumer(c)`` / ``node.remove_consumer(c)``, ``c``
  a :class:`Consumer` (its ``credit()`` is 1.0 link credit or 0-9-1 prefetch room);
- settle: ``node.ack(msg)``, ``node.release(msg, delivery_failed=...,
  undeliverable_to=...)``, ``node.reject(msg)``;
- transactions: :class:`Transaction`;
- permissions: :meth:`Broker.authorize` before any of the above on a user's behalf.
"""

from __future__ import annotations

from .broker import LEGACY_FORMAT, Action, Broker
from .message import (
    DEFAULT_PRIORITY,
    PRIORITY_LEVELS,
    QueuedMessage,
    Routing,
    format_named,
    register_conversion,
    register_format,
)
from .nodes import NULL_JOURNAL, Consumer, DuplicateWindow, Journal, Node, Queue, Stream, Topic
from .recovery import LinkRecovery, SuspendedLink
from .transactions import Transaction

__all__ = [
    "DEFAULT_PRIORITY",
    "LEGACY_FORMAT",
    "NULL_JOURNAL",
    "PRIORITY_LEVELS",
    "Action",
    "Broker",
    "Consumer",
    "DuplicateWindow",
    "Journal",
    "LinkRecovery",
    "Node",
    "Queue",
    "QueuedMessage",
    "Routing",
    "Stream",
    "SuspendedLink",
    "Topic",
    "Transaction",
    "format_named",
    "register_conversion",
    "register_format",
]
