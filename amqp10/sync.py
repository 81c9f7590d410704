"""The blocking API: ``amqp10.sync.connect(url)`` and ``amqp10.sync.serve(...)``.

The same client as :mod:`amqp10.client`, without ``await``; see
:mod:`amqp10.client.sync`.
"""

from __future__ import annotations

from .client.sync import (
    Connection,
    Delivery,
    Receiver,
    Sender,
    Server,
    Session,
    Tracker,
    Transaction,
    connect,
    serve,
)

__all__ = [
    "Connection",
    "Delivery",
    "Receiver",
    "Sender",
    "Server",
    "Session",
    "Tracker",
    "Transaction",
    "connect",
    "serve",
]
