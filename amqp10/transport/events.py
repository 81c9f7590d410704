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
    "CreditLowered",
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

@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """Base class of every engine event."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectionOpened(Event):
    """The peer's ``open`` arrived (a reply to ours, or asking us to open)."""

    remote: Open
    """The peer's open performative: container-id, limits, capabilities, properties."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectionClosed(Event):
    """The peer closed the connection (with an error if it had one)."""

    error: Error | None
    """The peer's reason, or None for a clean close."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectionFailed(Event):
    """The engine closed the connection because the peer broke the protocol."""

    error: Error
    """The condition and description sent to the peer in our close."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionBegun(Event):
    """The peer's ``begin`` arrived: a reply to ours, or a new session to accept."""

    session: Session
    """The session; if the peer began it, call ``session.begin()`` to accept."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionEnded(Event):
    """The peer ended the session (the engine has answered with our end)."""

    session: Session
    """The session; its links are detached (their unsettled deliveries stay for resuming)."""
    error: Error | None
    """The peer's reason, or None for a clean end."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionFailed(Event):
    """The engine ended a session because the peer broke the protocol in it."""

    session: Session
    """The session, now ending: frames on it are discarded until the peer's end."""
    error: Error
    """The condition and description sent to the peer in our end."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkAttached(Event):
    """The peer's ``attach`` arrived: a reply to ours, or a new link to accept.

    For a new link, ``link.remote_source``/``remote_target`` and the settle modes
    say what the peer asks for; call ``link.attach(...)`` to accept (or
    ``link.detach(error=...)`` to refuse).
    """

    link: Link
    """The link; ``link.remote_attach`` is the peer's attach."""
    resumed: bool = False
    """True when the attach carried an unsettled map: the peer resumes the link (§2.6.13)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkDetached(Event):
    """The peer detached (or, with ``closed``, closed) the link; the engine answered in kind."""

    link: Link
    """The link, now detached."""
    closed: bool
    """True if the peer closed the link (its terminus state may be discarded)."""
    error: Error | None
    """The peer's reason, or None."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkFailed(Event):
    """The engine detached a link: the peer broke the protocol on it, or stole it.

    ``amqp:link:stolen`` (§2.6.1) means a new attach with the link's name took
    it over; the other conditions are the peer's violations (§2.8.18).
    """

    link: Link
    """The link, detaching: its frames are discarded until the peer's detach."""
    error: Error
    """The condition and description sent to the peer in our detach."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CreditAdded(Event):
    """A sender got credit (it may now send ``link.credit`` deliveries)."""

    link: Sender
    """The sender."""
    credit: int
    """Its link-credit now."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CreditLowered(Event):
    """The receiver lowered a sender's credit (§2.6.7: only the receiver sets it; a flow
    may give less than there was). What was counted on beyond ``link.credit`` may not be
    sent: a broker gives it back where it had asked for messages on the link's behalf."""

    link: Sender
    """The sender."""
    credit: int
    """Its link-credit now."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DrainRequested(Event):
    """The receiver asked the sender to use up or give back all its credit.

    Send what is available, then call ``sender.drained()``. (When the credit is
    used up by deliveries already queued, the engine finishes the drain itself
    and this event is not raised.)
    """

    link: Sender
    """The sender asked to drain."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FlowReceived(Event):
    """A receiver got the sender's flow state (delivery-count, available, drain done)."""

    link: Receiver
    """The receiver; ``link.credit`` and ``link.delivery_count`` are updated."""
    available: int | None
    """The sender's ``available`` (deliveries it could send with more credit), if given."""
    drained: bool
    """True when this flow completes a drain the receiver asked for."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DeliveryReceived(Event):
    """A complete message arrived (all its transfer frames).

    ``delivery.payload`` holds the bytes; ``delivery.remote_settled`` is True for a
    pre-settled delivery; ``delivery.resumed`` marks a resumed delivery (§2.6.13).
    """

    link: Receiver
    """The receiver."""
    delivery: Delivery
    """The delivery: settle it (``accept()``, ...) unless the sender pre-settled it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DeliveryAborted(Event):
    """A delivery was aborted (§2.6.14): it is settled and its data is gone.

    On a receiver: the sender aborted it part-way; what arrived was discarded.
    On a sender: resuming the link (§2.6.13) found it could not be resumed.
    """

    link: Link
    """The link."""
    delivery: Delivery
    """The delivery (``delivery.aborted`` is True)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DeliveryUpdated(Event):
    """The peer changed a delivery's state and/or settled it."""

    link: Link
    """The link the delivery belongs to."""
    delivery: Delivery
    """The delivery; ``remote_state``/``remote_settled`` hold the peer's view."""
    state: Any
    """The peer's delivery state (Accepted(), Rejected(...), Received(...), ...) or None."""
    settled: bool
