"""The anyio driver (L2): runs an engine over TCP, TLS or a WebSocket; the only place with sockets.

:mod:`.websocket` is the WebSocket byte stream (AMQP WebSocket binding) and
:mod:`.http` the minimal HTTP/1.1 server that upgrades to it.
"""

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
