"""Receiving: :class:`Receiver` and the :class:`Delivery` of each message it takes."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import anyio

from .. import errors
from ..message import Message
from ..transport import Delivery as EngineDelivery
from ..transport import IllegalStateError, LinkState
from ..transport import Link as EngineLink
from ..transport import Receiver as EngineReceiver
from ..transport import Session as EngineSession
from ..types import Accepted, Error, Modified, Rejected, Released
from ._common import deadline
from .link import Link, TransactionLike

__all__ = ["Delivery", "DeliveryHook", "Receiver", "modified"]

log = logging.getLogger("amqp10.client")

_LIVE_LINK = (LinkState.ATTACHED, LinkState.ATTACH_SENT)


def modified(
    *,
    delivery_failed: bool = True,
    undeliverable_here: bool = False,
    message_annotations: dict[Any, Any] | None = None,
) -> Modified:
    """The ``modified`` outcome :meth:`Delivery.modify` gives (by default: delivery failed)."""
    return Modified(
        delivery_failed=delivery_failed,
        undeliverable_here=undeliverable_here,
        message_annotations=message_annotations,
    )


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

    async def accept(self, *, txn: TransactionLike | None = None) -> None:
        await self.settle(Accepted(), txn=txn)

    async def reject(
        self, error: Error | None = None, *, txn: TransactionLike | None = None
    ) -> None:
        await self.settle(Rejected(error=error), txn=txn)

    async def release(self, *, txn: TransactionLike | None = None) -> None:
        await self.settle(Released(), txn=txn)

    async def modify(
        self,
        *,
        delivery_failed: bool = True,
        undeliverable_here: bool = False,
        message_annotations: dict[Any, Any] | None = None,
        txn: TransactionLike | None = None,
    ) -> None:
        state = modified(
            delivery_failed=delivery_failed,
            undeliverable_here=undeliverable_here,
            message_annotations=message_annotations,
        )
        await self.settle(state, txn=txn)

    async def settle(self, state: Any = None, *, txn: TransactionLike | None = None) -> None:
        """Settle with ``state`` as the outcome (None: settle without one).

        With ``txn`` the outcome is given within that transaction (Part 4
        §4.4.2): the peer applies it when the transaction commits; a rollback
        gives the message back to its node.
        """
        self.settle_nowait(state, txn=txn)
        # a cancellation point, but no scheduling point: a loop settling what has
        # arrived one by one sends the dispositions together when it next waits
        await anyio.lowlevel.checkpoint_if_cancelled()

    def settle_nowait(self, state: Any = None, *, txn: TransactionLike | None = None) -> None:
        """:meth:`settle` without the scheduling point (for many at once, as
        :meth:`Receiver.settle_all`): the disposition goes out with the
        connection's next write."""
        if txn is not None:
            state = txn._outcome_state(self._receiver._conn, state)
        self._receiver._settle(self._d, state)


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

    @property
    def window(self) -> int:
        """The credit window kept open (``credit=`` at open; 0: the application grants it)."""
        return self._window

    @property
    def auto_accept(self) -> bool:
        """Each delivery is accepted as the application takes it."""
        return self._auto_accept

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
            await self._arrival(timeout)
        return self._take()

    async def fetch(self, most: int, *, timeout: float | None = None) -> list[Delivery]:
        """What has arrived, up to ``most`` deliveries, in order; [] if nothing comes in time.

        Waits at most ``timeout`` seconds (the connection's default when None;
        ``math.inf`` waits without limit) for the first delivery, then takes
        whatever else is buffered without waiting more. Raises the link's (or
        connection's) error once it is closed and nothing is buffered. One call
        per batch: settle them with :meth:`accept_all` or :meth:`settle_all`.
        """
        popped = await self._pop(most, timeout)
        taken = [self._taken(d) for d in popped]
        if popped:
            self._conn._took(len(popped))
            self._replenish()
        return taken

    async def fetch_payloads(self, most: int, *, timeout: float | None = None) -> list[bytes]:
        """As :meth:`fetch`, but just the messages' bytes, accepting any the sender left unsettled.

        For readers that want the bytes alone (at-most-once, or a stream read by
        offset, whose outcomes do not matter): no :class:`Delivery` per message.
        """
        taken = await self._pop(most, timeout)
        n = len(taken)
        if not n:
            return []
        unsettled = [d for d in taken if not d.settled and not d.remote_settled]
        for d in unsettled:
            self._settle(d, Accepted())
        self._conn._took(n)
        self._replenish()
        return [d.payload for d in taken]

    async def accept_all(
        self, deliveries: Iterable[Delivery], *, txn: TransactionLike | None = None
    ) -> None:
        """Accept every one of ``deliveries`` (see :meth:`settle_all`)."""
        await self.settle_all(deliveries, Accepted(), txn=txn)

    async def settle_all(
        self,
        deliveries: Iterable[Delivery],
        state: Any = None,
        *,
        txn: TransactionLike | None = None,
    ) -> None:
        """Settle ``deliveries`` in order with ``state`` as each one's outcome, in one go.

        As :meth:`Delivery.settle` on each (they may come from any receiver);
        the first that fails raises, leaving those before it settled.
        """
        for d in deliveries:
            d.settle_nowait(state, txn=txn)
        await anyio.lowlevel.checkpoint()

    async def _pop(self, most: int, timeout: float | None) -> list[EngineDelivery]:
        """Up to ``most`` buffered deliveries, off the buffer (see :meth:`fetch`); [] on a timeout."""
        if most < 1:
            raise ValueError("most must be at least 1")
        if not self._buffer:
            try:
                await self._arrival(timeout)
            except errors.TimeoutError:
                return []
        buffer = self._buffer
        taken = [buffer.popleft() for _ in range(min(most, len(buffer)))]
        self._unhold(taken)
        return taken

    def _unhold(self, taken: list[EngineDelivery]) -> None:
        """Count ``taken`` (off the buffer) out of what each link holds."""
        held = self._held
        main = self._link
        n = len(taken)
        if len(self._links) == 1 and held.get(main, 0) >= n:
            held[main] -= n  # the usual case, in one step
        else:
            for d in taken:
                held[d.link] = held.get(d.link, 1) - 1

    async def _arrival(self, timeout: float | None) -> None:
        """Until something is buffered, at most ``timeout``; raises once the link is closed."""
        with deadline(self._conn._timeout_for(timeout), f"receive from {self._address!r}"):
            while not self._buffer:
                self._check_usable()
                self._replenish()
                await self._sig.wait()

    def _take(self) -> Delivery:
        d = self._buffer.popleft()
        self._unhold([d])
        delivery = self._taken(d)
        self._conn._took(1)
        self._replenish()
        return delivery

    def _taken(self, d: EngineDelivery) -> Delivery:
        """``d``, off the buffer and counted out (:meth:`_unhold`), handed to the application."""
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
