"""The async client connection: ``async with await amqp10.connect(url) as conn``.

One :class:`Connection` class serves both ends: :func:`connect` makes an
outgoing one, :mod:`amqp10.client.server` makes one per accepted socket. The
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

import itertools
import logging
import math
import ssl as _ssl
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import ByteStream, TaskGroup

from .. import errors
from ..io.driver import Driver, EngineProtocol, Signal
from ..io.net import connect_stream, peer_name
from ..io.tls import client_context
from ..message import Message
from ..sasl import SaslClient, SaslConnection
from ..sasl.events import SaslCompleted, SaslFailed, SaslSkipped
from ..transport import Connection as Engine
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
    Event,
    FlowReceived,
    IllegalStateError,
    LinkAttached,
    LinkDetached,
    LinkFailed,
    SessionBegun,
    SessionEnded,
    SessionFailed,
)
from ..transport import Delivery as EngineDelivery
from ..transport import Link as EngineLink
from ..transport import Receiver as EngineReceiver
from ..types import Accepted, Error, ErrorCondition, ExpiryPolicy, Source, Target
from ..types.transactions import Coordinator
from ._common import SettleMode, deadline, describe_outcome, settle_mode
from .links import Delivery, Link, Receiver, Sender, Session, Tracker
from .reconnect import (
    ConnectionLost,
    Reconnected,
    ReconnectEvent,
    ReconnectFailed,
    ReconnectPolicy,
    Schedule,
    once_each,
)
from .transactions import Transaction
from .url import URL, parse_url

__all__ = ["DEFAULT_TIMEOUT", "ConnectOptions", "Connection", "connect"]

log = logging.getLogger("amqp10.client")

DEFAULT_TIMEOUT = 30.0
"""Seconds any single wait may take unless a ``timeout`` says otherwise."""

LinkFilter = Callable[[str, "str | None"], "Error | None"]
"""``(kind, address) -> None`` to accept a link the peer attaches, or an ``Error`` to refuse it.

``kind`` is our end's role: ``"receiver"`` when the peer wants to send to
``address``, ``"sender"`` when it wants to receive from it.
"""

MAX_PENDING_LINKS = 1000
"""Links the peer attached that the application has not taken yet; more are refused."""

STABLE_AFTER = 2.0
"""Seconds a re-made connection must stay up before a new drop starts a fresh backoff
schedule: a peer that accepts and drops at once is retried with growing delays,
and within the policy's bounds, not in a tight loop."""


@dataclass(frozen=True, slots=True)
class ConnectOptions:
    """Everything needed to (re-)make a connection: what :func:`connect` was given."""

    url: URL
    container_id: str
    hostname: str | None = None
    idle_timeout: float | None = None
    ssl_context: _ssl.SSLContext | None = None
    sasl_mechanisms: tuple[str, ...] | None = None
    timeout: float = DEFAULT_TIMEOUT
    max_frame_size: int = 65536
    channel_max: int = 65535
    properties: dict[Any, Any] | None = None
    max_buffered: int = 1000
    sasl: bool = True


def _ssl_context(ssl: _ssl.SSLContext | bool | None, url: URL) -> _ssl.SSLContext | None:
    if ssl is None:
        ssl = url.tls
    if ssl is True:
        return client_context()
    if ssl is False:
        if url.tls:
            raise ValueError(
                "amqps:// needs TLS: pass ssl=True or an ssl.SSLContext, not ssl=False"
            )
        return None
    if isinstance(ssl, _ssl.SSLContext):
        return ssl
    raise TypeError(f"ssl must be an ssl.SSLContext or a bool, not {type(ssl).__name__}")


@dataclass(slots=True)
class _Outage:
    """A dropped connection being re-made: the attempts so far and what was lost."""

    schedule: Schedule
    error: errors.AMQPError
    peer: str
    since: float
    attempting: bool = False  # a new driver runs the handshake of an attempt
    open_limit: float = DEFAULT_TIMEOUT


class _IncomingLinks:
    """``async for link in conn.incoming_links()``: ends when the connection closes."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def __aiter__(self) -> _IncomingLinks:
        return self

    async def __anext__(self) -> Sender | Receiver:
        conn = self._conn
        while not conn._incoming:
            if conn._error is not None:
                raise StopAsyncIteration
            await conn._incoming_sig.wait()
        return conn._incoming.popleft()


class Connection:
    """An open AMQP connection (outgoing from :func:`connect`, or accepted by a server).

    Use it as ``async with``: leaving the block closes the connection and stops
    its tasks. Open links with :meth:`open_sender` / :meth:`open_receiver`; they
    go on a default session unless given one from :meth:`session`. Links the
    peer attaches are accepted and handed out by :meth:`incoming_links`.

    Every wait is bounded: a ``timeout=None`` argument means the connection's
    ``timeout`` (``math.inf`` to wait forever).
    """

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
        self._running = False
        self._tg: TaskGroup | None = None
        self._sessions: set[Session] = set()
        self._default_session: Session | None = None
        self._incoming: deque[Sender | Receiver] = deque()
        self._incoming_sig = Signal()
        self._buffered = 0
        self._max_buffered = max_buffered
        self._link_credit = link_credit
        self._link_filter = link_filter
        self._waiting_senders: set[Sender] = set()
        self._dynamic: dict[str, Receiver] = {}  # our dynamic receivers by assigned address
        self._served: dict[str, Sender] = {}  # links the peer attached to receive from, by address
        self._names = itertools.count(1)
        self._setup_lock: anyio.Lock | None = None
        self._coordinator: Sender | None = None  # transactions' control link (made on first use)
        self._replies: Receiver | None = None
        self._requests: dict[Any, Tracker] = {}
        self._senders_by_address: dict[str, Sender] = {}
        self.authenticated_as: str | None = None
        """The identity SASL established (server side: the peer's user), if any."""
        # reconnecting (connect(..., reconnect=...)); see _run
        self._policy: ReconnectPolicy | None = None
        self._targets: tuple[ConnectOptions, ...] = ()
        self._target = 0  # index of the options in use
        self._factory: ProtocolFactory | None = None
        self._outage: _Outage | None = None
        self._attempt_error: errors.AMQPError | None = None
        self._reconnect_scope: anyio.CancelScope | None = None
        self._restored: tuple[float, Schedule] | None = None  # when, and the schedule used
        self.reconnects = 0
        """How many times the connection was re-established after a drop."""

    def _make_driver(self, stream: ByteStream) -> Driver[Event]:
        idle = self._engine.idle_timeout
        return Driver(
            stream,
            self._protocol,
            self._on_events,
            peer=self.peer,
            pause_limit=idle / 2 if idle else None,
        )

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
        now = anyio.current_time()
        restored = self._restored
        if restored is not None and now - restored[0] < STABLE_AFTER:
            schedule = restored[1]  # it dropped again at once: keep backing off
        else:
            schedule = Schedule(self._policy, len(self._targets), self._target, now)
        schedule.last_error = err
        self._outage = _Outage(schedule=schedule, error=err, peer=self.peer, since=now)
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
                        engine, protocol, stream = await _dial(options, self._factory, limit)
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
        for session in list(self._sessions):
            if session._error is not None:
                self._sessions.discard(session)
                continue
            es = self._engine.session()
            es.begin()
            session._rebind(es)
            for link in list(session._links):
                unsettled += link._reattach(es)
                links += 1
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

    def _usable(self) -> bool:
        return (
            self._outage is None
            and self._error is None
            and self._engine.state is ConnectionState.OPENED
        )

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

    # -- sessions and links ---------------------------------------------------------------
    async def session(self, *, timeout: float | None = None) -> Session:
        """Begin a new session and wait for the peer's begin."""
        await self._until_usable(self._timeout_for(timeout), "beginning a session")
        s = self._new_session()
        with deadline(self._timeout_for(timeout), "beginning a session"):
            while not s._begun:
                s._check_usable()
                await self._changed.wait()
        return s

    def _new_session(self) -> Session:
        self._check_open()
        try:
            es = self._engine.session()
            es.begin()
        except IllegalStateError as exc:
            raise errors.SessionError(f"cannot begin a session: {exc}") from None
        s = Session(self, es)
        self._sessions.add(s)
        self._wake()
        return s

    def _session_for(self, session: Session | None) -> Session:
        if session is not None:
            session._check_usable()
            return session
        s = self._default_session
        if s is None or s._error is not None:
            s = self._default_session = self._new_session()
        return s

    def _kept(self) -> dict[str, Any]:
        """Fields of our default termini. With a reconnect policy they ask the peer to keep
        the link's state as long as we may take to come back (Part 3 §3.5.6 ``timeout``),
        so that a peer that resumes links can resume ours (§2.6.13); without one the
        defaults stand (``session-end``, timeout 0: the state goes with the link)."""
        policy = self._policy
        if policy is None:
            return {}
        if policy.max_time is None or math.isinf(policy.max_time):
            return {"expiry_policy": ExpiryPolicy.NEVER}
        return {"timeout": math.ceil(policy.max_time)}

    def _link_name(self, kind: str, address: str | None) -> str:
        return f"{self.container_id}-{kind}-{next(self._names)}-{address or 'dynamic'}"

    async def open_sender(
        self,
        address: str | None,
        *,
        settle_mode: SettleMode | str = SettleMode.MIXED,
        name: str | None = None,
        session: Session | None = None,
        target: Target | Coordinator | None = None,
        source: Source | None = None,
        timeout: float | None = None,
    ) -> Sender:
        """Attach a sender to the node at ``address`` and wait for the peer's attach.

        ``target``/``source`` replace the default termini (``Target(address=address)``;
        a :class:`~amqp10.types.Coordinator` target links to the transaction coordinator).
        Raises :class:`~amqp10.errors.LinkError` with the peer's reason if it refuses.
        """
        mode = settle_mode_of(settle_mode)
        await self._until_usable(self._timeout_for(timeout), f"attaching a sender to {address!r}")
        s = self._session_for(session)
        link = s._session.sender(
            name or self._link_name("sender", address),
            source=source if source is not None else Source(),
            target=target if target is not None else Target(address=address, **self._kept()),
            snd_settle_mode=mode.snd_settle_mode,
            rcv_settle_mode=mode.rcv_settle_mode,
        )
        sender = Sender(self, s, link, address=address)
        await self._attach(sender, timeout)
        return sender

    async def open_receiver(
        self,
        address: str | None = None,
        *,
        credit: int = 100,
        settle_mode: SettleMode | str = SettleMode.MIXED,
        dynamic: bool = False,
        auto_accept: bool = False,
        name: str | None = None,
        session: Session | None = None,
        source: Source | None = None,
        target: Target | None = None,
        timeout: float | None = None,
    ) -> Receiver:
        """Attach a receiver from the node at ``address`` and wait for the peer's attach.

        ``credit`` is the window kept open to the sender (0: grant it yourself
        with ``add_credit``). ``dynamic=True`` asks the peer to create a node
        (e.g. a temporary reply queue); its address is then ``receiver.address``.
        ``auto_accept`` accepts each delivery as the application takes it.
        """
        if credit < 0:
            raise ValueError("credit must not be negative")
        mode = settle_mode_of(settle_mode)
        if source is None:
            source = (
                Source(address=None, dynamic=True)
                if dynamic
                else Source(address=address, **self._kept())
            )
        what = f"attaching a receiver from {address!r}"
        await self._until_usable(self._timeout_for(timeout), what)
        s = self._session_for(session)
        link = s._session.receiver(
            name or self._link_name("receiver", address),
            source=source,
            target=target if target is not None else Target(),
            snd_settle_mode=mode.snd_settle_mode,
            rcv_settle_mode=mode.rcv_settle_mode,
        )
        receiver = Receiver(self, s, link, address=address, window=credit, auto_accept=auto_accept)
        await self._attach(receiver, timeout)
        if dynamic:
            remote = link.remote_source
            assigned = getattr(remote, "address", None)
            if not isinstance(assigned, str):
                await receiver.close()
                raise errors.LinkError("the peer assigned no address to the dynamic receiver")
            receiver._address = assigned
            self._dynamic[assigned] = receiver
        return receiver

    async def _attach(self, link: Sender | Receiver, timeout: float | None) -> None:
        el = link._link
        try:
            el.attach()
            if isinstance(link, Receiver) and link._window > 0:
                link._link.flow(link._window)
        except IllegalStateError as exc:
            link._fail(errors.LinkError(f"cannot attach the {link._what()}: {exc}"))
            raise errors.LinkError(f"cannot attach the {link._what()}: {exc}") from None
        self._wake()
        try:
            with deadline(self._timeout_for(timeout), f"attaching the {link._what()}"):
                while not link._ready:
                    if link._error is not None:
                        raise link._error
                    self._check_open()
                    await link._sig.wait()
        except BaseException:
            if link._error is None:
                link._closing = True
                try:
                    link._link.detach(closed=True)
                except IllegalStateError:
                    pass
                link._fail(errors.LinkDetached(f"{link._what()} was not attached"))
                self._wake()
            raise

    def incoming_links(self) -> _IncomingLinks:
        """``async for link in conn.incoming_links()``: links the peer attached.

        Each is already accepted with the terminus the peer asked for (a dynamic
        one gets a fresh address): a :class:`Receiver` where the peer sends, a
        :class:`Sender` where it receives. The iteration ends with the connection.
        """
        return _IncomingLinks(self)

    async def next_link(self, *, timeout: float | None = None) -> Sender | Receiver:
        """The next link the peer attached (see :meth:`incoming_links`)."""
        with deadline(self._timeout_for(timeout), "waiting for the peer to attach a link"):
            while not self._incoming:
                self._check_open()
                await self._incoming_sig.wait()
        return self._incoming.popleft()

    # -- request / response ---------------------------------------------------------------
    def transaction(self, *, timeout: float | None = None) -> Transaction:
        """A local transaction (AMQP Part 4) on this connection's coordinator.

        ``async with conn.transaction() as txn:`` declares it, commits when the
        block ends and rolls back (then re-raises) if the block raises;
        ``txn = await conn.transaction()`` declares it for explicit
        ``await txn.commit()`` / ``await txn.rollback()``. Work joins it with
        ``sender.send(msg, txn=txn)`` and ``delivery.accept(txn=txn)`` (and the
        other outcomes). ``timeout`` bounds each declare/discharge exchange.
        """
        self._check_open()
        return Transaction(self, timeout=timeout)

    async def request(
        self, address: str, message: Message, *, timeout: float | None = None
    ) -> Message:
        """Send ``message`` to ``address`` and return the response addressed back to us.

        Replies come to one dynamic receiver per connection: ``message.reply_to``
        is set to its address and ``message.id`` to a fresh UUID if it has none;
        the response is the message whose ``correlation_id`` equals that id.
        Raises :class:`~amqp10.errors.DeliveryError` if the request is not accepted.
        """
        limit = self._timeout_for(timeout)
        with deadline(limit, f"request to {address!r}"):
            replies = await self._reply_receiver()
            sender = await self._cached_sender(address)
            if message.id is None:
                message.id = uuid.uuid4()
            message.reply_to = replies.address
            key = message.id
            pending = Tracker()
            self._requests[key] = pending
            try:
                outcome = await sender.send(message, settled=False, timeout=math.inf)
                if not isinstance(outcome, Accepted):
                    raise errors.DeliveryError(
                        f"request to {address!r} was {describe_outcome(outcome)}", outcome=outcome
                    )
                await pending._settled()
            finally:
                self._requests.pop(key, None)
        if pending.error is not None:
            raise pending.error
        response: Message = pending.outcome
        return response

    async def reply(
        self,
        request: Delivery | Message,
        response: Message,
        *,
        timeout: float | None = None,
    ) -> Any:
        """Send ``response`` to the request's ``reply_to`` address; return the outcome.

        Sets ``response.correlation_id`` to the request's id (or correlation id)
        unless it is set. The response goes on the link the peer attached to
        receive from that address (a direct peer's dynamic reply receiver), or
        else on a sender opened to it.
        """
        req = request.message if isinstance(request, Delivery) else request
        reply_to = req.reply_to
        if not reply_to:
            raise ValueError("the request has no reply_to address")
        if response.correlation_id is None:
            response.correlation_id = req.id if req.id is not None else req.correlation_id
        if response.to is None:
            response.to = reply_to
        limit = self._timeout_for(timeout)
        with deadline(limit, f"reply to {reply_to!r}"):
            sender = self._served.get(reply_to)
            if sender is None or not sender.is_open:
                self._served.pop(reply_to, None)
                sender = await self._cached_sender(reply_to)
            return await sender.send(response, timeout=math.inf)

    async def _reply_receiver(self) -> Receiver:
        async with self._lock():
            r = self._replies
            if r is None or not r.is_open:
                r = await self.open_receiver(dynamic=True, credit=100)
                r._on_delivery = self._on_reply
                self._replies = r
            return r

    async def _cached_sender(self, address: str) -> Sender:
        async with self._lock():
            s = self._senders_by_address.get(address)
            if s is None or s.error is not None:
                s = await self.open_sender(address)
                self._senders_by_address[address] = s
            return s

    def _lock(self) -> anyio.Lock:
        if self._setup_lock is None:
            self._setup_lock = anyio.Lock()
        return self._setup_lock

    def _on_reply(self, receiver: Receiver, d: EngineDelivery) -> None:
        try:
            message = Message.decode(d.payload)
        except Exception as exc:
            log.info("undecodable response on %s: %s", receiver.address, exc)
            d.settle(_rejected(f"undecodable message: {exc}"))
            return
        pending = self._requests.get(message.correlation_id)
        if not d.settled:
            d.accept()
        self._wake()
        if pending is None:
            log.debug("response with unknown correlation-id %r dropped", message.correlation_id)
            return
        pending.resolve(message)

    # -- back-pressure ------------------------------------------------------------------
    def _buffered_more(self, n: int) -> None:
        self._buffered += n
        if self._buffered > self._max_buffered and not self._driver.reading_paused:
            self._driver.pause_reading()

    def _took(self, n: int) -> None:
        self._buffered -= n
        if self._driver.reading_paused and self._buffered <= self._max_buffered // 2:
            self._driver.resume_reading()

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

    # -- links the peer attaches ------------------------------------------------------------
    def _accept_link(self, link: EngineLink) -> None:
        session = link.session.context
        if not isinstance(session, Session):
            session = Session(self, link.session, incoming=True)
            self._sessions.add(session)
        if len(self._incoming) >= MAX_PENDING_LINKS:
            link.detach(
                Error(
                    condition=ErrorCondition.RESOURCE_LIMIT_EXCEEDED,
                    description="too many links waiting to be accepted",
                ),
                closed=True,
            )
            return
        if self._link_filter is not None:
            kind = "receiver" if isinstance(link, EngineReceiver) else "sender"
            terminus = link.remote_target if kind == "receiver" else link.remote_source
            refusal = self._link_filter(kind, _str_or_none(getattr(terminus, "address", None)))
            if refusal is not None:
                link.detach(refusal, closed=True)  # §2.6.3: attach with no terminus, then detach
                return
        wrapper: Sender | Receiver
        if isinstance(link, EngineReceiver):  # the peer sends to us
            target = link.remote_target
            address = getattr(target, "address", None)
            if target is not None and target.dynamic:
                address = _new_address()
                target = _with_address(target, address)
            link.attach(source=link.remote_source, target=target)
            owner = self._dynamic.get(address) if isinstance(address, str) else None
            if owner is not None and owner.is_open:
                owner._add_link(link)  # the peer answers on our dynamic address
                return
            wrapper = Receiver(
                self,
                session,
                link,
                address=_str_or_none(address),
                incoming=True,
                window=self._link_credit,
            )
            wrapper._replenish()
        else:  # the peer receives from us
            source = link.remote_source
            address = getattr(source, "address", None)
            if source is not None and source.dynamic:
                address = _new_address()
                source = _with_address(source, address)
            link.attach(source=source, target=link.remote_target)
            sender = Sender(self, session, link, address=_str_or_none(address), incoming=True)
            if isinstance(address, str):
                self._served[address] = sender
            wrapper = sender
        self._incoming.append(wrapper)
        self._incoming_sig.fire()


def _new_address() -> str:
    return f"amqp10.dynamic.{uuid.uuid4()}"


def _with_address(terminus: Any, address: str) -> Any:
    fields = {f.attr: getattr(terminus, f.attr) for f in type(terminus).FIELDS}
    fields["address"] = address
    return type(terminus)(**fields)


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _rejected(description: str) -> Any:
    from ..types import Rejected

    return Rejected(error=Error(condition=ErrorCondition.DECODE_ERROR, description=description))


settle_mode_of = settle_mode

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


# -- connecting ---------------------------------------------------------------------------
ProtocolFactory = Callable[[Engine, ConnectOptions], EngineProtocol[Event]]


def _client_protocol(engine: Engine, options: ConnectOptions) -> EngineProtocol[Event]:
    """The engine, behind a SASL client unless ``sasl=False``.

    ANONYMOUS without credentials; with a user name and password from the URL
    the strongest of SCRAM-SHA-512/256/1 and PLAIN the server offers (or the
    first of ``sasl_mechanisms`` it offers).
    """
    if not options.sasl:
        url = options.url
        if url.username is not None or options.sasl_mechanisms:
            raise ValueError("credentials and sasl_mechanisms need SASL (sasl=True)")
        return engine
    url = options.url
    try:
        client = SaslClient(
            username=url.username,
            password=url.password,
            mechanisms=options.sasl_mechanisms,
            hostname=options.hostname,
            handshake_timeout=options.timeout,
        )
    except ValueError as exc:  # e.g. an unknown mechanism named
        raise errors.AuthenticationError(
            f"cannot log in to {peer_name(url.host, url.port)}: {exc}"
        ) from None
    return SaslConnection(client, engine)


async def connect(
    url: str | Sequence[str] = "amqp://127.0.0.1",
    *,
    container_id: str | None = None,
    hostname: str | None = None,
    idle_timeout: float | None = None,
    ssl: _ssl.SSLContext | bool | None = None,
    sasl: bool = True,
    sasl_mechanisms: list[str] | tuple[str, ...] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    max_frame_size: int = 65536,
    channel_max: int = 65535,
    properties: dict[Any, Any] | None = None,
    max_buffered: int = 1000,
    reconnect: ReconnectPolicy | bool | None = None,
) -> Connection:
    """Connect, open the AMQP connection, and return it (use with ``async with``).

    ``url``: ``amqp://[user:pass@]host[:port]`` or ``amqps://`` (TLS, port
    5671), or a list of them: tried in turn (once each, or as ``reconnect``
    says). ``ssl``: an ``ssl.SSLContext`` (client certificates, private CAs),
    True for the system defaults, or None to follow the scheme; host names are
    verified unless the context says otherwise. SASL: ANONYMOUS without
    credentials, else SCRAM or PLAIN with the URL's user and password
    (``sasl_mechanisms`` lists the ones to use, in order, e.g. ``["EXTERNAL"]``
    with a TLS client certificate); ``sasl=False`` speaks plain AMQP to peers
    without SASL. ``idle_timeout``: seconds of
    silence after which we drop the peer (and ask it to keep us alive).
    ``timeout``: bound on connecting, and the default for every later wait.
    ``max_buffered``: deliveries held for the application across receivers
    before the connection stops reading (back-pressure).

    ``reconnect``: a :class:`~amqp10.client.reconnect.ReconnectPolicy` (True:
    the default one). The first connect retries as the policy says, and a
    dropped connection is re-made: sessions begun again, links re-attached
    under their names (same container-id), unsettled sends resumed or sent
    again (at least once). Calls made meanwhile wait, within their timeouts.

    Raises :class:`~amqp10.errors.ConnectError`, :class:`~amqp10.errors.TLSError`,
    :class:`~amqp10.errors.AuthenticationError`, :class:`~amqp10.errors.ConnectionError`
    or :class:`~amqp10.errors.TimeoutError`; :class:`~amqp10.errors.ReconnectError`
    when a list of URLs or a policy's attempts are used up.
    """
    urls = [url] if isinstance(url, str) else list(url)
    if not urls:
        raise ValueError("connect() needs at least one URL")
    cid = container_id or f"amqp10-{uuid.uuid4()}"
    targets = []
    for one in urls:
        u = parse_url(one)
        targets.append(
            ConnectOptions(
                url=u,
                container_id=cid,
                hostname=hostname or u.vhost or u.host,
                idle_timeout=idle_timeout,
                ssl_context=_ssl_context(ssl, u),
                sasl_mechanisms=tuple(sasl_mechanisms) if sasl_mechanisms else None,
                sasl=sasl,
                timeout=timeout,
                max_frame_size=max_frame_size,
                channel_max=channel_max,
                properties=properties,
                max_buffered=max_buffered,
            )
        )
    policy = ReconnectPolicy() if reconnect is True else (reconnect or None)
    return await connect_with(targets, reconnect=policy)


async def connect_with(
    options: ConnectOptions | Sequence[ConnectOptions],
    protocol_factory: ProtocolFactory | None = None,
    *,
    reconnect: ReconnectPolicy | None = None,
) -> Connection:
    """:func:`connect` from prepared options (one per URL, all with the same container-id).

    Without ``reconnect`` a single target is tried once and its failure raised
    as it is; several are tried once each, in order.
    """
    targets = (options,) if isinstance(options, ConnectOptions) else tuple(options)
    if not targets:
        raise ValueError("connect_with() needs at least one ConnectOptions")
    if len({t.container_id for t in targets}) != 1:
        raise ValueError("every target of one connection must use the same container_id")
    factory = protocol_factory or _client_protocol
    first = reconnect if reconnect is not None else once_each(len(targets))
    if reconnect is None and len(targets) == 1:
        conn = await _connect_once(targets[0], factory, targets[0].timeout)
        index = 0
    else:
        conn, index = await _connect_any(targets, factory, first)
    conn._policy = reconnect
    conn._targets = targets
    conn._target = index
    conn._factory = factory
    return conn


async def _connect_any(
    targets: tuple[ConnectOptions, ...], factory: ProtocolFactory, policy: ReconnectPolicy
) -> tuple[Connection, int]:
    """The first connect, tried on each target in turn, as ``policy`` allows."""
    schedule = Schedule(policy, len(targets), 0, anyio.current_time())
    while True:
        step = schedule.next(anyio.current_time())
        if step is None:
            break
        delay, index = step
        if delay:
            await anyio.sleep(delay)
        opts = targets[index]
        limit = max(min(opts.timeout, schedule.remaining(anyio.current_time())), 0.001)
        try:
            return await _connect_once(opts, factory, limit), index
        except errors.AMQPError as exc:
            schedule.last_error = exc
            if not policy.retryable(exc):
                raise
            log.info("connect attempt %d failed: %s", schedule.attempts, exc)
    elapsed = anyio.current_time() - schedule.started
    last = schedule.last_error
    names = ", ".join(peer_name(t.url.host, t.url.port) for t in targets)
    n = schedule.attempts
    raise errors.ReconnectError(
        f"gave up connecting to {names} after {n} attempt{'s' if n != 1 else ''} "
        f"in {elapsed:.1f}s; last error: {last}",
        attempts=n,
        elapsed=elapsed,
        last_error=last,
    ) from last


async def _dial(
    options: ConnectOptions, factory: ProtocolFactory, limit: float
) -> tuple[Engine, EngineProtocol[Event], ByteStream]:
    """A new engine (behind its protocol layers) and a connected stream for ``options``."""
    u = options.url
    engine = Engine(
        options.container_id,
        hostname=options.hostname,
        max_frame_size=options.max_frame_size,
        channel_max=options.channel_max,
        idle_timeout=options.idle_timeout,
        properties=options.properties,
    )
    protocol = factory(engine, options)
    stream = await connect_stream(
        u.host,
        u.port,
        ssl_context=options.ssl_context,
        server_hostname=u.host,
        timeout=limit,
    )
    return engine, protocol, stream


async def _connect_once(
    options: ConnectOptions, factory: ProtocolFactory, limit: float
) -> Connection:
    """Connect to one target and wait for the open, within ``limit`` seconds."""
    u = options.url
    started = anyio.current_time()
    engine, protocol, stream = await _dial(options, factory, limit)
    conn = Connection(
        engine,
        stream,
        peer=peer_name(u.host, u.port),
        protocol=protocol,
        timeout=options.timeout,
        max_buffered=options.max_buffered,
    )
    engine.open()
    tg = anyio.create_task_group()
    await tg.__aenter__()
    try:
        tg.start_soon(conn._run)
        remaining = max(limit - (anyio.current_time() - started), 0.0)
        await conn._wait_open(remaining, limit)
    except BaseException as exc:
        await conn._settle_failure(exc)
        await tg.__aexit__(None, None, None)
        await conn._driver.close_if_unused()
        raise
    conn._tg = tg
    return conn
