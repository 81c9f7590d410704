"""What a connection shares with its sessions and links: state, signals, waits.

:class:`ConnectionCore` is the bottom layer of :class:`~amqp10.client.Connection`:
the engine and its driver, the wake-up signals, why the connection ended, the
reconnect state its links look at, time limits and back-pressure. Sessions,
links and transactions are written against it, so they never import the
modules that build on them (link factories, requests, the connection's
lifecycle).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
from anyio.abc import ByteStream

from .. import errors
from ..io.direct import DirectDriver
from ..io.driver import Driver, EngineProtocol, Signal
from ..transport import Connection as Engine
from ..transport import ConnectionState, Event
from ..types import Error
from ._common import DEFAULT_TIMEOUT, deadline
from .reconnect import ReconnectPolicy, Schedule

__all__ = ["ConnectionCore", "CreditWaiter", "LinkFilter"]

LinkFilter = Callable[[str, "str | None"], "Error | None"]
"""``(kind, address) -> None`` to accept a link the peer attaches, or an ``Error`` to refuse it.

``kind`` is our end's role: ``"receiver"`` when the peer wants to send to
``address``, ``"sender"`` when it wants to receive from it.
"""


class CreditWaiter(Protocol):
    """A sender with pre-settled messages waiting for credit (see ``Sender._after_io``)."""

    def _after_io(self) -> bool: ...


@dataclass(slots=True)
class Outage:
    """A dropped connection being re-made: the attempts so far and what was lost."""

    schedule: Schedule
    error: errors.AMQPError
    peer: str
    since: float
    attempting: bool = False  # a new driver runs the handshake of an attempt
    open_limit: float = DEFAULT_TIMEOUT


class ConnectionCore:
    """The state and services of a connection that its sessions and links use."""

    def __init__(
        self,
        engine: Engine,
        stream: ByteStream,
        *,
        peer: str,
        protocol: EngineProtocol[Event] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_buffered: int = 1000,
        accepting: bool = False,
        link_credit: int = 100,
        link_filter: LinkFilter | None = None,
    ) -> None:
        self._engine = engine
        self._protocol: EngineProtocol[Event] = protocol if protocol is not None else engine
        self.peer = peer
        """``host:port`` of the other end."""
        self.timeout = timeout
        self._accepting = accepting
        self._driver = self._make_driver(stream)
        self._changed = Signal()  # open/close, sessions, links: control-plane changes
        self._activity = Signal()  # after every batch of engine events
        self._error: errors.AMQPError | None = None
        self._closing = False
        self._opened = False
        self._buffered = 0
        self._max_buffered = max_buffered
        self._link_credit = link_credit
        self._link_filter = link_filter
        self._waiting_senders: set[CreditWaiter] = set()
        self._names = itertools.count(1)
        self._setup_lock: anyio.Lock | None = None
        self.authenticated_as: str | None = None
        """The identity SASL established (server side: the peer's user), if any."""
        self._policy: ReconnectPolicy | None = None  # connect(..., reconnect=...)
        self._outage: Outage | None = None
        self._holding = False
        """After a reconnect: links wait while claims-based tokens are put again."""
        self.reconnects = 0
        """How many times the connection was re-established after a drop."""
        self._init_layer()

    def _init_layer(self) -> None:
        """Set up the state of the layers built on this one (each calls ``super()`` first).

        The layers take no arguments of their own, so :class:`~amqp10.client.Connection`
        is made with this class's ``__init__`` signature, checked as written.
        """

    def _make_driver(self, stream: ByteStream) -> Driver[Event]:
        idle = self._engine.idle_timeout
        pause_limit = idle / 2 if idle else None
        if DirectDriver.usable(stream):
            # plain TCP on asyncio: the engine is fed from the transport's callbacks and
            # an answer goes out from the same callback (no reader or writer task woken
            # per round trip); see amqp10.io.direct
            return DirectDriver(
                stream, self._protocol, self._on_events, peer=self.peer, pause_limit=pause_limit
            )
        return Driver(
            stream, self._protocol, self._on_events, peer=self.peer, pause_limit=pause_limit
        )

    def _on_events(self, events: list[Any]) -> None:
        """The driver's callback with each batch of engine events (the connection's)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<Connection {self.peer} {self._engine.state.name}>"

    # -- properties -------------------------------------------------------------------
    @property
    def container_id(self) -> str:
        return self._engine.container_id

    @property
    def remote_container_id(self) -> str | None:
        remote = self._engine.remote_open
        return remote.container_id if remote is not None else None

    @property
    def remote_offered_capabilities(self) -> list[str]:
        """What the peer's open offers (e.g. ``ANONYMOUS-RELAY``: a sender with no
        address may send each message wherever its ``to`` says)."""
        remote = self._engine.remote_open
        caps = remote.offered_capabilities if remote is not None else None
        if caps is None:
            return []
        return [str(c) for c in ([caps] if isinstance(caps, str) else caps)]

    @property
    def anonymous_relay(self) -> bool:
        """Whether the peer offers ``ANONYMOUS-RELAY`` (``open_sender(None)``)."""
        return "ANONYMOUS-RELAY" in self.remote_offered_capabilities

    @property
    def remote_properties(self) -> dict[Any, Any] | None:
        remote = self._engine.remote_open
        return remote.properties if remote is not None else None

    @property
    def is_open(self) -> bool:
        return self._opened and self._error is None and not self._closing

    @property
    def reconnecting(self) -> bool:
        """True while a dropped connection is being re-made (calls wait for it)."""
        return self._outage is not None and self._error is None

    @property
    def error(self) -> errors.AMQPError | None:
        """Why the connection ended (``ConnectionClosed`` after a clean close), or None."""
        return self._error

    @property
    def driver(self) -> Driver[Event]:
        """The I/O driver (counters, back-pressure state): for diagnostics and tests."""
        return self._driver

    def _timeout_for(self, timeout: float | None) -> float:
        return self.timeout if timeout is None else timeout

    def _close_timeout(self) -> float:
        return min(self.timeout, 5.0)

    def _check_open(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closing:
            raise errors.ConnectionClosed(f"connection to {self.peer} is closed")

    def _wake(self) -> None:
        self._driver.flush_soon()

    def _lock(self) -> anyio.Lock:
        """Serialises making the links a connection shares (coordinator, reply receiver)."""
        if self._setup_lock is None:
            self._setup_lock = anyio.Lock()
        return self._setup_lock

    def _link_name(self, kind: str, address: str | None) -> str:
        return f"{self.container_id}-{kind}-{next(self._names)}-{address or 'dynamic'}"

    def _usable(self) -> bool:
        return (
            self._outage is None
            and not self._holding
            and self._error is None
            and self._engine.state is ConnectionState.OPENED
        )

    async def _authorize(self, address: str | None, timeout: float) -> None:
        """Before a link to ``address`` attaches: put the token it needs, if the
        connection uses claims-based security (:mod:`amqp10.client.claims`)."""

    async def _until_usable(self, timeout: float, what: str) -> None:
        """With a reconnect policy: wait (at most ``timeout``) until the connection is back."""
        if self._policy is None or self._usable():
            return
        try:
            with deadline(timeout, what):
                while not self._usable():
                    self._check_open()
                    await self._changed.wait()
        except errors.TimeoutError:
            raise errors.TimeoutError(
                f"{what} timed out after {timeout:g}s: the connection to {self.peer} "
                "was not re-established in time"
            ) from None

    # -- back-pressure ------------------------------------------------------------------
    def _buffered_more(self, n: int) -> None:
        self._buffered += n
        if self._buffered > self._max_buffered and not self._driver.reading_paused:
            self._driver.pause_reading()

    def _took(self, n: int) -> None:
        self._buffered -= n
        if self._driver.reading_paused and self._buffered <= self._max_buffered // 2:
            self._driver.resume_reading()
