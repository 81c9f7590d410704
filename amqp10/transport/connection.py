"""The sans-IO connection: bytes in, events and bytes out (Part 2 §2.4).

``receive_data(data)`` parses frames and returns events; ``data_to_send()``
drains what the engine wants written; ``tick(now)`` runs the idle-timeout
timers with a time the caller supplies and returns the next deadline. There
are no sockets, threads, clocks or sleeps in here.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..types import (
    Attach,
    Begin,
    Close,
    DecodeError,
    Detach,
    Disposition,
    End,
    Error,
    ErrorCondition,
    Flow,
    Open,
    Role,
    Transfer,
    codec,
)
from .connection_state import (
    ACCEPTS_FRAMES,
    DISCARDS_FRAMES,
    WRITABLE,
    ConnectionInput,
    ConnectionState,
    next_state,
)
from .delivery import Delivery
from .errors import IllegalStateError, ProtocolViolation
from .events import (
    ConnectionClosed,
    ConnectionFailed,
    ConnectionOpened,
    Event,
    LinkFailed,
    SessionFailed,
)
from .framing import (
    AMQP_HEADER,
    FRAME_AMQP,
    FRAME_HEADER,
    MIN_MAX_FRAME_SIZE,
    encode_disposition_frame,
    encode_empty_frame,
    encode_frame,
    encode_transfer_frame,
)
from .link import Link
from .link_state import LinkState
from .session import Session
from .session_state import ACCEPTS_FRAMES as SESSION_ACCEPTS_FRAMES
from .session_state import SessionState

__all__ = ["Connection"]

S = ConnectionState
I = ConnectionInput  # noqa: E741
_U32 = 0xFFFFFFFF
_decode_at = codec.decode_at
_unpack_header = FRAME_HEADER.unpack_from
# the transfer performative's worst-case size without its delivery-tag (first frame)
# and for a continuation frame; used to split payloads at the peer's max-frame-size
TRANSFER_OVERHEAD_FIRST = 26
TRANSFER_OVERHEAD_NEXT = 17


class Connection:
    """One AMQP connection endpoint, symmetric for clients, brokers and peers.

    ``max_frame_size``, ``channel_max`` and ``idle_timeout`` (seconds) are what
    *we* accept (``idle_timeout``: silence after which we close; the open advertises
    half of it, §2.4.5); the peer's values arrive in its open and bound what we send.

    Its sessions (and their links) use a small public interface: ``write_frame``,
    ``write_delivery_frame``, ``can_write``, ``flush_later``, ``emit``,
    ``check_can_begin``, ``release_session`` and the link-name registry
    (``link_named``, ``add_link_name``, ``release_link_name``). The connection
    hands each session the peer's frames for its channel (``Session.receive_*``).
    """

    def __init__(
        self,
        container_id: str,
        *,
        hostname: str | None = None,
        max_frame_size: int = 65536,
        channel_max: int = 65535,
        idle_timeout: float | None = None,
        properties: dict[Any, Any] | None = None,
        offered_capabilities: list[str] | None = None,
        desired_capabilities: list[str] | None = None,
        send_header: bool = True,
    ) -> None:
        if not MIN_MAX_FRAME_SIZE <= max_frame_size <= _U32:
            raise ValueError(f"max_frame_size must be in [512, 2**32-1], got {max_frame_size}")
        if not 0 <= channel_max <= 0xFFFF:
            raise ValueError(f"channel_max must be in [0, 65535], got {channel_max}")
        if idle_timeout is not None and not 0 < idle_timeout * 1000 <= _U32:
            raise ValueError(f"idle_timeout must be positive seconds, got {idle_timeout}")
        self.container_id = container_id
        self.hostname = hostname
        self.max_frame_size = max_frame_size
        self.channel_max = channel_max
        self.idle_timeout = idle_timeout
        self.properties = properties
        self.offered_capabilities = offered_capabilities
        self.desired_capabilities = desired_capabilities
        self.state = S.START
        self.remote_open: Open | None = None
        self.remote_close: Close | None = None
        self.error: Error | None = None  # what we closed with, on a failure
        self.context: Any = None
        # what the peer accepts from us (until its open: the spec's minimum)
        self.remote_max_frame_size = MIN_MAX_FRAME_SIZE
        self.remote_channel_max = 0  # §2.4.1: until the peer's open, channel 0 only
        self.remote_idle_timeout: float | None = None
        self._sessions: dict[int, Session] = {}  # by our channel
        self._remote_sessions: dict[int, Session] = {}  # by the peer's channel
        self._link_names: dict[tuple[str, int], Link] = {}
        self._dirty_sessions: set[Session] = set()
        self._inbuf = bytearray()
        self._out = bytearray()
        self._events: list[Event] = []
        self._header_sent = False
        self._header_received = False
        self._eof = False
        self._framing_broken = False
        # counted for metrics (plain integers: the broker sums them when scraped)
        self.frames_in = 0
        self.frames_out = 0
        self.errors_sent: dict[str, int] = {}
        """The errors we closed, ended or detached with, by condition."""
        # idle-timeout bookkeeping: byte counters seen at the last tick
        self._bytes_in = 0
        self._bytes_out = 0
        self._tick_in = -1
        self._tick_out = -1
        self._rx_deadline: float | None = None
        self._tx_deadline: float | None = None
        if send_header:
            self._send_header()

    def __repr__(self) -> str:
        return f"Connection(container_id={self.container_id!r}, state={self.state.name})"

    # -- the application's verbs ----------------------------------------------------
    def open(self) -> None:
        """Send our open (pipelined before the peer's header if need be)."""
        if not self._header_sent:
            self._send_header()
        self._move(I.SEND_OPEN)
        self.write_frame(
            0,
            Open(
                container_id=self.container_id,
                hostname=self.hostname,
                max_frame_size=self.max_frame_size,
                channel_max=self.channel_max,
                # §2.4.5: advertise half the threshold we enforce (as Proton does), so a
                # peer that heartbeats at half of what we advertise has a margin of four
                idle_time_out=max(1, round(self.idle_timeout * 500)) if self.idle_timeout else None,
                offered_capabilities=self.offered_capabilities,
                desired_capabilities=self.desired_capabilities,
                properties=self.properties,
            ),
        )

    def close(self, error: Error | None = None) -> None:
        """Close the connection (sending our open first if the peer is still waiting for it)."""
        if self.state in (S.CLOSE_SENT, S.DISCARDING, S.END, S.OC_PIPE, S.CLOSE_PIPE):
            return
        if self.state is S.START:
            self._end()
            return
        if not self._header_sent:
            self._send_header()
        if self.state in (S.HDR_SENT, S.HDR_EXCH, S.OPEN_RCVD):
            self.open()
        self._flush_sessions()  # batched dispositions go out before the close
        self._move(I.SEND_CLOSE_ERROR if error is not None else I.SEND_CLOSE)
        self.write_frame(0, Close(error=error))
        self.count_error(error)
        self._end_if_done()

    def count_error(self, error: Error | None) -> None:
        """Count ``error`` (sent in a close, end or detach) in ``errors_sent``."""
        if error is not None:
            condition = str(error.condition)
            self.errors_sent[condition] = self.errors_sent.get(condition, 0) + 1

    def session(self, **kwargs: Any) -> Session:
        """Create a session on the lowest free channel (call ``begin()`` on it).

        Channels are bounded by our channel-max and the peer's; until the peer's
        open arrives, only channel 0 may be used (§2.4.1). ``kwargs`` go to
        :class:`Session` (``incoming_window``, ``handle_max``, ...).
        """
        limit = min(self.channel_max, self.remote_channel_max)
        for ch in range(min(len(self._sessions) + 1, limit + 1)):
            if ch not in self._sessions:
                s = Session(self, ch, **kwargs)
                self._sessions[ch] = s
                return s
        raise IllegalStateError(f"no channel free (channel-max {limit})")

    @property
    def sessions(self) -> list[Session]:
        return list(self._sessions.values())

    @property
    def is_open(self) -> bool:
        return self.state is S.OPENED

    @property
    def is_closed(self) -> bool:
        """True once the connection reached END: nothing more will be read or written."""
        return self.state is S.END

    # -- bytes in / out -----------------------------------------------------------------
    def receive_data(self, data: bytes) -> list[Event]:
        """Feed bytes read from the peer; returns the events they caused.

        An empty ``data`` means the peer closed its end of the stream.
        """
        if not data:
            self._on_eof()
        elif self.state is not S.END:
            self._bytes_in += len(data)
            try:
                self._process(data)
            except Exception as exc:  # a bug of ours: never let the peer's input crash the caller
                self._inbuf.clear()
                self._fail(
                    Error(condition=ErrorCondition.INTERNAL_ERROR, description=f"{type(exc).__name__}: {exc}")
                )
        self._end_if_done()
        events, self._events = self._events, []
        return events

    def poll_events(self) -> list[Event]:
        """Events raised outside ``receive_data`` (e.g. by ``tick``)."""
        events, self._events = self._events, []
        return events

    def data_to_send(self) -> bytes:
        """Everything the engine wants written, in order (empty if nothing)."""
        if self._dirty_sessions:
            self._flush_sessions()
        if not self._out:
            return b""
        out = bytes(self._out)
        self._out.clear()
        self._bytes_out += len(out)
        return out

    def tick(self, now: float) -> float | None:
        """Run the idle timers at time ``now`` (seconds); return the next deadline or None.

        §2.4.5: when our ``idle_timeout`` passes with no bytes from the peer, the
        connection is closed with ``amqp:resource-limit-exceeded`` (and a
        ``ConnectionFailed`` event, from ``poll_events()``); if the peer does not
        answer that close within another ``idle_timeout``, the connection ends.
        When we would otherwise be silent for half the peer's idle-time-out, an
        empty frame is written. (We advertise half of ``idle_timeout``, as §2.4.5
        recommends, and a peer sends at half of that: a live peer has a margin of four,
        so a stall of the peer or of the machine is not taken for a dead peer.)
        """
        if self.state is S.END:
            return None
        rx = self._rx_deadline
        if self.idle_timeout:
            if self._bytes_in != self._tick_in or rx is None:
                self._tick_in = self._bytes_in
                rx = self._rx_deadline = now + self.idle_timeout
            elif now >= rx:
                if self._closing():
                    self._end()  # the peer never answered our close: give up on it
                    return None
                self._fail(
                    Error(
                        condition=ErrorCondition.RESOURCE_LIMIT_EXCEEDED,
                        description=f"no frames from the peer for {self.idle_timeout:g}s (idle-time-out)",
                    )
                )
                if self.is_closed:  # no connection was established: nothing to wait for
                    return None
                rx = self._rx_deadline = now + self.idle_timeout
        else:
            rx = None
        # §2.4.5: empty frames only after our open and before our close
        if self.remote_idle_timeout and self.state is S.OPENED:
            tx = self._tx_deadline
            if self._bytes_out != self._tick_out or tx is None:
                self._tick_out = self._bytes_out
                tx = self._tx_deadline = now + self.remote_idle_timeout / 2
            elif now >= tx:
                if not self._out:
                    encode_empty_frame(self._out)
                    self.frames_out += 1
                tx = self._tx_deadline = now + self.remote_idle_timeout / 2
            return tx if rx is None or tx < rx else rx
        return rx

    # -- internals: state and output ---------------------------------------------------
    def _move(self, event: ConnectionInput) -> None:
        new = next_state(self.state, event)
        if new is None:
            raise IllegalStateError(f"connection: cannot {event.value} in state {self.state.name}")
        self.state = new

    def _send_header(self) -> None:
        self._move(I.SEND_HEADER)
        self._header_sent = True
        self._out += AMQP_HEADER

    # -- the interface its sessions and links use --------------------------------------
    def emit(self, event: Event) -> None:
        """Report ``event`` to the application (with the next ``receive_data`` or
        ``poll_events``)."""
        self._events.append(event)

    def write_frame(
        self, channel: int, performative: Any, payload: bytes | memoryview | None = None
    ) -> None:
        """Append one frame for the peer; raises :class:`IllegalStateError` (writing
        nothing) if it would exceed the peer's max-frame-size."""
        out = self._out
        start = len(out)
        try:
            size = encode_frame(out, channel, performative, payload)
        except Exception:
            del out[start:]
            raise
        if size > self.remote_max_frame_size:
            del out[start:]
            raise IllegalStateError(
                f"{type(performative).__name__} frame of {size} bytes exceeds the peer's "
                f"max-frame-size {self.remote_max_frame_size}"
            )
        self.frames_out += 1

    def write_disposition_frame(
        self, channel: int, role: int, first: int, last: int | None, settled: bool, state: Any
    ) -> None:
        """Append a disposition frame whose ``state`` is one of ``FIELDLESS_OUTCOMES``
        (``encode_disposition_frame``: it always fits the peer's max-frame-size)."""
        encode_disposition_frame(self._out, channel, role, first, last, settled, state)
        self.frames_out += 1

    def write_delivery_frame(self, channel: int, handle: int, delivery_id: int, d: Delivery) -> None:
        """Append ``d``'s first and only transfer frame, as ``delivery_id``
        (``encode_transfer_frame``: no state, not resumed); the caller knows it fits
        the peer's max-frame-size."""
        encode_transfer_frame(
            self._out, channel, handle, delivery_id, d.tag, d.message_format, d.settled, d.payload
        )
        self.frames_out += 1

    def can_write(self) -> bool:
        """True between sending our open and sending our close (§2.4.6, figure 2.24)."""
        return self.state in WRITABLE

    def check_can_begin(self) -> None:
        """Raise :class:`IllegalStateError` unless a session may begin now."""
        if self.state not in WRITABLE or self.state is S.CLOSE_RCVD:
            raise IllegalStateError(f"connection is not open ({self.state.name})")

    def flush_later(self, session: Session) -> None:
        """Call ``session.flush()`` before the next bytes go out (it batched frames)."""
        self._dirty_sessions.add(session)

    def release_session(self, session: Session) -> None:
        """Forget ``session`` (ended, or torn down): its channels are free again."""
        if self._sessions.get(session.channel) is session:
            del self._sessions[session.channel]
        rc = session.remote_channel
        if rc is not None and self._remote_sessions.get(rc) is session:
            del self._remote_sessions[rc]
        self._dirty_sessions.discard(session)

    def link_named(self, name: str, role: Role) -> Link | None:
        """The link endpoint of ``role`` holding ``name`` on this connection, if any
        (§2.6.1: a link's name is unique per pair of containers and direction)."""
        return self._link_names.get((name, role))

    def add_link_name(self, link: Link) -> None:
        """Record ``link`` as the holder of its name (a second attach of the name steals it)."""
        self._link_names[(link.name, link.role)] = link

    def release_link_name(self, link: Link) -> None:
        """Free ``link``'s name, unless another link has stolen it since."""
        key = (link.name, link.role)
        if self._link_names.get(key) is link:
            del self._link_names[key]

    def _flush_sessions(self) -> None:
        dirty, self._dirty_sessions = self._dirty_sessions, set()
        for s in dirty:
            s.flush()

    def _closing(self) -> bool:
        """Our close is written: we only wait for the peer's."""
        return self.state in (S.DISCARDING, S.CLOSE_SENT, S.OC_PIPE, S.CLOSE_PIPE)

    def _fail(self, error: Error) -> None:
        """Close because of a peer's violation (or a timeout) and report it."""
        if self.state is S.END or self._closing():
            return  # already closing: the first reason stands
        self.error = error
        if not self._header_received:
            # §2.2: no AMQP connection was established: send our header (telling the
            # peer what we speak) and nothing else
            if not self._header_sent:
                self._out += AMQP_HEADER
                self._header_sent = True
            self._end()
        else:
            self.close(error)
        self.emit(ConnectionFailed(error=error))

    def _end(self) -> None:
        """Move to END: nothing more is read or written; sessions and links are gone."""
        self.state = S.END
        self._end_if_done()

    def _end_if_done(self) -> None:
        if self.state is S.END and (self._sessions or self._remote_sessions):
            self._inbuf.clear()
            for session in {*self._sessions.values(), *self._remote_sessions.values()}:
                session.teardown()
            self._sessions.clear()
            self._remote_sessions.clear()
            self._dirty_sessions.clear()

    def _on_eof(self) -> None:
        if self._eof:
            return
        self._eof = True
        if self.state is S.END:
            return
        if self._closing():
            self._end()  # we closed; the peer hung up without its close: that will do
            return
        error = Error(
            condition=ErrorCondition.CONNECTION_FORCED,
            description="the peer closed the stream without closing the connection",
        )
        self.error = error
        self._end()
        self.emit(ConnectionFailed(error=error))

    # -- internals: parsing ---------------------------------------------------------------
    def _process(self, data: bytes) -> None:
        if self._framing_broken:
            return  # after a framing error the byte stream cannot be followed (§2.3)
        buf: bytes | bytearray
        if self._inbuf:
            inbuf = self._inbuf
            inbuf += data
            if self._header_received and len(inbuf) >= 8:
                size = _unpack_header(inbuf, 0)[0]
                if len(inbuf) < size <= self.max_frame_size:
                    return  # the first frame is still incomplete: keep collecting
            # frames are sliced out of an immutable copy: one copy per payload, not two
            buf = bytes(inbuf)
            inbuf.clear()
        else:
            buf = data
        pos = 0
        n = len(buf)
        if not self._header_received:
            avail = min(n, 8)
            if bytes(buf[:avail]) != AMQP_HEADER[:avail]:
                self._on_bad_header(bytes(buf[:8]))
                return
            if n < 8:
                self._keep(buf, 0)
                return
            self._on_header()
            pos = 8
        limit = self.max_frame_size
        on_frame = self._on_frame
        frames = 0
        while n - pos >= 8 and self.state is not S.END:
            size, doff, ftype, channel = _unpack_header(buf, pos)
            # checked on the header alone: an oversized frame is refused before it is
            # buffered (§2.7.1 max-frame-size: "close the connection with framing-error")
            if size > limit or doff < 2 or doff * 4 > size or ftype != FRAME_AMQP:
                if size > limit:
                    why = f"frame of {size} bytes exceeds max-frame-size {limit}"
                elif ftype != FRAME_AMQP:
                    why = f"frame of type {ftype:#04x} on an AMQP connection"
                else:
                    why = f"invalid frame header (size {size}, doff {doff})"
                self._framing_broken = True
                self._inbuf.clear()
                self._on_violation(ProtocolViolation(ErrorCondition.FRAMING_ERROR, why))
                return
            if n - pos < size:
                break
            end = pos + size
            body = pos + doff * 4
            pos = end
            frames += 1
            if body == end:  # an empty frame: a heartbeat (§2.4.5)
                continue
            try:
                perf, pend = _decode_at(buf, body)
                if pend > end:
                    raise ProtocolViolation(ErrorCondition.FRAMING_ERROR, "performative overruns its frame")
                on_frame(channel, perf, bytes(buf[pend:end]) if pend < end else b"")
            except DecodeError as exc:
                self._on_violation(ProtocolViolation(ErrorCondition.DECODE_ERROR, f"bad frame body: {exc}"))
            except ProtocolViolation as v:
                self._on_violation(v)  # its scope says what is torn down; framing is intact
            except IllegalStateError as exc:  # a handler's reply the state does not allow
                self._on_violation(ProtocolViolation(ErrorCondition.ILLEGAL_STATE, str(exc)))
        self.frames_in += frames
        self._keep(buf, pos)

    def _keep(self, buf: bytes | bytearray, pos: int) -> None:
        if buf is self._inbuf:
            del self._inbuf[:pos]
        elif pos < len(buf):
            self._inbuf = bytearray(buf[pos:])

    def _on_bad_header(self, got: bytes) -> None:
        self._inbuf.clear()
        error = Error(
            condition=ErrorCondition.NOT_IMPLEMENTED,
            description=f"unsupported protocol header {got!r}; this peer speaks AMQP 1.0.0",
        )
        if self._closing():
            # our pipelined close is out (OC_PIPE): no AMQP connection will follow a bad
            # header, so there is no close to wait for (§2.2)
            self.error = error
            self._end()
            self.emit(ConnectionFailed(error=error))
            return
        self._fail(error)

    def _on_header(self) -> None:
        self._move(I.RECV_HEADER)
        self._header_received = True
        if not self._header_sent:
            self._send_header()

    def _on_frame(self, channel: int, perf: Any, payload: bytes) -> None:
        tp = type(perf)
        if self.state in DISCARDS_FRAMES and tp is not Close:
            if tp is Open and self.state is S.CLOSE_PIPE:
                pass  # the open our close was pipelined behind
            else:
                return
        if tp in self._session_dispatch:
            handler = self._session_dispatch[tp]
            if self.state not in ACCEPTS_FRAMES:
                raise ProtocolViolation(
                    ErrorCondition.ILLEGAL_STATE,
                    f"{tp.__name__.lower()} before the connection is open ({self.state.name})",
                )
            if tp is Begin:
                self._on_begin(channel, perf)
                return
            session = self._remote_sessions.get(channel)
            if session is None:
                raise ProtocolViolation(
                    ErrorCondition.FRAMING_ERROR, f"{tp.__name__.lower()} on unused channel {channel}"
                )
            if session.state not in SESSION_ACCEPTS_FRAMES:
                if tp is End:
                    session.receive_end(perf)
                return  # a session we ended with an error: discard until its end
            if tp is Transfer:
                session.receive_transfer(perf, payload)
            else:
                handler(session, perf)
            return
        if tp is Open:
            self._on_open(perf)
        elif tp is Close:
            self._on_close(perf)
        else:
            raise ProtocolViolation(
                ErrorCondition.FRAMING_ERROR, f"frame body is not a performative: {type(perf).__name__}"
            )

    _session_dispatch: ClassVar[dict[type, Any]] = {
        Begin: None,  # handled by the connection: it maps the channel
        Attach: Session.receive_attach,
        Flow: Session.receive_flow,
        Transfer: Session.receive_transfer,
        Disposition: Session.receive_disposition,
        Detach: Session.receive_detach,
        End: Session.receive_end,
    }

    def _on_open(self, open_: Open) -> None:
        new = next_state(self.state, I.RECV_OPEN)
        if new is None:
            raise ProtocolViolation(ErrorCondition.ILLEGAL_STATE, f"open in state {self.state.name}")
        if open_.max_frame_size < MIN_MAX_FRAME_SIZE:
            raise ProtocolViolation(
                ErrorCondition.INVALID_FIELD,
                f"max-frame-size {open_.max_frame_size} is below the minimum of 512",
            )
        self.state = new
        self.remote_open = open_
        self.remote_max_frame_size = open_.max_frame_size
        self.remote_channel_max = open_.channel_max
        if open_.idle_time_out:
            self.remote_idle_timeout = open_.idle_time_out / 1000
        self.emit(ConnectionOpened(remote=open_))

    def _on_close(self, close: Close) -> None:
        if self.state is S.OPEN_RCVD:
            # the peer pipelined open and close (its OC_PIPE): we answer in kind, and
            # a close must follow our open (§2.4.1)
            self.open()
        new = next_state(self.state, I.RECV_CLOSE)
        if new is None:
            raise ProtocolViolation(ErrorCondition.ILLEGAL_STATE, f"close in state {self.state.name}")
        if self.state is S.OPEN_RCVD:
            self.open()  # our open must precede our close (§2.4.1: open is the first frame)
        self.state = new
        self.remote_close = close
        self.emit(ConnectionClosed(error=close.error))
        if self.state is S.CLOSE_RCVD:
            self.close()

    def _on_begin(self, channel: int, begin: Begin) -> None:
        if channel > self.channel_max:
            raise ProtocolViolation(
                ErrorCondition.FRAMING_ERROR, f"channel {channel} exceeds channel-max {self.channel_max}"
            )
        if channel in self._remote_sessions:
            raise ProtocolViolation(ErrorCondition.FRAMING_ERROR, f"channel {channel} is already in use")
        if begin.remote_channel is not None:
            session = self._sessions.get(begin.remote_channel)
            if session is None or session.remote_channel is not None:
                raise ProtocolViolation(
                    ErrorCondition.FRAMING_ERROR,
                    f"begin answers channel {begin.remote_channel}, where we began no session",
                )
        else:
            session = self.session()
        self._remote_sessions[channel] = session
        session.receive_begin(begin, channel)

    def _on_violation(self, v: ProtocolViolation) -> None:
        """Tear down what the violation's scope says, with its condition.

        A link is detached (§2.6.5), a session ended (§2.5.4), or the connection
        closed; each with an event. A narrower teardown that is impossible (the
        endpoint is not in a state to send it) widens to the next scope; one in an
        endpoint already ending is dropped: its end is on the way.
        """
        error = v.to_error()
        target = v.target
        if v.scope == "link" and isinstance(target, Link):
            session = target.session
            if not session.can_send():
                return
            if target.state in (LinkState.ATTACHED, LinkState.ATTACH_RCVD):
                try:
                    target.detach(error)
                except IllegalStateError:
                    pass
                else:
                    self.emit(LinkFailed(link=target, error=error))
                    return
            elif target.state is LinkState.DETACH_SENT:
                return  # already detaching: frames are ignored until the peer's detach
            v = ProtocolViolation(v.condition, v.description, "session", session)
            target = session
        if v.scope == "session" and isinstance(target, Session):
            if target.state in (SessionState.END_SENT, SessionState.DISCARDING, SessionState.UNMAPPED):
                return
            if target.state in (SessionState.MAPPED, SessionState.BEGIN_RCVD) and self.can_write():
                try:
                    target.end(error)
                except IllegalStateError:
                    pass
                else:
                    self.emit(SessionFailed(session=target, error=error))
                    return
        self._fail(error)

