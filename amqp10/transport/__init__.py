"""The sans-IO AMQP 1.0 engine (Part 2): connection, session, link, delivery.

``Connection.receive_data(bytes) -> list[Event]``, ``Connection.data_to_send() ->
bytes`` and ``Connection.tick(now) -> deadline | None``; endpoints are driven with
methods (open, begin, attach, flow, send, settle, detach, end, close).
"""

from __future__ import annotations

from .connection import Connection
from .connection_state import ConnectionState
from .delivery import Delivery
from .errors import AMQPEngineError, IllegalStateError, ProtocolViolation
from .events import (
    ConnectionClosed,
    ConnectionFailed,
    ConnectionOpened,
    CreditAdded,
    DeliveryAborted,
    DeliveryReceived,
    DeliveryUpdated,
    DrainRequested,
    Event,
    FlowReceived,
    LinkAttached,
    LinkDetached,
    LinkFailed,
    SessionBegun,
    SessionEnded,
    SessionFailed,
)
from .link import Link, Receiver, Sender
from .link_state import LinkState
from .session import Session
from .session_state import SessionState

__all__ = [
    "AMQPEngineError", "Connection", "ConnectionClosed", "ConnectionFailed", "ConnectionOpened",
    "ConnectionState", "CreditAdded", "Delivery", "DeliveryAborted", "DeliveryReceived",
    "DeliveryUpdated", "DrainRequested", "Event", "FlowReceived", "IllegalStateError", "Link",
    "LinkAttached", "LinkDetached", "LinkFailed", "LinkState", "ProtocolViolation", "Receiver",
    "Sender", "Session", "SessionBegun", "SessionEnded", "SessionFailed", "SessionState",
]
