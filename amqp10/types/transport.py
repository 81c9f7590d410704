"""Part 2 composite types: the performatives and ``error`` (transport.xml)."""

from __future__ import annotations

from typing import Any

from . import definitions as _definitions  # noqa: F401  (restricted types first)
from .composite import Composite, Field

__all__ = [
    "Attach",
    "Begin",
    "Close",
    "Detach",
    "Disposition",
    "End",
    "Error",
    "Flow",
    "Open",
    "PERFORMATIVES",
    "Transfer",
]

_U32 = 4294967295


class Error(Composite):
    """``error``: details of an error (condition, description, info)."""

    AMQP_NAME = "error"
    DESCRIPTOR_NAME = "amqp:error:list"
    DESCRIPTOR_CODE = 0x1D
    FIELDS = (
        Field("condition", "symbol", mandatory=True, requires="error-condition"),
        Field("description", "string"),
        Field("info", "fields"),
    )
    __slots__ = ("condition", "description", "info")
    condition: Any
    description: str | None
    info: dict[Any, Any] | None


class Open(Composite):
    """``open``: negotiate connection parameters."""

    AMQP_NAME = "open"
    DESCRIPTOR_NAME = "amqp:open:list"
    DESCRIPTOR_CODE = 0x10
    PROVIDES = "frame"
    FIELDS = (
        Field("container-id", "string", mandatory=True),
        Field("hostname", "string"),
        Field("max-frame-size", "uint", default=_U32),
        Field("channel-max", "ushort", default=65535),
        Field("idle-time-out", "milliseconds"),
        Field("outgoing-locales", "ietf-language-tag", multiple=True),
        Field("incoming-locales", "ietf-language-tag", multiple=True),
        Field("offered-capabilities", "symbol", multiple=True),
        Field("desired-capabilities", "symbol", multiple=True),
        Field("properties", "fields"),
    )
    __slots__ = tuple(f.attr for f in FIELDS)


class Begin(Composite):
    """``begin``: begin a session on a channel."""

    AMQP_NAME = "begin"
    DESCRIPTOR_NAME = "amqp:begin:list"
    DESCRIPTOR_CODE = 0x11
    PROVIDES = "frame"
    FIELDS = (
        Field("remote-channel", "ushort"),
        Field("next-outgoing-id", "transfer-number", mandatory=True),
        Field("incoming-window", "uint", mandatory=True),
        Field("outgoing-window", "uint", mandatory=True),
        Field("handle-max", "handle", default=_U32),
        Field("offered-capabilities", "symbol", multiple=True),
        Field("desired-capabilities", "symbol", multiple=True),
        Field("properties", "fields"),
    )
    __slots__ = tuple(f.attr for f in FIELDS)


class Attach(Composite):
    """``attach``: attach a link to a session."""

    AMQP_NAME = "attach"
    DESCRIPTOR_NAME = "amqp:attach:list"
    DESCRIPTOR_CODE = 0x12
    PROVIDES = "frame"
    FIELDS = (
        Field("name", "string", mandatory=True),
        Field("handle", "handle", mandatory=True),
        Field("role", "role", mandatory=True),
        Field("snd-settle-mode", "sender-settle-mode", default=2),
        Field("rcv-settle-mode", "receiver-settle-mode", default=0),
        Field("source", "*", requires="source"),
        Field("target", "*", requires="target"),
        Field("unsettled", "map"),
        Field("incomplete-unsettled", "boolean", default=False),
        Field("initial-delivery-count", "sequence-no"),
        Field("max-message-size", "ulong"),
        Field("offered-capabilities", "symbol", multiple=True),
        Field("desired-capabilities", "symbol", multiple=True),
        Field("properties", "fields"),
    )
    __slots__ = tuple(f.attr for f in FIELDS)


class Flow(Composite):
    """``flow``: update link and session flow-control state."""

    AMQP_NAME = "flow"
    DESCRIPTOR_NAME = "amqp:flow:list"
    DESCRIPTOR_CODE = 0x13
    PROVIDES = "frame"
    FIELDS = (
        Field("next-incoming-id", "transfer-number"),
        Field("incoming-window", "uint", mandatory=True),
        Field("next-outgoing-id", "transfer-number", mandatory=True),
        Field("outgoing-window", "uint", mandatory=True),
        Field("handle", "handle"),
        Field("delivery-count", "sequence-no"),
        Field("link-credit", "uint"),
        Field("available", "uint"),
        Field("drain", "boolean", default=False),
        Field("echo", "boolean", default=False),
        Field("properties", "fields"),
    )
    __slots__ = tuple(f.attr for f in FIELDS)


class Transfer(Composite):
    """``transfer``: transfer (a frame of) a message."""

    AMQP_NAME = "transfer"
    DESCRIPTOR_NAME = "amqp:transfer:list"
    DESCRIPTOR_CODE = 0x14
    PROVIDES = "frame"
    FIELDS = (
        Field("handle", "handle", mandatory=True),
        Field("delivery-id", "delivery-number"),
        Field("delivery-tag", "delivery-tag"),
        Field("message-format", "message-format"),
        Field("settled", "boolean"),
        Field("more", "boolean", default=False),
        Field("rcv-settle-mode", "receiver-settle-mode"),
        Field("state", "*", requires="delivery-state"),
        Field("resume", "boolean", default=False),
        Field("aborted", "boolean", default=False),
        Field("batchable", "boolean", default=False),
    )
    __slots__ = tuple(f.attr for f in FIELDS)


class Disposition(Composite):
    """``disposition``: inform the peer of delivery state changes."""

    AMQP_NAME = "disposition"
    DESCRIPTOR_NAME = "amqp:disposition:list"
    DESCRIPTOR_CODE = 0x15
    PROVIDES = "frame"
    FIELDS = (
        Field("role", "role", mandatory=True),
        Field("first", "delivery-number", mandatory=True),
        Field("last", "delivery-number"),
        Field("settled", "boolean", default=False),
        Field("state", "*", requires="delivery-state"),
        Field("batchable", "boolean", default=False),
    )
    __slots__ = tuple(f.attr for f in FIELDS)


class Detach(Composite):
    """``detach``: detach (and possibly close) a link."""

    AMQP_NAME = "detach"
    DESCRIPTOR_NAME = "amqp:detach:list"
    DESCRIPTOR_CODE = 0x16
    PROVIDES = "frame"
    FIELDS = (
        Field("handle", "handle", mandatory=True),
        Field("closed", "boolean", default=False),
        Field("error", "error"),
    )
    __slots__ = tuple(f.attr for f in FIELDS)


class End(Composite):
    """``end``: end the session."""

    AMQP_NAME = "end"
    DESCRIPTOR_NAME = "amqp:end:list"
    DESCRIPTOR_CODE = 0x17
    PROVIDES = "frame"
    FIELDS = (Field("error", "error"),)
    __slots__ = ("error",)


class Close(Composite):
    """``close``: signal a connection close."""

    AMQP_NAME = "close"
    DESCRIPTOR_NAME = "amqp:close:list"
    DESCRIPTOR_CODE = 0x18
    PROVIDES = "frame"
    FIELDS = (Field("error", "error"),)
    __slots__ = ("error",)


PERFORMATIVES: tuple[type[Composite], ...] = (
    Open, Begin, Attach, Flow, Transfer, Disposition, Detach, End, Close,
)
