"""The sans-IO 0-9-1 connection: bytes in, events and bytes out, time injected.

``receive_data(data)`` parses frames and returns events (``b""`` is the end of
the stream); ``data_to_send()`` drains what the engine wants written;
``tick(now)`` runs heartbeats and timeouts with a time the caller supplies and
returns the next deadline. No sockets, clocks or sleeps in here.

The same class plays the server (a broker front end) or the client (tests' pair
harness, tools). Peer violations never escape as exceptions: a hard error
queues ``connection.close`` with its reply code and reports ``ConnectionFailed``;
a soft one closes only the channel. Misuse by the application raises
``IllegalStateError`` (or ``ValueError`` for bad arguments) before anything changes.
The handlers of the ``connection.*`` methods received on channel 0 (handshake,
close, RabbitMQ's extensions) are in :mod:`.connection_methods`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Literal

from .auth import MECHANISMS
from .base import Method, Properties
from .channel import Channel
from .channel_state import ChannelInput, ChannelState
from .connection_methods import ConnectionMethods
from .connection_state import RECEIVED, ConnectionInput, ConnectionState, next_state
from .dialects import AMQP_0_9_1, Dialect
from .errors import AMQPError, ChannelException, ConnectionException, IllegalStateError, reply_text
from .events import (
    ChannelOpened,
    ConnectionFailed,
    ConnectionLost,
    ConnectionOpened,
    Event,
    reason_of,
)
from .framing import (
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    FRAME_OVERHEAD,
    FRAME_PREFIX,
    encode_content,
    encode_heartbeat,
    end_frame,
    start_frame,
)
from .handshake import server_start
from .methods import (
    FRAME_MIN_SIZE,
    ChannelClose,
    ChannelFlow,
    ChannelOpen,
    ChannelOpenOk,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionSecure,
    ConnectionSecureOk,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    ConnectionUpdateSecret,
    ConnectionUpdateSecretOk,
    ReplyCode,
)
from .methods import (
    ConnectionBlocked as Blocked,
)
from .methods import (
    ConnectionUnblocked as Unblocked,
)
from .timers import Timers

__all__ = ["Connection", "Role"]

Role = Literal["server", "client"]
S = ConnectionState
I = ConnectionInput  # noqa: E741

_PRE_TUNE: Final = (S.START, S.HEADER_RCVD, S.HEADER_SENT, S.START_SENT, S.START_RCVD, S.START_OK_SENT,
                    S.AUTHENTICATING, S.SECURE_SENT, S.SECURE_RCVD, S.TUNE_SENT, S.TUNE_RCVD)  # fmt: skip
_HANDSHAKE: Final = frozenset(_PRE_TUNE) | {S.TUNED, S.OPEN_RCVD, S.OPEN_SENT}
_U32: Final = 0xFFFFFFFF
_unpack_prefix: Final = FRAME_PREFIX.unpack_from
_pack_prefix: Final = FRAME_PREFIX.pack
_FRAME_END: Final = bytes((FRAME_END,))
# the states each frame and each read compare with, as constants: in the compiled build a
# Final name is a static, where ``S.OPEN`` is a dict lookup and an attribute lookup a time
_OPEN: Final = S.OPEN
_CLOSED: Final = S.CLOSED
_CLOSE_SENT: Final = S.CLOSE_SENT
_START: Final = S.START
_HEADER_SENT: Final = S.HEADER_SENT


class Connection(ConnectionMethods):
    """One 0-9-1 connection endpoint.

    ``channel_max``, ``frame_max`` and ``heartbeat`` are what *we* offer (server)
    or ask for (client; ``heartbeat=None`` takes the server's); the negotiated
    values replace them after tuning. ``max_message_size`` bounds incoming bodies
    (a larger one closes its channel with PRECONDITION_FAILED).
    """

    def __init__(
        self,
        role: Role = "server",
        *,
        dialect: Dialect = AMQP_0_9_1,
        channel_max: int = 2047,
        frame_max: int = 131072,
        heartbeat: int | None = 60,
        max_message_size: int = 128 * 1024 * 1024,
        handshake_timeout: float | None = 10.0,
        close_timeout: float | None = 10.0,
        # server
        server_properties: dict[str, Any] | None = None,
        mechanisms: tuple[str, ...] = ("PLAIN", "AMQPLAIN"),
        locales: tuple[str, ...] = ("en_US",),
        # client
        username: str = "guest",
        password: str = "guest",
        mechanism: str = "PLAIN",
        virtual_host: str = "/",
        client_properties: dict[str, Any] | None = None,
    ) -> None:
        if role not in ("server", "client"):
            raise ValueError(f"role must be 'server' or 'client', got {role!r}")
        if not 0 <= channel_max <= 0xFFFF:
            raise ValueError(f"channel_max must be in [0, 65535], got {channel_max}")
        if frame_max and not FRAME_MIN_SIZE <= frame_max <= _U32:
            raise ValueError(f"frame_max must be 0 or in [4096, 2**32-1], got {frame_max}")
        if heartbeat is not None and not 0 <= heartbeat <= 0xFFFF:
            raise ValueError(f"heartbeat must be in [0, 65535] seconds, got {heartbeat}")
        unknown = set(mechanisms) - set(MECHANISMS)
        if unknown:
            raise ValueError(f"unsupported mechanisms: {sorted(unknown)}")
        self.role: Role = role
        self.dialect = dialect
        self.state = S.START
        self.channel_max = channel_max
        self.frame_max = frame_max
        self.heartbeat = heartbeat
        self.max_message_size = max_message_size
        self.handshake_timeout = handshake_timeout
        self.close_timeout = close_timeout
        self.server_properties = server_properties
        self.mechanisms = mechanisms
        self.locales = locales
        self.username = username
        self.password = password
        self.mechanism = mechanism
        self.virtual_host = virtual_host
        self.client_properties = client_properties
        self.peer_properties: dict[str, Any] = {}
        """The peer's server-properties or client-properties."""
        self.peer_mechanisms: tuple[str, ...] = ()
        self.login_mechanism: str | None = None
        """Server: the mechanism the client chose."""
        self.close_sent: ConnectionClose | None = None
        self.close_received: ConnectionClose | None = None
        self.blocked = False
        """Server: we sent connection.blocked (and not yet unblocked)."""
        self._channels: dict[int, Channel] = {}
        self._events: list[Event] = []
        self._out = bytearray()
        self._in = bytearray()
        self._discard_input = False
        # until tuning, frames are at most frame-min-size both ways (§4.2.3)
        self._recv_frame_max = FRAME_MIN_SIZE
        self._send_frame_max = FRAME_MIN_SIZE
        self._timers = Timers(handshake_timeout, close_timeout)
        self._stamped = 0  # bytes at the head of _out whose sending tick() has stamped
        # counted for metrics (plain integers: the broker sums them when scraped)
        self.frames_in = 0
        self.frames_out = 0
        self.errors_sent: dict[int, int] = {}
        """The reply codes (300 and up) of the connection and channel closes we sent."""
        self._handlers: dict[type[Method], Callable[[Any], None]] = {
            ConnectionStart: self._on_start,
            ConnectionStartOk: self._on_start_ok,
            ConnectionSecure: self._on_secure,
            ConnectionSecureOk: self._on_secure_ok,
            ConnectionTune: self._on_tune,
            ConnectionTuneOk: self._on_tune_ok,
            ConnectionOpen: self._on_open,
            ConnectionOpenOk: self._on_open_ok,
            ConnectionClose: self._on_close,
            ConnectionCloseOk: self._on_close_ok,
        }
        self._encoded_ids: dict[type[Method], bytes] = {}
        """``send_encoded_content``: the class and method ids of each method it sent (a
        method's type, the role and the dialect are checked once)."""
        if role == "client":
            self._move(I.SEND_HEADER)
            self._out += dialect.header

    def __repr__(self) -> str:
        return f"<amqp091.Connection {self.role} {self.dialect.name} {self.state.name}>"

    # -- I/O ------------------------------------------------------------------------------

    def data_to_send(self) -> bytes:
        """The bytes to write, drained."""
        if not self._out:
            return b""
        out = bytes(self._out)
        self._out.clear()
        # a heartbeat tick() queued is already stamped with its time; only later bytes count
        if len(out) > self._stamped:
            self._timers.sent()
        self._stamped = 0
        return out

    def poll_events(self) -> list[Event]:
        """Events raised by ``tick`` or by the application's calls, drained."""
        events, self._events = self._events, []
        return events

    def receive_data(self, data: bytes) -> list[Event]:
        """Feed bytes from the peer; ``b""`` means the stream ended. Returns the events."""
        if not data:
            if self.state is not _CLOSED:
                self._lose("the peer closed the stream")
            return self.poll_events()
        if self.state is _CLOSED or self._discard_input:
            return self.poll_events()
        self._timers.received()
        if self.state is _START or self.state is _HEADER_SENT:
            self._in += data
            if not self._receive_header():
                return self.poll_events()
            data = bytes(self._in)
            self._in.clear()
        elif self._in:  # (the start of a frame the last read cut)
            buf = self._in
            buf += data
            if len(buf) < 7:
                return self.poll_events()
            size: int = _unpack_prefix(buf, 0)[2]
            if len(buf) <= 7 + size and size + FRAME_OVERHEAD <= self._recv_frame_max:
                # still cut: gathered as it comes (a frame-max error is the loop's, below),
                # each read appended once, not copied again with what came before it
                return self.poll_events()
            data = bytes(buf)
            buf.clear()
        elif type(data) is not bytes:  # (a payload is a slice of it: bytes, not a view)
            data = bytes(data)
        # frames are read from ``data`` itself, each payload one slice (one copy); what is
        # left of a frame not whole yet waits in ``_in``
        pos = 0
        end_of_data = len(data)
        recv_max = self._recv_frame_max
        while end_of_data - pos >= 7 and not self._discard_input:
            frame_type, channel, size = _unpack_prefix(data, pos)
            if size + FRAME_OVERHEAD > recv_max:
                self._frame_error(
                    f"frame of {size + FRAME_OVERHEAD} bytes exceeds frame-max {recv_max}"
                )
                break
            end = pos + 7 + size
            if end >= end_of_data:
                break
            if data[end] != FRAME_END:
                self._frame_error(f"frame-end octet is {data[end]:#04x}, not 0xce")
                break
            payload = data[pos + 7 : end]
            pos = end + 1
            self.frames_in += 1
            try:
                self._dispatch(frame_type, channel, payload)
            except ChannelException as exc:
                self._channel_exception(channel, exc)
            # a name of its own for each type caught: mypyc gives a name one type
            except ConnectionException as err:
                self._fail(err)
            except Exception as bug:  # a bug of ours: close, never raise into the driver
                self._fail(
                    ConnectionException(
                        ReplyCode.INTERNAL_ERROR, f"INTERNAL_ERROR - {type(bug).__name__}: {bug}"
                    ),
                    discard=True,
                )
            recv_max = self._recv_frame_max
        if not self._discard_input and pos < end_of_data:
            self._in += memoryview(data)[pos:]
        return self.poll_events()

    def tick(self, now: float) -> float | None:
        """Run heartbeats and timeouts at time ``now`` (seconds, any monotonic clock).

        Returns when to call again (None: no timer needed). Events it raises are in
        ``poll_events()``.
        """
        due = self._timers.check(
            now, handshaking=self.state in _HANDSHAKE, closing=self.state is S.CLOSE_SENT
        )
        if self.state is S.CLOSED:
            return None
        if due.lost is not None:
            self._lose(due.lost)
            return None
        if due.heartbeat and self.state is not S.CLOSE_RCVD:
            encode_heartbeat(self._out)
            self.frames_out += 1
            self._stamped = len(self._out)  # its sending time is stamped already
        return due.deadline

    # -- the application's side: connection -------------------------------------------------

    def accept_login(self) -> None:
        """Server: the credentials are good: send ``tune``."""
        self._expect_role("server")
        self._move(I.SEND_TUNE)
        self._send_method(
            0,
            ConnectionTune(
                channel_max=self.channel_max,
                frame_max=self.frame_max,
                heartbeat=self.heartbeat or 0,
            ),
        )

    def challenge(self, data: bytes) -> None:
        """Server: send ``connection.secure`` with a challenge (SASL mechanisms with rounds)."""
        self._expect_role("server")
        self._move(I.SEND_SECURE)
        self._send_method(0, ConnectionSecure(challenge=data))

    def extend_handshake(self, seconds: float) -> None:
        """Allow the handshake ``seconds`` more: the server held an answer back that long
        (a login back-off), which is not the peer's delay."""
        timers = self._timers
        if timers.handshake_timeout is not None and seconds > 0:
            timers.handshake_timeout += seconds

    def reject_login(self, explanation: str | None = None) -> None:
        """Server: refuse the login: close with ACCESS_REFUSED (RabbitMQ's text unless given)."""
        self._expect_role("server")
        if self.state not in (S.AUTHENTICATING, S.SECURE_SENT):
            raise IllegalStateError(f"no login to refuse in state {self.state.name}")
        text = explanation or (
            f"Login was refused using authentication mechanism {self.login_mechanism}. "
            "For details see the broker logfile."
        )
        self.close(ReplyCode.ACCESS_REFUSED, reply_text(ReplyCode.ACCESS_REFUSED, text))

    def secure_ok(self, response: bytes) -> None:
        """Client: answer the server's challenge."""
        self._expect_role("client")
        self._move(I.SEND_SECURE_OK)
        self._send_method(0, ConnectionSecureOk(response=response))

    def accept_open(self) -> None:
        """Server: the virtual host exists and the user may use it: send ``open-ok``."""
        self._expect_role("server")
        self._move(I.SEND_OPEN_OK)
        self._send_method(0, ConnectionOpenOk())
        self._events.append(ConnectionOpened(virtual_host=self.virtual_host))

    def refuse_open(
        self, reply_code: int = ReplyCode.NOT_ALLOWED, explanation: str | None = None
    ) -> None:
        """Server: refuse ``connection.open`` (NOT_ALLOWED: no such vhost; ACCESS_REFUSED: no rights)."""
        self._expect_role("server")
        if self.state is not S.OPEN_RCVD:
            raise IllegalStateError(f"no open to refuse in state {self.state.name}")
        if explanation is None:
            explanation = (
                f"access to vhost '{self.virtual_host}' refused for user '{self.username}'"
                if reply_code == ReplyCode.ACCESS_REFUSED
                else f"vhost {self.virtual_host} not found"
            )
        self.close(reply_code, reply_text(reply_code, explanation), 10, 40)

    def close(
        self, reply_code: int = 200, reply_text: str = "OK", class_id: int = 0, method_id: int = 0
    ) -> None:
        """Send ``connection.close``; ``ConnectionClosed`` follows the peer's close-ok."""
        self._move(I.SEND_CLOSE)
        close = ConnectionClose(
            reply_code=reply_code, reply_text=reply_text, class_id=class_id, method_id=method_id
        )
        self.close_sent = close
        self._channels.clear()
        self._send_method(0, close)
        self._count_error(reply_code)

    def block(self, reason: str) -> bool:
        """Server: tell the client publishing is blocked, if it understands ``connection.blocked``.

        Returns whether it was sent.
        """
        self._expect_role("server")
        if (
            self.state is not S.OPEN
            or self.blocked
            or not self.peer_capability("connection.blocked")
        ):
            return False
        self.blocked = True
        self._send_method(0, Blocked(reason=reason))
        return True

    def unblock(self) -> bool:
        """Server: lift the block; returns whether ``connection.unblocked`` was sent."""
        self._expect_role("server")
        if self.state is not S.OPEN or not self.blocked:
            return False
        self.blocked = False
        self._send_method(0, Unblocked())
        return True

    def update_secret_ok(self) -> None:
        """Server: the new secret is accepted."""
        self._expect_role("server")
        self._expect_open()
        self._send_method(0, ConnectionUpdateSecretOk())

    def update_secret(self, new_secret: bytes, reason: str) -> None:
        """Client: send ``connection.update-secret``."""
        self._expect_role("client")
        self._expect_open()
        self._send_method(0, ConnectionUpdateSecret(new_secret=new_secret, reason=reason))

    def peer_capability(self, name: str) -> bool:
        """Whether the peer's properties announce capability ``name``."""
        caps = self.peer_properties.get("capabilities")
        return isinstance(caps, dict) and caps.get(name) is True

    # -- the application's side: channels ---------------------------------------------------

    @property
    def channels(self) -> dict[int, ChannelState]:
        """The channels in use and their states."""
        return {n: ch.state for n, ch in self._channels.items()}

    def open_channel(self, number: int | None = None) -> int:
        """Client: open a channel (the lowest free number unless given); ``ChannelOpened`` follows."""
        self._expect_role("client")
        self._expect_open()
        limit = self.channel_max or 0xFFFF
        if number is None:
            number = next((n for n in range(1, limit + 1) if n not in self._channels), 0)
            if not number:
                raise IllegalStateError(f"all {limit} channels are in use")
        elif not 1 <= number <= limit or number in self._channels:
            raise ValueError(f"channel {number} is in use or beyond channel-max {limit}")
        ch = Channel(number, self.max_message_size)
        ch.move(ChannelInput.SEND_OPEN)
        self._channels[number] = ch
        self._send_method(number, ChannelOpen())
        return number

    def close_channel(
        self,
        channel: int,
        reply_code: int = 200,
        reply_text: str = "OK",
        class_id: int = 0,
        method_id: int = 0,
    ) -> None:
        """Close a channel (a channel exception: a soft error code and RabbitMQ's text).

        The peer's input on it is discarded until its close-ok; ``ChannelClosed`` follows.
        """
        self._expect_open()
        ch = self._channel(channel)
        close = ChannelClose(
            reply_code=reply_code, reply_text=reply_text, class_id=class_id, method_id=method_id
        )
        ch.send_close(close)
        self._send_method(channel, close)
        self._count_error(reply_code)

    def _count_error(self, reply_code: int) -> None:
        if reply_code >= 300:
            self.errors_sent[reply_code] = self.errors_sent.get(reply_code, 0) + 1

    def flow(self, channel: int, active: bool) -> None:
        """Ask the peer to stop (``active=False``) or resume sending content on a channel;
        its ``flow-ok`` arrives as ``MethodReceived``."""
        self._expect_open()
        self._channel(channel).move(ChannelInput.SEND_METHOD)
        self._send_method(channel, ChannelFlow(active=active))

    def send_method(self, channel: int, method: Method) -> None:
        """Send a method without content on an open channel (``queue.declare-ok``, ``basic.ack``…).

        Connection and channel lifecycle methods have their own calls; content-bearing
        methods go through ``send_content``.
        """
        self._check_sendable(channel, type(method))
        if method.CONTENT:
            raise ValueError(f"{method.NAME} carries content: use send_content")
        self._send_method(channel, method)

    def send_content(
        self,
        channel: int,
        method: Method,
        properties: Properties | bytes,
        body: bytes | memoryview,
    ) -> None:
        """Send a content-bearing method (``basic.deliver``, ``get-ok``, ``return``, ``publish``)
        with its properties (or raw property bytes as received) and body, cut to frame-max."""
        self._check_sendable(channel, type(method))
        if not method.CONTENT:
            raise ValueError(f"{method.NAME} carries no content: use send_method")
        start = len(self._out)
        try:
            self._send_method(channel, method)
            self.frames_out += encode_content(
                self._out, channel, method.CLASS_ID, properties, body, self._send_frame_max
            )
        except BaseException:
            del self._out[start:]
            raise

    def send_encoded_content(
        self,
        channel: int,
        method: type[Method],
        arguments: bytes,
        properties: bytes,
        body: bytes | memoryview,
    ) -> None:
        """``send_content`` with the method's arguments already encoded (0-9-1's layout):
        a broker delivering a stored message has its exchange and routing key in wire
        form, and each consumer's tag. A version that lays the method out otherwise is a
        ValueError (use ``send_content``)."""
        ids = self._encoded_ids.get(method)
        if ids is None:
            ids = self.dialect.plain_ids(method)
            if ids is None:
                raise ValueError(f"{method.NAME} has another layout in AMQP {self.dialect.name}")
            self._check_sendable(channel, method)
            if not method.CONTENT:
                raise ValueError(f"{method.NAME} carries no content: use send_method")
            self._encoded_ids[method] = ids  # what depends on the method's type is checked once
        else:  # the method passed: only the connection's and the channel's states remain
            ch = self._channels.get(channel) if self.state is _OPEN else None
            if ch is None or ch.state is not ChannelState.OPEN:
                self._check_sendable(channel, method)  # (raises)
        size = len(ids) + len(arguments)
        frame_max = self._send_frame_max
        if frame_max and size + FRAME_OVERHEAD > frame_max:
            raise ValueError(
                f"{method.NAME} frame of {size + FRAME_OVERHEAD} bytes exceeds frame-max"
            )
        out = self._out
        start = len(out)
        try:
            out += _pack_prefix(FRAME_METHOD, channel, size)
            out += ids
            out += arguments
            out += _FRAME_END
            frames = 1 + encode_content(out, channel, method.CLASS_ID, properties, body, frame_max)
        except BaseException:
            del out[start:]
            raise
        self.frames_out += frames

    def _check_sendable(self, channel: int, method: type[Method]) -> None:
        self._expect_open()
        if method.CLASS_ID in (10, 20):
            raise ValueError(
                f"{method.NAME} has its own call (close, close_channel, open_channel…)"
            )
        peer = "client" if self.role == "server" else "server"
        if peer not in method.RECEIVED_BY:
            raise ValueError(f"a {self.role} does not send {method.NAME}")
        if not self.dialect.supports(method):
            raise ValueError(f"{method.NAME} does not exist in AMQP {self.dialect.name}")
        ch = self._channel(channel)
        if ch.state is not ChannelState.OPEN:
            raise IllegalStateError(f"channel {channel} is {ch.state.name}")

    # -- internals: state ---------------------------------------------------------------------

    def _move(self, event: ConnectionInput) -> None:
        new = next_state(self.state, event)
        if new is None:
            if event.name.startswith("RECV"):
                raise ConnectionException(
                    ReplyCode.COMMAND_INVALID,
                    f"COMMAND_INVALID - {event.value} not expected in state {self.state.name}",
                )
            raise IllegalStateError(f"cannot {event.value} in state {self.state.name}")
        self.state = new

    def _expect_role(self, role: Role) -> None:
        if self.role != role:
            raise IllegalStateError(f"only a {role} does that")

    def _expect_open(self) -> None:
        if self.state is not S.OPEN:
            raise IllegalStateError(f"the connection is {self.state.name}, not OPEN")

    def _channel(self, channel: int) -> Channel:
        ch = self._channels.get(channel)
        if ch is None:
            raise IllegalStateError(f"channel {channel} is not open")
        return ch

    def _send_method(self, channel: int, method: Method) -> None:
        out = self._out
        start = start_frame(out)
        self.dialect.encode_method(out, method)
        size = end_frame(out, start, FRAME_METHOD, channel)
        if self._send_frame_max and size > self._send_frame_max:
            del out[start:]
            raise ValueError(
                f"{method.NAME} frame of {size} bytes exceeds frame-max {self._send_frame_max}"
            )
        self.frames_out += 1

    def _lose(self, reason: str) -> None:
        self.state = S.CLOSED
        self._channels.clear()
        self._discard_input = True
        self._events.append(ConnectionLost(reason=reason))

    def _fail(self, exc: AMQPError, discard: bool = False) -> None:
        """A connection exception: close with its code (once), report it, discard channel input."""
        if discard:
            self._discard_input = True
        # (CLOSE_RCVD never lasts: the peer's close is answered as it is handled)
        if self.state in (S.CLOSE_SENT, S.CLOSED):
            return
        if self.state is S.START:  # before any header: nothing to close
            self._lose(exc.reply_text)
            return
        self.close(exc.reply_code, exc.reply_text[:255], exc.class_id, exc.method_id)
        self._events.append(
            ConnectionFailed(
                **reason_of(exc),
            )
        )

    def _frame_error(self, text: str) -> None:
        # the stream has lost its framing: nothing after this can be read
        self._fail(
            ConnectionException(ReplyCode.FRAME_ERROR, f"FRAME_ERROR - {text}"), discard=True
        )

    def _channel_exception(self, channel: int, exc: ChannelException) -> None:
        ch = self._channels.get(channel)
        if ch is None or ch.state is not ChannelState.OPEN or self.state is not S.OPEN:
            return
        self.close_channel(
            channel, exc.reply_code, exc.reply_text[:255], exc.class_id, exc.method_id
        )

    # -- internals: input -----------------------------------------------------------------------

    def _receive_header(self) -> bool:
        """Handle the protocol header; True when frames may follow."""
        buf = self._in
        if self.state is S.HEADER_SENT:
            # a server that refuses our version answers with its own header
            if buf[:1] == b"A":
                if len(buf) < 8:
                    return False
                self._lose(
                    f"the server refused AMQP {self.dialect.name}; it offers {bytes(buf[:8])!r}"
                )
                return False
            return True
        accepted = self.dialect.accepted_headers
        if len(buf) < 8:
            if not any(h.startswith(bytes(buf)) for h in accepted):
                self._refuse_header()
            return False
        if bytes(buf[:8]) not in accepted:
            self._refuse_header()
            return False
        del buf[:8]
        self._move(I.RECV_HEADER)
        self._move(I.SEND_START)
        self._send_method(
            0, server_start(self.dialect, self.server_properties, self.mechanisms, self.locales)
        )
        return True

    def _refuse_header(self) -> None:
        self._out += self.dialect.header
        self._lose(f"unsupported protocol header {bytes(self._in[:8])!r}")

    def _dispatch(self, frame_type: int, channel: int, payload: bytes) -> None:
        """One frame to its handler (a native call each, the commonest type first)."""
        if self.state is _CLOSE_SENT:
            # §4.2.2: after our close, only close and close-ok matter
            if frame_type == FRAME_METHOD and channel == 0:
                try:
                    method = self.dialect.decode_method(payload)
                except AMQPError:
                    return
                if type(method) is ConnectionClose or type(method) is ConnectionCloseOk:
                    self._connection_method(method)
            return
        if frame_type == FRAME_BODY:
            self._body_frame(channel, payload)
        elif frame_type == FRAME_HEADER:
            self._header_frame(channel, payload)
        elif frame_type == FRAME_METHOD:
            self._method_frame(channel, payload)
        elif frame_type == FRAME_HEARTBEAT:
            self._heartbeat_frame(channel, payload)
        else:  # the framing itself is intact: the close-ok can still be read
            raise ConnectionException(
                ReplyCode.FRAME_ERROR, f"FRAME_ERROR - unknown frame type {frame_type}"
            )

    def _method_frame(self, channel: int, payload: bytes) -> None:
        method = self.dialect.decode_method(payload)
        if self.role not in method.RECEIVED_BY:
            raise ConnectionException(
                ReplyCode.COMMAND_INVALID,
                f"COMMAND_INVALID - a {self.role} does not accept {method.NAME}",
                method.CLASS_ID,
                method.METHOD_ID,
            )
        if channel == 0:
            self._connection_method(method)
        else:
            self._channel_method(channel, method)

    def _header_frame(self, channel: int, payload: bytes) -> None:
        ch = self._channels.get(channel) if channel and self.state is _OPEN else None
        if ch is None:
            ch = self._content_channel(channel)  # (raises)
        self._events += ch.receive_header(payload)

    def _body_frame(self, channel: int, payload: bytes) -> None:
        ch = self._channels.get(channel) if channel and self.state is _OPEN else None
        if ch is None:
            ch = self._content_channel(channel)  # (raises)
        self._events += ch.receive_body(payload)

    def _heartbeat_frame(self, channel: int, payload: bytes) -> None:
        if channel != 0 or payload:
            raise ConnectionException(
                ReplyCode.FRAME_ERROR, "FRAME_ERROR - heartbeat frame not empty or not on channel 0"
            )

    def _content_channel(self, channel: int) -> Channel:
        """The open channel a content frame is on (the frame handlers' check, where it fails)."""
        if channel == 0 or self.state is not _OPEN:
            raise ConnectionException(
                ReplyCode.UNEXPECTED_FRAME, f"UNEXPECTED_FRAME - content frame on channel {channel}"
            )
        ch = self._channels.get(channel)
        if ch is None:
            raise ConnectionException(
                ReplyCode.CHANNEL_ERROR,
                f"CHANNEL_ERROR - expected 'channel.open' on channel {channel}",
            )
        return ch

    def _connection_method(self, method: Method) -> None:
        if method.CLASS_ID != 10:
            raise ConnectionException(
                ReplyCode.COMMAND_INVALID,
                f"COMMAND_INVALID - {method.NAME} on channel 0",
                method.CLASS_ID,
                method.METHOD_ID,
            )
        event = RECEIVED.get(method.NAME)
        if event is None:  # RabbitMQ's extensions: only on an open connection
            if self.state is not S.OPEN:
                raise ConnectionException(
                    ReplyCode.COMMAND_INVALID,
                    f"COMMAND_INVALID - {method.NAME} before the connection is open",
                    method.CLASS_ID,
                    method.METHOD_ID,
                )
            self._extension(method)
            return
        try:
            self._move(event)
        except ConnectionException as exc:
            exc.class_id, exc.method_id = method.CLASS_ID, method.METHOD_ID
            raise
        self._handlers[type(method)](method)

    def _channel_method(self, channel: int, method: Method) -> None:
        if self.state is not _OPEN:
            raise ConnectionException(
                ReplyCode.COMMAND_INVALID,
                f"COMMAND_INVALID - {method.NAME} on channel {channel} before the connection is open",
                method.CLASS_ID,
                method.METHOD_ID,
            )
        if method.CLASS_ID == 10:
            raise ConnectionException(
                ReplyCode.COMMAND_INVALID,
                f"COMMAND_INVALID - {method.NAME} on channel {channel}",
                method.CLASS_ID,
                method.METHOD_ID,
            )
        ch = self._channels.get(channel)
        if ch is None:
            if type(method) is not ChannelOpen:
                raise ConnectionException(
                    ReplyCode.CHANNEL_ERROR,
                    f"CHANNEL_ERROR - expected 'channel.open' on channel {channel}, got {method.NAME}",
                    method.CLASS_ID,
                    method.METHOD_ID,
                )
            limit = self.channel_max or 0xFFFF
            if len(self._channels) >= limit:  # RabbitMQ limits how many, not which numbers
                raise ConnectionException(
                    ReplyCode.NOT_ALLOWED,
                    f"NOT_ALLOWED - number of channels opened ({len(self._channels)}) has reached "
                    f"the negotiated channel_max ({limit})",
                    20,
                    10,
                )
            ch = Channel(channel, self.max_message_size)
            self._channels[channel] = ch
            # the channel answers open-ok; the connection does the sending
            ch.move(ChannelInput.RECV_OPEN)
            ch.move(ChannelInput.SEND_OPEN_OK)
            self._send_method(channel, ChannelOpenOk())
            self._events.append(ChannelOpened(channel=channel))
            return
        if type(method) is ChannelFlow and self.role == "server" and not method.active:
            # RabbitMQ 3.3 and later (rabbit_channel): a client may not pause deliveries
            raise ConnectionException(ReplyCode.NOT_IMPLEMENTED, "NOT_IMPLEMENTED - active=false", 20, 20)
        events, replies = ch.receive_method(method)
        for reply in replies:
            self._send_method(channel, reply)
        if ch.state is ChannelState.CLOSED:
            del self._channels[channel]
        self._events += events
