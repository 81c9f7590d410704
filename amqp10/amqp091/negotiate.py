"""Which protocol a connection speaks, from its first 8 bytes.

The broker's listener reads 8 bytes and calls ``identify_header``: it names the
protocol (0-9-1, 0-9, 0-8, or 1.0 plain/SASL/TLS) or, for anything else (0-10,
a 1.0 header with another version, not AMQP at all), gives the header to write
back before closing, as 0-9-1 §4.2.2 says: the preferred version of the same
family (the 1.0 header for the 1.0 family, 0-9-1's otherwise).

For the pre-1.0 protocols the listener then makes
``Connection("server", dialect=protocol.dialect)`` and feeds it everything it
read, the 8 header bytes included.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from ..transport.framing import AMQP_HEADER, SASL_HEADER, TLS_HEADER
from .dialects import AMQP_0_8, AMQP_0_9, AMQP_0_9_1, Dialect

__all__ = ["HEADER_SIZE", "Protocol", "Unsupported", "identify_header"]

HEADER_SIZE: Final = 8


class Protocol(enum.Enum):
    """A protocol the broker serves."""

    AMQP_0_9_1 = "0-9-1"
    AMQP_0_9 = "0-9"
    AMQP_0_8 = "0-8"
    AMQP_1_0 = "1.0"
    AMQP_1_0_SASL = "1.0 SASL"
    AMQP_1_0_TLS = "1.0 TLS"

    @property
    def dialect(self) -> Dialect | None:
        """The 0-9-1 engine's dialect for the pre-1.0 protocols, else None."""
        return _DIALECT.get(self)


_DIALECT: Final = {
    Protocol.AMQP_0_9_1: AMQP_0_9_1,
    Protocol.AMQP_0_9: AMQP_0_9,
    Protocol.AMQP_0_8: AMQP_0_8,
}

_KNOWN: Final = {
    **{h: p for p, d in _DIALECT.items() for h in d.accepted_headers},
    AMQP_HEADER: Protocol.AMQP_1_0,
    SASL_HEADER: Protocol.AMQP_1_0_SASL,
    TLS_HEADER: Protocol.AMQP_1_0_TLS,
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Unsupported:
    """A header we do not serve: write ``reply``, then close."""

    reply: bytes
    """The protocol header to answer with."""


def identify_header(data: bytes) -> Protocol | Unsupported:
    """The protocol of a connection whose first 8 bytes are ``data``."""
    if len(data) != HEADER_SIZE:
        raise ValueError(f"a protocol header is {HEADER_SIZE} bytes, got {len(data)}")
    known = _KNOWN.get(bytes(data))
    if known is not None:
        return known
    if data[:4] == b"AMQP" and data[4] in (0, 2, 3) and data[5] == 1:
        # the 1.0 family (protocol id 0, 2 or 3, major 1) at another version
        return Unsupported(reply=bytes(data[:5]) + b"\x01\x00\x00")
    return Unsupported(reply=AMQP_0_9_1.header)
