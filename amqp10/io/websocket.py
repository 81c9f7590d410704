"""AMQP over WebSockets: a byte stream carried in binary WebSocket messages.

The OASIS "AMQP WebSocket Binding (WSB) Version 1.0": the client asks for the
subprotocol ``amqp`` in the HTTP upgrade; after it, binary messages carry the
ordinary AMQP 1.0 byte stream (protocol headers and SASL included) and their
boundaries mean nothing. So the engine never knows: :class:`WebSocketStream`
is an anyio :class:`~anyio.abc.ByteStream` like a TCP or TLS stream, and the
same :class:`~amqp10.io.driver.Driver` runs over it.

The framing is `wsproto`'s (sans-IO). Received payload is passed on as it
arrives, fragment by fragment, so a large message is never buffered whole;
``max_message_size`` still bounds what one message may carry. A peer that
breaks the rules gets a close frame with the right code (RFC 6455 §7.4.1):
1003 for a text message, 1009 for a message over the limit, 1002 for bad
framing; the stream then fails with a :class:`WebSocketError` as its cause,
and the failure is logged in one line.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import anyio
from anyio.abc import ByteStream
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from .. import errors
from .net import IO_ERRORS, map_io_error

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "SUBPROTOCOL",
    "SUBPROTOCOLS",
    "WebSocketError",
    "WebSocketStream",
    "choose_subprotocol",
    "connect_websocket",
]

log = logging.getLogger("amqp10.io")

SUBPROTOCOL = "amqp"
"""The WebSocket subprotocol of AMQP 1.0 (WSB §2.1)."""
SUBPROTOCOLS = (SUBPROTOCOL, "AMQPWSB10")
"""What a server accepts, best first: ``AMQPWSB10`` is the name the binding's drafts used."""

DEFAULT_MAX_MESSAGE_SIZE = 16 * 1024 * 1024
SEND_MESSAGE_SIZE = 64 * 1024
"""Outgoing bytes are cut into binary messages of at most this size, so a burst
of frames fits a peer's message limit (boundaries carry no meaning)."""
_READ_SIZE = 65536
_SEND_ERRORS: tuple[type[BaseException], ...] = (LocalProtocolError, *IO_ERRORS)


class WebSocketError(Exception):
    """A WebSocket protocol failure; ``code`` is the close code sent (or received)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def choose_subprotocol(offered: list[str]) -> str | None:
    """The subprotocol to accept from a client's offer (``None``: it offered no AMQP)."""
    for name in SUBPROTOCOLS:
        if name in offered:
            return name
    return None


class WebSocketStream(ByteStream):
    """A byte stream over an established WebSocket (either side).

    ``ws`` has finished its handshake; ``transport`` is the TCP or TLS stream it
    runs over. Extra attributes (remote address, TLS peer certificate) are the
    transport's, so SASL EXTERNAL over ``wss`` sees the client certificate.
    ``received``: bytes read from the transport after the handshake, not yet parsed.
    """

    def __init__(
        self,
        transport: ByteStream,
        ws: WSConnection,
        *,
        peer: str = "peer",
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        subprotocol: str | None = SUBPROTOCOL,
        received: bytes = b"",
    ) -> None:
        if ws.state is not ConnectionState.OPEN:
            raise ValueError(f"the WebSocket is not open ({ws.state.name})")
        self.transport = transport
        self.peer = peer
        self.max_message_size = max_message_size
        self.subprotocol = subprotocol
        self.close_code: int | None = None
        """The close code received from the peer or sent to it, once the WebSocket closes."""
        self._ws = ws
        self._received = bytearray()
        self._message_size = 0
        self._failure: BaseException | None = None
        self._send_lock = anyio.Lock()
        self._unparsed = received

    @property
    def extra_attributes(self) -> Mapping[Any, Any]:
        return self.transport.extra_attributes

    # -- receiving -------------------------------------------------------------------------
    async def receive(self, max_bytes: int = 65536) -> bytes:
        while not self._received:
            if self._failure is not None:
                raise self._failure
            if self._unparsed:
                self._ws.receive_data(self._unparsed)
                self._unparsed = b""
            else:
                try:
                    data = await self.transport.receive(_READ_SIZE)
                except anyio.EndOfStream:
                    self._ws.receive_data(None)  # no close frame: "abnormal closure" (1006)
                else:
                    self._ws.receive_data(data)
            await self._process_events()
        received = self._received
        if len(received) <= max_bytes:  # the usual case: hand over all of it, one copy
            chunk = bytes(received)
            received.clear()
            return chunk
        chunk = bytes(received[:max_bytes])
        del received[:max_bytes]
        return chunk

    async def _process_events(self) -> None:
        for event in self._ws.events():
            if isinstance(event, BytesMessage):
                self._message_size += len(event.data)
                if self._message_size > self.max_message_size:
                    await self._fail(
                        CloseReason.MESSAGE_TOO_BIG,
                        f"a message over the limit of {self.max_message_size} bytes",
                    )
                    return
                self._received += event.data
                if event.message_finished:
                    self._message_size = 0
            elif isinstance(event, TextMessage):
                await self._fail(
                    CloseReason.UNSUPPORTED_DATA, "a text message (AMQP uses binary messages)"
                )
                return
            elif isinstance(event, Ping):
                await self._send_frame(event.response())
            elif isinstance(event, CloseConnection):
                await self._closed_by_peer(event)
                return
            # Pong: nothing to do (we send no pings; AMQP has its own heartbeats)

    async def _closed_by_peer(self, event: CloseConnection) -> None:
        code = int(event.code)
        self.close_code = code
        if self._ws.state is ConnectionState.REMOTE_CLOSING:  # a close frame: answer it
            await self._send_frame(event.response(), quiet=True)
            if code in (
                CloseReason.NORMAL_CLOSURE,
                CloseReason.GOING_AWAY,
                CloseReason.NO_STATUS_RCVD,
            ):
                self._failure = anyio.EndOfStream()
                return
            reason = f"the peer closed the WebSocket with code {code}"
            reason += f" ({event.reason})" if event.reason else ""
            self._failure = _broken(reason, code)
        elif code == CloseReason.ABNORMAL_CLOSURE:  # the socket ended without a close frame
            self._failure = anyio.EndOfStream()
        else:  # wsproto found the peer's framing bad: it is our turn to close
            await self._fail(code, f"bad framing ({event.reason or 'protocol error'})")

    async def _fail(self, code: int, reason: str) -> None:
        """Close the WebSocket with ``code`` because of something the peer sent."""
        log.warning(
            "closing WebSocket with %s: it sent %s (close code %d)", self.peer, reason, code
        )
        self.close_code = code
        if self._ws.state is ConnectionState.OPEN:
            await self._send_frame(CloseConnection(code=code, reason=reason[:100]), quiet=True)
        self._failure = _broken(f"WebSocket closed: the peer sent {reason}", code)
        self._received.clear()

    # -- sending ---------------------------------------------------------------------------
    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        async with self._send_lock:  # also orders our data before a close frame the reader sends
            if self._ws.state is not ConnectionState.OPEN:
                raise self._failure or anyio.ClosedResourceError()
            if 0 < len(view) <= SEND_MESSAGE_SIZE:  # the usual case: one message, no copies
                await self.transport.send(self._ws.send(BytesMessage(data=bytes(item))))
                return
            out = bytearray()
            for start in range(0, len(view), SEND_MESSAGE_SIZE):
                chunk = bytes(view[start : start + SEND_MESSAGE_SIZE])
                out += self._ws.send(BytesMessage(data=chunk))
            await self.transport.send(bytes(out))

    async def _send_frame(self, event: Event, *, quiet: bool = False) -> None:
        """Send a control frame; ``quiet``: within a second, and ignoring a broken transport."""
        async with self._send_lock:
            try:
                data = self._ws.send(event)
                with anyio.move_on_after(1.0 if quiet else math.inf):
                    await self.transport.send(data)
            except _SEND_ERRORS:
                if not quiet:
                    raise

    async def send_eof(self) -> None:
        raise NotImplementedError("a WebSocket has no half-close; use aclose()")

    async def aclose(self) -> None:
        """Send a normal close frame (when still open), then close the transport."""
        try:
            if self._ws.state is ConnectionState.OPEN:
                self.close_code = CloseReason.NORMAL_CLOSURE
                with anyio.CancelScope(shield=True):
                    await self._send_frame(
                        CloseConnection(code=CloseReason.NORMAL_CLOSURE), quiet=True
                    )
        finally:
            await self.transport.aclose()


def _broken(reason: str, code: int) -> anyio.BrokenResourceError:
    """The stream's failure, with the reason as its cause (``describe_io_error`` reads it)."""
    exc = anyio.BrokenResourceError(reason)
    exc.__cause__ = WebSocketError(reason, code)
    return exc


async def connect_websocket(
    transport: ByteStream,
    host: str,
    resource: str = "/",
    *,
    peer: str = "peer",
    subprotocols: tuple[str, ...] = SUBPROTOCOLS,
    timeout: float = math.inf,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
) -> WebSocketStream:
    """Do the client's upgrade handshake on ``transport`` and return the AMQP byte stream.

    ``host`` is the ``Host`` header (with the port when not the default).
    Raises :class:`~amqp10.errors.ConnectError` when the server refuses the
    upgrade or does not pick an AMQP subprotocol, and
    :class:`~amqp10.errors.TimeoutError` after ``timeout`` seconds. On failure
    ``transport`` is closed.
    """
    ws = WSConnection(ConnectionType.CLIENT)
    what = f"WebSocket handshake with {peer}"
    try:
        with anyio.fail_after(timeout):
            await transport.send(
                ws.send(Request(host=host, target=resource, subprotocols=list(subprotocols)))
            )
            accepted = await _read_handshake_answer(transport, ws, what)
    except TimeoutError as exc:
        await anyio.aclose_forcefully(transport)
        raise errors.TimeoutError(f"{what} timed out after {timeout:g}s") from exc
    except IO_ERRORS as exc:
        await anyio.aclose_forcefully(transport)
        raise map_io_error(exc, f"{what} failed", connecting=True) from exc
    except BaseException:
        await anyio.aclose_forcefully(transport)
        raise
    if accepted.subprotocol not in subprotocols:
        await anyio.aclose_forcefully(transport)
        raise errors.ConnectError(
            f"{what} failed: the server did not accept the WebSocket subprotocol "
            f"{subprotocols[0]!r} (is it an AMQP WebSocket endpoint?)"
        )
    return WebSocketStream(
        transport,
        ws,
        peer=peer,
        max_message_size=max_message_size,
        subprotocol=accepted.subprotocol,
    )


async def _read_handshake_answer(
    transport: ByteStream, ws: WSConnection, what: str
) -> AcceptConnection:
    status = 0
    body = bytearray()
    while True:
        data = await transport.receive(_READ_SIZE)
        try:
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, AcceptConnection):
                    return event
                if isinstance(event, RejectConnection):
                    status = event.status_code
                    if not event.has_body:
                        raise errors.ConnectError(f"{what} failed: HTTP {status}")
                elif isinstance(event, RejectData):
                    if len(body) < 200:
                        body += event.data
                    if event.body_finished:
                        text = body.decode("utf-8", "replace").strip()[:200]
                        raise errors.ConnectError(
                            f"{what} failed: HTTP {status}" + (f": {text}" if text else "")
                        )
        except RemoteProtocolError as exc:
            raise errors.ConnectError(f"{what} failed: bad answer from the server ({exc})") from exc
