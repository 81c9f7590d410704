"""Session state machine (Part 2 §2.5.5, figure 2.30)."""

from __future__ import annotations

import enum


class SessionState(enum.Enum):
    """The spec's session endpoint states."""

    # members are singletons compared by identity: hash them by identity too, in C
    # (Enum.__hash__ is a Python call, and states are looked up in sets per frame)
    __hash__ = object.__hash__

    UNMAPPED = "UNMAPPED"
    BEGIN_SENT = "BEGIN_SENT"
    BEGIN_RCVD = "BEGIN_RCVD"
    MAPPED = "MAPPED"
    END_SENT = "END_SENT"
    END_RCVD = "END_RCVD"
    DISCARDING = "DISCARDING"


class SessionInput(enum.Enum):
    """Begin and end, sent or received."""

    # members are singletons compared by identity: hash them by identity too, in C
    # (Enum.__hash__ is a Python call, and states are looked up in sets per frame)
    __hash__ = object.__hash__

    SEND_BEGIN = "send begin"
    RECV_BEGIN = "receive begin"
    SEND_END = "send end"
    SEND_END_ERROR = "send end with error"
    RECV_END = "receive end"


S = SessionState
I = SessionInput  # noqa: E741

TRANSITIONS: dict[tuple[SessionState, SessionInput], SessionState] = {
    (S.UNMAPPED, I.SEND_BEGIN): S.BEGIN_SENT,
    (S.UNMAPPED, I.RECV_BEGIN): S.BEGIN_RCVD,
    (S.BEGIN_SENT, I.RECV_BEGIN): S.MAPPED,
    (S.BEGIN_SENT, I.SEND_END): S.END_SENT,
    (S.BEGIN_SENT, I.SEND_END_ERROR): S.DISCARDING,
    (S.BEGIN_RCVD, I.SEND_BEGIN): S.MAPPED,
    # the peer began and ended before we answered: we answer with begin, then end
    (S.BEGIN_RCVD, I.RECV_END): S.END_RCVD,
    (S.MAPPED, I.SEND_END): S.END_SENT,
    (S.MAPPED, I.SEND_END_ERROR): S.DISCARDING,
    (S.MAPPED, I.RECV_END): S.END_RCVD,
    (S.END_SENT, I.RECV_END): S.UNMAPPED,
    (S.END_SENT, I.RECV_BEGIN): S.END_SENT,  # the peer's begin crossed our end
    (S.DISCARDING, I.RECV_END): S.UNMAPPED,
    (S.DISCARDING, I.RECV_BEGIN): S.DISCARDING,
    (S.END_RCVD, I.SEND_END): S.UNMAPPED,
    (S.END_RCVD, I.SEND_END_ERROR): S.UNMAPPED,
}

# States in which the peer's link and transfer frames are processed: once its begin
# has arrived (it may pipeline attaches before we answer the begin).
ACCEPTS_FRAMES = frozenset({S.MAPPED, S.BEGIN_RCVD, S.END_SENT})


def next_state(state: SessionState, event: SessionInput) -> SessionState | None:
    """The state after ``event``, or None if the table does not allow it."""
    return TRANSITIONS.get((state, event))
