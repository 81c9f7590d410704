"""The async client and direct peer: ``connect()``, ``serve()``/``listen()``.

``amqp10.sync`` offers the same API without ``await`` (the event loop run by the calling thread).
"""

from __future__ import annotations

from ._common import DEFAULT_TIMEOUT, Outcome, SettleMode
from .azure import ConnectionString, parse_connection_string
from .claims import Claims, JwtCredential, SasCredential, Token
from .connection import Connection
from .dial import ConnectOptions
from .link import Link
from .management import Management
from .opening import connect, connect_with
from .receiver import Delivery, Receiver
from .reconnect import ReconnectPolicy
from .sender import Sender, Tracker
from .server import Server, listen, serve
from .sessions import Session
from .transactions import Transaction, TransactionError
from .url import URL, parse_url

__all__ = [
    "DEFAULT_TIMEOUT",
    "Claims",
    "ConnectionString",
    "JwtCredential",
    "SasCredential",
    "Token",
    "URL",
    "ConnectOptions",
    "Connection",
    "Delivery",
    "Link",
    "Management",
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
    "parse_connection_string",
    "parse_url",
    "serve",
]
