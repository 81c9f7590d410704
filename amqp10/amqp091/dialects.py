"""AMQP 0-9 and 0-8 as tables of their differences from 0-9-1.

A ``Dialect`` puts the 0-9-1 method classes on the wire the way an older
version does: some methods are absent, a few have other method ids
(0-8's ``connection.close`` is 60) or a shorter field list (0-8's
``basic.consume`` has no ``arguments``; its ``channel.open-ok`` is empty).
Field names differ too (``ticket`` for ``reserved-1``, ``nowait``), but the
wire only sees positions and types. A test derives every difference from
``../shared/spec/amqp-0-9/`` and ``amqp-0-8/`` XML and checks these tables
against it. Methods only the older versions have (``access.request``,
``connection.redirect``, ``channel.alert``, the 0-9 ``message``, ``file``,
``stream``, ``dtx`` and ``tunnel`` classes) are not served: receiving one is
``NOT_IMPLEMENTED``, as from any unknown method.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from . import methods as m
from .base import Method
from .errors import ConnectionException
from .fields import decode_table, encode_table, get_longstr, get_shortstr, put_longstr, put_shortstr
from .methods import METHODS, ReplyCode

__all__ = ["AMQP_0_8", "AMQP_0_9", "AMQP_0_9_1", "DIALECTS", "Dialect", "Variant", "dialect_for_header"]

_STRUCTS = {t: struct.Struct(">" + c) for t, c in {"octet": "B", "short": "H", "long": "I", "longlong": "Q", "timestamp": "Q"}.items()}  # fmt: skip
_CID_MID: Final = struct.Struct(">HH")


@dataclass(frozen=True)
class Variant:
    """A 0-9-1 method as a dialect puts it on the wire."""

    method: type[Method]
    method_id: int
    """The dialect's method id."""
    fields: tuple[str, ...] | None = None
    """The attributes it carries, in wire order (a prefix of the 0-9-1 fields); None: all."""


def _encode_fields(buf: bytearray, method: Method, fields: tuple[tuple[str, str], ...]) -> None:
    nbits = -1
    for attr, tp in fields:
        if tp == "bit":
            if nbits < 0 or nbits == 8:
                buf.append(0)
                nbits = 0
            if getattr(method, attr):
                buf[-1] |= 1 << nbits
            nbits += 1
            continue
        nbits = -1
        value = getattr(method, attr)
        if tp in _STRUCTS:
            buf += _STRUCTS[tp].pack(value)
        elif tp == "shortstr":
            put_shortstr(buf, value)
        elif tp == "longstr":
            put_longstr(buf, value)
        else:
            encode_table(buf, value)


def _decode_fields(
    data: bytes, off: int, fields: tuple[tuple[str, str], ...]
) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    nbits = -1
    octet = 0
    for attr, tp in fields:
        if tp == "bit":
            if nbits < 0 or nbits == 8:
                octet = data[off]
                off += 1
                nbits = 0
            out[attr] = bool(octet & (1 << nbits))
            nbits += 1
            continue
        nbits = -1
        if tp in _STRUCTS:
            st = _STRUCTS[tp]
            (out[attr],) = st.unpack_from(data, off)
            off += st.size
        elif tp == "shortstr":
            out[attr], off = get_shortstr(data, off)
        elif tp == "longstr":
            out[attr], off = get_longstr(data, off)
        else:
            out[attr], off = decode_table(data, off)
    return out, off


_Decoder = Callable[[bytes, int], tuple[Method, int]]


def _plain_encoder(method: Method, buf: bytearray) -> None:
    method.encode(buf)


class Dialect:
    """One protocol version's wire form of the method classes."""

    def __init__(
        self,
        name: str,
        header: bytes,
        version: tuple[int, int],
        *,
        absent: frozenset[type[Method]] = frozenset(),
        variants: tuple[Variant, ...] = (),
        reply_codes_absent: frozenset[int] = frozenset(),
        reply_codes_extra: tuple[tuple[int, str], ...] = (),
        aliases: tuple[bytes, ...] = (),
    ) -> None:
        self.name = name
        """``"0-9-1"``, ``"0-9"``, ``"0-8"``."""
        self.header = header
        """The 8-byte protocol header (the one a server answers with)."""
        self.accepted_headers = frozenset({header, *aliases})
        """Every header that asks for this version."""
        self.version = version
        """``(version-major, version-minor)`` as sent in ``connection.start``."""
        self.absent = absent
        """0-9-1 methods this version does not have."""
        self.variants = variants
        self.reply_codes_absent = reply_codes_absent
        """0-9-1 reply codes this version does not define (sent anyway, as RabbitMQ does)."""
        self.reply_codes_extra = reply_codes_extra
        """``(code, spec name)`` of reply codes only this version defines."""
        by_method = {v.method: v for v in variants}
        self._decoders: dict[int, _Decoder] = {}
        self._encoders: dict[type[Method], tuple[bytes, Callable[[Method, bytearray], None]]] = {}
        for cls in METHODS.values():
            if cls in absent:
                continue
            v = by_method.get(cls)
            mid = cls.METHOD_ID if v is None else v.method_id
            index = cls.CLASS_ID << 16 | mid
            if v is None or v.fields is None:
                self._decoders[index] = cls.decode
                self._encoders[cls] = (_CID_MID.pack(cls.CLASS_ID, mid), _plain_encoder)
            else:
                types = dict(cls.FIELDS)
                fields = tuple((a, types[a]) for a in v.fields)
                self._decoders[index] = self._variant_decoder(cls, fields)
                self._encoders[cls] = (
                    _CID_MID.pack(cls.CLASS_ID, mid),
                    self._variant_encoder(fields),
                )

    @staticmethod
    def _variant_decoder(cls: type[Method], fields: tuple[tuple[str, str], ...]) -> _Decoder:
        def decode(data: bytes, off: int) -> tuple[Method, int]:
            kwargs, off = _decode_fields(data, off, fields)
            return cls(**kwargs), off

        return decode

    @staticmethod
    def _variant_encoder(
        fields: tuple[tuple[str, str], ...],
    ) -> Callable[[Method, bytearray], None]:
        def encode(method: Method, buf: bytearray) -> None:
            _encode_fields(buf, method, fields)

        return encode

    def __repr__(self) -> str:
        return f"<Dialect AMQP {self.name}>"

    def supports(self, method: type[Method]) -> bool:
        """Whether this version has the method."""
        return method in self._encoders

    def plain_ids(self, method: type[Method]) -> bytes | None:
        """The encoded class and method ids of ``method`` if this version lays out its
        arguments as 0-9-1 does (None: it lacks the method or its fields differ)."""
        entry = self._encoders.get(method)
        if entry is None or entry[1] is not _plain_encoder:
            return None
        return entry[0]

    def encode_method(self, buf: bytearray, method: Method) -> None:
        """Append class id, method id and arguments; a method the version lacks is a ValueError."""
        try:
            ids, encode = self._encoders[type(method)]
        except KeyError:
            raise ValueError(f"{method.NAME} does not exist in AMQP {self.name}") from None
        buf += ids
        encode(method, buf)

    def decode_method(self, data: bytes) -> Method:
        """The method in a method frame's payload.

        Unknown ids are ``NOT_IMPLEMENTED`` (540); malformed or trailing arguments
        ``SYNTAX_ERROR`` (502), as ``ConnectionException``.
        """
        try:
            class_id, method_id = _CID_MID.unpack_from(data, 0)
        except struct.error:
            raise ConnectionException(
                ReplyCode.FRAME_ERROR, "FRAME_ERROR - method frame too short"
            ) from None
        decode = self._decoders.get(class_id << 16 | method_id)
        if decode is None:
            raise ConnectionException(
                ReplyCode.NOT_IMPLEMENTED,
                f"NOT_IMPLEMENTED - unknown method {class_id}.{method_id} in AMQP {self.name}",
                class_id,
                method_id,
            )
        try:
            method, end = decode(data, 4)
        except (ValueError, IndexError, struct.error) as exc:
            raise ConnectionException(
                ReplyCode.SYNTAX_ERROR,
                f"SYNTAX_ERROR - malformed arguments of method {class_id}.{method_id}: {exc}",
                class_id,
                method_id,
            ) from None
        if end != len(data):
            raise ConnectionException(
                ReplyCode.SYNTAX_ERROR,
                f"SYNTAX_ERROR - {len(data) - end} bytes after the arguments of {method.NAME}",
                class_id,
                method_id,
            )
        return method


AMQP_0_9_1: Final = Dialect(
    "0-9-1",
    b"AMQP\x00\x00\x09\x01",
    (0, 9),
    # the header some early 0-9-1 clients sent; RabbitMQ takes it as 0-9-1 too
    aliases=(b"AMQP\x01\x01\x09\x01",),
)

# in neither older version: RabbitMQ's extensions and 0-9-1's additions
_NEWER = frozenset({
    m.ConnectionBlocked, m.ConnectionUnblocked, m.ConnectionUpdateSecret, m.ConnectionUpdateSecretOk,
    m.ExchangeBind, m.ExchangeBindOk, m.ExchangeUnbind, m.ExchangeUnbindOk,
    m.BasicNack, m.BasicRecover, m.BasicRecoverOk, m.ConfirmSelect, m.ConfirmSelectOk,
})  # fmt: skip

AMQP_0_9: Final = Dialect(
    "0-9",
    b"AMQP\x01\x01\x00\x09",
    (0, 9),
    # 0-9's basic.recover (100, no reply) is 0-9-1's recover-async on the wire
    absent=_NEWER,
    reply_codes_absent=frozenset({ReplyCode.UNEXPECTED_FRAME}),
    reply_codes_extra=((310, "not-delivered"), (312, "no-route")),
)

AMQP_0_8: Final = Dialect(
    "0-8",
    b"AMQP\x01\x01\x08\x00",
    (8, 0),
    absent=_NEWER | {m.QueueUnbind, m.QueueUnbindOk},
    variants=(
        Variant(m.ConnectionClose, 60),
        Variant(m.ConnectionCloseOk, 61),
        Variant(m.ChannelOpenOk, 11, ()),
        Variant(
            m.BasicConsume,
            20,
            ("reserved_1", "queue", "consumer_tag", "no_local", "no_ack", "exclusive", "no_wait"),
        ),
    ),
    reply_codes_absent=frozenset(
        {ReplyCode.UNEXPECTED_FRAME, ReplyCode.NO_CONSUMERS, ReplyCode.PRECONDITION_FAILED}
    ),
    reply_codes_extra=((310, "not delivered"),),
)

DIALECTS: Final = {d.name: d for d in (AMQP_0_9_1, AMQP_0_9, AMQP_0_8)}
"""The dialects by name."""

_BY_HEADER: Final = {h: d for d in DIALECTS.values() for h in d.accepted_headers}


def dialect_for_header(header: bytes) -> Dialect | None:
    """The dialect a connection asks for with its first 8 bytes, or None: not one of ours."""
    return _BY_HEADER.get(bytes(header))
