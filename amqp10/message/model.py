"""The application's message (Part 3 §3.2): every section as plain Python values.

:class:`Message` encodes and decodes whole messages; its Proton-style accessors
(``id``, ``durable``, ``ttl``, ...) live in :mod:`.fields`.
"""

from __future__ import annotations

from typing import Any, Final

from ..types import (
    DEFAULT_LIMITS,
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
)
from .fields import FIELDS, ProtonFields
from .sections import (
    AMQP_SEQUENCE,
    AMQP_VALUE,
    APPLICATION_PROPERTIES,
    BODY_RANK,
    CODE_OF_SECTION,
    COMPOSITE_SECTIONS,
    DATA,
    DELIVERY_ANNOTATIONS,
    FOOTER,
    HEADER,
    MESSAGE_ANNOTATIONS,
    PROPERTIES,
    RANK,
    SECTION_NAMES,
    BodyType,
    Buffer,
    kind_error,
    order_error,
)

__all__ = ["Message"]

_BODY_TYPES: Final = frozenset({"value", "data", "sequence"})
_ANNOTATION_SECTIONS: Final = frozenset({DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, FOOTER})

# Pre-encoded descriptors (0x00, smallulong, code) written in front of each section.
_D_APPLICATION_PROPERTIES: Final = b"\x00\x53\x74"
_D_DATA: Final = b"\x00\x53\x75"
_D_AMQP_SEQUENCE: Final = b"\x00\x53\x76"
_D_AMQP_VALUE: Final = b"\x00\x53\x77"

_BINARY_TYPES: Final = (bytes, bytearray, memoryview)


_SECTIONS: Final = (
    "application_properties",
    "body",
    "body_type",
    "delivery_annotations",
    "footer",
    "header",
    "message_annotations",
    "properties",
)
"""A message's attributes: its ``__slots__``, and what ``==`` compares (a module constant:
mypyc's compiled class has no ``__slots__`` to read)."""


class Message(ProtonFields):
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

    __slots__ = _SECTIONS

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
        if fields:
            for name, value in fields.items():
                # an accessor, or a property of an interpreted subclass
                if name not in FIELDS and not isinstance(getattr(type(self), name, None), property):
                    raise TypeError(f"Message() got an unexpected keyword argument {name!r}")
                setattr(self, name, value)

    # ------------------------------------------------------------------ encoding

    def encode(self) -> bytes:
        """The message's encoding: its sections in the spec's order, absent ones omitted."""
        buf = bytearray()
        self._encode_sections(buf)  # (a buffer of its own: nothing to restore on error)
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
        # (keys typed Any: mypyc would check each is a str, before the check below can)
        ap: dict[Any, Any] | None = self.application_properties
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
                    if code in COMPOSITE_SECTIONS:
                        value, pos = decode_at(data, pos, limits)  # the composite itself
                    else:
                        value, pos = decode_at(data, pos + 3, limits)
                else:
                    section, pos = decode_at(data, pos, limits)
                    code = CODE_OF_SECTION.get(type(section), -1)
                    if code == -1:
                        raise DecodeError(f"not a message section: {section!r:.80}")
                    value = section if code in COMPOSITE_SECTIONS else section.value
                if code == AMQP_VALUE:
                    if rank >= BODY_RANK:
                        raise order_error("amqp-value", rank, body_type)
                    rank = BODY_RANK
                    body = value
                elif code == PROPERTIES:
                    if rank >= 3:
                        raise order_error("properties", rank, body_type)
                    rank = 3
                    props = value
                elif code == APPLICATION_PROPERTIES:
                    if rank >= 4:
                        raise order_error("application-properties", rank, body_type)
                    if type(value) is not dict:
                        raise kind_error("application-properties", "map", value)
                    rank = 4
                    ap = value
                elif code == HEADER:
                    if rank >= 0:
                        raise order_error("header", rank, body_type)
                    rank = 0
                    header = value
                elif code == DATA:
                    if type(value) is not bytes:
                        raise kind_error("data", "binary", value)
                    if rank == BODY_RANK and body_type == "data":
                        body.append(value)
                    else:
                        if rank >= BODY_RANK:
                            raise order_error("data", rank, body_type)
                        rank = BODY_RANK
                        body_type = "data"
                        body = [value]
                elif code == AMQP_SEQUENCE:
                    if type(value) is not list:
                        raise kind_error("amqp-sequence", "list", value)
                    if rank == BODY_RANK and body_type == "sequence":
                        body.append(value)
                    else:
                        if rank >= BODY_RANK:
                            raise order_error("amqp-sequence", rank, body_type)
                        rank = BODY_RANK
                        body_type = "sequence"
                        body = [value]
                elif code in _ANNOTATION_SECTIONS:
                    # delivery-/message-annotations and footer: a map each, at their rank
                    r = RANK[code]
                    if rank >= r:
                        raise order_error(SECTION_NAMES[code], rank, body_type)
                    if type(value) is not dict:
                        raise kind_error(SECTION_NAMES[code], "map", value)
                    rank = r
                    if code == MESSAGE_ANNOTATIONS:
                        ma = value
                    elif code == DELIVERY_ANNOTATIONS:
                        da = value
                    else:
                        footer = value
                else:
                    raise DecodeError(f"not a message section: descriptor {code:#04x}")
        except IndexError:
            raise DecodeError("truncated message section") from None
        # (made by __init__, not object.__new__: mypyc's compiled class makes its instances
        # only so; the body of data sections is a list already, which __init__ keeps)
        return cls(
            body,
            body_type=body_type,
            header=header,
            delivery_annotations=da,
            message_annotations=ma,
            properties=props,
            application_properties=ap,
            footer=footer,
        )

    # ------------------------------------------------------------------ value semantics

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Message)
        return all(getattr(self, a) == getattr(other, a) for a in _SECTIONS)

    # Defining __eq__ sets __hash__ to None: a message is mutable, so it is unhashable.

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
