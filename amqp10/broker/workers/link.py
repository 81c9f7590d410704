"""An internal link: one AMQP 1.0 connection between two workers, over a Unix socket.

The connection is our own engine (:mod:`amqp10.transport`) driven by an
:class:`asyncio.Protocol`: the bytes a read brings go to the engine at once, and what
the engine has to send goes out in one write per turn of the event loop (a burst of
transfers, settlements and flows costs one system call). Each side runs a
:class:`LinkHandler`: the worker that stands in for nodes it does not own opens the
connection (:class:`~.remote.RemoteNodes`), the worker that owns them answers it
(:class:`~.owner.NodeServer`).

A message crosses as a *record* (:func:`encode_record`): a fixed header with what the
queue needs (priority, durability, expiry, arrival, delivery count, sequence number, and
the message-id, group and due time a front end has read; the number a renumbered
scheduled message keeps), its format (one byte for the broker's own formats, else its
name), then the message's ``data``, the bytes as its publisher's protocol gave them,
never re-encoded.
Records travel in batches, one transfer a turn of the loop, each kind with a private
message-format:

- :data:`BATCH_FORMAT`: the publishes of one turn to one node (:func:`encode_batch`);
  its one outcome answers all of them;
- :data:`DELIVERY_FORMAT`: what one node delivered in one turn to one consumer of the
  other worker, each record with the owner's reference (:func:`encode_deliveries`),
  pre-settled;
- :data:`CONTROL_FORMAT`: control records (:data:`CONTROL`): a consumer's credit, in
  messages (:data:`GRANT`; negative: taken back, its credit lowered), its drains (:data:`DRAIN`, answered on its link with
  :data:`DRAINED_FORMAT`), and its outcomes by reference (:data:`OUTCOME`; a turn's outcomes
  of one code for consecutive references, one record with their count);
- :data:`REWRITE_FORMAT`: the new bytes of messages a consumer of the other worker changed
  while it held them (a 1.0 ``modified`` outcome's message annotations), each with its
  consumer and the owner's reference (:func:`encode_rewrites`), sent on the control link
  just before the control records whose outcomes apply to them; rare, pre-settled;
- :data:`REQUEST_FORMAT` and :data:`REPLY_FORMAT`: a question about one node (its
  status, a declaration, a purge, a deletion, a ``basic.get``) and the owner's answer,
  each an AMQP-encoded list (:func:`encode_request`), pre-settled; rare, so not batched.

So the engine works per batch, not per message: compiled, a message whose node is on
another worker costs 1.20-1.29x the machine instructions of a local one when it crosses
twice (its producer and consumer both away from its owner), 1.08-1.12x when it crosses
once (bench/RESULTS.md, "The record's numbers written natively"); interpreted, 1.44-1.51x
and 1.20-1.26x the bytecode instructions. Per message the compiled build works here on
machine numbers: the constants are ``Final`` (inlined, or held as native statics: not
looked up in the module's dict), a record's numbers read and written one at a time in
place (:mod:`.fixed`: librt's fixed-width functions, which mypyc compiles to native code;
no ``struct`` call, boxed number or tuple), deliveries written straight from their
messages into the transfer's bytes, and a record's message made by its format's maker (a
compiled function for the compiled front ends' formats).

Bad input from the peer worker (garbage, a truncated frame, a record that does not
decode, an exception while handling it) fails this link only: the connection is closed
and the handler is told (:meth:`LinkHandler.lost`), never the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Protocol

from ..._mypyc import mypyc_attr
from ...transport import Connection, ConnectionClosed, ConnectionFailed, Event
from ...types import decode, encode, symbol
from ..core import (
    AMQP010_FORMAT,
    AMQP091_FORMAT,
    AMQP1_FORMAT,
    QueuedMessage,
    made_as,
    maker_named,
)
from .fixed import (
    BytesWriter,
    read_f64_le,
    read_i32_le,
    read_i64_le,
    write_f64_le,
    write_i32_le,
    write_i64_le,
)

__all__ = [
    "BATCH_FORMAT",
    "BYTES",
    "BY_AN_EXCLUSIVE_CONSUMER",
    "CONTROL",
    "CONTROL_FORMAT",
    "DELIVERY_FORMAT",
    "DRAIN",
    "DRAINED_FORMAT",
    "GRANT",
    "OUTCOME",
    "STOP",
    "STREAM_OFFSET_FILTER",
    "RECORD_FORMAT",
    "REPLY_FORMAT",
    "REQUEST_FORMAT",
    "REWRITE_FORMAT",
    "InternalLink",
    "LinkHandler",
    "RecordError",
    "decode_batch",
    "decode_control",
    "decode_deliveries",
    "decode_record",
    "decode_request",
    "decode_rewrites",
    "encode_batch",
    "encode_deliveries",
    "listening",
    "encode_record",
    "encode_request",
    "encode_rewrites",
    "run_link",
]

log = logging.getLogger("amqp10.broker.workers")

STREAM_OFFSET_FILTER: Final = symbol("amqp10:stream-offset")
"""The filter-set key of a stream consumer's first offset: the 1.0 front end's
(:mod:`..amqp1.termini`) and an internal link's consumer of a stream elsewhere (a 0-9-1
consumer's ``x-stream-offset`` crosses as it). Here, below both (the front end imports the
workers' modules, not the other way)."""

RECORD_FORMAT: Final = 0x00A1_0001
"""The message-format of a record on an internal link (a private code: vendor bytes, version 1)."""
BATCH_FORMAT: Final = 0x00A1_0002
"""The message-format of a batch of records (each after its 4-byte length): what one node's
publishes of one turn of the loop cross as, one transfer and one outcome for all of them."""
DELIVERY_FORMAT: Final = 0x00A1_0003
"""The message-format of the deliveries of one turn to one consumer: each record after its
length and the owner's reference for it (what the consumer's outcome names). Pre-settled:
the outcomes and the consumer's credit, in messages, come back as control records."""
CONTROL_FORMAT: Final = 0x00A1_0004
"""The message-format of a batch of control records (:data:`CONTROL`), pre-settled."""
REQUEST_FORMAT: Final = 0x00A1_0005
"""The message-format of a question to the owner about one node (:func:`encode_request`)."""
REPLY_FORMAT: Final = 0x00A1_0006
"""The message-format of the owner's answer to a question (:func:`encode_request`)."""
REWRITE_FORMAT: Final = 0x00A1_0007
"""The message-format of the new bytes of messages a consumer changed (:func:`encode_rewrites`)."""
DRAINED_FORMAT: Final = 0x00A1_0008
"""The message-format of the owner's answer to a :data:`DRAIN` on the consumer's link,
after the deliveries it made for it: one byte, 1 if messages the consumer could be given
are left for want of credit, else 0. Pre-settled."""
_U32_SPAN: Final = 1 << 32
_U64_SPAN: Final = 1 << 64
"""(A record's numbers are unsigned: what a signed read or write of their width is off by.)"""
_LEN_SIZE: Final = 4
"""A batch's record follows its length (u32, little-endian)."""
_LEN_REF_SIZE: Final = 12
"""A delivery's record follows its length and the owner's reference (u32, u64)."""
CONTROL: Final = struct.Struct("<BQqBdI")
"""One control record: what (:data:`GRANT`, :data:`OUTCOME`, :data:`STOP`, :data:`BYTES` or
:data:`DRAIN`), the consumer (its id on the consuming side), the messages (or bytes) granted or
the first reference settled, the outcome's code,
a release's due time (a delayed retry, seconds since the epoch; 0.0: none), and how many
references from the first on the outcome settles, in order (a run of a turn's outcomes,
:meth:`~.remote.RemoteNodes.control`; 1 for the other records)."""
GRANT: Final = 1
OUTCOME: Final = 2
STOP: Final = 3
"""A consumer is cancelled: the owner delivers it nothing more, and waits for its
outcomes for what it holds (the link closes once it holds nothing)."""
BYTES: Final = 4
"""Byte credit for a consumer, in the measure its link names (:mod:`.bytecredit`)."""
DRAIN: Final = 9
"""A consumer drains (1.0 drain, 0-10 ``message.flush``): the owner delivers what the credit
granted so far allows now, takes back the rest, and answers on its link (:data:`DRAINED_FORMAT`)."""

_HEAD: Final = struct.Struct("<BBHHIQddd")
"""flags, priority, message-id length, group length, delivery count, seq, expiry, arrival, due."""
_HEAD_SIZE: Final = 42
"""(:data:`_HEAD`'s size: the offsets below are its fields', read and written one by one,
:mod:`.fixed`.)"""
_DURABLE: Final = 1
_EXPIRES: Final = 2
_HAS_ID: Final = 4
_HAS_GROUP: Final = 8
_HAS_DUE: Final = 16
_BY_EXCLUSIVE: Final = 32
_RENUMBERED: Final = 64
"""After the header, the number it keeps (:attr:`QueuedMessage.number`: a scheduled message
queued when due has a new seq; only a message with a due time can be one)."""
_NUMBER_SIZE: Final = 8
_SHORT_HEAD: Final = 128
"""The short head (:data:`_SHORT`): a message without expiry, group or due time (most)."""
_SHORT: Final = struct.Struct("<BBHIQd")
"""flags (with :data:`_SHORT_HEAD`), priority, message-id length, delivery count, seq, arrival:
what most messages carry, in 24 bytes, and three numbers fewer to pack and read."""
_SHORT_SIZE: Final = 24
BY_AN_EXCLUSIVE_CONSUMER: Final = object()
"""The origin (``QueuedMessage.origin``) the owner gives a message published on the
connection of its node's exclusive consumer on the publishing worker (:func:`by_exclusive_consumer`),
and the origin of the owner's stand-in for that consumer: a ``no-local`` queue
(core/qpid_queues.py) tells that connection's messages by it, as it does on one worker."""


class RecordError(ValueError):
    """A record from the peer worker that does not decode: the link fails."""


def encode_record(msg: QueuedMessage) -> bytes:
    """``msg`` as a record: the header, its format (:func:`_format_bytes`), message-id and group,
    then ``data`` as is.

    The group and due time are read here (a front end has usually read them as the message
    arrived) and carried, so the other worker's queue does not decode ``data`` for them."""
    w = BytesWriter()
    _write_record(w, msg, False, 0)
    return w.getvalue()


def _signed(n: int, bits: int) -> int:
    """``n``, an unsigned number of ``bits`` (32 or 64) past the signed range (or negative),
    as the signed number of the same bytes (what librt writes); raises ``ValueError`` for
    a number ``bits`` do not hold. (Rare: the common numbers are written as they are.)"""
    if n < 0 or n >> bits:
        raise ValueError(f"{n} is not an unsigned {bits}-bit number")
    return n - (1 << bits)


def _write_record(w: BytesWriter, msg: QueuedMessage, prefixed: bool, ref: int) -> None:
    """``msg``'s record into ``w`` (:func:`encode_record`); ``prefixed``: after its length and
    ``ref`` (:func:`encode_deliveries`). Each field a fixed-width write (:mod:`.fixed`: native
    code in the compiled build), ``data`` copied once, into the writer. The numbers are
    unsigned: one past the signed range is written as the signed number of the same bytes."""
    fmt = _FORMAT_OF.get(type(msg))
    if fmt is None:
        fmt = _FORMAT_OF[type(msg)] = _format_bytes(msg.format)
    mid = msg.message_id
    mid_bytes = b"" if mid is None else mid.encode()
    id_len = len(mid_bytes)
    if id_len >> 16:
        raise ValueError(f"a message-id of {id_len} bytes (at most 65535)")
    count = msg.delivery_count
    if count >> 31:
        count = _signed(count, 32)
    seq = msg.seq
    if seq >> 63:
        seq = _signed(seq, 64)
    if ref >> 63:
        ref = _signed(ref, 64)
    data = msg.data
    flags = _DURABLE if msg.durable else 0
    if mid is not None:
        flags |= _HAS_ID
    expiry = msg.expiry
    due = msg.due
    group = msg.group
    if expiry is None and due is None and group is None:  # (most messages: the short head)
        if prefixed:
            write_i32_le(w, _SHORT_SIZE + len(fmt) + id_len + len(data))
            write_i64_le(w, ref)
        head = flags | _SHORT_HEAD | msg.priority << 8 | id_len << 16  # (its first 4 bytes, one write)
        write_i32_le(w, head if id_len < 0x8000 else head - _U32_SPAN)
        write_i32_le(w, count)
        write_i64_le(w, seq)
        write_f64_le(w, msg.arrival)
        w.write(fmt)
        if id_len:
            w.write(mid_bytes)
        w.write(data)
        return
    number = 0
    if expiry is None:
        expiry = 0.0
    else:
        flags |= _EXPIRES
    if due is None:
        due = 0.0
    else:
        flags |= _HAS_DUE
        if msg.number != msg.seq:
            flags |= _RENUMBERED
            number = msg.number
            if number >> 63:
                number = _signed(number, 64)
    group_bytes = b"" if group is None else group.encode()
    group_len = len(group_bytes)
    if group_len >> 16:
        raise ValueError(f"a group of {group_len} bytes (at most 65535)")
    if group is not None:
        flags |= _HAS_GROUP
    if prefixed:
        size = _HEAD_SIZE + (_NUMBER_SIZE if flags & _RENUMBERED else 0) + len(fmt) + id_len
        write_i32_le(w, size + group_len + len(data))
        write_i64_le(w, ref)
    w.append(flags)
    w.append(msg.priority)
    w.append(id_len & 0xFF)
    w.append(id_len >> 8)
    w.append(group_len & 0xFF)
    w.append(group_len >> 8)
    write_i32_le(w, count)
    write_i64_le(w, seq)
    write_f64_le(w, expiry)
    write_f64_le(w, msg.arrival)
    write_f64_le(w, due)
    if flags & _RENUMBERED:
        write_i64_le(w, number)
    w.write(fmt)
    w.write(mid_bytes)
    w.write(group_bytes)
    w.write(data)


_CODED: Final = 0x80
"""In a record's format byte: the format is coded, the byte's other bits its index in
:data:`_CODED_FORMATS` and no name follows; without it, the byte is the length of the
name that follows (so a name is at most 127 bytes)."""
_CODED_FORMATS: Final[tuple[str, ...]] = (
    AMQP1_FORMAT,
    AMQP091_FORMAT,
    AMQP010_FORMAT,
    QueuedMessage.format,
)
"""The formats the broker's messages have (its front ends', and the plain one the broker
makes itself), a record's format byte alone."""
_FORMAT_SPAN: Final[tuple[int, ...]] = tuple(1 if b & _CODED else 1 + b for b in range(256))
"""A record's format byte -> how many bytes name its format (that byte included): read as
one index, as cheap as the length byte alone was."""
_FORMAT_OF: Final[dict[type, bytes]] = {}
"""A message's class -> the bytes that name its format in a record (:func:`_format_bytes`
of its ``format``): found by the class, not by reading the class's attribute."""
_FORMATS: Final[dict[bytes, Callable[[bytes], QueuedMessage]]] = {}
"""The same, back: a record's format bytes -> what makes a message of it (:func:`_maker`)."""


def _format_bytes(name: str) -> bytes:
    """The bytes that name format ``name`` in a record: its code (:data:`_CODED`), else its
    name's length byte and the name."""
    if name in _CODED_FORMATS:
        key = bytes((_CODED | _CODED_FORMATS.index(name),))
    else:
        raw = name.encode()
        if len(raw) >= _CODED:
            raise ValueError(f"a message format's name of {len(raw)} bytes (at most 127)")
        key = bytes((len(raw),)) + raw
    return key


def decode_record(payload: bytes, message_format: int = RECORD_FORMAT) -> QueuedMessage:
    """The message a record carries (``data`` sliced from it, not decoded); raises
    :class:`RecordError` (also for a transfer whose ``message_format`` is not a record's)."""
    if message_format != RECORD_FORMAT:
        raise RecordError(f"a transfer of message-format {message_format:#x}, not a record")
    return _decode_at(payload, 0, len(payload))


def by_exclusive_consumer(record: bytes) -> bytes:
    """``record`` (a publish) as one published on the connection of its node's exclusive
    consumer (of the publishing worker): decoded with :data:`BY_AN_EXCLUSIVE_CONSUMER` as its origin."""
    return bytes((record[0] | _BY_EXCLUSIVE,)) + record[1:]


def encode_batch(records: list[bytes]) -> bytes:
    """``records`` (from :func:`encode_record`) as one batch, each after its length."""
    w = BytesWriter()
    for r in records:
        write_i32_le(w, len(r))
        w.write(r)
    return w.getvalue()


def records_of(batch: bytes) -> list[bytes]:
    """The records of a batch :func:`encode_batch` made (one this worker sent: well formed)."""
    out = []
    pos = 0
    while pos < len(batch):
        start = pos + _LEN_SIZE
        pos = start + read_i32_le(batch, pos)
        out.append(batch[start:pos])
    return out


def decode_batch(payload: bytes, message_format: int) -> list[QueuedMessage]:
    """The messages of a batch, in order; raises :class:`RecordError`."""
    if message_format != BATCH_FORMAT:
        raise RecordError(
            f"a transfer of message-format {message_format:#x}, not a batch of records"
        )
    out = []
    pos = 0
    total = len(payload)
    try:
        while pos < total:
            start = pos + _LEN_SIZE
            size: int = read_i32_le(payload, pos)
            pos = start + size
            if pos > total or size < 0:  # (a length is never past 2**31)
                raise RecordError("records cut short")
            out.append(_decode_at(payload, start, pos))
    except IndexError as exc:
        raise RecordError(f"records that do not decode: {exc}") from None
    return out


def encode_deliveries(refs: list[int], msgs: list[QueuedMessage]) -> bytes:
    """The records of ``msgs`` for one consumer, each after its length and the owner's
    reference for it (written straight into the transfer's bytes: no record of its own)."""
    w = BytesWriter()
    for ref, msg in zip(refs, msgs, strict=True):
        _write_record(w, msg, True, ref)
    return w.getvalue()


def decode_deliveries(payload: bytes, message_format: int) -> list[tuple[int, QueuedMessage]]:
    """(reference, message) for each record of a deliveries transfer; raises :class:`RecordError`."""
    if message_format != DELIVERY_FORMAT:
        raise RecordError(f"a transfer of message-format {message_format:#x}, not deliveries")
    out = []
    pos = 0
    total = len(payload)
    try:
        while pos < total:
            start = pos + _LEN_REF_SIZE
            size: int = read_i32_le(payload, pos)
            ref: int = read_i64_le(payload, pos + _LEN_SIZE)
            if ref < 0:
                ref += _U64_SPAN
            pos = start + size
            if pos > total or size < 0:
                raise RecordError("records cut short")
            out.append((ref, _decode_at(payload, start, pos)))
    except IndexError as exc:
        raise RecordError(f"records that do not decode: {exc}") from None
    return out


def decode_control(
    payload: bytes, message_format: int
) -> list[tuple[int, int, int, int, float, int]]:
    """The control records of a control transfer; raises :class:`RecordError`."""
    size = CONTROL.size
    if message_format != CONTROL_FORMAT or len(payload) % size:
        raise RecordError("a control transfer that does not decode")
    unpack = CONTROL.unpack_from
    return [unpack(payload, pos) for pos in range(0, len(payload), size)]


_REWRITE: Final = struct.Struct("<QqI")
"""A rewrite's head: the consumer (its id on the consuming side), the owner's reference, the length of the bytes."""


def encode_rewrites(rewrites: list[tuple[int, int, bytes]]) -> bytes:
    """(consumer id, the owner's reference, the message's new bytes) of each message, as one transfer."""
    pack = _REWRITE.pack
    return b"".join(pack(cid, ref, len(data)) + data for cid, ref, data in rewrites)


def decode_rewrites(payload: bytes, message_format: int) -> list[tuple[int, int, bytes]]:
    """What :func:`encode_rewrites` made; raises :class:`RecordError`."""
    if message_format != REWRITE_FORMAT:
        raise RecordError(f"a transfer of message-format {message_format:#x}, not rewrites")
    out = []
    pos = 0
    total = len(payload)
    try:
        while pos < total:
            cid, ref, size = _REWRITE.unpack_from(payload, pos)
            start = pos + _REWRITE.size
            pos = start + size
            if pos > total:
                raise RecordError("rewrites cut short")
            out.append((cid, ref, payload[start:pos]))
    except struct.error as exc:
        raise RecordError(f"rewrites that do not decode: {exc}") from None
    return out


def encode_request(fields: list[Any]) -> bytes:
    """A question or an answer (its number first, then what it carries) as an AMQP list."""
    return encode(fields)


def decode_request(payload: bytes, message_format: int, expected: int) -> list[Any]:
    """The fields of a question or answer of ``expected`` format; raises :class:`RecordError`."""
    if message_format != expected:
        raise RecordError(f"a transfer of message-format {message_format:#x}, not {expected:#x}")
    try:
        fields = decode(payload)
    except Exception as exc:
        raise RecordError(f"a question or answer that does not decode: {exc}") from None
    if not isinstance(fields, list) or not fields or not isinstance(fields[0], int):
        raise RecordError("a question or answer that is not a numbered list")
    return fields


def _decode_at(payload: bytes, start: int, stop: int) -> QueuedMessage:
    """The record in ``payload[start:stop]``; raises :class:`RecordError`."""
    try:
        flags = payload[start]
        if flags & _SHORT_HEAD:
            return _decode_short(payload, start, stop, flags)
        id_len = payload[start + 2] | payload[start + 3] << 8
        group_len = payload[start + 4] | payload[start + 5] << 8
        count: int = read_i32_le(payload, start + 6)
        seq: int = read_i64_le(payload, start + 10)
        expiry = read_f64_le(payload, start + 18)
        due = read_f64_le(payload, start + 34)
        pos = start + _HEAD_SIZE
        number = 0
        if flags & _RENUMBERED:
            number = read_i64_le(payload, pos)
            if number < 0:
                number += _U64_SPAN
            pos += _NUMBER_SIZE
        end = pos + _FORMAT_SPAN[payload[pos]]
        make = _maker(payload[pos:end])
        mid_end = end + id_len
        group_end = mid_end + group_len
        if group_end > stop:  # (so is a format name past ``stop``)
            raise RecordError("a record cut short")
        mid = payload[end:mid_end].decode() if flags & _HAS_ID else None
        group = payload[mid_end:group_end].decode() if flags & _HAS_GROUP else None
        msg = made_as(
            make,
            payload[group_end:stop],
            payload[start + 1],
            bool(flags & _DURABLE),
            expiry if flags & _EXPIRES else None,
            mid,
            count if count >= 0 else count + _U32_SPAN,
            read_f64_le(payload, start + 26),
            seq if seq >= 0 else seq + _U64_SPAN,
        )
    except (IndexError, UnicodeDecodeError, LookupError) as exc:
        raise RecordError(f"a record that does not decode: {exc}") from None
    msg.read_already(group, due if flags & _HAS_DUE else None)
    if flags & _BY_EXCLUSIVE:
        msg.mark_origin(BY_AN_EXCLUSIVE_CONSUMER)
    if flags & _RENUMBERED:
        msg.keep_number(number)
    return msg


def _maker(key: bytes) -> Callable[[bytes], QueuedMessage]:
    """What makes a message of the format a record names (``key``: its format bytes, as
    :func:`_format_bytes` wrote them and :data:`_FORMAT_SPAN` measures them); raises
    ``IndexError`` (an unknown code or no byte), ``UnicodeDecodeError`` or ``LookupError``
    (a format no front end registered)."""
    make = _FORMATS.get(key)
    if make is None:
        size = key[0]
        name = _CODED_FORMATS[size - _CODED] if size & _CODED else key[1:].decode()
        make = _FORMATS[key] = maker_named(name)
    return make


def _decode_short(payload: bytes, start: int, stop: int, flags: int) -> QueuedMessage:
    """The record in ``payload[start:stop]``, in the short head (:data:`_SHORT`), its first
    byte ``flags``; raises ``IndexError``, ``UnicodeDecodeError``, ``LookupError`` or
    :class:`RecordError`."""
    pos = start + _SHORT_SIZE
    end = pos + _FORMAT_SPAN[payload[pos]]
    make = _maker(payload[pos:end])
    mid_end = end + (payload[start + 2] | payload[start + 3] << 8)
    count: int = read_i32_le(payload, start + 4)
    seq: int = read_i64_le(payload, start + 8)
    if mid_end > stop:  # (so is a format name past ``stop``)
        raise RecordError("a record cut short")
    msg = made_as(
        make,
        payload[mid_end:stop],
        payload[start + 1],
        bool(flags & _DURABLE),
        None,
        payload[end:mid_end].decode() if flags & _HAS_ID else None,
        count if count >= 0 else count + _U32_SPAN,
        read_f64_le(payload, start + 16),
        seq if seq >= 0 else seq + _U64_SPAN,
    )
    msg.read_already(None, None)
    if flags & _BY_EXCLUSIVE:
        msg.mark_origin(BY_AN_EXCLUSIVE_CONSUMER)
    return msg


class LinkHandler(Protocol):
    """What runs one side of an internal link (:class:`~.remote.RemoteNodes`, :class:`~.owner.NodeServer`)."""

    def started(self, link: InternalLink) -> None:
        """The socket is up: open the connection (the opening side) or wait for the peer's open."""

    def on_event(self, event: Event) -> None:
        """One engine event (a delivery, a settlement, credit, an attach, a detach...)."""

    def after_events(self) -> None:
        """A read's events are handled: top up credit once for the whole batch."""

    def before_write(self) -> None:
        """The engine's output is about to be written: send what was batched this turn."""

    def lost(self, reason: str) -> None:
        """The link is gone (closed, failed, or the peer broke it): fail what waits on it."""


@mypyc_attr(allow_interpreted_subclasses=True)  # (peers.py's _ServedLink)
class InternalLink(asyncio.Protocol):
    """The engine of one internal link over its socket, run by ``handler``."""

    def __init__(
        self,
        handler: LinkHandler,
        container_id: str,
        *,
        max_frame_size: int = 1 << 20,
        call_soon: Callable[[Callable[[], None]], object] | None = None,
        idle_timeout: float | None = None,
    ) -> None:
        """``call_soon`` runs a callback later in this turn of the loop (the running loop's,
        unless given: an in-memory bench drives the link without one). ``idle_timeout``
        (seconds; None: none): the link fails when the peer worker sends nothing for that
        long (stopped, hung), and empty frames keep it open while this side is idle: the
        engine's idle timers (``Connection.tick``), run by a timer of the loop, off the
        per-message path."""
        self.handler = handler
        self.connection = Connection(container_id, max_frame_size=max_frame_size, idle_timeout=idle_timeout)
        self._timer: asyncio.TimerHandle | None = None
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reason: str | None = None
        """Why the link went (None while it is up)."""
        self._flush_pending = False
        self._call_soon = (
            call_soon if call_soon is not None else asyncio.get_running_loop().call_soon
        )

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._guard(lambda: self.handler.started(self))
        self.flush_soon()
        if self.connection.idle_timeout and not self.closed:
            self._tick()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self._guard(lambda: self._handle(self.connection.receive_data(data)))
        self._flush()

    def eof_received(self) -> bool:
        self.fail("the peer worker closed its end")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(f"the socket closed: {exc}" if exc is not None else "the socket closed")

    # -- driving the engine -----------------------------------------------------------------
    def _handle(self, events: list[Event]) -> None:
        handler = self.handler
        for e in events:
            t = type(e)
            if t is ConnectionFailed or t is ConnectionClosed:
                err = e.error  # type: ignore[attr-defined]
                self.fail(
                    f"{err.condition}: {err.description}"
                    if err is not None
                    else "the peer worker closed the link"
                )
                return
            handler.on_event(e)
        handler.after_events()

    def _guard(self, step: Callable[[], None]) -> None:
        """Run ``step``; any exception it raises (bad input the engine let through, a
        record that does not decode) fails this link, not the broker."""
        try:
            step()
        except Exception as exc:
            log.warning("internal link %s failed", self.connection.container_id, exc_info=True)
            self.fail(f"internal link error: {exc}")

    def flush_soon(self) -> None:
        """Write what the engine has queued at the end of this turn of the loop (once)."""
        if not self._flush_pending and not self.closed:
            self._flush_pending = True
            self._call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        if self.closed:
            return
        self._guard(self.handler.before_write)
        if self.closed:
            return
        conn = self.connection
        events = conn.poll_events()
        if events:
            self._guard(lambda: self._handle(events))
            if self.closed:
                return
        data = conn.data_to_send()
        if data and self.transport is not None:
            self.transport.write(data)

    def _tick(self) -> None:
        """Run the engine's idle timers (a silent peer fails the link; an idle side sends an
        empty frame), then again at their next deadline."""
        self._timer = None
        if self.closed:
            return
        loop = asyncio.get_running_loop()
        conn = self.connection
        deadline = conn.tick(loop.time())
        events = conn.poll_events()  # (the idle-time-out's ConnectionFailed fails the link)
        if events:
            self._guard(lambda: self._handle(events))
        if self.closed:
            return
        self.flush_soon()  # (an empty frame, if one is due)
        if deadline is not None:
            self._timer = loop.call_at(deadline, self._tick)

    def fail(self, reason: str) -> None:
        """Close the link (once) and tell the handler why."""
        if self.closed:
            return
        self.closed = True
        self.reason = reason
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.transport is not None:
            data = b""
            try:  # what the engine queued (a close with the condition, on a violation) goes first
                data = self.connection.data_to_send()
            except Exception:
                pass
            if data:
                self.transport.write(data)
            self.transport.close()
        self.handler.lost(reason)


async def run_link(sock: socket.socket, handler: LinkHandler, container_id: str) -> InternalLink:
    """Run ``handler``'s side of an internal link over the connected Unix socket ``sock``."""
    loop = asyncio.get_running_loop()
    _, link = await loop.create_unix_connection(
        lambda: InternalLink(handler, container_id), sock=sock
    )
    return link


def listening(
    path: Path, serve_one: Callable[[], InternalLink], served: set[InternalLink]
) -> contextlib.AbstractAsyncContextManager[None]:
    """Accept internal links on the Unix socket ``path`` (one left there by this worker's
    previous process is replaced), each made by ``serve_one``; on leaving, stop accepting,
    fail every link in ``served`` and remove the socket."""
    return _Listening(path, serve_one, served)


class _Listening(contextlib.AbstractAsyncContextManager[None]):
    """What :func:`listening` answers (a class, not an async generator: mypyc compiles this module)."""

    def __init__(
        self, path: Path, serve_one: Callable[[], InternalLink], served: set[InternalLink]
    ) -> None:
        self.path = path
        self.serve_one = serve_one
        self.served = served
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self.server = await asyncio.get_running_loop().create_unix_server(
            self.serve_one, path=str(self.path)
        )

    async def __aexit__(self, *exc_info: object) -> None:
        assert self.server is not None
        self.server.close()
        for link in list(self.served):
            link.fail("the worker is stopping")
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
