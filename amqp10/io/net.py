"""Sockets: outgoing TCP/TLS connections, listeners, and the mapping of I/O errors.

This module and :mod:`amqp10.io.driver` are the only places that touch sockets.
anyio, OS and ``ssl`` exceptions leave here as :mod:`amqp10.errors` exceptions
with one-line messages (the original exception stays chained as ``__cause__``).
"""

from __future__ import annotations

import logging
import math
import socket
import ssl
import sys
from collections.abc import Awaitable, Callable, Sequence

import anyio
from anyio.abc import (
    ByteStream,
    SocketAttribute,
    SocketListener,
    SocketStream,
    TaskGroup,
    TaskStatus,
)
from anyio.streams.stapled import MultiListener
from anyio.streams.tls import TLSStream

from .. import errors

__all__ = [
    "REUSE_PORT_BALANCES",
    "Listener",
    "bind_for_workers",
    "connect_stream",
    "describe_io_error",
    "map_io_error",
    "peer_name",
]

log = logging.getLogger("amqp10.io")

# anyio's own failures (closed/broken streams) are not OSErrors; these are what
# a read or write on a connected stream can raise.
IO_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
)
TLS_ERRORS: tuple[type[BaseException], ...] = (*IO_ERRORS, ssl.SSLError)
HANDSHAKE_ERRORS: tuple[type[BaseException], ...] = (TimeoutError, *TLS_ERRORS)


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost informative exception behind anyio's wrappers."""
    seen = 0
    while seen < 8:
        seen += 1
        cause = exc.__cause__
        if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
            continue
        if cause is None:
            break
        if isinstance(exc, (anyio.BrokenResourceError, anyio.ClosedResourceError)) or (
            type(exc) is OSError and not exc.errno
        ):
            exc = cause
            continue
        break
    return exc


def describe_io_error(exc: BaseException) -> str:
    """A short lower-case reason for an I/O failure ("connection refused", ...)."""
    root = _root_cause(exc)
    if isinstance(root, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {root.verify_message or root.reason}"
    if isinstance(root, ssl.SSLError):
        reason = root.reason or root.strerror or str(root)
        return str(reason).replace("_", " ").lower()
    if isinstance(root, socket.gaierror):
        return f"name resolution failed: {root.strerror or root}"
    if isinstance(root, ConnectionRefusedError):
        return "connection refused"
    if isinstance(root, ConnectionResetError):
        return "connection reset by peer"
    if isinstance(root, BrokenPipeError):
        return "broken pipe"
    if isinstance(root, anyio.EndOfStream):
        return "the peer closed the connection"
    if isinstance(root, anyio.BrokenResourceError):
        return "the connection broke"
    if isinstance(root, anyio.ClosedResourceError):
        return "the stream was closed"
    if isinstance(root, OSError) and root.strerror:
        return root.strerror[0].lower() + root.strerror[1:]
    text = str(root) or type(root).__name__
    return text[0].lower() + text[1:]


def _is_tls_failure(exc: BaseException) -> bool:
    return isinstance(_root_cause(exc), ssl.SSLError)


def map_io_error(
    exc: BaseException, what: str, *, connecting: bool = False
) -> errors.ConnectionError:
    """``what: reason`` as the right :mod:`amqp10.errors` exception.

    ``connecting`` picks :class:`~amqp10.errors.ConnectError` for failures to
    reach the peer; a TLS failure is always a :class:`~amqp10.errors.TLSError`.
    """
    reason = describe_io_error(exc)
    cls: type[errors.ConnectionError]
    if _is_tls_failure(exc):
        cls = errors.TLSError
    elif connecting:
        cls = errors.ConnectError
    else:
        cls = errors.ConnectionError
    return cls(f"{what}: {reason}")


def peer_name(host: str, port: int) -> str:
    """``host:port`` (``[v6]:port`` for IPv6 literals), as messages show a peer."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def connect_stream(
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    timeout: float = math.inf,
) -> ByteStream:
    """Open a TCP connection (and do the TLS handshake when ``ssl_context`` is given).

    TLS is set up without the close-notify requirement: AMQP peers commonly
    close the socket right after the AMQP close, and that must read as a clean
    end of stream.
    """
    peer = peer_name(host, port)
    try:
        with anyio.fail_after(timeout):
            stream = await anyio.connect_tcp(host, port)
    except TimeoutError as exc:
        raise errors.TimeoutError(f"connecting to {peer} timed out after {timeout:g}s") from exc
    except IO_ERRORS as exc:
        raise map_io_error(exc, f"could not connect to {peer}", connecting=True) from exc
    if ssl_context is None:
        return stream
    try:
        with anyio.fail_after(timeout):
            return await TLSStream.wrap(
                stream,
                server_side=False,
                hostname=server_hostname or host,
                ssl_context=ssl_context,
                standard_compatible=False,
            )
    except TimeoutError as exc:
        await anyio.aclose_forcefully(stream)
        raise errors.TimeoutError(
            f"TLS handshake with {peer} timed out after {timeout:g}s"
        ) from exc
    except TLS_ERRORS as exc:
        await anyio.aclose_forcefully(stream)
        err = map_io_error(exc, f"TLS handshake with {peer} failed")
        if not isinstance(err, errors.TLSError):
            err = errors.TLSError(str(err))
        raise err from exc
    except BaseException:
        await anyio.aclose_forcefully(stream)
        raise


StreamHandler = Callable[[ByteStream, str], Awaitable[None]]


class Listener:
    """A bound TCP listener (optionally TLS) that hands each connection to a coroutine.

    Create with :meth:`bind`; ``port`` is the port actually bound (ask for 0 to
    get a free one). :meth:`serve` accepts until cancelled or :meth:`aclose`.
    """

    def __init__(
        self,
        listener: MultiListener[SocketStream],
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None,
    ) -> None:
        self._listener = listener
        self.host = host
        self.port = port
        self.ssl_context = ssl_context

    @classmethod
    async def adopt(
        cls, sockets: Sequence[socket.socket], host: str, *, ssl_context: ssl.SSLContext | None = None
    ) -> Listener:
        """A listener over sockets bound and listening already (:func:`bind_for_workers`,
        in a supervisor's worker); it owns them from now on."""
        listeners = [await SocketListener.from_socket(s) for s in sockets]
        port = listeners[0].extra(SocketAttribute.local_port)
        return cls(MultiListener(listeners), host, port, ssl_context)

    @classmethod
    async def bind(
        cls,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        ssl_context: ssl.SSLContext | None = None,
        backlog: int = 128,
    ) -> Listener:
        """Bind and listen; raise :class:`~amqp10.errors.ConnectError` if the address is unusable."""
        try:
            listener = await anyio.create_tcp_listener(
                local_host=host, local_port=port, backlog=backlog
            )
        except OSError as exc:
            raise errors.ConnectError(
                f"cannot listen on {peer_name(host, port)}: {describe_io_error(exc)}"
            ) from exc
        bound = listener.extra(SocketAttribute.local_port)
        return cls(listener, host, bound, ssl_context)

    @property
    def address(self) -> str:
        return peer_name(self.host, self.port)

    async def serve(
        self,
        handler: StreamHandler,
        task_group: TaskGroup,
        *,
        handshake_timeout: float = 10.0,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept connections forever, running ``handler(stream, peer)`` for each in ``task_group``.

        A failed TLS handshake is logged and the socket closed; the handler never
        sees it. The handler owns the stream and must close it. With
        ``await tg.start(listener.serve, ...)`` it returns once accepting.
        """
        async with anyio.create_task_group() as accepting:
            for sub in self._listener.listeners:
                if not isinstance(sub, SocketListener):  # pragma: no cover - anyio makes only these
                    raise TypeError(f"cannot accept on {sub!r}: not a socket listener")
                accepting.start_soon(self._accept_loop, sub, handler, task_group, handshake_timeout)
            task_status.started()

    async def _accept_loop(
        self,
        listener: SocketListener,
        handler: StreamHandler,
        task_group: TaskGroup,
        handshake_timeout: float,
    ) -> None:
        while True:
            try:
                stream = await listener.accept()
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return
            except OSError as exc:  # e.g. EMFILE: keep listening
                log.warning("accept on %s failed: %s", self.address, describe_io_error(exc))
                await anyio.sleep(0.1)
                continue
            task_group.start_soon(self._handle, stream, handler, handshake_timeout)

    async def _handle(
        self, stream: SocketStream, handler: StreamHandler, handshake_timeout: float
    ) -> None:
        address = stream.extra(SocketAttribute.remote_address, None)
        if isinstance(address, tuple):  # (host, port), plus flow and scope for IPv6
            peer = peer_name(str(address[0]), int(address[1]))
        else:  # pragma: no cover - unix sockets, exotic transports
            peer = "unknown peer"
        wrapped: ByteStream = stream
        if self.ssl_context is not None:
            try:
                with anyio.fail_after(handshake_timeout):
                    wrapped = await TLSStream.wrap(
                        stream,
                        server_side=True,
                        ssl_context=self.ssl_context,
                        standard_compatible=False,
                    )
            except HANDSHAKE_ERRORS as exc:
                log.info("TLS handshake with %s failed: %s", peer, describe_io_error(exc))
                await anyio.aclose_forcefully(stream)
                return
            except BaseException:
                await anyio.aclose_forcefully(stream)
                raise
        await handler(wrapped, peer)

    async def aclose(self) -> None:
        await self._listener.aclose()


REUSE_PORT_BALANCES = sys.platform.startswith("linux")
"""Whether sockets bound to one port with SO_REUSEPORT share its connections out
(Linux hashes each new connection to one of them; the BSDs give them all to one)."""


def _listen_options(sock: socket.socket, family: int, *, reuse_port: bool) -> None:
    """A listening socket's options, as anyio sets them (v6 only on IPv6, address reuse)."""
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)


def bind_for_workers(host: str, port: int, slots: int, *, backlog: int = 128) -> list[list[socket.socket]]:
    """Listening sockets on ``host:port`` for ``slots`` worker processes, bound here
    (blocking, before any worker starts) so that a bad address fails once.

    One list per slot, one socket per address ``host`` resolves to, every slot on the
    same port (with ``port`` 0, the one the first socket got). Where the kernel shares a
    port's connections out (:data:`REUSE_PORT_BALANCES`), each slot has sockets of its
    own bound with SO_REUSEPORT; elsewhere every slot shares one set. Raises
    :class:`~amqp10.errors.ConnectError` if the address is unusable.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise errors.ConnectError(f"cannot listen on {peer_name(host, port)}: {describe_io_error(exc)}") from exc
    addresses = sorted({(fam, addr[:2]) for fam, _, _, _, addr in infos})
    own = slots if REUSE_PORT_BALANCES else 1
    bound: list[list[socket.socket]] = []
    try:
        if port != 0 and REUSE_PORT_BALANCES:
            for fam, (addr, _) in addresses:  # another broker's SO_REUSEPORT group would take us in
                with socket.socket(fam, socket.SOCK_STREAM) as probe:
                    _listen_options(probe, fam, reuse_port=False)
                    probe.bind((addr, port))
        for _ in range(own):
            socks: list[socket.socket] = []
            bound.append(socks)
            for fam, (addr, _) in addresses:
                sock = socket.socket(fam, socket.SOCK_STREAM)
                socks.append(sock)
                _listen_options(sock, fam, reuse_port=REUSE_PORT_BALANCES)
                sock.bind((addr, port))
                sock.listen(backlog)
                sock.setblocking(False)
                port = sock.getsockname()[1]
    except OSError as exc:
        for sock in (s for socks in bound for s in socks):
            sock.close()
        raise errors.ConnectError(f"cannot listen on {peer_name(host, port)}: {describe_io_error(exc)}") from exc
    return bound if own == slots else bound * slots
