"""The blocking direct peer: :func:`serve` runs a handler that is a plain function,
called in a worker thread per connection (see :mod:`.sync`, whose
:class:`~.sync.Connection` it hands over)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread

from . import connection as _conn
from . import server as _server
from .sync import Connection
from .syncloop import Loop, start_loop

__all__ = ["Server", "serve"]

SyncHandler = Callable[[Connection], None]


class Server:
    """A blocking direct peer: ``with amqp10.sync.serve(host, port, handler) as server``.

    ``handler(conn)`` runs in a worker thread for each connection (at most
    ``max_threads`` at once; it may start threads of its own, e.g. one per
    link); the connection closes when it returns.
    """

    def __init__(self, server: _server.Server, stack: contextlib.ExitStack) -> None:
        self._server = server
        self._stack = stack

    @property
    def host(self) -> str:
        return self._server.host

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def url(self) -> str:
        return self._server.url

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    handler: SyncHandler | None = None,
    *,
    max_threads: int = 40,
    **kwargs: Any,
) -> Server:
    """Start a direct peer whose ``handler`` is a plain function (see :func:`amqp10.serve`)."""
    if handler is None:
        raise TypeError("serve() needs a handler: def handler(conn) -> None")
    sync_handler = handler
    limiter: anyio.CapacityLimiter | None = None
    loop: Loop | None = None

    async def run_handler(conn: _conn.Connection) -> None:
        nonlocal limiter
        if limiter is None:
            limiter = anyio.CapacityLimiter(max_threads)
        assert loop is not None
        # the handler's calls hand their work to the loop's thread, so it may hand the
        # connection (or its links) to threads of its own
        await anyio.to_thread.run_sync(sync_handler, Connection(loop, conn), limiter=limiter)
        loop.start_posted()  # what the handler settled goes out before the connection closes

    stack = contextlib.ExitStack()
    try:
        loop = start_loop(stack, lend=False)  # the server's loop stays in its own thread
        server = stack.enter_context(loop.hold(_server.serve(host, port, run_handler, **kwargs)))
    except BaseException:
        stack.close()
        raise
    return Server(server, stack)
