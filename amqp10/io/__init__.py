"""The anyio driver (L2): runs an engine over TCP or TLS; the only place with sockets."""

from __future__ import annotations

from .driver import Driver, EngineProtocol, Signal
from .net import Listener, connect_stream, map_io_error, peer_name
from .tls import client_context, server_context

__all__ = [
    "Driver",
    "EngineProtocol",
    "Listener",
    "Signal",
    "client_context",
    "connect_stream",
    "map_io_error",
    "peer_name",
    "server_context",
]
