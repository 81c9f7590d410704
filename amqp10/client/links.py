"""Sessions, senders, receivers and received deliveries of the async client.

These wrap the engine's endpoints (``amqp10.transport``); the connection's
event handler updates them, and the application awaits on them. Everything
runs in the connection's event loop: no locks, just wake-up signals.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Generator, Iterable
from typing import TYPE_CHECKING, Any

import anyio

from .. import errors
from ..io.driver import Signal
from ..message import Message
from ..transport import Delivery as EngineDelivery
from ..transport import IllegalStateError, LinkState, SessionState
from ..transport import Link as EngineLink
from ..transport import Receiver as EngineReceiver
from ..transport import Sender as EngineSender
from ..transport import Session as EngineSession
from ..types import Accepted, Error, Modified, Rejected, Released
from ..types.transactions import Declared, TransactionalState
from ._common import OUTCOMES, Outcome, Payload, deadline, describe_outcome, encode_payload

if TYPE_CHECKING:
    from .connection import Connection
    from .transactions import Transaction

__all__ = ["Delivery", "Link", "Receiver", "Sender", "Session", "Tracker"]

log = logging.getLogger("amqp10.client")

_LIVE_LINK = (LinkState.ATTACHED, LinkState.ATTACH_SENT)


class Session:
    """An AMQP session: a group of links sharing flow-control windows.

    Connections open a default session for links opened without one; open more
    with :meth:`Connection.session` (e.g. to isolate a slow consumer's window).
    """

    def __init__(self, conn: Connection, session: EngineSession, *, incoming: bool = False) -> None:
        self._conn = conn
        self._session = session
        session.context = self
        self._links: set[Link] = set()
        self._error: errors.AMQPError | None = None
        self._begun = incoming
        self._closing = False
        self.incoming = incoming
        """True for a session the peer began."""

    def __repr__(self) -> str:
        return f"<Session channel={self._session.channel} {self._session.state.name}>"

    @property
    def is_open(self) -> bool:
        return self._error is None and self._session.state is SessionState.MAPPED

    async def open_sender(self, address: str | None, **kwargs: Any) -> Sender:
        """Open a sender on this session (see :meth:`Connection.open_sender`)."""
        return await self._conn.open_sender(address, session=self, **kwargs)

    async def open_receiver(self, address: str | None, **kwargs: Any) -> Receiver:
        """Open a receiver on this session (see :meth:`Connection.open_receiver`)."""
        return await self._conn.open_receiver(address, session=self, **kwargs)

    async def close(self, *, timeout: float | None = None) -> None:
        """End the session (its links go with it) and wait for the peer's end."""
        conn = self._conn
        if conn._outage is not None and self._error is None:
            # the connection is being re-made: the old session is gone with it
            self._fail(errors.SessionError("the session is closed"))
        if self._error is None and conn._error is None and not self._closing:
            self._closing = True
            try:
                self._session.end()
            except IllegalStateError:
                pass
            conn._wake()
            try:
                with deadline(conn._timeout_for(timeout), "ending the session"):
                    while self._session.state is not SessionState.UNMAPPED and self._error is None:
                        await conn._changed.wait()
            finally:
                self._fail(errors.SessionError("the session is closed"))
        conn._sessions.discard(self)

    def _check_usable(self) -> None:
        if self._error is not None:
            raise self._error
        self._conn._check_open()

    def _rebind(self, session: EngineSession) -> None:
        """Take over a new engine session after a reconnect (its begin is queued)."""
        self._session = session
        session.context = self
        self._begun = False

    def _fail(self, error: errors.AMQPError, *, link_error: errors.AMQPError | None = None) -> None:
        if self._error is None:
            self._error = error
        for link in list(self._links):
            link._fail(
                link_error
                or errors.LinkDetached(f"the {link._what()} ended with its session ({error})")
            )
        if self._conn._default_session is self:
            self._conn._default_session = None
        self._conn._changed.fire()


class Link:
    """What senders and receivers share: name, address, state, closing."""

    kind = "link"

    def __init__(
        self,
        conn: Connection,
        session: Session,
        link: EngineLink,
        *,
        address: str | None,
        incoming: bool = False,
    ) -> None:
        self._conn = conn
        self._session = session
        self._link = link
        link.context = self
        self._address = address
        self.incoming = incoming
        """True for a link the peer attached (accepted by us)."""
        self._ready = incoming
        self._refused = False
        self._closing = False
        self._error: errors.AMQPError | None = None
        self._sig = Signal()
        session._links.add(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} address={self._address!r} {self._link.state.name}>"

    def _what(self) -> str:
        if self.kind == "sender":
            return f"sender to {self._address!r}"
        return f"receiver from {self._address!r}"

    @property
    def name(self) -> str:
        return self._link.name

    @property
    def address(self) -> str | None:
        """The node this link talks to (for a dynamic receiver: the address the peer assigned)."""
        return self._address

    @property
    def session(self) -> Session:
        return self._session

    @property
    def remote_source(self) -> Any:
        return self._link.remote_source

    @property
    def remote_target(self) -> Any:
        return self._link.remote_target

    @property
    def is_open(self) -> bool:
        return self._error is None and self._link.state is LinkState.ATTACHED

    @property
    def error(self) -> errors.AMQPError | None:
        """Why the link stopped (``LinkDetached`` after a clean close), or None while open."""
        return self._error

    def _check_usable(self) -> None:
        if self._error is not None:
            raise self._error
        self._conn._check_open()

    @property
    def _dynamic(self) -> bool:
        """We asked the peer for a dynamic node: its address dies with the connection."""
        link = self._link
        terminus = link.target if isinstance(link, EngineSender) else link.source
        return bool(getattr(terminus, "dynamic", False))

    # -- reconnecting -------------------------------------------------------------------
    def _link_options(self) -> dict[str, Any]:
        """What the link was created with, for its re-attach under the same name."""
        old = self._link
        return {
            "source": old.source,
            "target": old.target,
            "snd_settle_mode": old.snd_settle_mode,
            "rcv_settle_mode": old.rcv_settle_mode,
            "max_message_size": old.max_message_size,
            "properties": old.properties,
            "offered_capabilities": old.offered_capabilities,
            "desired_capabilities": old.desired_capabilities,
        }

    def _adopt(self, link: EngineLink) -> None:
        self._link = link
        link.context = self
        self._ready = False
        self._refused = False

    def _reattach(self, session: EngineSession) -> int:
        """Re-create the link on a new session and attach it; return the unsettled sends offered."""
        raise NotImplementedError

    # -- engine events (from the connection) ------------------------------------------
    def _on_attached(self) -> None:
        link = self._link
        terminus = link.remote_target if isinstance(link, EngineSender) else link.remote_source
        if terminus is None:
            self._refused = True  # §2.6.3: a detach with the reason follows
        else:
            self._ready = True
        self._sig.fire()

    def _on_detached(self, error: Error | None, *, closed: bool, failed: bool = False) -> None:
        if self._closing:
            exc: errors.AMQPError = errors.LinkDetached(f"{self._what()} is closed")
        elif self._refused or not self._ready:
            exc = errors.LinkError.from_error(
                f"the peer refused the {self._what()}", error, default="no reason given"
            )
        elif failed:
            exc = errors.LinkError.from_error(f"{self._what()} failed", error)
        elif error is not None:
            exc = errors.LinkError.from_error(f"{self._what()} detached by the peer", error)
        else:
            how = "closed" if closed else "detached"
            exc = errors.LinkDetached(f"{self._what()} {how} by the peer")
        self._fail(exc)

    def _fail(self, error: errors.AMQPError) -> None:
        if self._error is None:
            self._error = error
        self._session._links.discard(self)
        self._sig.fire()
        self._conn._changed.fire()

    # -- verbs --------------------------------------------------------------------------
    async def close(self, error: Error | None = None, *, timeout: float | None = None) -> None:
        """Close the link (detach with closed=true) and wait for the peer's answer."""
        await self._detach(error, closed=True, timeout=timeout)

    async def detach(self, error: Error | None = None, *, timeout: float | None = None) -> None:
        """Detach without closing (the peer keeps the link's state, e.g. a durable subscription)."""
        await self._detach(error, closed=False, timeout=timeout)

    async def _detach(self, error: Error | None, *, closed: bool, timeout: float | None) -> None:
        conn = self._conn
        if self._error is not None or conn._error is not None or conn._outage is not None:
            self._fail(errors.LinkDetached(f"{self._what()} is closed"))
            return
        self._closing = True
        self._before_close()
        link = self._link
        try:
            link.detach(error, closed=closed)
        except IllegalStateError:
            pass
        conn._wake()
        try:
            with deadline(conn._timeout_for(timeout), f"closing the {self._what()}"):
                while (
                    link.state is not LinkState.DETACHED
                    and self._error is None
                    and conn._error is None
                ):
                    await self._sig.wait()
        finally:
            self._fail(errors.LinkDetached(f"{self._what()} is closed"))

    def _before_close(self) -> None:
        """Hook: settle or release what the link holds before its detach goes out."""

    async def __aenter__(self) -> Link:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self.close(timeout=self._conn._close_timeout())
            except errors.AMQPError:
                pass


class Tracker:
    """A message given to :meth:`Sender.submit`, and its outcome once the peer settles it.

    ``await tracker`` (or :meth:`wait`, with a timeout) returns the outcome, or
    None for a pre-settled message once it is written; it raises what failed the
    send. :attr:`done` tells without waiting, and :meth:`result` reads it then.

    ``delivery`` is the engine delivery carrying the message now: a reconnect
    replaces it with the one on the re-attached link. ``payload`` is kept to
    send the message again if resumption aborts it. The wake-up event is made
    only when somebody waits on an unsettled send: a pipelining producer that
    looks at :attr:`done` first pays for none.
    """

    __slots__ = (
        "_event", "_mark", "_sender", "delivery", "done", "error", "outcome", "payload", "settled",
    )  # fmt: skip

    def __init__(
        self,
        delivery: EngineDelivery | None = None,
        payload: bytes = b"",
        sender: Sender | None = None,
        settled: bool | None = None,
    ) -> None:
        self.done = False  # the outcome (or the error) is in
        self.outcome: Any = None
        self.error: errors.AMQPError | None = None
        self.delivery = delivery
        self.payload = payload
        self.settled = settled  # as asked of submit(), for a send deferred by a reconnect
        self._sender = sender
        self._event: anyio.Event | None = None
        self._mark: tuple[Any, int] | None = None  # pre-settled: (driver, flush mark) once queued

    def __repr__(self) -> str:
        if not self.done:
            return "<Tracker waiting>"
        if self.error is not None:
            return f"<Tracker failed: {self.error}>"
        return f"<Tracker {describe_outcome(self.outcome) if self.outcome is not None else 'sent'}>"

    def resolve(self, outcome: Any) -> None:
        if not self.done:
            self.outcome = outcome
            self._finish()

    def fail(self, error: errors.AMQPError) -> None:
        if not self.done:
            self.error = error
            self._finish()

    def _finish(self) -> None:
        self.done = True
        if self._sender is not None:
            self._sender._pending.discard(self)
        if self._event is not None:
            self._event.set()

    def result(self) -> Outcome | None:
        """The outcome (None if sent pre-settled); raises what failed the send, or
        :class:`~amqp10.errors.IllegalStateError` while it is still waiting."""
        if not self.done:
            raise errors.IllegalStateError("the send is still waiting for its outcome")
        if self.error is not None:
            raise self.error
        return self.outcome  # type: ignore[no-any-return]

    async def _settled(self) -> None:
        """Until :attr:`done`: no scheduling point if it already is."""
        if not self.done:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()

    async def wait(self, timeout: float | None = None) -> Outcome | None:
        """The outcome, once the peer settles the message (see :meth:`Sender.send`).

        Waits at most ``timeout`` seconds (the connection's default when None).
        Cancelling the wait or timing out withdraws the message, as for
        :meth:`Sender.send`.
        """
        sender = self._sender
        if sender is None:
            raise errors.IllegalStateError("not a tracker of a send")
        limit = sender._conn._timeout_for(timeout)
        await sender._outcome_of(self, limit, limit)
        return self.result()

    def __await__(self) -> Generator[Any, None, Outcome | None]:
        return self.wait().__await__()


class Sender(Link):
    """Sends messages; :meth:`send` returns the peer's outcome."""

    kind = "sender"
    _link: EngineSender

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: set[Tracker] = set()  # sends waiting for an outcome
        self._deferred: list[Tracker] = []  # submitted while the connection was being re-made
        self._unsent: deque[EngineDelivery] = deque()  # pre-settled, waiting for credit
        self._carried: list[EngineDelivery] = []  # offered for resumption by the last re-attach

    @property
    def credit(self) -> int:
        """Deliveries the peer lets us send right now."""
        return self._link.credit

    @property
    def queued(self) -> int:
        """Messages given to :meth:`send` and not yet written (waiting for credit)."""
        return self._link.queued

    async def __aenter__(self) -> Sender:
        return self

    async def send(
        self,
        message: Payload,
        *,
        settled: bool | None = None,
        timeout: float | None = None,
        txn: Transaction | None = None,
    ) -> Outcome | None:
        """Send a message; return its outcome once the peer settles it.

        ``message`` is a :class:`~amqp10.Message` or the bytes of an encoded
        message. ``settled=True`` sends it pre-settled (at most once): the call
        returns None once the message is written. The default follows the link's
        settle mode (pre-settled only for ``AT_MOST_ONCE``).

        Waits for credit and then for the outcome, at most ``timeout`` seconds
        (the connection's default when None). Cancelling or timing out before
        the message went out withdraws it (an aborted transfer if it was half
        written); after that, the outcome is settled and ignored when it comes.

        With a reconnect policy, a send waiting for its outcome when the
        connection drops carries on over the new connection (resumed, or sent
        again: at least once), and a send made while it is being re-made waits
        for it; both within ``timeout``.

        With ``txn`` the message is posted in that transaction (Part 4 §4.4.1):
        the outcome is the one the peer gives within it (accepted), and the
        message only reaches its node when the transaction commits.

        One message at a time per task; to keep many in flight from one task,
        :meth:`submit` them and await the trackers.
        """
        payload = encode_payload(message)
        self._check_usable()
        conn = self._conn
        limit = left = conn._timeout_for(timeout)
        if conn._policy is not None and not conn._usable():
            started = anyio.current_time()
            await conn._until_usable(limit, f"send to {self._address!r}")
            self._check_usable()
            left = max(limit - (anyio.current_time() - started), 0.0)
        if txn is None:
            tracker = self._submit(payload, settled)
        else:
            tracker = self._submit(payload, settled, txn._state_for(conn))
        await self._outcome_of(tracker, left, limit)
        return tracker.result()

    def submit(
        self, message: Payload, *, settled: bool | None = None, txn: Transaction | None = None
    ) -> Tracker:
        """Send a message without waiting: the returned :class:`Tracker` gets its outcome.

        The pipelined form of :meth:`send`, for one task keeping many messages
        in flight: the message is queued at once (written as the peer's credit
        allows, in order with the other sends of this link) and nothing here
        yields. ``await tracker`` returns the outcome. Messages queue without
        bound: bound them yourself, e.g. by awaiting the oldest tracker once
        some number are in flight (:attr:`queued` counts those waiting for credit).

        With a reconnect policy, a message submitted while the connection is
        being re-made goes out on the re-attached link. ``txn``: posted in a
        transaction, as for :meth:`send`.
        """
        payload = encode_payload(message)
        self._check_usable()
        conn = self._conn
        if txn is not None:
            state = txn._state_for(conn)
            if conn._policy is not None and not conn._usable():
                raise errors.IllegalStateError("a transaction does not outlive its connection")
            return self._submit(payload, settled, state)
        if conn._policy is not None and not conn._usable():
            tracker = Tracker(None, payload, self, settled)
            self._deferred.append(tracker)
            self._pending.add(tracker)
            return tracker
        return self._submit(payload, settled)

    async def pipeline(
        self,
        messages: Iterable[Payload],
        *,
        window: int,
        settled: bool | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[Outcome | None]:
        """Send ``messages`` with up to ``window`` in flight; yield each outcome, in order.

        The oldest send is awaited (at most ``timeout`` seconds, as
        :meth:`Tracker.wait`) only when the window is full, and the next message
        is taken from ``messages`` only once there is room: an iterator that
        stops (say, after a refusal it was told of) stops the sending, and the
        outcomes of what is in flight still come. Use it inside
        ``contextlib.aclosing`` if you may stop iterating early.
        """
        if window < 1:
            raise ValueError("window must be at least 1")
        in_flight: deque[Tracker] = deque()
        source = iter(messages)
        try:
            while True:
                while len(in_flight) >= window:
                    yield await in_flight.popleft().wait(timeout)
                message = next(source, None)
                if message is None:
                    break
                in_flight.append(self.submit(message, settled=settled))
            while in_flight:
                yield await in_flight.popleft().wait(timeout)
        finally:
            for tracker in in_flight:  # nobody will wait for these: withdraw what did not go out
                self._withdraw(tracker)

    def _submit(self, payload: bytes, settled: bool | None, state: Any = None) -> Tracker:
        try:
            if state is None:
                d = self._link.send(payload, settled=settled)
            else:
                d = self._link.send(payload, settled=settled, state=state)
        except IllegalStateError as exc:
            raise errors.IllegalStateError(f"cannot send on the {self._what()}: {exc}") from None
        tracker = Tracker(d, payload, self, settled)
        self._track(d, tracker)
        self._conn._wake()
        return tracker

    def _track(self, d: EngineDelivery, tracker: Tracker) -> None:
        """``d`` carries ``tracker``'s message now."""
        d.context = tracker
        tracker.delivery = d
        if d.settled:
            if d.sent:
                self._written_out(tracker)
            else:
                self._unsent.append(d)
                self._conn._waiting_senders.add(self)
        else:
            self._pending.add(tracker)

    async def _outcome_of(self, tracker: Tracker, left: float, limit: float) -> None:
        """Wait for ``tracker``'s outcome; withdraw the send if cancelled or timed out."""
        conn = self._conn
        try:
            with deadline(left, f"send to {self._address!r}", limit):
                await tracker._settled()
                pd = tracker.delivery
                # a pre-settled send returns once written; once the peer has settled the
                # delivery (its outcome came), nothing of ours is left to write: no flush
                if pd is not None and pd.settled and not pd.remote_settled:
                    if tracker.error is None and conn._outage is None:
                        driver, mark = tracker._mark or (None, None)
                        try:
                            await conn._driver.flush(mark if driver is conn._driver else None)
                        except errors.ConnectionError:
                            if conn._policy is None:
                                raise  # with a policy: at most once, as pre-settled means
        except BaseException as exc:
            self._withdraw(tracker)
            if isinstance(exc, errors.TimeoutError):
                sent = tracker.delivery is not None and tracker.delivery.sent
                why = "waiting for the peer's outcome" if sent else "no credit from the peer"
                raise errors.TimeoutError(
                    f"send to {self._address!r} timed out after {limit:g}s ({why})"
                ) from None
            raise

    def _withdraw(self, pending: Tracker) -> None:
        """Take back a send the application stopped waiting for."""
        if pending.done:
            return
        pending.fail(errors.IllegalStateError("the send was withdrawn"))
        d = pending.delivery
        if d is None:  # deferred by a reconnect
            try:
                self._deferred.remove(pending)
            except ValueError:
                pass
            return
        if not d.sent and not d.aborted and d.link is self._link:
            try:
                d.abort()
            except IllegalStateError:
                pass
            self._conn._wake()
        try:
            self._unsent.remove(d)
        except ValueError:
            pass

    # -- reconnecting -------------------------------------------------------------------
    def _reattach(self, session: EngineSession) -> int:
        """Attach under the same name, offering the unsettled sends for resumption (§2.6.13).

        Pre-settled messages that had not gone out are queued again as new
        deliveries, then the messages submitted during the outage; sends nobody
        waits for any more are dropped.
        """
        old = self._link
        carried = [d for d in old.unsettled.values() if _waited_for(d)]
        unsent = [d for d in self._unsent if not d.sent and not d.aborted and _waited_for(d)]
        link = session.sender(
            old.name,
            resume_deliveries=carried if carried else None,
            **self._link_options(),
        )
        self._adopt(link)
        self._carried = list(link.unsettled.values())
        for d in self._carried:
            if isinstance(d.context, Tracker):
                d.context.delivery = d
        link.attach()
        self._unsent = deque()
        for d in unsent:
            nd = link.send(d.payload, settled=True, message_format=d.message_format)
            nd.context = d.context
            d.context.delivery = nd
            self._unsent.append(nd)
        if self._unsent:
            self._conn._waiting_senders.add(self)
        deferred, self._deferred = self._deferred, []
        for tracker in deferred:
            self._track(link.send(tracker.payload, settled=tracker.settled), tracker)
        return len(carried)

    def _on_attached(self) -> None:
        super()._on_attached()
        carried, self._carried = self._carried, []
        if carried and self._ready:
            remote = self._link.remote_attach
            resumed = sum(1 for d in carried if d.resumed)
            log.info(
                "%s re-attached: of %d unsettled sends, %d resumed, %d sent again%s",
                self._what(),
                len(carried),
                resumed,
                len(carried) - resumed,
                ""
                if remote is not None and remote.unsettled is not None
                else " (the peer keeps no unsettled state)",
            )

    # -- from the connection --------------------------------------------------------------
    def _on_update(self, d: EngineDelivery, settled: bool) -> None:
        state = d.remote_state
        if not isinstance(state, OUTCOMES):
            if isinstance(state, TransactionalState):
                state = state.outcome  # posted in a transaction (§4.4.1): its outcome there
                if not (settled or isinstance(state, OUTCOMES)):
                    return
            elif not (settled or isinstance(state, Declared)):
                return  # a non-terminal state (received): keep waiting
        if not d.settled:
            try:
                d.settle()
            except IllegalStateError:
                pass
            self._conn._wake()
        pending = d.context
        if isinstance(pending, Tracker):
            pending.resolve(state)

    def _on_aborted(self, d: EngineDelivery) -> None:
        """Resumption aborted a delivery (§2.6.13): send the message again, as a new one."""
        pending = d.context
        if not isinstance(pending, Tracker) or pending.done:
            return
        try:
            nd = self._link.send(pending.payload, settled=False, message_format=d.message_format)
        except IllegalStateError as exc:
            pending.fail(
                errors.LinkError(f"cannot send the message again on the {self._what()}: {exc}")
            )
            return
        nd.context = pending
        pending.delivery = nd
        self._conn._wake()

    def _after_io(self) -> bool:
        """Resolve pre-settled sends that went out; True while some still wait for credit."""
        unsent = self._unsent
        while unsent and (unsent[0].sent or unsent[0].aborted):
            pending = unsent.popleft().context
            if isinstance(pending, Tracker):
                self._written_out(pending)
        return bool(unsent)

    def _written_out(self, tracker: Tracker) -> None:
        """A pre-settled send is in the engine's output: done once that is written."""
        driver = self._conn._driver
        tracker._mark = (driver, driver.flush_mark)
        tracker.resolve(None)

    def _fail(self, error: errors.AMQPError) -> None:
        first = self._error is None
        super()._fail(error)
        if first:
            for pending in list(self._pending):
                pending.fail(self._error or error)
            self._deferred.clear()
            for d in self._unsent:
                if isinstance(d.context, Tracker):
                    d.context.fail(self._error or error)
            self._unsent.clear()


def _waited_for(d: EngineDelivery) -> bool:
    """A send's delivery whose ``send()`` still waits for it (worth carrying over)."""
    return isinstance(d.context, Tracker) and not d.context.done


class Delivery:
    """A message received on a :class:`Receiver`, and the verbs to settle it.

    ``payload`` is the encoded message; ``message`` decodes it (once, on first
    use). Settle with :meth:`accept`, :meth:`reject`, :meth:`release` or
    :meth:`modify` (for a message the sender pre-settled these only settle it
    locally: the sender does not want an outcome).
    """

    __slots__ = ("_d", "_message", "_receiver")

    def __init__(self, receiver: Receiver, delivery: EngineDelivery) -> None:
        self._receiver = receiver
        self._d = delivery
        self._message: Message | None = None

    def __repr__(self) -> str:
        return (
            f"<Delivery tag={self._d.tag!r} size={len(self._d.payload)} settled={self._d.settled}>"
        )

    @property
    def payload(self) -> bytes:
        return self._d.payload

    @property
    def message(self) -> Message:
        """The decoded message (raises ``amqp10.types.DecodeError`` if it is malformed)."""
        if self._message is None:
            self._message = Message.decode(self._d.payload)
        return self._message

    @property
    def tag(self) -> bytes:
        return self._d.tag

    @property
    def receiver(self) -> Receiver:
        return self._receiver

    @property
    def settled(self) -> bool:
        """True once we settled it (for rcv-settle-mode second: once the sender settled too)."""
        return self._d.settled

    @property
    def remote_settled(self) -> bool:
        """True if the sender settled it (pre-settled: at most once)."""
        return self._d.remote_settled

    @property
    def state(self) -> Any:
        """The outcome we gave it, if any."""
        return self._d.state

    async def accept(self, *, txn: Transaction | None = None) -> None:
        await self.settle(Accepted(), txn=txn)

    async def reject(self, error: Error | None = None, *, txn: Transaction | None = None) -> None:
        await self.settle(Rejected(error=error), txn=txn)

    async def release(self, *, txn: Transaction | None = None) -> None:
        await self.settle(Released(), txn=txn)

    async def modify(
        self,
        *,
        delivery_failed: bool = True,
        undeliverable_here: bool = False,
        message_annotations: dict[Any, Any] | None = None,
        txn: Transaction | None = None,
    ) -> None:
        await self.settle(
            Modified(
                delivery_failed=delivery_failed,
                undeliverable_here=undeliverable_here,
                message_annotations=message_annotations,
            ),
            txn=txn,
        )

    async def settle(self, state: Any = None, *, txn: Transaction | None = None) -> None:
        """Settle with ``state`` as the outcome (None: settle without one).

        With ``txn`` the outcome is given within that transaction (Part 4
        §4.4.2): the peer applies it when the transaction commits; a rollback
        gives the message back to its node.
        """
        if txn is not None:
            state = txn._outcome_state(self._receiver._conn, state)
        self._receiver._settle(self._d, state)
        await anyio.lowlevel.checkpoint()


DeliveryHook = Callable[["Receiver", EngineDelivery], None]


class Receiver(Link):
    """Receives messages: ``async for delivery in receiver`` or :meth:`receive`.

    With a credit window (``credit=N`` at open, the default 100) the receiver
    keeps the sender supplied: it tops the credit back up to N as the
    application takes deliveries. With ``credit=0`` the application grants
    credit itself (:meth:`add_credit`) and may :meth:`drain` it.
    """

    kind = "receiver"
    _link: EngineReceiver

    def __init__(
        self,
        *args: Any,
        window: int = 100,
        auto_accept: bool = False,
        on_delivery: DeliveryHook | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._window = window
        self._auto_accept = auto_accept
        self._on_delivery = on_delivery
        self._buffer: deque[EngineDelivery] = deque()
        self._links: list[EngineReceiver] = [
            self._link
        ]  # more when the peer attaches to our address
        self._held: dict[EngineLink, int] = {}
        self._draining = False
        self._owed = 0  # credit granted while the connection was being re-made

    async def __aenter__(self) -> Receiver:
        return self

    @property
    def credit(self) -> int:
        """Credit the sender still has from us (on the main link)."""
        return self._link.credit

    @property
    def buffered(self) -> int:
        """Deliveries received and not yet taken by the application."""
        return len(self._buffer)

    # -- taking deliveries ----------------------------------------------------------------
    def __aiter__(self) -> Receiver:
        return self

    async def __anext__(self) -> Delivery:
        """The next delivery; the iteration ends once the link is closed and drained of them."""
        while not self._buffer:
            if self._error is not None or self._conn._error is not None:
                raise StopAsyncIteration
            self._replenish()
            await self._sig.wait()
        return self._take()

    async def receive(self, *, timeout: float | None = None) -> Delivery:
        """The next delivery, waiting at most ``timeout`` seconds.

        Raises the link's (or connection's) error once it is closed and nothing
        is buffered. Cancelling takes nothing off the buffer.
        """
        if not self._buffer:
            conn = self._conn
            with deadline(conn._timeout_for(timeout), f"receive from {self._address!r}"):
                while not self._buffer:
                    self._check_usable()
                    self._replenish()
                    await self._sig.wait()
        return self._take()

    def _take(self) -> Delivery:
        d = self._buffer.popleft()
        link = d.link
        self._held[link] = self._held.get(link, 1) - 1
        self._conn._took(1)
        self._replenish()
        delivery = Delivery(self, d)
        if self._auto_accept and not d.settled:
            self._settle(d, Accepted())
        return delivery

    # -- credit -------------------------------------------------------------------------
    def add_credit(self, n: int) -> None:
        """Grant ``n`` more deliveries of credit (for receivers opened with ``credit=0``)."""
        self._check_usable()
        if n < 0:
            raise ValueError("credit must not be negative")
        if self._conn._outage is not None:
            self._owed += n  # granted on the re-attached link
            return
        link = self._link
        link.flow(link.credit + n, drain=False)
        self._conn._wake()

    async def drain(self, *, timeout: float | None = None) -> None:
        """Ask the sender to use its credit now or give it back; wait until it has.

        Deliveries sent to use up the credit land in the buffer as usual. With a
        credit window the window is restored as the application takes deliveries.
        """
        self._check_usable()
        conn = self._conn
        limit = conn._timeout_for(timeout)
        await conn._until_usable(limit, f"drain of the {self._what()}")
        link = self._link
        if link.credit == 0:
            return
        self._draining = True
        try:
            link.drain_credit()
            conn._wake()
            with deadline(limit, f"drain of the {self._what()}"):
                # a reconnect meanwhile ends the drain: the old link's credit is gone
                while link.credit > 0 and link is self._link and conn._outage is None:
                    self._check_usable()
                    await self._sig.wait()
        finally:
            self._draining = False

    def _replenish(self) -> None:
        window = self._window
        if (
            window <= 0
            or self._draining
            or self._error is not None
            or self._conn._outage is not None
        ):
            return
        wake = False
        for link in self._links:
            if link.state not in _LIVE_LINK:
                continue
            held = self._held.get(link, 0)
            if link.credit + held <= window // 2 and held < window:
                link.flow(window - held, drain=False)
                wake = True
        if wake:
            self._conn._wake()

    # -- settling -------------------------------------------------------------------------
    def _settle(self, d: EngineDelivery, state: Any) -> None:
        if d.settled:
            raise errors.IllegalStateError(f"delivery {d.tag!r} is already settled")
        conn = self._conn
        if (
            conn._policy is not None
            and conn._error is None
            and (conn._outage is not None or d.link not in self._links)
        ):
            # it came on a link lost with its connection: the peer gives an unsettled
            # message out again (at least once); settling here is all there is to do
            d.settled = True
            d.state = state
            if not d.remote_settled:
                log.debug("delivery %r came before a reconnect: the peer will redeliver it", d.tag)
            return
        if not d.remote_settled:
            link = d.link
            if link.state is not LinkState.ATTACHED or self._conn._error is not None:
                if self._conn._error is not None:
                    raise self._conn._error
                raise self._error or errors.LinkDetached(f"{self._what()} is detached")
        try:
            d.settle(state)
        except IllegalStateError as exc:
            raise errors.IllegalStateError(f"cannot settle delivery {d.tag!r}: {exc}") from None
        self._conn._wake()

    # -- reconnecting -------------------------------------------------------------------
    def _reattach(self, session: EngineSession) -> int:
        """Attach under the same name, offering what we hold unsettled (§2.6.13), and
        grant credit again.

        A peer that keeps link state (our broker does) resumes the link: outcomes
        we gave and could not see settled (rcv-settle-mode second) are applied
        there rather than the messages delivered again, and what we had not
        settled comes again once. Buffered messages the sender had not settled
        are dropped: the link they came on is gone, and the peer delivers them
        again (resumed, or anew from a peer that does not resume). Pre-settled
        ones stay.
        """
        old = self._link
        offered = {tag: d.state for tag, d in old.unsettled.items() if not d.settled}
        link = session.receiver(old.name, unsettled=offered or None, **self._link_options())
        self._adopt(link)
        kept = deque(d for d in self._buffer if d.remote_settled)
        dropped = len(self._buffer) - len(kept)
        self._buffer = kept
        if dropped:
            self._conn._took(dropped)
        self._links = [link]
        self._held = {}
        link.attach()
        credit = self._window if self._window > 0 else old.credit + self._owed
        self._owed = 0
        if credit > 0 and not self._draining:
            link.flow(credit)
        self._sig.fire()
        return 0

    # -- from the connection ------------------------------------------------------------
    def _add_link(self, link: EngineReceiver) -> None:
        """Merge another engine link (the peer attached to our address) into this receiver."""
        link.context = self
        self._links.append(link)
        self._replenish()

    def _deliver(self, d: EngineDelivery) -> None:
        if self._on_delivery is not None:
            self._on_delivery(self, d)
            self._replenish()
            return
        self._buffer.append(d)
        link = d.link
        self._held[link] = self._held.get(link, 0) + 1
        self._conn._buffered_more(1)
        self._sig.fire()

    def _on_flow(self) -> None:
        self._sig.fire()

    def _before_close(self) -> None:
        # give back what the application never took, so the sender can redeliver it
        for d in self._buffer:
            if not d.settled and not d.remote_settled and d.link.state is LinkState.ATTACHED:
                try:
                    d.release()
                except IllegalStateError:
                    pass
        self._conn._took(len(self._buffer))
        self._buffer.clear()
        self._held.clear()
