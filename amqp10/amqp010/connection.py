"""The sans-IO 0-10 connection, server side: bytes in, events and bytes out, time injected.

``receive_data(bytes) -> list[Event]``, ``data_to_send() -> bytes``, ``tick(now) ->
deadline | None``, ``poll_events()`` (the driver's :class:`~amqp10.io.driver.EngineProtocol`).

The handshake (0-10 §9.1 ``connection``): the protocol header, then ``start`` →
``start-ok`` (:class:`~.events.LoginRequested`: the application answers with
:meth:`Connection.accept_login`, :meth:`~Connection.challenge` or
:meth:`~Connection.reject_login`) → ``tune``/``tune-ok`` → ``open``
(:class:`~.events.OpenRequested`: :meth:`~Connection.accept_open` or
:meth:`~Connection.refuse_open`). Heartbeats both ways once tuned; ``close``/``close-ok``.

Sessions (0-10 §9.2, ``session``): ``attach`` on a channel opens one (``attached``,
then ``command-point`` 0 for the commands this side sends). Each command received gets
the next command id (:attr:`~.model.Compound.id`) and goes to the application as
:class:`~.events.CommandReceived`; the application :meth:`~Connection.complete`\\ s it
(with an ``execution.result`` when the command has one) or fails it with
:meth:`~Connection.exception` (``execution.exception``, and the session detaches: 0-10
§9.3 ends a session at an exception). Completion goes back as ``session.completed``
whenever a command asked for it (``sync``, ``execution.sync``, ``session.flush``) and
every :data:`REPORT_EVERY` commands otherwise; ``known-completed`` trims the set.
``expected``/``confirmed``/``gap`` are answered as the spec says.

A session survives its transport (0-10 §3.8, session resumption): ``request-timeout`` is
answered with the timeout granted (the asked one, at most ``max_session_timeout``); from
then on the commands this side sends are kept (:attr:`Session.replay`) until the peer
completes them. The application keeps a session whose transport ended (its
:attr:`Session.timeout` above 0, no exception sent) and offers it back through
:attr:`Connection.resumable` when a later connection attaches the same name: the engine
answers ``attached``, a ``command-point`` at the first command the peer has not completed,
and replays those commands with their ids; commands the peer replays that this side had
received already (ids below :attr:`Session.received`) are dropped, not given again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from .codec import DecodeError, SequenceSet
from .events import (
    CommandReceived,
    ConnectionEnded,
    ConnectionOpened,
    Event,
    LoginRequested,
    OpenRequested,
    SecureResponse,
    SessionAttached,
    SessionDetached,
    TransfersCompleted,
)
from .framing import Assembler, FramingError, encode_op
from .model import Compound
from .ranges import RangeSet
from .spec import CONSTANTS, ENUMS, OPS, STRUCTS

__all__ = [
    "CLOSE_CODES",
    "DETACH_CODES",
    "ERROR_CODES",
    "HEADER",
    "REPORT_EVERY",
    "Connection",
    "ProtocolError",
    "Session",
    "op",
    "result_struct",
]

log = logging.getLogger("amqp10.amqp010")

HEADER: Final = b"AMQP\x01\x01\x00\x0a"
"""The 0-10 protocol header (class 1, instance 1, version 0-10)."""
CLOSE_CODES: Final = ENUMS["connection.close-code"]
DETACH_CODES: Final = ENUMS["session.detach-code"]
ERROR_CODES: Final = ENUMS["execution.error-code"]
MIN_MAX_FRAME: Final = CONSTANTS["MIN-MAX-FRAME-SIZE"]
REPORT_EVERY: Final = 64
"""Commands completed without a request to say so, before ``session.completed`` goes out anyway."""
_MASK = 0xFFFFFFFF


class ProtocolError(Exception):
    """A peer that broke the protocol: the connection closes with ``code`` (``framing-error``)."""

    def __init__(self, text: str, code: int = CLOSE_CODES["framing-error"]) -> None:
        super().__init__(text)
        self.code = code


@dataclass(slots=True)
class Session:
    """One attached session as the engine keeps it."""

    channel: int
    name: bytes
    next_in: int = 0
    """The id the next command received gets (``command-point`` sets it)."""
    next_out: int = 0
    """The id of the next command this side sends."""
    completed: RangeSet = field(default_factory=RangeSet)
    """Commands received and completed, not yet known-completed by the peer."""
    sync: set[int] = field(default_factory=set)
    """Commands received with ``sync`` set, not yet completed."""
    unreported: int = 0
    report: bool = False
    """``session.completed`` is due (a sync command completed, or the peer flushed)."""
    failed: bool = False
    """An exception was sent: commands are ignored until the session detaches."""
    received: int | None = None
    """The id after the last command received (None: none yet): a command the peer
    replays below it is a duplicate."""
    timeout: int = 0
    """Seconds the session is to be kept once detached (granted by ``request-timeout``)."""
    replay: dict[int, Compound] | None = None
    """With a timeout: the commands sent and not yet completed by the peer, by id."""

    def record_completed(self, command_id: int, sync: bool) -> None:
        """Command ``command_id`` is done: it goes into the next ``session.completed``
        (at once if it asked for that, or after :data:`REPORT_EVERY` of them)."""
        self.completed.add(command_id)
        self.unreported += 1
        if command_id in self.sync:
            self.sync.discard(command_id)
            self.report = True
        elif sync or self.unreported >= REPORT_EVERY:
            self.report = True

    def sent(self, command: Compound) -> None:
        """``command`` was given its id and sent: kept for a replay if the session may resume."""
        command.id = self.next_out
        self.next_out = (self.next_out + 1) & _MASK
        if self.replay is not None:
            self.replay[command.id] = command

    def peer_completed(self, commands: SequenceSet) -> None:
        """The peer completed ``commands``: they need no replay."""
        replay = self.replay
        if not replay:
            return
        for lo, hi in commands:
            if hi - lo + 1 > len(replay):
                for cid in [c for c in replay if lo <= c <= hi]:
                    del replay[cid]
            else:
                for cid in range(lo, hi + 1):
                    replay.pop(cid, None)


def op(op_name: str, /, **values: Any) -> Compound:
    """A control or command by name (``op("session.attached", name=b"s")``)."""
    return Compound(OPS[op_name], values)


class Connection:
    """One 0-10 connection, server side (see the module's docstring)."""

    def __init__(
        self,
        *,
        mechanisms: Sequence[str],
        server_properties: dict[str, Any] | None = None,
        channel_max: int = 256,
        max_frame: int = 0xFFFF,
        heartbeat_min: int = 0,
        heartbeat_max: int = 120,
        handshake_timeout: float = 10.0,
        max_session_timeout: int = 0,
    ) -> None:
        self.mechanisms = list(mechanisms)
        self.server_properties = server_properties or {}
        self.channel_max = channel_max
        self.max_frame = max_frame
        self.heartbeat_min = heartbeat_min
        self.heartbeat_max = heartbeat_max
        self.handshake_timeout = handshake_timeout
        self.max_session_timeout = max_session_timeout
        """The longest ``session.timeout`` granted (0: detached sessions are not kept)."""
        self.resumable: Callable[[int, bytes], Session | None] = lambda channel, name: None
        """The application's kept sessions: the one named ``name`` (taken for ``channel``),
        or None. Asked when an ``attach`` names no session of this connection."""
        self.state = "header"
        """header, start-ok, secure-ok, tune-ok, open, opening, opened, closing, closed."""
        self.heartbeat = 0
        self.sessions: dict[int, Session] = {}
        self._out = bytearray()
        self._events: list[Event] = []
        self._header = b""
        self._assembler = Assembler(max_frame)
        self._now: float | None = None
        self._last_in = 0.0
        self._last_out = 0.0
        self._handshake_deadline: float | None = None
        self.close_reason: tuple[int, str] | None = None

    # -- the driver's interface ------------------------------------------------------------
    @property
    def is_closed(self) -> bool:
        return self.state == "closed"

    def receive_data(self, data: bytes) -> list[Event]:
        if self._now is not None:
            self._last_in = self._now
        if not data:
            if self.state != "closed":
                self.state = "closed"
                self._events.append(
                    ConnectionEnded(CLOSE_CODES["connection-forced"], "the stream ended")
                )
            return self.poll_events()
        if self.state == "closed":
            return self.poll_events()
        try:
            if self.state == "header":
                data = self._read_header(data)
            if data and self.state not in ("header", "closed"):
                for channel, item in self._assembler.feed(data):
                    if self.state == "closed":
                        break
                    try:
                        self._received(channel, item)
                    except (TypeError, ValueError, KeyError, IndexError, OverflowError) as exc:
                        # a well-framed control or command whose fields make no sense (a
                        # required one missing, a value of the wrong kind): the peer's error
                        raise ProtocolError(f"malformed {getattr(item, 'name', type(item).__name__)}: {exc}") from None
        except (FramingError, DecodeError, ProtocolError) as exc:
            code = exc.code if isinstance(exc, ProtocolError) else CLOSE_CODES["framing-error"]
            log.info("0-10 protocol error: %s", exc)
            self.close(code, str(exc)[:255])
        return self.poll_events()

    def data_to_send(self) -> bytes:
        for s in self.sessions.values():
            if s.report:
                self._report(s)
        out = bytes(self._out)
        self._out.clear()
        if out and self._now is not None:
            self._last_out = self._now
        return out

    def poll_events(self) -> list[Event]:
        events, self._events = self._events, []
        return events

    def tick(self, now: float) -> float | None:
        if self._now is None:
            self._last_in = self._last_out = now
            self._handshake_deadline = now + self.handshake_timeout
        self._now = now
        if self.state == "closed":
            return None
        deadlines: list[float] = []
        if self._handshake_deadline is not None:
            if self.state == "opened":
                self._handshake_deadline = None
            elif now >= self._handshake_deadline:
                self._handshake_deadline = None
                if self.state == "header":
                    self.state = "closed"
                    self._events.append(
                        ConnectionEnded(CLOSE_CODES["connection-forced"], "handshake timed out")
                    )
                    return None
                self.close(CLOSE_CODES["connection-forced"], "handshake timed out")
            else:
                deadlines.append(self._handshake_deadline)
        if self.heartbeat and self.state in ("opened", "closing"):
            if now - self._last_in > 2 * self.heartbeat:
                self.state = "closed"
                self._events.append(
                    ConnectionEnded(CLOSE_CODES["connection-forced"], "heartbeat timeout")
                )
                return None
            if now - self._last_out >= self.heartbeat:
                self._send(0, op("connection.heartbeat"))
                self._last_out = now
            deadlines += [
                self._last_out + self.heartbeat,
                self._last_in + 2 * self.heartbeat + 0.01,
            ]
        return min(deadlines) if deadlines else None

    # -- the application's answers ---------------------------------------------------------
    def accept_login(self) -> None:
        self.state = "tune-ok"
        self._send(0, op(
            "connection.tune",
            channel_max=self.channel_max,
            max_frame_size=self.max_frame,
            heartbeat_min=self.heartbeat_min,
            heartbeat_max=self.heartbeat_max,
        ))  # fmt: skip

    def challenge(self, data: bytes) -> None:
        self.state = "secure-ok"
        self._send(0, op("connection.secure", challenge=data))

    def reject_login(self, text: str = "authentication failed") -> None:
        self.close(CLOSE_CODES["connection-forced"], text)

    def accept_open(self) -> None:
        self.state = "opened"
        self._send(0, op("connection.open-ok", known_hosts=[]))
        self._events.append(ConnectionOpened())

    def refuse_open(self, code: int, text: str) -> None:
        self.close(code, text)

    def close(self, code: int = CLOSE_CODES["normal"], text: str = "") -> None:
        """Start closing the connection (``close-ok`` ends it)."""
        if self.state in ("closing", "closed"):
            return
        if self.state == "header":
            self._out += HEADER
        self.close_reason = (code, text)
        self._send(0, op("connection.close", reply_code=code, reply_text=text[:255]))
        self.state = "closing"
        self.sessions.clear()

    def send_command(self, channel: int, command: Compound) -> int:
        """Send a command on the session on ``channel``; return its id."""
        s = self.sessions[channel]
        s.sent(command)
        self._send(channel, command)
        return command.id

    def complete(self, channel: int, command: Compound, result: Compound | None = None) -> None:
        """``command`` is done (``result``: the struct its ``execution.result`` carries)."""
        s = self.sessions.get(channel)
        if s is None or s.failed:
            return
        if result is not None:
            self._send(
                channel,
                self._command(s, op("execution.result", command_id=command.id, value=result)),
            )
        s.record_completed(command.id, command.sync)

    def exception(
        self,
        channel: int,
        command: Compound | None,
        error: str,
        text: str,
        field_index: int | None = None,
    ) -> None:
        """Fail ``command`` with ``execution.exception`` (``error``: the spec's error-code
        name); the session detaches, as 0-10 ends a session at an exception."""
        s = self.sessions.get(channel)
        if s is None or s.failed:
            return
        values: dict[str, Any] = {"error_code": ERROR_CODES[error], "description": text[:65535]}
        if command is not None:
            code = command.spec.code or 0
            values.update(command_id=command.id, class_code=code >> 8, command_code=code & 0xFF)
            if field_index is not None:
                values["field_index"] = field_index
        self._send(channel, self._command(s, op("execution.exception", **values)))
        s.failed = True
        self._send(channel, op("session.detach", name=s.name))

    def detach(self, channel: int) -> None:
        s = self.sessions.get(channel)
        if s is not None:
            self._send(channel, op("session.detach", name=s.name))

    # -- input -----------------------------------------------------------------------------
    def _read_header(self, data: bytes) -> bytes:
        need = 8 - len(self._header)
        self._header += data[:need]
        if len(self._header) < 8:
            return b""
        if self._header != HEADER:
            self._out += HEADER
            self.state = "closed"
            self._events.append(
                ConnectionEnded(CLOSE_CODES["framing-error"], f"protocol header {self._header!r}")
            )
            return b""
        self._out += HEADER
        self._send(0, op(
            "connection.start",
            server_properties=self.server_properties,
            mechanisms=self.mechanisms,
            locales=["en_US"],
        ))  # fmt: skip
        self.state = "start-ok"
        return data[need:]

    def _received(self, channel: int, item: Compound) -> None:
        kind = item.spec.kind
        name = item.name
        if channel > self.channel_max and self.state == "opened":
            raise ProtocolError(f"channel {channel} is above channel-max {self.channel_max}")
        if kind == "control" and name.startswith("connection."):
            self._connection_control(name, item)
            return
        if self.state != "opened":
            if self.state == "closing":
                return  # (after close, all but close-ok is ignored)
            raise ProtocolError(f"{name} before the connection is open")
        if kind == "control":
            self._session_control(channel, name, item)
            return
        s = self.sessions.get(channel)
        if s is None:
            self._send(channel, op("session.detached", name=b"", code=DETACH_CODES["not-attached"]))
            return
        item.id = s.next_in
        s.next_in = (s.next_in + 1) & _MASK
        if s.failed:
            return
        if s.received is not None and 0 < ((s.received - item.id) & _MASK) < 0x80000000:
            s.report = True  # received before the session resumed: done (or under way) once
            return
        s.received = s.next_in
        if item.sync:
            s.sync.add(item.id)
        if name == "execution.sync":
            self.complete(channel, item)
            s.report = True
            return
        self._events.append(CommandReceived(channel, item))

    def _connection_control(self, name: str, c: Compound) -> None:
        state = self.state
        if name == "connection.heartbeat":
            return
        if name == "connection.close":
            self._send(0, op("connection.close-ok"))
            self.state = "closed"
            self.sessions.clear()
            self._events.append(ConnectionEnded(c["reply_code"] or 200, c.get("reply_text", "")))
            return
        if name == "connection.close-ok":
            if state == "closing":
                self.state = "closed"
                code, text = self.close_reason or (200, "")
                self._events.append(ConnectionEnded(code, text))
            return
        if state == "closing":
            return
        if name == "connection.start-ok" and state == "start-ok":
            mechanism = c.get("mechanism", "")
            if mechanism not in self.mechanisms:
                self.close(
                    CLOSE_CODES["connection-forced"], f"mechanism {mechanism!r} is not offered"
                )
                return
            self.state = "login"
            self._events.append(
                LoginRequested(
                    mechanism, bytes(c.get("response", b"")), dict(c.get("client_properties", {}))
                )
            )
        elif name == "connection.secure-ok" and state == "secure-ok":
            self.state = "login"
            self._events.append(SecureResponse(bytes(c.get("response", b""))))
        elif name == "connection.tune-ok" and state == "tune-ok":
            channel_max = c.get("channel_max", self.channel_max)
            self.channel_max = (
                min(channel_max, self.channel_max) if channel_max else self.channel_max
            )
            frame = c.get("max_frame_size", self.max_frame) or self.max_frame
            if frame < MIN_MAX_FRAME:
                raise ProtocolError(f"max-frame-size {frame} is below {MIN_MAX_FRAME}")
            self.max_frame = min(frame, self.max_frame)
            heartbeat = c.get("heartbeat", 0)
            if heartbeat and not self.heartbeat_min <= heartbeat <= self.heartbeat_max:
                raise ProtocolError(
                    f"heartbeat {heartbeat} is outside {self.heartbeat_min}-{self.heartbeat_max}"
                )
            self.heartbeat = heartbeat
            self.state = "open"
        elif name == "connection.open" and state == "open":
            self.state = "opening"
            self._events.append(OpenRequested(c.get("virtual_host", "")))
        else:
            raise ProtocolError(f"{name} in state {state}")

    def _session_control(self, channel: int, name: str, c: Compound) -> None:
        s = self.sessions.get(channel)
        if name == "session.attach":
            sname = bytes(c["name"])
            if s is not None:
                self._send(
                    channel, op("session.detached", name=sname, code=DETACH_CODES["session-busy"])
                )
                return
            if any(o.name == sname for o in self.sessions.values()) and not c["force"]:
                self._send(
                    channel, op("session.detached", name=sname, code=DETACH_CODES["session-busy"])
                )
                return
            kept = self.resumable(channel, sname)
            if kept is not None:
                self._resume(channel, kept)
                return
            s = self.sessions[channel] = Session(channel, sname)
            self._send(channel, op("session.attached", name=sname))
            self._send(channel, op("session.command-point", command_id=0, command_offset=0))
            self._events.append(SessionAttached(channel, sname))
            return
        if name == "session.detached":
            if s is not None:
                del self.sessions[channel]
                self._events.append(SessionDetached(channel, s.name))
            return
        if s is None:
            if name != "session.detach":
                self._send(
                    channel, op("session.detached", name=b"", code=DETACH_CODES["not-attached"])
                )
            else:
                self._send(
                    channel,
                    op("session.detached", name=c["name"], code=DETACH_CODES["not-attached"]),
                )
            return
        if name == "session.detach":
            del self.sessions[channel]
            self._send(channel, op("session.detached", name=s.name, code=DETACH_CODES["normal"]))
            self._events.append(SessionDetached(channel, s.name))
        elif name == "session.command-point":
            if c["command_id"] is None:
                raise ProtocolError("session.command-point without its command-id")
            s.next_in = c["command_id"] & _MASK
        elif name == "session.request-timeout":
            s.timeout = min(c.get("timeout", 0) or 0, self.max_session_timeout)
            if not s.timeout:
                s.replay = None
            elif s.replay is None:
                s.replay = {}
            self._send(channel, op("session.timeout", timeout=s.timeout))
        elif name == "session.flush":
            if c["expected"]:
                self._send(channel, op("session.expected", commands=((s.next_in, s.next_in),)))
            if c["confirmed"]:
                self._send(channel, op("session.confirmed", commands=s.completed.sequence_set()))
            if c["completed"]:
                s.report = True
        elif name == "session.completed":
            commands: SequenceSet = c.get("commands", ())
            if commands:
                s.peer_completed(commands)
                self._events.append(TransfersCompleted(channel, commands))
            if c["timely_reply"]:
                self._send(channel, op("session.known-completed", commands=commands))
        elif name == "session.known-completed":
            for lo, hi in c.get("commands", ()):
                s.completed.remove_range(lo, hi)
        elif name == "session.gap":
            for lo, hi in c.get("commands", ()):
                s.completed.add_range(lo, hi)
        # session.expected, confirmed, timeout, attached: nothing to do for a server

    def _resume(self, channel: int, s: Session) -> None:
        """Attach the kept session ``s`` to ``channel``: ``attached``, the command point of
        the first command the peer has not completed, and those commands again."""
        s.channel = channel
        self.sessions[channel] = s
        self._send(channel, op("session.attached", name=s.name))
        replay = s.replay or {}
        first = min(replay, default=s.next_out)
        self._send(channel, op("session.command-point", command_id=first, command_offset=0))
        for cid in sorted(replay):
            self._send(channel, replay[cid])
        s.report = bool(s.completed)
        self._events.append(SessionAttached(channel, s.name, resumed=True))

    # -- output ----------------------------------------------------------------------------
    def _command(self, s: Session, command: Compound) -> Compound:
        s.sent(command)
        return command

    def _send(self, channel: int, item: Compound) -> None:
        encode_op(self._out, channel, item, self.max_frame)

    def _report(self, s: Session) -> None:
        s.report = False
        s.unreported = 0
        self._send(
            s.channel,
            op("session.completed", commands=s.completed.sequence_set(), timely_reply=False),
        )


def result_struct(name: str, **values: Any) -> Compound:
    """A command's result struct by name (``queue-query-result``)."""
    return Compound(STRUCTS[name], values)
