"""Link recovery: links kept suspended, with their unsettled deliveries, for a resuming attach.

Part 2 §2.6.13: a link's state outlives its connection (and a detach that does
not close it), so that the peer can attach the link again and both ends can
settle what was in doubt. The broker keeps such a link as a
:class:`SuspendedLink`, keyed by (remote container-id, link name, the broker's
role on it), for ``link_recovery_seconds``:

- a link on which the broker *sends* (a consumer) keeps the queue messages it
  had delivered unsettled: they stay acquired, no other consumer gets them;
- a link on which the broker *receives* (a producer) keeps the deliveries the
  sender had not settled, with the broker's state (e.g. accepted, under
  rcv-settle-mode second).

Only a link whose terminus asks to outlive it is kept (Part 3 §3.5.6-3.5.7: its
``expiry-policy`` is ``never``, or its ``timeout`` is above zero; the default,
``session-end`` with timeout 0, expires with the link), for the shorter of that
and ``link_recovery_seconds``: a peer that cannot resume gets what its lost link
held back in the queue at once, as before.

An attach of the same link that carries an unsettled map takes the record
(the front end, e.g. :mod:`amqp10.broker.amqp1`, does the rest: the engine reconciles the
two maps). A record that expires, is pushed out by the bound on the number of
records, or is met by an attach that is not a resume, is dropped: a consumer's
messages go back to their queue, as they would have when the link was lost.

With several worker processes, a resume that reaches a worker without the record asks
the others (:attr:`LinkRecovery.elsewhere`); the one that has it hands it over
(:meth:`LinkRecovery.hand_over`; the mechanism is ``amqp10.broker.workers.resumption``).

Nothing here is written to the store: after a crash, durable messages a
suspended consumer held come back from the store (marked in flight), as any
unsettled delivery does.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["AskElsewhere", "HandedOver", "LinkKey", "LinkRecovery", "SuspendedLink", "Unsettled", "unsettled_map"]

log = logging.getLogger("amqp10.broker")

LinkKey = tuple[str, str, Any]
"""(remote container-id, link name, the broker's role on the link): the front end's key."""

Unsettled = dict[bytes, Any]
"""A link's unsettled deliveries another worker handed over (:attr:`LinkRecovery.elsewhere`):
delivery-tag -> a producer's: the broker's state (accepted once stored; None: no outcome
yet); a consumer's: its :class:`HandedOver` delivery."""

AskElsewhere = Callable[[LinkKey, "str | None", Callable[["Unsettled | None"], None]], None]
"""``ask(key, address, answered)``: see :attr:`LinkRecovery.elsewhere`."""


class HandedOver:
    """A consumer's unsettled delivery that another worker kept, handed over for its
    resumption here: what the engine resends or reconciles (as an old endpoint's delivery
    for ``resume_deliveries=``), and its message, still acquired on its queue's owner and
    settled there through its stand-in here (``message``)."""

    __slots__ = ("context", "message_format", "payload", "remote_state", "settled", "state", "tag")

    def __init__(self, tag: bytes, payload: bytes, message_format: int, state: Any, remote_state: Any, message: Any) -> None:
        self.tag = tag
        self.payload = payload
        self.message_format = message_format
        self.state = state
        self.remote_state = remote_state
        self.context = message
        self.settled = False


class SuspendedLink:
    """One link waiting to be resumed: its unsettled deliveries and what they refer to.

    The core keeps these records without looking into them. ``deliveries`` are
    the old engine endpoint's unsettled deliveries (for
    ``resume_deliveries=``; a consumer's carry their queue message as
    ``context``); ``address`` the address of the terminus the peer asked for;
    ``node`` the node (queue) they belong to; ``consumer`` the old
    :class:`~amqp10.broker.amqp1.LinkConsumer` (its ``in_flight`` messages), or
    None for a producer; ``on_drop`` releases what the record holds.
    """

    __slots__ = ("address", "consumer", "deliveries", "expires", "key", "node", "on_drop")

    def __init__(
        self,
        key: LinkKey,
        *,
        address: str | None,
        deliveries: Sequence[Any],
        node: Any,
        consumer: Any = None,
        on_drop: Callable[[], None] | None = None,
    ) -> None:
        self.key = key
        self.address = address
        self.deliveries = list(deliveries)
        self.node = node
        self.consumer = consumer
        self.on_drop = on_drop
        self.expires = 0.0

    def drop(self) -> None:
        """Give up on resuming: release what the record holds (once)."""
        on_drop, self.on_drop = self.on_drop, None
        if on_drop is not None:
            on_drop()

    def __repr__(self) -> str:
        container, name, role = self.key
        role_name = getattr(role, "name", str(role)).lower()
        return f"SuspendedLink({container!r}, {name!r}, {role_name}, {len(self.deliveries)} unsettled)"


class LinkRecovery:
    """The suspended links of a broker, with their expiry (``seconds``) and bound (``limit``).

    No timers here: :meth:`expire_due` is called on every suspend and take, and
    by the service when :meth:`next_deadline` passes (``on_change`` tells it
    the deadline may have moved). ``seconds <= 0`` or ``limit <= 0`` disables
    recovery: nothing is ever suspended.
    """

    def __init__(self, seconds: float, limit: int, now: Callable[[], float]) -> None:
        self.seconds = seconds
        self.limit = limit
        self.now = now
        self.enabled = seconds > 0 and limit > 0
        # insertion order is age (for the bound); the heap is expiry order (records live
        # as long as their terminus asks, at most ``seconds``): stale entries are skipped
        self.records: dict[LinkKey, SuspendedLink] = {}
        self._deadlines: list[tuple[float, int, SuspendedLink]] = []
        self._seq = itertools.count()
        self.on_change: Callable[[], None] = lambda: None
        self.resumed = 0  # records taken by a resuming attach (for tests and logs)
        self.elsewhere: AskElsewhere | None = None
        """Where other processes keep records too (``workers`` > 1, set by
        ``workers.resumption``): ``elsewhere(key, address, answered)`` asks them for the
        record of a link resumed here that this broker has none of. The one that holds
        it hands it over (:meth:`hand_over`): ``answered`` gets its unsettled deliveries
        (:data:`Unsettled`), or None (no record anywhere, or one that could not be handed
        over: dropped there, its messages back on their queue). None: one process,
        nothing to ask."""

    @staticmethod
    def retention(terminus: Any) -> float:
        """How long ``terminus`` asks to outlive its link (seconds; 0: not at all)."""
        if terminus is None:
            return 0.0
        if str(terminus.expiry_policy or "session-end") == "never":
            return math.inf
        return float(terminus.timeout or 0)

    def suspend(self, record: SuspendedLink, lifetime: float = math.inf) -> None:
        """Keep ``record`` until it is taken or expires, after ``lifetime`` seconds at most
        (an older one of the same link is dropped)."""
        lifetime = min(lifetime, self.seconds)
        if not self.enabled or lifetime <= 0:
            record.drop()
            return
        self.expire_due()
        old = self.records.pop(record.key, None)
        if old is not None:
            old.drop()
        record.expires = self.now() + lifetime
        self.records[record.key] = record
        heapq.heappush(self._deadlines, (record.expires, next(self._seq), record))
        while len(self.records) > self.limit:
            oldest = next(iter(self.records))
            self._expire(self.records.pop(oldest), "the bound on suspended links was reached")
        log.info("suspended %r for %gs", record, self.seconds)
        self.on_change()

    def take(self, key: LinkKey) -> SuspendedLink | None:
        """The record of ``key`` (removed), if one lives."""
        if not self.records:
            return None
        self.expire_due()
        record = self.records.pop(key, None)
        if record is not None:
            self.on_change()
        return record

    def hand_over(self, key: LinkKey, address: str | None) -> SuspendedLink | None:
        """Another process resumes link ``key`` (:attr:`elsewhere`): its record, taken, for
        the caller to hand over (a producer's as its unsettled map: :func:`unsettled_map`),
        or to :meth:`drop_handed`; None if there is none, or it was for another address
        (then dropped: its messages go back to their queue, as when a resume here does not
        match)."""
        record = self.take(key)
        if record is None:
            return None
        if record.address != address:
            self.drop_handed(record)
            return None
        log.info("handing %r over to another worker", record)
        return record

    @staticmethod
    def drop_handed(record: SuspendedLink) -> None:
        """A record another worker resumes that cannot be handed over: dropped."""
        log.info("dropping %r: resumed by another worker", record)
        record.drop()

    def _live(self, record: SuspendedLink) -> bool:
        return self.records.get(record.key) is record

    def next_deadline(self) -> float | None:
        """When the next record expires (None: there are none)."""
        heap = self._deadlines
        while heap and not self._live(heap[0][2]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def expire_due(self) -> int:
        """Drop the records whose time is up; return how many."""
        if not self.records:
            return 0
        now = self.now()
        n = 0
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            record = heapq.heappop(heap)[2]
            if self._live(record):
                del self.records[record.key]
                self._expire(record, "it expired")
                n += 1
        return n

    def _expire(self, record: SuspendedLink, why: str) -> None:
        log.info("dropping %r: %s", record, why)
        record.drop()

    def clear(self) -> None:
        """Drop every record (the broker is stopping)."""
        records, self.records = self.records, {}
        self._deadlines.clear()
        for record in records.values():
            record.drop()


def unsettled_map(record: SuspendedLink) -> Unsettled:
    """A producer's record as the unsettled map a resuming attach carries: each delivery
    not settled, with the broker's state."""
    return {bytes(d.tag): d.state for d in record.deliveries if not d.settled}
