"""The AMQP 1.0 front end as the service sees it: which headers it takes, its SASL
choices, and one connection served from its header to its end."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from functools import partial
from typing import Any, Final

import anyio
from anyio.abc import ByteStream

from ...io.direct import DirectDriver
from ...io.driver import Driver
from ...io.streams import ReplayStream, tls_identity
from ...sasl.connection import SaslConnection
from ...sasl.events import SaslCompleted, SaslFailed, SaslSkipped
from ...sasl.layer import SaslServer
from ...transport import Connection, ConnectionState, LinkAttached, Receiver
from ...transport.framing import AMQP_HEADER, SASL_HEADER, TLS_HEADER
from ...types import Error, ErrorCondition, SaslCode, symbol
from ..config import BrokerConfig
from ..core import CONSUMER_CLAIMS, Broker, ConsumerClaim
from ..frontend import ServeContext, ServedConnection
from ..guard import HeldOutput, Login, source_of
from ..oauth import TokenLogin
from ..workers.handover import Handover, Mover
from .handler import ConnectionHandler
from .servicebus.entities import declare_entities
from .servicebus.sessions import owner_claim
from .topics import (
    SUBSCRIPTION_QUESTION,
    answer_subscription_question,
    wildcards_of,
)

__all__ = ["WORKER_PROPERTY", "Amqp1FrontEnd", "replay_failed", "sasl_mechanisms", "without_empty_frames"]

WORKER_PROPERTY: Final = symbol("amqp10:worker")
"""The key of the broker's open properties that says which worker process serves the
connection (``workers`` > 1; absent with one process)."""

log = logging.getLogger("amqp10.broker")

_HEADERS: Final = frozenset({AMQP_HEADER, SASL_HEADER, TLS_HEADER})


def sasl_mechanisms(config: BrokerConfig, *, has_users: bool, tls_identity: str | None) -> list[str]:
    """The SASL mechanisms a 1.0 connection is offered: the ``[sasl]`` ones it can use
    (EXTERNAL with a client certificate, PLAIN and SCRAM with a users file, PLAIN with
    OAuth 2 tokens, ANONYMOUS if allowed), and the claims-based ones with ``[servicebus]``."""
    sasl = config.sasl
    mechanisms = [m for m in sasl.mechanisms if m != "EXTERNAL" or tls_identity]
    if not has_users:  # PLAIN still takes OAuth 2 tokens as passwords ([oauth2])
        tokens = config.oauth2.enabled
        mechanisms = [m for m in mechanisms if m in ("ANONYMOUS", "EXTERNAL") or (m == "PLAIN" and tokens)]
    if not sasl.allow_anonymous:
        mechanisms = [m for m in mechanisms if m != "ANONYMOUS"]
    if config.servicebus.enabled:  # anonymity means tokens on $cbs (see amqp1/servicebus)
        mechanisms += [m for m in ("MSSBCBS", "ANONYMOUS") if m not in mechanisms]
    return mechanisms


class Amqp1FrontEnd:
    """AMQP 1.0: plain, SASL (Part 5) and TLS protocol headers."""

    name = "AMQP 1.0"

    def accepts(self, header: bytes) -> bool:
        return header in _HEADERS

    def counter_offer(self, header: bytes) -> bytes | None:
        # the 1.0 family (protocol id 0, 2 or 3, major 1) at another version: ours, same id
        if header[:4] == b"AMQP" and header[4] in (0, 2, 3) and header[5] == 1:
            return header[:5] + b"\x01\x00\x00"
        return None

    def prepare(self, broker: Broker, config: BrokerConfig) -> None:
        declare_entities(broker.default, config.servicebus)
        if config.servicebus.enabled:  # (its session receivers on another worker's queue)
            claims: dict[str, ConsumerClaim] = broker.shared(CONSUMER_CLAIMS, dict)
            claims["servicebus.sessions"] = owner_claim(broker)
        for vhost in list(broker.vhosts.values()):  # recovered durable wildcard subscriptions collect from now on
            if vhost.pattern_subscriptions:
                wildcards_of(vhost)
        # (with several workers: a durable subscription kept here, looked up on another)
        broker.questions[SUBSCRIPTION_QUESTION] = partial(answer_subscription_question, broker)

    async def serve(self, stream: ByteStream, ctx: ServeContext) -> None:
        """SASL, the engine and the handler over one connection. With a (soft)
        ``ctx.refusal``, the client may log in and is then refused its open with
        amqp:resource-limit-exceeded."""
        cfg = ctx.config
        limits = cfg.limits
        peer = ctx.peer
        identity = tls_identity(stream)
        guest = ctx.users is None and cfg.sasl.allow_anonymous  # PLAIN is there for tokens only
        tokens = None if ctx.tokens is None else TokenLogin(ctx.tokens, guest=guest)
        sasl = SaslServer(
            sasl_mechanisms(cfg, has_users=ctx.users is not None, tls_identity=identity),
            ctx.credentials(),
            password_check=tokens,
            tls_identity=identity,
            require=not cfg.sasl.allow_anonymous,
            handshake_timeout=limits.handshake_timeout,
        )
        conn = SaslConnection.server(
            sasl,
            cfg.container_id,
            max_frame_size=limits.max_frame_size,
            idle_timeout=limits.idle_timeout,
            channel_max=max(limits.max_sessions_per_connection - 1, 0),
            properties=None if ctx.worker is None else {WORKER_PROPERTY: ctx.shown_worker},
        )
        held = HeldOutput(conn)  # [security]: a login's outcome waits out the back-off
        driver: Driver[Any]
        direct = DirectDriver.usable(stream)  # plain TCP: engine fed from the transport's callbacks
        recording = ctx.recording(stream, held)  # movable: recorded until its first attach
        engine = held if recording is None else recording
        with ctx.logging_in(held) as login:
            # the driver first (its events reach the handler a batch at a time), so the
            # handler's wake, called per message, is the driver's own method
            on_events = _Authenticated(login, ctx, source_of(peer), tokens)
            if direct:
                driver = DirectDriver(stream, engine, on_events, peer=peer)
                on_events.unwrap = partial(_unwrap, driver, held, conn)
            else:
                driver = Driver(ReplayStream(stream, ctx.header), held, on_events, peer=peer)
            handler = on_events.handler = ConnectionHandler(
                ctx.broker, conn.connection, wake=driver.flush_soon, after_write=driver.after_write
            )
            handler.refusal = ctx.refusal
            handler.login_hook = login
            handler.tokens = ctx.tokens
            if cfg.servicebus.enabled:  # until a login names a user (also without SASL): tokens on $cbs
                handler.use_claims(cfg.servicebus)
            if recording is not None and ctx.handover is not None:
                worker_of = partial(_first_node, ctx.handover, handler)
                on_events.mover = Mover(ctx.handover, peer, recording, _is_attach, worker_of, handler.handle)
            rest = b""
            if ctx.moved is not None:  # all the other worker read (a plain socket): served here if it answers the same
                fail = partial(replay_failed, conn.connection, handler)
                replayed = ctx.replayed(held, on_events, _is_attach, handler.cleanup, compared=without_empty_frames, fail=fail)
                if replayed is None:
                    return
                rest = replayed
            elif direct:  # the header read before the driver: the engine's first input
                on_events(engine.receive_data(ctx.header))
            forced = Error(condition=ErrorCondition.CONNECTION_FORCED, description="the broker is shutting down")

            def force_close(reason: str | None) -> None:
                why = forced if reason is None else Error(condition=ErrorCondition.CONNECTION_FORCED, description=reason)
                _close(conn.connection, handler, why)

            async def handshake_watch() -> None:
                await anyio.sleep(limits.handshake_timeout)
                if held.held_for:  # the back-off is not the client's delay
                    await anyio.sleep(held.held_for)
                if conn.connection.remote_open is None:
                    log.info("%s said nothing useful within %gs: closing", peer, limits.handshake_timeout)
                    driver.abort()

            log.debug("connection from %s", peer)
            served = ServedConnection(
                driver,
                handler,
                self.name,
                peer,
                force_close,
                tick=handler.tick,
                container_id=lambda: handler.remote_container_id,
            )
            await ctx.run(served, mover=on_events.mover, rest=rest, beside=handshake_watch)


def _close(connection: Connection, handler: ConnectionHandler, error: Error) -> None:
    """Close ``connection`` with ``error`` (unless not open yet, or ended) and stop its deliveries."""
    if connection.state not in (ConnectionState.START, ConnectionState.END):
        with contextlib.suppress(Exception):  # already closing: nothing more to say
            connection.close(error)
        handler.stop_deliveries()


def without_empty_frames(output: bytes) -> bytes:
    """A connection's output as its replay must reproduce it (:func:`~.workers.handover.replay`'s
    ``compared``): its protocol headers and frames but the empty ones. An empty frame (a
    heartbeat, 1.0 §2.4.5) is written on the engine's own timer (a client with a short
    idle timeout, or a slow one, gets one before its first attach): the worker that takes
    the connection writes its own on its own timer, not the first worker's again. A
    header is 8 bytes beginning ``AMQP``; a frame, as many as its first 4 bytes say (a
    frame cut short at the end is kept as it is)."""
    kept: list[bytes] = []
    at, end = 0, len(output)
    while at < end:
        if output.startswith(b"AMQP", at):
            size = 8
        else:
            size = int.from_bytes(output[at : at + 4], "big")
            if size == _EMPTY_FRAME:
                at += size
                continue
            if size < _EMPTY_FRAME:  # (not a frame: the rest as it is)
                size = end - at
        kept.append(output[at : at + size])
        at += size
    return b"".join(kept)


_EMPTY_FRAME = 8
"""The size of a frame of its header only."""


def replay_failed(connection: Connection, handler: ConnectionHandler, why: str) -> None:
    """Close a connection moved here whose replay raised once it was taken
    (:func:`~..workers.handover.replay`'s ``fail``): ``amqp:internal-error``, ``why`` its description."""
    _close(connection, handler, Error(condition=ErrorCondition.INTERNAL_ERROR, description=why))


def _unwrap(driver: Driver[Any], held: HeldOutput[Any], conn: SaslConnection) -> bool:
    """Once SASL is over and no login's answer is held back, have the driver call the
    engine itself, not through the guard's and SASL's layers (five calls each way per
    read: a tenth of the broker's calls for a lone message). No hold comes after SASL on
    1.0 (a login's outcome is the only one). False while the handover's recording is
    still in front, a hold lasts or SASL's last bytes are not taken: tried again later."""
    if driver.protocol is not held or held.held:
        return False
    engine = conn.bypass()
    if engine is None:
        return False
    driver.protocol = engine
    return True


def _is_attach(e: Any) -> bool:
    """A 1.0 connection's move is decided at its first attach (:class:`Mover`)."""
    return type(e) is LinkAttached


def _first_node(handover: Handover, handler: ConnectionHandler, e: LinkAttached) -> int | None:
    """The worker that should serve a connection by the queue its first link names, if
    another one (None: this one, or not a queue, or a Service Bus connection): the queue's
    owner, or with ``publishers_apart`` for a link that publishes to it, the worker after."""
    if handler.gate is not None:
        return None
    name = handler.nodes.queue_named(e.link)
    if name is None:
        return None
    return handover.worker_for(handler.vhost.name, name, publishes=isinstance(e.link, Receiver))


class _Authenticated:
    """The driver's event callback: SASL's outcome read until it is known (the user
    named, the login's [security] hook told), then every event to the handler."""

    handler: ConnectionHandler
    """The connection's handler (made once the driver that feeds this exists)."""
    mover: Mover | None = None
    """Watches for the first attach while the connection may move to another worker."""
    unwrap: Callable[[], bool] | None = None
    """Tried after SASL, each batch until it says done: see :func:`_unwrap`."""

    def __init__(self, login: Login, ctx: ServeContext, addr: str, tokens: TokenLogin | None) -> None:
        self.login = login
        self.ctx = ctx
        self.addr = addr
        self.tokens = tokens
        self.done = False

    def __call__(self, events: list[Any]) -> None:
        if not self.done:
            for e in events:
                self._sasl(e)
        elif self.unwrap is not None and self.unwrap():
            self.unwrap = None
        mover = self.mover
        if mover is not None and mover.watching:
            events = mover.watch(events)
        self.handler.handle(events)

    def _sasl(self, e: Any) -> None:
        handler = self.handler
        if isinstance(e, SaslSkipped):
            self.done = True
        elif isinstance(e, SaslCompleted):
            self.done = True
            if e.identity is not None:
                handler.use_claims(None)  # a user: permissions, not tokens
            log.info("%s authenticated as %s with %s", self.ctx.peer, e.identity or "anonymous", e.mechanism)
            if self.mover is not None and e.mechanism.startswith("SCRAM"):  # a server nonce: no replay
                self.mover.stop()
            grant = None if self.tokens is None else self.tokens.grant
            handler.logged_in(e.identity, grant)  # and the [security] hook: back-off, the per-user limit
        elif isinstance(e, SaslFailed) and e.outcome is SaslCode.AUTH:
            self.login.failed(e.username, e.reason)  # credentials that did not check out
        elif isinstance(e, SaslFailed):  # a broken or silent peer, not a guess
            self.ctx.guard.log_refusal(self.addr, "sasl", f"{self.ctx.peer} failed SASL: {e.reason}")
