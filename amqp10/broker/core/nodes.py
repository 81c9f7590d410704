"""Broker nodes: the common base of queues (core/queues.py) and streams (core/streams.py), free of any I/O.

A node holds :class:`QueuedMessage` records and hands them to consumers (the
broker's outgoing links) as their credit allows. What a consumer is — a link on
some connection — is the server's business; here it is anything with
:class:`Consumer`'s methods. Durability goes through a :class:`Journal`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, TypeVar

from ..._mypyc import Referable, mypyc_attr
from .accounting import DETACHED, Usage
from .message import QueuedMessage
from .queue_policy import QueuePolicy

__all__ = [
    "NULL_JOURNAL",
    "ConsumeResult",
    "Consumer",
    "DuplicateWindow",
    "Answered",
    "Journal",
    "Node",
    "NodeElsewhere",
    "Refused",
    "NullJournal",
    "PublishResult",
    "Stats",
    "cancel_consumers",
    "nothing",
    "settled_everywhere",
    "unheard",
]


class PublishResult(enum.Enum):
    """What a publish (``node.publish``, ``VirtualHost.route``) did with a message, and so
    why, when it was not taken: each front end maps it to its protocol's answer (a 1.0
    outcome, a 0-9-1 ``basic.return`` or ``basic.nack``) from one table of its own.

    Only :attr:`TAKEN` is true, so ``if node.publish(...)`` reads as "was it taken".
    """

    TAKEN = "taken"
    """The node has it (or dropped it by its own rules: a duplicate, an overflow that
    drops the head, a filter that admits nothing); ``on_stored`` runs once it is safe."""
    UNROUTABLE = "unroutable"
    """An exchange matched no queue (nor an alternate exchange one); ``on_stored`` never runs."""
    FULL = "full"
    """Every queue it reached is full and refuses publishes (overflow ``reject-publish``);
    ``on_stored`` never runs."""
    REFUSED = "refused"
    """The node cannot take this message (a management request it cannot answer: the node
    says why); ``on_stored`` never runs."""

    def __bool__(self) -> bool:
        return self is PublishResult.TAKEN


class ConsumeResult(enum.Enum):
    """Whether a node takes a new consumer (:meth:`Node.admits`), and so why, when it does
    not: each front end maps it to its protocol's answer (a 1.0 error condition, a 0-9-1
    reply code, a 0-10 execution exception) from one table of its own.

    Only :attr:`ADMITTED` is true, so ``if node.admits(...)`` reads as "may it consume".
    Finding the node (not found, another connection's exclusive queue) and the user's
    permission are refused before this, by the core's :class:`~.vhost.ModelError` kinds.
    """

    ADMITTED = "admitted"
    """The consumer may be added (``node.add_consumer``)."""
    EXCLUSIVE_HELD = "exclusive-held"
    """Another consumer has the node to itself (0-9-1 ``basic.consume`` or 0-10
    ``message.subscribe`` with ``exclusive``)."""
    IN_USE = "in-use"
    """The new consumer asked to have the node to itself, and it has consumers already."""
    LOCKED = "locked"
    """The node is another connection's exclusive queue (its owner, another worker, says so:
    the connection that may consume from it is there)."""

    def __bool__(self) -> bool:
        return self is ConsumeResult.ADMITTED


class Consumer(Protocol):
    """What a node delivers to: a 1.0 outgoing link or a 0-9-1 basic.consume, seen from the node.

    One may also have an int ``priority`` (0 if it has none): a queue gives messages to
    the consumers of the highest priority that have credit, round-robin among equals;
    a bool ``exclusive`` (False if it has none): while it consumes, no other may
    (:meth:`Node.admits`); a bool ``no_ack`` (False if it has none): its front end
    acks each message as it hands it out (a queue another worker owns is then done with
    it as it sends it); and a ``selector`` (None if it has none: it takes any message),
    which the front ends' consumers set, if only to None, as a queue asks for it each
    message and a missing attribute's default costs a raised and caught AttributeError.
    """

    id: int
    browse: bool

    def credit(self) -> int:
        """How many more messages the consumer can take now (link credit, prefetch room).

        A queue asks only the consumers in its ready ring: one found with no credit
        leaves the ring until its front end calls ``node.consumer_ready(consumer)``
        (1.0: a flow frame granted credit; 0-9-1: an ack made prefetch room).
        """

    def deliver(self, node: Node, msg: QueuedMessage) -> None:
        """Send ``msg``; the consumer later calls ``node.ack``/``release``/``reject`` with the outcome."""

    def cancelled(self) -> None:
        """The node was deleted under the consumer (1.0: detach with amqp:resource-deleted;
        0-9-1: basic.cancel). It has already been removed from the node."""


def cancel_consumers(consumers: list[Consumer]) -> None:
    """Tell each of ``consumers`` (already removed from their deleted node) it is cancelled."""
    for c in consumers:
        c.cancelled()


class Journal(Protocol):
    """Where a durable node writes its changes (the group committer, or nothing)."""

    stalled: str | None
    """Why nothing can be written just now (the store's disk is full), or None: while set,
    front ends refuse new messages (nothing is confirmed that is not stored)."""

    def submit(self, op: tuple[Any, ...], on_commit: Callable[[], None] | None = None) -> None: ...

    @property
    def idle(self) -> bool:
        """Whether everything submitted is committed (and its ``on_commit`` has run)."""


class NullJournal:
    """The journal of a node that keeps nothing on disk."""

    stalled: str | None = None
    idle = True

    def submit(self, op: tuple[Any, ...], on_commit: Callable[[], None] | None = None) -> None:
        if on_commit is not None:
            on_commit()


NULL_JOURNAL = NullJournal()


class Stats:
    __slots__ = (
        "acked",
        "dead_lettered",
        "delivered",
        "dropped",
        "enqueued",
        "expired",
        "rejected",
        "released",
        "scheduled",
    )

    def __init__(self) -> None:
        self.enqueued = self.delivered = self.acked = self.released = 0
        self.rejected = self.dropped = self.expired = self.dead_lettered = 0
        self.scheduled = 0  # held back until their due time now (core/scheduled.py), not in the depth

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__slots__}

    @property
    def unacked(self) -> int:
        """Deliveries not yet settled by their consumer (a queue's: a stream keeps what it
        delivers, and its consumers' outcomes are not counted against it)."""
        return max(0, self.delivered - self.acked - self.released - self.rejected)


@mypyc_attr(allow_interpreted_subclasses=True)
class Node(Referable):
    """Common base: a named node with a policy.

    The class attributes that subclasses override in their class body are ``ClassVar``s:
    in the compiled build (setup.py) a plain one is an instance slot, and compiled code
    reading it would not see an interpreted subclass's class-level value.
    """

    kind: ClassVar[str] = "node"
    deleted = False
    """Set once the node is deleted: publishers still holding it are told (1.0: detached)."""
    needs_message_ids = True
    """Whether publishers must extract message-ids for this node (duplicate detection, the store)."""
    usage: Usage = DETACHED
    """The broker's running totals this node adds its bytes to (see :meth:`account_to`)."""
    _bytes = 0
    _disk = 0
    _paged = 0
    _bytes_on_disk: ClassVar[bool] = False
    """Whether every byte held is also on disk (a stream): then ``bytes`` counts for both."""

    consumers: list[Consumer]
    """Who consumes from the node (a queue's and a stream's; an exchange has none)."""

    def __init__(self, name: str, policy: QueuePolicy, *, dynamic: bool = False) -> None:
        self.name = name
        self.policy = policy
        self.dynamic = dynamic
        self.stats = Stats()

    @property
    def bytes(self) -> int:
        """Bytes of the messages held (for a queue: queued, not with a consumer)."""
        return self._bytes

    @bytes.setter
    def bytes(self, value: int) -> None:
        delta = value - self._bytes
        self._bytes = value
        usage = self.usage
        usage.memory_bytes += delta
        if self._bytes_on_disk:
            self._disk += delta
            usage.disk_bytes += delta

    def _disk_changed(self, delta: int) -> None:
        self._disk += delta
        self.usage.disk_bytes += delta

    def _paged_changed(self, delta: int) -> None:
        """``delta`` more of the bytes held are paged out (in the store only, not in memory)."""
        self._paged += delta
        self.usage.paged_bytes += delta

    def account_to(self, usage: Usage) -> None:
        """Count this node's bytes in ``usage`` from now on (``DETACHED``: the node is gone)."""
        old = self.usage
        old.memory_bytes -= self._bytes
        old.disk_bytes -= self._disk
        old.paged_bytes -= self._paged
        usage.memory_bytes += self._bytes
        usage.disk_bytes += self._disk
        usage.paged_bytes += self._paged
        self.usage = usage

    def can_accept(self, size: int) -> bool:
        return True

    def room(self) -> int | None:
        """How many more messages a publisher may send (None: no limit)."""
        return None

    def publish(self, msg: QueuedMessage, on_stored: Callable[[], None]) -> PublishResult:
        raise NotImplementedError

    answers_later: ClassVar[bool] = False
    """Whether a publish may be refused after :meth:`publish_answered` returned (a node that
    answers at once says so in its result): a front end whose outcome can wait calls that."""

    def publish_answered(self, msg: QueuedMessage, on_stored: Callable[[], None], on_refused: Refused) -> PublishResult:
        """:meth:`publish`, with ``on_refused`` told if the node does not take it after all."""
        return self.publish(msg, on_stored)

    def admits(self, *, exclusive: bool = False) -> ConsumeResult:
        """Whether a new consumer (one that wants the node to itself, if ``exclusive``) may
        be added now; ask before answering the consume and calling :meth:`add_consumer`."""
        consumers = self.consumers
        if any(getattr(c, "exclusive", False) for c in consumers):
            return ConsumeResult.EXCLUSIVE_HELD
        if exclusive and consumers:
            return ConsumeResult.IN_USE
        return ConsumeResult.ADMITTED

    def add_consumer(self, consumer: Consumer) -> None:
        raise NotImplementedError

    def remove_consumer(self, consumer: Consumer) -> None:
        raise NotImplementedError

    def dispatch(self) -> None:
        """Deliver what consumers' credit allows."""

    def consumer_ready(self, consumer: Consumer) -> None:
        """``consumer``'s credit went up (from none, or more): deliver what it now allows.

        Front ends call this whenever a consumer gains credit (1.0 flow, 0-9-1 prefetch
        room after an ack); it is cheap when the consumer is already known to be ready.
        """
        self.dispatch()

    def holds_more(self, consumer: Consumer) -> bool:
        """Whether it holds messages ``consumer`` could still be given (none, for a node that keeps none)."""
        return False

    def drain(self, consumer: Consumer, drained: Callable[[bool], None]) -> None:
        """Deliver to ``consumer`` what its credit allows now, then tell ``drained`` whether
        messages it could be given are left for want of credit (a 1.0 drain, a 0-10
        ``message.flush``): at once here; a node another worker holds tells it once its
        holder has sent what the credit allows (those messages come first)."""
        self.consumer_ready(consumer)
        drained(consumer.credit() <= 0 and self.holds_more(consumer))

    # -- settlement: what a consumer's outcome does (nothing, for a node that keeps no messages)
    def ack(self, msg: QueuedMessage) -> None:
        """The consumer is done with ``msg`` (1.0 accepted, 0-9-1 basic.ack)."""

    def release(
        self, msg: QueuedMessage, *, delivery_failed: bool = False, undeliverable_to: int | None = None, due: float | None = None
    ) -> None:
        """``msg`` goes back for redelivery (1.0 released/modified, 0-9-1 nack/reject with requeue),
        no earlier than ``due`` if given (a queue's delayed retry)."""

    def reject(self, msg: QueuedMessage) -> None:
        """``msg`` is dead (1.0 rejected, 0-9-1 nack/reject without requeue): dead-letter or drop it."""

    def stream_offset(self, msg: QueuedMessage) -> int | None:
        """The offset of ``msg``, which this node delivered, in its log (a stream's: what
        RabbitMQ 4 tells its readers in ``x-stream-offset``); None for a node that keeps none."""
        return None

    def rewritten(self, msg: QueuedMessage) -> None:
        """A consumer changed ``msg``'s bytes while it held it (a 1.0 ``modified`` outcome's
        message annotations), before its outcome: a queue stores them again, a queue another
        worker holds gets them (nothing, for a node that keeps no copy of its own)."""


T = TypeVar("T")

Answered = Callable[[Callable[[], T]], None]
"""Told the answer to a question put to a node that answers later (:class:`NodeElsewhere`):
called with a function that returns the answer, or raises the core's
:class:`~.vhost.ModelError` the node answered instead (not found, locked, in use...)."""

Refused = Callable[["PublishResult | None"], None]
"""Told why a publish to a node that answers later was not taken after all: the node's
answer, or None (it could not be reached)."""


@mypyc_attr(allow_interpreted_subclasses=True)
class NodeElsewhere(Node):
    """A queue that another part of the broker holds (another worker owns it), as a front
    end here reaches it (:meth:`~.vhost.VirtualHost.elsewhere`): published to and consumed
    from as a node here, while what a local queue answers at once (its counts, whether it
    exists, a declaration, a purge, ``basic.get``) is answered later, through ``answered``
    (at most once; the front end holds the connection's next methods until then)."""

    kind = "remote"
    answers_later = True
    count = 0
    """Messages held here: none (a front end reads this for ``available``)."""
    make_as: str | None = None
    """The kind the latest attach here named it as (a 1.0 terminus's capability or prefix:
    ``stream``, ``queue``; :meth:`~.vhost.VirtualHost.lookup`, each look-up's own, so a
    plain attach after a stream's carries none), which its holder makes it as if it has no
    such node (what it has keeps its kind, as on one broker). None: its rules decide."""
    held_kind: str | None = None
    """The kind of the node it stands in for (``queue``, ``stream``...) as its holder said
    (its answer to a consumer's link); None before. Read through
    :meth:`VirtualHost.kind_of <.vhost.VirtualHost.kind_of>`."""
    space_listeners: set[Callable[[], None]]
    """Called when :meth:`~Node.room` may have grown (the holder said so), as a queue's are."""

    def publish_answered(self, msg: QueuedMessage, on_stored: Callable[[], None], on_refused: Refused) -> PublishResult:
        """:meth:`publish`, with ``on_refused`` told if the holder does not take it after all."""
        raise NotImplementedError

    def defer(self, msg: QueuedMessage) -> None:
        """Set ``msg``, which a consumer here holds, aside where it is held (Service Bus's
        defer: :meth:`Queue.defer <amqp10.broker.core.Queue.defer>` there)."""
        raise NotImplementedError

    def ask_status(self, answered: Answered[tuple[int, int]]) -> None:
        """Its messages and consumers (not found, if there is no such queue)."""
        raise NotImplementedError

    def ask_declare(
        self, *, durable: bool, arguments: Mapping[str, Any], auto_delete: bool, answered: Answered[tuple[int, int]]
    ) -> None:
        """Declare it where it is held (the existing one if there is one): its messages and consumers."""
        raise NotImplementedError

    def ask_purge(self, answered: Answered[int]) -> None:
        """Drop its ready messages: how many."""
        raise NotImplementedError

    def ask_held(self, answered: Answered[bool]) -> None:
        """Whether its holder has a node of this name (of any kind) to publish to."""
        raise NotImplementedError

    def ask_delete(self, *, if_unused: bool, if_empty: bool, answered: Answered[int]) -> None:
        """Delete it (its consumers are cancelled): the messages it held."""
        raise NotImplementedError

    def ask_get(self, answered: Answered[tuple[QueuedMessage | None, int]]) -> None:
        """Take its next message (settled later as a consumer's) and the count left."""
        raise NotImplementedError

    def ask_acquire(self, seqs: Sequence[int], answered: Answered[dict[int, QueuedMessage]]) -> None:
        """Take the messages ``seqs`` (its seqs, as a browser was sent them) still on it (each
        settled later as a consumer's, as :meth:`ask_get`'s): those taken, by seq."""
        raise NotImplementedError

    def ask_consume(
        self, consumer: Consumer, *, exclusive: bool, answered: Answered[ConsumeResult], make: bool = False
    ) -> None:
        """Add ``consumer`` if the queue admits it (:meth:`Node.admits`, decided where it is
        held); ``answered`` before anything is delivered to it; ``make``: the holder makes
        the queue if it has none (as a 1.0 consumer's attach does)."""
        raise NotImplementedError

    def ask_cancel(self, consumer: Consumer, answered: Answered[None]) -> None:
        """:meth:`remove_consumer`, answered once the holder has dropped ``consumer`` too
        (nothing more goes to it there, and its counts no longer show it); never refused."""
        raise NotImplementedError

    def ask_unsubscribe(self, topic: str, key: str) -> None:
        """It is subscription ``key`` of 1.0 topic ``topic``: end it where it is held (a
        durable subscription's consumer closed its link), what it holds with it."""
        raise NotImplementedError

    def ask_make(self, kind: str, answered: Answered[str | None]) -> None:
        """Its holder decides what it is, an attach here having named it as ``kind``: the
        node it has, else one of ``kind`` made now (:meth:`VirtualHost.decide
        <.vhost.VirtualHost.decide>`); answered with that node's kind (None: none decided)."""
        raise NotImplementedError

    def ask_settled(self, answered: Answered[None]) -> None:
        """Answered once the outcomes given to it here so far are applied where it is held,
        and the dead letters they made are in their queues (wherever those are held), as
        one broker has them before it reads the client's next method."""
        raise NotImplementedError


def nothing() -> None:
    """The callback with nothing to do: an ``on_stored`` or ``then`` no one waits for, an
    answer that carries nothing but that it came."""


def unheard(result: PublishResult | None) -> None:
    """The refusal no one is told of: for a publish no one waits for the answer of (a
    pre-settled 1.0 transfer, a 0-9-1 publish without confirms or ``mandatory``), as on
    one worker."""


def answer_now(answer: Callable[[], None]) -> None:
    """What a front end does with an owner's answer that completes a held command
    (:meth:`NodeElsewhere.ask_settled`, ``ask_cancel``): apply it, now that it came."""
    answer()


def settled_everywhere(nodes: Sequence[NodeElsewhere], answered: Answered[None]) -> None:
    """``answered`` once each of ``nodes`` answered :meth:`NodeElsewhere.ask_settled`: what a
    front end waits for after rejecting messages of queues held elsewhere, before it reads
    the client's next method (which may read their dead letters)."""
    left = len(nodes)

    def one(_: Callable[[], None]) -> None:
        nonlocal left
        left -= 1
        if left == 0:
            answered(nothing)

    if not nodes:
        answered(nothing)
    for node in nodes:
        node.ask_settled(one)


class DuplicateWindow:
    """The last ``size`` message-ids a node has stored (publishes seen again are not stored)."""

    __slots__ = ("_ids", "size")

    def __init__(self, size: int) -> None:
        from collections import OrderedDict

        self.size = size
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, message_id: str) -> bool:
        """Whether ``message_id`` is in the window (without remembering it)."""
        return message_id in self._ids

    def seen(self, message_id: str | None) -> bool:
        """True if ``message_id`` is in the window; otherwise remember it and return False."""
        if message_id is None or self.size <= 0:
            return False
        ids = self._ids
        if message_id in ids:
            return True
        ids[message_id] = None
        if len(ids) > self.size:
            ids.popitem(last=False)
        return False
