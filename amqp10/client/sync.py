"""The blocking facade: the async client without ``await``, for plain threads.

Each :func:`connect` makes an event loop and runs the async
:class:`~amqp10.client.Connection` in it; a blocking call runs that loop in the
caller's own thread until what it waits for is done (a keeper thread runs it
between calls; see :mod:`.syncloop`). The classes below only forward calls into
the loop and wrap what comes back. There is no second copy of any logic: fix the
async core and this follows.

A call into the loop (a task started there, run until done) costs more than
sending a message, so the fast paths cross once per batch: :meth:`Sender.submit`
queues without a round trip (the loop starts everything queued at once, see
:mod:`.syncloop`), trackers complete without one, :meth:`Sender.pipeline` is
built on the two, and :meth:`Receiver.fetch` / :meth:`Receiver.batches` take and
:meth:`Receiver.accept_all` settles a whole batch per call. The per-message
calls are built on the same: :meth:`Sender.send` is ``submit().wait()``,
:meth:`Receiver.receive` and the iteration hand out from a buffer refilled a
batch per round trip, and :meth:`Delivery.accept` (and the other verbs) queue
the settlement for the loop (see :class:`Delivery` for when it goes out).

>>> with amqp10.sync.connect("amqp://127.0.0.1") as conn:     # doctest: +SKIP
...     sender = conn.open_sender("queue")
...     for outcome in sender.pipeline(messages, window=1000):
...         ...
...     receiver = conn.open_receiver("queue", credit=1000)
...     for batch in receiver.batches(1000, idle=1.0):
...         receiver.accept_all(batch)

The blocking direct peer, :func:`amqp10.sync.serve`, is in :mod:`.syncserve`.
"""

from __future__ import annotations

import contextlib
import math
import ssl as _ssl
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from functools import partial
from types import TracebackType
from typing import Any, Generic, TypeVar

from .. import errors
from ..message import Message
from ..types import Accepted, Error, Rejected, Released
from . import connection as _conn
from . import link as _link
from . import management as _management
from . import opening as _opening
from . import receiver as _receiver
from . import sender as _sender
from . import sessions as _sessions
from . import transactions as _txn
from ._common import (
    DEFAULT_TIMEOUT,
    Outcome,
    Payload,
    SettleMode,
    describe_outcome,
    encode_payload,
    windowed,
)
from .claims import Claims
from .syncloop import Loop, Settlement, Tracker, start_loop, wait_send, withdraw_all
from .syncmanagement import Management

__all__ = [
    "Connection",
    "Delivery",
    "Management",
    "Receiver",
    "Sender",
    "Session",
    "Tracker",
    "Transaction",
    "connect",
]

T = TypeVar("T")
L = TypeVar("L", bound=_link.Link)  # the async link a _Link wraps (mypyc: one type of _link)


class _Proxy:
    __slots__ = ("_loop",)

    def __init__(self, loop: Loop) -> None:
        self._loop = loop

    def _run(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        result: T = self._loop.call(partial(fn, *args, **kwargs))
        return result


class Delivery(_Proxy):
    """A received message (see :class:`amqp10.client.Delivery`).

    :meth:`accept`, :meth:`reject`, :meth:`release`, :meth:`modify` and
    :meth:`settle` queue the outcome and return at once: the event loop applies
    queued outcomes a batch at a time, in the order they were given, and before
    any later blocking call on the connection starts (a commit, a close). The
    disposition then goes out with the connection's next write, as the async
    ``await delivery.accept()`` does. A settlement that fails in the loop (the
    link was lost meanwhile: the sender gives the message out again) is raised
    by the receiver's next :meth:`Receiver.flush`. ``wait=True`` settles in a
    round trip instead and raises what fails there.
    """

    __slots__ = ("_d", "_queued", "_receiver")

    def __init__(self, receiver: Receiver, delivery: _receiver.Delivery) -> None:
        self._loop = receiver._loop
        self._receiver = receiver
        self._d = delivery
        self._queued = False  # an outcome is queued for the loop

    def __repr__(self) -> str:
        return repr(self._d)

    @property
    def payload(self) -> bytes:
        return self._d.payload

    @property
    def message(self) -> Message:
        return self._d.message

    @property
    def tag(self) -> bytes:
        return self._d.tag

    @property
    def settled(self) -> bool:
        """True once the loop settled it (see :attr:`amqp10.client.Delivery.settled`)."""
        return self._d.settled

    @property
    def remote_settled(self) -> bool:
        return self._d.remote_settled

    def accept(self, *, txn: Transaction | None = None, wait: bool = False) -> None:
        self.settle(Accepted(), txn=txn, wait=wait)

    def reject(
        self, error: Error | None = None, *, txn: Transaction | None = None, wait: bool = False
    ) -> None:
        self.settle(Rejected(error=error), txn=txn, wait=wait)

    def release(self, *, txn: Transaction | None = None, wait: bool = False) -> None:
        self.settle(Released(), txn=txn, wait=wait)

    def modify(self, *, txn: Transaction | None = None, wait: bool = False, **kwargs: Any) -> None:
        """Modified (see :meth:`amqp10.client.Delivery.modify` for ``kwargs``)."""
        self.settle(_receiver.modified(**kwargs), txn=txn, wait=wait)

    def settle(
        self, state: Any = None, *, txn: Transaction | None = None, wait: bool = False
    ) -> None:
        """Settle with ``state`` as the outcome: queued, or with ``wait=True`` in a round trip.

        Settling twice raises :class:`~amqp10.errors.IllegalStateError` here.
        """
        if self._queued or self._d.settled:
            raise errors.IllegalStateError(f"delivery {self._d.tag!r} is already settled")
        self._queued = True
        if wait:
            self._run(_settle_now, self._d, state, _inner(txn))
        else:
            self._loop.post(Settlement(self._d, state, _inner(txn), self._receiver._failed))


async def _settle_now(
    delivery: _receiver.Delivery, state: Any, txn: _txn.Transaction | None
) -> None:
    delivery.settle_nowait(state, txn=txn)


class _Link(_Proxy, Generic[L]):
    __slots__ = ("_link",)

    def __init__(self, loop: Loop, link: L) -> None:
        super().__init__(loop)
        self._link = link

    def __repr__(self) -> str:
        return repr(self._link)

    @property
    def name(self) -> str:
        return self._link.name

    @property
    def address(self) -> str | None:
        return self._link.address

    @property
    def is_open(self) -> bool:
        return self._link.is_open

    @property
    def incoming(self) -> bool:
        return self._link.incoming

    @property
    def kind(self) -> str:
        return self._link.kind

    def close(self, error: Error | None = None, *, timeout: float | None = None) -> None:
        self._run(self._link.close, error, timeout=timeout)

    def detach(self, error: Error | None = None, *, timeout: float | None = None) -> None:
        self._run(self._link.detach, error, timeout=timeout)

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


DEFERRED_WINDOW = 1000
"""At most this many ``send(wait=False)`` of one sender wait for their outcome at once."""


class Sender(_Link[_sender.Sender]):
    """Sends messages (see :class:`amqp10.client.Sender`).

    :meth:`send` waits for each message's outcome; ``send(message, wait=False)``
    returns once the message is queued and checks the outcome later (see
    :meth:`flush`).
    """

    __slots__ = ("_deferred",)

    def __init__(self, loop: Loop, link: _sender.Sender) -> None:
        super().__init__(loop, link)
        # sends made with wait=False whose outcome nobody has looked at yet, oldest first
        self._deferred: deque[Tracker] = deque()

    @property
    def credit(self) -> int:
        return self._link.credit

    @property
    def queued(self) -> int:
        return self._link.queued

    def send(
        self,
        message: Payload,
        *,
        settled: bool | None = None,
        timeout: float | None = None,
        txn: Transaction | None = None,
        wait: bool = True,
    ) -> Outcome | None:
        """Send a message; return its outcome once the peer settles it (see
        :meth:`amqp10.client.Sender.send`).

        The message is encoded here; while no other thread runs the event loop,
        this thread takes it, starts the async send itself and runs the loop until
        the async tracker has the outcome (no job queued, no task made per call,
        no other thread woken); otherwise, as :meth:`submit` and
        :meth:`Tracker.wait`. Timing out withdraws the message, as there.

        ``wait=False`` returns None once the message is queued, without waiting
        for its outcome (the cost of a message in :meth:`pipeline`): the outcome
        is checked later, in order. This call and :meth:`flush` first raise for
        the oldest earlier ``wait=False`` send found to have failed: what failed
        it (the link or connection lost, a timeout), or
        :class:`~amqp10.errors.DeliveryError` (with ``outcome``) if the peer did
        not accept it. Up to :data:`DEFERRED_WINDOW` wait at once; one more
        waits (at most ``timeout``) for the oldest. Call :meth:`flush` (or close
        the sender) to know they all went through. Make the ``wait=False`` sends
        of one sender from one thread at a time: their outcomes are the sender's.
        """
        if wait:
            payload = encode_payload(message)
            self._link._check_usable()
            return wait_send(self._loop, self._link, payload, settled, _inner(txn), timeout)
        deferred = self._deferred
        while deferred and (deferred[0].done or len(deferred) >= DEFERRED_WINDOW):
            _check_deferred(deferred.popleft(), timeout)
        deferred.append(self.submit(message, settled=settled, txn=txn))
        return None

    def flush(self, *, timeout: float | None = None) -> None:
        """Wait for the outcomes of the ``send(wait=False)`` made so far, in order.

        Raises for the first that failed or was not accepted, as
        :meth:`send` does (the ones after it are still waited for, and any
        other failure among them is dropped: the first says the batch did not
        all go through). ``timeout`` bounds each wait, as for :meth:`send`; a
        timeout raises at once and withdraws that message, and the sends after
        it are left for the next flush.
        """
        deferred = self._deferred
        first: Exception | None = None
        while deferred:
            tracker = deferred.popleft()
            try:
                _check_deferred(tracker, timeout)
            except errors.TimeoutError:
                raise
            except errors.AMQPError as exc:
                first = first or exc
        if first is not None:
            raise first

    def close(self, error: Error | None = None, *, timeout: float | None = None) -> None:
        """Close the link, after waiting for the outcomes of the ``send(wait=False)``
        (raising for the first that failed, once the link is closed)."""
        self._after_flush(super().close, error, timeout)

    def detach(self, error: Error | None = None, *, timeout: float | None = None) -> None:
        self._after_flush(super().detach, error, timeout)

    def _after_flush(
        self, end: Callable[..., None], error: Error | None, timeout: float | None
    ) -> None:
        try:
            if self._deferred and self._loop.closed is None:
                self.flush(timeout=timeout)
        finally:
            end(error, timeout=timeout)

    def submit(
        self, message: Payload, *, settled: bool | None = None, txn: Transaction | None = None
    ) -> Tracker:
        """Send without waiting for the outcome (see :meth:`amqp10.client.Sender.submit`).

        No round trip to the event loop: the message is encoded here and queued,
        and the loop sends everything queued at once when it next runs. Sends
        go out in the order they were submitted, from any number of threads.
        A link or connection already known to be closed raises here; what fails
        later fails the tracker.
        """
        payload = encode_payload(message)
        self._link._check_usable()
        tracker = Tracker(self._loop, self._link, payload, settled, _inner(txn))
        self._loop.post(tracker)
        return tracker

    def pipeline(
        self,
        messages: Iterable[Payload],
        *,
        window: int,
        settled: bool | None = None,
        timeout: float | None = None,
    ) -> Iterator[Outcome | None]:
        """Send ``messages`` with up to ``window`` in flight; yield each outcome, in order.

        As :meth:`amqp10.client.Sender.pipeline`, with :meth:`submit` and
        :meth:`Tracker.wait`: the calling thread only meets the event loop when
        it has to wait for the oldest outcome. ``messages`` is read in the
        calling thread, one message once there is room. Stopping early (close
        the generator, or leave a ``with contextlib.closing(...)`` block)
        withdraws what did not go out.
        """
        in_flight: deque[Tracker] = deque()
        submit = partial(self.submit, settled=settled)
        try:
            for tracker in windowed(messages, window, submit, in_flight):
                yield tracker.wait(timeout)
        finally:
            waiting = [t for t in in_flight if not t.done]
            if waiting and self._loop.closed is None:
                self._run(withdraw_all, waiting)


class Transaction(_Proxy):
    """A local transaction (see :meth:`amqp10.client.Connection.transaction`).

    ``with conn.transaction() as txn:`` declares it, commits at the end of the
    block and rolls back (re-raising) if the block raises; :meth:`commit` and
    :meth:`rollback` end it explicitly.
    """

    __slots__ = ("_t",)

    def __init__(self, loop: Loop, txn: _txn.Transaction) -> None:
        super().__init__(loop)
        self._t = txn

    def __repr__(self) -> str:
        return repr(self._t)

    @property
    def txn_id(self) -> bytes | None:
        return self._t.txn_id

    @property
    def state(self) -> str:
        return self._t.state

    def declare(self) -> Transaction:
        self._run(self._t.declare)
        return self

    def commit(self) -> None:
        self._run(self._t.commit)

    def rollback(self) -> None:
        self._run(self._t.rollback)

    def __enter__(self) -> Transaction:
        self._run(self._t.__aenter__)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._run(self._t.__aexit__, exc_type, exc, tb)


def _check_deferred(tracker: Tracker, timeout: float | None) -> None:
    """Wait for the outcome of a ``send(wait=False)``; raise if it did not go through."""
    outcome = tracker.wait(timeout)
    if outcome is not None and not isinstance(outcome, Accepted):
        raise errors.DeliveryError(
            f"a message sent with wait=False was {describe_outcome(outcome)}", outcome=outcome
        )


def _inner(txn: Transaction | None) -> _txn.Transaction | None:
    return None if txn is None else txn._t


class Receiver(_Link[_receiver.Receiver]):
    """Receives messages: ``for delivery in receiver`` (see :class:`amqp10.client.Receiver`).

    :meth:`receive` and the iteration hand out deliveries from a buffer of this
    thread's side: when it is empty one round trip into the event loop takes
    everything that has arrived (up to the credit window), and the async
    receiver tops its credit back up there, so the broker keeps sending while
    this thread works through the batch. This side may so hold up to one
    window more than the credit; what it still holds when the link closes is
    released, for the sender to give out again. A receiver opened with
    ``auto_accept=True`` takes one delivery per round trip (each is accepted as
    it is taken).
    """

    __slots__ = ("_batch", "_failure", "_local")

    def __init__(self, loop: Loop, link: _receiver.Receiver) -> None:
        super().__init__(loop, link)
        # how many deliveries one round trip takes at most
        self._batch = 1 if link.auto_accept else link.window or 100
        # taken from the loop, not handed out yet (deque's append and popleft are atomic)
        self._local: deque[_receiver.Delivery] = deque()
        self._failure: Exception | None = None  # a queued settlement that failed

    @property
    def credit(self) -> int:
        return self._link.credit

    @property
    def buffered(self) -> int:
        """Deliveries received and not yet handed to the application (both sides)."""
        return len(self._local) + self._link.buffered

    def receive(self, *, timeout: float | None = None) -> Delivery:
        """The next delivery, waiting at most ``timeout`` seconds (see
        :meth:`amqp10.client.Receiver.receive`); from the buffer when it holds one."""
        return self._next(_receive_batch, timeout)

    def __iter__(self) -> Iterator[Delivery]:
        return self

    def __next__(self) -> Delivery:
        """The next delivery; the iteration ends once the link is closed and drained."""
        try:
            return self._next(_fetch_or_none, math.inf)
        except _Ended:
            raise StopIteration from None

    def _next(self, take: _Take, timeout: float | None) -> Delivery:
        """From the buffer; when it is empty, refilled by ``take`` in one round trip."""
        local = self._local
        while True:
            try:
                return Delivery(self, local.popleft())
            except IndexError:  # (checked by popping: other threads may take from it too)
                pass
            got = self._run(take, self._link, self._batch, timeout)
            if not got:
                raise _Ended
            local.extend(got)

    def _take_local(self, most: int) -> list[Delivery]:
        return [Delivery(self, d) for d in _pop(self._local, most)]

    def fetch(self, most: int = 100, *, timeout: float | None = None) -> list[Delivery]:
        """What has arrived, up to ``most`` deliveries; [] if nothing comes within ``timeout``.

        One round trip to the event loop for the batch (none while the buffer
        :meth:`receive` fills holds some: those come first; see
        :meth:`amqp10.client.Receiver.fetch`); settle it with :meth:`accept_all`
        or :meth:`settle_all`, one more.
        """
        if self._local:
            return self._take_local(most)
        got = self._run(self._link.fetch, most, timeout=timeout)
        return [Delivery(self, d) for d in got]

    def batches(self, most: int = 100, *, idle: float | None = None) -> Iterator[list[Delivery]]:
        """``for batch in receiver.batches(): ...``: what has arrived, a batch per round trip.

        Each batch holds at least one delivery and at most ``most``. The
        iteration ends once the link is closed, or once nothing arrived for
        ``idle`` seconds (None: it waits as long as it takes, as ``for d in
        receiver`` does).
        """
        wait = math.inf if idle is None else idle
        while True:
            if self._local:
                yield self._take_local(most)
                continue
            got = self._run(_fetch_or_none, self._link, most, wait)
            if not got:
                return
            yield [Delivery(self, d) for d in got]

    def accept_all(self, deliveries: Iterable[Delivery], *, txn: Transaction | None = None) -> None:
        """Accept every one of ``deliveries`` in one round trip (see :meth:`settle_all`)."""
        self.settle_all(deliveries, Accepted(), txn=txn)

    def settle_all(
        self,
        deliveries: Iterable[Delivery],
        state: Any = None,
        *,
        txn: Transaction | None = None,
    ) -> None:
        """Settle ``deliveries`` with ``state`` in one round trip (see
        :meth:`amqp10.client.Receiver.settle_all`); raises what fails there."""
        batch = []
        for d in deliveries:
            d._queued = True
            batch.append(d._d)
        self._run(self._link.settle_all, batch, state, txn=_inner(txn))

    def flush(self) -> None:
        """Wait until the settlements queued so far are applied (one round trip).

        After it their dispositions are with the connection, written with its
        next write (as after the async ``await delivery.accept()``). Raises the
        first queued settlement of this receiver that failed since the last
        flush (the link or connection was lost: the sender gives the message
        out again).
        """
        self._loop.flush()
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def _failed(self, error: Exception) -> None:
        """(In the loop) a queued settlement failed: kept for :meth:`flush`."""
        if self._failure is None:
            self._failure = error

    def drain(self, *, timeout: float | None = None) -> None:
        self._run(self._link.drain, timeout=timeout)

    def add_credit(self, n: int) -> None:
        async def add() -> None:
            self._link.add_credit(n)

        self._run(add)

    def close(self, error: Error | None = None, *, timeout: float | None = None) -> None:
        """Close the link: the queued settlements go out first, and what the
        buffer still holds is released."""
        left = _pop(self._local, len(self._local))
        self._run(_give_back_and, self._link, self._link.close, left, error, timeout)

    def detach(self, error: Error | None = None, *, timeout: float | None = None) -> None:
        left = _pop(self._local, len(self._local))
        self._run(_give_back_and, self._link, self._link.detach, left, error, timeout)


def _pop(local: deque[T], most: int) -> list[T]:
    """Up to ``most`` off the left of ``local`` (which other threads may pop from too)."""
    taken = []
    with contextlib.suppress(IndexError):
        for _ in range(most):
            taken.append(local.popleft())
    return taken


_Take = Callable[
    [_receiver.Receiver, int, float | None], Awaitable[list[_receiver.Delivery] | None]
]
"""Takes up to ``most`` deliveries, waiting at most ``timeout`` (:func:`_receive_batch`)."""


class _Ended(Exception):
    """Nothing more will come (the link is closed, or the wait timed out)."""


async def _receive_batch(
    receiver: _receiver.Receiver, most: int, timeout: float | None
) -> list[_receiver.Delivery]:
    """The next delivery as :meth:`amqp10.client.Receiver.receive` gives it (or raises),
    and whatever else has arrived, up to ``most`` in all."""
    first = await receiver.receive(timeout=timeout)
    if most == 1 or not receiver.buffered:
        return [first]
    return [first, *await receiver.fetch(most - 1, timeout=0)]


async def _give_back_and(
    receiver: _receiver.Receiver,
    then: Callable[..., Awaitable[None]],
    left: list[_receiver.Delivery],
    error: Error | None,
    timeout: float | None,
) -> None:
    """Release what was taken and never handed out, then ``then(error, timeout=timeout)``."""
    unsettled = [d for d in left if not d.settled and not d.remote_settled]
    if unsettled:
        try:
            await receiver.settle_all(unsettled, Released())
        except errors.AMQPError:
            pass  # the link is gone already: the sender gives them out again
    await then(error, timeout=timeout)


async def _fetch_or_none(
    receiver: _receiver.Receiver, most: int, idle: float | None
) -> list[_receiver.Delivery] | None:
    """A batch; None once the link is closed (the iteration ends, as ``async for`` does)."""
    try:
        return await receiver.fetch(most, timeout=idle)
    except errors.AMQPError:
        return None


def _wrap_link(loop: Loop, link: _sender.Sender | _receiver.Receiver) -> Sender | Receiver:
    if isinstance(link, _sender.Sender):
        return Sender(loop, link)
    return Receiver(loop, link)


class Session(_Proxy):
    """A session (see :class:`amqp10.client.Session`)."""

    __slots__ = ("_s",)

    def __init__(self, loop: Loop, session: _sessions.Session) -> None:
        super().__init__(loop)
        self._s = session

    def open_sender(self, address: str | None, **kwargs: Any) -> Sender:
        return Sender(self._loop, self._run(self._s.open_sender, address, **kwargs))

    def open_receiver(self, address: str | None, **kwargs: Any) -> Receiver:
        return Receiver(self._loop, self._run(self._s.open_receiver, address, **kwargs))

    def close(self, *, timeout: float | None = None) -> None:
        self._run(self._s.close, timeout=timeout)


class Connection(_Proxy):
    """A blocking connection (see :class:`amqp10.client.Connection`); use as ``with``."""

    __slots__ = ("_c", "_on_close")

    def __init__(
        self, loop: Loop, conn: _conn.Connection, on_close: Callable[[], None] | None = None
    ) -> None:
        super().__init__(loop)
        self._c = conn
        self._on_close = on_close

    def __repr__(self) -> str:
        return repr(self._c)

    @property
    def container_id(self) -> str:
        return self._c.container_id

    @property
    def remote_container_id(self) -> str | None:
        return self._c.remote_container_id

    @property
    def remote_offered_capabilities(self) -> list[str]:
        return self._c.remote_offered_capabilities

    @property
    def anonymous_relay(self) -> bool:
        return self._c.anonymous_relay

    @property
    def peer(self) -> str:
        return self._c.peer

    @property
    def is_open(self) -> bool:
        return self._c.is_open

    @property
    def reconnecting(self) -> bool:
        return self._c.reconnecting

    @property
    def reconnects(self) -> int:
        return self._c.reconnects

    @property
    def error(self) -> Exception | None:
        return self._c.error

    @property
    def async_connection(self) -> _conn.Connection:
        """The async connection underneath (only usable inside its event loop)."""
        return self._c

    def open_sender(
        self,
        address: str | None,
        *,
        settle_mode: SettleMode | str = SettleMode.MIXED,
        **kwargs: Any,
    ) -> Sender:
        sender = self._run(self._c.open_sender, address, settle_mode=settle_mode, **kwargs)
        return Sender(self._loop, sender)

    def open_receiver(
        self,
        address: str | None = None,
        *,
        credit: int = 100,
        settle_mode: SettleMode | str = SettleMode.MIXED,
        dynamic: bool = False,
        **kwargs: Any,
    ) -> Receiver:
        receiver = self._run(
            self._c.open_receiver,
            address,
            credit=credit,
            settle_mode=settle_mode,
            dynamic=dynamic,
            **kwargs,
        )
        return Receiver(self._loop, receiver)

    def session(self, *, timeout: float | None = None) -> Session:
        return Session(self._loop, self._run(self._c.session, timeout=timeout))

    def transaction(self, *, timeout: float | None = None) -> Transaction:
        """A local transaction: ``with conn.transaction() as txn:`` (see the async one)."""

        async def make() -> _txn.Transaction:
            return self._c.transaction(timeout=timeout)

        return Transaction(self._loop, self._run(make))

    def request(self, address: str, message: Message, *, timeout: float | None = None) -> Message:
        return self._run(self._c.request, address, message, timeout=timeout)

    def management(
        self, *, protocol: str | None = None, timeout: float | None = None
    ) -> Management:
        """The peer's queues, exchanges and bindings (see the async one)."""

        async def make() -> _management.Management:  # (made in the loop, as its lock wants)
            return self._c.management(protocol=protocol, timeout=timeout)

        return Management(self._loop, self._run(make))

    @property
    def claims(self) -> Claims | None:
        return self._c.claims

    def use_claims(self, claims: Claims) -> None:
        """Authorize every later link with ``claims`` (see the async one)."""
        self._c.use_claims(claims)

    def put_token(self, audience: str, *, timeout: float | None = None) -> float:
        """Put a fresh token for ``audience`` on ``$cbs`` (see the async one); its expiry."""
        return self._run(self._c.put_token, audience, timeout=timeout)

    def reply(
        self,
        request: Delivery | Message,
        response: Message,
        *,
        timeout: float | None = None,
    ) -> Any:
        req = request._d if isinstance(request, Delivery) else request
        return self._run(self._c.reply, req, response, timeout=timeout)

    def next_link(self, *, timeout: float | None = None) -> Sender | Receiver:
        return _wrap_link(self._loop, self._run(self._c.next_link, timeout=timeout))

    def incoming_links(self) -> Iterator[Sender | Receiver]:
        """Links the peer attaches, until the connection closes."""
        while True:
            link = self._run(_next_link_or_none, self._c)
            if link is None:
                return
            yield _wrap_link(self._loop, link)

    def wait_closed(self) -> None:
        self._run(self._c.wait_closed)

    def close(self, error: Error | None = None, *, timeout: float | None = None) -> None:
        """Close the connection and, for one made by :func:`connect`, stop its event loop.

        Settlements still queued go out first. Closing it again does nothing.
        """
        if self._on_close is None and self._loop.closed is not None:
            return
        try:
            if self._on_close is not None:
                self._loop.flush()  # (a close through _run starts them itself)
            else:
                self._run(self._c.close, error, timeout=timeout)
        finally:
            on_close, self._on_close = self._on_close, None
            if on_close is not None:
                on_close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


async def _next_link_or_none(conn: _conn.Connection) -> _sender.Sender | _receiver.Receiver | None:
    try:
        return await conn.incoming_links().__anext__()
    except StopAsyncIteration:
        return None


class _Connected:
    """``async with``: connect to ``url`` and enter the connection until the exit (a class,
    not an ``asynccontextmanager``: mypyc compiles no async generator)."""

    __slots__ = ("_conn", "_kwargs", "_url")

    def __init__(self, url: str | Sequence[str], kwargs: dict[str, Any]) -> None:
        self._url = url
        self._kwargs = kwargs
        self._conn: _conn.Connection | None = None

    async def __aenter__(self) -> _conn.Connection:
        self._conn = await _opening.connect(self._url, **self._kwargs)
        return await self._conn.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._conn is not None
        await self._conn.__aexit__(exc_type, exc, tb)


def connect(
    url: str | Sequence[str] = "amqp://127.0.0.1",
    *,
    container_id: str | None = None,
    hostname: str | None = None,
    idle_timeout: float | None = None,
    ssl: _ssl.SSLContext | bool | None = None,
    sasl_mechanisms: list[str] | tuple[str, ...] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    **kwargs: Any,
) -> Connection:
    """Connect and return a blocking :class:`Connection` (see :func:`amqp10.connect`).

    ``reconnect=ReconnectPolicy(...)`` (or True) and lists of URLs work as there:
    a blocked call waits for the connection to be re-made.

    The connection's event loop runs in the thread of each blocking call, and in a
    keeper thread between calls, until :meth:`Connection.close`.
    """
    kwargs.update(
        container_id=container_id,
        hostname=hostname,
        idle_timeout=idle_timeout,
        ssl=ssl,
        sasl_mechanisms=sasl_mechanisms,
        timeout=timeout,
    )
    stack = contextlib.ExitStack()
    try:
        loop = start_loop(stack)
        conn = stack.enter_context(loop.hold(_Connected(url, kwargs)))
    except BaseException:
        stack.close()
        raise
    loop.batch = lambda work: conn.driver.batch(work)  # (the driver of the moment: reconnects)
    loop.reader = lambda limit: conn.driver.read_here(limit)
    return Connection(loop, conn, on_close=stack.close)
