"""AMQP 1.0 messages in the broker core: the container subclass, read from a transfer's bytes.

:func:`parse_transfer` reads what queues need (header fields, absolute expiry,
message-id) from the encoded sections without decoding the body, usually
without decoding anything; :class:`Amqp1Message` keeps the bytes as they came
and reads its routing fields (``subject``, ``to``, application-properties)
only when an exchange asks for them.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, Final

from ...message import LazyMessage
from ...types import (
    DecodeError,
    MessageAnnotations,
    Properties,
    decode_at,
    encode_into,
    symbol,
    timestamp,
    ulong,
)
from ..core.message import AMQP1_FORMAT, QueuedMessage, Routing, register_format

__all__ = [
    "FORMAT",
    "X_OPT_DEATHS",
    "Amqp1Message",
    "delivery_time",
    "parse_transfer",
    "stream_filter_value",
    "with_routing_annotations",
]

FORMAT = AMQP1_FORMAT
_PROPERTY_FIELDS = tuple(f.attr for f in Properties.FIELDS)
_HEADER_FIELDS = ("ttl", "first_acquirer")  # the rest of the header is the container's own
X_OPT_DEATHS = symbol("x-opt-deaths")
X_STREAM_FILTER_VALUE = symbol("x-stream-filter-value")
X_CC = symbol("x-cc")
"""RabbitMQ's annotation of extra routing keys (a list of strings), as 0-9-1's ``CC`` header."""
# scheduled delivery (core/scheduled.py): absolute ms, an Azure Service Bus timestamp, a delay in ms
X_OPT_DELIVERY_TIME = symbol("x-opt-delivery-time")
X_OPT_SCHEDULED_ENQUEUE_TIME = symbol("x-opt-scheduled-enqueue-time")
X_OPT_DELIVERY_DELAY = symbol("x-opt-delivery-delay")
X_OPT_PARTITION_KEY = symbol("x-opt-partition-key")


class Amqp1Message(QueuedMessage):
    """A message that arrived over AMQP 1.0: ``data`` is its encoded sections."""

    __slots__ = ()
    format = FORMAT
    has_extra_routing_keys = True  # RabbitMQ's x-cc annotation

    def _read_routing(self) -> Routing:
        try:
            p = LazyMessage(self.data).properties
        except DecodeError:
            return Routing()
        if p is None:
            return Routing()
        return Routing(None if p.subject is None else str(p.subject), None if p.to is None else str(p.to))

    def _read_headers(self) -> Mapping[str, Any]:
        try:
            headers = LazyMessage(self.data).application_properties
        except DecodeError:
            return {}
        return dict(headers) if headers else {}

    def _read_fields(self) -> Mapping[str, Any]:
        try:
            lm = LazyMessage(self.data)
            p = lm.properties
            h = lm.header
        except DecodeError:
            return {}
        fields: dict[str, Any] = {}
        for section, names in ((p, _PROPERTY_FIELDS), (h, _HEADER_FIELDS)):
            if section is not None:
                for name in names:
                    v = getattr(section, name)
                    if v is not None:
                        fields[name] = v
        return fields

    def _read_group(self) -> str | None:
        group = self.field("group_id")
        return None if group is None else str(group)

    def partition_key(self) -> str | None:
        if b"x-opt-partition-key" not in self.data:  # not annotated: nothing to decode
            return None
        try:
            annotations = LazyMessage(self.data).message_annotations
        except DecodeError:
            return None
        key = None if not annotations else annotations.get(X_OPT_PARTITION_KEY)
        return None if key is None else str(key)

    def extra_routing_keys(self) -> tuple[str, ...]:
        if b"x-cc" not in self.data:  # no such annotation: nothing to decode
            return ()
        try:
            annotations = LazyMessage(self.data).message_annotations
        except DecodeError:
            return ()
        cc = (annotations or {}).get(X_CC)
        return tuple(k for k in cc if isinstance(k, str)) if isinstance(cc, list) else ()

    def _read_due(self) -> float | None:
        if b"x-opt-" not in self.data:  # no annotation of ours: nothing to decode
            return None
        try:
            annotations = LazyMessage(self.data).message_annotations
        except DecodeError:
            return None
        if not annotations:
            return None
        at = delivery_time(annotations)
        if at is not None:
            return at
        delay = annotations.get(X_OPT_DELIVERY_DELAY)
        if isinstance(delay, int) and not isinstance(delay, bool) and delay > 0:
            return self.arrival + delay / 1000
        return None

    def annotate(self, annotations: Mapping[Any, Any]) -> None:
        """Merge ``annotations`` into its message annotations (a ``modified`` outcome's, as
        RabbitMQ 4 keeps them with the message it requeues or dead-letters)."""
        try:
            self.data = LazyMessage(self.data).with_annotations(annotations)
        except DecodeError:
            return
        self.forget_fields()

    def with_header(self, name: str, value: Any) -> bytes:
        """The bytes with a message annotation ``name`` (a 1.0 bare message is not changed
        on its way: its application properties stay as the sender made them)."""
        try:
            return LazyMessage(self.data).with_annotations({symbol(name): value})
        except DecodeError:
            return self.data

    def with_stream_position(self, offset: int) -> bytes:
        """The bytes with ``x-opt-offset`` and ``x-opt-timestamp`` message annotations."""
        try:
            return LazyMessage(self.data).with_annotations(
                {symbol("x-opt-offset"): offset, symbol("x-opt-timestamp"): timestamp(int(self.arrival * 1000))}
            )
        except DecodeError:
            return self.data

    def dead_lettered(self, death: Mapping[str, Any], now: float) -> QueuedMessage:
        """The message with its ``x-opt-deaths`` message annotation updated (RabbitMQ 4's
        form of 0-9-1's ``x-death``): the newest death first; a repeat of the same
        queue and reason counts up and moves to the front."""
        try:
            lm = LazyMessage(self.data)
            annotations = lm.message_annotations or {}
            deaths = [dict(d) for d in (annotations.get(X_OPT_DEATHS) or []) if isinstance(d, Mapping)]
        except DecodeError:
            return super().dead_lettered(death, now)
        stamp = timestamp(int(now * 1000))
        record: dict[Any, Any] = {}
        for i, d in enumerate(deaths):
            if d.get(symbol("queue")) == death["queue"] and d.get(symbol("reason")) == symbol(death["reason"]):
                record = deaths.pop(i)
                break
        if not record:
            record = {
                symbol("queue"): death["queue"],
                symbol("reason"): symbol(death["reason"]),
                symbol("count"): ulong(0),
                symbol("first-time"): stamp,
                symbol("exchange"): death["exchange"],
                symbol("routing-keys"): list(death["routing-keys"]),
            }
        record[symbol("count")] = ulong(int(record.get(symbol("count"), 0)) + 1)
        record[symbol("last-time")] = stamp
        deaths.insert(0, record)
        data = lm.with_annotations({X_OPT_DEATHS: deaths})
        m = Amqp1Message(
            data,
            priority=self.priority,
            durable=self.durable,
            expiry=None,
            message_id=self.message_id,
            delivery_count=self.delivery_count,
            arrival=now,
        )
        m._due = None  # a dead letter is not held back again
        return m

    def redelivery_form(self) -> bytes:
        """The bytes to send again: the header carries the delivery-count (Part 3 §3.2.1)."""
        if not self.delivery_count:
            return self.data
        try:
            return LazyMessage(self.data).with_header(delivery_count=self.delivery_count, first_acquirer=False)
        except DecodeError:
            return self.data


def _made(data: bytes) -> Amqp1Message:
    """An Amqp1Message of ``data`` (a compiled call: :func:`~amqp10.broker.core.register_format`)."""
    return Amqp1Message(data)


register_format(Amqp1Message, _made)


_X_EXCHANGE, _X_ROUTING_KEY = symbol("x-exchange"), symbol("x-routing-key")
_X_STREAM_OFFSET = symbol("x-stream-offset")


def with_routing_annotations(data: bytes, msg: QueuedMessage, offset: int | None = None) -> bytes:
    """``data`` with RabbitMQ's routing annotations (``x-exchange``, ``x-routing-key``: what
    it was published with) if it has no message-annotations section, and a stream's
    message (``offset``) with ``x-stream-offset``: RabbitMQ 4 delivers every message with
    them, and its clients read the annotations of each."""
    if offset is not None:
        try:
            return LazyMessage(data).with_annotations({_X_STREAM_OFFSET: offset})
        except DecodeError:
            return data
    spans = _scan_sections(data)
    if spans is None or spans[2] >= 0:
        return data  # annotated already (or of an unusual shape: sent as it is)
    pos = spans[1]
    if pos < 0:  # no properties: after the header and delivery annotations
        pos = 0
        while pos < len(data) and data[pos + 2] in (0x70, 0x71):
            pos = decode_at(data, pos)[1]
    exchange, key = msg.published_to
    section = bytearray()
    encode_into(section, MessageAnnotations({_X_EXCHANGE: exchange, _X_ROUTING_KEY: key}))
    return data[:pos] + bytes(section) + data[pos:]


def delivery_time(annotations: Mapping[Any, Any]) -> float | None:
    """When message ``annotations`` ask the message to be delivered (``x-opt-delivery-time``,
    or Service Bus's ``x-opt-scheduled-enqueue-time``: ms since the epoch), in seconds since
    the epoch; None: they do not."""
    for key in (X_OPT_DELIVERY_TIME, X_OPT_SCHEDULED_ENQUEUE_TIME):
        at = annotations.get(key)
        if isinstance(at, int) and not isinstance(at, bool):
            return int(at) / 1000
    return None


def stream_filter_value(msg: QueuedMessage) -> str | None:
    """A 1.0 message's ``x-stream-filter-value`` annotation (RabbitMQ's stream filtering), or None."""
    data = msg.form(FORMAT)
    if b"x-stream-filter-value" not in data:
        return None
    try:
        annotations = LazyMessage(data).message_annotations
    except DecodeError:
        return None
    v = (annotations or {}).get(X_STREAM_FILTER_VALUE)
    return v if isinstance(v, str) else None


def parse_transfer(payload: bytes, now: float, need_ids: bool = True, origin: object = None) -> Amqp1Message:
    """What routing needs from a message: header fields, absolute expiry, message-id;
    ``origin``: the connection it arrived on (see ``QueuedMessage.mark_origin``).

    The common shapes (sections with ``00 53 xx`` descriptors; an absent or
    empty header and properties) are scanned here without building a
    :class:`LazyMessage`; the properties are decoded only if they can hold an
    absolute-expiry-time or the node needs message-ids (duplicate detection,
    the store). Anything unusual takes the general path, which also reports
    malformed messages.
    """
    spans = _scan_sections(payload)
    if spans is None:
        slow = _parse_slow(payload, now)
        if origin is not None:
            slow._origin = origin
        return slow
    hpos, ppos, mapos = spans
    durable = False
    priority = 4
    expiry = None
    delivery_count = 0
    if hpos >= 0 and payload[hpos + 3] != 0x45:
        h = _decode_at(payload, hpos)[0]
        durable = bool(h.durable)
        if h.priority is not None:
            priority = int(h.priority)
        if h.ttl:
            expiry = now + h.ttl / 1000
        delivery_count = int(h.delivery_count or 0)
    message_id = None
    group = None  # group-id is the 11th field: only a list of more than 10 can hold one
    if ppos >= 0:
        c = payload[ppos + 3]
        if c == 0xC0:
            count = payload[ppos + 5]
        elif c == 0x45:
            count = 0
        else:
            count = 9  # list32 (or invalid): decode
        need_id = need_ids or durable
        if count > 8 or (count and need_id):
            p = _decode_at(payload, ppos)[0]
            if p.absolute_expiry_time:
                abs_exp = p.absolute_expiry_time / 1000
                expiry = abs_exp if expiry is None else min(expiry, abs_exp)
            if p.message_id is not None and need_id:
                message_id = repr(p.message_id)
            if p.group_id is not None:
                group = str(p.group_id)
    m = Amqp1Message(
        payload,
        priority=priority,
        durable=durable,
        expiry=expiry,
        message_id=message_id,
        delivery_count=delivery_count,
        arrival=now,
    )
    m._group = group  # read here for free: a queue's take need not decode it
    if mapos < 0:
        m._due = None  # no message annotations: not scheduled
    if origin is not None:
        m._origin = origin  # mark_origin without a call per message
    return m

def _parse_slow(payload: bytes, now: float) -> Amqp1Message:
    lm = LazyMessage(payload)
    h = lm.header
    durable = False
    priority = 4
    expiry = None
    if h is not None:
        durable = bool(h.durable)
        if h.priority is not None:
            priority = int(h.priority)
        if h.ttl:
            expiry = now + h.ttl / 1000
    p = lm.properties
    message_id = None
    if p is not None:
        if p.absolute_expiry_time:
            abs_exp = p.absolute_expiry_time / 1000
            expiry = abs_exp if expiry is None else min(expiry, abs_exp)
        if p.message_id is not None:
            message_id = repr(p.message_id)
    return Amqp1Message(
        payload,
        priority=priority,
        durable=durable,
        expiry=expiry,
        message_id=message_id,
        delivery_count=int(h.delivery_count or 0) if h is not None else 0,
        arrival=now,
    )


# Width of what follows a section value's constructor, for the fast scan: >= 0 fixed
# bytes, -1 a one-byte size, -4 a four-byte size; None: not handled here (described
# values, invalid constructors), which sends the message down the general path.
_WIDTH: Final[list[int | None]] = [None] * 256
for _c, _w in (
    ((0x40, 0x41, 0x42, 0x43, 0x44, 0x45), 0),
    ((0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56), 1),
    ((0x60, 0x61), 2),
    ((0x70, 0x71, 0x72, 0x73, 0x74), 4),
    ((0x80, 0x81, 0x82, 0x83, 0x84), 8),
    ((0x94, 0x98), 16),
    ((0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0), -1),
    ((0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0), -4),
):
    for _x in _c:
        _WIDTH[_x] = _w
del _c, _w, _x
# section descriptor code -> rank in the spec's order (the three body kinds share 5)
_SECTION_RANK: Final[list[int]] = [-1] * 256
for _code, _rank in ((0x70, 0), (0x71, 1), (0x72, 2), (0x73, 3), (0x74, 4), (0x75, 5), (0x76, 5), (0x77, 5), (0x78, 6)):
    _SECTION_RANK[_code] = _rank
del _code, _rank
_unpack_u32: Final = struct.Struct(">I").unpack_from
_decode_at = decode_at


def _scan_sections(raw: bytes) -> tuple[int, int, int] | None:
    """Where the header, properties and message-annotations sections start (-1: absent),
    for well-formed messages of the usual shape; None sends the message to :class:`LazyMessage`."""
    n = len(raw)
    pos = 0
    rank = -1
    last = -1
    hpos = ppos = mapos = -1
    width = _WIDTH
    try:
        while pos < n:
            if raw[pos] != 0x00 or raw[pos + 1] != 0x53:
                return None
            code = raw[pos + 2]
            r = _SECTION_RANK[code]
            if r < 0 or r < rank or (r == rank and (r != 5 or code != last or code == 0x77)):
                return None  # out of order, repeated, or not a section: let LazyMessage say
            c = raw[pos + 3]
            w = width[c]
            if w is None or (code == 0x75 and c != 0xA0 and c != 0xB0):
                return None
            if code == 0x76 and c != 0xC0 and c != 0x45 and c != 0xD0:
                return None
            if r == 0:
                hpos = pos
            elif r == 3:
                ppos = pos
            elif r == 2:
                mapos = pos
            if w == -1:
                pos += 5 + raw[pos + 4]
            elif w == -4:
                pos += 8 + _unpack_u32(raw, pos + 4)[0]
            else:
                pos += 4 + w
            rank = r
            last = code
    except IndexError:
        return None
    if pos != n:
        return None
    return hpos, ppos, mapos
