"""One channel: its state and content assembly (the connection owns the channels).

A channel never calls its connection: ``receive_*`` return the events and the
methods to answer with, and raise ``ConnectionException`` or
``ChannelException`` for the connection to act on (h2's stream/connection split).
"""

from __future__ import annotations

import struct
from typing import Final

from .base import Method, Properties
from .channel_state import (
    CONTENT_TRANSITIONS,
    DISCARDS,
    TRANSITIONS,
    ChannelInput,
    ChannelState,
    ContentInput,
    ContentState,
)
from .errors import ChannelException, ConnectionException, IllegalStateError
from .events import (
    ChannelClosed,
    ChannelFlowChanged,
    ChannelOpened,
    ContentReceived,
    Event,
    MethodReceived,
    reason_of,
)
from .framing import CONTENT_HEADER
from .methods import (
    PROPERTIES,
    ChannelClose,
    ChannelCloseOk,
    ChannelFlow,
    ChannelFlowOk,
    ChannelOpen,
    ChannelOpenOk,
    ReplyCode,
)

__all__ = ["Channel"]

CI = ChannelInput
_unpack_content_header: Final = CONTENT_HEADER.unpack_from
_EMPTY_CLOSE = ChannelClose(reply_code=200, reply_text="OK")
# a content method, header and body frames on an open channel move as the tables say, per
# message: the hot path sets the states the tables give, without looking them up
_OPEN: Final = ChannelState.OPEN
_IDLE: Final = ContentState.IDLE
_AWAIT_HEADER: Final = ContentState.AWAIT_HEADER
_AWAIT_BODY: Final = ContentState.AWAIT_BODY
_CHANNEL_CLASS: Final = ChannelOpen.CLASS_ID  # open, flow, close and their answers: the long way
assert TRANSITIONS[_OPEN, CI.RECV_METHOD] is _OPEN
assert CONTENT_TRANSITIONS[_IDLE, ContentInput.CONTENT_METHOD] is _AWAIT_HEADER
assert CONTENT_TRANSITIONS[_AWAIT_HEADER, ContentInput.HEADER] is _AWAIT_BODY
assert CONTENT_TRANSITIONS[_AWAIT_BODY, ContentInput.BODY] is _AWAIT_BODY
assert CONTENT_TRANSITIONS[_AWAIT_BODY, ContentInput.COMPLETE] is _IDLE


class Channel:
    """A channel's state, its half-assembled content and, once we sent one, our close."""

    __slots__ = (
        "_body",
        "_body_size",
        "_method",
        "_properties",
        "_raw_properties",
        "_received",
        "close_sent",
        "content_state",
        "max_message_size",
        "number",
        "state",
    )

    def __init__(self, number: int, max_message_size: int) -> None:
        self.number = number
        self.state = ChannelState.CLOSED
        self.content_state = ContentState.IDLE
        self.max_message_size = max_message_size
        self.close_sent: ChannelClose | None = None
        """Our ``channel.close`` while CLOSING."""
        self._method: Method | None = None
        self._properties: Properties | None = None
        self._raw_properties = b""
        self._body_size = 0
        self._received = 0
        self._body: list[bytes] = []

    def __repr__(self) -> str:
        return f"<Channel {self.number} {self.state.name}>"

    def move(self, event: ChannelInput) -> None:
        """Apply ``event``; one the table does not allow is ``COMMAND_INVALID`` (received) or
        an ``IllegalStateError`` (sent)."""
        new = TRANSITIONS.get((self.state, event))
        if new is None:
            if event.name.startswith("RECV"):
                raise ConnectionException(
                    ReplyCode.COMMAND_INVALID,
                    f"COMMAND_INVALID - {event.value} not allowed on channel {self.number} "
                    f"in state {self.state.name}",
                )
            raise IllegalStateError(
                f"cannot {event.value} on channel {self.number} in state {self.state.name}"
            )
        self.state = new

    # -- what we send ---------------------------------------------------------------------

    def send_close(self, close: ChannelClose) -> None:
        """We close the channel: forget any half-assembled content and discard the peer's input."""
        self.move(CI.SEND_CLOSE)
        self.close_sent = close
        self._reset_content()

    # -- what we receive ------------------------------------------------------------------

    def receive_method(self, method: Method) -> tuple[list[Event], list[Method]]:
        """The events a method on this channel raises and the methods to answer with."""
        if self.state is _OPEN and self.content_state is _IDLE:
            # the usual methods: RECV_METHOD, and for a content method (a publish)
            # CONTENT_METHOD, inline; the channel class's own go the long way
            if method.CONTENT:
                self.content_state = _AWAIT_HEADER
                self._method = method
                return [], []
            if method.CLASS_ID != _CHANNEL_CLASS:
                return [MethodReceived(channel=self.number, method=method)], []
        if self.state in DISCARDS:
            return self._receive_while_closing(method)
        if self.content_state is not ContentState.IDLE:
            raise ConnectionException(
                ReplyCode.UNEXPECTED_FRAME,
                f"UNEXPECTED_FRAME - expected content {'header' if self.content_state is ContentState.AWAIT_HEADER else 'body'}"
                f" for class {self._method.CLASS_ID if self._method else 0}, got {method.NAME} instead",
                method.CLASS_ID,
                method.METHOD_ID,
            )
        tp = type(method)
        n = self.number
        if tp is ChannelClose:
            assert isinstance(method, ChannelClose)
            self.move(CI.RECV_CLOSE)
            self.move(CI.SEND_CLOSE_OK)
            event = ChannelClosed(
                channel=n,
                **reason_of(method),
                by_peer=True,
            )
            return [event], [ChannelCloseOk()]
        if tp is ChannelOpenOk:
            self.move(CI.RECV_OPEN_OK)
            return [ChannelOpened(channel=n)], []
        if tp is ChannelOpen:
            raise ConnectionException(
                ReplyCode.CHANNEL_ERROR,
                f"CHANNEL_ERROR - second 'channel.open' seen on channel {n}",
                20,
                10,
            )
        if tp is ChannelCloseOk:
            self.move(CI.RECV_CLOSE_OK)  # not CLOSING: not allowed
        self.move(CI.RECV_METHOD)
        if tp is ChannelFlow:
            assert isinstance(method, ChannelFlow)
            return [ChannelFlowChanged(channel=n, active=method.active)], [
                ChannelFlowOk(active=method.active)
            ]
        if method.CONTENT:
            self._content(ContentInput.CONTENT_METHOD)
            self._method = method
            return [], []
        return [MethodReceived(channel=n, method=method)], []

    def _receive_while_closing(self, method: Method) -> tuple[list[Event], list[Method]]:
        tp = type(method)
        if tp is ChannelClose:
            self.move(CI.RECV_CLOSE)
            self.move(CI.SEND_CLOSE_OK)
            return [], [ChannelCloseOk()]
        if tp is ChannelCloseOk:
            self.move(CI.RECV_CLOSE_OK)
            close = self.close_sent or _EMPTY_CLOSE
            event = ChannelClosed(
                channel=self.number,
                **reason_of(close),
                by_peer=False,
            )
            return [event], []
        return [], []

    def receive_header(self, payload: bytes) -> list[Event]:
        """A content header frame's payload."""
        if self.state in DISCARDS:
            return []
        if self.content_state is _AWAIT_HEADER:
            self.content_state = _AWAIT_BODY
        else:
            self._content(ContentInput.HEADER)  # (not expected now: raises)
        method = self._method
        assert method is not None
        try:
            class_id, _weight, body_size = _unpack_content_header(payload, 0)
        except struct.error:
            raise ConnectionException(
                ReplyCode.FRAME_ERROR, "FRAME_ERROR - content header too short"
            ) from None
        if class_id != method.CLASS_ID:
            raise ConnectionException(
                ReplyCode.UNEXPECTED_FRAME,
                f"UNEXPECTED_FRAME - expected content header for class {method.CLASS_ID}, "
                f"got one for class {class_id} instead",
            )
        props_cls = PROPERTIES[class_id]
        try:
            props, end = props_cls.decode(payload, CONTENT_HEADER.size)
        except (ValueError, IndexError, struct.error) as exc:
            raise ConnectionException(
                ReplyCode.SYNTAX_ERROR, f"SYNTAX_ERROR - malformed content header: {exc}"
            ) from None
        if end != len(payload):
            raise ConnectionException(
                ReplyCode.SYNTAX_ERROR, "SYNTAX_ERROR - bytes after the content header properties"
            )
        if body_size > self.max_message_size:
            self._reset_content()
            raise ChannelException(
                ReplyCode.PRECONDITION_FAILED,
                f"PRECONDITION_FAILED - message size {body_size} is larger than configured "
                f"max size {self.max_message_size}",
                method.CLASS_ID,
                method.METHOD_ID,
            )
        self._properties = props
        self._raw_properties = payload[CONTENT_HEADER.size :]
        self._body_size = body_size
        self._received = 0
        if body_size == 0:
            return [self._complete()]
        return []

    def receive_body(self, payload: bytes) -> list[Event]:
        """A content body frame's payload."""
        if self.state in DISCARDS:
            return []
        if self.content_state is not _AWAIT_BODY:
            self._content(ContentInput.BODY)  # (not expected now: raises)
        self._received += len(payload)
        if self._received > self._body_size:
            raise ConnectionException(
                ReplyCode.FRAME_ERROR,
                f"FRAME_ERROR - content body of {self._received} bytes exceeds the header's "
                f"body size {self._body_size}",
            )
        self._body.append(payload)
        if self._received == self._body_size:
            return [self._complete()]
        return []

    def _content(self, event: ContentInput) -> None:
        new = CONTENT_TRANSITIONS.get((self.content_state, event))
        if new is None:
            expected = {
                ContentState.IDLE: "a method",
                ContentState.AWAIT_HEADER: "a content header",
                ContentState.AWAIT_BODY: "a content body",
            }[self.content_state]
            raise ConnectionException(
                ReplyCode.UNEXPECTED_FRAME,
                f"UNEXPECTED_FRAME - expected {expected} on channel {self.number}, got a {event.value} frame",
            )
        self.content_state = new

    def _complete(self) -> ContentReceived:
        """The content is whole (AWAIT_BODY, the only state it is called in): its event."""
        method, props, parts = self._method, self._properties, self._body
        assert method is not None and props is not None
        event = ContentReceived(
            channel=self.number,
            method=method,
            properties=props,
            raw_properties=self._raw_properties,
            body=parts[0] if len(parts) == 1 else b"".join(parts),
        )
        # COMPLETE, and _reset_content, inline (per message)
        self.content_state = _IDLE
        self._method = None
        self._properties = None
        self._raw_properties = b""
        self._body = []
        self._body_size = self._received = 0
        return event

    def _reset_content(self) -> None:
        self.content_state = ContentState.IDLE
        self._method = None
        self._properties = None
        self._raw_properties = b""
        self._body = []
        self._body_size = self._received = 0
