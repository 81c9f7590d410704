"""The broker's form of a message (Part 3 §3.2): received bytes, sections decoded lazily.

:class:`LazyMessage` is for intermediaries (brokers): it keeps the received bytes,
finds where each section starts and ends without decoding any of them, decodes a
section only when asked, and re-emits the message with a new header or new
annotations while copying every other section byte for byte.
"""

from __future__ import annotations

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
from .scan import MISSING, Span, data_bytes, map_lookup, scan
from .sections import RANK_NAMES, BodyType, Buffer, kind_error

__all__ = ["KEEP", "LazyMessage"]

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
        self._spans, self.body_type = scan(raw)

    # ------------------------------------------------------------------ sections

    def _section(self, index: int) -> Any:
        cache = self._cache
        if index in cache:
            return cache[index]
        span = self._spans[index]
        if span is None:
            value = None
        else:
            if index in (_S_HEADER, _S_PROPS):  # composites: decoded with their descriptor
                value, end = decode_at(self.raw, span[0], self._limits)
            else:  # maps: just the value
                value, end = decode_at(self.raw, span[1], self._limits)
                if type(value) is not dict:
                    raise kind_error(RANK_NAMES[index], "map", value)
            if end != span[2]:  # pragma: no cover - scan and decode_at disagree
                raise DecodeError("section size does not match its contents")
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
        return Message.decode(memoryview(self.raw)[span[0] : span[2]], self._limits).body

    def data(self) -> bytes | None:
        """A body of data sections as one ``bytes`` (their binaries joined), without
        decoding anything; None if the body is not data."""
        span = self._spans[_S_BODY]
        return None if span is None or self.body_type != "data" else data_bytes(self.raw, span)

    def value_encoding(self) -> memoryview | None:
        """The encoded value of an amqp-value body, as it was sent (constructor onwards);
        None if the body is not an amqp-value. Decode it with :func:`~amqp10.types.decode`."""
        span = self._spans[_S_BODY]
        if span is None or self.body_type != "value":
            return None
        return memoryview(self.raw)[span[1] : span[2]]

    def annotation(self, key: str) -> Any:
        """One message annotation (None if absent), read without decoding the others."""
        if _S_MA in self._cache:
            ma = self._cache[_S_MA]
            return None if ma is None else ma.get(key)
        span = self._spans[_S_MA]
        if span is None:
            return None
        value = map_lookup(self.raw, span[1], key, self._limits)
        return None if value is MISSING else value

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
        s = self._spans[index]
        return None if s is None else (s[0], s[2])

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
                end = s[2]
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
            pos = span[2] if span is not None else at

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


def _slot_start(spans: list[Span | None], index: int, end: int) -> int:
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
