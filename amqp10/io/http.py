"""A minimal HTTP/1.1 server over a byte stream (h11, sans-IO): routes and WebSocket upgrades.

Enough HTTP for a broker's side door - health checks, metrics, a console, and
the upgrade to AMQP over WebSockets - without a web framework. An
:class:`HttpServer` is a handler for :meth:`amqp10.io.net.Listener.serve`:
it reads requests with :mod:`h11`, looks the path up in its route table and
writes the answer; keep-alive connections are served until idle for
``request_timeout``.

Errors are JSON (``{"error": "..."}``) with the right status, never a stack
trace: an unknown path is 404, a bad request 400, a request that does not
arrive in time 408, a handler that fails 500 (the traceback goes to the log).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs

import anyio
import h11
from anyio.abc import ByteStream
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request
from wsproto.utilities import RemoteProtocolError

from .net import IO_ERRORS, describe_io_error
from .websocket import DEFAULT_MAX_MESSAGE_SIZE, WebSocketStream, choose_subprotocol

__all__ = [
    "HttpRequest",
    "HttpResponse",
    "HttpServer",
    "Route",
    "WebSocketHandler",
]

log = logging.getLogger("amqp10.http")

_READ_SIZE = 65536
_MAX_BODY = 64 * 1024
_SERVER = b"amqp10"


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """One request as a route sees it (the body is read and bounded by the server)."""

    method: str
    target: str
    """The request target as sent (path and query)."""
    path: str
    headers: tuple[tuple[str, str], ...]
    """Header names lower-cased, values as sent (latin-1)."""
    peer: str
    body: bytes = b""

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), if present."""
        name = name.lower()
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def query(self) -> dict[str, str]:
        """The query string's parameters, decoded (the first value of each)."""
        _, _, qs = self.target.partition("?")
        return {k: v[0] for k, v in parse_qs(qs, keep_blank_values=True).items()}

    @property
    def wants_websocket(self) -> bool:
        upgrade = self.header("upgrade") or ""
        return "websocket" in upgrade.lower()


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """What a route answers: a status, a body and its content type."""

    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(cls, status: int, value: Any, **kw: Any) -> HttpResponse:
        return cls(status, json.dumps(value).encode() + b"\n", **kw)

    @classmethod
    def error(cls, status: int, reason: str, **kw: Any) -> HttpResponse:
        """``{"error": reason}`` with ``status``: how every failure is answered."""
        return cls.json(status, {"error": reason}, **kw)


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]
WebSocketHandler = Callable[[WebSocketStream, str], Awaitable[None]]
"""Takes over an upgraded connection: ``handler(stream, peer)``; it must close the stream."""


@dataclass(frozen=True, slots=True)
class Route:
    """What one path serves: plain requests (``get``), a WebSocket upgrade, or both."""

    get: Handler | None = None
    websocket: WebSocketHandler | None = None
    methods: frozenset[str] = field(default_factory=lambda: frozenset({"GET", "HEAD"}))
    """The methods ``get`` answers (the console's actions add POST, an API PUT and DELETE)."""


PREFIX = "*"
"""A route key ending in ``/*`` serves every path under it (``/api/*``: ``/api/queues``, ...);
an exact path wins over a prefix, a longer prefix over a shorter one."""


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


class _BadRequest(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class HttpServer:
    """Serves ``routes`` (exact paths) on each connection it is handed.

    ``request_timeout``: seconds a request may take to arrive (and a keep-alive
    connection may sit idle); ``max_ws_message_size``: the limit of the
    WebSocket streams it makes; ``max_connections``: HTTP connections served
    at once (upgraded ones are the handler's to count), more get a 503;
    ``max_body``: bytes a request body may carry (more: 413).
    """

    def __init__(
        self,
        routes: Mapping[str, Route],
        *,
        request_timeout: float = 10.0,
        max_ws_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        max_connections: int = 1000,
        max_body: int = _MAX_BODY,
    ) -> None:
        self.routes = dict(routes)
        self._prefixes = sorted(
            ((k[: -len(PREFIX)], r) for k, r in routes.items() if k.endswith("/" + PREFIX)),
            key=lambda kr: -len(kr[0]),
        )
        self.max_body = max_body
        self.request_timeout = request_timeout
        self.max_ws_message_size = max_ws_message_size
        self.max_connections = max_connections
        self.connections = 0
        """HTTP connections being served now (not counting upgraded ones)."""

    async def handle(self, stream: ByteStream, peer: str) -> None:
        """Serve requests on ``stream`` until the client is done (a :class:`Listener` handler)."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=16 * 1024)
        handed_over = False
        self.connections += 1
        try:
            if self.connections > self.max_connections:
                log.warning(
                    "refusing HTTP from %s: connection limit %d reached", peer, self.max_connections
                )
                busy = HttpResponse.error(503, "too many connections")
                with anyio.move_on_after(1):
                    await self._send_response(conn, stream, None, busy)
                return
            while True:
                request = await self._read_request(conn, stream, peer)
                if request is None:
                    return
                route = self.route_for(request.path)
                if route is not None and route.websocket is not None and request.wants_websocket:
                    self.connections -= 1  # counted by the handler from here on
                    try:
                        handed_over = await self._upgrade(conn, stream, request, route.websocket)
                    finally:
                        self.connections += 1
                    return
                response = await self._answer(route, request)
                if not await self._send_response(conn, stream, request, response):
                    return
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    return
                try:
                    conn.start_next_cycle()
                except h11.LocalProtocolError:  # e.g. the client is still sending a body
                    return
        except IO_ERRORS as exc:
            log.debug("HTTP connection from %s failed: %s", peer, describe_io_error(exc))
        except Exception:  # a bug must cost one connection, not the listener
            log.exception("HTTP connection from %s failed", peer)
        finally:
            self.connections -= 1
            if not handed_over:
                await anyio.aclose_forcefully(stream)

    def route_for(self, path: str) -> Route | None:
        """The route serving ``path``: its exact one, else the longest ``/*`` prefix."""
        route = self.routes.get(path)
        if route is None:
            for prefix, candidate in self._prefixes:
                if path.startswith(prefix):
                    return candidate
        return route

    async def _read_request(
        self, conn: h11.Connection, stream: ByteStream, peer: str
    ) -> HttpRequest | None:
        """The next complete request, or None when the connection should end (answered here)."""
        received = 0
        head: h11.Request | None = None
        body = bytearray()
        try:
            with anyio.fail_after(self.request_timeout):
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        try:
                            data = await stream.receive(_READ_SIZE)
                        except anyio.EndOfStream:
                            data = b""
                        received += len(data)
                        conn.receive_data(data)
                        continue
                    if isinstance(event, h11.ConnectionClosed):
                        return None
                    if isinstance(event, h11.Request):
                        head = event
                    elif isinstance(event, h11.Data):
                        body += event.data
                        if len(body) > self.max_body:
                            raise _BadRequest(413, f"request body over {self.max_body} bytes")
                    elif isinstance(event, h11.EndOfMessage) or event is h11.PAUSED:
                        break
        except TimeoutError:
            if received or head is not None:  # a request started but never finished
                log.info(
                    "HTTP request from %s incomplete after %gs: closing",
                    peer,
                    self.request_timeout,
                )
                await self._send_error(conn, stream, 408, "the request took too long to arrive")
            return None
        except h11.RemoteProtocolError as exc:
            status = exc.error_status_hint
            log.info("bad HTTP request from %s: %s", peer, exc)
            await self._send_error(conn, stream, status, f"bad request: {exc}")
            return None
        except _BadRequest as exc:
            log.info("bad HTTP request from %s: %s", peer, exc)
            await self._send_error(conn, stream, exc.status, str(exc))
            return None
        assert head is not None
        target = head.target.decode("latin-1")
        return HttpRequest(
            method=head.method.decode("ascii", "replace"),
            target=target,
            path=target.split("?", 1)[0],
            headers=tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in head.headers),
            peer=peer,
            body=bytes(body),
        )

    async def _answer(self, route: Route | None, request: HttpRequest) -> HttpResponse:
        if route is None:
            return HttpResponse.error(404, f"no such resource: {request.path}")
        if route.get is None:  # a WebSocket-only path asked for without the upgrade
            return HttpResponse.error(
                426,
                "this path serves AMQP over WebSockets: upgrade with subprotocol amqp",
                headers=(("upgrade", "websocket"),),
            )
        if request.method not in route.methods:
            return HttpResponse.error(
                405,
                f"method {request.method} not allowed",
                headers=(("allow", ", ".join(sorted(route.methods))),),
            )
        try:
            return await route.get(request)
        except Exception:
            log.exception("HTTP handler for %s failed", request.path)
            return HttpResponse.error(500, "internal error (see the broker's log)")

    async def _send_response(
        self,
        conn: h11.Connection,
        stream: ByteStream,
        request: HttpRequest | None,
        response: HttpResponse,
    ) -> bool:
        """Write ``response``; False if the connection cannot carry another request."""
        headers = [
            (b"content-type", response.content_type.encode()),
            (b"content-length", str(len(response.body)).encode()),
            (b"cache-control", b"no-store"),
            (b"server", _SERVER),
            *((k.encode(), v.encode()) for k, v in response.headers),
        ]
        if request is None:  # an error before (or instead of) a request: nothing follows
            headers.append((b"connection", b"close"))
        try:
            head = h11.Response(
                status_code=response.status, headers=headers, reason=_reason(response.status)
            )
            data = conn.send(head) or b""
            if request is None or request.method != "HEAD":
                data += conn.send(h11.Data(data=response.body)) or b""
            data += conn.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError:  # the state does not allow an answer: just close
            return False
        with anyio.move_on_after(self.request_timeout):
            await stream.send(data)
            return True
        return False

    async def _send_error(
        self, conn: h11.Connection, stream: ByteStream, status: int, reason: str
    ) -> None:
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            try:
                await self._send_response(conn, stream, None, HttpResponse.error(status, reason))
            except IO_ERRORS:
                pass

    async def _upgrade(
        self,
        conn: h11.Connection,
        stream: ByteStream,
        request: HttpRequest,
        handler: WebSocketHandler,
    ) -> bool:
        """Accept (or refuse) the WebSocket upgrade; True once ``handler`` took the stream."""
        peer = request.peer
        ws = WSConnection(ConnectionType.SERVER)
        try:
            ws.initiate_upgrade_connection(
                [(k.encode("latin-1"), v.encode("latin-1")) for k, v in request.headers],
                request.target,
            )
            upgrade = next((e for e in ws.events() if isinstance(e, Request)), None)
            if upgrade is None:
                raise RemoteProtocolError("not a WebSocket upgrade request")
        except (RemoteProtocolError, h11.ProtocolError) as exc:
            log.info("bad WebSocket handshake from %s: %s", peer, exc)
            await self._send_error(conn, stream, 400, f"bad WebSocket handshake: {exc}")
            return False
        subprotocol = choose_subprotocol(upgrade.subprotocols)
        if subprotocol is None:
            offered = ", ".join(upgrade.subprotocols) or "none"
            log.info(
                "WebSocket handshake from %s refused: no AMQP subprotocol (offered: %s)",
                peer,
                offered,
            )
            await self._send_error(
                conn,
                stream,
                400,
                f"the WebSocket subprotocol must be amqp (offered: {offered})",
            )
            return False
        trailing, _ = conn.trailing_data
        with anyio.move_on_after(self.request_timeout) as scope:
            await stream.send(ws.send(AcceptConnection(subprotocol=subprotocol)))
        if scope.cancelled_caught:
            log.info("WebSocket handshake with %s: the client does not read", peer)
            return False
        ws_stream = WebSocketStream(
            stream,
            ws,
            peer=peer,
            max_message_size=self.max_ws_message_size,
            subprotocol=subprotocol,
            received=bytes(trailing),  # the client may not wait for our answer
        )
        await handler(ws_stream, peer)
        return True
