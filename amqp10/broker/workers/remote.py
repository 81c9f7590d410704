"""The side of an internal link that stands in for nodes another worker owns.

A :class:`RemoteNode` is a :class:`~amqp10.broker.core.Node` whose messages live on the
owning worker. The core's front ends publish to it and consume from it as from a local
node:

- ``publish(msg, on_stored, on_refused)`` adds ``msg``, as a record, to this turn's
  batch for the node, sent on the node's one publishing link at the end of the turn (so
  the messages of every publisher keep their order), and returns
  :attr:`~PublishResult.TAKEN` at once: ``on_stored`` runs only once the owner took it
  (and stored it, if durable), exactly when a local node would run it; if the owner
  refused it, ``on_refused`` gets the owner's :class:`PublishResult` (full, unroutable,
  refused), or None when the owner is unavailable (the link failed and it was not back
  within ``worker_down_hold``: 1.0 answers released, 0-9-1 a nack; until then what is
  published to it is held, :meth:`RemoteNodes.hold`, and sent once it is back);
- ``add_consumer(c)`` opens a link on the owner for ``c`` (its own consumer there, so
  consumers on every worker compete for the queue's messages in its order) and grants
  it, in control records, the credit ``c`` has, at most :data:`CREDIT_BATCH` at a time:
  no more messages are in flight to this worker than ``c`` granted, plus at most one
  batch when ``c`` takes credit back; ``consumer_ready(c)`` (the front end's call when
  ``c``'s credit changes) delivers what waits here and grants more, or takes back from
  the owner what it holds beyond the credit (a negative grant: the credit lowered);
- ``ack``/``release``/``reject``/``defer`` send the outcome (accepted, released with
  delivery-failed or undeliverable-here and a delayed retry's due time, rejected, set
  aside: Service Bus's defer) in a
  control record naming the owner's reference, where the owner's queue applies it
  (redelivery count, dead-lettering, holding it until due) as for a local consumer;
  ``rewritten`` (a 1.0 ``modified`` outcome's message annotations, merged into the message
  here) sends the message's new bytes just before its outcome, so the owner's queue
  requeues or dead-letters them (and stores them), as a local queue does.

:class:`RemoteNodes` runs the opening side of one internal link (to one owner): it
makes the remote nodes and hands the engine's events to them.
"""

from __future__ import annotations

import itertools
import logging
import secrets
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from ..._mypyc import mypyc_attr
from ...transport import (
    ConnectionOpened,
    CreditAdded,
    DeliveryReceived,
    DeliveryUpdated,
    Event,
    IllegalStateError,
    LinkAttached,
    LinkDetached,
    LinkFailed,
    Receiver,
    Sender,
)
from ...transport.delivery import Delivery
from ...types import Accepted, Rejected, Source, Target, symbol
from ..core import (
    AccessRefused,
    Answered,
    Consumer,
    ConsumeResult,
    ModelError,
    NodeElsewhere,
    NotFound,
    PreconditionFailed,
    PublishResult,
    QueuedMessage,
    QueuePolicy,
    Refused,
    ResourceLocked,
    nothing,
)
from ..core.typed_values import carried
from . import bytecredit
from .link import (
    BATCH_FORMAT,
    BYTES,
    CONTROL,
    CONTROL_FORMAT,
    DELIVERY_FORMAT,
    DRAIN,
    DRAINED_FORMAT,
    GRANT,
    OUTCOME,
    REPLY_FORMAT,
    REQUEST_FORMAT,
    REWRITE_FORMAT,
    STOP,
    STREAM_OFFSET_FILTER,
    InternalLink,
    RecordError,
    by_exclusive_consumer,
    decode_deliveries,
    decode_record,
    decode_request,
    encode_batch,
    encode_record,
    encode_request,
    encode_rewrites,
    records_of,
)
from .making import MAKE_NODE

__all__ = [
    "ADMITTED",
    "AT_MOST_ONCE",
    "CONSUME_RESULTS",
    "CONSUMER_TIMEOUT",
    "CREDIT_BATCH",
    "DELIVERY_LIMIT",
    "EXCLUSIVE",
    "GETS",
    "KIND",
    "LIMITED",
    "MAKE",
    "MAKE_AS",
    "NO_NODE",
    "REPLIES_ADDRESS",
    "REQUESTS_ADDRESS",
    "ROUTED",
    "SUBSCRIPTION",
    "TOPIC_COPY",
    "PUBLISH_RESULTS",
    "REFUSED_IN_PART",
    "RESULTS",
    "RemoteNode",
    "REFUSAL",
    "RemoteNodes",
    "UNREADABLE",
    "WHY",
]

log = logging.getLogger("amqp10.broker.workers")

TRANSFER_CREDIT: Final = 1000
"""The link credit of a consuming link, in transfers (each carries the messages of one turn):
the consumer's credit, in messages, goes to the owner in control records."""

CREDIT_BATCH: Final = 256
"""The most credit a remote consumer's link holds at once (and so the most messages that
may be in flight to it beyond its consumer's credit, if that consumer takes credit back)."""

VHOST: Final = symbol("vhost")
PRIORITY: Final = symbol("priority")
CONSUMER_ID: Final = symbol("consumer-id")
NEEDS_MESSAGE_IDS: Final = symbol("needs-message-ids")
"""In the owner's answer to a publishing link: whether its node reads message-ids (duplicate
detection, the store); until then a remote node asks its publishers' front ends for them."""
LIMITED: Final = symbol("limited")
"""In the owner's answer to a publishing link: whether its node limits its publishers (a
queue whose overflow blocks them: ``Node.room``). The owner keeps the link's credit, in
transfers (batches), within the node's room in messages (owner.py ``_grant``), so the
credit it grants is the room it has; :meth:`RemoteNode.room` hands it on to the node's
publishers here, whose credit stops while the queue is full and comes back as it drains."""

ACCEPT: Final = 0
RELEASE: Final = 1
REJECT: Final = 2
FAILED: Final = 4
"""With :data:`RELEASE`: the delivery failed (1.0 modified delivery-failed; its count goes up)."""
UNDELIVERABLE: Final = 8
"""With :data:`RELEASE`: not to this consumer again (1.0 modified undeliverable-here)."""
DEFER: Final = 16
"""Set aside on the owner's queue (Service Bus's defer: :meth:`RemoteNode.defer`), still
acquired, until taken back by its number there."""
CONTROL_ADDRESS: Final = "$control"
"""The target of the link that carries control records (credit grants, outcomes) to the owner."""

PUBLISH_RESULTS: tuple[PublishResult, ...] = tuple(PublishResult)
"""What the owner's node answered each record of a batch, by code (its index here; 0: taken)."""
REFUSED_IN_PART: Final = symbol("amqp10:publish:not-taken")
"""The condition of the owner's rejected outcome for a batch not all taken; the error's info
holds :data:`RESULTS`: one code a record, in order (:data:`PUBLISH_RESULTS`)."""
RESULTS: Final = symbol("results")

AT_MOST_ONCE: Final = symbol("at-most-once")
"""In a consuming link's properties: its consumer's front end settles each message as it
hands it out (a consumer's ``no_ack``, 0-9-1's): the owner is done with each as it sends
it, and no outcome comes back."""
ROUTED: Final = symbol("routed")
"""In a publishing link's properties: its messages go to the queue by name, as the default
exchange routes them (unroutable if the owner has no such queue; none is made)."""
TOPIC_COPY: Final = symbol("topic-copy")
"""In a routed publishing link's properties: its node is the owner's copy of a 1.0 topic
(every worker has one: ``Topic.copies``), which the owner makes if it has none yet (the
metadata that makes it there may come after the topic's first message)."""
SUBSCRIPTION: Final = symbol("subscription")
"""In a consuming link's properties: [topic, key, durable] of the 1.0 topic subscription it
consumes (the owner makes it on its copy of the topic, as a broker of one worker does at
the consumer's attach; a topic pattern's, a durable wildcard subscription, among its
wildcard subscriptions)."""
EXCLUSIVE: Final = symbol("exclusive")
"""In a consuming link's properties: its consumer wants the queue to itself."""
MAKE_AS: Final = symbol("make-as")
"""In a publishing or consuming link's properties: the kind to make the node as if the owner
has none (:attr:`~amqp10.broker.core.NodeElsewhere.make_as`: a 1.0 attach's capability)."""
MAKE: Final = symbol("make")
"""In a consuming link's properties: whether the owner makes the node if it has none (a 1.0
consumer's attach does, as on a broker of one worker; a 0-9-1 or 0-10 consume does not)."""
NO_NODE: Final = -1
"""The owner's :data:`ADMITTED` answer when it has no such node and made none (the link is
detached next): the consumer's front end refuses it as not found, as a broker of one worker does."""
UNREADABLE: Final = -2
"""The owner's :data:`ADMITTED` answer when the node cannot apply the consumer's view of it
(a stream offset it cannot read; :data:`WHY` says why; the link is detached next): the
consumer's front end refuses it as a precondition that failed, as a broker of one worker does."""
WHY: Final = symbol("why")
REFUSAL: Final = symbol("refusal")
"""With :data:`UNREADABLE`: the core's refusal the owner answered the consumer with, by class
name (``NotFound``, ``ResourceLocked``: a Service Bus session none free, or held), which
its front end answers as, as one worker's does; absent: ``PreconditionFailed``."""
ADMITTED: Final = symbol("admitted")
"""In the owner's answer to a consuming link: whether it admitted the consumer (an index
into :data:`CONSUME_RESULTS`; a refused link is detached next)."""
CONSUME_RESULTS: tuple[ConsumeResult, ...] = tuple(ConsumeResult)
KIND: Final = symbol("kind")
"""In the owner's answer to a consuming link it admitted: its node's kind (``queue``,
``stream``...; :attr:`NodeElsewhere.held_kind <amqp10.broker.core.NodeElsewhere.held_kind>`)."""
CONSUMER_TIMEOUT: Final = symbol("consumer-timeout")
"""In the owner's answer to a consuming link: its node's consumer timeout (seconds; absent:
none), which the consumer's front end here applies (core/consumer_timeout.py)."""
DELIVERY_LIMIT: Final = symbol("delivery-limit")
"""In the owner's answer to a consuming link: its node's delivery limit (absent: none), which
the consumer's front end here reads (a Service Bus consumer names the dead-letter reason of
the delivery that reaches it: ``MaxDeliveryCountExceeded``)."""
GETS: Final = 0
"""The consumer id, in control records, of what ``basic.get`` took (no consumer has id 0)."""
REQUESTS_ADDRESS: Final = "$requests"
"""The target of the link that carries questions about nodes to the owner."""
REPLIES_ADDRESS: Final = "$replies"
"""The source of the link that carries the owner's answers back."""
REPLY_CREDIT: Final = 1000

_MODEL_ERRORS: dict[str, type[ModelError]] = {
    cls.__name__: cls for cls in (NotFound, AccessRefused, ResourceLocked, PreconditionFailed)
}
"""The core's refusals an owner's answer may name (by class name)."""

_TAKEN: Final = PublishResult.TAKEN
_pack_control: Final = CONTROL.pack

Replied = Callable[[str | None, str, list[Any]], None]
"""Told the owner's answer to a question: the name of the core error it answered (None: it
did it), its text, and the values it answered."""


def _nobody_told(result: PublishResult | None) -> None:
    log.debug(
        "a publish to a remote node was refused (%s) and its publisher asked for no answer", result
    )


class _Feed:
    """One consumer of a remote node: its link on the owner and what waits here for its credit.

    A feed outlives its link: when the owner goes, the link is gone (None) and the feed
    waits, its consumer none the wiser, until the link to the owner is back and opens it
    again. The feed of a node's ``basic.get`` messages (:data:`GETS`) has no consumer."""

    __slots__ = (
        "answered",
        "bytes_out",
        "consumer",
        "draining",
        "drains",
        "exclusive",
        "held",
        "id",
        "link",
        "make",
        "measure",
        "outstanding",
        "stopping",
        "waiting",
    )

    def __init__(
        self,
        consumer: Consumer | None,
        *,
        exclusive: bool = False,
        answered: Answered[ConsumeResult] | None = None,
        make: bool = False,
    ) -> None:
        self.consumer = consumer
        self.id = GETS if consumer is None else consumer.id
        self.exclusive = exclusive
        self.make = make
        """Whether the owner makes the node if it has none (:data:`MAKE`)."""
        self.answered = answered
        """Told the owner's admission, once (then None)."""
        self.link: Receiver | None = None
        self.waiting: deque[QueuedMessage] = deque()
        self.outstanding = 0
        """Messages granted to the owner and not yet arrived."""
        self.measure: bytecredit.Measure | None = getattr(consumer, "bytes_as", None)
        """How its consumer counts byte credit (None: it has none): :mod:`.bytecredit`."""
        self.bytes_out: int | None = 0
        """Bytes granted to the owner and not yet arrived (None: granted without limit)."""
        self.held: dict[QueuedMessage, int] = {}
        """Messages delivered here and not settled yet -> the owner's reference for each."""
        self.stopping = False
        """Its consumer was removed while it held messages: the link closes once they are settled."""
        self.drains: list[Callable[[bool], None]] = []
        """Its consumer's drains not sent to the owner yet (:meth:`RemoteNode.drain`)."""
        self.draining: list[Callable[[bool], None]] = []
        """Its consumer's drains sent to the owner, told its answer (no credit is granted meanwhile)."""


class _Outlet:
    """One publishing link to a remote node's owner and this turn's batch for it."""

    __slots__ = ("answers", "batch", "limited", "routed", "sender")

    def __init__(self, *, routed: bool) -> None:
        self.routed = routed
        self.sender: Sender | None = None
        self.limited: bool | None = None
        """The owner's :data:`LIMITED` answer to ``sender`` (None: not answered yet)."""
        self.batch: list[bytes] = []  # this turn's records, not yet sent
        self.answers: list[tuple[Callable[[], None], Refused | None]] = []  # their publishers


class RemoteNode(NodeElsewhere):
    """A stand-in for node ``name`` of ``vhost``, owned by the worker at the other end of ``nodes``."""

    def __init__(self, nodes: RemoteNodes, vhost: str, name: str) -> None:
        super().__init__(name, QueuePolicy())
        self.vhost = vhost
        self._nodes = nodes
        self._direct = _Outlet(routed=False)  # what a publisher to the node sends (1.0)
        self._routed = _Outlet(routed=True)  # what the default exchange routes to it (0-9-1)
        self._feeds: dict[int, _Feed] = {}  # consumer id -> its feed
        self._exclusive: _Feed | None = None
        """The last exclusive consumer's feed (its node's only one while it is in ``_feeds``)."""
        self._feed_of: dict[
            QueuedMessage, _Feed
        ] = {}  # delivered here, not settled yet -> its feed
        self._gets = _Feed(None)  # what ``basic.get`` took from the owner, not settled yet
        self.unavailable: str | None = None
        """Why the owner cannot be reached (the link failed), or None."""
        self.space_listeners: set[Callable[[], None]] = set()
        self.topic_copy = False
        """Whether it stands in for the owner's copy of a 1.0 topic (:data:`TOPIC_COPY`)."""

    def stream_offset(self, msg: QueuedMessage) -> int | None:
        """A stream's delivery carries its offset in its record (``seq``), as the owner's
        stream numbers it."""
        return msg.seq if self.held_kind == "stream" else None

    def room(self) -> int | None:
        """How many more messages its publishers here may send: the credit the owner gives
        the publishing link (within its node's room, :data:`LIMITED`), less this turn's
        batch; None if the node sets no limit (or the owner cannot be reached: what is
        published is held for it, within a bound, or refused). 0 until the owner answered the link (opened now if
        it is not), as its node's room is not known before."""
        if self.unavailable is not None:
            return None
        out = self._direct
        sender = out.sender
        if sender is None:
            out.sender = self._nodes.open_sender(self)
            return 0
        if not out.limited:
            return 0 if out.limited is None else None
        return max(sender.credit - len(out.batch), 0)

    def _room_changed(self, link: Sender, props: Any = None, *, attached: bool = False) -> None:
        """The owner answered the publishing link ``link`` (``attached``, with ``props``), or
        changed its credit: tell those waiting for room."""
        out = self._direct
        if link is not out.sender:
            return
        if attached:
            out.limited = bool(props.get(LIMITED, False)) if props else False
        for listener in list(self.space_listeners):
            listener()

    def _properties(self, **more: Any) -> dict[Any, Any]:
        props: dict[Any, Any] = {VHOST: self.vhost}
        props.update(more)
        return props

    # -- publish ------------------------------------------------------------------------------
    def publish(self, msg: QueuedMessage, on_stored: Callable[[], None]) -> PublishResult:
        """Forward ``msg`` to the owner (with the rest of this turn's batch); ``on_stored`` once
        it took it. The owner makes the node if it has none (as a 1.0 publisher's attach makes
        it on a broker of one worker)."""
        return self._forward(msg, on_stored, None, self._direct)

    def publish_refusable(
        self, msg: QueuedMessage, on_stored: Callable[[], None], on_refused: Refused
    ) -> PublishResult:
        """:meth:`publish`, with ``on_refused`` if the owner refuses it or is down past the bound."""
        return self._forward(msg, on_stored, on_refused, self._direct)

    def _forward(
        self, msg: QueuedMessage, on_stored: Callable[[], None], on_refused: Refused | None, out: _Outlet
    ) -> PublishResult:
        """:meth:`publish` and :meth:`publish_answered` on the publishing link ``out``;
        ``on_refused`` if the owner refuses it (or it is down past the bound)."""
        absorbing = self._nodes.absorbing
        if absorbing is not None:  # (a transaction's commit: its owner has it prepared)
            absorbing(on_stored)
            return _TAKEN
        batch = out.batch
        record = encode_record(msg)
        ex = self._exclusive
        if ex is not None and self._by_exclusive(ex, msg):
            record = by_exclusive_consumer(record)
        if self.unavailable is not None:  # the owner is down: held for it, within the bound
            if not self._nodes.hold((len(record),)):
                (on_refused or _nobody_told)(None)
                return _TAKEN
        elif not batch:
            self._nodes.batch_ready(self)
        batch.append(record)
        out.answers.append((on_stored, on_refused))
        return _TAKEN

    def _by_exclusive(self, ex: _Feed, msg: QueuedMessage) -> bool:
        """Whether ``msg`` was published on the connection of the exclusive consumer ``ex``
        (the owner's ``no-local`` queue keeps it out: link.py's :data:`BY_AN_EXCLUSIVE_CONSUMER`)."""
        origin = msg.origin
        return origin is not None and self._feeds.get(ex.id) is ex and getattr(ex.consumer, "origin", None) is origin

    def publish_answered(
        self, msg: QueuedMessage, on_stored: Callable[[], None], on_refused: Refused
    ) -> PublishResult:
        """:meth:`publish` as the default exchange routes to a queue by name: if the owner
        has no such queue, ``on_refused`` gets unroutable (nothing is made)."""
        return self._forward(msg, on_stored, on_refused, self._routed)

    def _send_batch(self) -> None:
        """This turn's publishes go as one transfer a link (the end of the turn: the link writes)."""
        if self.unavailable is not None:
            return
        for out in (self._direct, self._routed):
            batch = out.batch
            if not batch:
                continue
            answers = out.answers
            out.batch, out.answers = [], []
            sender = out.sender
            if sender is None:
                sender = out.sender = self._nodes.open_sender(self, routed=out.routed)
            d = sender.send(encode_batch(batch), message_format=BATCH_FORMAT)
            d.context = answers
            self._nodes.sent_bytes += d.size

    def _sending(self) -> bool:
        """Whether publishes to it wait for the owner's credit (a question waits behind them)."""
        return any(out.sender is not None and out.sender.queued for out in (self._direct, self._routed))

    @staticmethod
    def _answered(state: Any, answers: list[tuple[Callable[[], None], Refused | None]]) -> None:
        """The owner settled a batch with ``state``: tell each publisher what it answered."""
        if type(state) is Accepted:
            for on_stored, _ in answers:
                on_stored()
            return
        codes = None
        if type(state) is Rejected and state.error is not None and state.error.info:
            codes = state.error.info.get(RESULTS)
        if (
            isinstance(codes, bytes)
            and len(codes) == len(answers)
            and max(codes) < len(PUBLISH_RESULTS)
        ):
            for (on_stored, on_refused), code in zip(answers, codes, strict=True):
                if code == 0:
                    on_stored()
                else:
                    (on_refused or _nobody_told)(PUBLISH_RESULTS[code])
            return
        # released (the owner could not take them now), or an answer we cannot read
        result = PublishResult.REFUSED if type(state) is Rejected else None
        for _, on_refused in answers:
            (on_refused or _nobody_told)(result)

    # -- questions to the owner -----------------------------------------------------------------
    def _ask(
        self, op: str, args: list[Any], answer: Callable[[list[Any]], Any], answered: Answered[Any]
    ) -> None:
        """Put ``op`` to the owner; ``answered`` gets ``answer(values)`` or the error it answered."""

        def replied(error: str | None, text: str, values: list[Any]) -> None:
            if error is not None:
                exc = _MODEL_ERRORS.get(error, PreconditionFailed)(text)

                def fail() -> Any:
                    raise exc

                answered(fail)
                return
            result = answer(values)
            answered(lambda: result)

        self._nodes.ask(self, [op, self.vhost, self.name, *args], replied)

    def ask_status(self, answered: Answered[tuple[int, int]]) -> None:
        self._ask("status", [], _counts, answered)

    def ask_declare(
        self,
        *,
        durable: bool,
        arguments: Mapping[str, Any],
        auto_delete: bool,
        answered: Answered[tuple[int, int]],
    ) -> None:
        # (the arguments as declared, a decimal or a 0-9-1 field type too: typed_values.carried)
        self._ask("declare", [durable, carried(dict(arguments)), auto_delete], _counts, answered)

    def ask_purge(self, answered: Answered[int]) -> None:
        self._ask("purge", [], _first, answered)

    def ask_held(self, answered: Answered[bool]) -> None:
        self._ask("held", [], _truth, answered)

    def ask_delete(self, *, if_unused: bool, if_empty: bool, answered: Answered[int]) -> None:
        self._ask("delete", [if_unused, if_empty], _first, answered)

    def ask_get(self, answered: Answered[tuple[QueuedMessage | None, int]]) -> None:
        self._ask("get", [], self._got, answered)

    def ask_acquire(self, seqs: Sequence[int], answered: Answered[dict[int, QueuedMessage]]) -> None:
        self._ask("acquire", list(seqs), self._acquired, answered)

    def ask_cancel(self, consumer: Consumer, answered: Answered[None]) -> None:
        """:meth:`remove_consumer`, then a question the owner answers once it has dropped the
        consumer: the owner handles what comes on the internal link in order, so the
        consumer's detach or :data:`STOP`, sent before it, is applied by then."""
        self.remove_consumer(consumer)
        if self.unavailable is not None:  # (its link went with the owner: nothing holds it there)
            answered(nothing)
            return
        self._nodes.ask(self, ["cancel", self.vhost, self.name, consumer.id], lambda *_: answered(nothing))

    def ask_unsubscribe(self, topic: str, key: str) -> None:
        self._ask("unsubscribe", [topic, key], _first, _ignored)

    def ask_make(self, kind: str, answered: Answered[str | None]) -> None:
        """(making.py: the owner's :func:`~.making.made`.)"""
        self._ask(MAKE_NODE, [kind], _kind, answered)

    def ask_settled(self, answered: Answered[None]) -> None:
        """(The question goes after this turn's outcomes, on the same session: the owner
        has applied them when it reads it, and answers once their dead letters are taken.)"""
        if self.unavailable is not None:  # (they did not reach it: nothing to wait for)
            answered(nothing)
            return
        self._ask("settled", [], _no_values, answered)

    def _got(self, values: list[Any]) -> tuple[QueuedMessage | None, int]:
        """The owner's answer to a ``basic.get``: the count left, and the message with its reference."""
        if len(values) < 3:
            return None, int(values[0])
        msg = decode_record(values[2])
        self.taken_over(msg, int(values[1]))
        return msg, int(values[0])

    def _acquired(self, values: list[Any]) -> dict[int, QueuedMessage]:
        """The owner's answer to an acquire: [seq, reference, record] of each message it took."""
        taken: dict[int, QueuedMessage] = {}
        for i in range(0, len(values) - 2, 3):
            msg = decode_record(values[i + 2])
            self.taken_over(msg, int(values[i + 1]))
            taken[int(values[i])] = msg
        return taken

    def taken_over(self, msg: QueuedMessage, ref: int) -> None:
        """``msg`` came from the owner outside any consumer (a ``basic.get``; a suspended
        consumer's message handed over: workers/resumption.py), under its reference
        ``ref``: settled here as a consumer's (:meth:`ack`, :meth:`release`...)."""
        self._gets.held[msg] = ref
        self._feed_of[msg] = self._gets

    # -- consume ------------------------------------------------------------------------------
    def admits(self, *, exclusive: bool = False) -> ConsumeResult:
        """Every consumer is admitted here: the owner's node decides, as the consumer's link
        attaches there (:meth:`ask_consume`)."""
        return ConsumeResult.ADMITTED

    def add_consumer(self, consumer: Consumer) -> None:
        """Add ``consumer`` (the owner makes the node if it has none, as a 1.0 consumer's
        attach does on a broker of one worker); if the owner does not admit it (an exclusive
        consumer holds the queue there), the consumer is told with its ``refused(result)``
        if it has one, else cancelled."""
        self.ask_consume(
            consumer,
            exclusive=bool(getattr(consumer, "exclusive", False)),
            answered=_refusal_to(consumer),
            make=True,
        )

    def ask_consume(
        self,
        consumer: Consumer,
        *,
        exclusive: bool,
        answered: Answered[ConsumeResult],
        make: bool = False,
    ) -> None:
        """Add ``consumer`` once the owner admitted it: ``answered`` gets its answer, or
        raises :class:`NotFound` if the owner has no such node (made only if ``make``)."""
        feed = self._feeds[consumer.id] = _Feed(
            consumer, exclusive=exclusive, answered=answered, make=make
        )
        if exclusive:
            self._exclusive = feed
        if self.unavailable is None:
            self._nodes.open_soon(self, feed)
        # (else opened once the owner is back)

    def _open(self, feed: _Feed) -> None:
        """Open ``feed``'s link on the owner (again, after the owner came back)."""
        if self._feeds.get(feed.id) is not feed:
            return  # (cancelled before its turn came)
        feed.outstanding = 0
        feed.bytes_out = 0
        assert feed.consumer is not None
        link = feed.link = self._nodes.open_receiver(
            self, feed.consumer, exclusive=feed.exclusive, make=feed.make
        )
        link.context = (self, feed)

    def _admitted(
        self,
        feed: _Feed,
        code: int,
        timeout: float | None = None,
        why: str | None = None,
        refusal: str | None = None,
        kind: str | None = None,
        limit: int | None = None,
        applied: Any = None,
    ) -> None:
        """The owner answered ``feed``'s attach: its consumer is admitted, or not (code: an
        index into :data:`CONSUME_RESULTS`; :data:`NO_NODE`: it has no such node;
        :data:`UNREADABLE`: refused, ``why`` and ``refusal`` say how); ``timeout``:
        the node's consumer timeout there, which this worker's front ends apply to what its
        consumers hold; ``kind``: its node's (:data:`KIND`); ``limit``: its delivery limit
        there, which they read; ``applied``: the filters its answer names, which the
        consumer's ``filters`` take (what the owner chose for it: a Service Bus session)."""
        if kind is not None:
            self.held_kind = str(kind)
        if code == NO_NODE:
            self._no_node(feed, NotFound(f"no queue '{self.name}' in vhost '{self.vhost}'"))
            return
        if code == UNREADABLE:
            self._no_node(feed, _MODEL_ERRORS.get(str(refusal), PreconditionFailed)(str(why)))
            return
        result = (
            CONSUME_RESULTS[code] if 0 <= code < len(CONSUME_RESULTS) else ConsumeResult.ADMITTED
        )
        answered, feed.answered = feed.answered, None
        consumer = feed.consumer
        assert consumer is not None
        filters = getattr(consumer, "filters", None)
        if result and applied and isinstance(filters, dict):  # (before its answer: it reads them)
            filters.update(applied)
        if not result:
            self._feeds.pop(consumer.id, None)  # (the owner detaches its link)
            self._no_drains(feed)
        if answered is not None:
            answered(lambda: result)
        elif not result:  # opened again after the owner's restart, and another holds it now
            consumer.cancelled()
        if result:
            policy = self.policy
            if timeout != policy.consumer_timeout or limit != policy.delivery_limit:
                self.policy = policy.model_copy(update={"consumer_timeout": timeout, "delivery_limit": limit})
            self._top_up(feed)
            self._send_drains(feed)  # (asked for before the owner admitted it)

    def _no_node(self, feed: _Feed, missing: ModelError) -> None:
        """The owner has no node to admit ``feed``'s consumer to (and made none), or one it
        cannot read as the consumer asked: ``missing`` says which."""
        answered, feed.answered = feed.answered, None
        consumer = feed.consumer
        assert consumer is not None
        self._feeds.pop(consumer.id, None)  # (the owner detaches its link)
        self._no_drains(feed)
        if answered is None:  # opened again after the owner's restart, and the node is gone
            consumer.cancelled()
            return

        def fail() -> ConsumeResult:
            raise missing

        answered(fail)

    def remove_consumer(self, consumer: Consumer) -> None:
        """``consumer`` is cancelled: what waits here for it goes back to the owner; what it
        holds it may still settle (a 0-9-1 channel keeps its unacknowledged messages after a
        ``basic.cancel``), so its link closes once it holds nothing (:data:`STOP`)."""
        feed = self._feeds.pop(consumer.id, None)
        if feed is None:
            return
        feed.answered = None
        self._no_drains(feed)
        feed.stopping = True  # (what the owner sent before it heard goes back: _received)
        for msg in feed.waiting:
            self._settle(msg, RELEASE)
        feed.waiting.clear()
        link = feed.link
        if feed.held and link is not None and link.is_attached:
            self._nodes.control(STOP, feed.id, 0, 0)
            return
        self._forget(feed)
        self._close(feed)

    def _close(self, feed: _Feed) -> None:
        """Close ``feed``'s link: what it held and did not settle goes back on the owner."""
        link = feed.link
        if link is not None and link.is_attached:
            self._nodes.send_control()  # (outcomes given so far go first)
            try:
                link.detach(closed=True)
            except IllegalStateError:
                pass
            self._nodes.wrote()

    def _forget(self, feed: _Feed) -> None:
        feed_of = self._feed_of
        for msg in feed.held:
            feed_of.pop(msg, None)
        feed.held.clear()
        feed.waiting.clear()

    def consumer_ready(self, consumer: Consumer) -> None:
        """``consumer``'s credit changed: what waits here goes to it, and the owner is granted
        more, or given back what it was granted beyond the credit (a 1.0 receiver lowered it)."""
        feed = self._feeds.get(consumer.id)
        if feed is not None:
            self._hand_on(feed)
            self._regrant(feed)

    def drain(self, consumer: Consumer, drained: Callable[[bool], None]) -> None:
        """The owner delivers what ``consumer``'s credit allows now, then takes the rest back
        (:data:`DRAIN`); ``drained`` is told once those messages are here (at once if the
        owner cannot be reached: there is nothing to give)."""
        feed = self._feeds.get(consumer.id)
        if feed is None or self.unavailable is not None:
            drained(False)
            return
        self._hand_on(feed)
        feed.drains.append(drained)
        self._send_drains(feed)

    def _send_drains(self, feed: _Feed) -> None:
        """Put ``feed``'s drains to the owner: grant its consumer's whole credit (less what
        waits here), then :data:`DRAIN`; one at a time, and once the owner admitted it."""
        link = feed.link
        if not feed.drains or feed.draining or feed.answered is not None or link is None or not link.is_attached:
            return
        assert feed.consumer is not None
        feed.draining, feed.drains = feed.drains, []
        more = feed.consumer.credit() - len(feed.waiting) - feed.outstanding
        if more > 0:
            feed.outstanding += more
            self._nodes.control(GRANT, feed.id, more, 0)
        self._nodes.control(DRAIN, feed.id, 0, 0)

    def _drained(self, feed: _Feed, d: Delivery) -> None:
        """The owner's answer to ``feed``'s drain, after the messages it sent for it: it holds
        no credit of the consumer's now."""
        if d.message_format != DRAINED_FORMAT or len(d.payload) != 1:
            raise RecordError("an answer to a drain that does not decode")
        feed.outstanding = 0
        self._hand_on(feed)
        consumer = feed.consumer
        assert consumer is not None
        more = consumer.credit() <= 0 and (d.payload == b"\x01" or bool(feed.waiting))
        draining, feed.draining = feed.draining, []
        for drained in draining:
            drained(more)
        self._send_drains(feed)
        self._top_up(feed)

    @staticmethod
    def _no_drains(feed: _Feed) -> None:
        """``feed``'s link went: its drains are answered, with nothing more to come from it."""
        drains = feed.draining + feed.drains
        feed.draining, feed.drains = [], []
        for drained in drains:
            drained(False)

    def _received(self, feed: _Feed, d: Delivery) -> None:
        """Messages arrived from the owner for ``feed``'s consumer (or its answer to a drain)."""
        if d.message_format != DELIVERY_FORMAT:
            self._drained(feed, d)
            return
        held = feed.held
        feed_of = self._feed_of
        waiting = feed.waiting
        c = feed.consumer
        assert c is not None
        arrived = decode_deliveries(d.payload, d.message_format)
        feed.outstanding -= len(arrived)
        if feed.measure is not None and feed.bytes_out:
            measure = feed.measure
            feed.bytes_out = max(feed.bytes_out - sum(bytecredit.cost(m, measure) for _, m in arrived), 0)
        if feed.stopping:  # sent before the owner heard its consumer was cancelled: back they go
            for ref, _ in arrived:
                if ref:  # (0: nothing to give back: a browser's copy, or one sent at most once)
                    self._nodes.control(OUTCOME, feed.id, ref, RELEASE, 0.0)
            return
        for ref, msg in arrived:
            if ref:  # (0: the owner was done with it as it sent it: at most once, or a browser's copy)
                held[msg] = ref
                feed_of[msg] = feed
            if not waiting and c.credit() > 0:
                c.deliver(self, msg)
            else:  # its consumer took credit back meanwhile: it waits (at most a batch)
                waiting.append(msg)

    def _hand_on(self, feed: _Feed) -> None:
        """Give ``feed``'s consumer what waits for it, as its credit allows."""
        waiting = feed.waiting
        c = feed.consumer
        assert c is not None
        while waiting and c.credit() > 0:
            c.deliver(self, waiting.popleft())

    def _top_up(self, feed: _Feed) -> None:
        """Grant the owner what ``feed``'s consumer can take (less what waits here and what is
        on its way), a batch at most."""
        if self._grantable(feed):
            assert feed.consumer is not None
            self._grant_up_to(feed, min(feed.consumer.credit() - len(feed.waiting), CREDIT_BATCH))

    def _regrant(self, feed: _Feed) -> None:
        """What ``feed``'s consumer can take changed: take back from the owner what it was
        granted beyond that (less what waits here), a negative :data:`GRANT`, or grant more
        (:meth:`_top_up`); the consumer's credit read once. The owner's count may go below
        none while messages are on their way (they wait here, as before); the next grant
        counts from there. So messages the consumer cannot take stay in the owner's queue,
        for its other consumers, as on one worker."""
        if not self._grantable(feed):
            return
        assert feed.consumer is not None
        can = min(feed.consumer.credit() - len(feed.waiting), CREDIT_BATCH)
        keep = max(can, 0)
        if feed.outstanding > keep:
            self._nodes.control(GRANT, feed.id, keep - feed.outstanding, 0)
            feed.outstanding = keep
        self._grant_up_to(feed, can)

    @staticmethod
    def _grantable(feed: _Feed) -> bool:
        """Whether the owner may be granted ``feed``'s credit now (not before it admitted the
        consumer; while it drains, once it answered)."""
        link = feed.link
        return link is not None and feed.answered is None and link.is_attached and not feed.draining

    def _grant_up_to(self, feed: _Feed, can: int) -> None:
        """Grant the owner up to ``can`` messages on their way (once half of them arrived),
        and the bytes the consumer can take (:meth:`_top_up_bytes`)."""
        if feed.measure is not None:
            self._top_up_bytes(feed, feed.measure)
        outstanding = feed.outstanding
        if can > 0 and outstanding <= can // 2:
            feed.outstanding = can
            self._nodes.control(GRANT, feed.id, can - outstanding, 0)

    def _top_up_bytes(self, feed: _Feed, measure: bytecredit.Measure) -> None:
        """Grant the owner the byte credit ``feed``'s consumer has (less what waits here and
        what is on its way): the owner sends nothing larger than what is left."""
        left: int | None = feed.consumer.byte_credit()  # type: ignore[union-attr]
        if left is None:
            if feed.bytes_out is not None:
                feed.bytes_out = None
                self._nodes.control(BYTES, feed.id, bytecredit.UNLIMITED, 0)
            return
        if feed.bytes_out is None:  # limited again: the owner starts from none
            feed.bytes_out = 0
            self._nodes.control(BYTES, feed.id, bytecredit.NONE_LEFT, 0)
        left -= sum(bytecredit.cost(m, measure) for m in feed.waiting)
        if left > feed.bytes_out:
            self._nodes.control(BYTES, feed.id, left - feed.bytes_out, 0)
            feed.bytes_out = left

    # -- settlement ---------------------------------------------------------------------------
    @property
    def via(self) -> RemoteNodes:
        """The internal link to its owner."""
        return self._nodes

    def unsettled(self) -> int:
        """How many of the owner's messages its consumers here hold unsettled (none of a
        browser's copies: the owner keeps none)."""
        return len(self._feed_of)

    def held_ref(self, msg: QueuedMessage) -> tuple[int, int] | None:
        """(consumer id, the owner's reference) of ``msg``, delivered here and not settled yet."""
        feed = self._feed_of.get(msg)
        return None if feed is None else (feed.id, feed.held[msg])

    def forget_held(self, msg: QueuedMessage) -> None:
        """``msg`` is settled on the owner by other means (a transaction's commit): its
        outcome here sends nothing."""
        feed = self._feed_of.pop(msg, None)
        if feed is not None:
            del feed.held[msg]
            if feed.stopping and not feed.held:
                self._close(feed)

    def _settle(self, msg: QueuedMessage, code: int, due: float | None = None) -> None:
        feed = self._feed_of.pop(msg, None)
        if feed is None:
            return  # its link went (the owner released it) or it was settled already
        ref = feed.held.pop(msg)
        self._nodes.control(OUTCOME, feed.id, ref, code, 0.0 if due is None else due)
        if feed.stopping and not feed.held:
            self._close(feed)

    def rewritten(self, msg: QueuedMessage) -> None:
        """Its consumer here changed the bytes of ``msg``, which it holds: the owner's copy
        gets them (before the outcome that follows: :meth:`RemoteNodes.send_control`)."""
        held = self.held_ref(msg)
        if held is not None:
            self._nodes.rewrite(*held, msg.data)

    def ack(self, msg: QueuedMessage) -> None:
        self._settle(msg, ACCEPT)

    def release(
        self,
        msg: QueuedMessage,
        *,
        delivery_failed: bool = False,
        undeliverable_to: int | None = None,
        due: float | None = None,
    ) -> None:
        code = (
            RELEASE
            | (FAILED if delivery_failed else 0)
            | (0 if undeliverable_to is None else UNDELIVERABLE)
        )
        self._settle(msg, code, due)  # (a delayed retry: the owner holds it until ``due``)

    def reject(self, msg: QueuedMessage) -> None:
        self._settle(msg, REJECT)

    def defer(self, msg: QueuedMessage) -> None:
        self._settle(msg, DEFER)  # (the owner's queue sets it aside: Queue.defer)

    # -- the link's end -----------------------------------------------------------------------
    def _lost(self, reason: str) -> None:
        """The owner is unavailable (the internal link failed): what it was sent and did not
        answer, this turn's batch after it, and what is published until it is back, is held
        for it (:meth:`RemoteNodes.hold`), its publishers unanswered, and sent again once it
        is back (one it took before it went, unanswered, is taken twice: at least once, as
        a publisher that resends it after a refusal would make it). Consumers keep their
        feeds and get nothing meanwhile; what they held unsettled is gone with the owner's
        link (it comes back from the owner's store, redelivered)."""
        self.unavailable = reason
        for out in (self._direct, self._routed):
            unanswered = self._unanswered(out)
            if unanswered:
                out.batch = [r for d in unanswered for r in records_of(d.payload)] + out.batch
                out.answers = [a for d in unanswered for a in d.context] + out.answers
                for d in unanswered:
                    d.context = None
            if out.batch and not self._nodes.hold(list(map(len, out.batch)), bounded=False):
                self._publishing_gone(out)  # (none held: refused as unavailable)
        self._tell_room()  # (no limit while it is down: what is published is held, within the bound)
        for feed in (*self._feeds.values(), self._gets):
            self._forget(feed)
            feed.link = None
            feed.outstanding = 0
            self._no_drains(feed)
        self._feed_of.clear()  # (the cancelled consumers' too: the owner released what they held)

    def _back(self) -> None:
        """The link to the owner is up again: what was held for it goes (first, in its order),
        and every consumer's link opens again there."""
        self.unavailable = None
        if self._direct.batch or self._routed.batch:
            self._nodes.batch_ready(self)
        for feed in self._feeds.values():
            self._open(feed)
        self._tell_room()  # (its publishers ask again: the publishing link opens, the owner answers its room)

    def _tell_room(self) -> None:
        """Tell those waiting for room that it may have changed (they ask :meth:`room` again)."""
        for listener in list(self.space_listeners):
            listener()

    def _publishing_gone(self, out: _Outlet | None = None) -> None:
        """A publishing link went (None: both): what waits for the owner's answer is refused
        (None: the owner could not be reached)."""
        if out is None:
            self._publishing_gone(self._direct)
            self._publishing_gone(self._routed)
            return
        waiting = out.answers
        out.batch, out.answers = [], []
        for d in self._unanswered(out):
            waiting = d.context + waiting
            d.context = None
            self._nodes.sent_bytes -= d.size
            self._nodes.answered_one(id(d))
        for _, on_refused in waiting:
            (on_refused or _nobody_told)(None)

    @staticmethod
    def _unanswered(out: _Outlet) -> list[Delivery]:
        """Let go of ``out``'s publishing link (the owner's end went): the batches sent on
        it that the owner did not answer, in the order sent (each's ``context``: its
        publishers' answers, to be taken off it)."""
        sender, out.sender = out.sender, None
        out.limited = None
        if sender is None:
            return []
        return [d for d in sender.unsettled.values() if d.context is not None and not d.remote_settled]

    def _link_gone(self, link: Sender | Receiver, feed: _Feed | None, reason: str) -> None:
        """The owner detached one of its links (the node is not there, or was deleted): its
        publishers' waiting messages are refused, its consumer is cancelled; a later publish
        or consumer opens a new link (the node may have been made meanwhile)."""
        if feed is None:
            for out in (self._direct, self._routed):
                if link is out.sender:
                    self._publishing_gone(out)
            return
        consumer = feed.consumer
        if (
            consumer is not None
            and feed.link is link
            and self._feeds.pop(consumer.id, None) is not None
        ):
            self._forget(feed)
            self._no_drains(feed)
            consumer.cancelled()


def _counts(values: list[Any]) -> tuple[int, int]:
    return int(values[0]), int(values[1])


def _first(values: list[Any]) -> int:
    return int(values[0])


def _truth(values: list[Any]) -> bool:
    return bool(values[0])


def _kind(values: list[Any]) -> str | None:
    return None if not values or values[0] is None else str(values[0])


def _no_values(values: list[Any]) -> None:
    return None


def worker_of(links: Mapping[int, RemoteNodes], node: RemoteNode) -> int:
    """The worker whose link (of ``links``, each worker's) ``node`` is a stand-in on."""
    for k, nodes in links.items():
        if node.via is nodes:
            return k
    raise ValueError(f"{node.name!r} has no link")  # pragma: no cover - every stand-in has one


def _ignored(result: Callable[[], Any]) -> None:
    """An answer nobody waits for (one that reports a refusal is logged)."""
    try:
        result()
    except ModelError as exc:
        log.info("the owner refused: %s", exc)


def _refusal_to(consumer: Consumer) -> Answered[ConsumeResult]:
    """What tells a consumer added without asking (:meth:`RemoteNode.add_consumer`) that the
    owner did not admit it (cancelled if the owner has no such node)."""

    def answered(result: Callable[[], ConsumeResult]) -> None:
        try:
            r = result()
        except ModelError:  # (no such node, or one it cannot read as it asked)
            consumer.cancelled()
            return
        if not r:
            refused = getattr(consumer, "refused", None)
            if refused is not None:
                refused(r)
            else:
                consumer.cancelled()

    return answered


@mypyc_attr(allow_interpreted_subclasses=True)  # (peers.py's _Dialled)
class RemoteNodes:
    """The opening side of an internal link to one owning worker: its remote nodes."""

    def __init__(self, container_id: str) -> None:
        self.container_id = container_id
        self.link: InternalLink | None = None
        self.nodes: dict[tuple[str, str], RemoteNode] = {}
        self._names = itertools.count(1)
        self._ready: list[RemoteNode] = []  # nodes with a batch to send this turn
        self._control: list[bytes] = []  # control records of this turn
        # the run of outcomes not yet in _control (control): its consumer, first reference,
        # length (0: none), code and due time
        self._run_id = 0
        self._run_first = 0
        self._run_count = 0
        self._run_code = 0
        self._run_due = 0.0
        self._rewrites: list[tuple[int, int, bytes]] = []  # messages rewritten this turn (go first)
        self._control_link: Sender | None = None
        # publishing links on one session, consuming links on another: a session writes the
        # dispositions it has queued before each transfer, so the owner's answers to publishes
        # (and our outcomes for its deliveries) go out as one range per batch only when no
        # transfer of the other direction comes between them
        self._publishing: Any = None
        self._consuming: Any = None
        self._requests: Sender | None = None
        self._replies: Receiver | None = None
        self._questions = itertools.count(1)
        self.incarnation = secrets.token_bytes(8)
        """Names its questions, with their numbers, to the owners (:mod:`.questions`)."""
        # questions not answered yet (asked again if the owner restarts), and those not sent yet
        self._asking: dict[int, tuple[RemoteNode, bytes, Replied]] = {}
        self._asked: list[tuple[RemoteNode, bytes]] = []
        self._opening: list[tuple[RemoteNode, _Feed]] = []
        """Consumers whose links open at the end of this turn, after the publishes before them."""
        self.reason: str | None = None
        """Why the link went (None while it is up)."""
        self._arming: list[Callable[[], None]] = []
        """Told once the publishes sent so far are answered: armed as this turn's batches go."""
        self._waiting: list[tuple[set[int], Callable[[], None]]] = []
        """The publishes (id of each batch's delivery) each of those still waits for."""
        self.sent_bytes = 0
        """Bytes of the publishes sent to the owner and not answered yet (:meth:`on_the_way`)."""
        self.absorbing: Callable[[Callable[[], None]], None] | None = None
        """While a transaction's commit applies (``workers/transactions.py``): takes what its
        remote nodes are given to publish (the owner has it prepared), told when it is stored."""
        self.hold_messages = 0
        self.hold_bytes = 0
        """The most messages, and bytes of them, held for the owner while it is down
        (:meth:`hold`; 0: none, refused at once); ``workers/peers.py`` sets them from the config."""
        self._held_messages = 0
        self._held_bytes = 0
        self._given_up = False
        """Whether the owner was not back within the bound (:meth:`give_up`): refused at once until it is."""

    def node(self, vhost: str, name: str) -> RemoteNode:
        """The stand-in for node ``name`` of ``vhost`` (one per node, made on first use)."""
        key = (vhost, name)
        node = self.nodes.get(key)
        if node is None:
            node = self.nodes[key] = RemoteNode(self, vhost, name)
            if self.reason is not None:
                node.unavailable = self.reason
        return node

    # -- LinkHandler --------------------------------------------------------------------------
    def started(self, link: InternalLink) -> None:
        self.link = link
        conn = link.connection
        conn.open()
        self._publishing = conn.session(incoming_window=8192)
        self._publishing.begin()
        self._control_link = self._publishing.sender(
            "control",
            source=Source(address=self.container_id),
            target=Target(address=CONTROL_ADDRESS),
        )
        self._control_link.attach()
        self._requests = self._publishing.sender(
            "requests",
            source=Source(address=self.container_id),
            target=Target(address=REQUESTS_ADDRESS),
        )
        self._requests.attach()
        self._replies = self._publishing.receiver(
            "replies",
            source=Source(address=REPLIES_ADDRESS),
            target=Target(address=self.container_id),
        )
        self._replies.attach()
        self._replies.flow(REPLY_CREDIT)
        # (the consuming session begins once the owner's open allows a second channel; its
        # nodes are back, if the link had gone, once that open shows the owner answers: opened)

    def opened(self) -> None:
        """The owner answered the link's open. If the link had gone (the owner restarted, or
        stopped answering and its link timed out), its nodes are back now, not when the
        socket connected: a stopped worker's socket still connects (the kernel accepts it)."""
        if self.reason is not None:
            self.reason = None
            for node in self.nodes.values():
                node._back()  # (what was held for it goes first: Peers.run waits for its store)
            self._held_messages = self._held_bytes = 0
            self._given_up = False
            self._asked = [(node, question) for node, question, _ in self._asking.values()]

    def on_event(self, e: Event) -> None:
        t = type(e)
        if t is DeliveryUpdated:
            d = e.delivery  # type: ignore[attr-defined]
            answer = d.context
            if d.remote_settled and answer is not None:  # the owner's answer to a publish
                d.context = None
                self.sent_bytes -= d.size
                if self._waiting:
                    self.answered_one(id(d))
                d.settle()  # (it forgot the delivery: nothing goes back)
                d.link.context._answered(d.remote_state, answer)
        elif t is DeliveryReceived:
            link = e.link  # type: ignore[attr-defined]
            if link is self._replies:
                self._replied(e.delivery)  # type: ignore[attr-defined]
                return
            node, feed = link.context
            node._received(feed, e.delivery)  # type: ignore[attr-defined]
        elif t is CreditAdded:  # the owner's credit grew: its node's room, if it limits it
            link = e.link  # type: ignore[attr-defined]
            if type(link.context) is RemoteNode:
                link.context._room_changed(link)
        elif t is ConnectionOpened:
            assert self.link is not None
            self._consuming = self.link.connection.session(incoming_window=8192)
            self._consuming.begin()
            self.opened()
        elif t is LinkAttached:  # the owner's answer to our attach
            link = e.link  # type: ignore[attr-defined]
            node = link.context
            props = link.remote_attach.properties if link.remote_attach is not None else None
            if type(node) is RemoteNode:
                if props and NEEDS_MESSAGE_IDS in props:
                    node.needs_message_ids = bool(props[NEEDS_MESSAGE_IDS])
                node._room_changed(link, props, attached=True)
            elif type(node) is tuple and node[1].link is link:
                props = props or {}
                limit = props.get(DELIVERY_LIMIT)
                node[0]._admitted(
                    node[1],
                    int(props.get(ADMITTED, 0)),
                    props.get(CONSUMER_TIMEOUT),
                    props.get(WHY),
                    props.get(REFUSAL),
                    props.get(KIND),
                    None if limit is None else int(limit),
                    getattr(link.remote_source, "filter", None),
                )
        elif t is LinkDetached or t is LinkFailed:
            link = e.link  # type: ignore[attr-defined]
            err = e.error  # type: ignore[attr-defined]
            reason = (
                f"{err.condition}: {err.description}"
                if err is not None
                else "the owner detached the link"
            )
            ctx = link.context
            if type(ctx) is RemoteNode:
                ctx._link_gone(link, None, reason)
            elif ctx is not None:
                ctx[0]._link_gone(link, ctx[1], reason)

    def before_write(self) -> None:
        # this turn's outcomes and grants go before its publishes: a consumer's prefetch
        # room opened by an ack is on the owner before the publishes read with that ack
        # (else the owner hands them to a lower priority consumer, as no one broker would)
        self.send_control()
        ready, self._ready = self._ready, []
        for node in ready:
            node._send_batch()
        if self._arming:
            self._arm()
        if self._opening and self.reason is None:
            opening, self._opening = self._opening, []
            for i, (node, feed) in enumerate(opening):
                if node._sending():  # publishes before it wait for the owner's credit: so does it
                    self._opening = opening[i:]
                    break
                node._open(feed)
        asked = self._asked
        requests = self._requests
        if asked and requests is not None and self.reason is None:
            sent = 0
            for node, question in asked:
                if node._sending():
                    break  # publishes before it wait for the owner's credit: so does it (and the rest)
                requests.send(question, settled=True, message_format=REQUEST_FORMAT)
                sent += 1
            del asked[:sent]

    def open_soon(self, node: RemoteNode, feed: _Feed) -> None:
        """Open ``feed``'s link to ``node``'s owner at the end of this turn, after the
        publishes to it so far (a stream reader's offset counts them, as on one broker)."""
        self._opening.append((node, feed))
        self.wrote()

    def ask(self, node: RemoteNode, fields: list[Any], replied: Replied) -> None:
        """Put a question about ``node`` (an operation and its arguments) to the owner, sent at
        the end of this turn, after the publishes to it so far (a purge or a count sees them);
        ``replied`` gets its answer (asked again if the owner restarts first)."""
        n = next(self._questions)
        low = min(self._asking, default=n)  # (the answers below it arrived: the owner forgets them)
        question = encode_request([n, self.incarnation, low, *fields])
        self._asking[n] = (node, question, replied)
        self._asked.append((node, question))
        self.wrote()

    def _replied(self, d: Delivery) -> None:
        n, error, text, *values = decode_request(d.payload, d.message_format, REPLY_FORMAT)
        entry = self._asking.pop(n, None)
        if entry is not None:
            entry[2](None if error is None else str(error), str(text), values)

    def control(self, what: int, consumer_id: int, n: int, code: int, due: float = 0.0) -> None:
        """A control record for the owner, sent with the rest of this turn's (``due``: a
        release's delayed retry, 0.0 for none). An outcome for the reference after the
        pending run's, of the same consumer, code and due time, lengthens that run (one
        record for them all, :meth:`_end_run`)."""
        count = self._run_count
        if count:
            if (
                what == OUTCOME
                and n == self._run_first + count
                and consumer_id == self._run_id
                and code == self._run_code
                and due == self._run_due
            ):
                self._run_count = count + 1
                return
            self._end_run()
        elif not self._control:
            self.wrote()
        if what == OUTCOME:  # (a run of one, lengthened by the outcomes after it)
            self._run_id = consumer_id
            self._run_first = n
            self._run_count = 1
            self._run_code = code
            self._run_due = due
        else:
            self._control.append(_pack_control(what, consumer_id, n, code, due, 1))

    def _end_run(self) -> None:
        """The pending run of outcomes as one control record, after the records before it
        (at the end of the turn, or before a record that does not lengthen it)."""
        run = (self._run_id, self._run_first, self._run_code, self._run_due, self._run_count)
        self._control.append(_pack_control(OUTCOME, *run))
        self._run_count = 0

    def rewrite(self, consumer_id: int, ref: int, data: bytes) -> None:
        """The owner's message ``ref``, held by consumer ``consumer_id`` here, is now ``data``:
        sent before this turn's control records (the outcome for it among them)."""
        self._rewrites.append((consumer_id, ref, data))
        self.wrote()

    def send_control(self) -> None:
        link = self._control_link
        if link is None or self.reason is not None:
            return
        if self._rewrites:
            rewrites, self._rewrites = self._rewrites, []
            link.send(encode_rewrites(rewrites), settled=True, message_format=REWRITE_FORMAT)
        if self._run_count:
            self._end_run()
        records = self._control
        if records:
            self._control = []
            link.send(b"".join(records), settled=True, message_format=CONTROL_FORMAT)

    def after_events(self) -> None:
        for node in self.nodes.values():
            for feed in node._feeds.values():
                node._top_up(feed)
                link = feed.link
                if link is not None and link.credit < TRANSFER_CREDIT // 2 and link.is_attached:
                    link.flow(TRANSFER_CREDIT)  # transfers: the owner sends one a turn at most
        replies = self._replies
        if replies is not None and replies.credit < REPLY_CREDIT // 2 and replies.is_attached:
            replies.flow(REPLY_CREDIT)

    def lost(self, reason: str) -> None:
        again = self.reason is not None  # (a link the owner never answered went: its nodes are down already)
        self.reason = reason
        self._ready = []
        self._control = []
        self._run_count = 0
        self._rewrites = []
        self._asked = []
        self._opening = []  # (opened again once the owner is back: RemoteNode._back)
        self._control_link = self._publishing = self._consuming = None
        self._requests = self._replies = None
        if not again:
            for node in self.nodes.values():
                node._lost(reason)
        self.sent_bytes = 0
        done = [then for _, then in self._waiting] + self._arming
        self._waiting, self._arming = [], []
        for then in done:  # (what they waited for is refused: nothing more comes)
            then()

    def hold(self, sizes: Sequence[int], *, bounded: bool = True) -> bool:
        """Whether messages of ``sizes`` bytes for one of the owner's nodes may be held (in
        its batch) until the owner is back: not after :meth:`give_up`, nor if it holds none
        (:attr:`hold_messages` 0); ``bounded``, within :attr:`hold_messages` and
        :attr:`hold_bytes` (a worker's memory) -- unbounded: those unanswered when the owner
        went (sent, or this turn's). Held, their publishers' outcomes wait for the owner's answer."""
        size = sum(sizes)
        if self._given_up or not self.hold_messages:
            return False
        if bounded and (
            self._held_messages + len(sizes) > self.hold_messages or self._held_bytes + size > self.hold_bytes
        ):
            return False
        self._held_messages += len(sizes)
        self._held_bytes += size
        return True

    def give_up(self) -> None:
        """The owner was not back within the bound (``worker_down_hold``): what is held for
        it is refused, and what is published to its nodes is refused at once, until it is back."""
        if self.reason is None:
            return
        self._given_up = True
        holding = [node for node in self.nodes.values() if node._direct.batch or node._routed.batch]
        self._held_messages = self._held_bytes = 0
        if holding:
            log.warning("worker down for too long: %d nodes' messages held for it are refused", len(holding))
        for node in holding:
            node._publishing_gone()  # (refused as unavailable: 1.0 released, 0-9-1 a nack)

    def unsettled(self) -> int:
        """How many of the owner's messages this worker's consumers hold unsettled."""
        return sum(node.unsettled() for node in self.nodes.values())

    def when_answered(self, then: Callable[[], None]) -> None:
        """Run ``then`` once the owner has answered every publish sent to it so far, this
        turn's batches included (at once if the link is down: none will be)."""
        if self.reason is not None:
            then()
            return
        self._arming.append(then)
        self.wrote()

    def _arm(self) -> None:
        arming, self._arming = self._arming, []
        unanswered = {
            id(d)
            for node in self.nodes.values()
            for out in (node._direct, node._routed)
            if out.sender is not None
            for d in out.sender.unsettled.values()
            if d.context is not None
        }
        for then in arming:
            if unanswered:
                self._waiting.append((set(unanswered), then))
            else:
                then()

    def answered_one(self, key: int) -> None:
        """The publish whose batch's delivery is ``key`` was answered (or refused: its link went)."""
        if not self._waiting:
            return
        waiting = []
        for left, then in self._waiting:
            left.discard(key)
            if left:
                waiting.append((left, then))
            else:
                then()
        self._waiting = waiting

    def on_the_way(self) -> int:
        """Bytes of the publishes to the owner that it has not answered yet (sent, or in this
        turn's batches): the whole broker's memory limit counts them until the owner's
        queues do (``Broker.whole_queued``)."""
        waiting = 0
        for node in self._ready:
            for out in (node._direct, node._routed):
                waiting += sum(map(len, out.batch))
        return self.sent_bytes + waiting + self._held_bytes

    # -- for the remote nodes -----------------------------------------------------------------
    def batch_ready(self, node: RemoteNode) -> None:
        """``node`` has publishes to send at the end of this turn."""
        self._ready.append(node)
        self.wrote()

    def wrote(self) -> None:
        """Something was queued on the engine: write it at the end of this turn."""
        link = self.link
        if link is not None:
            link.flush_soon()

    def open_sender(self, node: RemoteNode, *, routed: bool = False) -> Sender:
        sender: Sender = self._publishing.sender(
            f"publish:{next(self._names)}",
            source=Source(address=self.container_id),
            target=Target(address=node.name),
            properties=node._properties(**{ROUTED: routed, TOPIC_COPY: routed and node.topic_copy, MAKE_AS: node.make_as}),
        )
        sender.context = node
        sender.attach()
        self.wrote()
        return sender

    def open_receiver(
        self, node: RemoteNode, consumer: Consumer, *, exclusive: bool = False, make: bool = True
    ) -> Receiver:
        session = self._consuming or self._publishing  # (before the owner's open: the one channel)
        props: dict[Any, Any] = {
            PRIORITY: int(getattr(consumer, "priority", 0)),
            CONSUMER_ID: consumer.id,
            EXCLUSIVE: exclusive,
            AT_MOST_ONCE: bool(getattr(consumer, "no_ack", False)),
            MAKE: make,
            MAKE_AS: node.make_as,
        }
        filters = getattr(consumer, "filters", None) or None  # (a 1.0 consumer's: selectors, an offset)
        offset = getattr(consumer, "stream_offset", None)  # (a 0-9-1 consumer's x-stream-offset)
        if offset is not None:
            filters = {**(filters or {}), STREAM_OFFSET_FILTER: offset}
        subscription = getattr(consumer, "subscription", None)
        if subscription is not None:  # (a 1.0 topic's subscription: the owner makes it)
            props[SUBSCRIPTION] = list(subscription)
        measure = getattr(consumer, "bytes_as", None)
        if measure is not None:  # (a 0-10 subscription's: the owner counts its byte credit)
            props[bytecredit.BYTES_AS] = list(measure)
        receiver: Receiver = session.receiver(
            f"consume:{next(self._names)}",
            source=Source(
                address=node.name,
                distribution_mode=symbol("copy") if consumer.browse else None,
                filter=filters,  # what the owner applies for it
            ),
            target=Target(address=self.container_id),
            properties=node._properties(**props),
        )
        receiver.attach()
        receiver.flow(TRANSFER_CREDIT)
        self.wrote()
        return receiver
