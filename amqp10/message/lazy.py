"""The broker's form of a message (Part 3 §3.2): received bytes, sections decoded lazily.

:class:`LazyMessage` is for intermediaries (brokers): it keeps the received bytes,
finds where each section starts and ends without decoding any of them, decodes a
section only when asked, and re-emits the message with a new header or new
annotations while copying every other section byte for byte.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, Final

from ..types import (
    DEFAULT_LIMITS,
    DecodeError,
    DeliveryAnnotations,
    Footer,
    Header,
    Limits,
    MessageAnnotations,
    Properties,
    decode_at,
    encode_into,
)
from .model import Message
from .sections import (
    AMQP_SEQUENCE,
    BODY_RANK,
    DATA,
    KIND_BY_CODE,
    RANK,
    RANK_NAMES,
    SECTION_BY_NAME,
    SECTION_NAMES,
    BodyType,
    Buffer,
    order_error,
)

__all__ = ["KEEP", "LazyMessage"]

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
        code = SECTION_BY_NAME.get(data[name_start:vpos].decode("ascii", "replace"), -1)
    else:
        raise DecodeError(f"section descriptor must be a ulong or symbol, got {c:#04x}")
    if code not in RANK:
        raise DecodeError(f"not a message section (descriptor at offset {pos})")
    return code, vpos


_HEADER_FIELDS: Final = frozenset(f.attr for f in Header.FIELDS)


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
        body_start = 0  # where the first body section starts
        rank = -1
        pos = 0
        n = len(raw)
        try:
            while pos < n:
                code, vpos = _section_code(raw, pos)
                end = _skip(raw, vpos)
                r = RANK[code]
                if r == BODY_RANK:
                    kind = KIND_BY_CODE[code]
                    if rank == BODY_RANK and kind == body_type and kind != "value":
                        spans[_S_BODY] = (body_start, end)
                    else:
                        if rank >= BODY_RANK:
                            raise order_error(SECTION_NAMES[code], rank, body_type or "value")
                        body_type = kind
                        body_start = pos
                        spans[_S_BODY] = (pos, end)
                    first = raw[vpos]
                    if code == DATA and first not in (0xA0, 0xB0):
                        raise DecodeError("a data section must hold binary")
                    if code == AMQP_SEQUENCE and first not in (0x45, 0xC0, 0xD0):
                        raise DecodeError("an amqp-sequence section must hold a list")
                else:
                    if r <= rank:
                        raise order_error(SECTION_NAMES[code], rank, body_type or "value")
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
            index = RANK_NAMES.index(section)
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
        present = [n for n, s in zip(RANK_NAMES, self._spans) if s is not None]
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
