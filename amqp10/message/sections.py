"""Message sections (Part 3 §3.2): descriptor codes, names, the spec's order, order errors.

Shared by :class:`~amqp10.message.Message` (decoding whole messages) and
:class:`~amqp10.message.LazyMessage` (finding sections without decoding them), so both
apply the same order rules and report them in the same words.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from ..types import (
    AmqpSequence,
    AmqpValue,
    ApplicationProperties,
    Data,
    DecodeError,
    DeliveryAnnotations,
    Footer,
    Header,
    MessageAnnotations,
    Properties,
)

Buffer = bytes | bytearray | memoryview
"""What a message can be decoded from."""

BodyType = Literal["value", "data", "sequence"]
"""How the body travels: one amqp-value, data sections, or amqp-sequence sections."""
# Section descriptors (ulong codes, Part 3 §3.2) and their position in a message.
HEADER: Final = 0x70
DELIVERY_ANNOTATIONS: Final = 0x71
MESSAGE_ANNOTATIONS: Final = 0x72
PROPERTIES: Final = 0x73
APPLICATION_PROPERTIES: Final = 0x74
DATA: Final = 0x75
AMQP_SEQUENCE: Final = 0x76
AMQP_VALUE: Final = 0x77
FOOTER: Final = 0x78

SECTION_NAMES: Final = {
    HEADER: "header",
    DELIVERY_ANNOTATIONS: "delivery-annotations",
    MESSAGE_ANNOTATIONS: "message-annotations",
    PROPERTIES: "properties",
    APPLICATION_PROPERTIES: "application-properties",
    DATA: "data",
    AMQP_SEQUENCE: "amqp-sequence",
    AMQP_VALUE: "amqp-value",
    FOOTER: "footer",
}
# The rank of each section in the spec's order; the three body kinds share one.
RANK: Final = {
    HEADER: 0,
    DELIVERY_ANNOTATIONS: 1,
    MESSAGE_ANNOTATIONS: 2,
    PROPERTIES: 3,
    APPLICATION_PROPERTIES: 4,
    DATA: 5,
    AMQP_SEQUENCE: 5,
    AMQP_VALUE: 5,
    FOOTER: 6,
}
BODY_RANK: Final = 5
RANK_NAMES: Final = (
    "header",
    "delivery-annotations",
    "message-annotations",
    "properties",
    "application-properties",
    "body",
    "footer",
)
COMPOSITE_SECTIONS: Final = frozenset({HEADER, PROPERTIES})  # decoded with descriptor
SECTION_BY_NAME: Final = {
    "amqp:header:list": HEADER,
    "amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
    "amqp:properties:list": PROPERTIES,
    "amqp:application-properties:map": APPLICATION_PROPERTIES,
    "amqp:data:binary": DATA,
    "amqp:amqp-sequence:list": AMQP_SEQUENCE,
    "amqp:amqp-value:*": AMQP_VALUE,
    "amqp:footer:map": FOOTER,
}
KIND_BY_CODE: Final[dict[int, BodyType]] = {
    DATA: "data",
    AMQP_SEQUENCE: "sequence",
    AMQP_VALUE: "value",
}

CODE_OF_SECTION: Final[dict[type, int]] = {
    Header: HEADER,
    DeliveryAnnotations: DELIVERY_ANNOTATIONS,
    MessageAnnotations: MESSAGE_ANNOTATIONS,
    Properties: PROPERTIES,
    ApplicationProperties: APPLICATION_PROPERTIES,
    Data: DATA,
    AmqpSequence: AMQP_SEQUENCE,
    AmqpValue: AMQP_VALUE,
    Footer: FOOTER,
}


def kind_error(section: str, expected: str, value: Any) -> DecodeError:
    return DecodeError(f"{section}: expected {expected}, got {type(value).__name__}")


def order_error(name: str, rank: int, body_type: str) -> DecodeError:
    if rank == BODY_RANK and name in ("data", "amqp-sequence", "amqp-value"):
        prev = {"value": "amqp-value", "data": "data", "sequence": "amqp-sequence"}[body_type]
        if name == prev:
            return DecodeError(f"message has more than one {name} section")
        return DecodeError(f"message body mixes {prev} and {name} sections")
    if name == RANK_NAMES[rank]:
        return DecodeError(f"message has more than one {name} section")
    return DecodeError(f"{name} section out of order (after a later section)")
