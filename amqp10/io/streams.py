"""Byte-stream helpers a server needs around an accepted connection.

- :class:`ReplayStream`: a stream whose first bytes (a protocol header the listener
  already read to choose the protocol) are given back first;
- :func:`quick_acker`: acknowledge every read at once (Linux ``TCP_QUICKACK``);
- :func:`tls_identity`: the subject of a verified TLS client certificate (SASL EXTERNAL).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from typing import Any

from anyio.abc import ByteStream, SocketAttribute

__all__ = ["ReplayStream", "quick_acker", "tls_identity"]

_TCP_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)


class ReplayStream(ByteStream):
    """A connection's stream: the first bytes (the protocol header, already read) given back
    first; with ``quick_ack``, every read is acknowledged at once (Linux ``TCP_QUICKACK``).

    Quick ACKs matter to 0-9-1 clients that write frame by frame with Nagle's algorithm on
    (amqplib: ``tune-ok`` then ``open``): the second write waits for the ACK of the first,
    which a delayed ACK holds back by 40 ms, on every connection's handshake.
    """

    def __init__(self, stream: ByteStream, head: bytes = b"", *, quick_ack: bool = False) -> None:
        self._stream = stream
        self._head = head
        self._ack = quick_acker(stream) if quick_ack else None

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._head:
            data, self._head = self._head[:max_bytes], self._head[max_bytes:]
            return data
        data = await self._stream.receive(max_bytes)
        if self._ack is not None:
            self._ack()
        return data

    async def send(self, item: bytes) -> None:
        await self._stream.send(item)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return self._stream.extra_attributes


def quick_acker(stream: ByteStream) -> Callable[[], None] | None:
    """A call that acknowledges what was read at once (Linux ``TCP_QUICKACK``; the kernel
    resets it, so it is made after every read); None where there is no such option."""
    if _TCP_QUICKACK is None:
        return None
    option = _TCP_QUICKACK
    try:
        sock: socket.socket = stream.extra(SocketAttribute.raw_socket)
    except Exception:
        return None
    broken = False

    def ack() -> None:
        nonlocal broken
        if not broken:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, option, 1)
            except OSError:
                broken = True

    return ack


def tls_identity(stream: ByteStream) -> str | None:
    """The subject of a verified TLS client certificate (``CN=...,O=...``), for SASL
    EXTERNAL; None without one."""
    from anyio.streams.tls import TLSAttribute

    try:
        cert = stream.extra(TLSAttribute.peer_certificate)
    except Exception:
        return None
    if not cert:
        return None
    parts = []
    subject: Any = cert.get("subject", ())  # typeshed's _PeerCertRetDictType is loose here
    for rdn in subject:
        for key, value in rdn:
            short = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C"}.get(key, key)
            parts.append(f"{short}={value}")
    return ",".join(parts) or None
