"""A direct peer: accept AMQP connections without a broker.

``async with amqp10.serve("127.0.0.1", 0, handler) as server:`` listens, and runs
``await handler(conn)`` for each connection once the open handshake is done.
The connection is the same :class:`~amqp10.client.Connection` a client gets:
the handler takes the links the peer attaches from ``conn.incoming_links()``
(a :class:`~amqp10.client.Receiver` where the peer sends, a
:class:`~amqp10.client.Sender` where it receives), and can open its own links
or answer requests with :meth:`~amqp10.client.Connection.reply`. When the
handler returns, the connection is closed.
"""

from __future__ import annotations

import logging
import ssl as _ssl
import uuid
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import ByteStream, TaskGroup, TaskStatus
from anyio.streams.tls import TLSAttribute

from .. import errors
from ..io.driver import EngineProtocol, Signal
from ..io.net import Listener, peer_name
from ..sasl import PASSWORD_MECHANISMS, CredentialStore, SaslConnection, SaslServer, tls_identity
from ..transport import Connection as Engine
from ..transport import Event
from ..types import Error, ErrorCondition
from ._common import DEFAULT_TIMEOUT
from .connection import Connection
from .core import LinkFilter

__all__ = ["Handler", "Server", "listen", "serve"]

log = logging.getLogger("amqp10.server")

Handler = Callable[[Connection], Awaitable[None]]


class Server:
    """A listening direct peer; use as ``async with`` (see :func:`serve`).

    ``host``/``port`` are the bound address (``port=0`` picks a free port),
    ``url`` what a client passes to :func:`~amqp10.connect`.
    """

    def __init__(
        self,
        host: str,
        port: int,
        handler: Handler,
        *,
        ssl: _ssl.SSLContext | None = None,
        container_id: str | None = None,
        idle_timeout: float | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        handshake_timeout: float = 10.0,
        link_credit: int = 100,
        max_frame_size: int = 65536,
        max_buffered: int = 1000,
        properties: dict[Any, Any] | None = None,
        link_filter: LinkFilter | None = None,
        sasl_mechanisms: Sequence[str] | None = None,
        credentials: CredentialStore | None = None,
        sasl_required: bool | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.handler = handler
        self.ssl_context = ssl
        self.container_id = container_id or f"amqp10-peer-{uuid.uuid4()}"
        self.idle_timeout = idle_timeout
        self.timeout = timeout
        self.handshake_timeout = handshake_timeout
        self.link_credit = link_credit
        self.max_frame_size = max_frame_size
        self.max_buffered = max_buffered
        self.properties = properties
        self.link_filter = link_filter
        if sasl_mechanisms is None:
            sasl_mechanisms = (
                ("EXTERNAL", *PASSWORD_MECHANISMS) if credentials else ("EXTERNAL", "ANONYMOUS")
            )
        self.sasl_mechanisms = tuple(sasl_mechanisms)
        self.credentials = credentials
        self.sasl_required = (credentials is not None) if sasl_required is None else sasl_required
        if self.sasl_mechanisms:  # fail now, not per connection, on a bad configuration
            SaslServer(self.sasl_mechanisms, credentials)
        self._listener: Listener | None = None
        self._tg: TaskGroup | None = None
        self._connections: set[Connection] = set()
        self._closed = False
        self._gone = Signal()
        self.accepted = 0
        """Connections accepted so far (TCP and TLS handshakes done)."""

    @property
    def url(self) -> str:
        scheme = "amqps" if self.ssl_context is not None else "amqp"
        return f"{scheme}://{peer_name(self.host, self.port)}"

    @property
    def connections(self) -> frozenset[Connection]:
        """The connections being served right now."""
        return frozenset(self._connections)

    async def __aenter__(self) -> Server:
        listener = await Listener.bind(self.host, self.port, ssl_context=self.ssl_context)
        self._listener = listener
        self.port = listener.port
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        try:
            await tg.start(
                partial(
                    listener.serve, self._serve_one, tg, handshake_timeout=self.handshake_timeout
                )
            )
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def close(self) -> None:
        """Stop listening and close every connection (each gets a clean AMQP close).

        Callable from any task; leaving ``async with`` (or :meth:`aclose`) then
        stops the server's tasks.
        """
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            if self._listener is not None:
                await self._listener.aclose()
            # a clean AMQP close for each peer; handlers blocked on the
            # connection see it end and return
            limit = min(self.timeout, 5.0)
            with anyio.move_on_after(limit):
                async with anyio.create_task_group() as closing:
                    for conn in list(self._connections):
                        closing.start_soon(partial(conn.close, timeout=limit))
                while self._connections:  # until their handlers have returned
                    await self._gone.wait()

    async def aclose(self) -> None:
        """:meth:`close`, then stop the server's tasks (from the task that started it)."""
        tg, self._tg = self._tg, None
        if tg is None:
            return
        try:
            await self.close()
            tg.cancel_scope.cancel()
        finally:
            await tg.__aexit__(None, None, None)

    async def _serve_one(self, stream: ByteStream, peer: str) -> None:
        try:
            engine = Engine(
                self.container_id,
                idle_timeout=self.idle_timeout,
                max_frame_size=self.max_frame_size,
                properties=self.properties,
                send_header=False,
            )
            protocol = self._protocol(engine, stream)
            conn = Connection(
                engine,
                stream,
                peer=peer,
                protocol=protocol,
                timeout=self.timeout,
                max_buffered=self.max_buffered,
                accepting=True,
                link_credit=self.link_credit,
                link_filter=self.link_filter,
            )
        except BaseException:
            await anyio.aclose_forcefully(stream)
            raise
        self.accepted += 1
        self._connections.add(conn)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(conn._run)
                try:
                    await conn._wait_open(self.handshake_timeout)
                except errors.AMQPError as exc:
                    log.info("connection from %s ended during the handshake: %s", peer, exc)
                    await conn._settle_failure(exc)
                    return
                await self._run_handler(conn)
        finally:
            self._connections.discard(conn)
            self._gone.fire()
            await conn._driver.close_if_unused()

    def _protocol(self, engine: Engine, stream: ByteStream) -> EngineProtocol[Event]:
        """The engine behind a SASL server (EXTERNAL for a verified TLS client certificate)."""
        if not self.sasl_mechanisms:
            return engine
        identity = None
        if self.ssl_context is not None:
            identity = tls_identity(stream.extra(TLSAttribute.peer_certificate, None))
        sasl = SaslServer(
            self.sasl_mechanisms,
            self.credentials,
            tls_identity=identity,
            require=self.sasl_required,
            handshake_timeout=self.handshake_timeout,
        )
        return SaslConnection(sasl, engine)

    async def _run_handler(self, conn: Connection) -> None:
        close_error: Error | None = None
        try:
            await self.handler(conn)
        except errors.AMQPError as exc:
            # the connection (or one of its links) failed under the handler: routine
            log.info("handler for %s stopped: %s", conn.peer, exc)
        except Exception as exc:
            log.exception("handler for %s failed", conn.peer)
            close_error = Error(
                condition=ErrorCondition.INTERNAL_ERROR,
                description=f"the service failed: {type(exc).__name__}",
            )
        finally:
            with anyio.CancelScope(shield=True):
                await conn.close(close_error, timeout=conn._close_timeout())


def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    handler: Handler | None = None,
    **kwargs: Any,
) -> Server:
    """A direct peer listening on ``host:port``: ``async with serve(...) as server``.

    ``handler(conn)`` runs for each connection (see the module docs). Keywords:
    ``ssl`` (a server ``ssl.SSLContext``, e.g. :func:`amqp10.io.tls.server_context`),
    ``container_id``, ``idle_timeout``, ``timeout`` (default for waits),
    ``handshake_timeout``, ``link_credit`` (window granted on links the peer
    sends on), ``link_filter`` (refuse links: see :data:`LinkFilter`),
    ``max_frame_size``, ``max_buffered``, ``properties``.

    SASL: by default ANONYMOUS is offered and clients may also skip SASL; with
    ``credentials`` (an :class:`amqp10.sasl.CredentialStore`) SCRAM-SHA-* and
    PLAIN are offered instead and SASL is required. EXTERNAL is offered to TLS
    clients with a verified certificate. ``sasl_mechanisms`` overrides the
    list (``()``: no SASL at all); ``sasl_required`` whether plain AMQP
    clients are turned away. The authenticated user is ``conn.authenticated_as``.
    """
    if handler is None:
        raise TypeError("serve() needs a handler: async def handler(conn) -> None")
    return Server(host, port, handler, **kwargs)


async def listen(
    host: str = "127.0.0.1",
    port: int = 0,
    handler: Handler | None = None,
    *,
    task_status: TaskStatus[Server] = anyio.TASK_STATUS_IGNORED,
    **kwargs: Any,
) -> None:
    """Serve until cancelled; with ``await tg.start(listen, ...)`` returns the :class:`Server`."""
    async with serve(host, port, handler, **kwargs) as server:
        task_status.started(server)
        await anyio.sleep_forever()
