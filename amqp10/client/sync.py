"""The blocking facade: the async client without ``await``, for plain threads.

Each :func:`connect` starts an event loop in a thread (anyio's blocking portal)
and runs the async :class:`~amqp10.client.Connection` there; the classes below
only forward calls through the portal and wrap what comes back. There is no
second copy of any logic: fix the async core and this follows.

>>> with amqp10.sync.connect("amqp://127.0.0.1") as conn:     # doctest: +SKIP
...     sender = conn.open_sender("queue")
...     sender.send(Message(body="hello"))

:func:`serve` runs a direct peer whose handler is a plain function, called in
a worker thread per connection.
"""

from __future__ import annotations

import contextlib
import importlib.util
import ssl as _ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from functools import partial
from types import TracebackType
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread

from ..message import Message
from ..types import Error
from . import connection as _conn
from . import link as _link
from . import opening as _opening
from . import receiver as _receiver
from . import sender as _sender
from . import server as _server
from . import sessions as _sessions
from . import transactions as _txn
from ._common import DEFAULT_TIMEOUT, Outcome, Payload, SettleMode

__all__ = [
    "Connection",
    "Delivery",
    "Receiver",
    "Sender",
    "Server",
    "Session",
    "Tracker",
    "Transaction",
    "connect",
    "serve",
]

T = TypeVar("T")
Call = Callable[[Callable[[], Awaitable[Any]]], Any]
"""Runs a coroutine function in the event loop and returns its result (blocking)."""


def _portal_backend() -> tuple[str, dict[str, Any]]:
    """asyncio, on uvloop when it is installed (it is not a dependency)."""
    if importlib.util.find_spec("uvloop") is None:
        return "asyncio", {}
    return "asyncio", {"use_uvloop": True}


class _Proxy:
    __slots__ = ("_call",)

    def __init__(self, call: Call) -> None:
        self._call = call

    def _run(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        result: T = self._call(partial(fn, *args, **kwargs))
        return result


class Delivery(_Proxy):
    """A received message (see :class:`amqp10.client.Delivery`)."""

    __slots__ = ("_d",)

    def __init__(self, call: Call, delivery: _receiver.Delivery) -> None:
        super().__init__(call)
        self._d = delivery

    def __repr__(self) -> str:
        return repr(self._d)

    @property
    def payload(self) -> bytes:
        return self._d.payload

    @property
    def message(self) -> Message:
        return self._d.message

    @property
    def tag(self) -> bytes:
        return self._d.tag

    @property
    def settled(self) -> bool:
        return self._d.settled

    @property
    def remote_settled(self) -> bool:
        return self._d.remote_settled

    def accept(self, *, txn: Transaction | None = None) -> None:
        self._run(self._d.accept, txn=_inner(txn))

    def reject(self, error: Error | None = None, *, txn: Transaction | None = None) -> None:
        self._run(self._d.reject, error, txn=_inner(txn))

    def release(self, *, txn: Transaction | None = None) -> None:
        self._run(self._d.release, txn=_inner(txn))

    def modify(self, *, txn: Transaction | None = None, **kwargs: Any) -> None:
        self._run(self._d.modify, txn=_inner(txn), **kwargs)

    def settle(self, state: Any = None, *, txn: Transaction | None = None) -> None:
        self._run(self._d.settle, state, txn=_inner(txn))


class _Link(_Proxy):
    __slots__ = ("_link",)

    def __init__(self, call: Call, link: _link.Link) -> None:
        super().__init__(call)
        self._link = link

    def __repr__(self) -> str:
        return repr(self._link)

    @property
    def name(self) -> str:
        return self._link.name

    @property
    def address(self) -> str | None:
        return self._link.address

    @property
    def is_open(self) -> bool:
        return self._link.is_open

    @property
    def incoming(self) -> bool:
        return self._link.incoming

    @property
    def kind(self) -> str:
        return self._link.kind

    def close(self, error: Error | None = None, *, timeout: float | None = None) -> None:
        self._run(self._link.close, error, timeout=timeout)

    def detach(self, error: Error | None = None, *, timeout: float | None = None) -> None:
        self._run(self._link.detach, error, timeout=timeout)

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Sender(_Link):
    """Sends messages (see :class:`amqp10.client.Sender`)."""

    __slots__ = ()
    _link: _sender.Sender

    @property
    def credit(self) -> int:
        return self._link.credit

    @property
    def queued(self) -> int:
        return self._link.queued

    def send(
        self,
        message: Payload,
        *,
        settled: bool | None = None,
        timeout: float | None = None,
        txn: Transaction | None = None,
    ) -> Outcome | None:
        return self._run(
            self._link.send, message, settled=settled, timeout=timeout, txn=_inner(txn)
        )

    def submit(
        self, message: Payload, *, settled: bool | None = None, txn: Transaction | None = None
    ) -> Tracker:
        """Send without waiting for the outcome (see :meth:`amqp10.client.Sender.submit`)."""

        async def submit() -> _sender.Tracker:
            return self._link.submit(message, settled=settled, txn=_inner(txn))

        return Tracker(self._call, self._run(submit))


class Transaction(_Proxy):
    """A local transaction (see :meth:`amqp10.client.Connection.transaction`).

    ``with conn.transaction() as txn:`` declares it, commits at the end of the
    block and rolls back (re-raising) if the block raises; :meth:`commit` and
    :meth:`rollback` end it explicitly.
    """

    __slots__ = ("_t",)

    def __init__(self, call: Call, txn: _txn.Transaction) -> None:
        super().__init__(call)
        self._t = txn

    def __repr__(self) -> str:
        return repr(self._t)

    @property
    def txn_id(self) -> bytes | None:
        return self._t.txn_id

    @property
    def state(self) -> str:
        return self._t.state

    def declare(self) -> Transaction:
        self._run(self._t.declare)
        return self

    def commit(self) -> None:
        self._run(self._t.commit)

    def rollback(self) -> None:
        self._run(self._t.rollback)

    def __enter__(self) -> Transaction:
        self._run(self._t.__aenter__)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._run(self._t.__aexit__, exc_type, exc, tb)


def _inner(txn: Transaction | None) -> _txn.Transaction | None:
    return None if txn is None else txn._t


class Tracker(_Proxy):
    """A submitted message's outcome (see :class:`amqp10.client.Tracker`)."""

    __slots__ = ("_t",)

    def __init__(self, call: Call, tracker: _sender.Tracker) -> None:
        super().__init__(call)
        self._t = tracker

    def __repr__(self) -> str:
        return repr(self._t)

    @property
    def done(self) -> bool:
        return self._t.done

    def result(self) -> Outcome | None:
        return self._t.result()

    def wait(self, timeout: float | None = None) -> Outcome | None:
        return self._run(self._t.wait, timeout)


class Receiver(_Link):
    """Receives messages: ``for delivery in receiver`` (see :class:`amqp10.client.Receiver`)."""

    __slots__ = ()
    _link: _receiver.Receiver

    @property
    def credit(self) -> int:
        return self._link.credit

    @property
    def buffered(self) -> int:
        return self._link.buffered

    def receive(self, *, timeout: float | None = None) -> Delivery:
        return Delivery(self._call, self._run(self._link.receive, timeout=timeout))

    def drain(self, *, timeout: float | None = None) -> None:
        self._run(self._link.drain, timeout=timeout)

    def add_credit(self, n: int) -> None:
        async def add() -> None:
            self._link.add_credit(n)

        self._run(add)

    def __iter__(self) -> Iterator[Delivery]:
        return self

    def __next__(self) -> Delivery:
        d = self._run(_next_or_none, self._link)
        if d is None:
            raise StopIteration
        return Delivery(self._call, d)


async def _next_or_none(receiver: _receiver.Receiver) -> _receiver.Delivery | None:
    try:
        return await receiver.__anext__()
    except StopAsyncIteration:
        return None


def _wrap_link(call: Call, link: _sender.Sender | _receiver.Receiver) -> Sender | Receiver:
    if isinstance(link, _sender.Sender):
        return Sender(call, link)
    return Receiver(call, link)


class Session(_Proxy):
    """A session (see :class:`amqp10.client.Session`)."""

    __slots__ = ("_s",)

    def __init__(self, call: Call, session: _sessions.Session) -> None:
        super().__init__(call)
        self._s = session

    def open_sender(self, address: str | None, **kwargs: Any) -> Sender:
        return Sender(self._call, self._run(self._s.open_sender, address, **kwargs))

    def open_receiver(self, address: str | None, **kwargs: Any) -> Receiver:
        return Receiver(self._call, self._run(self._s.open_receiver, address, **kwargs))

    def close(self, *, timeout: float | None = None) -> None:
        self._run(self._s.close, timeout=timeout)


class Connection(_Proxy):
    """A blocking connection (see :class:`amqp10.client.Connection`); use as ``with``."""

    __slots__ = ("_c", "_on_close")

    def __init__(
        self, call: Call, conn: _conn.Connection, on_close: Callable[[], None] | None = None
    ) -> None:
        super().__init__(call)
        self._c = conn
        self._on_close = on_close

    def __repr__(self) -> str:
        return repr(self._c)

    @property
    def container_id(self) -> str:
        return self._c.container_id

    @property
    def remote_container_id(self) -> str | None:
        return self._c.remote_container_id

    @property
    def peer(self) -> str:
        return self._c.peer

    @property
    def is_open(self) -> bool:
        return self._c.is_open

    @property
    def reconnecting(self) -> bool:
        return self._c.reconnecting

    @property
    def reconnects(self) -> int:
        return self._c.reconnects

    @property
    def error(self) -> Exception | None:
        return self._c.error

    @property
    def async_connection(self) -> _conn.Connection:
        """The async connection underneath (only usable inside its event loop)."""
        return self._c

    def open_sender(
        self,
        address: str | None,
        *,
        settle_mode: SettleMode | str = SettleMode.MIXED,
        **kwargs: Any,
    ) -> Sender:
        sender = self._run(self._c.open_sender, address, settle_mode=settle_mode, **kwargs)
        return Sender(self._call, sender)

    def open_receiver(
        self,
        address: str | None = None,
        *,
        credit: int = 100,
        settle_mode: SettleMode | str = SettleMode.MIXED,
        dynamic: bool = False,
        **kwargs: Any,
    ) -> Receiver:
        receiver = self._run(
            self._c.open_receiver,
            address,
            credit=credit,
            settle_mode=settle_mode,
            dynamic=dynamic,
            **kwargs,
        )
        return Receiver(self._call, receiver)

    def session(self, *, timeout: float | None = None) -> Session:
        return Session(self._call, self._run(self._c.session, timeout=timeout))

    def transaction(self, *, timeout: float | None = None) -> Transaction:
        """A local transaction: ``with conn.transaction() as txn:`` (see the async one)."""

        async def make() -> _txn.Transaction:
            return self._c.transaction(timeout=timeout)

        return Transaction(self._call, self._run(make))

    def request(self, address: str, message: Message, *, timeout: float | None = None) -> Message:
        return self._run(self._c.request, address, message, timeout=timeout)

    def reply(
        self,
        request: Delivery | Message,
        response: Message,
        *,
        timeout: float | None = None,
    ) -> Any:
        req = request._d if isinstance(request, Delivery) else request
        return self._run(self._c.reply, req, response, timeout=timeout)

    def next_link(self, *, timeout: float | None = None) -> Sender | Receiver:
        return _wrap_link(self._call, self._run(self._c.next_link, timeout=timeout))

    def incoming_links(self) -> Iterator[Sender | Receiver]:
        """Links the peer attaches, until the connection closes."""
        while True:
            link = self._run(_next_link_or_none, self._c)
            if link is None:
                return
            yield _wrap_link(self._call, link)

    def wait_closed(self) -> None:
        self._run(self._c.wait_closed)

    def close(self, error: Error | None = None, *, timeout: float | None = None) -> None:
        """Close the connection and, for one made by :func:`connect`, stop its event loop."""
        try:
            if self._on_close is None:
                self._run(self._c.close, error, timeout=timeout)
        finally:
            on_close, self._on_close = self._on_close, None
            if on_close is not None:
                on_close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


async def _next_link_or_none(conn: _conn.Connection) -> _sender.Sender | _receiver.Receiver | None:
    try:
        return await conn.incoming_links().__anext__()
    except StopAsyncIteration:
        return None


@contextlib.asynccontextmanager
async def _connected(
    url: str | Sequence[str], kwargs: dict[str, Any]
) -> AsyncIterator[_conn.Connection]:
    async with await _opening.connect(url, **kwargs) as conn:
        yield conn


def connect(
    url: str | Sequence[str] = "amqp://127.0.0.1",
    *,
    container_id: str | None = None,
    hostname: str | None = None,
    idle_timeout: float | None = None,
    ssl: _ssl.SSLContext | bool | None = None,
    sasl_mechanisms: list[str] | tuple[str, ...] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    **kwargs: Any,
) -> Connection:
    """Connect and return a blocking :class:`Connection` (see :func:`amqp10.connect`).

    ``reconnect=ReconnectPolicy(...)`` (or True) and lists of URLs work as there:
    a blocked call waits for the connection to be re-made.

    The connection's event loop runs in its own thread until :meth:`Connection.close`.
    """
    kwargs.update(
        container_id=container_id,
        hostname=hostname,
        idle_timeout=idle_timeout,
        ssl=ssl,
        sasl_mechanisms=sasl_mechanisms,
        timeout=timeout,
    )
    backend, options = _portal_backend()
    stack = contextlib.ExitStack()
    try:
        portal = stack.enter_context(anyio.from_thread.start_blocking_portal(backend, options))
        conn = stack.enter_context(portal.wrap_async_context_manager(_connected(url, kwargs)))
    except BaseException:
        stack.close()
        raise
    return Connection(portal.call, conn, on_close=stack.close)


# -- the direct peer ------------------------------------------------------------------------
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
    portal: anyio.from_thread.BlockingPortal | None = None

    async def run_handler(conn: _conn.Connection) -> None:
        nonlocal limiter
        if limiter is None:
            limiter = anyio.CapacityLimiter(max_threads)
        assert portal is not None
        # calls go through the portal, so the handler may hand the connection
        # (or its links) to threads of its own
        await anyio.to_thread.run_sync(sync_handler, Connection(portal.call, conn), limiter=limiter)

    backend, options = _portal_backend()
    stack = contextlib.ExitStack()
    try:
        portal = stack.enter_context(anyio.from_thread.start_blocking_portal(backend, options))
        server = stack.enter_context(
            portal.wrap_async_context_manager(_server.serve(host, port, run_handler, **kwargs))
        )
    except BaseException:
        stack.close()
        raise
    return Server(server, stack)
