"""Finding a message's sections in its bytes, and reading parts of them, without decoding.

The section scanner behind :class:`~amqp10.message.LazyMessage` and any reader
that wants a few fields of many messages (the Spark source: an offset and a
body per row). :func:`scan` walks the described sections (Part 3 §3.2) by their
descriptors and sizes and checks their framing and order with the same rules
and words as :meth:`Message.decode <amqp10.message.Message.decode>`; nothing
inside a section is decoded. Then:

- :func:`map_lookup` reads one entry of an encoded map (one message annotation,
  say ``x-opt-offset``) by walking its keys, decoding only that entry's value;
- :func:`data_bytes` joins the binaries of the data sections of a body.

Values themselves are decoded by the codec (:func:`~amqp10.types.decode_at`).
"""

from __future__ import annotations

import struct
from typing import Any, Final

from ..types import DEFAULT_LIMITS, DecodeError, Limits, decode_at
from .sections import (
    AMQP_SEQUENCE,
    BODY_RANK,
    DATA,
    KIND_BY_CODE,
    RANK,
    SECTION_BY_NAME,
    SECTION_NAMES,
    BodyType,
    order_error,
)

__all__ = [
    "BODY",
    "DELIVERY_ANNOTATIONS",
    "FOOTER",
    "HEADER",
    "MESSAGE_ANNOTATIONS",
    "MISSING",
    "PROPERTIES",
    "APPLICATION_PROPERTIES",
    "Span",
    "data_bytes",
    "map_lookup",
    "scan",
    "skip",
]

Span = tuple[int, int, int]
"""Where a section lies: ``(start, value_start, end)``: its descriptor, its value, just past it.

For the body: the first body section's start and value, and the end of the last one."""

# indexes into the list :func:`scan` returns (each section's rank in the spec's order)
HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES = range(5)
BODY, FOOTER = 5, 6

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
_U32x2: Final = struct.Struct(">II")

# the rank of each section by ``code - 0x70`` (codes 0x70..0x78), for the scanner's fast path
_RANK_BY_LOW: Final = tuple(RANK[c] for c in range(0x70, 0x79))


def skip(data: bytes, pos: int, depth: int = 0) -> int:
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
        pos = skip(data, pos + 1, depth + 1)  # the descriptor
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
        vpos = skip(data, pos + 1)
        name_start = pos + 3 if c == 0xA3 else pos + 6
        code = SECTION_BY_NAME.get(data[name_start:vpos].decode("ascii", "replace"), -1)
    else:
        raise DecodeError(f"section descriptor must be a ulong or symbol, got {c:#04x}")
    if code not in RANK:
        raise DecodeError(f"not a message section (descriptor at offset {pos})")
    return code, vpos


def scan(data: bytes) -> tuple[list[Span | None], BodyType | None]:
    """Where each section of the encoded message ``data`` lies, and the body's kind.

    Returns a list indexed by :data:`HEADER` ... :data:`FOOTER` (None: absent)
    and the body type (None: no body section). Raises :class:`DecodeError` for
    bad framing or order (a section's contents are checked when decoded).
    """
    spans: list[Span | None] = [None, None, None, None, None, None, None]
    body_type: BodyType | None = None
    body_start = body_value = 0  # the first body section
    rank = -1
    pos = 0
    n = len(data)
    skips = _SKIP
    try:
        while pos < n:
            if data[pos] == 0x00 and data[pos + 1] == 0x53 and 0x70 <= data[pos + 2] <= 0x78:
                code = data[pos + 2]
                vpos = pos + 3
                r = _RANK_BY_LOW[code - 0x70]
            else:
                code, vpos = _section_code(data, pos)
                r = RANK[code]
            # the value's end: its size is in its first bytes, unless it is itself described
            c = data[vpos]
            width = skips[c]
            if width == -1:
                end = vpos + 2 + data[vpos + 1]
            elif width == -4:
                end = vpos + 5 + _U32.unpack_from(data, vpos + 1)[0]
            elif width is None:  # described, or not a constructor
                end = skip(data, vpos)
            else:
                end = vpos + 1 + width
            if end > n:
                raise DecodeError("truncated message section")
            if r == BODY_RANK:
                kind = KIND_BY_CODE[code]
                if rank == BODY_RANK and kind == body_type and kind != "value":
                    spans[BODY] = (body_start, body_value, end)
                else:
                    if rank >= BODY_RANK:
                        raise order_error(SECTION_NAMES[code], rank, body_type or "value")
                    body_type = kind
                    body_start = pos
                    body_value = vpos
                    spans[BODY] = (pos, vpos, end)
                if code == DATA and c not in (0xA0, 0xB0):
                    raise DecodeError("a data section must hold binary")
                if code == AMQP_SEQUENCE and c not in (0x45, 0xC0, 0xD0):
                    raise DecodeError("an amqp-sequence section must hold a list")
            else:
                if r <= rank:
                    raise order_error(SECTION_NAMES[code], rank, body_type or "value")
                spans[r] = (pos, vpos, end)
            rank = r
            pos = end
    except (IndexError, struct.error):
        raise DecodeError("truncated message section") from None
    return spans, body_type


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
"""What :func:`map_lookup` returns for a key the map does not hold."""


def map_lookup(data: bytes, pos: int, key: str, limits: Limits = DEFAULT_LIMITS) -> Any:
    """The value of ``key`` (a symbol or string key) in the encoded map at ``pos``, or :data:`MISSING`.

    Walks the keys, skipping every other entry's value undecoded; decodes only the
    value found. Raises :class:`DecodeError` if ``pos`` holds no map or it is malformed.
    """
    want = key.encode("utf-8")
    size = len(want)
    c = data[pos]
    try:
        if c == 0xC1:
            end = pos + 2 + data[pos + 1]
            count = data[pos + 2]
            p = pos + 3
        elif c == 0xD1:
            length, count = _U32x2.unpack_from(data, pos + 1)
            end = pos + 5 + length
            p = pos + 9
        else:
            raise DecodeError(f"expected a map, got constructor {c:#04x}")
        if count % 2 or end > len(data):
            raise DecodeError("malformed map")
        for _ in range(count // 2):
            k = data[p]
            if k in (0xA3, 0xA1) and data[p + 1] == size and data[p + 2 : p + 2 + size] == want:
                return decode_at(data, p + 2 + size, limits)[0]
            if k in (0xB3, 0xB1) and _U32.unpack_from(data, p + 1)[0] == size:
                if data[p + 5 : p + 5 + size] == want:
                    return decode_at(data, p + 5 + size, limits)[0]
            p = skip(data, skip(data, p))
            if p > end:
                raise DecodeError("malformed map")
    except (IndexError, struct.error):
        raise DecodeError("truncated map") from None
    return MISSING


def data_bytes(data: bytes, span: Span) -> bytes:
    """The binaries of the data sections in ``span`` (a body of data sections), joined."""
    start, vpos, end = span
    parts: list[bytes] = []
    pos = start
    while pos < end:
        if pos != start:
            vpos = _section_code(data, pos)[1]
        c = data[vpos]
        if c == 0xA0:
            first = vpos + 2
            stop = first + data[vpos + 1]
        else:
            first = vpos + 5
            stop = first + _U32.unpack_from(data, vpos + 1)[0]
        if stop == end and pos == start:
            return data[first:stop]  # one section: a single copy
        parts.append(data[first:stop])
        pos = stop
    return b"".join(parts)
