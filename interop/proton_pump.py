"""Interop without sockets: our engine and Proton's, pumping bytes in one process.

:class:`ProtonPump` wires an :class:`amqp10.transport.Connection` to a
``proton.Connection`` bound to a ``proton.Transport`` and moves bytes between
them until both are quiet, collecting the events each side raised. Either side
may be the client (the one that opens): ``proton_role="server"`` makes Proton
answer our connection, ``"client"`` makes it open one to us.

By default both sides accept what the peer begins (Proton's endpoints are
opened with the peer's terminus and settle modes; ours are begun/attached), so
a test only drives the side that initiates. Pass ``auto_accept=False`` to
handle that yourself.

Proton's frame trace is kept in ``pump.trace`` when ``trace=True`` (the
``PN_TRACE_FRM=1`` environment variable prints it to stderr instead).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import proton
from proton import Collector, Endpoint, Transport
from proton import Connection as ProtonConnection
from proton import Event as PEvent

from amqp10.transport import (
    Connection,
    ConnectionOpened,
    Event,
    LinkAttached,
    LinkState,
    SessionBegun,
    SessionState,
)
from amqp10.transport.connection_state import ConnectionState

__all__ = ["ProtonEvent", "ProtonPump", "accept_ours", "accept_proton"]

ProtonHandler = Callable[["ProtonPump", Any], None]
OurHandler = Callable[["ProtonPump", Event], None]


@dataclass(frozen=True, slots=True)
class ProtonEvent:
    """One event popped from Proton's collector, with its context objects.

    Holding ``delivery`` keeps Proton's delivery alive, which matters for the
    drain quirk (see :meth:`ProtonPump.forget_proton_events`).
    """

    type: Any
    connection: Any
    session: Any
    link: Any
    delivery: Any

    @property
    def name(self) -> str:
        return str(self.type.name)


def accept_proton(pump: ProtonPump, ev: Any) -> None:
    """Default Proton handler: open whatever the peer opened, mirroring it."""
    t = ev.type
    if t == PEvent.CONNECTION_REMOTE_OPEN:
        c = ev.connection
        if c.state & Endpoint.LOCAL_UNINIT:
            c.open()
    elif t == PEvent.SESSION_REMOTE_OPEN:
        s = ev.session
        if s.state & Endpoint.LOCAL_UNINIT:
            s.open()
    elif t == PEvent.LINK_REMOTE_OPEN:
        link = ev.link
        if link.state & Endpoint.LOCAL_UNINIT:
            link.source.copy(link.remote_source)
            link.target.copy(link.remote_target)
            link.snd_settle_mode = link.remote_snd_settle_mode
            link.rcv_settle_mode = link.remote_rcv_settle_mode
            link.open()


def accept_ours(pump: ProtonPump, ev: Event) -> None:
    """Default handler on our side: open, begin and attach what Proton started."""
    ours = pump.ours
    if isinstance(ev, ConnectionOpened):
        if ours.state is ConnectionState.OPEN_RCVD:
            ours.open()
    elif isinstance(ev, SessionBegun):
        if ev.session.state is SessionState.BEGIN_RCVD:
            ev.session.begin()
    elif isinstance(ev, LinkAttached):
        link = ev.link
        if link.state is LinkState.ATTACH_RCVD:
            link.attach(source=link.remote_source, target=link.remote_target)


class ProtonPump:
    """Our ``Connection`` and a Proton ``Connection``/``Transport``, back to back in memory."""

    def __init__(
        self,
        ours: Connection,
        *,
        proton_role: str = "server",
        container_id: str = "proton",
        max_frame_size: int | None = None,
        idle_timeout: float | None = None,
        auto_accept: bool = True,
        on_proton_event: ProtonHandler | None = None,
        on_our_event: OurHandler | None = None,
        record: bool = True,
        trace: bool = False,
        chunk: int | None = None,
    ) -> None:
        if proton_role not in ("server", "client"):
            raise ValueError("proton_role is 'server' or 'client'")
        self.ours = ours
        self.proton_role = proton_role
        self.conn = ProtonConnection()
        self.conn.container = container_id
        self.transport = Transport(
            Transport.SERVER if proton_role == "server" else Transport.CLIENT
        )
        if max_frame_size is not None:
            self.transport.max_frame_size = max_frame_size
        if idle_timeout is not None:
            # Proton advertises half of this value in its open (see the module notes)
            self.transport.idle_timeout = idle_timeout
        self.trace: list[str] = []
        if trace:
            self.transport.tracer = lambda _t, msg: self.trace.append(msg)
            self.transport.trace(Transport.TRACE_FRM)
        self.collector = Collector()
        self.conn.collect(self.collector)
        self.transport.bind(self.conn)
        self.auto_accept = auto_accept
        self.on_proton_event = on_proton_event
        self.on_our_event = on_our_event
        self.record = record
        self.chunk = chunk
        self.our_events: list[Event] = []
        self.proton_events: list[ProtonEvent] = []
        self.bytes_to_proton = 0
        self.bytes_to_ours = 0
        self._outbox = bytearray()  # our bytes Proton had no capacity for yet
        self._eof_to_ours = False
        self._eof_to_proton = False

    # -- moving bytes ---------------------------------------------------------------------
    def _to_proton(self) -> int:
        out = self.ours.data_to_send()
        if out:
            self._outbox += out
        moved = 0
        t = self.transport
        while self._outbox:
            cap = t.capacity()
            if cap < 0:  # Proton closed its input: what we still write is lost
                self._outbox.clear()
                break
            if cap == 0:
                break
            n = min(cap, len(self._outbox), self.chunk or cap)
            t.push(bytes(self._outbox[:n]))
            del self._outbox[:n]
            moved += n
        self.bytes_to_proton += moved
        if (
            not self._outbox
            and not self._eof_to_proton
            and self.ours.is_closed
            and t.capacity() >= 0
        ):
            # our side is done: the driver would close the socket now
            self._eof_to_proton = True
            t.close_tail()
            moved += 1
        return moved

    def _to_ours(self) -> int:
        t = self.transport
        p = t.pending()
        if p > 0:
            data = bytes(t.peek(p))
            t.pop(p)
            self.bytes_to_ours += p
            if self.chunk:
                for i in range(0, len(data), self.chunk):
                    self._handle_ours(self.ours.receive_data(data[i : i + self.chunk]))
            else:
                self._handle_ours(self.ours.receive_data(data))
            return p
        if p < 0 and not self._eof_to_ours:
            self._eof_to_ours = True
            self._handle_ours(self.ours.receive_data(b""))
            return 1
        return 0

    def _handle_ours(self, events: list[Event]) -> None:
        for ev in events:
            if self.record:
                self.our_events.append(ev)
            if self.auto_accept:
                accept_ours(self, ev)
            if self.on_our_event is not None:
                self.on_our_event(self, ev)

    def _drain_proton(self) -> int:
        n = 0
        coll = self.collector
        while True:
            ev = coll.peek()
            if ev is None:
                break
            if self.record:
                self.proton_events.append(
                    ProtonEvent(
                        type=ev.type,
                        connection=ev.connection,
                        session=ev.session,
                        link=ev.link,
                        delivery=ev.delivery,
                    )
                )
            if self.auto_accept:
                accept_proton(self, ev)
            if self.on_proton_event is not None:
                self.on_proton_event(self, ev)
            coll.pop()
            n += 1
        return n

    def pump(self, max_rounds: int = 10_000) -> tuple[list[Event], list[ProtonEvent]]:
        """Move bytes both ways until quiet; return the events raised during this call."""
        o0, p0 = len(self.our_events), len(self.proton_events)
        self._handle_ours(self.ours.poll_events())
        for _ in range(max_rounds):
            moved = self._drain_proton()
            moved += self._to_proton()
            moved += self._drain_proton()
            moved += self._to_ours()
            if not moved:
                break
        else:  # pragma: no cover - a livelock is a bug in one of the engines
            raise AssertionError("pump did not quiesce")
        return self.our_events[o0:], self.proton_events[p0:]

    def tick(self, now: float, *, ours: bool = True, proton_: bool = True) -> None:
        """Run the idle timers of the chosen sides at ``now`` (seconds), then pump."""
        if ours:
            self.ours.tick(now)
            self._handle_ours(self.ours.poll_events())
        if proton_:
            self.transport.tick(now)
        self.pump()

    # -- helpers for tests --------------------------------------------------------------------
    def proton_names(self, events: list[ProtonEvent] | None = None) -> list[str]:
        """Proton event type names, e.g. ``['PN_LINK_REMOTE_OPEN', ...]``."""
        return [e.name for e in (self.proton_events if events is None else events)]

    def forget_proton_events(self) -> None:
        """Drop recorded Proton events and collect the wrappers they pinned.

        Proton 0.40 does not answer a drain while Python still references a
        settled delivery of the sender (the C delivery stays on the link's list).
        """
        self.proton_events.clear()
        gc.collect()

    def inject_to_proton(self, data: bytes) -> None:
        """Write raw bytes to Proton as if our side had sent them (for error tests)."""
        self._outbox += data

    @property
    def proton_closed(self) -> bool:
        """Proton's connection is closed both locally and remotely."""
        s = self.conn.state
        return bool(s & Endpoint.LOCAL_CLOSED and s & Endpoint.REMOTE_CLOSED)

    def dump_trace(self) -> str:
        return "\n".join(self.trace)


def proton_version() -> str:
    return ".".join(str(x) for x in proton.VERSION)
