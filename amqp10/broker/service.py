"""The broker on the network: listeners, the store, the broker's lifecycle.

:class:`BrokerService` ties :class:`~amqp10.broker.core.Broker` (nodes, no I/O) to
sockets: it accepts a connection, reads its protocol header and hands it to the front
end that takes that header (:mod:`.frontend`, registered in :mod:`.frontends`), which
serves it to its end. The service knows no protocol's events. Durable messages go
through a :class:`~amqp10.broker.core.committer.GroupCommitter`; a producer is told
``accepted`` only after the commit that holds its message.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import signal
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import ByteStream, SocketStream, TaskGroup, TaskStatus

from ..collector import gc_paused
from ..io.driver import Signal
from ..io.net import Listener
from ..io.tls import server_context
from .alarms import ResourceAlarms
from .config import BrokerConfig
from .console import Console, console_routes
from .core import Broker
from .core.committer import GroupCommitter
from .core.store import SqlStore, Store
from .frontend import HEADER_SIZE, FrontEnd, ServeContext, ServedConnection, choose
from .frontends import FRONT_ENDS
from .guard import ConnectionGuard, source_of
from .http import broker_routes, start_http
from .management import Management
from .metrics import EndedConnections, MetricsSources, TextWriter, exposition, metrics_registry
from .oauth import TokenValidator
from .rabbitmq_api import rabbitmq_api_routes
from .topology import LiveDefinitions
from .users import UsersFile, load_access

if TYPE_CHECKING:
    from .core.store_postgres import DatabaseLock
    from .workers.handover import Handover, MovedIn

__all__ = ["BrokerService", "listen_points", "serve_until_signalled"]

log = logging.getLogger("amqp10.broker")

TICK_SECONDS = 1.0
DRAIN_SECONDS = 5.0
"""How long a shutdown waits for the store to commit what clients sent before it (their
outcomes go out before the connections are closed)."""


def listen_points(config: BrokerConfig) -> list[tuple[str, str, int]]:
    """``(name, host, port)`` of every socket ``config`` listens on: its AMQP listeners
    (``amqp0``, ``amqp1``, ...), then ``http`` and ``rabbitmq_api`` where configured."""
    points = [(f"amqp{i}", spec.host, spec.port) for i, spec in enumerate(config.listeners)]
    http = config.http
    if http.enabled:
        points.append(("http", http.host, config.http_port))
        if http.rabbitmq_api_port is not None:
            points.append(("rabbitmq_api", http.host, http.rabbitmq_api_port))
    return points


async def serve_until_signalled(service: BrokerService) -> None:
    """Run ``service`` until SIGINT or SIGTERM, then shut it down gracefully."""
    async with anyio.create_task_group() as tg:
        # signals first: a standby broker ([store] postgresql) waits in run() for the lock
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            tg.start_soon(service.run)
            async for sig in signals:
                log.info("received %s: shutting down", signal.Signals(sig).name)
                tg.cancel_scope.cancel()
                break


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

    def __init__(
        self,
        config: BrokerConfig,
        front_ends: tuple[FrontEnd, ...] = FRONT_ENDS,
        *,
        worker: int | None = None,
        sockets: Mapping[str, Sequence[socket.socket]] | None = None,
    ) -> None:
        self.config = config
        self.front_ends = front_ends
        """The protocols served, asked in order which takes a connection's header."""
        self.worker = worker
        """Which worker process this is (``workers`` > 1, :mod:`.workers.supervisor`); None: the only one."""
        self.sockets = sockets
        """Sockets bound already, by :func:`listen_points` name (a worker's, from its
        supervisor); None: the service binds its own."""
        self.store: SqlStore | None = None
        self.lock: DatabaseLock | None = None  # [store] postgresql: the lock of an active/standby pair
        self.committer: GroupCommitter | None = None
        self.broker: Broker | None = None
        self.alarms: ResourceAlarms | None = None
        """The memory and disk alarms (made with the broker)."""
        self.listeners: list[Listener] = []
        self.clients: set[ServedConnection] = set()
        self.recovered = 0
        self._users: Any = None
        self._tokens: TokenValidator | None = None
        """Checks OAuth 2 tokens ([oauth2]), once the broker (its clock) exists."""
        self._accepting = True
        self._conns_scope: anyio.CancelScope | None = None
        self.http: Listener | None = None  # [http]: WebSockets and health (see .http)
        self.guard = ConnectionGuard(config.security)  # [security]: every front end asks it
        self._handover: Handover | None = None
        """``move_connections`` at ``workers`` > 1: how a connection moves to the worker that
        should serve it (its node's owner, or with ``publishers_apart`` the one after)."""
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
            tokens=self._tokens,
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
            self._tokens = TokenValidator(cfg.oauth2, self.broker.now) if cfg.oauth2.enabled else None
            self.alarms = ResourceAlarms(
                self.broker, cfg.limits, cfg.store.path.parent if cfg.store.backend == "sqlite" else None
            )
            started = time.monotonic()
            with gc_paused():
                self.recovered = self.broker.recover(store)
            for fe in self.front_ends:
                fe.prepare(self.broker, cfg)
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
        if self.worker is not None:  # a worker: its parent holds the lock (workers/supervisor.py)
            return await anyio.to_thread.run_sync(PostgresStore, cfg.dsn)
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
                whole = None
                if self.broker is not None and self.worker is not None and cfg.worker_count() > 1:
                    # workers > 1: the internal links to the other workers, up before clients come
                    from .workers.peers import Peers
                    from .workers.whole import WholeBroker

                    directory = cfg.store.path.parent / "workers"
                    peers = Peers(self.broker, cfg.worker_count(), self.worker, directory)
                    await tg.start(peers.run)
                    # the metadata's one order: caught up before clients come (workers/metadata.py)
                    from .workers.metadata import SharedMetadata
                    from .workers.shared_database import applied_marks

                    # a file, or (PostgreSQL) a table beside the log: connected off the event loop
                    marks = await anyio.to_thread.run_sync(applied_marks, cfg, directory)
                    shared = SharedMetadata(self.broker, self.worker, directory, peers.placement.ownership, marks)
                    await tg.start(shared.run)
                    # management, limits and alarms of the whole broker
                    whole = WholeBroker(Management.of(self.broker), peers.placement.ownership, directory)
                    await tg.start(whole.run)
                    whole.count_with(self.guard, self.alarms, peers.links)
                    # a link lost on one worker and resumed on another (workers/resumption.py)
                    from .workers.resumption import LinksElsewhere

                    LinksElsewhere(self.broker, whole.point, peers).install(whole.ops)
                    peers.install(whole.ops)  # (what crosses the internal links unsettled)
                    # what a front end keeps on one worker, named on another (0-10's dtx branches)
                    from .workers.others import OtherWorkers

                    OtherWorkers(self.broker, whole.point).install(whole.ops)
                    if cfg.move_connections:  # a connection moved to the worker of its node
                        from .workers.handover import Handover, HandoverServer

                        await tg.start(HandoverServer(directory, self.worker, partial(self._take_over, conns)).run)
                        self._handover = Handover(directory, peers.placement.ownership, cfg.publishers_apart)
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
                    lst = await self._listen(f"amqp{len(self.listeners)}", spec.host, spec.port, ctx)
                    self.listeners.append(lst)
                    log.info("listening on %s%s", lst.address, " (TLS)" if ctx else "")
                    tg.start_soon(self._serve, lst, conns)
                if cfg.http.enabled:  # [http]: an upgraded WebSocket goes to self._handle
                    metrics: Callable[[], Awaitable[bytes]] | None = None
                    if cfg.http.metrics:
                        registry = metrics_registry(self.metrics_sources())
                        writer = TextWriter()

                        async def scrape() -> bytes:
                            return await exposition(registry, writer)

                        metrics = scrape if whole is None else whole.serve_metrics(scrape)
                    routes = broker_routes(amqp=self._handle, not_ready=self.not_ready, metrics=metrics)
                    console = self._console()
                    if cfg.http.console:
                        routes.update(console_routes(console))
                    if cfg.http.rabbitmq_api:  # RabbitMQ's HTTP API, logging in by the console's rules
                        routes.update(rabbitmq_api_routes(console.rabbit))
                    self.http = await start_http(cfg, routes, tg, conns, listen=self._listen)
                task_status.started(self)
                await anyio.sleep_forever()
            finally:
                try:
                    with anyio.CancelScope(shield=True):
                        await self._shutdown()
                finally:
                    assert self._conns_scope is not None
                    self._conns_scope.cancel()

    async def _listen(self, name: str, host: str, port: int, ctx: ssl.SSLContext | None) -> Listener:
        """The listener ``name`` (:func:`listen_points`): bound here, or over the sockets given."""
        if self.sockets is None:
            return await Listener.bind(host, port, ssl_context=ctx)
        return await Listener.adopt(self.sockets[name], host, ssl_context=ctx)

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
                c.tick()
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

    async def _take_over(self, conns: TaskGroup, sock: socket.socket, moved: MovedIn) -> None:
        """Serve a connection another worker hands over (:mod:`.workers.handover`); returns
        once ``moved`` says whether this worker took it (its replay matched what the other
        worker wrote)."""
        stream = moved.stream = await SocketStream.from_socket(sock)

        async def serve() -> None:
            try:
                await self._handle(stream, moved.peer, moved)
            finally:
                moved.decide(False)

        conns.start_soon(serve)
        await moved.decided.wait()

    async def _handle(self, stream: ByteStream, peer: str, moved: MovedIn | None = None) -> None:
        """Serve one accepted connection (``moved``: one another worker handed over)."""
        assert self.broker is not None
        limits = self.config.limits
        if not self._accepting or len(self.clients) + self.guard.counted_elsewhere() >= limits.max_connections:
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
            head = await _read_header(stream, limits.handshake_timeout) if moved is None else moved.inbound[:HEADER_SIZE]
            if len(head) < HEADER_SIZE:
                await anyio.aclose_forcefully(stream)
                return
            chosen = choose(self.front_ends, head)
            if isinstance(chosen, bytes):
                log.info("%s sent protocol header %r: answering %r and closing", peer, head, chosen)
                try:
                    with anyio.move_on_after(1):
                        await stream.send(chosen)
                except Exception:  # the peer is gone already
                    pass
                await anyio.aclose_forcefully(stream)
                return
            ctx = ServeContext(
                broker=self.broker,
                config=self.config,
                users=self._users,
                tokens=self._tokens,
                guard=self.guard,
                peer=peer,
                header=head,
                refusal=None if refusal is None else refusal.reason,
                registered=self._registered,
                worker=self.worker,
                handover=self._handover,
                moved=moved,
            )
            await chosen.serve(stream, ctx)
        finally:
            if refusal is None:
                self.guard.release(addr)

    @contextlib.contextmanager
    def _registered(self, client: ServedConnection) -> Iterator[None]:
        """Count ``client`` among the broker's connections while it runs (a shutdown
        force-closes it); when it ends, its handler cleans up and it is forgotten."""
        assert self.broker is not None
        management = Management.of(self.broker)
        client.name = client.peer
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
