"""The pair harness: two engines pumping bytes to each other in memory.

Also: splitting what went over the wire back into frames and performatives
(``decode_frames``, ``Pair.frames``), and crafting raw frames to feed an
engine (``frame``), for tests that play a misbehaving peer.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from amqp10.transport import (
    Connection,
    Event,
    LinkAttached,
    Receiver,
    Sender,
    Session,
    SessionBegun,
)
from amqp10.transport.framing import FRAME_HEADER, encode_frame
from amqp10.types import Source, Target, decode_at

C2S = "c>s"
S2C = "s>c"


@dataclass(frozen=True)
class Frame:
    """One frame seen on the wire: its channel, performative (None: empty frame) and payload."""

    channel: int
    performative: Any
    payload: bytes
    size: int


def decode_frames(data: bytes) -> list[Frame]:
    """Split bytes (whole frames, possibly after a protocol header) into frames."""
    out: list[Frame] = []
    pos = 0
    while pos < len(data):
        if data[pos : pos + 4] == b"AMQP":
            pos += 8
            continue
        size, doff, _ftype, channel = FRAME_HEADER.unpack_from(data, pos)
        body = pos + doff * 4
        end = pos + size
        if body == end:
            out.append(Frame(channel, None, b"", size))
        else:
            perf, pend = decode_at(data, body)
            out.append(Frame(channel, perf, bytes(data[pend:end]), size))
        pos = end
    return out


def frame(channel: int, performative: Any, payload: bytes = b"") -> bytes:
    """The bytes of one AMQP frame (to feed an engine as a hand-crafted peer)."""
    buf = bytearray()
    encode_frame(buf, channel, performative, payload or None)
    return bytes(buf)


def empty_frame(channel: int = 0) -> bytes:
    return FRAME_HEADER.pack(8, 2, 0, channel)


class Pair:
    """A client and a server ``Connection`` wired back to back.

    ``pump()`` moves bytes both ways until neither side has anything to send,
    collecting the events each side produced. ``chunk`` feeds bytes in pieces
    of that size (1 = byte by byte) to exercise partial-frame parsing.
    """

    def __init__(
        self,
        client: Connection | None = None,
        server: Connection | None = None,
        chunk: int | None = None,
    ) -> None:
        self.client = client or Connection("client")
        self.server = server or Connection("server")
        self.chunk = chunk
        self.client_events: list[Event] = []
        self.server_events: list[Event] = []
        self.wire: list[tuple[str, bytes]] = []

    def feed(self, conn: Connection, data: bytes) -> list[Event]:
        """Give ``data`` to ``conn`` (whole or in chunks); return the events."""
        if self.chunk is None or not data:
            return conn.receive_data(data)
        events: list[Event] = []
        for i in range(0, len(data), self.chunk):
            events += conn.receive_data(data[i : i + self.chunk])
        return events

    _feed = feed

    def client_to_server(self) -> tuple[bytes, list[Event]]:
        """Move what the client has written (only that) to the server: (bytes, server events)."""
        data = self.client.data_to_send()
        self.wire.append((C2S, data))
        events = self.feed(self.server, data) if data else []
        self.server_events += events
        return data, events

    def server_to_client(self) -> tuple[bytes, list[Event]]:
        """Move what the server has written (only that) to the client: (bytes, client events)."""
        data = self.server.data_to_send()
        self.wire.append((S2C, data))
        events = self.feed(self.client, data) if data else []
        self.client_events += events
        return data, events

    def pump(self, max_rounds: int = 1000) -> tuple[list[Event], list[Event]]:
        """Exchange bytes until quiet; return (client events, server events) of this pump."""
        ce: list[Event] = []
        se: list[Event] = []
        for _ in range(max_rounds):
            a = self.client.data_to_send()
            b = self.server.data_to_send()
            if not a and not b:
                break
            if a:
                self.wire.append((C2S, a))
                se += self.feed(self.server, a)
            if b:
                self.wire.append((S2C, b))
                ce += self.feed(self.client, b)
        else:  # pragma: no cover - a livelock is a bug
            raise AssertionError("pump did not quiesce")
        # events raised by local calls (not by received bytes) wait in poll_events()
        ce += self.client.poll_events()
        se += self.server.poll_events()
        self.client_events += ce
        self.server_events += se
        return ce, se

    # -- the wire -----------------------------------------------------------------------
    def mark(self) -> int:
        """A position in ``wire``: pass it to ``frames(since=...)``."""
        return len(self.wire)

    def frames(self, direction: str = C2S, since: int = 0) -> list[Frame]:
        """Frames sent one way (``"c>s"`` or ``"s>c"``) since ``mark()``."""
        return [f for d, data in self.wire[since:] if d == direction for f in decode_frames(data)]

    def performatives(self, direction: str = C2S, since: int = 0, tp: type | None = None) -> list[Any]:
        """The performatives (optionally of one type) sent one way since ``mark()``."""
        return [
            f.performative
            for f in self.frames(direction, since)
            if f.performative is not None and (tp is None or type(f.performative) is tp)
        ]

    # -- set-ups -------------------------------------------------------------------------
    def open(self) -> Pair:
        """Open both ends (the client first) and pump."""
        self.client.open()
        self.pump()
        if not self.server.is_open:
            self.server.open()
        self.pump()
        assert self.client.is_open and self.server.is_open
        return self

    def session(self, **kw: Any) -> tuple[Session, Session]:
        """Begin a session from the client; the server accepts it. ``kw`` go to the client's."""
        cs = self.client.session(**kw)
        cs.begin()
        _, se = self.pump()
        ss = of_type(se, SessionBegun)[-1].session
        ss.begin()
        self.pump()
        assert cs.is_mapped and ss.is_mapped
        return cs, ss

    def link(
        self,
        name: str = "link",
        *,
        client_role: str = "sender",
        sessions: tuple[Session, Session] | None = None,
        credit: int = 0,
        server_kw: dict[str, Any] | None = None,
        **kw: Any,
    ) -> tuple[Any, Any]:
        """Attach a link from the client (a ``client_role`` endpoint); the server accepts it.

        Returns (client link, server link). ``credit`` is granted by the receiver.
        ``kw`` go to the client's link, ``server_kw`` to the server's ``attach()``.
        """
        cs, _ss = sessions or (self.client.sessions[0], self.server.sessions[0])
        kw.setdefault("source", Source(address="src"))
        kw.setdefault("target", Target(address="tgt"))
        cl: Sender | Receiver = cs.sender(name, **kw) if client_role == "sender" else cs.receiver(name, **kw)
        cl.attach()
        _, se = self.pump()
        sl = [e.link for e in of_type(se, LinkAttached) if e.link.name == name][-1]
        sl.attach(source=sl.remote_source, target=sl.remote_target, **(server_kw or {}))
        self.pump()
        assert cl.is_attached and sl.is_attached
        if credit:
            rcv = cl if client_role == "receiver" else sl
            rcv.flow(credit)
            self.pump()
        return cl, sl

    def attached(self, name: str = "link", **kw: Any) -> tuple[Any, Any]:
        """Open, begin and attach in one go: returns (client link, server link)."""
        self.open()
        self.session()
        return self.link(name, **kw)


def of_type(events: list[Event], tp: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, tp)]


def iter_types(events: list[Event]) -> Iterator[str]:
    return (type(e).__name__ for e in events)


def names(events: list[Event]) -> list[str]:
    return [type(e).__name__ for e in events]
