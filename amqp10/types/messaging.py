"""Part 3 types: message sections, delivery states and outcomes, addressing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import definitions as _definitions  # noqa: F401  (restricted types first)
from .composite import Composite, DescribedType, Field
from .primitives import symbol

if TYPE_CHECKING:
    from .transport import Error

__all__ = [
    "Accepted",
    "AmqpSequence",
    "AmqpValue",
    "ApplicationProperties",
    "Data",
    "DeleteOnClose",
    "DeleteOnNoLinks",
    "DeleteOnNoLinksOrMessages",
    "DeleteOnNoMessages",
    "DeliveryAnnotations",
    "Footer",
    "Header",
    "MessageAnnotations",
    "Modified",
    "Properties",
    "Received",
    "Rejected",
    "Released",
    "Source",
    "Target",
]

# --- message format -----------------------------------------------------------------


class Header(Composite):
    """``header``: transport headers for a message."""

    AMQP_NAME = "header"
    DESCRIPTOR_NAME = "amqp:header:list"
    DESCRIPTOR_CODE = 0x70
    PROVIDES = "section"
    FIELDS = (
        Field("durable", "boolean"),
        Field("priority", "ubyte"),
        Field("ttl", "milliseconds"),
        Field("first-acquirer", "boolean"),
        Field("delivery-count", "uint"),
    )
    __slots__ = tuple(f.attr for f in FIELDS)
    durable: bool | None
    priority: int | None
    ttl: int | None
    first_acquirer: bool | None
    delivery_count: int | None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            durable: bool | None = None,
            priority: int | None = None,
            ttl: int | None = None,
            first_acquirer: bool | None = None,
            delivery_count: int | None = None,
        ) -> None: ...


class DeliveryAnnotations(DescribedType):
    """``delivery-annotations``: annotations for the next hop only."""

    __slots__ = ()
    AMQP_NAME = "delivery-annotations"
    DESCRIPTOR_NAME = "amqp:delivery-annotations:map"
    DESCRIPTOR_CODE = 0x71
    SOURCE = "annotations"
    PROVIDES = "section"


class MessageAnnotations(DescribedType):
    """``message-annotations``: annotations for the whole path."""

    __slots__ = ()
    AMQP_NAME = "message-annotations"
    DESCRIPTOR_NAME = "amqp:message-annotations:map"
    DESCRIPTOR_CODE = 0x72
    SOURCE = "annotations"
    PROVIDES = "section"


class Properties(Composite):
    """``properties``: immutable properties of the message."""

    AMQP_NAME = "properties"
    DESCRIPTOR_NAME = "amqp:properties:list"
    DESCRIPTOR_CODE = 0x73
    PROVIDES = "section"
    FIELDS = (
        Field("message-id", "*", requires="message-id"),
        Field("user-id", "binary"),
        Field("to", "*", requires="address"),
        Field("subject", "string"),
        Field("reply-to", "*", requires="address"),
        Field("correlation-id", "*", requires="message-id"),
        Field("content-type", "symbol"),
        Field("content-encoding", "symbol"),
        Field("absolute-expiry-time", "timestamp"),
        Field("creation-time", "timestamp"),
        Field("group-id", "string"),
        Field("group-sequence", "sequence-no"),
        Field("reply-to-group-id", "string"),
    )
    __slots__ = tuple(f.attr for f in FIELDS)
    message_id: Any
    user_id: bytes | None
    to: Any
    subject: str | None
    reply_to: Any
    correlation_id: Any
    content_type: symbol | None
    content_encoding: symbol | None
    absolute_expiry_time: int | None
    creation_time: int | None
    group_id: str | None
    group_sequence: int | None
    reply_to_group_id: str | None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            message_id: Any = None,
            user_id: bytes | None = None,
            to: Any = None,
            subject: str | None = None,
            reply_to: Any = None,
            correlation_id: Any = None,
            content_type: str | None = None,
            content_encoding: str | None = None,
            absolute_expiry_time: int | None = None,
            creation_time: int | None = None,
            group_id: str | None = None,
            group_sequence: int | None = None,
            reply_to_group_id: str | None = None,
        ) -> None: ...


class ApplicationProperties(DescribedType):
    """``application-properties``: string-keyed map of simple values."""

    __slots__ = ()
    AMQP_NAME = "application-properties"
    DESCRIPTOR_NAME = "amqp:application-properties:map"
    DESCRIPTOR_CODE = 0x74
    SOURCE = "map"
    PROVIDES = "section"


class Data(DescribedType):
    """``data``: an opaque binary body section."""

    __slots__ = ()
    AMQP_NAME = "data"
    DESCRIPTOR_NAME = "amqp:data:binary"
    DESCRIPTOR_CODE = 0x75
    SOURCE = "binary"
    PROVIDES = "section"


class AmqpSequence(DescribedType):
    """``amqp-sequence``: a list body section."""

    __slots__ = ()
    AMQP_NAME = "amqp-sequence"
    DESCRIPTOR_NAME = "amqp:amqp-sequence:list"
    DESCRIPTOR_CODE = 0x76
    SOURCE = "list"
    PROVIDES = "section"


class AmqpValue(DescribedType):
    """``amqp-value``: a single AMQP value as the body."""

    __slots__ = ()
    AMQP_NAME = "amqp-value"
    DESCRIPTOR_NAME = "amqp:amqp-value:*"
    DESCRIPTOR_CODE = 0x77
    SOURCE = "*"
    PROVIDES = "section"


class Footer(DescribedType):
    """``footer``: transport footers (e.g. message hashes)."""

    __slots__ = ()
    AMQP_NAME = "footer"
    DESCRIPTOR_NAME = "amqp:footer:map"
    DESCRIPTOR_CODE = 0x78
    SOURCE = "annotations"
    PROVIDES = "section"


# --- delivery state -------------------------------------------------------------------


class Received(Composite):
    """``received``: partial-transfer state (where to resume)."""

    AMQP_NAME = "received"
    DESCRIPTOR_NAME = "amqp:received:list"
    DESCRIPTOR_CODE = 0x23
    PROVIDES = "delivery-state"
    FIELDS = (
        Field("section-number", "uint", mandatory=True),
        Field("section-offset", "ulong", mandatory=True),
    )
    __slots__ = tuple(f.attr for f in FIELDS)
    section_number: int
    section_offset: int

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            section_number: int,
            section_offset: int,
        ) -> None: ...


class Accepted(Composite):
    """``accepted``: the terminal outcome of successful processing."""

    AMQP_NAME = "accepted"
    DESCRIPTOR_NAME = "amqp:accepted:list"
    DESCRIPTOR_CODE = 0x24
    PROVIDES = "delivery-state, outcome"
    FIELDS = ()
    __slots__ = ()


class Rejected(Composite):
    """``rejected``: the message is invalid and cannot be processed."""

    AMQP_NAME = "rejected"
    DESCRIPTOR_NAME = "amqp:rejected:list"
    DESCRIPTOR_CODE = 0x25
    PROVIDES = "delivery-state, outcome"
    FIELDS = (Field("error", "error"),)
    __slots__ = ("error",)
    error: Error | None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            error: Error | None = None,
        ) -> None: ...


class Released(Composite):
    """``released``: the message was not (and will not be) acted upon."""

    AMQP_NAME = "released"
    DESCRIPTOR_NAME = "amqp:released:list"
    DESCRIPTOR_CODE = 0x26
    PROVIDES = "delivery-state, outcome"
    FIELDS = ()
    __slots__ = ()


class Modified(Composite):
    """``modified``: released with changes to apply (delivery-failed, annotations)."""

    AMQP_NAME = "modified"
    DESCRIPTOR_NAME = "amqp:modified:list"
    DESCRIPTOR_CODE = 0x27
    PROVIDES = "delivery-state, outcome"
    FIELDS = (
        Field("delivery-failed", "boolean"),
        Field("undeliverable-here", "boolean"),
        Field("message-annotations", "fields"),
    )
    __slots__ = tuple(f.attr for f in FIELDS)
    delivery_failed: bool | None
    undeliverable_here: bool | None
    message_annotations: dict[Any, Any] | None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            delivery_failed: bool | None = None,
            undeliverable_here: bool | None = None,
            message_annotations: dict[Any, Any] | None = None,
        ) -> None: ...


# --- addressing --------------------------------------------------------------------------


class Source(Composite):
    """``source``: the source terminus of a link."""

    AMQP_NAME = "source"
    DESCRIPTOR_NAME = "amqp:source:list"
    DESCRIPTOR_CODE = 0x28
    PROVIDES = "source"
    FIELDS = (
        Field("address", "*", requires="address"),
        Field("durable", "terminus-durability", default=0),
        Field("expiry-policy", "terminus-expiry-policy", default=symbol("session-end")),
        Field("timeout", "seconds", default=0),
        Field("dynamic", "boolean", default=False),
        Field("dynamic-node-properties", "node-properties"),
        Field("distribution-mode", "symbol", requires="distribution-mode"),
        Field("filter", "filter-set"),
        Field("default-outcome", "*", requires="outcome"),
        Field("outcomes", "symbol", multiple=True),
        Field("capabilities", "symbol", multiple=True),
    )
    __slots__ = tuple(f.attr for f in FIELDS)
    address: Any
    durable: int
    expiry_policy: symbol
    timeout: int
    dynamic: bool
    dynamic_node_properties: dict[Any, Any] | None
    distribution_mode: symbol | None
    filter: dict[Any, Any] | None
    default_outcome: Any
    outcomes: list[symbol] | None
    capabilities: list[symbol] | None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            address: Any = None,
            durable: int | None = None,
            expiry_policy: str | None = None,
            timeout: int | None = None,
            dynamic: bool | None = None,
            dynamic_node_properties: dict[Any, Any] | None = None,
            distribution_mode: str | None = None,
            filter: dict[Any, Any] | None = None,
            default_outcome: Any = None,
            outcomes: str | Sequence[str] | None = None,
            capabilities: str | Sequence[str] | None = None,
        ) -> None: ...


class Target(Composite):
    """``target``: the target terminus of a link."""

    AMQP_NAME = "target"
    DESCRIPTOR_NAME = "amqp:target:list"
    DESCRIPTOR_CODE = 0x29
    PROVIDES = "target"
    FIELDS = (
        Field("address", "*", requires="address"),
        Field("durable", "terminus-durability", default=0),
        Field("expiry-policy", "terminus-expiry-policy", default=symbol("session-end")),
        Field("timeout", "seconds", default=0),
        Field("dynamic", "boolean", default=False),
        Field("dynamic-node-properties", "node-properties"),
        Field("capabilities", "symbol", multiple=True),
    )
    __slots__ = tuple(f.attr for f in FIELDS)
    address: Any
    durable: int
    expiry_policy: symbol
    timeout: int
    dynamic: bool
    dynamic_node_properties: dict[Any, Any] | None
    capabilities: list[symbol] | None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            address: Any = None,
            durable: int | None = None,
            expiry_policy: str | None = None,
            timeout: int | None = None,
            dynamic: bool | None = None,
            dynamic_node_properties: dict[Any, Any] | None = None,
            capabilities: str | Sequence[str] | None = None,
        ) -> None: ...


class DeleteOnClose(Composite):
    """``delete-on-close``: lifetime policy of a dynamic node."""

    AMQP_NAME = "delete-on-close"
    DESCRIPTOR_NAME = "amqp:delete-on-close:list"
    DESCRIPTOR_CODE = 0x2B
    PROVIDES = "lifetime-policy"
    FIELDS = ()
    __slots__ = ()


class DeleteOnNoLinks(Composite):
    """``delete-on-no-links``: lifetime policy of a dynamic node."""

    AMQP_NAME = "delete-on-no-links"
    DESCRIPTOR_NAME = "amqp:delete-on-no-links:list"
    DESCRIPTOR_CODE = 0x2C
    PROVIDES = "lifetime-policy"
    FIELDS = ()
    __slots__ = ()


class DeleteOnNoMessages(Composite):
    """``delete-on-no-messages``: lifetime policy of a dynamic node."""

    AMQP_NAME = "delete-on-no-messages"
    DESCRIPTOR_NAME = "amqp:delete-on-no-messages:list"
    DESCRIPTOR_CODE = 0x2D
    PROVIDES = "lifetime-policy"
    FIELDS = ()
    __slots__ = ()


class DeleteOnNoLinksOrMessages(Composite):
    """``delete-on-no-links-or-messages``: lifetime policy of a dynamic node."""

    AMQP_NAME = "delete-on-no-links-or-messages"
    DESCRIPTOR_NAME = "amqp:delete-on-no-links-or-messages:list"
    DESCRIPTOR_CODE = 0x2E
    PROVIDES = "lifetime-policy"
    FIELDS = ()
    __slots__ = ()
