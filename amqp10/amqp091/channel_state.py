"""Channel state machines: the channel's life (``channel`` class) and content assembly.

A channel the peer opens goes CLOSED → OPEN_RCVD → OPEN (the engine answers
open-ok at once); one we open CLOSED → OPENING → OPEN. Our close makes it
CLOSING (everything but close and close-ok from the peer is then discarded,
§4.2.6); the peer's makes it CLOSE_RCVD until our close-ok. A pair missing from
``TRANSITIONS`` is ``COMMAND_INVALID`` for a received method, an
``IllegalStateError`` for the application.

Content (§4.2.6.2): a content-bearing method must be followed by exactly one
content header and then body frames until the body size is reached, with
nothing else on that channel in between; ``CONTENT_TRANSITIONS`` says so, and a
missing pair is ``UNEXPECTED_FRAME``.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = [
    "CONTENT_TRANSITIONS",
    "DISCARDS",
    "TRANSITIONS",
    "ChannelInput",
    "ChannelState",
    "ContentInput",
    "ContentState",
]


class ChannelState(enum.Enum):
    """Where a channel stands."""

    __hash__ = object.__hash__

    CLOSED = "CLOSED"
    OPENING = "OPENING"
    OPEN_RCVD = "OPEN_RCVD"
    OPEN = "OPEN"
    CLOSING = "CLOSING"
    CLOSE_RCVD = "CLOSE_RCVD"


class ChannelInput(enum.Enum):
    """What moves a channel."""

    __hash__ = object.__hash__

    SEND_OPEN = "send open"
    RECV_OPEN = "receive open"
    SEND_OPEN_OK = "send open-ok"
    RECV_OPEN_OK = "receive open-ok"
    SEND_METHOD = "send method"
    RECV_METHOD = "receive method"
    SEND_CLOSE = "send close"
    RECV_CLOSE = "receive close"
    SEND_CLOSE_OK = "send close-ok"
    RECV_CLOSE_OK = "receive close-ok"


S = ChannelState
I = ChannelInput  # noqa: E741

TRANSITIONS: dict[tuple[ChannelState, ChannelInput], ChannelState] = {
    (S.CLOSED, I.RECV_OPEN): S.OPEN_RCVD,
    (S.OPEN_RCVD, I.SEND_OPEN_OK): S.OPEN,
    (S.CLOSED, I.SEND_OPEN): S.OPENING,
    (S.OPENING, I.RECV_OPEN_OK): S.OPEN,
    (S.OPEN, I.SEND_METHOD): S.OPEN,
    (S.OPEN, I.RECV_METHOD): S.OPEN,
    (S.OPEN, I.SEND_CLOSE): S.CLOSING,
    (S.OPENING, I.SEND_CLOSE): S.CLOSING,
    (S.OPEN, I.RECV_CLOSE): S.CLOSE_RCVD,
    (S.OPENING, I.RECV_CLOSE): S.CLOSE_RCVD,
    (S.CLOSE_RCVD, I.SEND_CLOSE_OK): S.CLOSED,
    # after our close, the peer's methods are discarded; a crossing close is answered
    (S.CLOSING, I.RECV_METHOD): S.CLOSING,
    (S.CLOSING, I.RECV_OPEN_OK): S.CLOSING,
    (S.CLOSING, I.RECV_CLOSE): S.CLOSING,
    (S.CLOSING, I.SEND_CLOSE_OK): S.CLOSING,
    (S.CLOSING, I.RECV_CLOSE_OK): S.CLOSED,
}

DISCARDS: Final = frozenset({S.CLOSING})
"""States in which the peer's methods and content are dropped unread."""


class ContentState(enum.Enum):
    """Content assembly on one channel."""

    __hash__ = object.__hash__

    IDLE = "IDLE"
    AWAIT_HEADER = "AWAIT_HEADER"
    AWAIT_BODY = "AWAIT_BODY"


class ContentInput(enum.Enum):
    """The frames that drive content assembly."""

    __hash__ = object.__hash__

    METHOD = "method"
    CONTENT_METHOD = "content method"
    HEADER = "header"
    BODY = "body"
    COMPLETE = "body complete"


CONTENT_TRANSITIONS: dict[tuple[ContentState, ContentInput], ContentState] = {
    (ContentState.IDLE, ContentInput.METHOD): ContentState.IDLE,
    (ContentState.IDLE, ContentInput.CONTENT_METHOD): ContentState.AWAIT_HEADER,
    (ContentState.AWAIT_HEADER, ContentInput.HEADER): ContentState.AWAIT_BODY,
    (ContentState.AWAIT_BODY, ContentInput.BODY): ContentState.AWAIT_BODY,
    (ContentState.AWAIT_BODY, ContentInput.COMPLETE): ContentState.IDLE,
}
