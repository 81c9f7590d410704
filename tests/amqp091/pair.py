"""The pair harness: a client-role and a server-role engine pumping bytes in memory.

Also ``frames(data)``: split bytes that went over the wire back into frames,
and ``method_frame``/``raw_frame`` to craft frames for tests that play a
misbehaving peer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from amqp10.amqp091 import (
    AMQP_0_9_1,
    Connection,
    Dialect,
    Event,
    LoginRequested,
    VirtualHostRequested,
)
from amqp10.amqp091.base import Method
from amqp10.amqp091.framing import FRAME_METHOD, FRAME_PREFIX


@dataclass(frozen=True)
class Frame:
    """One frame seen on the wire."""

    type: int
    channel: int
    payload: bytes
    method: Method | None


def frames(data: bytes, dialect: Dialect = AMQP_0_9_1) -> list[Frame]:
    """Split whole frames (after an optional protocol header) and decode the methods."""
    out = []
    pos = 8 if data[:4] == b"AMQP" else 0
    while pos < len(data):
        ftype, channel, size = FRAME_PREFIX.unpack_from(data, pos)
        payload = data[pos + 7 : pos + 7 + size]
        assert data[pos + 7 + size] == 0xCE
        method = dialect.decode_method(payload) if ftype == FRAME_METHOD else None
        out.append(Frame(ftype, channel, payload, method))
        pos += 8 + size
    return out


def raw_frame(ftype: int, channel: int, payload: bytes, end: int = 0xCE) -> bytes:
    return FRAME_PREFIX.pack(ftype, channel, len(payload)) + payload + bytes([end])


def method_frame(channel: int, method: Method, dialect: Dialect = AMQP_0_9_1) -> bytes:
    buf = bytearray()
    dialect.encode_method(buf, method)
    return raw_frame(FRAME_METHOD, channel, bytes(buf))


class Pair:
    """A client and a server engine; ``pump()`` moves bytes until both are quiet."""

    def __init__(
        self,
        chunk: int | None = None,
        server: dict[str, Any] | None = None,
        client: dict[str, Any] | None = None,
        auto: bool = True,
    ) -> None:
        self.chunk = chunk
        self.server = Connection("server", **(server or {}))
        self.client = Connection("client", **(client or {}))
        self.auto = auto
        """Answer LoginRequested and VirtualHostRequested with accept."""
        self.server_events: list[Event] = []
        self.client_events: list[Event] = []
        self.wire: list[tuple[str, bytes]] = []

    def _feed(self, conn: Connection, data: bytes) -> list[Event]:
        if self.chunk is None:
            return conn.receive_data(data)
        events: list[Event] = []
        for i in range(0, len(data), self.chunk):
            events += conn.receive_data(data[i : i + self.chunk])
        return events

    def pump(self) -> tuple[list[Event], list[Event]]:
        """Move bytes both ways until quiet; returns (server events, client events) of this pump."""
        server_events: list[Event] = []
        client_events: list[Event] = []
        while True:
            client_events += self.client.poll_events()
            server_events += self.server.poll_events()
            c2s = self.client.data_to_send()
            if c2s:
                self.wire.append(("c>s", c2s))
                new = self._feed(self.server, c2s)
                server_events += new
                if self.auto:
                    self._answer(new)
            s2c = self.server.data_to_send()
            if s2c:
                self.wire.append(("s>c", s2c))
                client_events += self._feed(self.client, s2c)
            if not c2s and not s2c:
                break
        self.server_events += server_events
        self.client_events += client_events
        return server_events, client_events

    def _answer(self, events: list[Event]) -> None:
        for e in events:
            if isinstance(e, LoginRequested):
                self.server.accept_login()
            elif isinstance(e, VirtualHostRequested):
                self.server.accept_open()

    def open(self) -> Pair:
        """Handshake to OPEN."""
        self.pump()
        assert self.server.state.name == "OPEN", self.server.state
        assert self.client.state.name == "OPEN", self.client.state
        return self

    def open_channel(self) -> int:
        n = self.client.open_channel()
        self.pump()
        return n

    def sent(self, direction: str) -> list[Frame]:
        """Every frame sent one way (``"c>s"`` or ``"s>c"``)."""
        data = b"".join(d for way, d in self.wire if way == direction)
        return frames(data)
