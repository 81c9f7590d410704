"""Anycast queues: competing consumers, FIFO per priority level, free of any I/O.

The node base (consumers, the journal, statistics, duplicate detection) is in
core/nodes.py; streams are in core/streams.py.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterator
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final

from . import store as _store
from .browsing import browse, dispatch_browsers, has_after, peek
from .dead_letters import HeldDeadLetters, SendDeadLetter
from .features import QueueFeatures
from .groups import MessageGroups
from .message import PRIORITY_LEVELS, UNASKED_PRIORITY_LEVELS, QueuedMessage
from .nodes import (
    NULL_JOURNAL,
    Consumer,
    DuplicateWindow,
    Journal,
    Node,
    PublishResult,
    cancel_consumers,
    nothing,
)
from .queue_policy import QueuePolicy

if TYPE_CHECKING:
    from .expiry import Expirations
    from .paging import Pager
    from .scheduled import Scheduler

__all__ = ["Queue"]


_NO_RINGS: list[Any] = []
TAKEN: Final = PublishResult.TAKEN  # bound once (statics in the compiled build): publish is per message
FULL: Final = PublishResult.FULL
_NO_IDS: set[int] = set()
_NO_MAP: dict[int, Any] = {}


class Queue(Node):
    """An anycast queue: competing consumers, FIFO per priority level.

    ``dead_letter(msg, reason, on_stored)`` routes a dead message to the dead-letter
    target (the router's business) and calls ``on_stored`` once it is safe there, or
    answers False if it reached no queue; ``now`` is the clock (injected for tests).
    """

    kind = "queue"
    scheduler: Scheduler | None = None
    """Where messages scheduled for later wait (the broker's; None: delivered at once)."""
    groups: MessageGroups | None = None
    """Who owns which message group (core/groups.py); made on the first grouped message."""
    features: QueueFeatures | None = None
    """Qpid's queue features (core/features.py), if its policy asks for any."""
    pager: Pager | None = None
    """What keeps its memory within budget (core/paging.py); None: every message in memory."""
    expirations: Expirations | None = None
    """Where its expiry deadlines are armed (the broker's, core/expiry.py; None: expired
    messages are dropped only as consumers meet them, and ``expires`` is not kept)."""
    on_expired: Callable[[Queue], None] | None = None
    """Called when it has been unused for ``expires`` (the virtual host deletes it)."""
    orphaned: Callable[[QueuedMessage], None] | None = None
    """Once deleted: where a message its consumers release goes (its alternate exchange,
    core/qpid_queues.py); None: nowhere."""
    held_dead: HeldDeadLetters | None = None
    """Dead letters that reached no queue, kept to be sent again (``x-dead-letter-strategy``
    at-least-once; core/dead_letters.py); None: none."""
    on_holding: Callable[[Queue], None] | None = None
    """Called when it starts keeping dead letters (the virtual host retries them)."""

    def __init__(
        self,
        name: str,
        policy: QueuePolicy,
        *,
        journal: Journal = NULL_JOURNAL,
        dead_letter: SendDeadLetter | None = None,
        now: Callable[[], float],
        dynamic: bool = False,
        durable_node: bool = False,
        vhost: str = "/",
        arguments: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(name, policy, dynamic=dynamic)
        self.vhost = vhost
        self._key = _store.message_key(vhost, name)  # what its messages are stored under
        self.arguments: dict[str, Any] = dict(arguments or {})
        """The arguments it was declared with (already applied to ``policy``)."""
        self.journal = journal
        self.dead_letter = dead_letter
        self.now = now
        self.durable_node = durable_node
        # one FIFO per priority level, lowest first, made up to a level on its first message
        self._levels: list[deque[QueuedMessage]] = []
        self._seq = itertools.count(1)
        self.count = self.bytes = 0
        # expiry (core/expiry.py), set here so that the per-message paths read instance values
        self._expiring = False  # it has held a message that expires: takes look at the next head
        self.head_deadline: float | None = None
        """The deadline armed for the messages at its heads (core/expiry.py; None: none)."""
        self.unused_deadline: float | None = None
        """The deadline armed for ``expires`` (core/expiry.py; None: none)."""
        self.consumers: list[Consumer] = []
        # The ready rings: the movers that may have credit, in round-robin order, one ring
        # per consumer priority (x-priority), highest first; nearly always just one. One
        # found with no credit leaves its ring (so consumers without credit cost nothing per
        # delivery) and comes back through consumer_ready(). An idle queue shares empty
        # ones (never added to) until its first consumer: see _make_ring.
        self._rings: list[tuple[int, deque[Consumer]]] = _NO_RINGS
        self._in_ready: set[int] = _NO_IDS  # ids of the consumers in a ring
        self._ring_of: dict[int, deque[Consumer]] = _NO_MAP  # mover id -> its priority's ring
        self.browsers: dict[int, int] = {}  # consumer id -> last seq browsed
        self._dispatching = False
        self._last_size = 1
        self.dedup = DuplicateWindow(policy.duplicate_window)
        # publishers held back by this queue's limits, told when messages leave
        self.space_listeners: set[Callable[[], None]] = set()
        self._unstored: dict[int, QueuedMessage] = {}  # seq -> stored message held back until its commit
        self.set_policy(policy)
        self._movers: list[Consumer] = []  # consumers that take messages (not browsers)
        self.needs_message_ids = self.dedup.size > 0 or self._store_all
        # exclusive and auto-delete queues (0-9-1's queue.declare): see VirtualHost
        self.owner: object | None = None
        """The connection an exclusive queue belongs to (None: not exclusive)."""
        self.auto_delete = False
        self.on_unused: Callable[[Queue], None] | None = None
        """Called when an auto-delete queue loses its last consumer."""
        self.last_used = now()
        """When it was declared or last lost a consumer (for ``expires``)."""
        self.admit: Callable[[QueuedMessage], bool] | None = None
        """What it keeps (a topic subscription's selector); None: everything."""
        self.settings: dict[str, Any] = {}
        """A front end's settings kept with a subscription's store record (JSON; e.g. Service Bus rules)."""
        self.deferred: dict[int, QueuedMessage] = {}
        """Acquired messages set aside by their consumer (:meth:`defer`), by
        :attr:`~.QueuedMessage.number` (Service Bus's sequence number)."""
        self.group_states: dict[str, bytes] = {}
        """What consumers keep for message groups (:meth:`set_group_state`), by group."""
        # consumers with a selector: per priority level, the seq up to which every message
        # is known not to match (so a take looks only at what is newer)
        self._scanned: dict[int, list[int]] = {}

    def set_policy(self, policy: QueuePolicy) -> None:
        """Take ``policy`` (at creation, and when a runtime policy changes); it applies
        to messages published and delivered from now on."""
        self.policy = policy
        # the policy is immutable: what the per-message paths need, read once
        self._max_length = policy.max_length
        self._max_bytes = policy.max_bytes
        self._limited = policy.max_length is not None or policy.max_bytes is not None
        self._overflow = policy.overflow_mode
        self._ttl = policy.message_ttl
        self._top = UNASKED_PRIORITY_LEVELS - 1 if policy.max_priority is None else min(policy.max_priority, PRIORITY_LEVELS - 1)
        old = self.features
        self.features = QueueFeatures(policy) if policy.has_features else None
        if old is not None and self.features is not None:
            self.features.carry_on(old)
        self._take: Callable[[Consumer], QueuedMessage | None] = self._take_for
        if self.features is not None:
            if self.features.top is not None:
                self._top = self.features.top
            if self.features.fairshare:
                self._take = self._take_fair
        self._single_active = policy.single_active_consumer
        self._store_all = self.durable_node and policy.durable
        if policy.expires is not None:
            self._arm_unused()
        after_commit = policy.deliver_after_commit
        self._after_commit = self.durable_node and (policy.durable if after_commit is None else after_commit)

    # -- inbound --------------------------------------------------------------------
    def is_full(self, extra: int = 0) -> bool:
        if not self._limited:
            return False
        ml = self._max_length
        mb = self._max_bytes
        return (ml is not None and self.count >= ml) or (mb is not None and self.bytes + extra > mb)

    def can_accept(self, size: int = 0) -> bool:
        return self._overflow != "block" or not self.is_full(size)

    def room(self) -> int | None:
        """How many more messages fit before a ``block`` queue is full (None: no limit)."""
        if self._overflow != "block":
            return None
        ml = self._max_length
        mb = self._max_bytes
        room: int | None = None
        if ml is not None:
            room = max(ml - self.count, 0)
        if mb is not None:
            by_bytes = max(mb - self.bytes, 0) // max(self._last_size, 1)
            room = by_bytes if room is None else min(room, by_bytes)
        return room

    def restore(
        self, msg: QueuedMessage, *, deferred: bool = False, acquired: bool = False, dead_reason: str | None = None
    ) -> None:
        """Put back a message recovered from the store (already durable); ``deferred``: one
        set aside (:meth:`defer`), which comes back acquired, as delivered; ``acquired``: one
        a prepared transaction took (core/prepared.py), which comes back acquired, the
        transaction's to settle (no consumer gets it); ``dead_reason``: an at-least-once
        dead letter kept aside (it died so), kept aside again to be sent on later."""
        self.dedup.seen(msg.message_id)
        self._next_seq_at_least(msg.seq + 1)
        if dead_reason is not None:
            self._disk_changed(msg.size)
            self._hold_dead(msg, dead_reason, lambda: self._delete_stored(msg))
            return
        if deferred or acquired:
            if deferred:
                self.deferred[msg.number] = msg
            self.stats.delivered += 1
            self._disk_changed(msg.size)
            return
        if msg.priority > self._top:
            msg.priority = self._top
        if self.features is not None:
            self.features.restored(msg)
        if self.groups is None and msg.group is not None:
            self.groups = MessageGroups(self.policy.shared_groups)
        due = msg.due
        if due is not None and self.scheduler is not None:
            if due > self.now():
                self.scheduler.hold(self, msg, due)
                return
            self._ttl_from(msg, due)  # a no-op if it was enqueued before the restart
        self._enqueue(msg)
        self.count += 1
        self.bytes += msg.size
        if self._persistent(msg):  # it came from the store (and is deleted from it as usual)
            self._disk_changed(msg.size)
        if msg.expiry is not None:
            # its own expiry, not the heads' (recovery must not read pages back while it
            # reads the store): an early deadline finds the real heads when it passes
            self._expiring = True
            if self.expirations is not None:
                self.expirations.arm_heads(self, msg.expiry)

    def _next_seq_at_least(self, n: int) -> None:
        nxt = next(self._seq)
        if nxt < n:
            self._seq = itertools.count(n)
        else:
            self._seq = itertools.count(nxt)

    def publish(self, msg: QueuedMessage, on_stored: Callable[[], None]) -> PublishResult:
        """Enqueue ``msg``; ``on_stored`` runs once it is safe (stored, if durable).

        Returns :attr:`~PublishResult.FULL` (and does nothing else) when the queue is
        full and its overflow policy is ``reject``. A message-id seen within the duplicate window is
        acknowledged and not stored again. A message the queue's ``admit`` refuses
        is acknowledged and not kept.
        """
        if self.admit is not None and not self.admit(msg):
            on_stored()
            return TAKEN
        if msg.message_id is not None and self.dedup.seen(msg.message_id):
            on_stored()
            return TAKEN
        if self.features is not None:
            replaced = self.features.arriving(msg, self._levels)
            if replaced is not None:
                self._replaced(replaced)
        # group and due are usually read already (1.0: as the message was parsed): the slot,
        # without a property call per message, else the property reads them
        try:
            group = msg._group
        except AttributeError:
            group = msg.group
        if self.groups is None and group is not None:
            self.groups = MessageGroups(self.policy.shared_groups)
        if self.scheduler is not None:
            try:
                due = msg._due
            except AttributeError:
                due = msg.due
            if due is not None and self._hold(msg, on_stored):
                return TAKEN
        if self._limited and self.is_full(msg.size):
            if self._overflow == "reject":
                if self.policy.overflow == "reject-publish-dlx":
                    self._dead(msg, "maxlen", stored=False)
                return FULL
            if self._overflow == "drop":
                if self.features is not None and self.features.outranked(msg, self._levels):
                    self._dead(msg, "maxlen", stored=False)
                    on_stored()
                    return TAKEN
                while self.count and self.is_full(msg.size):
                    old = self._pop_oldest()
                    if old is None:
                        break
                    self._dead(old, "maxlen")
                if self.is_full(msg.size):  # x-max-length 0, or a message bigger than the byte limit
                    self._dead(msg, "maxlen", stored=False)
                    on_stored()
                    return TAKEN
        if msg.arrival == 0.0:
            msg.arrival = self.now()
        if self._ttl is not None:
            self._ttl_from(msg, msg.arrival)
        if msg.priority > self._top:
            msg.priority = self._top
        msg.seq = next(self._seq)
        self._last_size = msg.size
        persistent = self.durable_node and (msg.durable or self._store_all)
        if persistent and self._after_commit:
            self._unstored[msg.seq] = msg
            on_stored = self._deliver_when_stored(msg, on_stored)
        else:
            self._enqueue(msg)
        self.count += 1
        size = msg.size
        # Node.bytes's setter, inline (a queue's bytes are never on disk as such)
        self._bytes += size
        self.usage.memory_bytes += size
        self.stats.enqueued += 1
        if persistent or self.pager is not None:
            self._write(msg, on_stored, persistent)  # (a paged-out body may be answered once it is stored)
        else:
            on_stored()
        expiry = msg.expiry
        if expiry is not None:  # (after its write: a pager may read it back to arm its deadline)
            armed = self.head_deadline  # (armed: _expiring is set already)
            if armed is None or expiry < armed:
                self._timed(msg)
        self.dispatch()
        return TAKEN

    def _write(self, msg: QueuedMessage, on_stored: Callable[[], None], persistent: bool) -> None:
        """Write ``msg`` to the store if ``persistent`` (:meth:`_persistent`, worked out by the
        caller) or paged out; ``on_stored`` runs once it is safe."""
        if persistent:
            self._disk_changed(msg.size)
            self.journal.submit(
                (
                    _store.PUT,
                    self._key,
                    msg.seq,
                    msg.priority,
                    msg.delivery_count,
                    msg.expiry,
                    msg.arrival,
                    msg.message_id,
                    msg.format,
                    msg.data,
                ),
                on_stored,
            )
        elif self.pager is not None and self.pager.writing(msg):
            self.journal.submit((_store.BARRIER,), on_stored)  # once its body is stored (Pager.writing)
        else:
            on_stored()

    def rewritten(self, msg: QueuedMessage) -> None:
        """A consumer changed ``msg``'s bytes while it held it (a 1.0 ``modified`` outcome's
        message annotations, which RabbitMQ 4 keeps with the message): a stored message is
        stored again with them, in its place, before it is requeued or dead-lettered."""
        persistent = self._persistent(msg)
        if persistent:
            self._disk_changed(-msg.size)  # (written again below, at its new size)
        msg.size = len(msg.data)
        if persistent:
            self._write(msg, nothing, persistent)

    # -- scheduled delivery (core/scheduled.py) ----------------------------------------------
    def _hold(self, msg: QueuedMessage, on_stored: Callable[[], None]) -> bool:
        """Store ``msg`` and give it to the scheduler if its due time is still to come."""
        due = msg.due
        assert due is not None and self.scheduler is not None
        if due <= self.now():
            return False  # due already: an ordinary publish
        ttl = msg.field("ttl")
        if ttl:  # the message's own time to live counts from its due time
            expiry = due + ttl / 1000
            absolute = msg.field("absolute_expiry_time")
            msg.expiry = expiry if not absolute else min(expiry, int(absolute) / 1000)
        if msg.priority > self._top:
            msg.priority = self._top
        msg.seq = next(self._seq)  # its place in the store until it is due
        self.scheduler.hold(self, msg, due)
        self._write(msg, on_stored, self._persistent(msg))
        return True

    def cancel_scheduled(self, seq: int) -> bool:
        """Drop the scheduled message ``seq`` before it is due (Service Bus's cancel); False: none."""
        msg = None if self.scheduler is None else self.scheduler.cancel_one(self, seq)
        if msg is None:
            return False
        self._journal_delete(msg)
        return True

    def _deliver_when_stored(self, msg: QueuedMessage, on_stored: Callable[[], None]) -> Callable[[], None]:
        """``deliver_after_commit``: ``msg`` joins its level (and meets consumers) once committed."""

        def stored() -> None:
            if self._unstored.pop(msg.seq, None) is not None:  # (not purged meanwhile)
                self._enqueue(msg)
                if msg.expiry is not None:
                    self._timed(msg)
            on_stored()
            self.dispatch()

        return stored

    def _ttl_from(self, msg: QueuedMessage, due: float) -> None:
        """Apply the queue's message TTL, counted from ``due``."""
        if self._ttl is not None:
            expiry = due + self._ttl
            if msg.expiry is None or expiry < msg.expiry:
                msg.expiry = expiry

    def enqueue_due(self, msg: QueuedMessage) -> None:
        """A held message's time has come (the scheduler calls this): enqueue it as newly
        arrived, behind what is in the queue now (its stored record moves to its new place),
        with a new ``seq`` but its :attr:`~.QueuedMessage.number` kept."""
        old = msg.seq
        due = msg.due
        self._ttl_from(msg, self.now() if due is None else due)
        msg._number = msg.number  # its sequence number for life, as Service Bus keeps it
        msg.seq = next(self._seq)
        self._enqueue(msg)
        self.count += 1
        self.bytes += msg.size
        self.stats.enqueued += 1
        if self._persistent(msg):
            self.journal.submit((_store.MOVE, self._key, old, msg.seq, msg.expiry))
        if msg.expiry is not None:
            self._timed(msg)
        self.dispatch()

    def _persistent(self, msg: QueuedMessage) -> bool:
        return self.durable_node and (msg.durable or self._store_all)

    def _journal_delete(self, msg: QueuedMessage) -> None:
        if self._persistent(msg):
            self._delete_stored(msg)

    def _delete_stored(self, msg: QueuedMessage) -> None:
        self._disk_changed(-msg.size)
        self.journal.submit((_store.DELETE, self._key, msg.seq))

    def _enqueue(self, msg: QueuedMessage) -> None:
        """Put ``msg`` at the back of its level (or of its paged-out part: core/paging.py)."""
        pager = self.pager
        if pager is None or not pager.page_out(msg):
            levels = self._levels
            p = msg.priority
            (levels[p] if p < len(levels) else self._level(p)).append(msg)

    def _level(self, priority: int) -> deque[QueuedMessage]:
        """The FIFO of ``priority`` (made, with the levels below it, on first use)."""
        levels = self._levels
        while len(levels) <= priority:
            levels.append(deque())
        return levels[priority]

    def _replaced(self, old: QueuedMessage) -> None:
        """A last-value queue's newer message took ``old``'s place (core/features.py): it
        is gone, counted as dropped."""
        self.count -= 1
        self.bytes -= old.size
        self.stats.dropped += 1
        self._journal_delete(old)

    def _pop_oldest(self) -> QueuedMessage | None:
        if self.pager is not None and self.pager.count:
            self.pager.fill_heads()
        best: deque[QueuedMessage] | None = None
        if self.features is not None:
            best = self.features.lowest_level(self._levels, self.pager)
        if best is None:
            for level in self._levels:
                if level and (best is None or level[0].seq < best[0].seq):
                    best = level
        if best is None:
            return None
        msg = best.popleft()
        self.count -= 1
        self.bytes -= msg.size
        if self._expiring:
            self._arm_heads()  # a head with an earlier expiry may be next
        return msg

    # -- consumers ------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        if consumer.browse:
            self.browsers[consumer.id] = 0
        else:
            if self._ring_of is _NO_MAP:
                self._make_ring()
            self._movers.append(consumer)
            ring = self._ring(getattr(consumer, "priority", 0))
            self._ring_of[consumer.id] = ring
            ring.append(consumer)
            self._in_ready.add(consumer.id)
        self.consumers.append(consumer)
        self.dispatch()

    def _make_ring(self) -> None:
        self._rings = []
        self._in_ready = set()
        self._ring_of = {}

    def _ring(self, priority: int) -> deque[Consumer]:
        """The ready ring of consumers of ``priority`` (made, in its place, on first use)."""
        rings = self._rings
        i = 0
        while i < len(rings) and rings[i][0] > priority:
            i += 1
        if i == len(rings) or rings[i][0] != priority:
            rings.insert(i, (priority, deque()))
        return rings[i][1]

    def consumer_ready(self, consumer: Consumer) -> None:
        if consumer.id not in self._in_ready:
            ring = self._ring_of.get(consumer.id)
            if ring is not None:
                ring.append(consumer)
                self._in_ready.add(consumer.id)
        self.dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        ring = self._ring_of.pop(consumer.id, None)
        if consumer.id in self._in_ready:
            self._in_ready.discard(consumer.id)
            if ring is not None:
                ring.remove(consumer)
        if consumer in self._movers:
            self._movers.remove(consumer)
            if self._single_active and self._movers:
                self.dispatch()  # the next consumer takes over
        self.browsers.pop(consumer.id, None)
        self._scanned.pop(consumer.id, None)
        if self.groups is not None and self.groups.release_owner(consumer.id):
            self._scanned.clear()  # its groups' messages are for everyone again
            self.dispatch()
        if not self.consumers:
            self.last_used = self.now()
            if self.auto_delete and self.on_unused is not None:
                self.on_unused(self)
            if self.policy.expires is not None and not self.deleted:
                self._arm_unused()

    @property
    def active_consumer(self) -> Consumer | None:
        """With ``single_active_consumer``: the one consumer that gets messages."""
        return self._movers[0] if self._movers else None

    def __iter__(self) -> Iterator[QueuedMessage]:
        """The messages held in memory, in delivery order (highest priority first, FIFO
        within a level); :meth:`browse` and :meth:`peek` see the paged-out ones too."""
        for level in reversed(self._levels):
            yield from level

    def browse(self, after: int = 0) -> Iterator[QueuedMessage]:
        """Every message after seq ``after``, in arrival order, left in place; paged-out ones
        read back from the store a chunk at a time (core/browsing.py)."""
        return browse(self, after)

    def peek(self, n: int, offset: int = 0) -> list[QueuedMessage]:
        """``n`` messages in delivery order from position ``offset``, left where they are
        (management's PEEK), paged-out ones read back from the store."""
        return peek(self, max(n, 0), max(offset, 0))

    def has_after(self, seq: int) -> bool:
        """Whether a message newer than ``seq`` is queued (a browser has more to see)."""
        return has_after(self, seq)

    def holds_more(self, consumer: Consumer) -> bool:
        """Whether it holds messages ``consumer`` could still be given (a browser: newer than it saw)."""
        if consumer.browse:
            return self.has_after(self.browsers.get(consumer.id, 0))
        return self.count > 0

    def dispatch(self) -> None:
        """Hand messages to consumers with credit, round-robin, until one side runs out."""
        if self._dispatching or not self.consumers:
            return
        self._dispatching = True
        try:
            if self.browsers:
                dispatch_browsers(self)
            consumers = self._movers[:1] if self._single_active else self._movers
            n = len(consumers)
            if not n or not self.count:
                return
            taken = 0
            take = self._take
            if n == 1:  # the common case: no round robin to keep
                c = consumers[0]
                deliver = c.deliver
                credit = c.credit()  # each delivery takes exactly one
                while credit > 0 and self.count:
                    msg = take(c)
                    if msg is None:
                        break
                    taken += 1
                    credit -= 1
                    deliver(self, msg)
            else:
                # round robin over each ready ring, highest priority first: the head takes
                # one message and goes to the back; one without credit leaves the ring
                # (consumer_ready brings it back), so consumers without credit are not
                # visited per delivery. A lower ring gets messages only while no consumer
                # of a higher one can take them.
                in_ready = self._in_ready
                for _priority, ready in self._rings:
                    idle = 0  # consecutive ring members that could take nothing
                    while self.count and ready and idle < len(ready):
                        c = ready[0]
                        if c.credit() <= 0:
                            ready.popleft()
                            in_ready.discard(c.id)
                            continue
                        ready.rotate(-1)
                        msg = take(c)
                        if msg is None:
                            idle += 1
                            continue
                        idle = 0
                        taken += 1
                        c.deliver(self, msg)
                    if not self.count:
                        break
            self.stats.delivered += taken
            if taken and self._expiring and self.count:
                self._arm_heads()  # a head with an earlier expiry may be next
            if taken and self.space_listeners:
                for listener in list(self.space_listeners):
                    listener()
        finally:
            self._dispatching = False

    def _take_for(self, consumer: Consumer) -> QueuedMessage | None:
        selector = getattr(consumer, "selector", None)
        if selector is not None or self.groups is not None:
            return self._take_selected(consumer.id, selector or _any)
        now = None
        pager = self.pager
        for level in reversed(self._levels):
            if not level and (pager is None or not pager.refill(level)):
                continue
            msg = level[0]
            if msg.expiry is None and not msg.excluded:  # the usual head: take it
                level.popleft()
                self.count -= 1
                size = msg.size
                self._bytes -= size  # Node.bytes's setter, inline (as in publish)
                self.usage.memory_bytes -= size
                if self.durable_node and (msg.durable or self._store_all):
                    self.journal.submit((_store.UPDATE, self._key, msg.seq, msg.delivery_count, 1))
                return msg
            skipped: list[QueuedMessage] = []
            while level or (pager is not None and pager.refill(level)):
                msg = level.popleft()
                if msg.expiry is not None:
                    if now is None:
                        now = self.now()
                    if msg.expiry <= now:
                        self.count -= 1
                        self.bytes -= msg.size
                        self._expire(msg)
                        continue
                if msg.excluded and consumer.id in msg.excluded:
                    skipped.append(msg)
                    continue
                level.extendleft(reversed(skipped))
                self._taken(msg)
                return msg
            level.extendleft(reversed(skipped))
        return None

    def _take_fair(self, consumer: Consumer) -> QueuedMessage | None:
        """Qpid's fair share (core/features.py): the head of the first level that has not had
        its share this round. A consumer with a selector, a grouped queue, a message this
        consumer cannot take at a head, or messages all paged out: the usual take."""
        features = self.features
        assert features is not None
        if getattr(consumer, "selector", None) is None and self.groups is None:
            now = self.now()
            for p in features.fair_levels(self._levels):
                level = self._levels[p]
                while level:
                    msg = level[0]
                    if msg.expiry is not None and msg.expiry <= now:
                        level.popleft()
                        self.count -= 1
                        self.bytes -= msg.size
                        self._expire(msg)
                        continue
                    if msg.excluded and consumer.id in msg.excluded:
                        break
                    level.popleft()
                    self._taken(msg)
                    features.fair_taken(msg)
                    return msg
        return self._take_for(consumer)

    def _take_selected(self, cid: int, selector: Callable[[QueuedMessage], bool]) -> QueuedMessage | None:
        """The first message ``selector`` matches, in delivery order; the others stay where
        they are for other consumers. Each level is looked at only past what this consumer
        has already found not to match (``_scanned``), so a deep queue is walked once."""
        marks = self._scanned.get(cid)
        if marks is None:
            marks = self._scanned[cid] = [0] * PRIORITY_LEVELS
        now = None
        groups = self.groups  # a message of a group another consumer owns is not for this one
        levels = self._levels
        pager = self.pager
        p = len(levels)
        while p > 0:
            p -= 1
            level = levels[p]
            if not level and (pager is None or not pager.refill(level)):
                continue
            start = bisect_right(level, marks[p], key=_seq) if marks[p] else 0
            expired: list[int] = []
            found = -1
            for j, msg in enumerate(itertools.islice(level, start, None), start):
                if msg.expiry is not None:
                    if now is None:
                        now = self.now()
                    if msg.expiry <= now:
                        expired.append(j)
                        continue
                if msg.excluded and cid in msg.excluded:
                    continue
                if groups is not None and not groups.allows(cid, msg):
                    continue
                if selector(msg):
                    found = j
                    break
            taken = None
            if found >= 0:
                taken = level[found]
                marks[p] = taken.seq
                del level[found]
            elif len(level) > start:
                marks[p] = level[-1].seq
            for j in reversed(expired):
                msg = level[j]
                del level[j]
                self.count -= 1
                self.bytes -= msg.size
                self._expire(msg)
            if taken is None and pager is not None and pager.paged_count(p):
                # on into what is paged out, read a run at a time and left there
                taken, marks[p] = pager.take(p, marks[p], self._matcher(cid, selector))
            if taken is not None:
                if groups is not None:
                    groups.taken(cid, taken)
                self._taken(taken)
                return taken
        return None

    def _matcher(self, cid: int, selector: Callable[[QueuedMessage], bool]) -> Callable[[QueuedMessage], bool]:
        """What consumer ``cid`` (its ``selector``) may take of the paged-out messages."""
        groups = self.groups

        def match(msg: QueuedMessage) -> bool:
            return (groups is None or groups.allows(cid, msg)) and selector(msg)

        return match

    def _taken(self, msg: QueuedMessage) -> None:
        """``msg`` has left its level for a consumer: count it out, and record it delivered
        (the head-of-level fast path in ``_take_for`` does the same inline)."""
        self.count -= 1
        self.bytes -= msg.size
        if self._persistent(msg):
            self.journal.submit((_store.UPDATE, self._key, msg.seq, msg.delivery_count, 1))

    # -- expiry on time (core/expiry.py) ---------------------------------------------------
    def use_expirations(self, expirations: Expirations) -> None:
        """Arm this queue's expiry deadlines in ``expirations`` (the broker's) from now on."""
        self.expirations = expirations
        if self.policy.expires is not None:
            self._arm_unused()

    def _timed(self, msg: QueuedMessage) -> None:
        """``msg``, which expires, has joined a level or come back to its head: arm the
        heads' deadline if it may be earlier now. (A message behind a longer-lived head
        changes nothing: it expires when it reaches the head, as in RabbitMQ.)"""
        self._expiring = True
        armed = self.head_deadline
        expiry = msg.expiry
        if armed is None or (expiry is not None and expiry < armed):
            self._arm_heads()

    def _arm_heads(self) -> None:
        """Arm the earliest expiry among the heads of the levels (a level whose head is
        paged out gets its next run read back: core/paging.py)."""
        expirations = self.expirations
        if expirations is None:
            return
        pager = self.pager
        earliest: float | None = None
        for level in self._levels:
            if not level and (pager is None or not pager.refill(level)):
                continue
            expiry = level[0].expiry
            if expiry is not None and (earliest is None or expiry < earliest):
                earliest = expiry
        if earliest is not None:
            expirations.arm_heads(self, earliest)

    def expire_heads(self) -> int:
        """The heads' deadline has passed (core/expiry.py calls this): drop each expired
        message at the head of its level, dead-lettering it, until every head is live;
        then arm the next deadline. Returns how many expired. A message dead-lettered back
        into this queue meanwhile waits for the next deadline."""
        now = self.now()
        pager = self.pager
        left = self.count  # what was queued when it began
        n = 0
        for level in self._levels:
            while n < left and (level or (pager is not None and pager.refill(level))):
                msg = level[0]
                if msg.expiry is None or msg.expiry > now:
                    break
                level.popleft()
                self.count -= 1
                self.bytes -= msg.size
                self._expire(msg)
                n += 1
        self._arm_heads()
        if n and self.space_listeners:
            for listener in list(self.space_listeners):
                listener()
        return n

    def _arm_unused(self) -> None:
        """With ``expires`` and no consumer: arm the time it will have been unused that long."""
        expires = self.policy.expires
        if self.expirations is not None and expires is not None and not self.consumers:
            self.expirations.arm_unused(self, self.last_used + expires)

    def expire_if_unused(self) -> None:
        """The ``expires`` deadline has passed (core/expiry.py calls this): if nothing used
        the queue since (a consumer, a ``basic.get``, a redeclaration), it expires
        (``on_expired``); else the deadline moves on from its last use."""
        expires = self.policy.expires
        if expires is None or self.consumers or self.deleted:
            return  # (a consumer that leaves arms it again)
        if self.now() - self.last_used < expires:
            self._arm_unused()
        elif self.on_expired is not None:
            self.on_expired(self)

    def _expire(self, msg: QueuedMessage) -> None:
        self.stats.expired += 1
        if self.dead_letter is not None and self.policy.dead_letters:
            self._dead(msg, "expired")
        elif self.durable_node and (msg.durable or self._store_all):  # (_persistent, inline: dropped, not counted)
            self._delete_stored(msg)

    # -- outcomes from consumers ---------------------------------------------------------
    def defer(self, msg: QueuedMessage) -> None:
        """Set an acquired ``msg`` aside (Service Bus's defer): no consumer gets it; it is
        taken back from :attr:`deferred` by its number and settled as usual, after a restart too."""
        self.deferred[msg.number] = msg
        if self._persistent(msg):
            self.journal.submit((_store.UPDATE, self._key, msg.seq, msg.delivery_count, _store.DEFERRED))

    def set_group_state(self, group: str, state: bytes | None) -> None:
        """Keep a message group's state (Service Bus's session state; None: clear it), in
        the store as well if the queue is durable."""
        if state is None:
            self.group_states.pop(group, None)
        else:
            self.group_states[group] = state
        if self.durable_node:
            self.journal.submit((_store.GROUP_STATE, self._key, group, state))

    def ack(self, msg: QueuedMessage) -> None:
        """The consumer accepted the message: it is gone for good."""
        self.stats.acked += 1
        if self.durable_node and (msg.durable or self._store_all):  # (_persistent, inline)
            self._delete_stored(msg)
        if self.groups is not None:
            self._group_settled(msg, dispatch=True)

    def _group_settled(self, msg: QueuedMessage, *, dispatch: bool) -> bool:
        """A taken message of a group is back or done: a group whose owner left may be free
        now (then True, and dispatched if ``dispatch``)."""
        assert self.groups is not None
        if not self.groups.settled(msg):
            return False
        self._scanned.clear()  # its messages are for everyone again
        if dispatch:
            self.dispatch()
        return True

    def release(
        self,
        msg: QueuedMessage,
        *,
        delivery_failed: bool = False,
        undeliverable_to: int | None = None,
        due: float | None = None,
    ) -> None:
        """Put the message back at the head of its level (released or modified); with
        ``delivery_failed``, a message over the delivery limit is dead-lettered (or
        dropped) instead. ``due`` (seconds since the epoch): delivered again no earlier
        than then (RabbitMQ 4's delayed retry: a ``modified`` outcome annotated with
        ``x-opt-delivery-time``), held by the scheduler meanwhile and enqueued at the
        back when due (:meth:`enqueue_due`)."""
        if self.deleted and self.orphaned is not None:
            self.orphaned(msg)
            return
        self.stats.released += 1
        freed = self.groups is not None and self._group_settled(msg, dispatch=False)  # dispatched below
        if delivery_failed:
            msg.delivery_count += 1
            limit = self.policy.delivery_limit
            if limit is not None and msg.delivery_count >= limit:
                self._dead(msg, "delivery_limit")
                if freed:
                    self.dispatch()
                return
        if due is not None and self.scheduler is not None and due > self.now():
            msg._due = due  # (what a restart reads again from its annotations)
            if self._persistent(msg):
                self.journal.submit((_store.UPDATE, self._key, msg.seq, msg.delivery_count, 0))
            self.scheduler.hold(self, msg, due)
            if freed:
                self.dispatch()
            return
        if undeliverable_to is not None:
            if msg.excluded is None:
                msg.excluded = set()
            msg.excluded.add(undeliverable_to)
        # Back to the head, but in arrival order among other returned messages:
        # releasing 1, 2, 3 must redeliver 1, 2, 3 (the walk stops at the first
        # newer message, so it is short: returned messages sit at the front).
        level = self._level(msg.priority)
        for marks in self._scanned.values():  # selective consumers look at it again
            if marks[msg.priority] >= msg.seq:
                marks[msg.priority] = msg.seq - 1
        if msg.excluded or self.pager is None or not self.pager.put_back(msg):
            i = 0
            n = len(level)
            while i < n and level[i].seq < msg.seq:
                i += 1
            level.insert(i, msg)
        self.count += 1
        self.bytes += msg.size
        if self._persistent(msg):
            self.journal.submit((_store.UPDATE, self._key, msg.seq, msg.delivery_count, 0))
        if msg.expiry is not None:
            self._timed(msg)
        self.dispatch()

    def reject(self, msg: QueuedMessage) -> None:
        """The consumer rejected the message: dead-letter it (or drop it, counted)."""
        self.stats.rejected += 1
        if self.groups is not None:
            self._group_settled(msg, dispatch=True)
        self._dead(msg, "rejected")

    def _dead(self, msg: QueuedMessage, reason: str, *, stored: bool = True) -> None:
        """``msg`` is dead (``reason``: rejected, maxlen, delivery_limit; expired): dead-letter
        it if the policy names a target, else drop it (counted in ``dropped``).

        At least once: a ``stored`` message leaves the store only once its dead letter is
        safe where it went (``dead_letter``'s ``on_stored``: the target's write committed,
        or it reached no queue), never in the same store batch before it; a crash between
        the two leaves it in both places, never in neither. One that reaches no queue is
        dropped, or under ``x-dead-letter-strategy`` at-least-once kept here and sent again
        later (:meth:`retry_dead_letters`)."""
        if self.dead_letter is not None and self.policy.dead_letters:
            self.stats.dead_lettered += 1
            stored = stored and self._persistent(msg)
            done: Callable[[], None] = (lambda: self._delete_stored(msg)) if stored else nothing
            if self.dead_letter(msg, reason, done):
                return
            if self.policy.dead_letter_strategy != "at-least-once" or self.deleted:
                done()
                return
            if stored:  # kept aside in the store too: after a restart it is held again, not ready
                self.journal.submit((_store.UPDATE, self._key, msg.seq, msg.delivery_count, _store.HELD_DEAD_LETTER[reason]))
            self._hold_dead(msg, reason, done)
            return
        self.stats.dropped += 1
        if stored:
            self._journal_delete(msg)

    def _hold_dead(self, msg: QueuedMessage, reason: str, on_stored: Callable[[], None]) -> None:
        """Keep a dead letter that reached no queue, to send it again later (at-least-once)."""
        if self.held_dead is None:
            self.held_dead = HeldDeadLetters(self.now)
            if self.on_holding is not None:
                self.on_holding(self)
        self.held_dead.hold(msg, reason, on_stored)

    def retry_dead_letters(self, *, due_only: bool = False) -> bool:
        """Send the dead letters it keeps again (``due_only``: only if their time-driven
        retry is due); those no queue takes stay. Whether it still keeps any."""
        held = self.held_dead
        if held is None:
            return False
        if self.dead_letter is None or not self.policy.dead_letters or self.deleted:
            held.drop()  # (nowhere to send them any more)
        elif not due_only or held.due():
            held.retry(self.dead_letter)
        if not held:
            self.held_dead = None
            return False
        return True

    def get(self) -> QueuedMessage | None:
        """Take the next message without a consumer (0-9-1 basic.get), or None if there is
        none; the caller settles it with ack/release/reject as a consumer would."""
        self.last_used = self.now()  # (invoked at all: it renews ``expires``, as in RabbitMQ)
        if not self.count:
            return None
        msg = self._take(_PULL)
        if msg is not None:
            self._pulled()
        return msg

    def _pulled(self) -> None:
        """A message was taken without a consumer (:meth:`get`, :meth:`acquire`)."""
        self.stats.delivered += 1
        if self._expiring:
            self._arm_heads()
        for listener in list(self.space_listeners):
            listener()

    def acquire(self, seq: int) -> QueuedMessage | None:
        """Take the message ``seq`` itself, as :meth:`get` takes the next one (a browsed
        message a 0-10 client acquires: ``message.acquire``); None if it is no longer on
        the queue (taken, settled, expired) or is paged out."""
        for level in self._levels:
            i = bisect_left(level, seq, key=_seq)
            if i < len(level) and level[i].seq == seq:
                msg = level[i]
                del level[i]
                self._taken(msg)
                self._pulled()
                return msg
        return None

    def delete(self) -> int:
        """The queue is being deleted: purge it and cancel its consumers; return the purged count."""
        self.deleted = True
        consumers, self.consumers, self._movers = self.consumers, [], []
        for _priority, ring in self._rings:
            ring.clear()
        self._in_ready.clear()
        self._ring_of.clear()
        self.browsers.clear()
        n = self.purge()
        if self.held_dead is not None:
            self.held_dead.drop()
            self.held_dead = None
        if self.expirations is not None:
            self.expirations.forget(self)
        cancel_consumers(consumers)
        return n

    def purge(self) -> int:
        n = self.count
        if self.pager is not None:
            self.pager.purge()
        if self.scheduler is not None:
            held = self.scheduler.cancel(self)
            for msg in held:
                self._journal_delete(msg)
            n += len(held)
        for level in self._levels:
            for msg in level:
                self._journal_delete(msg)
            level.clear()
        for msg in self._unstored.values():
            self._journal_delete(msg)
        self._unstored.clear()
        self.count = self.bytes = 0
        return n


_seq: Callable[[QueuedMessage], int] = attrgetter("seq")


def _any(msg: QueuedMessage) -> bool:  # the view of a consumer with no selector
    return True


class _PullConsumer:
    """Who takes a message by basic.get: no consumer, excluded from nothing."""

    id = 0
    browse = False


_PULL: Any = _PullConsumer()
