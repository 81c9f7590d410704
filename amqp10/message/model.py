"""The AMQP 1.0 message (Part 3 §3.2): sections, body kinds, and lazy decoding.

A message on the wire is a run of described sections in a fixed order::

    header? delivery-annotations? message-annotations? properties?
    application-properties? body footer?

where the body is one or more ``data`` sections, one or more ``amqp-sequence``
sections, or a single ``amqp-value`` section. :class:`Message` holds every
section as plain Python values and encodes and decodes the whole message.
:class:`LazyMessage` is for intermediaries (brokers): it keeps the received bytes,
finds where each section starts and ends without decoding any of them, decodes a
section only when asked, and re-emits the message with a new header or new
annotations while copying every other section byte for byte.
"""

from __future__ import annotations

import datetime as _dt
import struct
import uuid as _uuid
from collections.abc import Mapping
from typing import Any, Final, Literal

from ..types import (
    DEFAULT_LIMITS,
    AmqpSequence,
    AmqpValue,
    ApplicationProperties,
    Data,
    DecodeError,
    DeliveryAnnotations,
    EncodeError,
    Footer,
    Header,
    Limits,
    MessageAnnotations,
    Properties,
    decode_at,
    encode_into,
    symbol,
    timestamp,
    ubyte,
    ulong,
)

__all__ = ["BodyType", "LazyMessage", "Message"]

BodyType = Literal["value", "data", "sequence"]
"""How the body travels: one amqp-value, data sections, or amqp-sequence sections."""

_BODY_TYPES: Final = frozenset({"value", "data", "sequence"})

# Section descriptors (ulong codes, Part 3 §3.2) and their position in a message.
_HEADER: Final = 0x70
_DELIVERY_ANNOTATIONS: Final = 0x71
_MESSAGE_ANNOTATIONS: Final = 0x72
_PROPERTIES: Final = 0x73
_APPLICATION_PROPERTIES: Final = 0x74
_DATA: Final = 0x75
_AMQP_SEQUENCE: Final = 0x76
_AMQP_VALUE: Final = 0x77
_FOOTER: Final = 0x78

_SECTION_NAMES: Final = {
    _HEADER: "header",
    _DELIVERY_ANNOTATIONS: "delivery-annotations",
    _MESSAGE_ANNOTATIONS: "message-annotations",
    _PROPERTIES: "properties",
    _APPLICATION_PROPERTIES: "application-properties",
    _DATA: "data",
    _AMQP_SEQUENCE: "amqp-sequence",
    _AMQP_VALUE: "amqp-value",
    _FOOTER: "footer",
}
# The rank of each section in the spec's order; the three body kinds share one.
_RANK: Final = {
    _HEADER: 0,
    _DELIVERY_ANNOTATIONS: 1,
    _MESSAGE_ANNOTATIONS: 2,
    _PROPERTIES: 3,
    _APPLICATION_PROPERTIES: 4,
    _DATA: 5,
    _AMQP_SEQUENCE: 5,
    _AMQP_VALUE: 5,
    _FOOTER: 6,
}
_BODY_RANK: Final = 5
_RANK_NAMES: Final = (
    "header",
    "delivery-annotations",
    "message-annotations",
    "properties",
    "application-properties",
    "body",
    "footer",
)
_COMPOSITE_SECTIONS: Final = frozenset({_HEADER, _PROPERTIES})  # decoded with descriptor
_SECTION_BY_NAME: Final = {
    "amqp:header:list": _HEADER,
    "amqp:delivery-annotations:map": _DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": _MESSAGE_ANNOTATIONS,
    "amqp:properties:list": _PROPERTIES,
    "amqp:application-properties:map": _APPLICATION_PROPERTIES,
    "amqp:data:binary": _DATA,
    "amqp:amqp-sequence:list": _AMQP_SEQUENCE,
    "amqp:amqp-value:*": _AMQP_VALUE,
    "amqp:footer:map": _FOOTER,
}
_KIND_BY_CODE: Final[dict[int, BodyType]] = {
    _DATA: "data",
    _AMQP_SEQUENCE: "sequence",
    _AMQP_VALUE: "value",
}

# Pre-encoded descriptors (0x00, smallulong, code) written in front of each section.
_D_DELIVERY_ANNOTATIONS: Final = b"\x00\x53\x71"
_D_MESSAGE_ANNOTATIONS: Final = b"\x00\x53\x72"
_D_APPLICATION_PROPERTIES: Final = b"\x00\x53\x74"
_D_DATA: Final = b"\x00\x53\x75"
_D_AMQP_SEQUENCE: Final = b"\x00\x53\x76"
_D_AMQP_VALUE: Final = b"\x00\x53\x77"
_D_FOOTER: Final = b"\x00\x53\x78"

_BINARY_TYPES: Final = (bytes, bytearray, memoryview)
_HEADER_FIELDS: Final = frozenset(f.attr for f in Header.FIELDS)

Buffer = bytes | bytearray | memoryview


def _message_id(value: Any) -> Any:
    """A message-id as it must travel: a plain ``int`` becomes ulong (as in Proton)."""
    if value is None or isinstance(value, (str, bytes, _uuid.UUID, ulong)):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return ulong(value)
    raise TypeError(
        f"a message-id is a str, bytes, uuid.UUID or unsigned int, not {type(value).__name__}"
    )


def _secs_to_ms(value: float | None) -> int | None:
    return None if value is None else round(value * 1000)


def _ms_to_secs(value: int | None) -> float | None:
    return None if value is None else float(value) / 1000.0


def _timestamp_secs(value: float | _dt.datetime | None) -> timestamp | None:
    if value is None:
        return None
    ts: timestamp = (
        timestamp.from_datetime(value)
        if isinstance(value, _dt.datetime)
        else timestamp(round(value * 1000))
    )
    return ts


class Message:
    """An AMQP message: every section of Part 3 §3.2 as plain Python values.

    Sections (``None`` when absent): ``header`` (:class:`Header`),
    ``delivery_annotations`` and ``message_annotations`` (dicts; ``str`` keys
    travel as symbols), ``properties`` (:class:`Properties`),
    ``application_properties`` (a dict with ``str`` keys) and ``footer`` (dict).

    The body depends on ``body_type``:

    - ``"value"`` (the default): ``body`` is any AMQP value, sent as one
      amqp-value section. As in Proton, ``Message(body=b"...")`` sends the bytes as
      an amqp-value of type binary. ``body=None`` sends amqp-value null, since the
      spec requires a body section (Proton 0.40 sends no body section at all; both
      read back as ``None`` in either implementation).
    - ``"data"``: ``body`` is a list of ``bytes``, one data section each
      (``Message(b"...", body_type="data")`` is accepted for a single section).
    - ``"sequence"``: ``body`` is a list of lists, one amqp-sequence section each.

    The Proton-style accessors (``id``, ``subject``, ``durable``, ``ttl``, ...)
    read and write fields of ``header`` and ``properties``; setting one creates
    the section if it is absent. As in Proton, ``ttl``, ``creation_time`` and
    ``expiry_time`` are in seconds (floats); the sections hold the spec's
    milliseconds. Header accessors return the spec's default when the field is
    absent (durable false, priority 4, first-acquirer false, delivery-count 0).
    Proton's ``properties`` (application properties), ``annotations`` and
    ``instructions`` are called ``application_properties``,
    ``message_annotations`` and ``delivery_annotations`` here.
    """

    __slots__ = (
        "application_properties",
        "body",
        "body_type",
        "delivery_annotations",
        "footer",
        "header",
        "message_annotations",
        "properties",
    )

    header: Header | None
    delivery_annotations: dict[Any, Any] | None
    message_annotations: dict[Any, Any] | None
    properties: Properties | None
    application_properties: dict[str, Any] | None
    body: Any
    body_type: BodyType
    footer: dict[Any, Any] | None

    def __init__(
        self,
        body: Any = None,
        *,
        body_type: BodyType = "value",
        header: Header | None = None,
        delivery_annotations: dict[Any, Any] | None = None,
        message_annotations: dict[Any, Any] | None = None,
        properties: Properties | None = None,
        application_properties: dict[str, Any] | None = None,
        footer: dict[Any, Any] | None = None,
        **fields: Any,
    ) -> None:
        if body_type not in _BODY_TYPES:
            raise ValueError(f"body_type must be 'value', 'data' or 'sequence', not {body_type!r}")
        if body_type == "data" and isinstance(body, _BINARY_TYPES):
            body = [body]
        self.header = header
        self.delivery_annotations = delivery_annotations
        self.message_annotations = message_annotations
        self.properties = properties
        self.application_properties = application_properties
        self.body = body
        self.body_type = body_type
        self.footer = footer
        for name, value in fields.items():
            if not isinstance(getattr(type(self), name, None), property):
                raise TypeError(f"Message() got an unexpected keyword argument {name!r}")
            setattr(self, name, value)

    # ------------------------------------------------------------------ encoding

    def encode(self) -> bytes:
        """The message's encoding: its sections in the spec's order, absent ones omitted."""
        buf = bytearray()
        self.encode_into(buf)
        return bytes(buf)

    def encode_into(self, buf: bytearray) -> None:
        """Append the message's encoding to ``buf`` (on error ``buf`` is left as it was)."""
        start = len(buf)
        try:
            self._encode_sections(buf)
        except BaseException:
            del buf[start:]
            raise

    def _encode_sections(self, buf: bytearray) -> None:
        if self.header is not None:
            encode_into(buf, self.header)
        if self.delivery_annotations is not None:
            encode_into(buf, DeliveryAnnotations(self.delivery_annotations))
        if self.message_annotations is not None:
            encode_into(buf, MessageAnnotations(self.message_annotations))
        if self.properties is not None:
            encode_into(buf, self.properties)
        ap = self.application_properties
        if ap is not None:
            for k in ap:
                if type(k) is not str:
                    raise EncodeError(
                        f"application-properties keys must be str, not {type(k).__name__}"
                    )
            buf += _D_APPLICATION_PROPERTIES
            encode_into(buf, ap)
        body = self.body
        body_type = self.body_type
        if body_type == "value":
            buf += _D_AMQP_VALUE
            encode_into(buf, body)
        elif body_type == "data":
            if isinstance(body, _BINARY_TYPES) or not isinstance(body, (list, tuple)) or not body:
                raise EncodeError("a data body is a non-empty list of bytes")
            for chunk in body:
                if not isinstance(chunk, _BINARY_TYPES):
                    raise EncodeError(f"a data section holds bytes, not {type(chunk).__name__}")
                buf += _D_DATA
                encode_into(buf, chunk)
        elif body_type == "sequence":
            if not isinstance(body, (list, tuple)) or not body:
                raise EncodeError("a sequence body is a non-empty list of lists")
            for seq in body:
                if not isinstance(seq, (list, tuple)):
                    raise EncodeError(
                        f"an amqp-sequence section holds a list, not {type(seq).__name__}"
                    )
                buf += _D_AMQP_SEQUENCE
                encode_into(buf, seq)
        else:
            raise EncodeError(f"unknown body_type {body_type!r}")
        if self.footer is not None:
            encode_into(buf, Footer(self.footer))

    # ------------------------------------------------------------------ decoding

    @classmethod
    def decode(cls, data: Buffer, limits: Limits = DEFAULT_LIMITS) -> Message:
        """Decode a whole message; raise :class:`DecodeError` unless it is well formed.

        Sections must come in the spec's order, each at most once, except that a
        body may be several data or several amqp-sequence sections (never a mix).
        A message without a body section is accepted and has ``body`` ``None``.
        """
        self = object.__new__(cls)
        header = da = ma = props = ap = footer = None
        body: Any = None
        body_type: BodyType = "value"
        rank = -1
        pos = 0
        end = len(data)
        try:
            while pos < end:
                # Fast path: the descriptor is a smallulong, so read it here and decode
                # only the section's value (no wrapper object to build and unwrap).
                if data[pos] == 0x00 and data[pos + 1] == 0x53:
                    code = data[pos + 2]
                    if code in _COMPOSITE_SECTIONS:
                        value, pos = decode_at(data, pos, limits)  # the composite itself
                    else:
                        value, pos = decode_at(data, pos + 3, limits)
                else:
                    section, pos = decode_at(data, pos, limits)
                    code = _CODE_OF_SECTION.get(type(section), -1)
                    if code == -1:
                        raise DecodeError(f"not a message section: {section!r:.80}")
                    value = section if code in _COMPOSITE_SECTIONS else section.value
                if code == _AMQP_VALUE:
                    if rank >= _BODY_RANK:
                        raise _order_error("amqp-value", rank, body_type)
                    rank = _BODY_RANK
                    body = value
                elif code == _PROPERTIES:
                    if rank >= 3:
                        raise _order_error("properties", rank, body_type)
                    rank = 3
                    props = value
                elif code == _APPLICATION_PROPERTIES:
                    if rank >= 4:
                        raise _order_error("application-properties", rank, body_type)
                    if type(value) is not dict:
                        raise _kind_error("application-properties", "map", value)
                    rank = 4
                    ap = value
                elif code == _HEADER:
                    if rank >= 0:
                        raise _order_error("header", rank, body_type)
                    rank = 0
                    header = value
                elif code == _DATA:
                    if type(value) is not bytes:
                        raise _kind_error("data", "binary", value)
                    if rank == _BODY_RANK and body_type == "data":
                        body.append(value)
                    else:
                        if rank >= _BODY_RANK:
                            raise _order_error("data", rank, body_type)
                        rank = _BODY_RANK
                        body_type = "data"
                        body = [value]
                elif code == _AMQP_SEQUENCE:
                    if type(value) is not list:
                        raise _kind_error("amqp-sequence", "list", value)
                    if rank == _BODY_RANK and body_type == "sequence":
                        body.append(value)
                    else:
                        if rank >= _BODY_RANK:
                            raise _order_error("amqp-sequence", rank, body_type)
                        rank = _BODY_RANK
                        body_type = "sequence"
                        body = [value]
                elif code == _MESSAGE_ANNOTATIONS:
                    if rank >= 2:
                        raise _order_error("message-annotations", rank, body_type)
                    if type(value) is not dict:
                        raise _kind_error("message-annotations", "map", value)
                    rank = 2
                    ma = value
                elif code == _DELIVERY_ANNOTATIONS:
                    if rank >= 1:
                        raise _order_error("delivery-annotations", rank, body_type)
                    if type(value) is not dict:
                        raise _kind_error("delivery-annotations", "map", value)
                    rank = 1
                    da = value
                elif code == _FOOTER:
                    if rank >= 6:
                        raise _order_error("footer", rank, body_type)
                    if type(value) is not dict:
                        raise _kind_error("footer", "map", value)
                    rank = 6
                    footer = value
                else:
                    raise DecodeError(f"not a message section: descriptor {code:#04x}")
        except IndexError:
            raise DecodeError("truncated message section") from None
        self.header = header
        self.delivery_annotations = da
        self.message_annotations = ma
        self.properties = props
        self.application_properties = ap
        self.body = body
        self.body_type = body_type
        self.footer = footer
        return self

    # ------------------------------------------------------------------ value semantics

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Message)
        return all(getattr(self, a) == getattr(other, a) for a in Message.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        parts = [f"{self.body!r}"] if self.body is not None else []
        if self.body_type != "value":
            parts.append(f"body_type={self.body_type!r}")
        for a in (
            "header",
            "delivery_annotations",
            "message_annotations",
            "properties",
            "application_properties",
            "footer",
        ):
            v = getattr(self, a)
            if v is not None:
                parts.append(f"{a}={v!r}")
        return f"Message({', '.join(parts)})"

    # ------------------------------------------------------------------ accessors

    def _header(self) -> Any:
        h: Any = self.header
        if h is None:
            h = self.header = Header()
        return h

    def _props(self) -> Any:
        p: Any = self.properties
        if p is None:
            p = self.properties = Properties()
        return p

    @property
    def durable(self) -> bool:
        """header.durable (false when absent)."""
        h: Any = self.header
        return bool(h is not None and h.durable)

    @durable.setter
    def durable(self, value: bool | None) -> None:
        self._header().durable = None if value is None else bool(value)

    @property
    def priority(self) -> int:
        """header.priority (4 when absent)."""
        h: Any = self.header
        return 4 if h is None or h.priority is None else int(h.priority)

    @priority.setter
    def priority(self, value: int | None) -> None:
        self._header().priority = None if value is None else ubyte(value)

    @property
    def ttl(self) -> float | None:
        """header.ttl in seconds (Proton's unit; the header holds milliseconds)."""
        h: Any = self.header
        return None if h is None else _ms_to_secs(h.ttl)

    @ttl.setter
    def ttl(self, value: float | None) -> None:
        self._header().ttl = _secs_to_ms(value)

    @property
    def first_acquirer(self) -> bool:
        """header.first-acquirer (false when absent)."""
        h: Any = self.header
        return bool(h is not None and h.first_acquirer)

    @first_acquirer.setter
    def first_acquirer(self, value: bool | None) -> None:
        self._header().first_acquirer = None if value is None else bool(value)

    @property
    def delivery_count(self) -> int:
        """header.delivery-count (0 when absent)."""
        h: Any = self.header
        return 0 if h is None or h.delivery_count is None else int(h.delivery_count)

    @delivery_count.setter
    def delivery_count(self, value: int | None) -> None:
        self._header().delivery_count = value

    @property
    def id(self) -> Any:
        """properties.message-id (str, bytes, uuid.UUID or ulong; a plain int becomes ulong)."""
        p: Any = self.properties
        return None if p is None else p.message_id

    @id.setter
    def id(self, value: Any) -> None:
        self._props().message_id = _message_id(value)

    @property
    def user_id(self) -> bytes | None:
        """properties.user-id."""
        p: Any = self.properties
        return None if p is None else p.user_id

    @user_id.setter
    def user_id(self, value: bytes | None) -> None:
        self._props().user_id = value

    @property
    def to(self) -> str | None:
        """properties.to (Proton calls it ``address``)."""
        p: Any = self.properties
        return None if p is None else p.to

    @to.setter
    def to(self, value: str | None) -> None:
        self._props().to = value

    address = to

    @property
    def subject(self) -> str | None:
        """properties.subject."""
        p: Any = self.properties
        return None if p is None else p.subject

    @subject.setter
    def subject(self, value: str | None) -> None:
        self._props().subject = value

    @property
    def reply_to(self) -> str | None:
        """properties.reply-to."""
        p: Any = self.properties
        return None if p is None else p.reply_to

    @reply_to.setter
    def reply_to(self, value: str | None) -> None:
        self._props().reply_to = value

    @property
    def correlation_id(self) -> Any:
        """properties.correlation-id (same types as ``id``)."""
        p: Any = self.properties
        return None if p is None else p.correlation_id

    @correlation_id.setter
    def correlation_id(self, value: Any) -> None:
        self._props().correlation_id = _message_id(value)

    @property
    def content_type(self) -> str | None:
        """properties.content-type (a symbol)."""
        p: Any = self.properties
        return None if p is None else p.content_type

    @content_type.setter
    def content_type(self, value: str | None) -> None:
        self._props().content_type = None if value is None else symbol(value)

    @property
    def content_encoding(self) -> str | None:
        """properties.content-encoding (a symbol)."""
        p: Any = self.properties
        return None if p is None else p.content_encoding

    @content_encoding.setter
    def content_encoding(self, value: str | None) -> None:
        self._props().content_encoding = None if value is None else symbol(value)

    @property
    def expiry_time(self) -> float | None:
        """properties.absolute-expiry-time in seconds since the epoch (Proton's unit)."""
        p: Any = self.properties
        return None if p is None else _ms_to_secs(p.absolute_expiry_time)

    @expiry_time.setter
    def expiry_time(self, value: float | _dt.datetime | None) -> None:
        self._props().absolute_expiry_time = _timestamp_secs(value)

    @property
    def creation_time(self) -> float | None:
        """properties.creation-time in seconds since the epoch (Proton's unit)."""
        p: Any = self.properties
        return None if p is None else _ms_to_secs(p.creation_time)

    @creation_time.setter
    def creation_time(self, value: float | _dt.datetime | None) -> None:
        self._props().creation_time = _timestamp_secs(value)

    @property
    def group_id(self) -> str | None:
        """properties.group-id."""
        p: Any = self.properties
        return None if p is None else p.group_id

    @group_id.setter
    def group_id(self, value: str | None) -> None:
        self._props().group_id = value

    @property
    def group_sequence(self) -> int | None:
        """properties.group-sequence."""
        p: Any = self.properties
        return None if p is None else p.group_sequence

    @group_sequence.setter
    def group_sequence(self, value: int | None) -> None:
        self._props().group_sequence = value

    @property
    def reply_to_group_id(self) -> str | None:
        """properties.reply-to-group-id."""
        p: Any = self.properties
        return None if p is None else p.reply_to_group_id

    @reply_to_group_id.setter
    def reply_to_group_id(self, value: str | None) -> None:
        self._props().reply_to_group_id = value


_CODE_OF_SECTION: Final[dict[type, int]] = {
    Header: _HEADER,
    DeliveryAnnotations: _DELIVERY_ANNOTATIONS,
    MessageAnnotations: _MESSAGE_ANNOTATIONS,
    Properties: _PROPERTIES,
    ApplicationProperties: _APPLICATION_PROPERTIES,
    Data: _DATA,
    AmqpSequence: _AMQP_SEQUENCE,
    AmqpValue: _AMQP_VALUE,
    Footer: _FOOTER,
}


def _kind_error(section: str, expected: str, value: Any) -> DecodeError:
    return DecodeError(f"{section}: expected {expected}, got {type(value).__name__}")


def _order_error(name: str, rank: int, body_type: str) -> DecodeError:
    if rank == _BODY_RANK and name in ("data", "amqp-sequence", "amqp-value"):
        prev = {"value": "amqp-value", "data": "data", "sequence": "amqp-sequence"}[body_type]
        if name == prev:
            return DecodeError(f"message has more than one {name} section")
        return DecodeError(f"message body mixes {prev} and {name} sections")
    if name == _RANK_NAMES[rank]:
        return DecodeError(f"message has more than one {name} section")
    return DecodeError(f"{name} section out of order (after a later section)")


# ======================================================================================
# Lazy decoding
# ======================================================================================

# Size of what follows each constructor byte, for skipping a value without decoding it:
# >= 0: that many fixed bytes; -1: a 1-byte size then that many bytes; -4: a 4-byte size
# then that many bytes; None: not a valid constructor. Described values (0x00) are
# handled separately.
_FIXED: dict[int, int] = {}
for _c in (0x40, 0x41, 0x42, 0x43, 0x44, 0x45):
    _FIXED[_c] = 0
for _c in (0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56):
    _FIXED[_c] = 1
for _c in (0x60, 0x61):
    _FIXED[_c] = 2
for _c in (0x70, 0x71, 0x72, 0x73, 0x74):
    _FIXED[_c] = 4
for _c in (0x80, 0x81, 0x82, 0x83, 0x84):
    _FIXED[_c] = 8
for _c in (0x94, 0x98):
    _FIXED[_c] = 16
for _c in (0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0):
    _FIXED[_c] = -1
for _c in (0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0):
    _FIXED[_c] = -4
_SKIP: Final[list[int | None]] = [_FIXED.get(c) for c in range(256)]
del _FIXED, _c
_U32: Final = struct.Struct(">I")


def _skip(data: bytes, pos: int, depth: int = 0) -> int:
    """The offset just past the (possibly described) value at ``pos``; checks only framing."""
    n = len(data)
    while True:
        if pos >= n:
            raise DecodeError("truncated message section")
        code = data[pos]
        if code != 0x00:
            break
        if depth >= 8:
            raise DecodeError("descriptors nested too deeply")
        pos = _skip(data, pos + 1, depth + 1)  # the descriptor
    width = _SKIP[code]
    pos += 1
    if width is None:
        raise DecodeError(f"unknown constructor {code:#04x}")
    if width == -1:
        if pos >= n:
            raise DecodeError("truncated message section")
        pos += 1 + data[pos]
    elif width == -4:
        if pos + 4 > n:
            raise DecodeError("truncated message section")
        pos += 4 + _U32.unpack_from(data, pos)[0]
    else:
        pos += width
    if pos > n:
        raise DecodeError("truncated message section")
    return pos


def _section_code(data: bytes, pos: int) -> tuple[int, int]:
    """Read a section's descriptor at ``pos``: its code and the offset of its value."""
    if data[pos] != 0x00:
        raise DecodeError(f"expected a described message section at offset {pos}")
    c = data[pos + 1]
    if c == 0x53:
        code = data[pos + 2]
        vpos = pos + 3
    elif c == 0x80:
        vpos = pos + 10
        if len(data) < vpos:
            raise DecodeError("truncated section descriptor")
        code = int.from_bytes(data[pos + 2 : vpos], "big")
    elif c in (0xA3, 0xB3):
        vpos = _skip(data, pos + 1)
        name_start = pos + 3 if c == 0xA3 else pos + 6
        code = _SECTION_BY_NAME.get(data[name_start:vpos].decode("ascii", "replace"), -1)
    else:
        raise DecodeError(f"section descriptor must be a ulong or symbol, got {c:#04x}")
    if code not in _RANK:
        raise DecodeError(f"not a message section (descriptor at offset {pos})")
    return code, vpos


class _Keep:
    """Marker for "leave this section as it is" in :meth:`LazyMessage.rewrite`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Final = _Keep()

# indexes into LazyMessage._spans
_S_HEADER, _S_DA, _S_MA, _S_PROPS, _S_AP, _S_BODY, _S_FOOTER = range(7)


class LazyMessage:
    """A received message kept as bytes, for brokers and other intermediaries.

    Construction checks the section framing and order (the same rules as
    :meth:`Message.decode`) without decoding any section. ``header``,
    ``properties``, the annotation maps, ``application_properties`` and ``footer``
    are decoded on first access (and cached); the body is never decoded unless
    ``body`` or :meth:`message` is called. :meth:`with_header`,
    :meth:`with_annotations` and :meth:`rewrite` return new message bytes in
    which only the changed sections are re-encoded: the bare message
    (properties, application-properties, body) and the footer are copied byte
    for byte.
    """

    __slots__ = ("_cache", "_limits", "_spans", "body_type", "raw")

    raw: bytes
    body_type: BodyType | None

    def __init__(self, data: Buffer, limits: Limits = DEFAULT_LIMITS) -> None:
        raw = data if type(data) is bytes else bytes(data)
        self.raw = raw
        self._limits = limits
        self._cache: dict[int, Any] = {}
        spans: list[tuple[int, int] | None] = [None] * 7
        body_type: BodyType | None = None
        rank = -1
        pos = 0
        n = len(raw)
        try:
            while pos < n:
                code, vpos = _section_code(raw, pos)
                end = _skip(raw, vpos)
                r = _RANK[code]
                if r == _BODY_RANK:
                    kind = _KIND_BY_CODE[code]
                    if rank == _BODY_RANK and kind == body_type and kind != "value":
                        start = spans[_S_BODY][0]  # type: ignore[index]
                        spans[_S_BODY] = (start, end)
                    else:
                        if rank >= _BODY_RANK:
                            raise _order_error(_SECTION_NAMES[code], rank, body_type or "value")
                        body_type = kind
                        spans[_S_BODY] = (pos, end)
                    first = raw[vpos]
                    if code == _DATA and first not in (0xA0, 0xB0):
                        raise DecodeError("a data section must hold binary")
                    if code == _AMQP_SEQUENCE and first not in (0x45, 0xC0, 0xD0):
                        raise DecodeError("an amqp-sequence section must hold a list")
                else:
                    if r <= rank:
                        raise _order_error(_SECTION_NAMES[code], rank, body_type or "value")
                    spans[r] = (pos, end)
                rank = r
                pos = end
        except IndexError:
            raise DecodeError("truncated message section") from None
        self._spans = spans
        self.body_type = body_type

    # ------------------------------------------------------------------ sections

    def _section(self, index: int) -> Any:
        cache = self._cache
        if index in cache:
            return cache[index]
        span = self._spans[index]
        if span is None:
            value = None
        else:
            section, end = decode_at(self.raw, span[0], self._limits)
            if end != span[1]:  # pragma: no cover - _skip and decode_at disagree
                raise DecodeError("section size does not match its contents")
            value = section if index in (_S_HEADER, _S_PROPS) else section.value
        cache[index] = value
        return value

    @property
    def header(self) -> Header | None:
        """The header section, decoded on first access."""
        h: Header | None = self._section(_S_HEADER)
        return h

    @property
    def delivery_annotations(self) -> dict[Any, Any] | None:
        """The delivery-annotations map, decoded on first access."""
        v: dict[Any, Any] | None = self._section(_S_DA)
        return v

    @property
    def message_annotations(self) -> dict[Any, Any] | None:
        """The message-annotations map, decoded on first access."""
        v: dict[Any, Any] | None = self._section(_S_MA)
        return v

    @property
    def properties(self) -> Properties | None:
        """The properties section, decoded on first access."""
        p: Properties | None = self._section(_S_PROPS)
        return p

    @property
    def application_properties(self) -> dict[str, Any] | None:
        """The application-properties map, decoded on first access."""
        v: dict[str, Any] | None = self._section(_S_AP)
        return v

    @property
    def footer(self) -> dict[Any, Any] | None:
        """The footer map, decoded on first access."""
        v: dict[Any, Any] | None = self._section(_S_FOOTER)
        return v

    @property
    def body(self) -> Any:
        """The body, decoded now (as in :class:`Message`: a value, or a list of sections)."""
        span = self._spans[_S_BODY]
        if span is None:
            return None
        return Message.decode(memoryview(self.raw)[span[0] : span[1]], self._limits).body

    def message(self) -> Message:
        """The whole message, fully decoded."""
        return Message.decode(self.raw, self._limits)

    # ------------------------------------------------------------------ broker shortcuts

    @property
    def durable(self) -> bool:
        """header.durable (false when absent)."""
        h: Any = self.header
        return bool(h is not None and h.durable)

    @property
    def priority(self) -> int:
        """header.priority (4 when absent)."""
        h: Any = self.header
        return 4 if h is None or h.priority is None else int(h.priority)

    @property
    def delivery_count(self) -> int:
        """header.delivery-count (0 when absent)."""
        h: Any = self.header
        return 0 if h is None or h.delivery_count is None else int(h.delivery_count)

    # ------------------------------------------------------------------ raw spans

    def span(self, section: str) -> tuple[int, int] | None:
        """Where a section lies in ``raw`` as ``(start, end)``, or ``None`` if absent.

        ``section`` is one of ``header``, ``delivery-annotations``,
        ``message-annotations``, ``properties``, ``application-properties``,
        ``body`` (all body sections together) and ``footer``.
        """
        try:
            index = _RANK_NAMES.index(section)
        except ValueError:
            raise ValueError(f"unknown section {section!r}") from None
        return self._spans[index]

    @property
    def bare(self) -> memoryview:
        """The bare message (properties, application-properties, body): what the sender
        wrote and intermediaries must not change."""
        start = end = None
        for i in (_S_PROPS, _S_AP, _S_BODY):
            s = self._spans[i]
            if s is not None:
                if start is None:
                    start = s[0]
                end = s[1]
        if start is None or end is None:
            return memoryview(b"")
        return memoryview(self.raw)[start:end]

    def __len__(self) -> int:
        return len(self.raw)

    def __repr__(self) -> str:
        present = [n for n, s in zip(_RANK_NAMES, self._spans) if s is not None]
        return f"LazyMessage({len(self.raw)} bytes: {', '.join(present)})"

    # ------------------------------------------------------------------ rewriting

    def rewrite(
        self,
        *,
        header: Header | _Keep | None = KEEP,
        delivery_annotations: Mapping[Any, Any] | _Keep | None = KEEP,
        message_annotations: Mapping[Any, Any] | _Keep | None = KEEP,
        footer: Mapping[Any, Any] | _Keep | None = KEEP,
    ) -> bytes:
        """The message bytes with the given sections replaced (``None`` removes one).

        Sections not named are copied byte for byte, and so is the whole bare
        message. Replacing the footer is for the rare intermediary that signs
        messages; everything else belongs to the annotated message.
        """
        raw = self.raw
        spans = self._spans
        out = bytearray()
        pos = 0  # how far ``raw`` has been copied or skipped

        def put(index: int, value: Any, wrap: Any) -> None:
            nonlocal pos
            span = spans[index]
            if value is KEEP:
                return
            # copy everything before the section's slot, then the replacement
            at = span[0] if span is not None else _slot_start(spans, index, len(raw))
            out.extend(memoryview(raw)[pos:at])
            if value is not None:
                encode_into(out, wrap(value))
            pos = span[1] if span is not None else at

        put(_S_HEADER, header, _same)
        put(_S_DA, delivery_annotations, _delivery_annotations)
        put(_S_MA, message_annotations, _message_annotations)
        put(_S_FOOTER, footer, _footer)
        out.extend(memoryview(raw)[pos:])
        return bytes(out)

    def with_header(self, **changes: Any) -> bytes:
        """The message bytes with header fields changed (the header is created if absent).

        For example ``with_header(delivery_count=m.delivery_count + 1, first_acquirer=False)``.
        """
        unknown = changes.keys() - _HEADER_FIELDS
        if unknown:
            raise TypeError(f"not header fields: {', '.join(sorted(unknown))}")
        old = self.header
        new = Header()
        if old is not None:
            for f in _HEADER_FIELDS:
                setattr(new, f, getattr(old, f))
        for f, v in changes.items():
            setattr(new, f, v)
        return self.rewrite(header=new)

    def with_annotations(
        self,
        message_annotations: Mapping[Any, Any] | None = None,
        delivery_annotations: Mapping[Any, Any] | None = None,
        *,
        replace: bool = False,
    ) -> bytes:
        """The message bytes with annotations added (merged into the present maps).

        With ``replace=True`` the given maps replace the present ones instead; a map
        left as ``None`` is then kept as it is.
        """
        ma: Mapping[Any, Any] | _Keep = KEEP
        da: Mapping[Any, Any] | _Keep = KEEP
        if message_annotations is not None:
            ma = (
                message_annotations
                if replace
                else {**(self.message_annotations or {}), **message_annotations}
            )
        if delivery_annotations is not None:
            da = (
                delivery_annotations
                if replace
                else {**(self.delivery_annotations or {}), **delivery_annotations}
            )
        return self.rewrite(message_annotations=ma, delivery_annotations=da)


def _slot_start(spans: list[tuple[int, int] | None], index: int, end: int) -> int:
    """Where an absent section would go: before the first present section after it."""
    for s in spans[index + 1 :]:
        if s is not None:
            return s[0]
    return end


def _same(value: Any) -> Any:
    return value


def _delivery_annotations(value: Mapping[Any, Any]) -> DeliveryAnnotations:
    return DeliveryAnnotations(dict(value))


def _message_annotations(value: Mapping[Any, Any]) -> MessageAnnotations:
    return MessageAnnotations(dict(value))


def _footer(value: Mapping[Any, Any]) -> Footer:
    return Footer(dict(value))
