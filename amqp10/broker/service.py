"""The broker on the network: listeners, SASL, one driver per connection, the store.

:class:`BrokerService` ties :class:`~amqp10.broker.core.Broker` (nodes, no I/O)
and its protocol front ends (:mod:`amqp10.broker.amqp1`) to sockets through the shared :class:`~amqp10.io.driver.Driver`. Durable
messages go through a :class:`~amqp10.broker.core.committer.GroupCommitter`; a producer
is told ``accepted`` only after the commit that holds its message.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import ByteStream, SocketAttribute, TaskStatus

from ..amqp091 import CAPABILITIES, Protocol, ReplyCode, Unsupported, identify_header
from ..amqp091.negotiate import HEADER_SIZE
from ..collector import gc_paused
from ..io.direct import DirectDriver
from ..io.driver import Driver, Signal
from ..io.net import Listener
from ..io.tls import server_context
from ..sasl.connection import SaslConnection
from ..sasl.events import SaslCompleted, SaslFailed, SaslSkipped
from ..sasl.layer import SaslServer
from ..transport import ConnectionState
from ..types import Error, ErrorCondition, SaslCode
from .alarms import ResourceAlarms
from .amqp091 import Amqp091Handler, BrokerConnection
from .amqp1 import ConnectionHandler
from .amqp1.servicebus.entities import declare_entities
from .config import BrokerConfig
from .console import Console, console_routes
from .core import Broker
from .core.broker import FrontEndConnection
from .core.committer import GroupCommitter
from .core.store import SqlStore, Store
from .guard import ConnectionGuard, HeldOutput, Refusal, source_of
from .http import broker_routes, start_http
from .management import Management
from .metrics import EndedConnections, MetricsSources, TextWriter, exposition, metrics_registry
from .topology import LiveDefinitions
from .users import UsersFile, load_access

if TYPE_CHECKING:
    from .core.store_postgres import DatabaseLock

__all__ = ["BrokerService"]

log = logging.getLogger("amqp10.broker")

TICK_SECONDS = 1.0
DRAIN_SECONDS = 5.0
"""How long a shutdown waits for the store to commit what clients sent before it (their
outcomes go out before the connections are closed)."""
_TCP_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)


class _Client:
    """One accepted connection: its driver, and how to close it (the broker stops, or
    management closes it). It is the connection management lists (a ``ManagedConnection``)."""

    def __init__(
        self, driver: Driver[Any], handler: Any, peer: str, force_close: Callable[[str | None], None], protocol: str
    ) -> None:
        self.driver = driver
        self.handler = handler
        """The front end's connection handler (1.0 or 0-9-1)."""
        self.peer = peer
        self.name = peer
        """Its name in management listings (the peer's address; made unique when registered)."""
        self.force_close = force_close
        """Start closing the connection with the protocol's 'forced' error: the reason given
        (management), or None: the broker is shutting down."""
        self.protocol = protocol
        self.connected_at = time.time()

    def info(self) -> dict[str, Any]:
        h = self.handler
        sessions, links = h.resource_counts() if isinstance(h, FrontEndConnection) else (0, 0)
        return {
            "protocol": self.protocol,
            "user": h.user,
            "vhost": h.vhost.name,
            "peer": self.peer,
            "container_id": getattr(h, "remote_container_id", ""),
            "connected_at": self.connected_at,
            "sessions": sessions,
            "links": links,
        }

    def close(self, reason: str) -> None:
        self.force_close(reason)
        self.driver.flush_soon()


class _Login:
    """The [security] hook of one connection's login, for either front end: a failed
    login's answer waits out the back-off (and so does a success, by its address's
    failures), and a user over its connection limit is told why. Counted users are
    released by :meth:`ended`."""

    def __init__(
        self,
        guard: ConnectionGuard,
        held: HeldOutput[Any],
        addr: str,
        extend: Callable[[float], None] = lambda seconds: None,
    ) -> None:
        self.guard = guard
        self.held = held
        self.addr = addr
        self.extend = extend
        """Told each hold's length (the engine's handshake timer must not count it)."""
        self.counted: list[str | None] = []  # the user the guard counted this connection for

    def _hold(self, seconds: float) -> None:
        self.held.hold(anyio.current_time(), seconds)
        self.extend(seconds)

    def succeeded(self, user: str | None) -> str | None:
        """``user`` (None: anonymous) logged in; returns why its connection is refused, if it is."""
        self._hold(self.guard.login_ok(self.addr, user))
        over = self.guard.opened(user, self.addr)
        if over is not None:
            return over.reason
        self.counted.append(user)
        return None

    def failed(self, name: str | None, reason: str) -> None:
        """Credentials that did not check out (a guess): back off."""
        self._hold(self.guard.login_failed(self.addr, name, reason))

    def ended(self) -> None:
        for user in self.counted:
            self.guard.closed(user)


class _Replay(ByteStream):
    """A connection's stream: the first bytes (the protocol header, already read) given back
    first; with ``quick_ack``, every read is acknowledged at once (Linux ``TCP_QUICKACK``).

    Quick ACKs matter to 0-9-1 clients that write frame by frame with Nagle's algorithm on
    (amqplib: ``tune-ok`` then ``open``): the second write waits for the ACK of the first,
    which a delayed ACK holds back by 40 ms, on every connection's handshake.
    """

    def __init__(self, stream: ByteStream, head: bytes = b"", *, quick_ack: bool = False) -> None:
        self._stream = stream
        self._head = head
        self._ack = _quick_acker(stream) if quick_ack else None

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._head:
            data, self._head = self._head[:max_bytes], self._head[max_bytes:]
            return data
        data = await self._stream.receive(max_bytes)
        if self._ack is not None:
            self._ack()
        return data

    async def send(self, item: bytes) -> None:
        await self._stream.send(item)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return self._stream.extra_attributes


def _quick_acker(stream: ByteStream) -> Callable[[], None] | None:
    """A call that acknowledges what was read at once (Linux ``TCP_QUICKACK``; the kernel
    resets it, so it is made after every read); None where there is no such option."""
    if _TCP_QUICKACK is None:
        return None
    option = _TCP_QUICKACK
    try:
        sock: socket.socket = stream.extra(SocketAttribute.raw_socket)
    except Exception:
        return None
    broken = False

    def ack() -> None:
        nonlocal broken
        if not broken:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, option, 1)
            except OSError:
                broken = True

    return ack


async def _read_header(stream: ByteStream, timeout: float) -> bytes:
    """The first 8 bytes of a connection (fewer: it ended or said nothing in time)."""
    head = b""
    with anyio.move_on_after(timeout):
        while len(head) < HEADER_SIZE:
            try:
                head += await stream.receive(HEADER_SIZE - len(head))
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                break
    return head


class BrokerService:
    """Runs the broker until cancelled; ``ports`` holds the ports actually bound."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.store: SqlStore | None = None
        self.lock: DatabaseLock | None = None  # [store] postgresql: the lock of an active/standby pair
        self.committer: GroupCommitter | None = None
        self.broker: Broker | None = None
        self.alarms: ResourceAlarms | None = None
        """The memory and disk alarms (made with the broker)."""
        self.listeners: list[Listener] = []
        self.clients: set[_Client] = set()
        self.recovered = 0
        self._users: Any = None
        self._accepting = True
        self._conns_scope: anyio.CancelScope | None = None
        self.http: Listener | None = None  # [http]: WebSockets and health (see .http)
        self.guard = ConnectionGuard(config.security)  # [security]: every front end asks it
        self.ended = EndedConnections()
        """Frame and error counters of the connections that have ended (for /metrics)."""

    @property
    def ports(self) -> list[int]:
        return [lst.port for lst in self.listeners]

    # -- [http] hooks (issue 18) --------------------------------------------------------
    @property
    def http_port(self) -> int | None:
        """The port the HTTP listener bound (None: ``[http]`` is off or not started)."""
        return None if self.http is None else self.http.port

    def not_ready(self) -> str | None:
        """Why the broker is not ready to serve (``/readyz``), or None when it is."""
        if not self._accepting:
            return "shutting down"
        if self.store is None:
            return "the store is not open"
        if len(self.listeners) < len(self.config.listeners):
            return "the AMQP listeners are not bound yet"
        return None

    def metrics_sources(self) -> MetricsSources:
        """What ``/metrics`` reads (when scraped)."""
        return MetricsSources(
            broker=lambda: self.broker,
            store=lambda: self.store,
            committer=lambda: self.committer,
            handlers=lambda: [c.handler for c in self.clients],
            ended=self.ended,
        )

    def _console(self) -> Console:
        assert self.broker is not None
        http = self.config.http
        return Console(
            self.broker,
            lambda: self._users,
            self.guard,
            session_seconds=http.console_session_minutes * 60,
            secure=http.tls_cert is not None,
        )

    # -- end of [http] hooks ------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[BrokerService] = anyio.TASK_STATUS_IGNORED) -> None:
        """Open the store, recover, listen; on cancellation shut down gracefully."""
        cfg = self.config
        self._users, permissions = load_access(cfg.sasl)
        self.store = store = await self._open_store()
        try:
            self.committer = GroupCommitter(
                store, interval=cfg.store.commit_interval_ms / 1000, max_batch=cfg.store.max_batch
            )
            self.broker = Broker(cfg, journal=self.committer, now=time.time, permissions=permissions, pages=store)
            self.alarms = ResourceAlarms(
                self.broker, cfg.limits, cfg.store.path.parent if cfg.store.backend == "sqlite" else None
            )
            started = time.monotonic()
            with gc_paused():
                self.recovered = self.broker.recover(store)
            declare_entities(self.broker.default, cfg.servicebus)
        except BaseException:
            self._release_store()  # nothing committed into a store that did not recover
            raise
        gc.freeze()  # what was restored (and the broker's own objects) stay out of later full collections
        log.info(
            "recovered %d messages in %d nodes from %s in %.2fs",
            self.recovered,
            len(self.broker.nodes),
            store.location,
            time.monotonic() - started,
        )
        try:
            self._start_definitions(permissions)
            await self._run_tasks(task_status)
        finally:
            # after the task group: the committer has stopped, the connections are gone
            with anyio.CancelScope(shield=True):
                await self._close_store()

    async def _open_store(self) -> SqlStore:
        """The configured store. PostgreSQL: once this broker holds the database lock; until
        then it is the standby (nothing bound, nothing recovered)."""
        cfg = self.config.store
        if cfg.backend == "sqlite":
            return Store(cfg.path)
        from .core.store_postgres import DatabaseLock, PostgresStore

        assert cfg.dsn is not None  # the config's validator says so
        self.lock = lock = DatabaseLock(
            cfg.dsn, retry_seconds=cfg.lock_retry_seconds, session_timeout_seconds=cfg.lock_session_timeout_seconds
        )
        try:
            await lock.acquire()
            return await anyio.to_thread.run_sync(PostgresStore, cfg.dsn)
        except BaseException:
            lock.release()
            raise

    async def _fence(self) -> None:
        """Stop serving once the database lock is lost: the standby may be active by now
        (and this broker's writes are fenced off: see :mod:`.core.store_postgres`)."""
        from .core.store_postgres import StoreFenced

        lock = self.lock
        assert lock is not None
        why = await lock.watch()
        log.error("lost the store lock on %s (%s): stopping, the standby takes over", lock.location, why)
        raise StoreFenced(f"lost the store lock on {lock.location}: {why}")

    def _start_definitions(self, permissions: Any) -> None:
        """Offer definitions import/export; import ``definitions_file`` (raises
        DefinitionsError, one line naming the file, if it cannot be read)."""
        assert self.broker is not None
        sasl = self.config.sasl

        def users_changed(users: UsersFile) -> None:
            self._users = users.credential_store()
            permissions.update(
                users.permission_table(),
                tags={name: u.tags for name, u in users.users.items()},
                anonymous_user=sasl.anonymous_user,
            )

        live = LiveDefinitions(self.broker, sasl.users_file, users_changed)
        self.broker.definitions = live
        if self.config.definitions_file is not None:
            live.load_file(self.config.definitions_file)

    async def _run_tasks(self, task_status: TaskStatus[BrokerService]) -> None:
        cfg = self.config
        assert self.committer is not None
        async with anyio.create_task_group() as tg:
            conns = await tg.start(self._host_connections)
            try:
                tg.start_soon(self.committer.run)
                if self.lock is not None:
                    tg.start_soon(self._fence)
                if self.broker is not None and self.broker.recovery.enabled:
                    tg.start_soon(self._expire_suspended_links)
                tg.start_soon(self._tick)
                if self.broker is not None:
                    tg.start_soon(self._release_scheduled)
                    tg.start_soon(self._expire_leases)
                    tg.start_soon(self._expire_on_time)
                for spec in cfg.listeners:
                    ctx = None
                    if spec.tls_cert is not None:
                        ctx = server_context(
                            spec.tls_cert,
                            spec.tls_key,
                            cafile=spec.tls_ca,
                            require_client_cert=spec.require_client_cert,
                        )
                    lst = await Listener.bind(spec.host, spec.port, ssl_context=ctx)
                    self.listeners.append(lst)
                    log.info("listening on %s%s", lst.address, " (TLS)" if ctx else "")
                    tg.start_soon(self._serve, lst, conns)
                if cfg.http.enabled:  # [http]: an upgraded WebSocket goes to self._handle
                    metrics = None
                    if cfg.http.metrics:
                        registry = metrics_registry(self.metrics_sources())
                        writer = TextWriter()

                        async def metrics() -> bytes:
                            return await exposition(registry, writer)

                    routes = broker_routes(amqp=self._handle, not_ready=self.not_ready, metrics=metrics)
                    if cfg.http.console:
                        routes.update(console_routes(self._console()))
                    self.http = await start_http(cfg, routes, tg, conns)
                task_status.started(self)
                await anyio.sleep_forever()
            finally:
                try:
                    with anyio.CancelScope(shield=True):
                        await self._shutdown()
                finally:
                    assert self._conns_scope is not None
                    self._conns_scope.cancel()

    async def _host_connections(self, *, task_status: TaskStatus[Any] = anyio.TASK_STATUS_IGNORED) -> None:
        """The task group of the connections, shielded from the service's cancellation:
        their drivers must still run while ``_shutdown`` closes them (connection:forced)."""
        with anyio.CancelScope(shield=True) as scope:
            self._conns_scope = scope
            async with anyio.create_task_group() as conns:
                task_status.started(conns)
                await anyio.sleep_forever()

    async def _expire_suspended_links(self) -> None:
        """Drop suspended links (link recovery) when their time is up."""
        assert self.broker is not None
        recovery = self.broker.recovery
        await self._at_deadlines(recovery, recovery.expire_due)

    async def _release_scheduled(self) -> None:
        """Enqueue scheduled messages when they are due (to the event loop's precision,
        not the once-a-second tick's)."""
        assert self.broker is not None
        scheduler = self.broker.scheduler
        await self._at_deadlines(scheduler, scheduler.release_due)

    async def _expire_leases(self) -> None:
        """Run out locks (Service Bus peek-locks, session locks) when they are due."""
        assert self.broker is not None
        leases = self.broker.leases
        await self._at_deadlines(leases, leases.expire_due)

    async def _expire_on_time(self) -> None:
        """Expire messages at the heads of queues, and unused queues, when they are due."""
        assert self.broker is not None
        expirations = self.broker.expirations
        await self._at_deadlines(expirations, expirations.expire_due)

    async def _at_deadlines(self, source: Any, run: Callable[[], object]) -> None:
        """Call ``run`` whenever ``source.next_deadline()`` passes; ``source.on_change``
        says the deadline may have moved."""
        assert self.broker is not None
        now = self.broker.now
        changed = Signal()
        source.on_change = changed.fire
        while True:
            deadline = source.next_deadline()
            delay = math.inf if deadline is None else max(deadline - now(), 0.0)
            with anyio.move_on_after(delay):
                await changed.wait()
            run()

    async def _tick(self) -> None:
        """The broker's time-driven work (unused queues expiring), once a second."""
        assert self.broker is not None
        while True:
            await anyio.sleep(TICK_SECONDS)
            self.broker.tick()
            for c in list(self.clients):
                if isinstance(c.handler, ConnectionHandler) and c.handler.gate is not None:
                    c.handler.expire_tokens()
            if self.alarms is not None:
                self.alarms.check()

    async def _serve(self, listener: Listener, tg: Any) -> None:
        await listener.serve(self._handle, tg, handshake_timeout=self.config.limits.handshake_timeout)

    async def _shutdown(self) -> None:
        """Stop accepting, let the work in flight finish (what was sent before now is
        committed and its outcome goes out), then close every connection with
        connection:forced (see ``_close_store``)."""
        self._accepting = False
        for lst in [*self.listeners, *([self.http] if self.http else [])]:
            with anyio.move_on_after(1):
                await lst.aclose()
        if self.committer is not None:
            with anyio.move_on_after(DRAIN_SECONDS):
                await self.committer.flush()
        for c in list(self.clients):
            try:
                c.force_close(None)
                c.driver.flush_soon()
            except Exception:  # pragma: no cover - a half-open engine
                log.debug("closing %s", c.peer, exc_info=True)
        with anyio.move_on_after(2):
            for c in list(self.clients):
                await c.driver.wait_done()
        for c in list(self.clients):
            c.driver.abort()

    async def _close_store(self) -> None:
        """Commit what is left (after the committer's task has ended) and close the store."""
        try:
            if self.committer is not None:
                with anyio.move_on_after(10):
                    await self.committer._commit_pending()
        finally:
            self._release_store()
            log.info("broker stopped")

    def _release_store(self) -> None:
        """Close the store, then give up the database lock (if any): the standby that
        takes it recovers everything committed."""
        if self.store is not None:
            self.store.close()
        if self.lock is not None:
            self.lock.release()

    async def _handle(self, stream: ByteStream, peer: str) -> None:
        assert self.broker is not None
        cfg = self.config
        limits = cfg.limits
        if not self._accepting or len(self.clients) >= limits.max_connections:
            log.warning("refusing %s: connection limit %d reached", peer, limits.max_connections)
            await anyio.aclose_forcefully(stream)
            return
        # -- [security] hook: per-address rate and count, for every front end ------------
        addr = source_of(peer)
        refusal = self.guard.admit(addr)
        if refusal is not None and refusal.hard:
            await anyio.aclose_forcefully(stream)
            return
        try:
            # The one place a connection gets its protocol front end: its first 8 bytes choose.
            head = await _read_header(stream, limits.handshake_timeout)
            if len(head) < HEADER_SIZE:
                await anyio.aclose_forcefully(stream)
                return
            protocol = identify_header(head)
            if isinstance(protocol, Unsupported):
                log.info("%s sent protocol header %r: answering %r and closing", peer, head, protocol.reply)
                try:
                    with anyio.move_on_after(1):
                        await stream.send(protocol.reply)
                except Exception:  # the peer is gone already
                    pass
                await anyio.aclose_forcefully(stream)
                return
            if protocol.dialect is not None:
                await self._serve_amqp091(stream, peer, head, protocol, refusal)
            else:
                await self._serve_amqp1(stream, peer, head, refusal)
        finally:
            if refusal is None:
                self.guard.release(addr)

    @contextlib.contextmanager
    def _registered(self, client: _Client) -> Iterator[None]:
        """Count ``client`` among the broker's connections while it runs (a shutdown
        force-closes it); when it ends, its handler cleans up and it is forgotten."""
        assert self.broker is not None
        management = Management.of(self.broker)
        if any(c.name == client.name for c in self.clients):
            client.name = f"{client.peer}#{id(client):x}"
        self.clients.add(client)
        management.register_connection(client)
        try:
            yield
        finally:
            management.unregister_connection(client)
            client.handler.cleanup()
            self.clients.discard(client)
            self.ended.add(client.handler)
            log.debug("connection from %s ended", client.peer)

    async def _serve_amqp091(
        self, stream: ByteStream, peer: str, head: bytes, protocol: Protocol, refusal: Refusal | None = None
    ) -> None:
        """Serve one connection with the 0-9-1 front end (0-9 and 0-8 as dialects)."""
        assert self.broker is not None and protocol.dialect is not None
        tls_identity = _tls_identity(stream)
        sasl = self.config.sasl
        # the [sasl] mechanisms apply to 0-9-1 too: AMQPLAIN is 0-9-1's PLAIN, and guest/guest
        # (over either) is its anonymous login
        passwords = "PLAIN" in sasl.mechanisms
        external = tls_identity is not None and "EXTERNAL" in sasl.mechanisms
        mechanisms = (("PLAIN", "AMQPLAIN") if passwords or sasl.allow_anonymous else ()) + (
            ("EXTERNAL",) if external else ()
        )
        if not mechanisms:
            log.info("refusing 0-9-1 connection from %s: no [sasl] mechanism it can use", peer)
            await anyio.aclose_forcefully(stream)
            return
        conn = BrokerConnection(
            "server",
            dialect=protocol.dialect,
            mechanisms=mechanisms,
            handshake_timeout=self.config.limits.handshake_timeout,
            server_properties={
                "product": "amqp10",
                "cluster_name": self.config.container_id,
                "capabilities": CAPABILITIES,
            },
        )
        handler = Amqp091Handler(
            self.broker,
            conn,
            users=self._users if passwords else None,
            allow_anonymous=sasl.allow_anonymous,
            tls_identity=tls_identity,
        )
        handler.refusal = None if refusal is None else refusal.reason
        held = HeldOutput(conn)  # [security]: a login's outcome waits out the back-off
        login = _Login(self.guard, held, source_of(peer), conn.extend_handshake)
        handler.login_hook = login
        handler.handle(conn.receive_data(head))
        # while paused (publishing blocked) the driver still reads now and then: heartbeats
        driver: Driver[Any]
        if DirectDriver.usable(stream):  # plain TCP: engine fed from the transport's callbacks
            driver = DirectDriver(
                stream, held, handler.handle, peer=peer, pause_limit=5.0, on_read=_quick_acker(stream)
            )
        else:
            driver = Driver(_Replay(stream, quick_ack=True), held, handler.handle, peer=peer, pause_limit=5.0)
        handler.wake = driver.flush_soon
        handler.pause = driver.pause_reading
        handler.resume = driver.resume_reading

        def force_close(reason: str | None) -> None:
            text = reason or "broker forced connection closure"
            handler.close(ReplyCode.CONNECTION_FORCED, f"CONNECTION_FORCED - {text}"[:255])

        log.debug("0-9-1 (%s) connection from %s", protocol.value, peer)
        try:
            with self._registered(_Client(driver, handler, peer, force_close, f"AMQP {protocol.value}")):
                await driver.run()
        finally:
            login.ended()

    async def _serve_amqp1(self, stream: ByteStream, peer: str, head: bytes, refusal: Refusal | None = None) -> None:
        """Serve one connection with the AMQP 1.0 front end (SASL, engine, handler);
        ``head``: the protocol header, already read.

        With a (soft) ``refusal``, the client may log in and is then refused its open
        with amqp:resource-limit-exceeded."""
        assert self.broker is not None
        cfg = self.config
        limits = cfg.limits
        tls_identity = _tls_identity(stream)
        mechanisms = [m for m in cfg.sasl.mechanisms if m != "EXTERNAL" or tls_identity]
        if self._users is None:
            mechanisms = [m for m in mechanisms if m in ("ANONYMOUS", "EXTERNAL")]
        if not cfg.sasl.allow_anonymous:
            mechanisms = [m for m in mechanisms if m != "ANONYMOUS"]
        claims = cfg.servicebus.enabled  # anonymity means tokens on $cbs (see amqp1/servicebus)
        if claims:
            mechanisms += [m for m in ("MSSBCBS", "ANONYMOUS") if m not in mechanisms]
        sasl = SaslServer(
            mechanisms,
            self._users,
            tls_identity=tls_identity,
            require=not cfg.sasl.allow_anonymous,
            handshake_timeout=limits.handshake_timeout,
        )
        conn = SaslConnection.server(
            sasl,
            cfg.container_id,
            max_frame_size=limits.max_frame_size,
            idle_timeout=limits.idle_timeout,
            channel_max=max(limits.max_sessions_per_connection - 1, 0),
        )
        handler = ConnectionHandler(self.broker, conn.connection)
        handler.refusal = None if refusal is None else refusal.reason
        if claims:  # until a login names a user (also without SASL): tokens on $cbs
            handler.use_claims(cfg.servicebus)
        held = HeldOutput(conn)  # [security]: a login's outcome waits out the back-off
        addr = source_of(peer)
        login = _Login(self.guard, held, addr)

        sasl_done = False

        def on_events(events: list[Any]) -> None:
            nonlocal sasl_done
            if sasl_done:  # no more SASL events: nothing to look at per event
                handler.handle(events)
                return
            for e in events:
                if isinstance(e, SaslSkipped):
                    sasl_done = True
                elif isinstance(e, SaslCompleted):
                    sasl_done = True
                    handler.user = e.identity
                    if e.identity is not None:
                        handler.use_claims(None)  # a user: permissions, not tokens
                    log.info("%s authenticated as %s with %s", peer, e.identity or "anonymous", e.mechanism)
                    # -- [security] hook: back-off and the per-user limit ------------------
                    over = login.succeeded(e.identity)
                    if over is not None and handler.refusal is None:
                        handler.refusal = over
                elif isinstance(e, SaslFailed) and e.outcome is SaslCode.AUTH:
                    login.failed(e.username, e.reason)  # credentials that did not check out
                elif isinstance(e, SaslFailed):  # a broken or silent peer, not a guess
                    self.guard.log_refusal(addr, "sasl", f"{peer} failed SASL: {e.reason}")
            handler.handle(events)

        driver: Driver[Any]
        direct = DirectDriver.usable(stream)  # plain TCP: engine fed from the transport's callbacks
        if direct:
            driver = DirectDriver(stream, held, on_events, peer=peer)
        else:
            driver = Driver(_Replay(stream, head), held, on_events, peer=peer)
        handler.wake = driver.flush_soon
        if direct:  # the header read before the driver: the engine's first input
            on_events(held.receive_data(head))
        forced = Error(condition=ErrorCondition.CONNECTION_FORCED, description="the broker is shutting down")

        def force_close(reason: str | None) -> None:
            if conn.connection.state not in (ConnectionState.START, ConnectionState.END):
                why = forced if reason is None else Error(condition=ErrorCondition.CONNECTION_FORCED, description=reason)
                with contextlib.suppress(Exception):  # already closing: nothing more to say
                    conn.connection.close(why)
                handler.stop_deliveries()

        log.debug("connection from %s", peer)

        async def handshake_watch() -> None:
            await anyio.sleep(limits.handshake_timeout)
            if held.held_for:  # the back-off is not the client's delay
                await anyio.sleep(held.held_for)
            if conn.connection.remote_open is None:
                log.info("%s said nothing useful within %gs: closing", peer, limits.handshake_timeout)
                driver.abort()

        try:
            with self._registered(_Client(driver, handler, peer, force_close, "AMQP 1.0")):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(handshake_watch)
                    await driver.run()
                    tg.cancel_scope.cancel()
        finally:
            login.ended()


def _tls_identity(stream: ByteStream) -> str | None:
    """The subject of a verified TLS client certificate, for SASL EXTERNAL."""
    from anyio.streams.tls import TLSAttribute

    try:
        cert = stream.extra(TLSAttribute.peer_certificate)
    except Exception:
        return None
    if not cert:
        return None
    parts = []
    subject: Any = cert.get("subject", ())  # typeshed's _PeerCertRetDictType is loose here
    for rdn in subject:
        for key, value in rdn:
            short = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C"}.get(key, key)
            parts.append(f"{short}={value}")
    return ",".join(parts) or None
