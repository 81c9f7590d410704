"""Events the 0-9-1 engine reports (frozen, keyword-only dataclasses).

``Connection.receive_data`` returns them; ``Connection.poll_events`` returns the
ones that ``tick`` or the application's own calls raised.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import Method, Properties

__all__ = [
    "ChannelClosed",
    "ChannelFlowChanged",
    "ChannelOpened",
    "ConnectionBlocked",
    "ConnectionClosed",
    "ConnectionFailed",
    "ConnectionLost",
    "ConnectionOpened",
    "ConnectionTuned",
    "ConnectionUnblocked",
    "ContentReceived",
    "Event",
    "LoginRequested",
    "MethodReceived",
    "SecretUpdateRequested",
    "SecretUpdated",
    "SecureChallenge",
    "SecureResponse",
    "VirtualHostRequested",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """Base class of every engine event."""


def reason_of(close: Any) -> dict[str, Any]:
    """The reply code, text, class and method id of a close method or an ``AMQPError``,
    as keyword arguments for the closing events."""
    return {
        "reply_code": close.reply_code,
        "reply_text": close.reply_text[:255],
        "class_id": close.class_id,
        "method_id": close.method_id,
    }


# -- connection ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class LoginRequested(Event):
    """Server: the client's ``start-ok`` arrived. Answer with ``accept_login()``,
    ``challenge(data)`` (``connection.secure``) or ``reject_login()``."""

    mechanism: str
    """The SASL mechanism the client chose (one we offered): PLAIN, AMQPLAIN, EXTERNAL…"""
    response: bytes
    """The mechanism's response, as sent."""
    username: str | None
    """The user name parsed from a PLAIN or AMQPLAIN response (None: none, or malformed)."""
    password: str | None
    """The password parsed from a PLAIN or AMQPLAIN response."""
    client_properties: dict[str, Any]
    """The client's properties (``product``, ``version``, ``capabilities``…)."""
    locale: str


@dataclass(frozen=True, kw_only=True, slots=True)
class SecureResponse(Event):
    """Server: the client's ``secure-ok`` answered our challenge; accept, challenge or reject."""

    response: bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class SecureChallenge(Event):
    """Client: the server sent ``connection.secure``; answer with ``secure_ok(response)``."""

    challenge: bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectionTuned(Event):
    """Both roles: the limits are negotiated and enforced from now on."""

    channel_max: int
    """The highest channel number (0 in the protocol means 65535)."""
    frame_max: int
    """The largest frame either side may send, in bytes."""
    heartbeat: int
    """The heartbeat interval in seconds (0: none)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class VirtualHostRequested(Event):
    """Server: the client's ``connection.open``. Answer ``accept_open()`` or ``refuse_open(...)``."""

    virtual_host: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectionOpened(Event):
    """Both roles: the connection is open; channels may be used."""

    virtual_host: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectionClosed(Event):
    """The connection closed by the handshake: the peer's ``close`` (answered with
    ``close-ok``), or the ``close-ok`` to ours. Flush ``data_to_send()``, then close the socket."""

    reply_code: int
    reply_text: str
    class_id: int
    method_id: int
    by_peer: bool
    """True when the peer sent the close."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectionFailed(Event):
    """The engine closed the connection because the peer broke the protocol (or
    the application's answer refused it): our ``connection.close`` carries these."""

    reply_code: int
    reply_text: str
    class_id: int
    method_id: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectionLost(Event):
    """The connection is dead without a handshake (heartbeats missed, handshake too
    slow, unsupported protocol header): close the socket after flushing ``data_to_send()``."""

    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectionBlocked(Event):
    """Client: the server blocked publishing (``connection.blocked``)."""

    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectionUnblocked(Event):
    """Client: the server lifted the block."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SecretUpdateRequested(Event):
    """Server: ``connection.update-secret``; answer ``update_secret_ok()`` or close the connection."""

    new_secret: bytes
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class SecretUpdated(Event):
    """Client: the server accepted the new secret (``update-secret-ok``)."""


# -- channels -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ChannelOpened(Event):
    """A channel is open (server: the client opened it and the engine answered open-ok)."""

    channel: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ChannelClosed(Event):
    """A channel is closed: the peer's ``channel.close`` (answered) or the ``close-ok`` to ours."""

    channel: int
    reply_code: int
    reply_text: str
    class_id: int
    method_id: int
    by_peer: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class ChannelFlowChanged(Event):
    """The peer asked us to stop (``active=False``) or resume sending content on a channel.

    The engine has answered ``flow-ok``.
    """

    channel: int
    active: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class MethodReceived(Event):
    """A method without content on an open channel, for the application to carry out
    (``queue.declare``, ``basic.consume``, ``basic.ack``, ``confirm.select``…)."""

    channel: int
    method: Method

    # A message's events (a publish, a deliver, an ack) have their __init__ written out: the
    # one dataclasses makes (by exec) stays interpreted in the compiled build, where mypyc
    # turns each object.__setattr__ into a native field store; the pure build runs the same
    # bytecodes as the generated one. Same fields, same order, keyword-only.
    def __init__(self, *, channel: int, method: Method) -> None:
        object.__setattr__(self, "channel", channel)
        object.__setattr__(self, "method", method)


@dataclass(frozen=True, kw_only=True, slots=True)
class ContentReceived(Event):
    """A content-bearing method (``basic.publish``, ``deliver``, ``get-ok``, ``return``)
    with its properties and whole body, assembled from its frames."""

    channel: int
    method: Method
    properties: Properties
    raw_properties: bytes
    """The property flags and list as received: pass them on unchanged with ``send_content``."""
    body: bytes

    def __init__(  # (written out: see MethodReceived's)
        self,
        *,
        channel: int,
        method: Method,
        properties: Properties,
        raw_properties: bytes,
        body: bytes,
    ) -> None:
        object.__setattr__(self, "channel", channel)
        object.__setattr__(self, "method", method)
        object.__setattr__(self, "properties", properties)
        object.__setattr__(self, "raw_properties", raw_properties)
        object.__setattr__(self, "body", body)
