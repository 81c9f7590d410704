"""Link state machine (Part 2 §2.6.3-2.6.6): attach, detach, close."""

from __future__ import annotations

import enum


class LinkState(enum.Enum):
    """Link endpoint states."""

    # members are singletons compared by identity: hash them by identity too, in C
    # (Enum.__hash__ is a Python call, and states are looked up in sets per frame)
    __hash__ = object.__hash__

    DETACHED = "DETACHED"
    ATTACH_SENT = "ATTACH_SENT"
    ATTACH_RCVD = "ATTACH_RCVD"
    ATTACHED = "ATTACHED"
    DETACH_SENT = "DETACH_SENT"
    DETACH_RCVD = "DETACH_RCVD"


class LinkInput(enum.Enum):
    """Attach and detach, sent or received."""

    # members are singletons compared by identity: hash them by identity too, in C
    # (Enum.__hash__ is a Python call, and states are looked up in sets per frame)
    __hash__ = object.__hash__

    SEND_ATTACH = "send attach"
    RECV_ATTACH = "receive attach"
    SEND_DETACH = "send detach"
    RECV_DETACH = "receive detach"


S = LinkState
I = LinkInput  # noqa: E741

TRANSITIONS: dict[tuple[LinkState, LinkInput], LinkState] = {
    (S.DETACHED, I.SEND_ATTACH): S.ATTACH_SENT,
    (S.DETACHED, I.RECV_ATTACH): S.ATTACH_RCVD,
    (S.ATTACH_SENT, I.RECV_ATTACH): S.ATTACHED,
    (S.ATTACH_SENT, I.SEND_DETACH): S.DETACH_SENT,
    (S.ATTACH_RCVD, I.SEND_ATTACH): S.ATTACHED,
    # the peer attached and detached before we answered: we answer with attach, then detach
    (S.ATTACH_RCVD, I.RECV_DETACH): S.DETACH_RCVD,
    (S.ATTACHED, I.SEND_DETACH): S.DETACH_SENT,
    (S.ATTACHED, I.RECV_DETACH): S.DETACH_RCVD,
    (S.DETACH_SENT, I.RECV_DETACH): S.DETACHED,
    (S.DETACH_SENT, I.RECV_ATTACH): S.DETACH_SENT,  # the peer's attach crossed our detach
    (S.DETACH_RCVD, I.SEND_DETACH): S.DETACHED,
}

# States in which transfers, flows and dispositions for the link are processed.
ACCEPTS_FRAMES = frozenset({S.ATTACHED})


def next_state(state: LinkState, event: LinkInput) -> LinkState | None:
    """The state after ``event``, or None if the table does not allow it."""
    return TRANSITIONS.get((state, event))
