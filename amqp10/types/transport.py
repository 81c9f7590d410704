"""Part 2 composite types: the performatives and ``error`` (transport.xml)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .composite import Composite, Field
from .definitions import Role
from .primitives import symbol

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
    condition: symbol
    description: str | None
    info: dict[Any, Any] | None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            condition: str,
            description: str | None = None,
            info: dict[Any, Any] | None = None,
        ) -> None: ...


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
    container_id: str
    hostname: str | None
    max_frame_size: int
    channel_max: int
    idle_time_out: int | None
    outgoing_locales: list[symbol] | None
    incoming_locales: list[symbol] | None
    offered_capabilities: list[symbol] | None
    desired_capabilities: list[symbol] | None
    properties: dict[Any, Any] | None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            container_id: str,
            hostname: str | None = None,
            max_frame_size: int | None = None,
            channel_max: int | None = None,
            idle_time_out: int | None = None,
            outgoing_locales: str | Sequence[str] | None = None,
            incoming_locales: str | Sequence[str] | None = None,
            offered_capabilities: str | Sequence[str] | None = None,
            desired_capabilities: str | Sequence[str] | None = None,
            properties: dict[Any, Any] | None = None,
        ) -> None: ...


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
    remote_channel: int | None
    next_outgoing_id: int
    incoming_window: int
    outgoing_window: int
    handle_max: int
    offered_capabilities: list[symbol] | None
    desired_capabilities: list[symbol] | None
    properties: dict[Any, Any] | None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            remote_channel: int | None = None,
            next_outgoing_id: int,
            incoming_window: int,
            outgoing_window: int,
            handle_max: int | None = None,
            offered_capabilities: str | Sequence[str] | None = None,
            desired_capabilities: str | Sequence[str] | None = None,
            properties: dict[Any, Any] | None = None,
        ) -> None: ...


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
    name: str
    handle: int
    role: bool
    snd_settle_mode: int
    rcv_settle_mode: int
    source: Any
    target: Any
    unsettled: dict[Any, Any] | None
    incomplete_unsettled: bool
    initial_delivery_count: int | None
    max_message_size: int | None
    offered_capabilities: list[symbol] | None
    desired_capabilities: list[symbol] | None
    properties: dict[Any, Any] | None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            name: str,
            handle: int,
            role: bool | Role,
            snd_settle_mode: int | None = None,
            rcv_settle_mode: int | None = None,
            source: Any = None,
            target: Any = None,
            unsettled: dict[Any, Any] | None = None,
            incomplete_unsettled: bool | None = None,
            initial_delivery_count: int | None = None,
            max_message_size: int | None = None,
            offered_capabilities: str | Sequence[str] | None = None,
            desired_capabilities: str | Sequence[str] | None = None,
            properties: dict[Any, Any] | None = None,
        ) -> None: ...


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
    next_incoming_id: int | None
    incoming_window: int
    next_outgoing_id: int
    outgoing_window: int
    handle: int | None
    delivery_count: int | None
    link_credit: int | None
    available: int | None
    drain: bool
    echo: bool
    properties: dict[Any, Any] | None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            next_incoming_id: int | None = None,
            incoming_window: int,
            next_outgoing_id: int,
            outgoing_window: int,
            handle: int | None = None,
            delivery_count: int | None = None,
            link_credit: int | None = None,
            available: int | None = None,
            drain: bool | None = None,
            echo: bool | None = None,
            properties: dict[Any, Any] | None = None,
        ) -> None: ...


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
    handle: int
    delivery_id: int | None
    delivery_tag: bytes | None
    message_format: int | None
    settled: bool | None
    more: bool
    rcv_settle_mode: int | None
    state: Any
    resume: bool
    aborted: bool
    batchable: bool

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            handle: int,
            delivery_id: int | None = None,
            delivery_tag: bytes | None = None,
            message_format: int | None = None,
            settled: bool | None = None,
            more: bool | None = None,
            rcv_settle_mode: int | None = None,
            state: Any = None,
            resume: bool | None = None,
            aborted: bool | None = None,
            batchable: bool | None = None,
        ) -> None: ...


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
    role: bool
    first: int
    last: int | None
    settled: bool
    state: Any
    batchable: bool

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            role: bool | Role,
            first: int,
            last: int | None = None,
            settled: bool | None = None,
            state: Any = None,
            batchable: bool | None = None,
        ) -> None: ...


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
    handle: int
    closed: bool
    error: Error | None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            handle: int,
            closed: bool | None = None,
            error: Error | None = None,
        ) -> None: ...


class End(Composite):
    """``end``: end the session."""

    AMQP_NAME = "end"
    DESCRIPTOR_NAME = "amqp:end:list"
    DESCRIPTOR_CODE = 0x17
    PROVIDES = "frame"
    FIELDS = (Field("error", "error"),)
    __slots__ = ("error",)
    error: Error | None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            error: Error | None = None,
        ) -> None: ...


class Close(Composite):
    """``close``: signal a connection close."""

    AMQP_NAME = "close"
    DESCRIPTOR_NAME = "amqp:close:list"
    DESCRIPTOR_CODE = 0x18
    PROVIDES = "frame"
    FIELDS = (Field("error", "error"),)
    __slots__ = ("error",)
    error: Error | None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            error: Error | None = None,
        ) -> None: ...


PERFORMATIVES: tuple[type[Composite], ...] = (
    Open, Begin, Attach, Flow, Transfer, Disposition, Detach, End, Close,
)
