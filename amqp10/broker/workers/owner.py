"""The side of an internal link that owns the nodes: it serves them to another worker.

A :class:`NodeServer` answers one internal link opened by a worker that stands in for
nodes of ours (:class:`~.remote.RemoteNodes`). Each link the peer attaches names one of
our nodes (its address, and the virtual host in the link's properties):

- a *publishing* link (the peer sends): each batch's records are published to the node
  with ``node.publish``, in order; the batch is settled ``accepted`` once every record's
  ``on_stored`` ran (it is safe: stored, if durable), else ``rejected`` with each
  record's result (:class:`_PublishBatch`). Credit is topped up once per batch of
  events, within the node's room;
- a *consuming* link (the peer receives): a :class:`LinkConsumer` joins the node as one of
  its consumers, if the node admits it (an exclusive consumer, here or on another
  worker, holds it: the attach answers which refusal and the link is detached); its
  credit, in messages, and its outcomes come as control records on the peer's control
  link (:data:`~.remote.CONTROL_ADDRESS`), and what the node delivers to it in one turn
  goes as one transfer;
- the *requests* link (:data:`~.remote.REQUESTS_ADDRESS`): questions about a node (its
  status, a declaration, a purge, a deletion, a ``basic.get``), each answered on the
  *replies* link (:data:`~.remote.REPLIES_ADDRESS`) with what the node answered or the
  core's error. A ``basic.get``'s message is held here under a reference until the
  peer's outcome for it (consumer :data:`~.remote.GETS`) comes.

When a consuming link or the whole internal link goes, what the peer held unsettled is
released to the node, as when a local consumer's connection drops.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Sequence
from typing import Any, Final

from ...transport import (
    ConnectionOpened,
    ConnectionState,
    DeliveryReceived,
    Event,
    IllegalStateError,
    Link,
    LinkAttached,
    LinkDetached,
    LinkFailed,
    Receiver,
    Sender,
    SessionBegun,
)
from ...transport.delivery import Delivery
from ...types import Accepted, Error, ErrorCondition, Rejected
from ..amqp1.filters import both, consumer_filters
from ..amqp1.termini import stream_offset
from ..amqp1.topics import wildcards_of
from ..core import (
    CONSUMER_CLAIMS,
    Broker,
    ConsumerClaim,
    ConsumeResult,
    ModelError,
    Node,
    NotFound,
    PreconditionFailed,
    PublishResult,
    Queue,
    QueuedMessage,
    QueuePolicy,
    ResourceLocked,
    Stream,
    Topic,
    VirtualHost,
    is_pattern,
)
from ..core.equivalence import check_redeclared
from ..core.replies import DirectReplies
from ..core.typed_values import restored
from . import bytecredit
from .link import (
    BY_AN_EXCLUSIVE_CONSUMER,
    BYTES,
    DELIVERY_FORMAT,
    DRAIN,
    DRAINED_FORMAT,
    GRANT,
    OUTCOME,
    REPLY_FORMAT,
    REQUEST_FORMAT,
    REWRITE_FORMAT,
    STOP,
    InternalLink,
    decode_batch,
    decode_control,
    decode_request,
    decode_rewrites,
    encode_deliveries,
    encode_record,
    encode_request,
)
from .making import MAKE_NODE, made
from .questions import REMEMBERED, AnswerMemo
from .remote import (
    ACCEPT,
    ADMITTED,
    AT_MOST_ONCE,
    CONSUME_RESULTS,
    CONSUMER_ID,
    CONSUMER_TIMEOUT,
    CONTROL_ADDRESS,
    DEFER,
    DELIVERY_LIMIT,
    EXCLUSIVE,
    FAILED,
    GETS,
    KIND,
    LIMITED,
    MAKE,
    MAKE_AS,
    NEEDS_MESSAGE_IDS,
    NO_NODE,
    PRIORITY,
    PUBLISH_RESULTS,
    REFUSAL,
    REFUSED_IN_PART,
    REJECT,
    REPLIES_ADDRESS,
    REQUESTS_ADDRESS,
    RESULTS,
    ROUTED,
    SUBSCRIPTION,
    TOPIC_COPY,
    UNDELIVERABLE,
    UNREADABLE,
    VHOST,
    WHY,
)

__all__ = ["PUBLISH_WINDOW", "LinkConsumer", "NodeServer"]

log = logging.getLogger("amqp10.broker.workers")

PUBLISH_WINDOW: Final = 1000
"""The credit a publishing link is given (topped up when half is used), within the node's room."""

_ACCEPTED: Final = Accepted()
_TAKEN: Final = PublishResult.TAKEN


class _PublishBatch:
    """The owner's answer to one batch of publishes: accepted once every record was taken
    and stored; else rejected with each record's result (:data:`~.remote.RESULTS`)."""

    __slots__ = ("_left", "_server", "codes", "d")

    def __init__(self, server: NodeServer, d: Delivery, n: int) -> None:
        self._server = server
        self.d = d
        self.codes = bytearray(n)
        self._left = n
        if n == 0:
            self._answer()

    def stored(self) -> None:
        """One record is safe (the node's ``on_stored``)."""
        self._left -= 1
        if self._left == 0:
            self._answer()

    def refused(self, i: int, result: PublishResult) -> None:
        self.codes[i] = PUBLISH_RESULTS.index(result)
        self.stored()

    def _answer(self) -> None:
        d = self.d
        if d.settled:
            return
        codes = self.codes
        state = (
            _ACCEPTED
            if not any(codes)
            else Rejected(
                error=Error(
                    condition=REFUSED_IN_PART,
                    description="the owner's node did not take every message",
                    info={RESULTS: bytes(codes)},
                )
            )
        )
        try:
            d.settle(state)
        except IllegalStateError:
            return  # the link went meanwhile
        self._server.wrote()


class LinkConsumer:
    """A consumer of one of our nodes on another worker: the node delivers to its link.

    Its credit is in messages, granted by the other worker in control records; what the
    node delivers in one turn goes as one pre-settled transfer, each message with a
    reference that the consumer's outcome names. A browser's copies (``browse``: 1.0's
    ``copy`` distribution mode, 0-10's not-acquired subscription) are settled by no one:
    each goes with reference 0 and is kept on neither side (a ``message.acquire`` of one
    names its seq: ``NodeServer._acquire``)."""

    __slots__ = (
        "_copies", "_last_ref", "_pending", "_server", "allowed", "at_most_once", "browse", "budget", "exclusive", "id", "in_flight",
        "link", "measure", "node", "priority", "selector", "short",
    )  # fmt: skip

    def __init__(
        self,
        server: NodeServer,
        link: Link,
        node: Node,
        consumer_id: int,
        *,
        browse: bool,
        priority: int,
        exclusive: bool,
    ) -> None:
        self._server = server
        self.link = link
        self.node = node
        self.id = consumer_id
        self.browse = browse
        self.priority = priority
        self.exclusive = exclusive
        """It wants the node to itself (a 0-9-1 exclusive consumer on the other worker)."""
        self.allowed = 0
        """Messages the other worker's consumer may still be sent (its grants, less what was sent)."""
        self.in_flight: dict[int, QueuedMessage] = {}
        """Reference -> a message sent and not settled yet."""
        self._last_ref = 0  # (the references it gave: 1, 2, ...; an int, not a count(): no call a message)
        self._pending: list[int] = []  # references of this turn, not yet sent
        self._copies: list[QueuedMessage] = []  # a browser's copies of this turn, not yet sent (none kept)
        self.selector: Callable[[QueuedMessage], bool] | None = None
        """What of the node it sees (the other worker's consumer's selector or filters)."""
        self.at_most_once = False
        """Its front end settles each message as it hands it out (0-9-1 no-ack): done with here
        as it is sent, and sent without a reference (no outcome comes back)."""
        self.measure: bytecredit.Measure | None = None
        """How the other worker's consumer counts byte credit (None: it has none)."""
        self.budget: int | None = None
        """Its byte credit left (None: no limit): :mod:`.bytecredit`."""
        self.short = False
        """The node's next message was larger than :attr:`budget`: nothing until more comes."""

    @property
    def origin(self) -> object | None:
        """What the messages its consumer's connection publishes are marked with here, if it
        is exclusive (a ``no-local`` queue keeps them out: core/qpid_queues.py)."""
        return BY_AN_EXCLUSIVE_CONSUMER if self.exclusive else None

    def credit(self) -> int:
        return 0 if self.short else self.allowed

    def deliver(self, node: Node, msg: QueuedMessage) -> None:
        budget = self.budget
        if budget is not None:
            assert self.measure is not None
            size = bytecredit.cost(msg, self.measure)
            if size > budget and not self.browse and not isinstance(node, Stream):
                self.short = True  # byte credit is exact: not this one (it stays first)
                node.release(msg)
                return
            self.budget = max(budget - size, 0)
        self.allowed -= 1
        if self.browse:  # a copy: no outcome comes for it, so none is kept
            if isinstance(node, Queue):  # (it carries what it copies, for an acquire)
                msg.seq = node.browsers.get(self.id, 0)
            if not self._copies:
                self._server.batch_ready(self)
            self._copies.append(msg)
            return
        ref = self._last_ref = self._last_ref + 1
        self.in_flight[ref] = msg
        if not self._pending:
            self._server.batch_ready(self)
        self._pending.append(ref)

    def send_batch(self) -> None:
        """This turn's deliveries go as one transfer (a browser's copies with reference 0)."""
        if self.browse:
            copies, self._copies = self._copies, []
            if copies and self.link.is_attached:
                self._send([0] * len(copies), copies)
            return
        refs = self._pending
        if not refs:
            return
        self._pending = []
        link = self.link
        if not link.is_attached:
            return  # (released with the rest of what it held, as the link went)
        in_flight = self.in_flight
        msgs = [in_flight[r] for r in refs]
        if not self.at_most_once:
            self._send(refs, msgs)
            return
        # done with as it is sent, as a no-ack delivery on one broker
        self._send([0] * len(refs), msgs)
        ack = self.node.ack
        for r in refs:
            ack(in_flight.pop(r))

    def _send(self, refs: list[int], msgs: list[QueuedMessage]) -> None:
        self.link.send(encode_deliveries(refs, msgs), settled=True, message_format=DELIVERY_FORMAT)  # type: ignore[attr-defined]

    def grant(self, n: int) -> None:
        """A :data:`~.link.GRANT` record: ``n`` more messages, or (negative) ``-n`` taken back;
        below none, messages on their way to the other worker used what was taken back."""
        self.allowed += n
        self.node.consumer_ready(self)

    def drain(self) -> None:
        """The other worker's consumer drains: what its credit allows goes now, the rest of
        the credit is taken back, and the answer follows on its link (:data:`DRAINED_FORMAT`)."""
        self.node.drain(self, self._drained)

    def _drained(self, more: bool) -> None:
        self.allowed = 0
        self.send_batch()
        link = self.link
        if link.is_attached:
            link.send(b"\x01" if more else b"\x00", settled=True, message_format=DRAINED_FORMAT)  # type: ignore[attr-defined]
            self._server.wrote()

    def grant_bytes(self, n: int) -> None:
        """A :data:`~.link.BYTES` record: ``n`` more bytes, or :data:`~.bytecredit.UNLIMITED`
        or :data:`~.bytecredit.NONE_LEFT`."""
        if n == bytecredit.UNLIMITED:
            self.budget = None
        elif n == bytecredit.NONE_LEFT:
            self.budget = 0
        elif self.budget is not None:
            self.budget += n
        self.short = False
        self.node.consumer_ready(self)

    def settled(self, ref: int, code: int, due: float = 0.0) -> None:
        """The other worker's consumer settled ``ref``: the outcome, on the node (``due``:
        a release's delayed retry, 0.0 for none)."""
        msg = self.in_flight.pop(ref, None)
        if msg is None:
            return
        if code == ACCEPT:  # (the common outcome, without a call)
            self.node.ack(msg)
        else:
            settle(self.node, msg, code, due, self.id)

    def cancelled(self) -> None:
        """The node was deleted: the peer's consumer is told by the link's detach (after the
        answer to the question that deleted it, if one did: RabbitMQ's delete-ok comes
        before the basic.cancel it causes). What the peer's consumer holds is released here
        now: the peer forgets it with the link, and its outcomes would find no consumer
        here, so the deleted queue's alternate exchange takes it at once, as it takes what a
        local subscriber holds (QPID-3481)."""
        self._server.forget(self.link)
        self.release_unsettled()
        self._server.after_reply(self._detach)

    def _detach(self) -> None:
        link = self.link
        if link.is_attached:
            link.detach(
                Error(
                    condition=ErrorCondition.RESOURCE_DELETED,
                    description=f"node {self.node.name!r} was deleted",
                )
            )
            self._server.wrote()

    def release_unsettled(self) -> None:
        """The peer's consumer went: every message it held goes back to the node."""
        node = self.node
        in_flight, self.in_flight = self.in_flight, {}
        self._pending, self._copies = [], []
        for msg in in_flight.values():
            node.release(msg)


def settle(node: Node, msg: QueuedMessage, code: int, due: float, consumer_id: int) -> None:
    """Apply the other worker's outcome ``code`` for ``msg`` (its consumer ``consumer_id``) on ``node``."""
    if code == ACCEPT:
        node.ack(msg)
    elif code == REJECT:
        node.reject(msg)
    elif code == DEFER and isinstance(node, Queue):
        node.defer(msg)
    else:
        node.release(
            msg,
            delivery_failed=bool(code & FAILED),
            undeliverable_to=consumer_id if code & UNDELIVERABLE else None,
            due=due or None,
        )


class _ByName(Node):
    """A queue of ours as the other worker's default exchange reaches it: found by name at
    each publish; unroutable while there is no such queue (nothing is made). A direct
    reply-to address of a requester here (core/replies.py) takes its replies too, and our
    copy of a 1.0 topic, reached from its copy on the other worker (``Topic.copies``), sends
    to our subscriptions: made here by its first message if the metadata that makes it has
    not come yet (``topic``: the link says it is a topic's copy, :data:`TOPIC_COPY`)."""

    def __init__(self, vhost: VirtualHost, name: str, *, topic: bool = False) -> None:
        super().__init__(name, QueuePolicy())
        self._vhost = vhost
        self._topic = topic

    def queue(self) -> Queue | Stream | None:
        """Our queue or stream of its name now, if there is one."""
        return self._vhost.queue(self.name)

    def publish(self, msg: QueuedMessage, on_stored: Callable[[], None]) -> PublishResult:
        q = self.queue()
        if q is not None:
            return q.publish(msg, on_stored)
        topic = self._vhost.nodes.get(self.name)
        if topic is None and self._topic:
            topic = self._vhost.lookup(self.name, create=True, kind="topic")
        if isinstance(topic, Topic):
            return topic.publish_here(msg, on_stored)
        requester = self._vhost.broker.replies.consumer(self._vhost, self.name)
        if requester is None:
            return PublishResult.UNROUTABLE
        requester.deliver_reply(msg)
        on_stored()
        return _TAKEN

    def room(self) -> int | None:
        q = self.queue()
        return None if q is None else q.room()


def _view(node: Node, filters: Any) -> tuple[Callable[[QueuedMessage], bool] | None, int | None]:
    """What a consumer on the other worker sees of ``node``, from the filters its front end
    applied (a 1.0 source's): its selector (None: everything), and where it starts reading
    a stream. Raises ValueError for filters or an offset that cannot be applied."""
    selector = consumer_filters(filters).predicate(None) if filters else None
    if not isinstance(node, Stream):
        return selector, None
    spec = stream_offset(filters)[1]
    return selector, node.start_offset(getattr(spec, "value", spec))  # (RabbitMQ's is described)


class _Gets:
    """What ``basic.get`` on the other worker took from our nodes, until its outcome comes."""

    def __init__(self) -> None:
        self._last_ref = 0  # (1, 2, ...: 0 is no reference)
        self.in_flight: dict[int, tuple[Node, QueuedMessage]] = {}

    def take(self, node: Node, msg: QueuedMessage) -> int:
        ref = self._last_ref = self._last_ref + 1
        self.in_flight[ref] = (node, msg)
        return ref

    def settled(self, ref: int, code: int, due: float = 0.0) -> None:
        entry = self.in_flight.pop(ref, None)
        if entry is not None:
            settle(entry[0], entry[1], code, due, GETS)

    def release_unsettled(self) -> None:
        in_flight, self.in_flight = self.in_flight, {}
        for node, msg in in_flight.values():
            node.release(msg)


class NodeServer:
    """The owning side of one internal link: serves ``broker``'s nodes to the peer worker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.link: InternalLink | None = None
        self.publishing: dict[int, tuple[Receiver, Node]] = {}  # id(link) -> (link, node)
        self.consumers: dict[int, LinkConsumer] = {}  # id(link) -> its consumer
        self._by_remote_id: dict[int, LinkConsumer] = {}  # its id on the other worker -> it
        self._ready: list[LinkConsumer] = []  # consumers with deliveries to send this turn
        self._control: Receiver | None = None
        self._requests: Receiver | None = None
        self._replies: Sender | None = None
        self._gets = _Gets()
        self._touched: set[int] = set()
        self._after_reply: list[Callable[[], None]] | None = None
        """While a question is answered: what must reach the peer after its answer."""
        self._subscriptions: dict[int, tuple[VirtualHost, Topic, bool]] = {}
        """id(link) -> its topic subscription's (vhost, topic, durable), of a consumer of one."""
        self.reason: str | None = None
        self.memo: AnswerMemo | None = None
        """The worker's remembered answers (:mod:`.questions`; None: every question is applied)."""
        self.after_publishes: Callable[[Callable[[], None]], None] | None = None
        """Runs what it is given once every publish this worker sent to the other workers
        so far is answered (set by :class:`~.peers.Peers`; None: at once)."""
        self._ops: dict[str, Callable[[Any, list[Any]], list[Any]]] = {
            "status": self._status,
            "held": self._held,
            "declare": self._declare,
            "purge": self._purge,
            "delete": self._delete,
            "get": self._get,
            "acquire": self._acquire,
            "unsubscribe": self._unsubscribe,
            "cancel": self._cancelled,
            "settled": self._settled,
            MAKE_NODE: made,  # (a node whose kind an attach there chose: making.py)
        }

    # -- LinkHandler --------------------------------------------------------------------------
    def started(self, link: InternalLink) -> None:
        self.link = link

    def on_event(self, e: Event) -> None:
        t = type(e)
        if t is DeliveryReceived:
            link = e.link  # type: ignore[attr-defined]
            if link is self._control:
                self._controlled(e.delivery)  # type: ignore[attr-defined]
            elif link is self._requests:
                self._asked(e.delivery)  # type: ignore[attr-defined]
            else:
                self._publish(link, e.delivery)  # type: ignore[attr-defined]
        elif t is LinkAttached:
            self._attached(e.link)  # type: ignore[attr-defined]
        elif t is LinkDetached or t is LinkFailed:
            self._detached(e.link)  # type: ignore[attr-defined]
        elif t is SessionBegun:
            session = e.session  # type: ignore[attr-defined]
            if not session.is_mapped:
                session.begin(incoming_window=8192)
        elif t is ConnectionOpened:
            conn = self.link.connection if self.link is not None else None
            if conn is not None and conn.state is ConnectionState.OPEN_RCVD:
                conn.open()  # the peer worker opened: answer

    def before_write(self) -> None:
        ready, self._ready = self._ready, []
        for c in ready:
            c.send_batch()

    def batch_ready(self, c: LinkConsumer) -> None:
        self._ready.append(c)
        self.wrote()

    def after_events(self) -> None:
        touched, self._touched = self._touched, set()
        for key in touched:
            entry = self.publishing.get(key)
            if entry is not None:
                self._grant(*entry)

    def lost(self, reason: str) -> None:
        self.reason = reason
        self._by_remote_id.clear()
        self._ready.clear()
        for key in list(self.consumers):
            c = self.consumers.pop(key)
            c.node.remove_consumer(c)
            c.release_unsettled()
        self._gets.release_unsettled()
        self.publishing.clear()
        self._subscriptions.clear()  # (kept: the other worker's consumers come back to them)

    def unsettled(self) -> int:
        """How many of our messages the peer worker's consumers (and its ``basic.get``s) hold
        unsettled (none of a browser's copies: see :class:`LinkConsumer`)."""
        return sum(len(c.in_flight) for c in self.consumers.values()) + len(self._gets.in_flight)

    # -- links --------------------------------------------------------------------------------
    def wrote(self) -> None:
        if self.link is not None:
            self.link.flush_soon()

    def _node(self, link: Link) -> Node | None:
        props = link.remote_attach.properties if link.remote_attach is not None else None
        vhost_name = None if not props else props.get(VHOST)
        vhost = self.broker.vhost(str(vhost_name) if vhost_name is not None else None)
        if isinstance(link, Receiver):
            address = getattr(link.remote_target, "address", None)
        else:
            address = getattr(link.remote_source, "address", None)
        if vhost is None:
            return None
        if props and props.get(ROUTED):  # by name at each publish, as the default exchange routes
            # ("": no queue has it, so unroutable)
            return _ByName(vhost, str(address or ""), topic=bool(props.get(TOPIC_COPY)))
        if not address:
            return None
        if DirectReplies.is_reply_address(str(address)) and str(address) not in vhost.nodes:
            return _ByName(vhost, str(address))  # (a 0-9-1 requester's, taken by its channel)
        subscription = props.get(SUBSCRIPTION) if props else None
        if subscription is not None and isinstance(link, Sender):  # (of our copy of a 1.0 topic)
            topic_name, key, durable = subscription
            if is_pattern(str(topic_name)):  # a durable wildcard subscription's (made, or kept, here)
                return wildcards_of(vhost).subscribe(str(topic_name), str(key)).queue
            topic = vhost.lookup(str(topic_name), create=True, kind="topic")
            if not isinstance(topic, Topic):
                return None
            self._subscriptions[id(link)] = (vhost, topic, bool(durable))
            return topic.subscribe(str(key), durable=bool(durable))
        topic_name, sep, key = str(address).partition("::")
        topic = vhost.nodes.get(topic_name) if sep else None
        if isinstance(topic, Topic) and key in topic.subscriptions:  # a subscription by its name
            return topic.subscriptions[key]  # (a [servicebus] topic's: entities.entity_node)
        # made on first use here, as on a broker of one worker (the worker that stands in
        # for it made nothing: its lookup answered the stand-in), unless its consumer's
        # front end consumes only an existing node (MAKE false: 0-9-1's, 0-10's)
        make = isinstance(link, Receiver) or not props or bool(props.get(MAKE, True))
        kind = props.get(MAKE_AS) if props else None  # (what the attach there named it as)
        node = vhost.lookup(str(address), create=make, kind=None if kind is None else str(kind))
        if isinstance(node, Topic):  # a plain name the other worker's client attached before
            # its copy of the metadata said it is a topic (its stand-in for the name's owner)
            if isinstance(link, Receiver):  # publishes: the topic's, to every copy (theirs too)
                return node
            # a consumer: a volatile subscription of its own on our copy, as an attach makes
            # on a broker of one worker (dropped with its link: ``_detached``)
            self._subscriptions[id(link)] = (vhost, node, False)
            return node.subscribe(f"{getattr(link.remote_target, 'address', '')}/{link.name}", durable=False)
        return node

    def _attached(self, link: Link) -> None:
        if isinstance(link, Receiver) and getattr(link.remote_target, "address", None) in (
            CONTROL_ADDRESS,
            REQUESTS_ADDRESS,
        ):
            address = str(link.remote_target.address)
            link.attach(source=link.remote_source, target=link.remote_target)
            if address == CONTROL_ADDRESS:
                self._control = link
            else:
                self._requests = link
            self.publishing[id(link)] = (link, Node(address, QueuePolicy()))  # (credit as a publisher's)
            link.flow(PUBLISH_WINDOW)
            self.wrote()
            return
        if isinstance(link, Sender) and getattr(link.remote_source, "address", None) == REPLIES_ADDRESS:
            link.attach(source=link.remote_source, target=link.remote_target)
            self._replies = link
            self.wrote()
            return
        node = self._node(link)
        if node is None:
            if isinstance(link, Sender):  # (its consumer's front end refuses it: not found)
                link.properties = {ADMITTED: NO_NODE}
            link.attach(source=link.remote_source, target=link.remote_target)
            link.detach(
                Error(condition=ErrorCondition.NOT_FOUND, description="no such node on its owner")
            )
            self.wrote()
            return
        if isinstance(link, Receiver):
            link.properties = {NEEDS_MESSAGE_IDS: node.needs_message_ids, LIMITED: node.room() is not None}
            link.attach(source=link.remote_source, target=link.remote_target)
            link.context = node
            self.publishing[id(link)] = (link, node)
            self._grant(link, node)
        else:
            props = (
                link.remote_attach.properties if link.remote_attach is not None else None
            ) or {}
            exclusive = bool(props.get(EXCLUSIVE, False))
            source = link.remote_source
            try:
                selector, start = _view(node, getattr(source, "filter", None))
                claimed = self._claim(link, node)
            except (ValueError, ModelError) as exc:  # (FilterError too): a 0-9-1 consumer's offset, say
                link.properties = {ADMITTED: UNREADABLE, WHY: str(exc)}
                if isinstance(exc, ModelError):  # (a claim's: answered as it is, REFUSAL)
                    link.properties[REFUSAL] = type(exc).__name__
                link.attach(source=link.remote_source, target=link.remote_target)
                link.detach(Error(condition=ErrorCondition.INVALID_FIELD, description=str(exc)))
                self.wrote()
                return
            admitted = (
                ConsumeResult.LOCKED  # (its connection is here: the other worker's is not it)
                if isinstance(node, Queue) and node.owner is not None
                else node.admits(exclusive=exclusive)
            )
            if claimed is not None:  # (a Service Bus session: its receiver's attach names it)
                source = copy.copy(source)
                source.filter = {**(source.filter or {}), **claimed[0]}
                selector = claimed[1] if selector is None else both(selector, claimed[1])
            link.properties = {ADMITTED: CONSUME_RESULTS.index(admitted), KIND: node.kind}
            timeout = node.policy.consumer_timeout
            if timeout is not None:  # (the consumer's front end, on the other worker, applies it)
                link.properties[CONSUMER_TIMEOUT] = float(timeout)
            limit = node.policy.delivery_limit
            if limit is not None:  # (and reads this)
                link.properties[DELIVERY_LIMIT] = int(limit)
            link.attach(source=source, target=link.remote_target)
            if not admitted:
                link.detach(
                    Error(
                        condition=ErrorCondition.RESOURCE_LOCKED,
                        description=f"node {node.name!r} is in exclusive use",
                    )
                )
                self.wrote()
                return
            mode = getattr(link.remote_source, "distribution_mode", None)
            c = LinkConsumer(
                self,
                link,
                node,
                self.broker.next_consumer_id(),
                browse=mode is not None and str(mode) == "copy",
                priority=int(props.get(PRIORITY, 0)),
                exclusive=exclusive,
            )
            c.at_most_once = bool(props.get(AT_MOST_ONCE, False))
            measure = props.get(bytecredit.BYTES_AS)
            if isinstance(measure, list) and len(measure) == 2:  # (its byte credit: none granted yet)
                c.measure, c.budget = (str(measure[0]), int(measure[1])), 0
            if id(link) in self._subscriptions and isinstance(node, Queue):
                node.admit, selector = selector, None  # the filters decide what the subscription keeps
            c.selector = selector
            link.context = c
            self.consumers[id(link)] = c
            remote_id = props.get(CONSUMER_ID)
            if remote_id is not None:
                self._by_remote_id[int(remote_id)] = c
            if isinstance(node, Stream):
                node.add_consumer_at(c, start)
            else:
                node.add_consumer(c)
        self.wrote()

    def _claim(self, link: Link, node: Node) -> tuple[dict[Any, Any], Callable[[QueuedMessage], bool]] | None:
        """What a front end claims for the consumer of ``link`` on ``node`` (the filters its
        answer names, what it sees: :data:`~amqp10.broker.core.ConsumerClaim`), or None;
        raises ValueError, or the core's ModelError, to refuse it. The claim lasts while ``link`` is attached."""
        if not isinstance(node, Queue):
            return None
        claims: dict[str, ConsumerClaim] = self.broker.shared(CONSUMER_CLAIMS, dict)
        for claim in claims.values():
            claimed = claim(link, link.remote_source, node)
            if claimed is not None:
                return claimed
        return None

    def _detached(self, link: Link) -> None:
        self.publishing.pop(id(link), None)
        c = self.consumers.pop(id(link), None)
        if c is not None:
            self._drop_remote_id(c)
            c.node.remove_consumer(c)
            c.release_unsettled()
        subscribed = self._subscriptions.pop(id(link), None)
        if subscribed is not None and c is not None:
            vhost, topic, durable = subscribed
            q = c.node
            # a shared volatile subscription ends with its last consumer, on any worker
            if not durable and isinstance(q, Queue) and not q.consumers:
                vhost.drop_subscription(topic, q)

    def after_reply(self, then: Callable[[], None]) -> None:
        """Do ``then`` once the answer to the question being answered has gone (now, if none is)."""
        if self._after_reply is None:
            then()
        else:
            self._after_reply.append(then)

    def forget(self, link: Link) -> None:
        """A consuming link's node is gone: nothing more is delivered on it."""
        c = self.consumers.pop(id(link), None)
        if c is not None:
            self._drop_remote_id(c)

    def _drop_remote_id(self, c: LinkConsumer) -> None:
        for key, known in list(self._by_remote_id.items()):
            if known is c:
                del self._by_remote_id[key]

    # -- publishing ---------------------------------------------------------------------------
    def _publish(self, link: Receiver, d: Delivery) -> None:
        node = link.context
        self._touched.add(id(link))
        msgs = decode_batch(d.payload, d.message_format)
        batch = _PublishBatch(self, d, len(msgs))
        stored = batch.stored
        publish = node.publish
        if type(node) is _ByName:  # the queue it finds by name, found once a batch
            q = node.queue()
            if q is not None:
                publish = q.publish
        for i, msg in enumerate(msgs):
            result = publish(msg, stored)
            if result is not _TAKEN:
                batch.refused(i, result)
        self.broker.share_queued()  # (before the answer: the publisher's worker counts them until then)

    def _grant(self, link: Receiver, node: Node) -> None:
        """Top up a publishing link's credit, bounded by the node's room."""
        if not link.is_attached:
            return
        room = node.room()
        target = PUBLISH_WINDOW if room is None else min(PUBLISH_WINDOW, room)
        if room is not None and isinstance(node, Queue):
            node.space_listeners.add(self._regrant)
        if target <= 0:
            if link.credit > 0:
                link.flow(0)
            return
        if link.credit > target or link.credit <= target // 2:
            link.flow(target)

    def _regrant(self) -> None:
        for link, node in list(self.publishing.values()):
            self._grant(link, node)
        self.wrote()

    # -- consuming ----------------------------------------------------------------------------
    def _controlled(self, d: Delivery) -> None:
        """Control records from the other worker: credit for its consumers, their outcomes
        (or the new bytes of messages they hold, before the outcomes for them)."""
        self._touched.add(id(d.link))
        if d.message_format == REWRITE_FORMAT:
            self._rewritten(d)
            return
        consumers = self._by_remote_id
        for what, consumer_id, n, code, due, count in decode_control(d.payload, d.message_format):
            if consumer_id == GETS:
                if what == OUTCOME:
                    for ref in range(n, n + count):  # (a run: each in order)
                        self._gets.settled(ref, code, due)
                continue
            c = consumers.get(consumer_id)
            if c is None:
                continue  # its link went meanwhile (what it held was released)
            if what == OUTCOME:
                for ref in range(n, n + count):
                    c.settled(ref, code, due)
            elif what == GRANT:
                c.grant(n)
            elif what == DRAIN:
                c.drain()
            elif what == BYTES:
                c.grant_bytes(n)
            elif what == STOP:  # cancelled: nothing more to it; its outcomes still come
                c.allowed = 0
                c.node.remove_consumer(c)

    def _rewritten(self, d: Delivery) -> None:
        """The other worker's consumers changed messages they hold (a 1.0 ``modified``
        outcome's annotations): ours are changed as that worker's front end changes a
        local one, before the outcome that follows requeues or dead-letters it."""
        for consumer_id, ref, data in decode_rewrites(d.payload, d.message_format):
            held = self.delivered(consumer_id, ref)
            if held is not None:
                node, msg = held
                msg.data = data
                msg.forget_fields()
                node.rewritten(msg)

    # -- questions about our nodes ----------------------------------------------------------------
    def answer(self, op: str, run: Callable[[Any, list[Any]], list[Any]]) -> None:
        """Answer question ``op`` with ``run(vhost, [node name, *arguments])`` (its values; a
        core error is the answer's error), once what it changed is stored."""
        self._ops[op] = run

    def delivered(self, consumer_id: int, ref: int, *, forget: bool = False) -> tuple[Node, QueuedMessage] | None:
        """The node and message the other worker's consumer ``consumer_id`` (:data:`~.remote.GETS`:
        ``basic.get``) holds under ``ref``, unsettled; ``forget``: settled by other means
        (a transaction's commit), its outcome here does nothing."""
        if consumer_id == GETS:
            held = self._gets.in_flight
            return held.pop(ref, None) if forget else held.get(ref)
        c = self._by_remote_id.get(consumer_id)
        msg = None if c is None else (c.in_flight.pop(ref, None) if forget else c.in_flight.get(ref))
        return None if c is None or msg is None else (c.node, msg)

    def _asked(self, d: Delivery) -> None:
        """A question from the other worker: answer it on the replies link."""
        self._touched.add(id(d.link))
        n, asker, low, op, vhost_name, name, *args = decode_request(
            d.payload, d.message_format, REQUEST_FORMAT
        )
        memo = self.memo
        remembered = False
        if memo is not None and isinstance(asker, bytes):
            memo.arrived(asker, int(low))
            remembered = op in REMEMBERED
            first = memo.answer(asker, n) if remembered else None
            if first is not None:  # asked again after the link went: answered as first, not applied again
                self._reply(first)
                return
        run = self._ops.get(str(op))
        vhost = self.broker.vhost(str(vhost_name))
        error: str | None = None
        text = ""
        values: list[Any] = []
        after: list[Callable[[], None]] = []
        self._after_reply = after
        try:
            if run is None:
                raise PreconditionFailed(f"no such question as {op!r}")
            if vhost is None:
                raise NotFound(f"no vhost {vhost_name!r}")
            values = run(vhost, [str(name), *args])
        except ModelError as exc:
            error, text = type(exc).__name__, str(exc)
        finally:
            self._after_reply = None
        answer = encode_request([n, error, text, *values])
        if remembered and error is None:
            assert memo is not None
            memo.remember(asker, n, answer)
        self._reply(answer, after, dead_letters=op == "settled", ordered=op != MAKE_NODE)

    def _reply(
        self, answer: bytes, after: Sequence[Callable[[], None]] = (), *, dead_letters: bool = False, ordered: bool = True
    ) -> None:
        """Send ``answer`` once what was changed so far is stored, as a broker answers a
        declare (``dead_letters``: and once the other workers took what this one sent them,
        the dead letters of the outcomes applied so far; ``ordered``: and the metadata
        changes made here so far are in the one order; not for a node this worker decided
        alone, making.py); then ``after`` (what must reach the peer after its answer)."""

        def send() -> None:
            replies = self._replies
            if replies is not None and replies.is_attached:
                replies.send(answer, settled=True, message_format=REPLY_FORMAT)
                self.wrote()
            for then in after:  # (a deleted queue's consumers: detached after the answer)
                then()

        wait = self.after_publishes
        if dead_letters and wait is not None:
            self.broker.after_commit(lambda: wait(send))
        elif ordered:
            self.broker.after_commit(send)
        else:
            self.broker.after_store(send)

    def hand_out(self, node: Node, msg: QueuedMessage) -> int:
        """``msg``, acquired on ``node``, is the other worker's now (a suspended consumer's
        message its resumed link holds there: workers/resumption.py): its reference, which
        the other worker's outcome names, as a ``basic.get``'s."""
        return self._gets.take(node, msg)

    @staticmethod
    def _queue(vhost: Any, name: str) -> Queue:
        """Queue ``name``, as another worker's connection may use it: not an exclusive queue
        (its connection is on this worker, placing.py)."""
        q = vhost.queue(name)
        if not isinstance(q, Queue):
            raise NotFound(f"no queue '{name}' in vhost '{vhost.name}'")
        if q.owner is not None:
            raise ResourceLocked(f"cannot obtain exclusive access to locked queue '{name}' in vhost '{vhost.name}'")
        return q

    def _status(self, vhost: Any, args: list[Any]) -> list[Any]:
        q = self._queue(vhost, args[0])
        return [q.count, len(q.consumers)]

    @staticmethod
    def _held(vhost: Any, args: list[Any]) -> list[Any]:
        """Whether we have a node called ``args[0]`` to publish to (of any kind), or a direct
        reply-to requester of that address."""
        name = str(args[0])
        held = vhost.lookup(name, create=False) is not None or vhost.broker.replies.consumer(vhost, name) is not None
        return [held]

    def _declare(self, vhost: Any, args: list[Any]) -> list[Any]:
        name, durable, carried_arguments, auto_delete = args
        try:
            arguments = restored(carried_arguments or {})  # (as declared: remote.py's ask_declare)
        except ValueError as exc:
            raise PreconditionFailed(f"invalid arguments for queue '{name}' in vhost '{vhost.name}': {exc}") from None
        existing = vhost.queue(name)
        if existing is not None:  # declared again: equivalent to it, or refused as on one worker
            check_redeclared(
                vhost, existing, durable=bool(durable), auto_delete=bool(auto_delete), exclusive=False, arguments=arguments
            )
        q = vhost.declare_queue(name, durable=bool(durable), arguments=arguments, auto_delete=bool(auto_delete))
        return [q.count, len(q.consumers)]

    def _purge(self, vhost: Any, args: list[Any]) -> list[Any]:
        return [self._queue(vhost, args[0]).purge()]

    def _delete(self, vhost: Any, args: list[Any]) -> list[Any]:
        name, if_unused, if_empty = args
        q = self._queue(vhost, name)
        where = f"queue '{name}' in vhost '{vhost.name}'"
        if if_unused and q.consumers:
            raise PreconditionFailed(f"{where} in use")
        if if_empty and q.count:
            raise PreconditionFailed(f"{where} not empty")
        count = q.count
        vhost.delete_node(name)
        return [count]

    @staticmethod
    def _settled(vhost: Any, args: list[Any]) -> list[Any]:
        """The other worker's outcomes before this question are applied (they came first on
        the same session): answered once their dead letters are taken (:meth:`_reply`)."""
        return []

    def _unsubscribe(self, vhost: Any, args: list[Any]) -> list[Any]:
        _, topic_name, key = args
        if is_pattern(topic_name):  # a durable wildcard subscription's
            wildcards = wildcards_of(vhost)
            kept = wildcards.durable.get(key)
            if kept is None or kept.pattern != topic_name:
                return [0]
            count = kept.queue.count
            wildcards.unsubscribe(kept)
            return [count]
        topic = vhost.nodes.get(topic_name)
        q = topic.subscriptions.get(key) if isinstance(topic, Topic) else None
        if q is None:
            return [0]
        count = q.count
        vhost.drop_subscription(topic, q)
        return [count]

    @staticmethod
    def _cancelled(vhost: Any, args: list[Any]) -> list[Any]:
        """The other worker cancelled a consumer (:meth:`~.remote.RemoteNode.ask_cancel`):
        its detach or :data:`STOP`, sent before this question on the one internal link,
        has been applied, so the answer alone says it is dropped."""
        return []

    def _get(self, vhost: Any, args: list[Any]) -> list[Any]:
        q = self._queue(vhost, args[0])
        msg = q.get()
        if msg is None:
            return [q.count]
        return [q.count, self._gets.take(q, msg), encode_record(msg)]

    def _acquire(self, vhost: Any, args: list[Any]) -> list[Any]:
        """0-10's ``message.acquire`` of browsed messages, by seq: [seq, reference, record]
        of each still on the queue (taken as a ``basic.get``'s, settled by reference)."""
        q = self._queue(vhost, args[0])
        out: list[Any] = []
        for seq in args[1:]:
            msg = q.acquire(int(seq))
            if msg is not None:
                out += [int(seq), self._gets.take(q, msg), encode_record(msg)]
        return out
