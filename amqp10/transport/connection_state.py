"""Connection state machine (Part 2 §2.4.6, figure 2.23).

Everything that affects the connection endpoint's state is in this table; a
(state, input) pair missing from it is not allowed: for a peer's input that is
a protocol error, for the local application a misuse.
"""

from __future__ import annotations

import enum
from typing import Final


class ConnectionState(enum.Enum):
    """The spec's connection endpoint states."""

    # members are singletons compared by identity: hash them by identity too, in C
    # (Enum.__hash__ is a Python call, and states are looked up in sets per frame)
    __hash__ = object.__hash__

    START = "START"
    HDR_RCVD = "HDR_RCVD"
    HDR_SENT = "HDR_SENT"
    HDR_EXCH = "HDR_EXCH"
    OPEN_PIPE = "OPEN_PIPE"
    OC_PIPE = "OC_PIPE"
    OPEN_RCVD = "OPEN_RCVD"
    OPEN_SENT = "OPEN_SENT"
    CLOSE_PIPE = "CLOSE_PIPE"
    OPENED = "OPENED"
    CLOSE_RCVD = "CLOSE_RCVD"
    CLOSE_SENT = "CLOSE_SENT"
    DISCARDING = "DISCARDING"
    END = "END"


class ConnectionInput(enum.Enum):
    """What moves the connection: headers, open and close, sent or received."""

    # members are singletons compared by identity: hash them by identity too, in C
    # (Enum.__hash__ is a Python call, and states are looked up in sets per frame)
    __hash__ = object.__hash__

    SEND_HEADER = "send header"
    RECV_HEADER = "receive header"
    SEND_OPEN = "send open"
    RECV_OPEN = "receive open"
    SEND_CLOSE = "send close"
    SEND_CLOSE_ERROR = "send close with error"
    RECV_CLOSE = "receive close"


S = ConnectionState
I = ConnectionInput  # noqa: E741

TRANSITIONS: dict[tuple[ConnectionState, ConnectionInput], ConnectionState] = {
    (S.START, I.SEND_HEADER): S.HDR_SENT,
    (S.START, I.RECV_HEADER): S.HDR_RCVD,
    (S.HDR_RCVD, I.SEND_HEADER): S.HDR_EXCH,
    (S.HDR_SENT, I.RECV_HEADER): S.HDR_EXCH,
    (S.HDR_SENT, I.SEND_OPEN): S.OPEN_PIPE,
    (S.OPEN_PIPE, I.RECV_HEADER): S.OPEN_SENT,
    (S.OPEN_PIPE, I.SEND_CLOSE): S.OC_PIPE,
    (S.OPEN_PIPE, I.SEND_CLOSE_ERROR): S.OC_PIPE,
    (S.OC_PIPE, I.RECV_HEADER): S.CLOSE_PIPE,
    (S.HDR_EXCH, I.SEND_OPEN): S.OPEN_SENT,
    (S.HDR_EXCH, I.RECV_OPEN): S.OPEN_RCVD,
    (S.OPEN_SENT, I.RECV_OPEN): S.OPENED,
    (S.OPEN_SENT, I.SEND_CLOSE): S.CLOSE_PIPE,
    (S.OPEN_SENT, I.SEND_CLOSE_ERROR): S.CLOSE_PIPE,
    (S.CLOSE_PIPE, I.RECV_OPEN): S.CLOSE_SENT,
    (S.OPEN_RCVD, I.SEND_OPEN): S.OPENED,
    # the peer pipelined open and close (its OC_PIPE): we answer with open, then close
    (S.OPEN_RCVD, I.RECV_CLOSE): S.CLOSE_RCVD,
    (S.OPENED, I.RECV_CLOSE): S.CLOSE_RCVD,
    (S.OPENED, I.SEND_CLOSE): S.CLOSE_SENT,
    (S.OPENED, I.SEND_CLOSE_ERROR): S.DISCARDING,
    (S.CLOSE_RCVD, I.SEND_CLOSE): S.END,
    (S.CLOSE_RCVD, I.SEND_CLOSE_ERROR): S.END,
    (S.CLOSE_SENT, I.RECV_CLOSE): S.END,
    (S.DISCARDING, I.RECV_CLOSE): S.END,
    # a close that crosses ours in flight
    (S.CLOSE_PIPE, I.RECV_CLOSE): S.END,
}

# States in which frames other than open/close from the peer are processed: once the
# peer's open has arrived (it may pipeline begin/attach before we answer its open).
ACCEPTS_FRAMES = frozenset({S.OPENED, S.OPEN_RCVD, S.CLOSE_SENT})
# States in which the peer's frames are ignored until its close arrives.
DISCARDS_FRAMES = frozenset({S.DISCARDING, S.CLOSE_SENT, S.END})
# States in which we have sent our open and not yet our close: frames may be written
# (``Connection.can_write()``; a session's per-message checks test it in place).
WRITABLE: Final = frozenset({S.OPEN_PIPE, S.OPEN_SENT, S.OPENED, S.CLOSE_RCVD})


def next_state(state: ConnectionState, event: ConnectionInput) -> ConnectionState | None:
    """The state after ``event``, or None if the table does not allow it."""
    return TRANSITIONS.get((state, event))
