"""The interface every protocol front end implements, and what the service gives it.

The service (:mod:`.service`) accepts a connection, reads its first 8 bytes and asks
the registered front ends (:mod:`.frontends`), in order, which one takes that header
(:meth:`FrontEnd.accepts`). That front end then serves the connection to its end
(:meth:`FrontEnd.serve`): it authenticates the client in its protocol's own way (1.0:
SASL; 0-9-1: ``connection.start``), from the users and permissions the service shares
with every front end (:class:`ServeContext`), runs its engine under a driver, and
turns the engine's events into core operations. The service knows no protocol's
events; it keeps the listeners, the store and the broker's lifecycle.

A header no front end takes is answered with a header one of them offers instead
(:meth:`FrontEnd.counter_offer`: the preferred version of the same protocol family,
as 0-9-1 §4.2.2 says), and the connection is closed.

Adding a protocol is a package with a class that implements :class:`FrontEnd` and one
line in :mod:`.frontends`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

import anyio
from anyio.abc import ByteStream

from ..io.asyncio_tcp import asyncio_tcp
from ..io.direct import DirectDriver
from ..io.driver import Driver, EngineProtocol
from ..io.streams import ReplayStream, quick_acker
from ..sasl.credentials import InMemoryCredentialStore
from .guard import ConnectionGuard, HeldOutput, Login, LoginHook, source_of
from .oauth import InvalidToken
from .workers.handover import Recording, replay

if TYPE_CHECKING:
    from ..sasl.credentials import CredentialStore
    from .config import BrokerConfig
    from .core import Broker, VirtualHost
    from .oauth import TokenGrant, TokenValidator
    from .workers.handover import Handover, MovedIn, Mover

__all__ = [
    "HEADER_SIZE",
    "ContextHandler",
    "FrontEnd",
    "FrontEndHandler",
    "HandlerContext",
    "ServeContext",
    "ServedConnection",
    "choose",
    "driver_for",
    "header_then_frames",
]

log = logging.getLogger("amqp10.broker")

HEADER_SIZE: Final = 8
"""The bytes of a protocol header: what the service reads to choose a front end."""


def header_then_frames(split: Callable[[bytes], Iterable[bytes]], data: bytes) -> Iterator[bytes]:
    """A connection's input from its start as a moved connection's replay feeds it
    (:meth:`ServeContext.replayed`'s ``pieces``, 0-9-1 and 0-10: their engines want the
    handler's answer to a frame before the next): the protocol header, then one frame at a
    time as the protocol's ``split`` cuts them."""
    yield data[:HEADER_SIZE]
    yield from split(data[HEADER_SIZE:])


class FrontEnd(Protocol):
    """One protocol the broker serves."""

    name: str
    """How management lists its connections (``"AMQP 1.0"``, ...)."""

    def accepts(self, header: bytes) -> bool:
        """Whether this front end serves a connection that began with ``header`` (8 bytes)."""
        ...

    def counter_offer(self, header: bytes) -> bytes | None:
        """The protocol header to answer an unsupported ``header`` of this protocol's
        family with (its preferred version), or None: not of this family."""
        ...

    def prepare(self, broker: Broker, config: BrokerConfig) -> None:
        """Once the broker has recovered, before any connection: set up what this
        protocol's conventions need in the core (1.0: the Service Bus entities the
        configuration names)."""
        ...

    async def serve(self, stream: ByteStream, ctx: ServeContext) -> None:
        """Serve one connection to its end; ``ctx.header`` was read from ``stream`` already.

        The front end registers the connection (:meth:`ServeContext.registered`) while
        it runs, so management lists it and a shutdown closes it."""
        ...


class FrontEndHandler(Protocol):
    """What the service and management read from a front end's connection handler."""

    user: str | None

    @property
    def vhost(self) -> Any: ...

    def resource_counts(self) -> tuple[int, int]:
        """Sessions (0-9-1: channels) and links (0-9-1: consumers) it holds."""
        ...

    def consumer_details(self) -> list[dict[str, Any]]:
        """Its consumers, as management lists them: ``consumer_tag`` (1.0: the link's name),
        ``channel`` (0-9-1: the channel's number; 1.0: the session's), ``queue``,
        ``ack_required``, ``exclusive``, ``prefetch_count`` (1.0: the link's credit),
        ``active``, ``arguments``."""
        ...

    def cleanup(self) -> None:
        """The connection ended: give back what it held (consumers, links, exclusive queues)."""
        ...


class HandlerContext(Protocol):
    """What a front end's connection context (the per-concern handlers' view of one
    connection) holds that the service reads through the connection's handler."""

    user: str | None
    grant: TokenGrant | None
    vhost: VirtualHost


class ContextHandler:
    """The common part of the front ends' connection handlers: the service's view of who
    logged in and the virtual host (:class:`FrontEndHandler`), both kept in the handler's
    connection context, and what a login's outcome does to the connection."""

    ctx: HandlerContext
    login_hook: LoginHook | None = None
    """The service's [security] guard for this connection's login (None: none)."""
    refusal: str | None = None
    """Set by the service or the hook: refuse the open with this text (a [security] limit)."""
    tokens: TokenValidator | None = None
    """Checks a renewed OAuth 2 token (None: ``[oauth2]`` is not set)."""

    @property
    def user(self) -> str | None:
        """Who logged in (None: anonymous)."""
        return self.ctx.user

    @user.setter
    def user(self, user: str | None) -> None:
        self.ctx.user = user

    @property
    def vhost(self) -> VirtualHost:
        """The virtual host the open chose (the broker's default until then)."""
        return self.ctx.vhost

    @property
    def grant(self) -> TokenGrant | None:
        """What the OAuth 2 token the connection logged in with allows (None: no token)."""
        return self.ctx.grant

    def logged_in(self, user: str | None, grant: TokenGrant | None = None) -> None:
        """A login as ``user`` (with an OAuth 2 token: ``grant``) checked out: the
        connection is theirs, and the [security] hook may name a limit (then the open is
        refused with it)."""
        self.ctx.user = user
        self.ctx.grant = grant
        hook = self.login_hook
        if hook is not None:
            over = hook.succeeded(user)
            if over is not None and self.refusal is None:
                self.refusal = over

    def token_expired(self, now: float) -> str | None:
        """Why the connection must close now: the OAuth 2 token it logged in with ran out
        (and was not renewed); None: no token, or one still valid."""
        grant = self.ctx.grant
        if grant is None or not grant.expired(now):
            return None
        log.info("closing a connection of user %r: its OAuth 2 token has expired", grant.user)
        return "credential expired"  # RabbitMQ's words

    def renew_token(self, token: str | bytes) -> str | None:
        """Replace the connection's OAuth 2 token with ``token`` (1.0: ``PUT /auth/tokens``;
        0-9-1: ``connection.update-secret``): None if it did; else why not (logged). The
        new token must be valid, for the same user, and open the connection's virtual host."""
        grant = self.ctx.grant
        if self.tokens is None or grant is None:
            why = "this connection did not log in with an OAuth 2 token"
        else:
            try:
                text = token.decode() if isinstance(token, bytes) else token
                renewed = self.tokens.renew(grant, text)
            except (InvalidToken, UnicodeDecodeError) as exc:
                why = str(exc) if isinstance(exc, InvalidToken) else "the token is not UTF-8 text"
            else:  # as RabbitMQ: the new token must still open the connection's virtual host
                why_not = renewed.vhost_denial(self.ctx.vhost.name)
                if why_not is None:
                    self.ctx.grant = renewed
                    return None
                why = why_not
        log.info("token renewal refused for %r: %s", self.ctx.user, why)
        return why

    def login_refused(self, protocol: str, mechanism: str, name: str | None) -> None:
        """A login (as ``name``, if it named one) did not check out: logged, and told to the hook."""
        log.info("%s login refused for %r (%s)", protocol, name, mechanism)
        if self.login_hook is not None:
            self.login_hook.failed(name, f"{protocol} {mechanism} login refused")


@dataclass(eq=False)
class ServedConnection:
    """One served connection, as the service and management see it (a management
    ``ManagedConnection``): its driver, its handler, and how to close and tick it."""

    driver: Driver[Any]
    handler: FrontEndHandler
    protocol: str
    """The front end's name (``"AMQP 1.0"``), or the dialect it serves (``"AMQP 0-9"``)."""
    peer: str
    force_close: Callable[[str | None], None]
    """Start closing the connection with the protocol's 'forced' error: the reason given
    (management), or None: the broker is shutting down."""
    tick: Callable[[], None] = lambda: None
    """Called about once a second (tokens that run out, ...)."""
    container_id: Callable[[], str] = lambda: ""
    """The client's container id (1.0), if its protocol has one."""
    name: str = ""
    """Its name in management listings (the peer's address; made unique when registered)."""
    connected_at: float = field(default_factory=time.time)

    def info(self) -> dict[str, Any]:
        h = self.handler
        sessions, links = h.resource_counts()
        return {
            "protocol": self.protocol,
            "user": h.user,
            "vhost": h.vhost.name,
            "peer": self.peer,
            "container_id": self.container_id(),
            "connected_at": self.connected_at,
            "sessions": sessions,
            "links": links,
        }

    def consumers(self) -> list[dict[str, Any]]:
        return self.handler.consumer_details()

    def close(self, reason: str) -> None:
        self.force_close(reason)
        self.driver.flush_soon()


@dataclass(kw_only=True)
class ServeContext:
    """What the service gives a front end for one accepted connection."""

    broker: Broker
    config: BrokerConfig
    users: CredentialStore | None
    """The users file's credentials (None: the broker has no users file)."""
    tokens: TokenValidator | None = None
    """Checks OAuth 2 tokens given as PLAIN passwords (None: ``[oauth2]`` is not set)."""
    guard: ConnectionGuard
    """Login back-off and per-user connection limits, shared by every front end."""
    peer: str
    header: bytes
    """The connection's first 8 bytes, already read from its stream."""
    refusal: str | None = None
    """A soft refusal (the guard's): let the client log in, then refuse it with this reason."""
    registered: Callable[[ServedConnection], contextlib.AbstractContextManager[None]]
    """Count a connection among the broker's while it runs (management lists it, a
    shutdown force-closes it); when it ends, its handler cleans up."""
    worker: int | None = None
    """The worker process serving it (``workers`` > 1); None: the broker's only process."""
    handover: Handover | None = None
    """``move_connections``: how a front end moves a connection to the worker that owns
    its node (:mod:`.workers.handover`); None: it stays where it was accepted."""
    moved: MovedIn | None = None
    """A connection another worker moved here: its ``inbound`` (all that worker read,
    ``header`` first) is the engine's first input, and the replay's output must begin
    with what it wrote (:meth:`MovedIn.check`)."""

    @property
    def shown_worker(self) -> int | None:
        """The worker a client is told serves it (1.0's open, 0-9-1's ``connection.start``):
        this one, or the one that accepted a moved connection (its replay says the same)."""
        return self.worker if self.moved is None else self.moved.shown_worker

    def recording(self, stream: ByteStream, engine: EngineProtocol[Any]) -> Recording | None:
        """``engine`` recorded while the connection is movable to the worker of its queue
        (``move_connections``, a plain TCP socket, not moved here already): the driver's
        engine then (:class:`~.workers.handover.Recording`); None: not movable."""
        movable = self.handover is not None and self.moved is None and DirectDriver.usable(stream)
        return Recording(engine) if movable else None

    def credentials(self) -> CredentialStore | None:
        """The store PLAIN and SCRAM check: the users file's; with OAuth 2 tokens and no
        users file, an empty one (PLAIN then takes tokens only)."""
        if self.users is None and self.tokens is not None:
            return InMemoryCredentialStore()
        return self.users

    def login(self, held: HeldOutput[Any], extend: Callable[[float], None] = lambda seconds: None) -> Login:
        """The [security] hook for this connection's login (its answer held back by ``held``)."""
        return Login(self.guard, held, source_of(self.peer), extend)

    async def refuse(self, stream: ByteStream, protocol: str, why: str) -> None:
        """Close the connection at once, before any handshake (logged with ``why``)."""
        log.info("refusing %s connection from %s: %s", protocol, self.peer, why)
        await anyio.aclose_forcefully(stream)

    def replayed(
        self,
        engine: EngineProtocol[Any],
        handle: Callable[[list[Any]], None],
        decides: Callable[[Any], bool],
        cleanup: Callable[[], None],
        pieces: Callable[[bytes], Iterable[bytes]] = lambda data: (data,),
        compared: Callable[[bytes], bytes] = lambda output: output,
        *,
        fail: Callable[[str], None],
    ) -> bytes | None:
        """A connection another worker moved here (:attr:`moved`), replayed on the front
        end's fresh ``engine`` and handler (:func:`~.workers.handover.replay`, with
        ``pieces`` and ``compared``): what is
        left to write first (logged: moved here); None: not taken (logged, and ``cleanup``
        called: the other worker carries on with it). ``fail``: close the connection with
        the protocol's internal error (0-10: connection-forced) and this description (its
        replay raised once taken)."""
        moved = self.moved
        assert moved is not None
        rest = replay(moved, engine, handle, decides, pieces, compared, fail=fail)
        if rest is None:
            log.info("connection from %s not taken over: its replay differs or failed (logged above)", self.peer)
            moved.decide(False)
            cleanup()
            return None
        log.info("connection from %s moved here from worker %d", self.peer, moved.shown_worker)
        return rest

    async def run(
        self,
        served: ServedConnection,
        *,
        mover: Mover | None = None,
        rest: bytes = b"",
        beside: Callable[[], Coroutine[Any, Any, None]] | None = None,
    ) -> None:
        """Run ``served``'s driver to the connection's end, registered meanwhile: first
        ``rest`` written (what a moved connection's replay wrote past what the worker that
        accepted it had, :func:`~.workers.handover.replay`), with ``mover`` given the
        driver (a movable connection) and ``beside`` run meanwhile (a handshake's watch)."""
        driver = served.driver
        with self.registered(served):
            if rest:  # (a replay is on plain TCP only)
                tcp = asyncio_tcp(driver.stream)
                assert tcp is not None
                tcp.write(rest)
            if mover is None and beside is None:
                await driver.run()
                return
            async with anyio.create_task_group() as tg:
                if mover is not None:
                    mover.running(driver, tg)
                if beside is not None:
                    tg.start_soon(beside)
                await driver.run()
                tg.cancel_scope.cancel()

    @contextlib.contextmanager
    def logging_in(self, held: HeldOutput[Any], extend: Callable[[float], None] = lambda seconds: None) -> Iterator[Login]:
        """:meth:`login`, with the users it counted released when the block ends."""
        login = self.login(held, extend)
        try:
            yield login
        finally:
            login.ended()


def driver_for(
    stream: ByteStream,
    engine: EngineProtocol[Any],
    on_events: Callable[[list[Any]], None],
    *,
    peer: str,
    pause_limit: float | None = None,
) -> Driver[Any]:
    """The driver of a connection whose engine was fed its header already (0-9-1, 0-10):
    on plain TCP a :class:`~amqp10.io.direct.DirectDriver` (the engine fed from the
    transport's callbacks), else a :class:`~amqp10.io.driver.Driver`; either acknowledges
    each read at once (``TCP_QUICKACK``: a client that waits for every answer is not held
    up by delayed ACKs)."""
    if DirectDriver.usable(stream):
        return DirectDriver(stream, engine, on_events, peer=peer, pause_limit=pause_limit, on_read=quick_acker(stream))
    return Driver(ReplayStream(stream, quick_ack=True), engine, on_events, peer=peer, pause_limit=pause_limit)


def choose(front_ends: Sequence[FrontEnd], header: bytes) -> FrontEnd | bytes:
    """The first front end that takes ``header``; else the header to answer it with
    before closing (the first front end's counter-offer that claims its family)."""
    for fe in front_ends:
        if fe.accepts(header):
            return fe
    for fe in front_ends:
        offer = fe.counter_offer(header)
        if offer is not None:
            return offer
    raise ValueError(f"no front end answers the protocol header {header!r}")
