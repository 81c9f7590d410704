"""The async client and direct peer: ``connect()``, ``serve()``/``listen()``.

``amqp10.sync`` offers the same API without ``await`` (a blocking portal).
"""

from __future__ import annotations

from ._common import Outcome, SettleMode
from .connection import DEFAULT_TIMEOUT, Connection, ConnectOptions, connect, connect_with
from .links import Delivery, Link, Receiver, Sender, Session, Tracker
from .reconnect import ReconnectPolicy
from .server import Server, listen, serve
from .transactions import Transaction, TransactionError
from .url import URL, parse_url

__all__ = [
    "DEFAULT_TIMEOUT",
    "URL",
    "ConnectOptions",
    "Connection",
    "Delivery",
    "Link",
    "Outcome",
    "ReconnectPolicy",
    "Receiver",
    "Sender",
    "Server",
    "Session",
    "SettleMode",
    "Tracker",
    "Transaction",
    "TransactionError",
    "connect",
    "connect_with",
    "listen",
    "parse_url",
    "serve",
]
