"""The sans-IO AMQP 1.0 engine (Part 2): connection, session, link, delivery.

``Connection.receive_data(bytes) -> list[Event]``, ``Connection.data_to_send() ->
bytes`` and ``Connection.tick(now) -> deadline | None``; endpoints are driven with
methods (open, begin, attach, flow, send, settle, detach, end, close). Events
raised by those methods or by ``tick`` (not by received bytes) are collected with
``Connection.poll_events()``.

Behaviour the engine chooses (the spec leaves it open, or it saves the
application work):

- A peer's close, end or detach is answered in kind at once (a pipelined
  open+close is answered with open+close).
- A session or link the peer begins/attaches is only accepted when the
  application says so: ``session.begin()`` / ``link.attach(source=..., target=...)``
  after ``SessionBegun`` / ``LinkAttached``; ``end()`` / ``detach()`` refuse it
  (a refused link is first attached with a null local terminus, §2.6.3).
- ``Sender.send()`` queues; deliveries go out as link credit and the peer's
  session window allow, cut to the peer's max-frame-size (512 until its open).
  Automatic delivery-tags are ASCII decimal (Proton decodes tags as UTF-8).
- Our session incoming window is re-opened with a session flow whenever half of
  it is used; a peer that goes beyond what we announced gets
  ``amqp:session:window-violation``.
- Dispositions are batched until the next write: consecutive delivery-ids with
  the same outcome and settlement go in one frame (first..last).
- A drain completes by itself when the queued deliveries use up the credit;
  otherwise ``DrainRequested`` asks the application to call ``drained()``.
- Peer violations become close/end/detach with the spec's condition, plus a
  ``ConnectionFailed``/``SessionFailed``/``LinkFailed`` event; a bug of ours while
  handling input becomes ``amqp:internal-error``. Local misuse raises
  ``IllegalStateError`` before anything changes.
- A second attach of an active link's name on the connection detaches the old
  endpoint with ``amqp:link:stolen`` (not closed: the terminus lives on).
- Link resumption (§2.6.13) is described in :mod:`amqp10.transport.resume`.
- Default max-frame-size 65536; channel 0 only until the peer's open.
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
    CreditLowered,
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
    "ConnectionState", "CreditAdded", "CreditLowered", "Delivery", "DeliveryAborted", "DeliveryReceived",
    "DeliveryUpdated", "DrainRequested", "Event", "FlowReceived", "IllegalStateError", "Link",
    "LinkAttached", "LinkDetached", "LinkFailed", "LinkState", "ProtocolViolation", "Receiver",
    "Sender", "Session", "SessionBegun", "SessionEnded", "SessionFailed", "SessionState",
]
