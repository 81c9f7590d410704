"""Events a SASL layer reports (frozen, keyword-only dataclasses).

They subclass the engine's `amqp10.transport.Event`, so a `SaslConnection` returns one
list of events for both layers.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..transport.events import Event
from ..types import SaslCode

__all__ = ["SaslCompleted", "SaslEvent", "SaslFailed", "SaslSkipped"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SaslEvent(Event):
    """Base class of the SASL layer's events."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SaslCompleted(SaslEvent):
    """Authentication succeeded: what follows on the stream is AMQP."""

    outcome: SaslCode
    """Always `SaslCode.OK`."""
    mechanism: str
    """The mechanism used, e.g. "SCRAM-SHA-256"."""
    identity: str | None
    """Who authenticated: on a server, the verified user name (the TLS identity for
    EXTERNAL, None for ANONYMOUS); on a client, the user name it logged in with with
    PLAIN or SCRAM, else None."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SaslSkipped(SaslEvent):
    """Server only: the peer sent the plain AMQP header and SASL is optional here
    (``require=False``), so the connection goes on unauthenticated."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SaslFailed(SaslEvent):
    """The exchange failed; no AMQP traffic follows and the stream should end."""

    outcome: SaslCode
    """The code of the sasl-outcome sent (server) or received (client). Where no outcome
    crossed the wire it is the local verdict: `SaslCode.AUTH` when the peer would not
    authenticate (a client that skipped SASL, a server signature that does not check out),
    `SaslCode.SYS` for a peer that broke the SASL protocol, `SaslCode.SYS_PERM` when the
    two sides cannot agree (no common mechanism, an unsupported header), and
    `SaslCode.SYS_TEMP` for a timeout or a stream that ended mid-exchange."""
    reason: str
    """Why, in one line, for logs and error messages. A server never sends it to the
    peer: it may name users or mechanisms the peer should not learn about."""
    mechanism: str | None = None
    """The mechanism that was being used, if one had been chosen."""
    username: str | None = None
    """Server only: the user name the client claimed when its credentials did not check
    out (PLAIN, SCRAM), for throttling by user; None otherwise."""
