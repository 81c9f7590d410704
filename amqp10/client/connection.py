"""The async client connection: ``async with await amqp10.connect(url) as conn``.

One :class:`Connection` class serves both ends: :func:`~amqp10.client.connect`
(:mod:`amqp10.client.opening`) makes an outgoing one, :mod:`amqp10.client.server` makes one per accepted socket. The
engine's events are handled synchronously in the driver's tasks
(:meth:`Connection._on_events`, a dispatch table by event type); the
application's coroutines only change the engine and wait on signals.

With a ``reconnect=`` policy (:mod:`amqp10.client.reconnect`) the same
:class:`Connection` object outlives its TCP connections: when one drops, the
driver task (:meth:`Connection._run`) dials again from the
:class:`ConnectOptions` it was made with, swaps in a new engine and driver,
and on the peer's open re-begins the sessions and re-attaches the links
(:meth:`Connection._restore`). Applications keep their ``Sender``/``Receiver``
objects; calls made meanwhile wait for the new connection.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any

import anyio

from .. import errors
from ..io.net import peer_name
from ..sasl import SaslConnection
from ..sasl.events import SaslCompleted, SaslFailed, SaslSkipped
from ..transport import (
    ConnectionClosed,
    ConnectionFailed,
    ConnectionOpened,
    ConnectionState,
    CreditAdded,
    DeliveryAborted,
    DeliveryReceived,
    DeliveryUpdated,
    DrainRequested,
    FlowReceived,
    IllegalStateError,
    LinkAttached,
    LinkDetached,
    LinkFailed,
    SessionBegun,
    SessionEnded,
    SessionFailed,
)
from ..transport import Session as EngineSession
from ..types import Error
from ._common import deadline
from .claims import ClaimsLayer
from .core import Outage
from .dial import ConnectOptions, ProtocolFactory, dial
from .link import Link
from .management import Management, open_management
from .receiver import Receiver
from .reconnect import (
    ConnectionLost,
    Reconnected,
    ReconnectEvent,
    ReconnectFailed,
    Schedule,
)
from .sender import Sender
from .sessions import Session

__all__ = ["Connection"]

log = logging.getLogger("amqp10.client")

STABLE_AFTER = 2.0
"""Seconds a re-made connection must stay up before a new drop starts a fresh backoff
schedule: a peer that accepts and drops at once is retried with growing delays,
and within the policy's bounds, not in a tight loop."""


class Connection(ClaimsLayer):
    """An open AMQP connection (outgoing from :func:`connect`, or accepted by a server).

    Use it as ``async with``: leaving the block closes the connection and stops
    its tasks. Open links with :meth:`open_sender` / :meth:`open_receiver`; they
    go on a default session unless given one from :meth:`session`. Links the
    peer attaches are accepted and handed out by :meth:`incoming_links`.

    Every wait is bounded: a ``timeout=None`` argument means the connection's
    ``timeout`` (``math.inf`` to wait forever).

    The class is built in layers, one module each, every one importing only the
    ones below: :class:`~amqp10.client.core.ConnectionCore` (state, signals,
    waits), :class:`~amqp10.client.sessions.Endpoints` (sessions and links),
    :class:`~amqp10.client.transactions.Transactions`,
    :class:`~amqp10.client.request.Requests`,
    :class:`~amqp10.client.claims.ClaimsLayer`, and here the lifecycle: running
    the driver, reconnecting, dispatching the engine's events.
    """

    def _init_layer(self) -> None:
        super()._init_layer()
        self._running = False
        # reconnecting (connect(..., reconnect=...)); see _run
        self._targets: tuple[ConnectOptions, ...] = ()
        self._target = 0  # index of the options in use
        self._factory: ProtocolFactory | None = None
        self._attempt_error: errors.AMQPError | None = None
        self._reconnect_scope: anyio.CancelScope | None = None
        self._restored: tuple[float, Schedule] | None = None  # when, and the schedule used

    # -- lifecycle ----------------------------------------------------------------------
    async def _run(self) -> None:
        """The driver task: runs until the connection ends.

        With a reconnect policy it goes on after a drop: it dials again (with
        backoff), swaps in the new engine and driver, and runs that one; the
        peer's open then restores the sessions and links (:meth:`_restore`).
        """
        self._running = True
        try:
            while True:
                await self._run_driver()
                if self._error is not None:
                    return
                outage = self._outage
                if outage is None:
                    if not self._lost(self._end_error()):
                        return
                elif outage.attempting:  # an attempt ended before the peer's open
                    err = self._attempt_error or self._end_error()
                    self._attempt_error = None
                    outage.schedule.last_error = err
                    log.info("reconnecting to %s failed: %s", self.peer, err)
                    if self._closing or not self._policy_retries(err):
                        self._give_up(None if self._closing else err)
                        return
                if not await self._redial():
                    return
        finally:
            if self._error is None:
                self._terminate(self._end_error())

    def _end_error(self) -> errors.AMQPError:
        """Why the current driver stopped, as the error the connection ends with."""
        err: errors.AMQPError | None = self._driver.error
        if err is None and self._engine.error is not None and not self._closing:
            err = errors.ConnectionError.from_error(
                f"connection to {self.peer} failed", self._engine.error
            )
        if err is None:
            how = "is closed" if self._closing else "was closed by the peer"
            err = errors.ConnectionClosed(f"connection to {self.peer} {how}")
        return err

    async def _run_driver(self) -> None:
        outage = self._outage
        if outage is None or not outage.attempting:
            await self._driver.run()
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._open_watchdog, outage.open_limit)
            await self._driver.run()
            tg.cancel_scope.cancel()

    async def _open_watchdog(self, limit: float) -> None:
        """Bound a reconnect attempt's handshake (the first connect has its own deadline)."""
        with anyio.move_on_after(limit):
            while self._outage is not None and self._error is None:
                await self._changed.wait()
            return
        if self._attempt_error is None:
            self._attempt_error = errors.TimeoutError(
                f"opening the connection to {self.peer} timed out after {limit:g}s"
            )
        self._driver.abort()

    def _policy_retries(self, err: errors.AMQPError) -> bool:
        return self._policy is not None and self._policy.retryable(err)

    def _lost(self, err: errors.AMQPError) -> bool:
        """The connection failed or was closed: reconnect (True) or end it (False)."""
        if self._error is not None:
            return False
        if self._outage is not None:
            # the handshake of a reconnect attempt failed: _run decides what next
            if self._attempt_error is None:
                self._attempt_error = err
            return True
        if self._closing or not self._opened or self._accepting or not self._policy_retries(err):
            self._terminate(err)
            return False
        self._begin_outage(err)
        return True

    def _emit(self, event: ReconnectEvent) -> None:
        hook = self._policy.on_event if self._policy is not None else None
        if hook is not None:
            try:
                hook(event)
            except Exception:
                log.exception("reconnect event handler failed on %r", event)

    def _begin_outage(self, err: errors.AMQPError) -> None:
        """Keep what can be restored on a new connection; end what cannot."""
        assert self._policy is not None
        self._holding = False
        now = anyio.current_time()
        restored = self._restored
        if restored is not None and now - restored[0] < STABLE_AFTER:
            schedule = restored[1]  # it dropped again at once: keep backing off
        else:
            schedule = Schedule(self._policy, len(self._targets), self._target, now)
        schedule.last_error = err
        self._outage = Outage(schedule=schedule, error=err, peer=self.peer, since=now)
        self._opened = False
        log.warning("connection to %s lost (%s): reconnecting", self.peer, err)
        self._emit(ConnectionLost(peer=self.peer, error=err))
        why = f"the connection to {self.peer} was lost ({err})"
        for session in list(self._sessions):
            if session.incoming or session._closing:
                session._fail(errors.SessionError(f"the session ended: {why}"))
                self._sessions.discard(session)
                continue
            for link in list(session._links):
                if link.incoming or link._closing or link._dynamic:
                    # the peer's links are the peer's to restore; a dynamic node
                    # (and its address) belonged to the lost connection
                    link._fail(errors.LinkError(f"the {link._what()} ended: {why}"))
                else:
                    link._sig.fire()
        self._served.clear()
        self._dynamic.clear()
        for pending in self._requests.values():
            pending.fail(
                errors.ConnectionError(
                    f"{why} while waiting for a response (the request may have been processed)"
                )
            )
        self._waiting_senders.clear()
        self._changed.fire()
        self._incoming_sig.fire()

    async def _redial(self) -> bool:
        """Dial the next target(s) until one connects (True) or the policy is spent (False).

        On success the new engine and driver are in place, with our open
        queued; the handshake runs when :meth:`_run` runs the driver.
        """
        outage = self._outage
        assert outage is not None and self._factory is not None
        schedule = outage.schedule
        with anyio.CancelScope() as scope:
            self._reconnect_scope = scope
            try:
                while not self._closing:
                    step = schedule.next(anyio.current_time())
                    if step is None:
                        break
                    delay, index = step
                    if delay:
                        await anyio.sleep(delay)
                    options = self._targets[index]
                    limit = min(options.timeout, schedule.remaining(anyio.current_time()))
                    limit = max(limit, 0.001)
                    try:
                        engine, protocol, stream = await dial(options, self._factory, limit)
                    except errors.AMQPError as exc:
                        schedule.last_error = exc
                        log.info(
                            "reconnect attempt %d to %s failed: %s",
                            schedule.attempts,
                            peer_name(options.url.host, options.url.port),
                            exc,
                        )
                        if not self._policy_retries(exc):
                            self._give_up(exc)
                            return False
                        continue
                    self._engine = engine
                    self._protocol = protocol
                    self.peer = peer_name(options.url.host, options.url.port)
                    self._driver = self._make_driver(stream)
                    self._target = index
                    self._attempt_error = None
                    outage.attempting = True
                    outage.open_limit = limit
                    engine.open()
                    return True
            finally:
                self._reconnect_scope = None
        self._give_up(None)
        return False

    def _give_up(self, err: errors.AMQPError | None) -> None:
        """End the connection after a failed outage: ``err`` if final, else the policy is spent."""
        outage = self._outage
        if outage is None or self._error is not None:
            return
        if err is None and self._closing:
            self._terminate(errors.ConnectionClosed(f"connection to {self.peer} is closed"))
            return
        s = outage.schedule
        if err is None:
            elapsed = anyio.current_time() - s.started
            last = s.last_error
            err = errors.ReconnectError(
                f"connection to {outage.peer} lost and not re-established after "
                f"{s.attempts} attempt{'s' if s.attempts != 1 else ''} in {elapsed:.1f}s; "
                f"last error: {last}",
                attempts=s.attempts,
                elapsed=elapsed,
                last_error=last,
            )
            err.__cause__ = last
        log.error("giving up on the connection to %s: %s", outage.peer, err)
        self._emit(ReconnectFailed(error=err))
        self._terminate(err)

    def _restore(self) -> None:
        """The peer's open arrived on a new connection: re-begin sessions, re-attach links."""
        outage = self._outage
        assert outage is not None
        self._outage = None
        self._restored = (anyio.current_time(), outage.schedule)
        self.reconnects += 1
        links = unsettled = 0
        held: list[tuple[Link, EngineSession]] = []
        can_hold = self._tg is not None  # (the task that puts the tokens runs there)
        for session in list(self._sessions):
            if session._error is not None:
                self._sessions.discard(session)
                continue
            es = self._engine.session()
            es.begin()
            session._rebind(es)
            for link in list(session._links):
                links += 1
                if can_hold and self._needs_token(link.address):
                    held.append((link, es))  # re-attached once its token is put again
                else:
                    unsettled += link._reattach(es)
        if held and self._tg is not None:
            self._holding = True
            self._tg.start_soon(self._resume_held, held)
        self._wake()
        downtime = anyio.current_time() - outage.since
        attempts = outage.schedule.attempts
        log.warning(
            "reconnected to %s (attempt %d, %.2fs after the drop): re-attaching %d link%s, "
            "%d unsettled send%s",
            self.peer,
            attempts,
            downtime,
            links,
            "" if links == 1 else "s",
            unsettled,
            "" if unsettled == 1 else "s",
        )
        self._emit(
            Reconnected(
                peer=self.peer,
                attempts=attempts,
                downtime=downtime,
                links=links,
                unsettled=unsettled,
            )
        )
        self._changed.fire()

    async def _resume_held(self, held: list[tuple[Link, EngineSession]]) -> None:
        """Put the tokens again, then re-attach the links that waited for them."""
        claims = self._claims
        assert claims is not None
        audiences = {a for link, _ in held if (a := claims.audience_for(link.address)) is not None}
        failed = await self._reauthorize(audiences)
        if failed is None:
            return  # the connection dropped again: its next restore holds them again
        self._holding = False
        for link, es in held:
            if link._error is not None or link._closing:
                continue
            err = failed.get(claims.audience_for(link.address) or "")
            if err is not None:
                link._fail(err)
            else:
                link._reattach(es)
        self._wake()
        self._changed.fire()

    async def _wait_open(self, timeout: float, shown: float | None = None) -> None:
        with deadline(timeout, f"opening the connection to {self.peer}", shown):
            while not self._opened and self._error is None:
                await self._changed.wait()
        if self._error is not None:
            raise self._error

    def _terminate(self, error: errors.AMQPError) -> None:
        if self._error is not None:
            return
        self._error = error
        self._outage = None
        for session in list(self._sessions):
            session._fail(error, link_error=error)
        self._sessions.clear()
        for pending in self._requests.values():
            pending.fail(error)
        self._waiting_senders.clear()
        if self._driver.reading_paused:
            self._driver.resume_reading()
        self._changed.fire()
        self._incoming_sig.fire()

    async def close(self, error: Error | None = None, *, timeout: float | None = None) -> None:
        """Close the connection (with ``error`` if given) and wait for the peer's close.

        After ``timeout`` seconds without an answer the socket is closed anyway.
        Safe to call more than once, and from any task.
        """
        if not self._closing:
            self._closing = True
            if self._reconnect_scope is not None:
                self._reconnect_scope.cancel()
            if self._outage is not None:
                self._driver.abort()  # a handshake in progress: nothing to close cleanly
            elif self._error is None and not self._engine.is_closed:
                try:
                    self._engine.close(error)
                except IllegalStateError:
                    pass
                self._wake()
        if not self._running:
            self._driver.abort()
            await self._driver.close_if_unused()
            self._terminate(errors.ConnectionClosed(f"connection to {self.peer} is closed"))
            return
        try:
            with anyio.move_on_after(self._timeout_for(timeout)):
                await self._driver.wait_done()
        finally:
            if not self._driver.done:
                self._driver.abort()
        with anyio.CancelScope(shield=True):
            await self._driver.wait_done()
        self._terminate(errors.ConnectionClosed(f"connection to {self.peer} is closed"))

    async def _settle_failure(self, exc: BaseException) -> None:
        """After a failed handshake: let the driver write what the engine queued last
        (a close, a sasl-outcome) and stop by itself; stop it now on a timeout or
        cancellation."""
        if isinstance(exc, errors.AMQPError) and not isinstance(exc, errors.TimeoutError):
            with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
                await self._driver.wait_done()
        self._driver.abort()

    def management(self, *, protocol: str | None = None, timeout: float | None = None) -> Management:
        """The peer's queues, exchanges and bindings: ``await conn.management().declare_queue("q")``.

        ``protocol``: ``"rabbitmq"`` (RabbitMQ 4's HTTP over AMQP on ``/management``) or
        ``"oasis"`` (the AMQP Management draft's ``$management``); None picks RabbitMQ's
        when the peer's open says RabbitMQ 4 or later. See :mod:`amqp10.client.management`.
        """
        return open_management(self, protocol=protocol, timeout=timeout)

    async def wait_closed(self) -> None:
        """Wait (without a time limit) until the connection has ended, for whatever reason."""
        while self._error is None:
            await self._changed.wait()

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close and stop the connection's tasks (what leaving ``async with`` does).

        A connection made by :func:`connect` must be closed this way, from the
        task that connected.
        """
        try:
            with anyio.CancelScope(shield=True):
                await self.close(timeout=self._close_timeout())
        finally:
            tg, self._tg = self._tg, None
            if tg is not None:
                self._driver.abort()
                await tg.__aexit__(None, None, None)

    # -- engine events ---------------------------------------------------------------------
    def _on_events(self, events: list[Any]) -> None:
        handlers = _HANDLERS
        for event in events:
            handler = handlers.get(type(event))
            if handler is None:
                log.debug("no handler for %r", event)
                continue
            handler(self, event)
        if self._waiting_senders:
            done = [s for s in self._waiting_senders if not s._after_io()]
            self._waiting_senders.difference_update(done)
        self._activity.fire()

    def _on_opened(self, event: ConnectionOpened) -> None:
        if self._accepting and self._engine.state is ConnectionState.OPEN_RCVD:
            self._engine.open()
        self._opened = True
        protocol = self._protocol
        if isinstance(protocol, SaslConnection):
            engine = protocol.bypass()
            if engine is not None:  # SASL is over: the driver calls the engine itself
                self._driver.protocol = engine
        if self._outage is not None:
            self._restore()
        self._changed.fire()

    def _on_closed(self, event: ConnectionClosed) -> None:
        if event.error is not None:
            err: errors.AMQPError = errors.ConnectionError.from_error(
                f"connection to {self.peer} closed by the peer", event.error
            )
        elif self._closing:
            err = errors.ConnectionClosed(f"connection to {self.peer} is closed")
        else:
            err = errors.ConnectionClosed(f"connection to {self.peer} was closed by the peer")
        self._lost(err)

    def _on_failed(self, event: ConnectionFailed) -> None:
        err = self._driver.error or errors.ConnectionError.from_error(
            f"connection to {self.peer} failed", event.error
        )
        self._lost(err)

    def _on_sasl_failed(self, event: SaslFailed) -> None:
        if self._driver.error is not None:  # the stream failed: that is the news
            self._lost(self._driver.error)
            return
        if self._accepting:
            log.info("SASL authentication of %s failed: %s", self.peer, event.reason)
        err = errors.AuthenticationError(
            f"SASL authentication with {self.peer} failed: {event.reason}"
        )
        err.condition = f"sasl:{event.outcome.name.lower().replace('_', '-')}"
        self._lost(err)

    def _on_sasl_completed(self, event: SaslCompleted) -> None:
        self.authenticated_as = event.identity

    def _on_sasl_skipped(self, event: SaslSkipped) -> None:
        pass

    def _on_session_begun(self, event: SessionBegun) -> None:
        es = event.session
        if es.context is None:  # the peer began it: accept
            es.begin()
            self._sessions.add(Session(self, es, incoming=True))
        else:
            es.context._begun = True
        self._changed.fire()

    def _on_session_ended(self, event: SessionEnded) -> None:
        s = event.session.context
        if isinstance(s, Session):
            if s._closing:
                err: errors.AMQPError = errors.SessionError("the session is closed")
            else:
                err = errors.SessionError.from_error("session ended by the peer", event.error)
            s._fail(err)
            self._sessions.discard(s)

    def _on_session_failed(self, event: SessionFailed) -> None:
        s = event.session.context
        if isinstance(s, Session):
            s._fail(errors.SessionError.from_error("session failed", event.error))
            self._sessions.discard(s)

    def _on_link_attached(self, event: LinkAttached) -> None:
        link = event.link
        owner = link.context
        if owner is None:
            self._accept_link(link)
        elif isinstance(owner, Link):
            owner._on_attached()
        self._changed.fire()

    def _on_link_detached(self, event: LinkDetached | LinkFailed) -> None:
        link = event.link
        owner = link.context
        if isinstance(owner, Receiver) and link is not owner._link:
            if link in owner._links:
                owner._links.remove(link)
            return
        if isinstance(owner, Link):
            closed = getattr(event, "closed", True)
            owner._on_detached(event.error, closed=closed, failed=isinstance(event, LinkFailed))

    def _on_credit(self, event: CreditAdded) -> None:
        owner = event.link.context
        if isinstance(owner, Sender) and owner._unsent:
            self._waiting_senders.add(owner)

    def _on_drain_requested(self, event: DrainRequested) -> None:
        # everything the application wants to send is already queued in the
        # engine (send() queues at once), so the drain can be answered now: the
        # engine writes the queued deliveries first
        event.link.drained()

    def _on_flow(self, event: FlowReceived) -> None:
        owner = event.link.context
        if isinstance(owner, Receiver):
            owner._on_flow()

    def _on_delivery(self, event: DeliveryReceived) -> None:
        owner = event.link.context
        if isinstance(owner, Receiver):
            owner._deliver(event.delivery)

    def _on_aborted(self, event: DeliveryAborted) -> None:
        owner = event.link.context
        if isinstance(owner, Receiver):
            owner._replenish()
        elif isinstance(owner, Sender):
            owner._on_aborted(event.delivery)

    def _on_updated(self, event: DeliveryUpdated) -> None:
        owner = event.link.context
        if isinstance(owner, Sender):
            owner._on_update(event.delivery, event.settled)


_HANDLERS: dict[type, Callable[[Connection, Any], None]] = {
    ConnectionOpened: Connection._on_opened,
    ConnectionClosed: Connection._on_closed,
    ConnectionFailed: Connection._on_failed,
    SaslCompleted: Connection._on_sasl_completed,
    SaslFailed: Connection._on_sasl_failed,
    SaslSkipped: Connection._on_sasl_skipped,
    SessionBegun: Connection._on_session_begun,
    SessionEnded: Connection._on_session_ended,
    SessionFailed: Connection._on_session_failed,
    LinkAttached: Connection._on_link_attached,
    LinkDetached: Connection._on_link_detached,
    LinkFailed: Connection._on_link_detached,
    CreditAdded: Connection._on_credit,
    DrainRequested: Connection._on_drain_requested,
    FlowReceived: Connection._on_flow,
    DeliveryReceived: Connection._on_delivery,
    DeliveryAborted: Connection._on_aborted,
    DeliveryUpdated: Connection._on_updated,
}
