"""AMQP 0-9-1 messages in the broker core: the container subclass and the 1.0 mappings.

An :class:`Amqp091Message` keeps what ``basic.publish`` brought, unchanged:
``data`` is the exchange and routing key (short strings), the content
header's property bytes as received (length-prefixed) and the body. A
0-9-1 consumer gets the property bytes back byte for byte; the routing key
and the ``headers`` table are read only when an exchange asks.

The conversions to and from AMQP 1.0 follow RabbitMQ's published mapping
(``docs/protocols.md`` has the table); they run once per message and target
protocol (:meth:`QueuedMessage.form`).
"""

from __future__ import annotations

import datetime as _dt
import struct
import uuid
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

from ...amqp091 import BasicProperties
from ...amqp091.fields import DecodeError as FieldDecodeError
from ...message import LazyMessage
from ...types import DecodeError, Header, Properties, symbol, timestamp, ulong
from ..core.message import (
    AMQP091_FORMAT,
    AMQP1_FORMAT,
    DEFAULT_PRIORITY,
    GROUP_HEADER,
    QueuedMessage,
    Routing,
    amqp1_body,
    amqp1_with_body,
    register_conversion,
    register_format,
)

__all__ = ["BCC", "CC", "FORMAT", "Amqp091Message", "Content", "cc_keys", "from_publish", "pack", "unpack"]

FORMAT: Final = AMQP091_FORMAT
_U32: Final = struct.Struct(">I")
_EMPTY_PROPERTIES = b"\x00\x00"
CC: Final = "CC"
BCC: Final = "BCC"
"""RabbitMQ's sender-selected distribution headers: arrays of extra routing keys
(``BCC``'s are removed from the message before it is delivered)."""
X_BASIC_TYPE: Final = "x-basic-type"
X_BASIC_APP_ID: Final = "x-basic-app-id"
AMQP_CONTENT_TYPE: Final = "message/vnd.rabbitmq.amqp"
"""The content type of a 0-9-1 body that holds 1.0 body sections (an amqp-value or sequence)."""


class Content:
    """A 0-9-1 message taken apart: where it was published, its properties, its body."""

    __slots__ = ("address", "body", "exchange", "properties", "routing_key")

    def __init__(
        self, exchange: str, routing_key: str, properties: bytes, body: bytes, address: bytes = b""
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.properties = properties
        """The content header's property flags and list (raw, as on the wire)."""
        self.body = body
        self.address = address
        """Exchange and routing key as two short strings, as ``basic.deliver`` ends (b"":
        not known, or no longer what ``exchange`` and ``routing_key`` say)."""


def pack(exchange: str, routing_key: str, properties: bytes, body: bytes) -> bytes:
    """``data`` of an :class:`Amqp091Message`."""
    x = exchange.encode()
    k = routing_key.encode()
    return b"".join((bytes((len(x),)), x, bytes((len(k),)), k, _U32.pack(len(properties)), properties, body))


def unpack(data: bytes) -> Content:
    """The inverse of :func:`pack`."""
    n = data[0]
    exchange = data[1 : 1 + n].decode()
    pos = 1 + n
    n = data[pos]
    routing_key = data[pos + 1 : pos + 1 + n].decode()
    pos += 1 + n
    address = data[:pos]
    (plen,) = _U32.unpack_from(data, pos)
    pos += 4
    return Content(exchange, routing_key, data[pos : pos + plen], data[pos + plen :], address)


class Amqp091Message(QueuedMessage):
    """A message that arrived by ``basic.publish``: ``data`` as :func:`pack` makes it."""

    __slots__ = ("_cc",)
    format = FORMAT
    has_extra_routing_keys = True  # RabbitMQ's CC and BCC headers

    _cc: tuple[str, ...]

    def content(self) -> Content:
        return unpack(self.data)

    def properties(self) -> BasicProperties:
        props, _ = BasicProperties.decode(self.content().properties, 0)
        assert isinstance(props, BasicProperties)
        return props

    def _read_routing(self) -> Routing:
        return Routing(unpack(self.data).routing_key)

    def _read_headers(self) -> Mapping[str, Any]:
        try:
            return self.properties().headers or {}
        except (FieldDecodeError, ValueError, IndexError, struct.error):
            return {}

    def _read_group(self) -> str | None:  # (a copy made from ``data`` alone: a dead letter)
        group = self.headers.get(GROUP_HEADER)
        return None if group is None else _group_text(group)

    def extra_routing_keys(self) -> tuple[str, ...]:
        """RabbitMQ's sender-selected distribution: the ``CC`` and ``BCC`` headers' keys.
        :func:`from_publish` reads them as the message arrives (BCC is gone from ``data``
        by then); a copy made later (a dead letter) reads ``CC`` from its headers."""
        try:
            return self._cc
        except AttributeError:
            cc = self._cc = cc_keys(self.headers.get(CC))
            return cc

    def _with_headers(self, change: Mapping[str, Any]) -> bytes | None:
        """``data`` with ``change`` merged into the properties' headers (None: unreadable)."""
        c = self.content()
        try:
            p = self.properties()
        except (FieldDecodeError, ValueError, IndexError, struct.error):
            return None
        p.headers = {**(p.headers or {}), **change}
        buf = bytearray()
        p.encode(buf)
        return pack(c.exchange, c.routing_key, bytes(buf), c.body)

    def with_header(self, name: str, value: Any) -> bytes:
        return self._with_headers({name: value}) or self.data

    def with_stream_position(self, offset: int) -> bytes:
        """The message with RabbitMQ's ``x-stream-offset`` header (what stream consumers see)."""
        return self._with_headers({"x-stream-offset": offset}) or self.data

    def dead_lettered(self, death: Mapping[str, Any], now: float) -> QueuedMessage:
        """The message as RabbitMQ republishes a dead letter: its ``x-death`` header updated
        (the newest death first, a repeat of the same queue and reason counted up and moved
        to the front; ``original-expiration`` for a message that had an ``expiration``,
        which it loses), the ``x-first-death-*`` headers set on the first death, published
        to the dead-letter exchange with the dead-letter routing key (then without ``CC``)
        or its own."""
        headers = dict(self.headers)
        deaths = [dict(d) for d in headers.get("x-death") or [] if isinstance(d, Mapping)]
        stamp = _dt.datetime.fromtimestamp(int(now), _dt.UTC)
        record: dict[str, Any] = {}
        for i, d in enumerate(deaths):
            if d.get("queue") == death["queue"] and d.get("reason") == death["reason"]:
                record = deaths.pop(i)
                break
        record.update(
            count=int(record.get("count", 0)) + 1,
            reason=death["reason"],
            queue=death["queue"],
            time=stamp,
            exchange=death["exchange"],
        )
        record["routing-keys"] = [*death["routing-keys"], *cc_keys(headers.get(CC))]  # as RabbitMQ: CC's too
        c = self.content()
        try:
            p: BasicProperties | None = self.properties()
        except (FieldDecodeError, ValueError, IndexError, struct.error):
            p = None
        if p is not None and p.expiration is not None:
            record["original-expiration"] = p.expiration
        deaths.insert(0, record)
        change: dict[str, Any] = {"x-death": deaths}
        new_key = death.get("new-key")  # routed by that key alone: RabbitMQ drops CC
        if "x-first-death-reason" not in headers:
            change.update({
                "x-first-death-reason": death["reason"],
                "x-first-death-queue": death["queue"],
                "x-first-death-exchange": death["exchange"],
            })  # fmt: skip
        m = super().dead_lettered(death, now)  # a copy, its expiry cleared
        assert isinstance(m, Amqp091Message)
        m._cc = () if new_key is not None else cc_keys(headers.get(CC))
        if p is not None:
            dropped = (CC,) if new_key is not None else ()
            p.headers = {k: v for k, v in {**(p.headers or {}), **change}.items() if k not in dropped}
            p.expiration = None
            buf = bytearray()
            p.encode(buf)
            exchange = death.get("dead-letter-exchange", c.exchange)
            m.data = pack(exchange, c.routing_key if new_key is None else new_key, bytes(buf), c.body)
            m.size, m.arrival = len(m.data), now
            m.forget_fields()  # read again from the new data when asked
        return m


def _made(data: bytes) -> Amqp091Message:
    """An Amqp091Message of ``data`` (a compiled call: :func:`~amqp10.broker.core.register_format`)."""
    return Amqp091Message(data)


register_format(Amqp091Message, _made)


def cc_keys(value: Any) -> tuple[str, ...]:
    """The routing keys of a ``CC`` or ``BCC`` header: an array's strings (else none)."""
    if not isinstance(value, list):
        return ()
    return tuple(k for k in value if isinstance(k, str))


def from_publish(
    exchange: str,
    routing_key: str,
    properties: BasicProperties,
    raw_properties: bytes,
    body: bytes,
    now: float,
    origin: object = None,
) -> Amqp091Message:
    """The container for a ``basic.publish`` (priority, persistence, expiration, message-id read now;
    the ``CC`` and ``BCC`` headers' routing keys too, with ``BCC`` taken out, as RabbitMQ does);
    ``origin``: the connection it came on (see ``QueuedMessage.mark_origin``)."""
    cc: tuple[str, ...] = ()
    headers = properties.headers
    if headers and (CC in headers or BCC in headers):
        cc = (*cc_keys(headers.get(CC)), *cc_keys(headers.get(BCC)))
        if BCC in headers:  # the recipients never see who else got it
            properties.headers = {k: v for k, v in headers.items() if k != BCC}
            buf = bytearray()
            properties.encode(buf)
            raw_properties = bytes(buf)
    expiry = None
    if properties.expiration is not None:
        try:
            expiry = now + max(int(properties.expiration), 0) / 1000
        except ValueError:
            expiry = None
    msg = Amqp091Message(
        pack(exchange, routing_key, raw_properties, body),
        priority=DEFAULT_PRIORITY if properties.priority is None else properties.priority,
        durable=properties.delivery_mode == 2,
        expiry=expiry,
        message_id=properties.message_id,
        arrival=now,
    )
    msg._routing = Routing(routing_key)
    msg._cc = cc
    msg._due = None  # (_read_due's answer for 0-9-1, set now: a queue asks per message)
    if origin is not None:
        msg._origin = origin  # mark_origin without a call per message
    group = headers.get(GROUP_HEADER) if headers else None  # (read now: the headers are decoded)
    msg._group = None if group is None else _group_text(group)  # (as _routing: no call per message)
    return msg


def _group_text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


# -- 0-9-1 -> 1.0 ---------------------------------------------------------------------------

_SIMPLE = (str, int, float, bool, bytes, uuid.UUID, type(None))


def _to_amqp1_value(v: Any) -> Any:
    if isinstance(v, _SIMPLE):
        return v
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, _dt.datetime):
        return timestamp(int(v.replace(tzinfo=v.tzinfo or _dt.UTC).timestamp() * 1000))
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    return None  # tables and arrays have no place in application-properties


def to_amqp1(msg: QueuedMessage) -> bytes:
    """The 1.0 encoding of a 0-9-1 message (RabbitMQ's mapping; body as one data section)."""
    c = unpack(msg.data)
    try:
        p, _ = BasicProperties.decode(c.properties, 0)
    except (FieldDecodeError, ValueError, IndexError, struct.error):
        p = BasicProperties()
    assert isinstance(p, BasicProperties)
    header = Header(durable=msg.durable or None, priority=p.priority, ttl=None)
    if p.expiration is not None:
        try:
            header.ttl = max(int(p.expiration), 0)
        except ValueError:
            pass
    props = Properties(
        message_id=p.message_id,
        user_id=p.user_id.encode() if p.user_id is not None else None,
        subject=c.routing_key or None,
        reply_to=p.reply_to,
        correlation_id=p.correlation_id,
        content_type=symbol(p.content_type) if p.content_type is not None else None,
        content_encoding=symbol(p.content_encoding) if p.content_encoding is not None else None,
        creation_time=timestamp(p.timestamp * 1000) if p.timestamp is not None else None,
    )
    app: dict[str, Any] = {}
    annotations: dict[Any, Any] = {}
    for k, v in (p.headers or {}).items():
        value = _to_amqp1_value(v)
        if value is None:
            continue
        if k == GROUP_HEADER:
            props.group_id = _group_text(value)
        elif k.startswith("x-"):
            annotations[symbol(k)] = value
        else:
            app[k] = value
    if p.type is not None:
        annotations[symbol(X_BASIC_TYPE)] = p.type
    if p.app_id is not None:
        annotations[symbol(X_BASIC_APP_ID)] = p.app_id
    if msg.delivery_count:
        header.delivery_count = msg.delivery_count
    return amqp1_with_body(c.body, header=header, properties=props, annotations=annotations, application=app)


# -- 1.0 -> 0-9-1 ---------------------------------------------------------------------------


def _shortstr(v: Any) -> str | None:
    if v is None:
        return None
    s = v.hex() if isinstance(v, bytes) else str(v)
    return s if len(s.encode()) < 256 else None


def _to_field_value(v: Any) -> Any:
    if isinstance(v, timestamp):
        return _dt.datetime.fromtimestamp(int(v) / 1000, _dt.UTC)
    if isinstance(v, ulong | int | float | bool | str | bytes | type(None)):
        return v
    if isinstance(v, uuid.UUID):
        return str(v)
    return str(v)


def to_amqp091(msg: QueuedMessage) -> bytes:
    """The 0-9-1 form (:func:`pack` layout) of a 1.0 message: properties mapped, body as bytes
    (data sections joined; a string amqp-value as UTF-8; anything else as its 1.0 encoding)."""
    exchange, key = msg.published_to
    try:
        lm = LazyMessage(msg.data)
        h = lm.header
        p = lm.properties
        app = lm.application_properties or {}
        annotations = lm.message_annotations or {}
        payload, form = amqp1_body(lm)
    except DecodeError:
        return pack(exchange, key, _EMPTY_PROPERTIES, msg.data)
    content_type = None if p is None or p.content_type is None else str(p.content_type)
    if form == "text":
        content_type = content_type or "text/plain"
    elif form == "encoded":
        content_type = AMQP_CONTENT_TYPE  # RabbitMQ's: the body is a 1.0 encoding
    headers: dict[str, Any] = {k: _to_field_value(v) for k, v in app.items()}
    if p is not None and p.group_id is not None:
        headers[GROUP_HEADER] = str(p.group_id)
    for k, v in annotations.items():
        name = str(k)
        if name == "x-opt-offset":
            name = "x-stream-offset"  # a stream's offset, as 0-9-1 stream consumers read it
        if name.startswith("x-") and name not in (X_BASIC_TYPE, X_BASIC_APP_ID):
            headers[name] = _to_field_value(v)
    props = BasicProperties(
        content_type=content_type,
        content_encoding=None if p is None or p.content_encoding is None else str(p.content_encoding),
        headers=headers or None,
        delivery_mode=2 if h is not None and h.durable else 1,
        priority=None if h is None or h.priority is None else int(h.priority),
        correlation_id=None if p is None else _shortstr(p.correlation_id),
        reply_to=None if p is None else _shortstr(p.reply_to),
        expiration=None if h is None or h.ttl is None else str(int(h.ttl)),
        message_id=None if p is None else _shortstr(p.message_id),
        timestamp=None if p is None or p.creation_time is None else int(p.creation_time) // 1000,
        type=_shortstr(annotations.get(symbol(X_BASIC_TYPE))),
        user_id=None if p is None or p.user_id is None else bytes(p.user_id).decode(errors="replace"),
        app_id=_shortstr(annotations.get(symbol(X_BASIC_APP_ID))),
    )
    raw = bytearray()
    props.encode(raw)
    return pack(exchange, key or (None if p is None else p.subject) or "", bytes(raw), payload)


register_conversion(FORMAT, AMQP1_FORMAT, to_amqp1)
register_conversion(AMQP1_FORMAT, FORMAT, to_amqp091)
