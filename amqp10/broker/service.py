"""The broker on the network: listeners, SASL, one driver per connection, the store.

:class:`BrokerService` ties :class:`~amqp10.broker.core.Broker` (nodes, no I/O)
and its protocol front ends (:mod:`amqp10.broker.amqp1`) to sockets through the shared :class:`~amqp10.io.driver.Driver`. Durable
messages go through a :class:`~amqp10.broker.core.store.GroupCommitter`; a producer
is told ``accepted`` only after the commit that holds its message.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import anyio
from anyio.abc import ByteStream, TaskStatus

from ..io.driver import Driver, Signal
from ..io.net import Listener
from ..io.tls import server_context
from ..sasl.connection import SaslConnection
from ..sasl.events import SaslCompleted, SaslFailed
from ..sasl.layer import SaslServer
from ..transport import ConnectionState
from ..types import Error, ErrorCondition, SaslCode
from .amqp1 import ConnectionHandler
from .config import BrokerConfig
from .core import Broker
from .core.store import GroupCommitter, Store
from .guard import ConnectionGuard, HeldOutput, Refusal, source_of
from .http import broker_routes, start_http
from .users import load_access

__all__ = ["BrokerService"]

log = logging.getLogger("amqp10.broker")

TICK_SECONDS = 1.0


class _Client:
    """One accepted connection: its engine, driver and handler."""

    def __init__(self, conn: SaslConnection, driver: Driver[Any], handler: ConnectionHandler, peer: str) -> None:
        self.conn = conn
        self.driver = driver
        self.handler = handler
        self.peer = peer


class BrokerService:
    """Runs the broker until cancelled; ``ports`` holds the ports actually bound."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.store: Store | None = None
        self.committer: GroupCommitter | None = None
        self.broker: Broker | None = None
        self.listeners: list[Listener] = []
        self.clients: set[_Client] = set()
        self.recovered = 0
        self._users: Any = None
        self._accepting = True
        self._conns_scope: anyio.CancelScope | None = None
        self.http: Listener | None = None  # [http]: WebSockets and health (see .http)
        self.guard = ConnectionGuard(config.security)  # [security]: every front end asks it

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

    # -- end of [http] hooks ------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[BrokerService] = anyio.TASK_STATUS_IGNORED) -> None:
        """Open the store, recover, listen; on cancellation shut down gracefully."""
        cfg = self.config
        self._users, permissions = load_access(cfg.sasl)
        self.store = Store(cfg.store.path)
        self.committer = GroupCommitter(
            self.store, interval=cfg.store.commit_interval_ms / 1000, max_batch=cfg.store.max_batch
        )
        self.broker = Broker(cfg, journal=self.committer, now=time.time, permissions=permissions)
        started = time.monotonic()
        self.recovered = self.broker.recover(self.store)
        log.info(
            "recovered %d messages in %d nodes from %s in %.2fs",
            self.recovered,
            len(self.broker.nodes),
            cfg.store.path,
            time.monotonic() - started,
        )
        try:
            await self._run_tasks(task_status)
        finally:
            # after the task group: the committer has stopped, the connections are gone
            with anyio.CancelScope(shield=True):
                await self._close_store()

    async def _run_tasks(self, task_status: TaskStatus[BrokerService]) -> None:
        cfg = self.config
        assert self.committer is not None
        async with anyio.create_task_group() as tg:
            conns = await tg.start(self._host_connections)
            try:
                tg.start_soon(self.committer.run)
                if self.broker is not None and self.broker.recovery.enabled:
                    tg.start_soon(self._expire_suspended_links)
                tg.start_soon(self._tick)
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
                    routes = broker_routes(amqp=self._handle, not_ready=self.not_ready)
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
        now = self.broker.now
        changed = Signal()
        recovery.on_change = changed.fire
        while True:
            deadline = recovery.next_deadline()
            delay = math.inf if deadline is None else max(deadline - now(), 0.0)
            with anyio.move_on_after(delay):
                await changed.wait()
            recovery.expire_due()

    async def _tick(self) -> None:
        """The broker's time-driven work (unused queues expiring), once a second."""
        assert self.broker is not None
        while True:
            await anyio.sleep(TICK_SECONDS)
            self.broker.tick()

    async def _serve(self, listener: Listener, tg: Any) -> None:
        await listener.serve(self._handle, tg, handshake_timeout=self.config.limits.handshake_timeout)

    async def _shutdown(self) -> None:
        """Stop accepting, close every connection with connection:forced (see ``_close_store``)."""
        self._accepting = False
        for lst in [*self.listeners, *([self.http] if self.http else [])]:
            with anyio.move_on_after(1):
                await lst.aclose()
        forced = Error(condition=ErrorCondition.CONNECTION_FORCED, description="the broker is shutting down")
        for c in list(self.clients):
            try:
                if c.conn.connection.state not in (ConnectionState.START, ConnectionState.END):
                    c.conn.connection.close(forced)
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
        if self.committer is not None:
            with anyio.move_on_after(10):
                await self.committer._commit_pending()
        if self.store is not None:
            self.store.close()
        log.info("broker stopped")

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
            # The one place a connection gets its protocol front end. Only AMQP 1.0 today;
            # 0-9-1 will read the 8-byte protocol header here and choose by it (and call
            # self.guard's login_failed/login_ok/opened/closed as the 1.0 path does).
            await self._serve_amqp1(stream, peer, refusal)
        finally:
            if refusal is None:
                self.guard.release(addr)

    async def _serve_amqp1(self, stream: ByteStream, peer: str, refusal: Refusal | None = None) -> None:
        """Serve one connection with the AMQP 1.0 front end (SASL, engine, handler).

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
        held = HeldOutput(conn)  # [security]: a login's outcome waits out the back-off
        addr = source_of(peer)
        counted: list[str | None] = []  # the user the guard counted this connection for

        def on_events(events: list[Any]) -> None:
            for e in events:
                if isinstance(e, SaslCompleted):
                    handler.user = e.identity
                    log.info("%s authenticated as %s with %s", peer, e.identity or "anonymous", e.mechanism)
                    # -- [security] hook: back-off and the per-user limit ------------------
                    held.hold(anyio.current_time(), self.guard.login_ok(addr, e.identity))
                    over = self.guard.opened(e.identity, addr)
                    if over is None:
                        counted.append(e.identity)
                    elif handler.refusal is None:
                        handler.refusal = over.reason
                elif isinstance(e, SaslFailed) and e.outcome is SaslCode.AUTH:
                    # credentials that did not check out: a guess, so back off
                    delay = self.guard.login_failed(addr, e.username, e.reason)
                    held.hold(anyio.current_time(), delay)
                elif isinstance(e, SaslFailed):  # a broken or silent peer, not a guess
                    self.guard.log_refusal(addr, "sasl", f"{peer} failed SASL: {e.reason}")
            handler.handle(events)

        driver = Driver(stream, held, on_events, peer=peer)
        handler.wake = driver.flush_soon
        client = _Client(conn, driver, handler, peer)
        self.clients.add(client)
        log.debug("connection from %s", peer)

        async def handshake_watch() -> None:
            await anyio.sleep(limits.handshake_timeout)
            if held.held_for:  # the back-off is not the client's delay
                await anyio.sleep(held.held_for)
            if conn.connection.remote_open is None:
                log.info("%s said nothing useful within %gs: closing", peer, limits.handshake_timeout)
                driver.abort()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(handshake_watch)
                await driver.run()
                tg.cancel_scope.cancel()
        finally:
            handler.cleanup()
            for user in counted:
                self.guard.closed(user)
            self.clients.discard(client)
            log.debug("connection from %s ended", peer)


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
