"""Connection state machine (0-9-1 §2.2.4 and the ``connection`` class), both roles.

Everything that affects the connection's state is in ``TRANSITIONS``; a (state,
input) pair missing from it is not allowed: a received method is then
``COMMAND_INVALID``, a call by the application an ``IllegalStateError``. The
server's path is START → HEADER_RCVD → START_SENT → AUTHENTICATING (→ SECURE_SENT
→ AUTHENTICATING)* → TUNE_SENT → TUNED → OPEN_RCVD → OPEN; the client's START →
HEADER_SENT → START_RCVD → START_OK_SENT (→ SECURE_RCVD → START_OK_SENT)* →
TUNE_RCVD → TUNED → OPEN_SENT → OPEN. Either side may close from any of them.
"""

from __future__ import annotations

import enum

__all__ = ["ConnectionInput", "ConnectionState", "TRANSITIONS", "next_state"]


class ConnectionState(enum.Enum):
    """Where the connection handshake stands."""

    __hash__ = object.__hash__

    START = "START"
    HEADER_RCVD = "HEADER_RCVD"
    HEADER_SENT = "HEADER_SENT"
    START_SENT = "START_SENT"
    START_RCVD = "START_RCVD"
    START_OK_SENT = "START_OK_SENT"
    AUTHENTICATING = "AUTHENTICATING"
    SECURE_SENT = "SECURE_SENT"
    SECURE_RCVD = "SECURE_RCVD"
    TUNE_SENT = "TUNE_SENT"
    TUNE_RCVD = "TUNE_RCVD"
    TUNED = "TUNED"
    OPEN_RCVD = "OPEN_RCVD"
    OPEN_SENT = "OPEN_SENT"
    OPEN = "OPEN"
    CLOSE_SENT = "CLOSE_SENT"
    CLOSE_RCVD = "CLOSE_RCVD"
    CLOSED = "CLOSED"


class ConnectionInput(enum.Enum):
    """What moves the connection: the header and the connection-class methods, sent or received."""

    __hash__ = object.__hash__

    SEND_HEADER = "send header"
    RECV_HEADER = "receive header"
    SEND_START = "send start"
    RECV_START = "receive start"
    SEND_START_OK = "send start-ok"
    RECV_START_OK = "receive start-ok"
    SEND_SECURE = "send secure"
    RECV_SECURE = "receive secure"
    SEND_SECURE_OK = "send secure-ok"
    RECV_SECURE_OK = "receive secure-ok"
    SEND_TUNE = "send tune"
    RECV_TUNE = "receive tune"
    SEND_TUNE_OK = "send tune-ok"
    RECV_TUNE_OK = "receive tune-ok"
    SEND_OPEN = "send open"
    RECV_OPEN = "receive open"
    SEND_OPEN_OK = "send open-ok"
    RECV_OPEN_OK = "receive open-ok"
    SEND_CLOSE = "send close"
    RECV_CLOSE = "receive close"
    SEND_CLOSE_OK = "send close-ok"
    RECV_CLOSE_OK = "receive close-ok"
    LOST = "lost"
    """No handshake: heartbeats missed, handshake timed out, the stream ended."""


S = ConnectionState
I = ConnectionInput  # noqa: E741

TRANSITIONS: dict[tuple[ConnectionState, ConnectionInput], ConnectionState] = {
    # server
    (S.START, I.RECV_HEADER): S.HEADER_RCVD,
    (S.HEADER_RCVD, I.SEND_START): S.START_SENT,
    (S.START_SENT, I.RECV_START_OK): S.AUTHENTICATING,
    (S.AUTHENTICATING, I.SEND_SECURE): S.SECURE_SENT,
    (S.SECURE_SENT, I.RECV_SECURE_OK): S.AUTHENTICATING,
    (S.AUTHENTICATING, I.SEND_TUNE): S.TUNE_SENT,
    (S.TUNE_SENT, I.RECV_TUNE_OK): S.TUNED,
    (S.TUNED, I.RECV_OPEN): S.OPEN_RCVD,
    (S.OPEN_RCVD, I.SEND_OPEN_OK): S.OPEN,
    # client
    (S.START, I.SEND_HEADER): S.HEADER_SENT,
    (S.HEADER_SENT, I.RECV_START): S.START_RCVD,
    (S.START_RCVD, I.SEND_START_OK): S.START_OK_SENT,
    (S.START_OK_SENT, I.RECV_SECURE): S.SECURE_RCVD,
    (S.SECURE_RCVD, I.SEND_SECURE_OK): S.START_OK_SENT,
    (S.START_OK_SENT, I.RECV_TUNE): S.TUNE_RCVD,
    (S.TUNE_RCVD, I.SEND_TUNE_OK): S.TUNED,
    (S.TUNED, I.SEND_OPEN): S.OPEN_SENT,
    (S.OPEN_SENT, I.RECV_OPEN_OK): S.OPEN,
    # closing: a close crossing ours is answered, and ours still waits for its close-ok
    (S.CLOSE_SENT, I.RECV_CLOSE): S.CLOSE_SENT,
    (S.CLOSE_SENT, I.SEND_CLOSE_OK): S.CLOSE_SENT,
    (S.CLOSE_SENT, I.RECV_CLOSE_OK): S.CLOSED,
    (S.CLOSE_RCVD, I.SEND_CLOSE_OK): S.CLOSED,
}
# from every state between the header and the end: close either way, or lose the connection
for _state in S:
    if _state not in (S.CLOSE_SENT, S.CLOSE_RCVD, S.CLOSED):
        TRANSITIONS[_state, I.SEND_CLOSE] = S.CLOSE_SENT
        if _state is not S.START:
            TRANSITIONS[_state, I.RECV_CLOSE] = S.CLOSE_RCVD
    if _state is not S.CLOSED:
        TRANSITIONS[_state, I.LOST] = S.CLOSED
del _state

# which input each received connection-class method is
RECEIVED = {
    "connection.start": I.RECV_START,
    "connection.start-ok": I.RECV_START_OK,
    "connection.secure": I.RECV_SECURE,
    "connection.secure-ok": I.RECV_SECURE_OK,
    "connection.tune": I.RECV_TUNE,
    "connection.tune-ok": I.RECV_TUNE_OK,
    "connection.open": I.RECV_OPEN,
    "connection.open-ok": I.RECV_OPEN_OK,
    "connection.close": I.RECV_CLOSE,
    "connection.close-ok": I.RECV_CLOSE_OK,
}


def next_state(state: ConnectionState, event: ConnectionInput) -> ConnectionState | None:
    """The state after ``event``, or None if the table does not allow it."""
    return TRANSITIONS.get((state, event))
