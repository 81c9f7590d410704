"""Events the engine reports to the application (frozen, keyword-only dataclasses).

``Connection.receive_data`` (and ``tick``) return these; each is something the
application must act on or may want to observe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..types import Error, Open
    from .delivery import Delivery
    from .link import Link, Receiver, Sender
    from .session import Session

__all__ = [
    "ConnectionClosed",
    "ConnectionFailed",
    "ConnectionOpened",
    "CreditAdded",
    "DeliveryAborted",
    "DeliveryReceived",
    "DeliveryUpdated",
    "DrainRequested",
    "Event",
    "FlowReceived",
    "LinkAttached",
    "LinkDetached",
    "LinkFailed",
    "SessionBegun",
    "SessionEnded",
    "SessionFailed",
]

_dc = dataclass(frozen=True, kw_only=True, slots=True)


@_dc
class Event:
    """Base class of every engine event."""


@_dc
class ConnectionOpened(Event):
    """The peer's ``open`` arrived (a reply to ours, or asking us to open)."""

    remote: Open
    """The peer's open performative: container-id, limits, capabilities, properties."""


@_dc
class ConnectionClosed(Event):
    """The peer closed the connection (with an error if it had one)."""

    error: Error | None
    """The peer's reason, or None for a clean close."""


@_dc
class ConnectionFailed(Event):
    """The engine closed the connection because the peer broke the protocol."""

    error: Error
    """The condition and description sent to the peer in our close."""


@_dc
class SessionBegun(Event):
    """The peer's ``begin`` arrived: a reply to ours, or a new session to accept."""

    session: Session
    """The session; if the peer began it, call ``session.begin()`` to accept."""


@_dc
class SessionEnded(Event):
    """The peer ended the session."""

    session: Session
    error: Error | None


@_dc
class SessionFailed(Event):
    """The engine ended a session because the peer broke the protocol in it."""

    session: Session
    error: Error


@_dc
class LinkAttached(Event):
    """The peer's ``attach`` arrived: a reply to ours, or a new link to accept.

    For a new link, ``link.remote_source``/``remote_target`` and the settle modes
    say what the peer asks for; call ``link.attach(...)`` to accept (or
    ``link.detach(error=...)`` to refuse).
    """

    link: Link
    resumed: bool = False
    """True when the attach carried an unsettled map (link resumption)."""


@_dc
class LinkDetached(Event):
    """The peer detached (or, with ``closed``, closed) the link."""

    link: Link
    closed: bool
    error: Error | None


@_dc
class LinkFailed(Event):
    """The engine detached a link because the peer broke the protocol on it."""

    link: Link
    error: Error


@_dc
class CreditAdded(Event):
    """A sender got credit (it may now send ``link.credit`` deliveries)."""

    link: Sender
    credit: int


@_dc
class DrainRequested(Event):
    """The receiver asked the sender to use up or give back all its credit.

    Send what is available, then call ``sender.drained()``.
    """

    link: Sender


@_dc
class FlowReceived(Event):
    """A receiver got the sender's flow state (delivery-count, available, drain done)."""

    link: Receiver
    available: int | None
    drained: bool
    """True when this flow completes a drain the receiver asked for."""


@_dc
class DeliveryReceived(Event):
    """A complete message arrived (all its transfer frames)."""

    link: Receiver
    delivery: Delivery


@_dc
class DeliveryAborted(Event):
    """The sender aborted a multi-frame delivery; its partial payload was discarded."""

    link: Receiver
    delivery: Delivery


@_dc
class DeliveryUpdated(Event):
    """The peer changed a delivery's state and/or settled it."""

    link: Link
    delivery: Delivery
    state: Any
    """The peer's delivery state (Accepted(), Rejected(...), Received(...), ...) or None."""
    settled: bool
