"""AMQP 0-10 messages in the broker core: the container subclass and the mappings to and
from 1.0 (and, through 1.0, 0-9-1).

An :class:`Amqp010Message` keeps what ``message.transfer`` brought: ``data`` is the header
segment as received (its ``delivery-properties`` and ``message-properties`` structs, each a
``struct32``) after its 4-octet length, then the body. A 0-10 subscriber gets the structs
back as they came (``redelivered`` set on a redelivery).

The mappings (``docs/protocols.md`` has the table): 0-10 → 1.0 directly; 0-10 → 0-9-1 as
0-10 → 1.0 → 0-9-1, through the 1.0 and 0-9-1 forms the core already converts between
(:func:`~amqp10.broker.core.format_named`), so no front end imports another; and back.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from typing import Any, Final

from ...amqp010.codec import DecodeError as CodecError
from ...amqp010.codec import Reader, decode_struct32, encode_struct32, encode_structs
from ...amqp010.model import Compound
from ...amqp010.spec import STRUCTS
from ...message import LazyMessage
from ...types import DecodeError, Header, Properties, symbol, timestamp
from ..core.message import (
    AMQP010_FORMAT,
    AMQP091_FORMAT,
    AMQP1_FORMAT,
    DEFAULT_PRIORITY,
    GROUP_HEADER,
    QueuedMessage,
    Routing,
    amqp1_body,
    amqp1_with_body,
    format_named,
    register_conversion,
    register_format,
)

__all__ = [
    "FORMAT",
    "GROUP_HEADER",
    "SUBJECT",
    "Amqp010Message",
    "from_transfer",
    "pack",
    "split",
    "unpack",
    "with_struct",
    "reply_to_address",
    "reply_to_struct",
]

FORMAT: Final = AMQP010_FORMAT
SUBJECT: Final = "qpid.subject"
"""The application header ``qpid.messaging`` keeps a message's subject in."""
APP_ID: Final = "x-basic-app-id"
"""The 1.0 message annotation a 0-10 ``app-id`` becomes (0-9-1's ``app_id`` maps to it too)."""
MESSAGE_ID_HEADER: Final = "x-amqp-1.0-message-id"
"""A 1.0 message-id that is not a UUID (0-10's message-id is one): kept in this header."""
_GROUP_HEADER_BYTES: Final = GROUP_HEADER.encode()
_U32 = struct.Struct(">I")
_DELIVERY = STRUCTS["delivery-properties"]
_PROPERTIES = STRUCTS["message-properties"]
_REPLY_TO = STRUCTS["reply-to"]
_PERSISTENT = 2


def pack(headers: list[Compound] | bytes, body: bytes) -> bytes:
    """``data`` of an :class:`Amqp010Message`: the header structs (or their encoding) and the body."""
    if isinstance(headers, bytes):
        raw = headers
    else:
        buf = bytearray()
        encode_structs(buf, headers)
        raw = bytes(buf)
    return _U32.pack(len(raw)) + raw + body


def split(data: bytes) -> tuple[bytes, bytes]:
    """The header segment (its structs, encoded) and the body of ``data``."""
    (n,) = _U32.unpack_from(data, 0)
    return data[4 : 4 + n], data[4 + n :]


def with_struct(raw: bytes, struct_: Compound) -> bytes:
    """Header segment ``raw`` with ``struct_`` in place of the struct of its kind (first if
    there is none); the other structs are kept as they are, not decoded."""
    code = struct_.spec.code
    out = bytearray()
    encode_struct32(out, struct_)
    mine = bytes(out)
    parts: list[bytes] = []
    pos, end = 0, len(raw)
    while pos + 6 <= end:
        size = _U32.unpack_from(raw, pos)[0]
        nxt = pos + 4 + size
        if int.from_bytes(raw[pos + 4 : pos + 6], "big") != code:
            parts.append(raw[pos:nxt])
        pos = nxt
    return mine + b"".join(parts) + raw[pos:]


def unpack(data: bytes) -> tuple[list[Compound], bytes]:
    """The header structs and the body of ``data`` (unreadable structs: none)."""
    (n,) = _U32.unpack_from(data, 0)
    headers: list[Compound] = []
    try:
        r = Reader(data, 4, 4 + n)
        while r.left:
            headers.append(decode_struct32(r))
    except CodecError:
        headers = []
    return headers, data[4 + n :]


def _find(headers: list[Compound], name: str) -> Compound | None:
    for h in headers:
        if h.spec.name == name:
            return h
    return None


def reply_to_address(rt: Compound | None) -> str | None:
    """A 0-10 reply-to as one address (qpid's convention): ``exchange/key``, or the key alone
    for the default exchange."""
    if rt is None:
        return None
    exchange, key = rt.get("exchange", ""), rt.get("routing_key", "")
    if exchange:
        return f"{exchange}/{key}" if key else exchange
    return key or None


def reply_to_struct(address: str | None) -> Compound | None:
    """The inverse of :func:`reply_to_address`."""
    if not address:
        return None
    exchange, sep, key = address.partition("/")
    if not sep:
        return Compound(_REPLY_TO, routing_key=address)
    return Compound(_REPLY_TO, exchange=exchange, routing_key=key)


class Amqp010Message(QueuedMessage):
    """A message that arrived by ``message.transfer``: ``data`` as :func:`pack` makes it."""

    __slots__ = ()
    format = FORMAT

    def parts(self) -> tuple[Compound, Compound, bytes]:
        """Its delivery-properties, message-properties (empty ones if absent) and body."""
        headers, body = unpack(self.data)
        dp = _find(headers, "delivery-properties") or Compound(_DELIVERY)
        mp = _find(headers, "message-properties") or Compound(_PROPERTIES)
        return dp, mp, body

    def _read_routing(self) -> Routing:
        dp, _, _ = self.parts()
        return Routing(dp.get("routing_key"))

    def _read_headers(self) -> Mapping[str, Any]:
        _, mp, _ = self.parts()
        headers: Mapping[str, Any] = mp.get("application_headers", {})
        return headers

    def with_header(self, name: str, value: Any) -> bytes:
        """``data`` with ``name`` set in the message-properties' application headers."""
        headers, body = unpack(self.data)
        mp = _find(headers, "message-properties")
        if mp is None:
            mp = Compound(_PROPERTIES)
            headers.append(mp)
        mp.values["application_headers"] = {**(mp.get("application_headers") or {}), name: value}
        return pack(headers, body)

    def _read_group(self) -> str | None:
        if (
            _GROUP_HEADER_BYTES not in self.data
        ):  # no such header: nothing to decode (most messages)
            return None
        group = self.headers.get(GROUP_HEADER)
        return None if group is None else str(group)


register_format(Amqp010Message)


def from_transfer(command: Compound, exchange: str, now: float) -> Amqp010Message:
    """The container for a ``message.transfer`` (priority, persistence, ttl, message-id read now)."""
    dp = command.header("delivery-properties") or Compound(_DELIVERY)
    mp = command.header("message-properties") or Compound(_PROPERTIES)
    ttl = dp.get("ttl")
    message_id = mp.get("message_id")
    raw = command.raw_headers
    if dp.get("exchange") is None:  # where it was published, as a subscriber is told
        dp.values["exchange"] = exchange
        if command.header("delivery-properties") is None:
            command.headers.insert(0, dp)
        if raw is not None:  # (the message-properties, with its map, not encoded again)
            raw = with_struct(raw, dp)
    msg = Amqp010Message(
        pack(command.headers if raw is None else raw, command.body),
        priority=dp.get("priority", DEFAULT_PRIORITY),
        durable=dp.get("delivery_mode") == _PERSISTENT,
        expiry=now + ttl / 1000 if ttl else None,
        message_id=str(message_id) if message_id is not None else None,
        arrival=now,
    )
    msg._routing = Routing(dp.get("routing_key", ""))
    return msg


# -- 0-10 -> 1.0 ----------------------------------------------------------------------------
_SIMPLE = (str, int, float, bool, bytes, uuid.UUID, type(None))


def to_amqp1(msg: QueuedMessage) -> bytes:
    """The 1.0 encoding of a 0-10 message (body as one data section)."""
    assert isinstance(msg, Amqp010Message)
    dp, mp, body = msg.parts()
    app: dict[str, Any] = {}
    annotations: dict[Any, Any] = {}
    subject = dp.get("routing_key")
    group = None
    for k, v in mp.get("application_headers", {}).items():
        if k == SUBJECT and isinstance(v, str):
            subject = v
        elif k == GROUP_HEADER and isinstance(v, str):
            group = v
        elif isinstance(v, _SIMPLE) and k.startswith("x-"):
            annotations[symbol(k)] = v
        elif isinstance(v, _SIMPLE):
            app[k] = v
    if mp.get("app_id") is not None:
        annotations[symbol(APP_ID)] = bytes(mp["app_id"]).decode(errors="replace")
    correlation = mp.get("correlation_id")
    message_id: Any = mp.get("message_id")
    if message_id is None and isinstance(app.get(MESSAGE_ID_HEADER), str):
        message_id = app.pop(MESSAGE_ID_HEADER)
    header = Header(
        durable=msg.durable or None,
        priority=dp.get("priority"),
        ttl=dp.get("ttl"),
        delivery_count=msg.delivery_count or None,
    )
    props = Properties(
        message_id=message_id,
        user_id=mp.get("user_id"),
        subject=subject or None,
        reply_to=reply_to_address(mp.get("reply_to")),
        correlation_id=bytes(correlation).decode(errors="replace")
        if correlation is not None
        else None,
        content_type=symbol(mp["content_type"]) if mp.get("content_type") else None,
        content_encoding=symbol(mp["content_encoding"]) if mp.get("content_encoding") else None,
        creation_time=timestamp(dp["timestamp"] * 1000) if dp.get("timestamp") else None,
        group_id=group,
    )
    return amqp1_with_body(
        body, header=header, properties=props, annotations=annotations, application=app
    )


# -- 1.0 -> 0-10 ----------------------------------------------------------------------------
def _value(v: Any) -> Any:
    if isinstance(v, timestamp):
        return int(v) // 1000
    if isinstance(v, _SIMPLE):
        return v
    return str(v)


def amqp1_to_parts(data: bytes, exchange: str, key: str) -> bytes:
    """The 0-10 form (:func:`pack` layout) of a 1.0 message's encoding: properties mapped,
    body as bytes (data sections joined; a string amqp-value as UTF-8 ``text/plain``;
    anything else as its 1.0 encoding)."""
    try:
        lm = LazyMessage(data)
        h, p = lm.header, lm.properties
        app = dict(lm.application_properties or {})
        annotations = lm.message_annotations or {}
        payload, form = amqp1_body(lm)
    except DecodeError:
        return pack([Compound(_DELIVERY, exchange=exchange, routing_key=key)], data)
    content_type = None if p is None or p.content_type is None else str(p.content_type)
    if form == "text":
        content_type = content_type or "text/plain"
    elif form == "encoded":
        content_type = content_type or "application/x-amqp-1.0"
    headers: dict[str, Any] = {k: _value(v) for k, v in app.items()}
    for k, v in annotations.items():
        if str(k).startswith("x-") and str(k) != APP_ID:
            headers[str(k)] = _value(v)
    message_id = None
    if p is not None and p.message_id is not None:
        if isinstance(p.message_id, uuid.UUID):
            message_id = p.message_id
        else:
            headers[MESSAGE_ID_HEADER] = str(p.message_id)
    subject = None if p is None else p.subject
    if subject:
        headers[SUBJECT] = subject
    if p is not None and p.group_id is not None:
        headers[GROUP_HEADER] = str(p.group_id)
    app_id = annotations.get(symbol(APP_ID))
    correlation = None if p is None else p.correlation_id
    dp = Compound(
        _DELIVERY,
        priority=None if h is None or h.priority is None else int(h.priority),
        delivery_mode=_PERSISTENT if h is not None and h.durable else 1,
        ttl=None if h is None or h.ttl is None else int(h.ttl),
        timestamp=None if p is None or p.creation_time is None else int(p.creation_time) // 1000,
        exchange=exchange,
        routing_key=key or subject or "",
    )
    mp = Compound(
        _PROPERTIES,
        content_length=len(payload),
        message_id=message_id,
        correlation_id=None
        if correlation is None
        else (correlation if isinstance(correlation, bytes) else str(correlation).encode()),
        reply_to=reply_to_struct(None if p is None else p.reply_to),
        content_type=content_type,
        content_encoding=None
        if p is None or p.content_encoding is None
        else str(p.content_encoding),
        user_id=None if p is None or p.user_id is None else bytes(p.user_id),
        app_id=None if app_id is None else str(app_id).encode(),
        application_headers=headers or None,
    )
    return pack([dp, mp], payload)


def from_amqp1(msg: QueuedMessage) -> bytes:
    exchange, key = msg.published_to
    return amqp1_to_parts(msg.data, exchange, key)


# -- 0-10 <-> 0-9-1, through 1.0 -----------------------------------------------------------
def _as_amqp1(msg: QueuedMessage, data: bytes) -> QueuedMessage:
    """A 1.0-format copy of ``msg`` with ``data`` (the 1.0 front end's class, from the core)."""
    m = format_named(AMQP1_FORMAT)(
        data, priority=msg.priority, durable=msg.durable, delivery_count=msg.delivery_count
    )
    exchange, key = msg.published_to
    m.mark_published(exchange, key)
    return m


def to_amqp091(msg: QueuedMessage) -> Any:
    return _as_amqp1(msg, msg.form(AMQP1_FORMAT)).form(AMQP091_FORMAT)


def from_amqp091(msg: QueuedMessage) -> bytes:
    exchange, key = msg.published_to
    return amqp1_to_parts(msg.form(AMQP1_FORMAT), exchange, key)


register_conversion(FORMAT, AMQP1_FORMAT, to_amqp1)
register_conversion(AMQP1_FORMAT, FORMAT, from_amqp1)
register_conversion(FORMAT, AMQP091_FORMAT, to_amqp091)
register_conversion(AMQP091_FORMAT, FORMAT, from_amqp091)
