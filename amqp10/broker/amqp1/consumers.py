"""Consumers of the AMQP 1.0 front end: broker sender links, their attach, credit and outcomes.

:class:`LinkConsumer` is a sender link as the core's consumer of a queue or
stream. :class:`Consumers` answers a consumer's attach (queue, stream, topic
subscription, topic pattern, a durable subscription looked up by link name, a
reply link from a request node), turns credit, drain and the receiver's
dispositions into node operations, keeps a lost consumer's state for link
recovery (§2.6.13), and forgets a consumer when its link ends.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from ..._mypyc import mypyc_attr
from ...transport import (
    CreditAdded,
    CreditLowered,
    Delivery,
    DeliveryUpdated,
    DrainRequested,
    IllegalStateError,
    Link,
    Sender,
    Session,
)
from ...types import (
    Accepted,
    ErrorCondition,
    Modified,
    Rejected,
    Released,
    Role,
    SenderSettleMode,
    Source,
    Target,
    symbol,
)
from ...types.transactions import TransactionalState
from ..core import (
    ConsumeResult,
    ModelError,
    Node,
    NodeElsewhere,
    NotFound,
    Queue,
    QueuedMessage,
    Stream,
    SuspendedLink,
    Topic,
)
from ..core.consumer_timeout import UnsettledClock
from ..core.recovery import Unsettled
from ..core.replies import DirectReplies
from .addresses import QUEUES, AddressError, queue_address
from .context import Amqp1Context, refuse, settle_quietly
from .filters import FilterError, both, consumer_filters
from .management import ManagementNode
from .message import Amqp1Message, delivery_time, with_routing_annotations
from .termini import (
    CONDITIONS,
    capabilities,
    echo,
    made_by_link,
    source_answer,
    stream_offset,
)
from .topics import (
    SUBSCRIPTION_QUESTION,
    Subscription,
    WildcardSubscription,
    durable_subscription,
    is_pattern,
    node_name_and_kind,
    subscription_for,
    wildcards_of,
)

if TYPE_CHECKING:
    from .lookup import NodeLookup
    from .requests import RequestNodes
    from .transactions import Transactions

__all__ = ["CONSUME_REFUSALS", "Consumers", "LinkConsumer"]

CONSUME_REFUSALS: Final[dict[ConsumeResult, tuple[ErrorCondition, str]]] = {
    ConsumeResult.EXCLUSIVE_HELD: (
        ErrorCondition.RESOURCE_LOCKED,
        "cannot obtain exclusive access to locked queue '{queue}' in vhost '{vhost}'",
    ),
    ConsumeResult.IN_USE: (
        ErrorCondition.RESOURCE_LOCKED,
        "cannot obtain exclusive access to locked queue '{queue}' in vhost '{vhost}'",
    ),
    ConsumeResult.LOCKED: (
        ErrorCondition.RESOURCE_LOCKED,
        "cannot obtain exclusive access to locked queue '{queue}' in vhost '{vhost}'",
    ),
}
"""How a consumer's attach is refused for each of the core's refusals (a 0-9-1 or 0-10
client's exclusive consumer holds the queue): this error condition and description."""


def _refusal(result: ConsumeResult, queue: str, vhost: str) -> tuple[ErrorCondition, str]:
    """The condition and text a consumer's attach refused for ``result`` is closed with."""
    condition, text = CONSUME_REFUSALS[result]
    return condition, text.format(queue=queue, vhost=vhost)


log = logging.getLogger("amqp10.broker")



PRIORITY_PROPERTY: Final = symbol("rabbitmq:priority")


def _priority(link: Sender) -> int:
    """The consumer priority a receiver asked for in its attach's ``rabbitmq:priority``
    property (an integer, as RabbitMQ 4 reads it); 0 when absent or not an integer."""
    attach = link.remote_attach
    props = attach.properties if attach is not None else None
    value = props.get(PRIORITY_PROPERTY) if isinstance(props, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@mypyc_attr(allow_interpreted_subclasses=True)
class LinkConsumer:
    """A broker sender link consuming from a queue (or browsing it)."""

    def __init__(self, ctx: Amqp1Context, link: Sender, node: Queue | Stream | NodeElsewhere, *, browse: bool) -> None:
        self.id = ctx.broker.next_consumer_id()
        self.ctx = ctx
        self.link = link
        self.node = node
        self.browse = browse
        self.presettled = link.snd_settle_mode == SenderSettleMode.SETTLED or browse
        self.in_flight: dict[bytes, QueuedMessage] = {}
        self.selector: Callable[[QueuedMessage], bool] | None = None
        """The consumer's view of a queue or stream (its source's filters); None: every message."""
        self.filters: dict[Any, Any] = {}
        """The source filter-set entries applied, for the attach answer (unsupported ones left out)."""
        self.subscription: list[Any] | None = None
        """Of a subscription another worker keeps (its name's owner): [topic, key, durable],
        for that worker to make it (broker/workers/owner.py)."""
        self.priority = _priority(link)
        """Its consumer priority (RabbitMQ's ``rabbitmq:priority`` link property; 0 by default)."""
        remote = link.remote_attach  # (the peer's attach made this consumer)
        self.max_message_size = (remote.max_message_size if remote is not None else None) or 0
        """The largest message the receiver takes (its attach's max-message-size; 0: any)."""
        source = link.remote_source
        address = source.address if isinstance(source, Source) else None
        self.unsettled_clock: UnsettledClock | None = None
        """When its unsettled deliveries were first seen unsettled (made for a queue with a consumer timeout)."""
        self.annotate = (isinstance(address, str) and address.startswith(QUEUES)) or DirectReplies.is_reply_address(node.name)
        """Its messages carry RabbitMQ's routing annotations (a consumer of a v2 address,
        ``/queues/Q``, or of a direct reply-to queue: RabbitMQ 4's clients, which read the
        annotations of each)."""

    def credit(self) -> int:
        link = self.link
        return link.credit - link.queued if link.is_attached else 0

    def details(self) -> dict[str, Any]:
        """What management lists of it (``FrontEndHandler.consumer_details``)."""
        link = self.link
        return {
            "consumer_tag": link.name, "channel": link.session.channel, "queue": self.node.name,
            "ack_required": not self.presettled, "exclusive": False, "prefetch_count": link.credit,
            "active": link.is_attached, "arguments": {"x-priority": self.priority} if self.priority else {},
        }  # fmt: skip

    def payload(self, msg: QueuedMessage) -> tuple[bytes, bytes | None]:
        """The bytes to send for ``msg``, and the delivery tag (None: the link's next)."""
        if self.annotate or msg.delivery_count or type(msg) is not Amqp1Message:
            data = msg.data if msg.delivery_count == 0 and type(msg) is Amqp1Message else _redelivery_form(msg)
            if self.annotate:
                data = with_routing_annotations(data, msg, self.node.stream_offset(msg))
            return data, None
        return msg.data, None  # as it arrived: nothing to convert or rewrite

    def deliver(self, node: Node, msg: QueuedMessage) -> None:
        data, tag = self.payload(msg)
        limit = self.max_message_size
        if limit and len(data) > limit:
            # too big for this receiver (Part 2 §2.7.3): it stays for others, never this one
            # (a browser's copy is simply not shown)
            log.warning("a message of %d bytes is over link %r's max-message-size %d: not for it", len(data), self.link.name, limit)
            if not self.browse:
                self.node.release(msg, undeliverable_to=self.id)
            return
        d = self.link.send(data, settled=self.presettled, tag=tag)
        if self.presettled:
            if not self.browse:
                self.node.ack(msg)
        else:
            d.context = msg
            self.in_flight[d.tag] = msg
        self.ctx.wake()

    def settled(self, d: Delivery, state: Any) -> None:
        """The consumer settled ``d`` with ``state``: apply the outcome to the queue."""
        msg = self.in_flight.pop(d.tag, None)
        if msg is not None:
            if type(state) is Accepted:  # the usual outcome, without the call to apply
                self.node.ack(msg)
            else:
                self.apply(msg, state)

    def apply(self, msg: QueuedMessage, state: Any) -> None:
        """Apply an outcome to a message this consumer took (now, or at a transaction's commit)."""
        q = self.node
        if isinstance(state, Accepted):
            q.ack(msg)
        elif isinstance(state, Rejected):
            q.reject(msg)
        elif isinstance(state, Modified):
            annotations = state.message_annotations
            due = None
            if annotations and isinstance(msg, Amqp1Message):
                msg.annotate(annotations)  # kept as it is requeued or dead-lettered (stored too)
                q.rewritten(msg)  # (a queue another worker holds: there too)
                due = delivery_time(annotations)  # RabbitMQ 4's delayed retry
            if state.undeliverable_here and self.annotate:
                q.reject(msg)  # RabbitMQ 4 (its clients' "discard with annotations"): dead-lettered
                return
            q.release(
                msg,
                delivery_failed=bool(state.delivery_failed),
                undeliverable_to=self.id if state.undeliverable_here else None,
                due=due,
            )
        else:  # released, or settled with no outcome: back to the queue
            q.release(msg)

    def cancelled(self) -> None:
        """The queue was deleted: the link is closed with amqp:resource-deleted."""
        self.ctx.fail_link(self.link, ErrorCondition.RESOURCE_DELETED, f"node {self.node.name!r} was deleted")
        self.ctx.wake()

    def refused(self, result: ConsumeResult) -> None:
        """The queue's owner (another worker) did not admit it after all (an exclusive consumer
        holds the queue there): the link is closed as an attach here is refused."""
        self.ctx.fail_link(self.link, *_refusal(result, self.node.name, self.ctx.vhost.name))
        self.ctx.wake()

    def release_all(self) -> None:
        """The link is gone: everything unsettled goes back (counted as a failed delivery)."""
        pending, self.in_flight = self.in_flight, {}
        for msg in pending.values():
            self.node.release(msg, delivery_failed=True)


_TERMINAL = (Accepted, Rejected, Released, Modified)
"""The terminal delivery states (outcomes)."""
_REJECTED = Rejected()


def _dynamic_address(node: Node) -> str:
    """A dynamic source's address: a direct reply-to queue's is its v2 address."""
    return queue_address(node.name) if DirectReplies.is_reply_address(node.name) else node.name


class Consumers:
    """The consumer links of one connection (broker senders), by ``id(link)``."""

    def __init__(self, ctx: Amqp1Context, nodes: NodeLookup, requests: RequestNodes, txns: Transactions) -> None:
        self.ctx = ctx
        self.nodes = nodes
        self.requests = requests
        self.txns = txns
        self.links: dict[int, LinkConsumer] = {}
        self.starting: set[int] = set()
        """The links (by ``id``) whose attach answer is not written yet: their node does not
        know them until it is (:meth:`_start`)."""

    # -- attach -------------------------------------------------------------------------------
    def attach(self, link: Sender) -> None:
        source = link.remote_source
        if source is None:
            self._attach_existing_subscription(link)
            return
        if not isinstance(source, Source):
            refuse(link, ErrorCondition.INVALID_FIELD, "a consumer's attach needs a source")
            return
        requests = None if source.dynamic or not source.address else self.requests.node_at(source.address)
        if requests is not None:
            self._attach_reply_link(link, source, requests)
            return
        if not source.dynamic and source.address:
            name, kind = node_name_and_kind(source.address, source.capabilities)
            if kind == "topic" and is_pattern(name):
                self._attach_wildcard(link, source, name)
                return
        ctx = self.ctx
        try:
            node = self.nodes.source_node(source)
        except AddressError as exc:
            refuse(link, CONDITIONS[exc.condition], exc.description)
            return
        try:
            wanted = consumer_filters(source.filter)
        except FilterError as exc:
            refuse(link, ErrorCondition.INVALID_FIELD, str(exc))
            return
        view = wanted.predicate(ctx.origin)
        browse = source.distribution_mode == "copy"
        filters = None
        start: int | None = None
        sub: Subscription | None = None
        if isinstance(node, Stream):
            offset_key, spec = stream_offset(source.filter)
            try:
                start = node.start_offset(getattr(spec, "value", spec))  # RabbitMQ's is described
            except ValueError as exc:
                refuse(link, ErrorCondition.INVALID_FIELD, str(exc))
                return
            if spec is not None:
                filters = {offset_key: spec}
            queue: Queue | Stream | NodeElsewhere = node
            browse = False
        elif isinstance(node, Topic):
            durable = bool(source.durable) and source.expiry_policy == "never"
            sub = subscription_for(
                ctx.remote_container_id, link.name, source.capabilities, durable=durable, unique=uuid.uuid4().hex
            )
            elsewhere = ctx.vhost.subscription_elsewhere(node.name, sub.key) if sub.durable or sub.shared else None
            if elsewhere is not None:  # one queue on the worker that owns its name (it applies the filters)
                queue = elsewhere
            else:
                queue = node.subscribe(sub.key, durable=sub.durable)
                queue.admit, view = view, None  # on a topic, the filters decide what the subscription keeps
            browse = False
        else:  # a queue, or a stand-in for a queue another worker owns (broker/workers/remote.py)
            assert isinstance(node, Queue | NodeElsewhere)  # (a NodeElsewhere's kind is "remote")
            queue = node
            if node.kind == "remote":  # a stream there starts where this says (its owner reads it)
                offset_key, spec = stream_offset(source.filter)
                if spec is not None:
                    filters = {offset_key: spec}
        admitted = (
            ConsumeResult.LOCKED  # another connection's exclusive queue (RabbitMQ 4 refuses it too)
            if isinstance(queue, Queue) and queue.owner is not None and queue.owner is not ctx
            else queue.admits()
        )
        if not admitted:
            refuse(link, *_refusal(admitted, queue.name, ctx.vhost.name))
            return
        if isinstance(queue, Queue):
            try:
                session = ctx.plugin.consumer_view(link, source, queue)
            except AddressError as exc:
                refuse(link, CONDITIONS[exc.condition], exc.description)
                return
            if session is not None:  # e.g. a Service Bus session receiver: its session's messages only
                filters = {**(filters or {}), **session[0]}
                view = session[1] if view is None else both(view, session[1])
        elif (
            isinstance(queue, NodeElsewhere)
            and not browse
            and (claim := ctx.plugin.claim_elsewhere(link, source)) is not None
        ):
            self._attach_claimed(link, source, queue, {**(filters or {}), **wanted.applied, **claim}, view)
            return
        resumable = not browse and _resumable(queue)
        record = ctx.take_suspended(link, source.address, queue if resumable else None)
        if wanted.applied:
            filters = {**(filters or {}), **wanted.applied}

        def answer(deliveries: Sequence[Any] | None, in_flight: dict[bytes, QueuedMessage] | None) -> None:
            """Attach, resuming ``deliveries`` (whose messages ``in_flight`` holds by tag), if any."""
            link.attach(
                resume_deliveries=deliveries,
                target=echo(link.remote_target, Target),
                source=source_answer(
                    source,
                    address=_dynamic_address(node) if source.dynamic else source.address,
                    browse=browse,
                    filters=filters,
                    capabilities=capabilities(ctx.vhost.kind_of(node), source.capabilities, sub),
                ),
            )
            consumer = ctx.plugin.consumer(ctx, link, queue, browse=browse)
            consumer.selector = view
            consumer.filters = filters or {}
            if sub is not None and queue.kind == "remote":
                consumer.subscription = [node.name, sub.key, sub.durable]
            if in_flight is not None:
                # the resumed deliveries refer to these messages, by delivery-tag
                consumer.in_flight = in_flight
                ctx.broker.recovery.resumed += 1
            self._add(link, consumer, node if isinstance(node, Topic) else None, source, sub, start)

        if record is None and resumable:
            # another worker may keep it (lost there, of this worker's queue or another's):
            # resumed with the deliveries it hands over
            def handed_over(unsettled: Unsettled | None) -> None:
                if ctx.can_answer(link):
                    held = None if unsettled is None else {tag: d.context for tag, d in unsettled.items()}
                    answer(None if unsettled is None else list(unsettled.values()), held)
                    ctx.wake()
                elif unsettled:  # the link went meanwhile: they go back
                    for d in unsettled.values():
                        queue.release(d.context, delivery_failed=True)

            if ctx.resume_elsewhere(link, source.address, handed_over):
                return
        if record is None:
            answer(None, None)
        else:
            answer(record.deliveries, record.consumer.in_flight)

    def _attach_claimed(
        self, link: Sender, source: Source, queue: NodeElsewhere, filters: dict[Any, Any], view: Any
    ) -> None:
        """A consumer of a queue another worker owns, with something for that worker to claim
        (:meth:`~.plugin.Amqp1Plugin.claim_elsewhere`: ``filters`` carry it): added there
        first; its attach is answered once the owner admitted it, naming what the owner
        claimed (nothing is delivered before: its link has no credit until attached)."""
        ctx = self.ctx
        consumer = ctx.plugin.consumer(ctx, link, queue, browse=False)
        consumer.selector = view
        consumer.filters = filters

        def admitted(result: Callable[[], ConsumeResult]) -> None:
            refusal = None
            try:
                got = result()
                if not got:
                    refusal = _refusal(got, queue.name, ctx.vhost.name)
            except NotFound as exc:
                refusal = ErrorCondition.NOT_FOUND, str(exc)
            except ModelError as err:  # (the owner could not claim it: a session held; a name
                refusal = ErrorCondition.RESOURCE_LOCKED, str(err)  # of its own: mypyc types a name once)
            if not ctx.can_answer(link):  # the link went meanwhile
                if refusal is None:
                    queue.remove_consumer(consumer)
                return
            if refusal is not None:
                refuse(link, *refusal)
            else:
                ctx.plugin.claimed_elsewhere(link, queue, consumer.filters)
                link.attach(
                    target=echo(link.remote_target, Target),
                    source=source_answer(
                        source,
                        address=source.address,
                        browse=False,
                        filters=consumer.filters,
                        capabilities=capabilities(ctx.vhost.kind_of(queue), source.capabilities, None),
                    ),
                )
                self._add(link, consumer, None, source, None, added=True)
            ctx.wake()

        queue.ask_consume(consumer, exclusive=False, answered=admitted, make=True)

    def _add(
        self,
        link: Sender,
        consumer: LinkConsumer,
        topic: Topic | WildcardSubscription | None,
        source: Source,
        sub: Subscription | None,
        start: int | None = None,
        *,
        added: bool = False,
    ) -> None:
        link.context = (consumer, topic, source, sub)
        self.links[id(link)] = consumer
        self.starting.add(id(link))
        self.ctx.after_write(partial(self._start, consumer, start, added))

    def _start(self, consumer: LinkConsumer, start: int | None, added: bool = False) -> None:
        """The consumer's attach answer is written: its node may now give it messages
        (so the receiver reads its attach alone, before the link's first transfers: a
        client that waits for the attach, then runs its handler, sees deliveries only
        after its ``consumer()`` has returned, as RabbitMQ's Python client expects);
        ``added``: its node knows it already (:meth:`_attach_claimed`), and now hears of
        its credit."""
        link = consumer.link
        self.starting.discard(id(link))
        if self.links.get(id(link)) is not consumer:
            return  # its link ended meanwhile
        queue = consumer.node
        if added:
            queue.consumer_ready(consumer)
        elif isinstance(queue, Stream):
            queue.add_consumer_at(consumer, start)
        else:
            queue.add_consumer(consumer)
        if link.drain:  # a drain asked for before this: answered now
            self._drain(link)

    def _attach_reply_link(self, link: Sender, source: Source, node: ManagementNode) -> None:
        """A receiver from ``$management`` (or ``$cbs``): the node's responses whose ``reply-to`` is
        its target address come to it (the convention of Azure's and Qpid's clients); from
        ``/management``, those to the requests on the sender it is paired with."""
        target = link.remote_target
        try:
            queue = node.reply_queue(link)
        except AddressError as exc:
            refuse(link, CONDITIONS[exc.condition], exc.description)
            return
        link.attach(
            target=echo(target, Target),
            source=source_answer(source, address=node.name, browse=False, filters=None, capabilities=[]),
        )
        self._add(link, LinkConsumer(self.ctx, link, queue, browse=False), None, source, None)

    def _attach_wildcard(self, link: Sender, source: Source, pattern: str) -> None:
        """A consumer on a topic pattern: a queue of its own, bound to every matching topic
        (durable: kept, with what arrives meanwhile, until a detach that closes the link)."""
        ctx = self.ctx
        if not ctx.may(pattern, "read"):
            refuse(link, ErrorCondition.UNAUTHORIZED_ACCESS, f"access to {source.address!r} refused")
            return
        durable = None
        if bool(source.durable) and source.expiry_policy == "never":  # kept by name until closed
            durable = subscription_for(ctx.remote_container_id, link.name, source.capabilities, durable=True, unique="").key
        elsewhere = None if durable is None else ctx.vhost.subscription_elsewhere(pattern, durable)
        sub = None if elsewhere is not None else wildcards_of(ctx.vhost).subscribe(pattern, durable)
        link.attach(
            target=echo(link.remote_target, Target),
            source=source_answer(
                source, address=source.address, browse=False, filters=None, capabilities=[symbol("topic")]
            ),
        )
        if sub is not None:
            self._add(link, LinkConsumer(ctx, link, sub.queue, browse=False), sub, source, None)
            return
        # a durable one is one queue, on the worker that owns its name (which makes it and
        # keeps it bound to the topics that match), wherever it is attached
        assert elsewhere is not None
        consumer = LinkConsumer(ctx, link, elsewhere, browse=False)
        consumer.subscription = [pattern, durable, True]
        self._add(link, consumer, None, source, None)

    def _attach_existing_subscription(self, link: Sender) -> None:
        """A null source: the JMS mapping's look-up of a durable subscription by its link
        name (how a JMS client unsubscribes: attach, then detach with closed=true).
        Answered with the subscription's source, or refused (null source) if none. With
        several workers, one kept by another worker (the one that owns its name) is asked
        for, and the attach answered once the others answered."""
        ctx = self.ctx
        caps = link.remote_attach.desired_capabilities if link.remote_attach is not None else None
        subs = [subscription_for(scope, link.name, caps, durable=True, unique="") for scope in (ctx.remote_container_id, "")]
        keys = [sub.key for sub in subs]
        found = durable_subscription(ctx.vhost, keys)
        others = ctx.broker.others
        if found is not None or others is None:
            self._attach_found(link, subs, found, here=True)
            return

        def answered(answers: list[Any]) -> None:
            if not ctx.can_answer(link):
                return
            kept = [a for a in answers if isinstance(a, list) and len(a) == 3 and a[1] in keys]
            kept.sort(key=lambda a: keys.index(a[1]))  # (the container's own first)
            self._attach_found(link, subs, (str(kept[0][0]), str(kept[0][1]), bool(kept[0][2])) if kept else None, here=False)
            ctx.wake()

        others.ask(SUBSCRIPTION_QUESTION, {"vhost": ctx.vhost.name, "keys": keys}, answered)

    def _attach_found(
        self, link: Sender, subs: list[Subscription], found: tuple[str, str, bool] | None, *, here: bool
    ) -> None:
        """Answer a look-up by link name with the durable subscription ``found`` (topic or
        pattern, key, whether a pattern's): kept ``here``, or by the worker that owns its
        name (consumed through its stand-in, as an attach naming it does); refused if none."""
        vhost = self.ctx.vhost
        if found is None:
            refuse(link, ErrorCondition.NOT_FOUND, f"no durable subscription {link.name!r}")
            return
        address, key, pattern = found
        sub = None if pattern else next(s for s in subs if s.key == key)
        if here and pattern:
            wildcard = wildcards_of(vhost).durable[key]
            self._attach_to_subscription(link, address, wildcard.queue, wildcard, None)
            return
        topic = vhost.nodes.get(address)
        if here:
            assert isinstance(topic, Topic)
            self._attach_to_subscription(link, address, topic.subscriptions[key], topic, sub)
            return
        elsewhere = vhost.subscription_elsewhere(address, key)
        if elsewhere is None:  # (its name is this worker's: it went meanwhile)
            refuse(link, ErrorCondition.NOT_FOUND, f"no durable subscription {link.name!r}")
            return
        self._attach_to_subscription(
            link, address, elsewhere, topic if isinstance(topic, Topic) else None, sub, subscription=[address, key, True]
        )

    def _attach_to_subscription(
        self,
        link: Sender,
        address: str,
        queue: Queue | NodeElsewhere,
        topic: Topic | WildcardSubscription | None,
        sub: Subscription | None,
        *,
        subscription: list[Any] | None = None,
    ) -> None:
        """Answer a look-up by link name with the durable subscription found (at ``address``;
        ``subscription``: [topic or pattern, key, durable] of one another worker keeps)."""
        source = Source(address=address, durable=2, expiry_policy=symbol("never"), capabilities=[symbol("topic")])
        link.attach(
            target=echo(link.remote_target, Target),
            source=source_answer(source, address=address, browse=False, filters=None, capabilities=[symbol("topic")]),
        )
        consumer = LinkConsumer(self.ctx, link, queue, browse=False)
        consumer.subscription = subscription
        self._add(link, consumer, topic, source, sub)

    # -- credit and outcomes ------------------------------------------------------------------
    def on_credit(self, e: CreditAdded | CreditLowered) -> None:
        """The receiver's credit changed: its node hands on what it can (lowered: a node
        another worker owns gives back to its owner what was asked for beyond it)."""
        c = self.links.get(id(e.link))
        if c is not None and id(e.link) not in self.starting:  # (else it starts with its credit)
            c.node.consumer_ready(c)

    def on_drain(self, e: DrainRequested) -> None:
        if id(e.link) not in self.starting:  # (else answered once it starts)
            self._drain(e.link)

    def _drain(self, link: Sender) -> None:
        """§2.6.7 drain: send what the node has, then give back the rest of the credit
        with a flow (drain, credit 0), also when the transfers took exactly all there
        was. If the credit ran out with messages still waiting, the drain was met by
        transfers alone: no flow, which would tell the receiver the node is empty. (A
        queue another worker owns: once its owner has sent what the credit allows.)"""
        c = self.links.get(id(link))
        if c is None:
            link.drained()
            return

        def drained(more: bool) -> None:
            if more or self.links.get(id(link)) is not c or not link.is_attached:
                return
            link.drained()
            self.ctx.wake()

        c.node.drain(c, drained)

    def on_update(self, e: DeliveryUpdated) -> None:
        """The receiver's disposition: its outcome goes to the node (inside a
        transaction: at the commit), and is echoed."""
        d = e.delivery
        c = self.links.get(id(e.link))
        if c is None:
            return
        state = e.state
        if not isinstance(state, _TERMINAL):
            if state is None and e.settled:
                state = d.remote_state
            if isinstance(state, TransactionalState):
                self._retire(c, d, state)
                return
            if not e.settled:
                return
        c.settled(d, state)
        if not d.settled:
            # the outcome is echoed: a receiver that waits for it (mode second, or
            # Azure's pyamqp confirming a settlement) reads it from our disposition
            # (a rejection's error is the receiver's own: not sent back)
            try:  # (inline, not settle_quietly: once per message)
                d.settle(_REJECTED if isinstance(state, Rejected) else state if isinstance(state, _TERMINAL) else None)
            except IllegalStateError:
                pass  # the link went meanwhile

    def _retire(self, c: LinkConsumer, d: Delivery, state: TransactionalState) -> None:
        """A consumer's outcome inside a transaction (§4.4.2): applied at its commit."""
        txn = self.txns.find(state, c.link)
        if txn is None:
            return
        self.txns.retire(txn, c, d, state.outcome)
        if not d.settled:
            settle_quietly(d)

    def on_aborted(self, link: Link, d: Delivery) -> None:
        c = self.links.get(id(link))
        if c is not None:
            # resumption could not carry the delivery over (§2.6.13): the message goes back
            c.settled(d, None)

    # -- consumer timeouts (core/consumer_timeout.py) -----------------------------------------
    def time_out(self, now: float) -> None:
        """Once a second: a consumer that held a delivery unsettled past its queue's consumer
        timeout loses its link (detached with amqp:precondition-failed); what it held goes back."""
        for c in list(self.links.values()):
            timeout = c.node.policy.consumer_timeout
            if timeout is None or not c.in_flight:
                continue
            if c.unsettled_clock is None:
                c.unsettled_clock = UnsettledClock()
            if c.unsettled_clock.overdue(c.in_flight, partial(_constant, timeout), now) is not None:
                ms = round(timeout * 1000)
                text = f"delivery on link {c.link.name!r} not settled within the consumer timeout of {ms} ms"
                log.info("detaching a consumer: %s", text)
                self.ctx.fail_link(c.link, ErrorCondition.PRECONDITION_FAILED, text)
                self.ctx.wake()

    # -- the end of a link --------------------------------------------------------------------
    def link_gone(self, link: Link, *, closed: bool, suspend: bool) -> None:
        c = self.links.get(id(link))
        if c is not None:
            self.drop(c, closed=closed, suspend=suspend)

    def session_ended(self, session: Session) -> None:
        for c in [c for c in self.links.values() if c.link.session is session]:
            self.drop(c, closed=False)

    def stop_deliveries(self) -> None:
        """No node may give these consumers more messages."""
        for c in list(self.links.values()):
            c.node.remove_consumer(c)

    def drop_all(self, *, suspend: bool) -> None:
        for c in list(self.links.values()):
            self.drop(c, closed=False, suspend=suspend)

    def _suspend(self, c: LinkConsumer) -> bool:
        """Keep a lost consumer's unsettled messages acquired for its resumption; False: not kept."""
        recovery = self.ctx.broker.recovery
        q = c.node
        if not recovery.enabled or not c.in_flight or c.browse or not _resumable(q):
            return False
        _, topic, source, sub = _attached(c)
        if isinstance(topic, Topic) and not (sub is not None and sub.durable):
            return False  # a non-durable subscription ends with its link
        lifetime = recovery.retention(source)
        if lifetime <= 0:
            return False  # the source expires with its link: nothing to resume
        recovery.suspend(
            SuspendedLink(
                (self.ctx.remote_container_id, c.link.name, Role.SENDER),
                address=source.address if source is not None else None,
                deliveries=list(c.link.unsettled.values()),
                node=q,
                consumer=c,
                on_drop=c.release_all,
            ),
            lifetime,
        )
        return True

    def drop(self, c: LinkConsumer, *, closed: bool, suspend: bool = False) -> None:
        """Forget a consumer however its link ended: what it held goes back (or waits
        for its resumption), and a subscription or dynamic node made for it goes."""
        self.links.pop(id(c.link), None)
        self.starting.discard(id(c.link))
        c.node.remove_consumer(c)
        if not (suspend and self._suspend(c)):
            c.release_all()
        _, topic, source, sub = _attached(c)
        vhost = self.ctx.vhost
        if isinstance(topic, WildcardSubscription):
            if closed or not topic.durable:  # a durable one stays until a detach that closes it
                wildcards_of(vhost).unsubscribe(topic)
        elif c.node.kind == "remote" and c.subscription is not None:  # kept by another worker: it ends it there
            if closed and c.subscription[2]:  # (a topic's or a topic pattern's)
                c.node.ask_unsubscribe(str(c.subscription[0]), str(c.subscription[1]))  # type: ignore[union-attr]
        elif isinstance(topic, Topic):
            durable = sub is not None and sub.durable
            # a shared subscription stays while any of its consumers does (JMS unsubscribes
            # one that has none); a durable one until a detach that closes the link
            in_use = sub is not None and sub.shared and isinstance(c.node, Queue) and bool(c.node.consumers)
            if (not durable or closed) and not in_use and isinstance(c.node, Queue):
                vhost.drop_subscription(topic, c.node)
        elif isinstance(c.node, Queue) and c.node.dynamic and made_by_link(source):
            self.ctx.delete_dynamic(c.node)
        elif isinstance(c.node, Queue) and c.node.dynamic:
            self.requests.reply_link_gone(c.node)


def _attached(c: LinkConsumer) -> tuple[Any, Any, Any, Any]:
    """What the attach left on ``c``'s link: (consumer, topic, source, subscription)."""
    ctx = c.link.context
    return ctx if isinstance(ctx, tuple) else (None, None, None, None)


def _resumable(node: Node) -> bool:
    """Whether a consumer of ``node`` can be kept for its link's resumption: one of a queue
    (not a dynamic node), this worker's or another's (whose stand-in keeps what the lost
    consumer held acquired on the owner, for the resumed link to settle)."""
    return isinstance(node, NodeElsewhere) or (isinstance(node, Queue) and not node.dynamic)


def _constant(value: float, _entry: object) -> float:
    return value


def _redelivery_form(msg: QueuedMessage) -> bytes:
    """The 1.0 bytes of a message from another protocol, or sent again (delivery-count set)."""
    if isinstance(msg, Amqp1Message):
        return msg.redelivery_form()
    data: bytes = msg.form(Amqp1Message.format)
    return data
