"""Sending: :class:`Sender` and the :class:`Tracker` of each message it sends."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncGenerator, Callable, Generator, Iterable
from functools import partial
from typing import Any

import anyio

from .. import errors
from ..transport import Delivery as EngineDelivery
from ..transport import IllegalStateError
from ..transport import Sender as EngineSender
from ..transport import Session as EngineSession
from ..types.transactions import Declared, TransactionalState
from . import _pipeline
from ._common import (
    OUTCOMES,
    Outcome,
    Payload,
    deadline,
    describe_outcome,
    encode_payload,
)
from .link import Link, TransactionLike

__all__ = ["Sender", "Tracker"]

log = logging.getLogger("amqp10.client")


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
        "_callbacks", "_event", "_mark", "_sender", "delivery", "done", "error", "outcome",
        "payload", "settled",
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
        self._callbacks: list[Callable[[Tracker], None]] | None = None

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
        callbacks, self._callbacks = self._callbacks, None
        if callbacks is not None:
            for callback in callbacks:
                callback(self)

    def add_done_callback(self, callback: Callable[[Tracker], None]) -> None:
        """Call ``callback(tracker)`` once :attr:`done` (at once if it already is).

        It runs in the event loop, from inside the connection's event handling:
        it must be quick and must not raise. For a pre-settled send, done means
        queued for writing; :meth:`Sender.flushed` waits until it is written.
        The blocking facade completes its trackers this way, without a task per
        message.
        """
        if self.done:
            callback(self)
        elif self._callbacks is None:
            self._callbacks = [callback]
        else:
            self._callbacks.append(callback)

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
        txn: TransactionLike | None = None,
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
        state = None if txn is None else txn._state_for(conn)
        # written at once when nothing else would share the write (Driver.batch): the
        # loop turn that a scheduled write costs is saved, since this task waits next
        tracker = conn._driver.batch(partial(self._submit, payload, settled, state))
        await self._outcome_of(tracker, left, limit)
        return tracker.result()

    def submit(
        self, message: Payload, *, settled: bool | None = None, txn: TransactionLike | None = None
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

    def pipeline(
        self,
        messages: Iterable[Payload],
        *,
        window: int,
        settled: bool | None = None,
        timeout: float | None = None,
    ) -> AsyncGenerator[Outcome | None, None]:
        """Send ``messages`` with up to ``window`` in flight; yield each outcome, in order.

        The oldest send is awaited (at most ``timeout`` seconds, as
        :meth:`Tracker.wait`) only when the window is full, and the next message
        is taken from ``messages`` only once there is room: an iterator that
        stops (say, after a refusal it was told of) stops the sending, and the
        outcomes of what is in flight still come. Use it inside
        ``contextlib.aclosing`` if you may stop iterating early.
        """
        return _pipeline.pipeline(self, messages, window, settled, timeout)

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
        if tracker.done and not self.unflushed(tracker):
            return  # nothing to wait for: no cancel scope (a pipeline mostly finds them done)
        try:
            with deadline(left, f"send to {self._address!r}", limit):
                await tracker._settled()
                if self.unflushed(tracker):
                    await self.flushed(tracker)
        except BaseException as exc:
            self._withdraw(tracker)
            if isinstance(exc, errors.TimeoutError):
                sent = tracker.delivery is not None and tracker.delivery.sent
                why = "waiting for the peer's outcome" if sent else "no credit from the peer"
                raise errors.TimeoutError(
                    f"send to {self._address!r} timed out after {limit:g}s ({why})"
                ) from None
            raise

    def unflushed(self, tracker: Tracker) -> bool:
        """True for a done pre-settled send whose bytes may not be written yet.

        Once the peer has settled the delivery (its outcome came), nothing of
        ours is left to write: no flush.
        """
        pd = tracker.delivery
        return (
            pd is not None
            and pd.settled
            and not pd.remote_settled
            and tracker.error is None
            and self._conn._outage is None
        )

    async def flushed(self, tracker: Tracker) -> None:
        """Wait until a done pre-settled send (see :meth:`unflushed`) is written out.

        Many waiters share one write. With a reconnect policy a connection lost
        meanwhile is not an error: pre-settled means at most once.
        """
        conn = self._conn
        driver, mark = tracker._mark or (None, None)
        try:
            await conn._driver.flush(mark if driver is conn._driver else None)
        except errors.ConnectionError:
            if conn._policy is None:
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
            if not d.remote_settled:  # (settled by the peer first: no disposition of ours)
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
