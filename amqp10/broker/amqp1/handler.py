"""The AMQP 1.0 front end: one engine connection's events turned into core operations.

Nothing here does I/O. :class:`ConnectionHandler` turns one engine
connection's events into node operations (attach → consumer or publisher,
transfer → publish, disposition → ack/release/reject) on the protocol-neutral
core (:mod:`amqp10.broker.core`); it owns what is 1.0's alone: termini, link
credit, dispositions, link recovery's engine side, the transaction
coordinator. The network side (``service.py``) feeds it events and writes
what the engine produces; ``wake`` tells it a connection has output that was
produced from outside its own event handling (a delivery dispatched from
another connection's publish).
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable
from typing import Any

from ...transport import (
    Connection,
    ConnectionClosed,
    ConnectionFailed,
    ConnectionOpened,
    ConnectionState,
    CreditAdded,
    Delivery,
    DeliveryAborted,
    DeliveryReceived,
    DeliveryUpdated,
    DrainRequested,
    Event,
    IllegalStateError,
    Link,
    LinkAttached,
    LinkDetached,
    LinkFailed,
    LinkState,
    Receiver,
    Sender,
    Session,
    SessionBegun,
    SessionEnded,
    SessionFailed,
    SessionState,
)
from ...types import (
    Accepted,
    DecodeError,
    Error,
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
from ...types.transactions import Coordinator, TransactionalState
from ..core import (
    Broker,
    Exchange,
    Node,
    Queue,
    QueuedMessage,
    ResourceKind,
    Stream,
    SuspendedLink,
    Topic,
    VirtualHost,
)
from ..core import store as _store
from .addresses import AddressError, AnonymousTarget, ExchangeTarget, parse, resolve_target
from .filters import FilterError, consumer_filters
from .management import MANAGEMENT_ADDRESS, Management
from .message import Amqp1Message, parse_transfer
from .topics import (
    Subscription,
    WildcardSubscription,
    capabilities_of,
    is_pattern,
    node_name_and_kind,
    subscription_for,
    wildcards_of,
)
from .transactions import Transactions

STREAM_OFFSET_FILTER = symbol("amqp10:stream-offset")
STREAM_CAPABILITY = "stream"
ANONYMOUS_RELAY = symbol("ANONYMOUS-RELAY")
SHARED_SUBS = symbol("SHARED-SUBS")
DELAYED_DELIVERY = symbol("DELAYED_DELIVERY")
# what our open offers: the anonymous relay (OASIS "Using the AMQP Anonymous Terminus
# for Message Routing") and shared subscriptions (the AMQP JMS mapping)
OFFERED_CAPABILITIES = [ANONYMOUS_RELAY, SHARED_SUBS, DELAYED_DELIVERY]

__all__ = ["ConnectionHandler", "LinkConsumer"]

log = logging.getLogger("amqp10.broker")

_ids = itertools.count(1)
# one accepted outcome for every message the broker accepts: the engine batches
# consecutive dispositions with the same state, and identity is the cheapest test
_ACCEPTED = Accepted()
_RELEASED = Released()
_OUTCOMES = [
    symbol("amqp:accepted:list"),
    symbol("amqp:rejected:list"),
    symbol("amqp:released:list"),
    symbol("amqp:modified:list"),
]
# publishers' targets that route (a message that reaches no queue is released, not rejected)
_ROUTERS = (Exchange, ExchangeTarget)
_CONDITIONS = {
    "not-found": ErrorCondition.NOT_FOUND,
    "invalid-field": ErrorCondition.INVALID_FIELD,
    "unauthorized-access": ErrorCondition.UNAUTHORIZED_ACCESS,
}


class LinkConsumer:
    """A broker sender link consuming from a queue (or browsing it)."""

    def __init__(self, handler: ConnectionHandler, link: Sender, node: Queue | Stream, *, browse: bool) -> None:
        self.id = next(_ids)
        self.handler = handler
        self.link = link
        self.node = node
        self.browse = browse
        self.presettled = link.snd_settle_mode == SenderSettleMode.SETTLED or browse
        self.in_flight: dict[bytes, QueuedMessage] = {}
        self.selector: Callable[[QueuedMessage], bool] | None = None
        """The consumer's view of a queue or stream (its source's filters); None: every message."""
        self.filters: dict[Any, Any] = {}
        """The source filter-set entries applied, for the attach answer (unsupported ones left out)."""

    def credit(self) -> int:
        link = self.link
        return link.credit - link.queued if link.is_attached else 0

    def deliver(self, node: Node, msg: QueuedMessage) -> None:
        if msg.delivery_count or type(msg) is not Amqp1Message:
            data = _redelivery_form(msg)
        else:
            data = msg.data  # as it arrived: nothing to convert or rewrite
        d = self.link.send(data, settled=self.presettled)
        if self.presettled:
            if not self.browse:
                self.node.ack(msg)
        else:
            d.context = msg
            self.in_flight[d.tag] = msg
        self.handler.wake()

    def has_more(self) -> bool:
        """Whether the node holds messages this consumer could still be given."""
        node = self.node
        if isinstance(node, Stream):
            return node.positions.get(self.id, node.next) < node.next
        if self.browse:
            last = node.browsers.get(self.id, 0)
            return any(m.seq > last for m in node)
        return node.count > 0

    def settled(self, d: Delivery, state: Any) -> None:
        """The consumer settled ``d`` with ``state``: apply the outcome to the queue."""
        msg = self.in_flight.pop(d.tag, None)
        if msg is not None:
            self.apply(msg, state)

    def apply(self, msg: QueuedMessage, state: Any) -> None:
        """Apply an outcome to a message this consumer took (now, or at a transaction's commit)."""
        q = self.node
        if isinstance(state, Accepted):
            q.ack(msg)
        elif isinstance(state, Rejected):
            q.reject(msg)
        elif isinstance(state, Modified):
            q.release(
                msg,
                delivery_failed=bool(state.delivery_failed),
                undeliverable_to=self.id if state.undeliverable_here else None,
            )
        else:  # released, or settled with no outcome: back to the queue
            q.release(msg)

    def cancelled(self) -> None:
        """The queue was deleted: the link is closed with amqp:resource-deleted."""
        self.handler.fail_link(self.link, ErrorCondition.RESOURCE_DELETED, f"node {self.node.name!r} was deleted")
        self.handler.wake()

    def release_all(self) -> None:
        """The link is gone: everything unsettled goes back (counted as a failed delivery)."""
        pending, self.in_flight = self.in_flight, {}
        for msg in pending.values():
            self.node.release(msg, delivery_failed=True)


class ConnectionHandler:
    """Drives one engine connection on behalf of the broker."""

    def __init__(self, broker: Broker, conn: Connection, *, wake: Callable[[], None] = lambda: None, user: str | None = None) -> None:
        self.broker = broker
        self.conn = conn
        self.wake = wake
        self.user = user
        self.consumers: dict[int, LinkConsumer] = {}  # by id(link)
        self.publishers: dict[int, tuple[Receiver, Node]] = {}
        self.blocked: set[int] = set()
        self._touched: set[int] = set()
        self._handling = False  # inside handle(): the caller writes our output afterwards
        self.closed = False
        self.txns: Transactions | None = None  # made by the first coordinator link (Part 4)
        self._management: Management | None = None
        self.vhost: VirtualHost = broker.default  # until the open frame names another
        self.origin = object()  # marks what this connection publishes (for no-local filters)
        self.refusal: str | None = None  # set by the service: refuse the open (a [security] limit)
        broker.connections.add(self)
        self._handlers: dict[type, Callable[[Any], None]] = {
            ConnectionOpened: self._on_open,
            ConnectionClosed: self._on_closed,
            ConnectionFailed: self._on_closed,
            SessionBegun: self._on_session_begun,
            SessionEnded: self._on_session_ended,
            SessionFailed: self._on_session_ended,
            LinkAttached: self._on_link_attached,
            LinkDetached: self._on_link_detached,
            LinkFailed: self._on_link_detached,
            DeliveryReceived: self._on_delivery,
            DeliveryAborted: self._on_aborted,
            DeliveryUpdated: self._on_update,
            CreditAdded: self._on_credit,
            DrainRequested: self._on_drain,
        }

    def resource_counts(self) -> tuple[int, int]:
        """Sessions and links this connection holds (see ``Broker.counts``)."""
        links = len(self.consumers) + len(self.publishers)
        if self.txns is not None:
            links += len(self.txns.coordinators)
        return len(self.conn.sessions), links

    @property
    def remote_container_id(self) -> str:
        ro = self.conn.remote_open
        return ro.container_id if ro is not None else ""

    def handle(self, events: list[Event]) -> None:
        handlers = self._handlers
        self._handling = True
        try:
            for e in events:
                h = handlers.get(type(e))
                if h is not None:
                    h(e)
        finally:
            self._handling = False
        if self._touched:
            # credit is topped up once per batch of events: the engine has already
            # counted every transfer in the batch against the link's credit
            touched, self._touched = self._touched, set()
            for key in touched:
                entry = self.publishers.get(key)
                if entry is not None:
                    self._grant(*entry)

    # -- connection and sessions ---------------------------------------------------------
    def _on_open(self, e: ConnectionOpened) -> None:
        if self.conn.state is not ConnectionState.OPEN_RCVD:
            return
        ro = self.conn.remote_open
        hostname = ro.hostname if ro is not None else None
        vhost = self.broker.vhost_for_hostname(hostname)
        offered = list(self.conn.offered_capabilities or [])
        self.conn.offered_capabilities = offered + [c for c in OFFERED_CAPABILITIES if c not in offered]
        self.conn.open()
        if self.refusal is not None:
            self.conn.close(Error(condition=ErrorCondition.RESOURCE_LIMIT_EXCEEDED, description=self.refusal))
            return
        if vhost is None:
            log.info("refusing a connection to %r: no such virtual host", hostname)
            self.conn.close(Error(condition=ErrorCondition.NOT_FOUND, description=f"no virtual host {hostname!r}"))
            return
        refused = self.broker.vhost_denial(vhost, self.user)
        if refused is not None:
            self.conn.close(Error(condition=ErrorCondition.UNAUTHORIZED_ACCESS, description=refused))
            return
        self.vhost = vhost

    def _on_closed(self, e: Any) -> None:
        self.cleanup()

    def cleanup(self) -> None:
        if self.closed:
            return
        self.closed = True
        # a connection that ends detaches its links, it does not close them (§2.6.5):
        # durable subscriptions stay for the next attach with the same name. One that
        # is lost (no close from the peer: a dropped socket, an error, a time-out)
        # suspends its links for recovery (§2.6.13); a clean close gives back what
        # they held.
        suspend = self.conn.remote_close is None
        for c in list(self.consumers.values()):
            self._drop_consumer(c, closed=False, suspend=suspend)
        for key in list(self.publishers):
            self._drop_publisher(key, suspend=suspend)
        if self.txns is not None:
            self.txns.close()  # §4.2: transactions end with their connection, rolled back
        self.vhost.owner_gone(self)  # exclusive queues end with their connection
        self.broker.connections.discard(self)

    def _on_session_begun(self, e: SessionBegun) -> None:
        s = e.session
        if s.state.name != "BEGIN_RCVD" or self.conn.state.name != "OPENED":
            return  # the connection ended later in the same batch of frames: nothing to answer
        if len(self.conn.sessions) > self.broker.config.limits.max_sessions_per_connection:
            s.end(Error(condition=ErrorCondition.RESOURCE_LIMIT_EXCEEDED, description="too many sessions"))
            return
        s.begin()

    def _on_session_ended(self, e: Any) -> None:
        session: Session = e.session
        for c in [c for c in self.consumers.values() if c.link.session is session]:
            self._drop_consumer(c, closed=False)
        if self.txns is not None:
            for link in [c for c in self.txns.coordinators.values() if c.session is session]:
                self.txns.link_gone(link)
        for key in [k for k, (link, _) in self.publishers.items() if link.session is session]:
            self._drop_publisher(key, suspend=False)

    # -- links ---------------------------------------------------------------------------
    def _refuse(self, link: Link, condition: ErrorCondition, description: str) -> None:
        link.detach(Error(condition=condition, description=description), closed=True)

    def fail_link(self, link: Link, condition: ErrorCondition, description: str) -> None:
        """Close an attached link for its peer's error, and forget it at once."""
        c = self.consumers.get(id(link))
        if c is not None:
            self._drop_consumer(c, closed=True)
        self._drop_publisher(id(link), suspend=False)
        try:
            self._refuse(link, condition, description)
        except IllegalStateError:
            pass

    def _on_link_attached(self, e: LinkAttached) -> None:
        link = e.link
        if link.state.name != "ATTACH_RCVD" or link.session.state.name != "MAPPED" or self.conn.state.name != "OPENED":
            return  # its session or connection ended later in the same batch of frames
        if len(link.session.links) >= self.broker.config.limits.max_links_per_session:
            self._refuse(link, ErrorCondition.RESOURCE_LIMIT_EXCEEDED, "too many links on this session")
            return
        if isinstance(link, Receiver):
            self._attach_publisher(link)
        else:
            assert isinstance(link, Sender)
            self._attach_consumer(link)

    def _lookup(self, address: str | None, *, kind: str | None, create: bool = True) -> Node | None:
        """The node a plain name names (``$management`` is this front end's own)."""
        if address == MANAGEMENT_ADDRESS:
            if self._management is None:
                vhost = self.vhost
                self._management = Management(
                    vhost,
                    lambda resource: self.broker.authorize(vhost, self.user, resource, "configure"),
                    has_tag=lambda tag: self.broker.has_tag(self.user, tag),
                )
            return self._management
        node = self.vhost.lookup(address, create=False)
        if node is None and create and address and self.broker.config.auto_create:
            # creating a node is declaring it: RabbitMQ's configure permission
            what: ResourceKind = "exchange" if kind == "topic" else "queue"
            refused = self.broker.denial(self.vhost, self.user, address, what, "configure")
            if refused is not None:
                raise AddressError("unauthorized-access", refused)
            node = self.vhost.lookup(address, create=True, kind=kind)
        return node

    def _target_node(self, target: Target) -> Node:
        """The node a publisher's target names: a v2 address, a plain name, or (null) each
        message's ``to``; raises :class:`AddressError`."""
        if target.dynamic:
            return self.vhost.create_dynamic()
        if target.address is None:
            return AnonymousTarget(self.vhost, lambda to: self._resolve(*node_name_and_kind(to, None), create=False))
        return self._resolve(*node_name_and_kind(target.address, target.capabilities))

    def _resolve(self, address: str, kind: str | None, *, create: bool = True) -> Node:
        node = resolve_target(self.vhost, address, lambda a: self._lookup(a, kind=kind, create=create))
        refused = self.broker.denial(self.vhost, self.user, *_resource(node), "write")
        if refused is not None:
            raise AddressError("unauthorized-access", refused)
        return node

    def _source_node(self, source: Source) -> Node:
        """The node a consumer's source names (a v2 ``/queues/Q`` address or a plain name)."""
        if source.dynamic:
            node: Node | None = self.vhost.create_dynamic()
        else:
            address = source.address
            parsed = parse(address) if address else None
            if parsed is not None:
                if parsed[0] != "queue":
                    raise AddressError("invalid-field", f"consume from a queue (/queues/NAME), not {address!r}")
                node = self.vhost.queue(parsed[1])
            else:
                name, kind = node_name_and_kind(address, source.capabilities)
                node = self._lookup(name, kind=kind)
            if node is None or isinstance(node, Management):
                raise AddressError("not-found", f"no node at address {address!r}")
        assert node is not None
        refused = self.broker.denial(self.vhost, self.user, *_resource(node), "read")
        if refused is not None:
            raise AddressError("unauthorized-access", refused)
        return node

    def _attach_publisher(self, link: Receiver) -> None:
        target = link.remote_target
        if isinstance(target, Coordinator):
            self._transactions().attach(link)
            return
        if target is None:
            target = Target()  # no target at all: the anonymous relay, as one with no address
        elif not isinstance(target, Target):
            self._refuse(link, ErrorCondition.INVALID_FIELD, "a publisher's attach needs a target")
            return
        try:
            node = self._target_node(target)
        except AddressError as exc:
            self._refuse(link, _CONDITIONS[exc.condition], exc.description)
            return
        link.max_message_size = self.broker.config.limits.max_message_size
        record = self._take_suspended(link, target.address, None if node.dynamic else node)
        if record is not None and any(_awaits_store(d) for d in record.deliveries):
            # A message that came before the loss is still being committed: its
            # outcome goes into our unsettled map (else the sender would send it
            # again), so the attach is answered once every earlier commit is done.
            def answer() -> None:
                if self._can_answer(link):
                    self._answer_publisher(link, target, node, record)
                    if not self._handling:
                        self.wake()
                else:
                    record.drop()

            self.broker.journal.submit((_store.BARRIER,), answer)
            return
        self._answer_publisher(link, target, node, record)

    def _answer_publisher(self, link: Receiver, target: Target, node: Node, record: SuspendedLink | None) -> None:
        link.attach(
            source=_echo(link.remote_source, Source),
            target=Target(
                address=node.name if target.dynamic else target.address,
                durable=target.durable or 0,
                expiry_policy=target.expiry_policy or symbol("session-end"),
                timeout=target.timeout or 0,
                dynamic=target.dynamic,
                capabilities=_capabilities(node, None, None) or target.capabilities,
            ),
            resume_deliveries=record.deliveries if record is not None else None,
        )
        if record is not None:
            self.broker.recovery.resumed += 1
        self.publishers[id(link)] = (link, node)
        link.context = node
        self._grant(link, node)

    def _grant(self, link: Receiver, node: Node) -> None:
        """Top up a publisher's credit, bounded by the node's room and the memory limit."""
        if not link.is_attached:
            return
        window = self.broker.config.limits.credit_window
        room = node.room()
        target = window if room is None else min(window, room)
        if not self.broker.memory_ok():
            target = 0
        if target <= 0:
            if link.credit > 0:
                link.flow(0)  # take back what was granted: the node is full
            self._watch_space(link, node)
            return
        if room is not None:
            self._watch_space(link, node)
        if link.credit > target or link.credit <= target // 2:
            link.flow(target)

    def _watch_space(self, link: Receiver, node: Node) -> None:
        self.blocked.add(id(link))
        queues = list(node.subscriptions.values()) if isinstance(node, Topic) else [node]
        for q in queues:
            if isinstance(q, Queue):
                q.space_listeners.add(self._unblock_all)

    def _unblock_all(self) -> None:
        for key in list(self.blocked):
            entry = self.publishers.get(key)
            if entry is None:
                self.blocked.discard(key)
                continue
            self._grant(*entry)
        self.wake()

    def _attach_consumer(self, link: Sender) -> None:
        source = link.remote_source
        if source is None:
            self._attach_existing_subscription(link)
            return
        if not isinstance(source, Source):
            self._refuse(link, ErrorCondition.INVALID_FIELD, "a consumer's attach needs a source")
            return
        if not source.dynamic and source.address:
            name, kind = node_name_and_kind(source.address, source.capabilities)
            if kind == "topic" and is_pattern(name):
                self._attach_wildcard(link, source, name)
                return
        try:
            node = self._source_node(source)
        except AddressError as exc:
            self._refuse(link, _CONDITIONS[exc.condition], exc.description)
            return
        try:
            wanted = consumer_filters(source.filter)
        except FilterError as exc:
            self._refuse(link, ErrorCondition.INVALID_FIELD, str(exc))
            return
        view = wanted.predicate(self.origin)
        browse = source.distribution_mode == "copy"
        filters = None
        start: int | None = None
        sub: Subscription | None = None
        if isinstance(node, Stream):
            spec = (source.filter or {}).get(STREAM_OFFSET_FILTER)
            try:
                start = node.start_offset(spec)
            except ValueError as exc:
                self._refuse(link, ErrorCondition.INVALID_FIELD, str(exc))
                return
            if spec is not None:
                filters = {STREAM_OFFSET_FILTER: spec}
            queue: Queue | Stream = node
            browse = False
        elif isinstance(node, Topic):
            durable = bool(source.durable) and source.expiry_policy == "never"
            sub = subscription_for(
                self.remote_container_id, link.name, source.capabilities, durable=durable, unique=uuid.uuid4().hex
            )
            queue = node.subscribe(sub.key, durable=sub.durable)
            queue.admit, view = view, None  # on a topic, the filters decide what the subscription keeps
            browse = False
        else:
            assert isinstance(node, Queue)
            queue = node
        resumable = isinstance(queue, Queue) and not browse and not queue.dynamic
        record = self._take_suspended(link, source.address, queue if resumable else None)
        if wanted.applied:
            filters = {**(filters or {}), **wanted.applied}
        link.attach(
            resume_deliveries=record.deliveries if record is not None else None,
            target=_echo(link.remote_target, Target),
            source=self._source_answer(
                source,
                address=node.name if source.dynamic else source.address,
                browse=browse,
                filters=filters,
                capabilities=_capabilities(node, source.capabilities, sub),
            ),
        )
        consumer = LinkConsumer(self, link, queue, browse=browse)
        consumer.selector = view
        consumer.filters = filters or {}
        if record is not None:
            # the resumed deliveries refer to these messages, by delivery-tag
            consumer.in_flight = record.consumer.in_flight
            self.broker.recovery.resumed += 1
        self._add_consumer(link, consumer, node if isinstance(node, Topic) else None, source, sub, start)

    def _add_consumer(
        self,
        link: Sender,
        consumer: LinkConsumer,
        topic: Topic | WildcardSubscription | None,
        source: Source,
        sub: Subscription | None,
        start: int | None = None,
    ) -> None:
        link.context = (consumer, topic, source, sub)
        self.consumers[id(link)] = consumer
        queue = consumer.node
        if isinstance(queue, Stream):
            queue.add_consumer(consumer, start)
        else:
            queue.add_consumer(consumer)

    @staticmethod
    def _source_answer(
        source: Source, *, address: str | None, browse: bool, filters: Any, capabilities: list[Any]
    ) -> Source:
        """Our source for a consumer: the node as we serve it, every field filled in."""
        return Source(
            address=address,
            durable=source.durable or 0,
            expiry_policy=source.expiry_policy or symbol("session-end"),
            timeout=source.timeout or 0,
            dynamic=source.dynamic,
            distribution_mode=symbol("copy") if browse else symbol("move"),
            filter=filters,
            default_outcome=Released() if source.default_outcome is None else source.default_outcome,
            outcomes=_OUTCOMES,
            capabilities=capabilities,
        )

    def _attach_wildcard(self, link: Sender, source: Source, pattern: str) -> None:
        """A consumer on a topic pattern: a queue of its own, bound to every matching topic."""
        if bool(source.durable) and source.expiry_policy == "never":
            self._refuse(link, ErrorCondition.NOT_IMPLEMENTED, "durable wildcard subscriptions are not supported")
            return
        if not self.broker.authorize(self.vhost, self.user, pattern, "read"):
            self._refuse(link, ErrorCondition.UNAUTHORIZED_ACCESS, f"access to {source.address!r} refused")
            return
        sub = wildcards_of(self.vhost).subscribe(pattern)
        link.attach(
            target=_echo(link.remote_target, Target),
            source=self._source_answer(
                source, address=source.address, browse=False, filters=None, capabilities=[symbol("topic")]
            ),
        )
        self._add_consumer(link, LinkConsumer(self, link, sub.queue, browse=False), sub, source, None)

    def _attach_existing_subscription(self, link: Sender) -> None:
        """A null source: the JMS mapping's look-up of a durable subscription by its link
        name (how a JMS client unsubscribes: attach, then detach with closed=true).
        Answered with the subscription's source, or refused (null source) if none."""
        caps = link.remote_attach.desired_capabilities if link.remote_attach is not None else None
        for scope in (self.remote_container_id, ""):
            sub = subscription_for(scope, link.name, caps, durable=True, unique="")
            for topic in [n for n in self.vhost.nodes.values() if isinstance(n, Topic)]:
                queue = topic.subscriptions.get(sub.key)
                if queue is None:
                    continue
                source = Source(
                    address=topic.name, durable=2, expiry_policy=symbol("never"), capabilities=[symbol("topic")]
                )
                link.attach(
                    target=_echo(link.remote_target, Target),
                    source=self._source_answer(
                        source, address=topic.name, browse=False, filters=None, capabilities=[symbol("topic")]
                    ),
                )
                self._add_consumer(link, LinkConsumer(self, link, queue, browse=False), topic, source, sub)
                return
        self._refuse(link, ErrorCondition.NOT_FOUND, f"no durable subscription {link.name!r}")

    # -- link recovery (§2.6.13; see recovery.py) ------------------------------------------
    def _suspend_consumer(self, c: LinkConsumer) -> bool:
        """Keep a lost consumer's unsettled messages acquired for its resumption; False: not kept."""
        recovery = self.broker.recovery
        q = c.node
        if not recovery.enabled or not c.in_flight or c.browse or not isinstance(q, Queue) or q.dynamic:
            return False
        ctx = c.link.context
        topic = ctx[1] if isinstance(ctx, tuple) else None
        source = ctx[2] if isinstance(ctx, tuple) else None
        sub = ctx[3] if isinstance(ctx, tuple) else None
        if isinstance(topic, Topic) and not (sub is not None and sub.durable):
            return False  # a non-durable subscription ends with its link
        lifetime = recovery.retention(source)
        if lifetime <= 0:
            return False  # the source expires with its link: nothing to resume
        recovery.suspend(
            SuspendedLink(
                (self.remote_container_id, c.link.name, Role.SENDER),
                address=source.address if source is not None else None,
                deliveries=list(c.link.unsettled.values()),
                node=q,
                consumer=c,
                on_drop=c.release_all,
            ),
            lifetime,
        )
        return True

    def _suspend_publisher(self, link: Receiver, node: Node) -> None:
        """Keep what a lost producer had not settled, with our state, for its resumption."""
        recovery = self.broker.recovery
        if not recovery.enabled or node.dynamic or not link.unsettled:
            return
        target = link.remote_target
        lifetime = recovery.retention(target)
        if lifetime <= 0:
            return
        deliveries = [d for d in link.unsettled.values() if not d.settled]
        if deliveries:
            recovery.suspend(
                SuspendedLink(
                    (self.remote_container_id, link.name, Role.RECEIVER),
                    address=getattr(target, "address", None),
                    deliveries=deliveries,
                    node=node,
                ),
                lifetime,
            )

    def _take_suspended(self, link: Link, address: str | None, node: Node | None) -> SuspendedLink | None:
        """The suspended record ``link``'s attach resumes, if it does (else the record is dropped).

        It does if it carries an unsettled map, for the same address and node
        (``node`` None: this attach cannot resume a link).
        """
        recovery = self.broker.recovery
        if not recovery.records:
            return None
        record = recovery.take((self.remote_container_id, link.name, link.role))
        if record is None:
            return None
        remote = link.remote_attach
        if remote is None or remote.unsettled is None or record.address != address or node is None or record.node != node:
            record.drop()  # not a resume of that link: what it held goes back, as at its loss
            return None
        log.info("resuming %r", record)
        return record

    def _can_answer(self, link: Link) -> bool:
        """``link`` still waits for our attach (its session and connection are open)."""
        return (
            not self.closed
            and link.state is LinkState.ATTACH_RCVD
            and link.session.state is SessionState.MAPPED
            and self.conn.state is ConnectionState.OPENED
        )

    def _on_link_detached(self, e: Any) -> None:
        link = e.link
        # LinkFailed (our detach, for the peer's violation) has no ``closed``: it ends the link
        closed = getattr(e, "closed", True)
        if self.txns is not None:
            self.txns.link_gone(link)
        c = self.consumers.get(id(link))
        if c is not None:
            self._drop_consumer(c, closed=closed, suspend=not closed)
        # §2.6.13: detached, not closed: its state stays
        self._drop_publisher(id(link), suspend=not closed)

    def _drop_publisher(self, key: int, *, suspend: bool) -> None:
        """Forget a publisher however its link ended (detach, session end, connection loss,
        broker shutdown): a node made for its dynamic target goes with it, unless the
        target asked to outlive the link."""
        self.blocked.discard(key)
        entry = self.publishers.pop(key, None)
        if entry is None:
            return
        link, node = entry
        if suspend:
            self._suspend_publisher(link, node)
        queues = list(node.subscriptions.values()) if isinstance(node, Topic) else [node]
        for q in queues:
            if isinstance(q, Queue):
                q.space_listeners.discard(self._unblock_all)
        if node.dynamic and _made_by_link(link.remote_target):
            self._delete_dynamic(node)

    def _delete_dynamic(self, node: Node) -> None:
        if self.vhost.nodes.get(node.name) is node:
            self.vhost.delete_node(node.name)

    def _drop_consumer(self, c: LinkConsumer, *, closed: bool, suspend: bool = False) -> None:
        self.consumers.pop(id(c.link), None)
        c.node.remove_consumer(c)
        if not (suspend and self._suspend_consumer(c)):
            c.release_all()
        ctx = c.link.context
        topic = ctx[1] if isinstance(ctx, tuple) else None
        source = ctx[2] if isinstance(ctx, tuple) else None
        sub = ctx[3] if isinstance(ctx, tuple) else None
        if isinstance(topic, WildcardSubscription):
            wildcards_of(self.vhost).unsubscribe(topic)
        elif isinstance(topic, Topic):
            durable = sub is not None and sub.durable
            # a shared subscription stays while any of its consumers does (JMS unsubscribes
            # one that has none); a durable one until a detach that closes the link
            in_use = sub is not None and sub.shared and isinstance(c.node, Queue) and bool(c.node.consumers)
            if (not durable or closed) and not in_use and isinstance(c.node, Queue):
                self.vhost.drop_subscription(topic, c.node)
        elif isinstance(c.node, Queue) and c.node.dynamic and _made_by_link(source):
            self._delete_dynamic(c.node)

    # -- deliveries ------------------------------------------------------------------------
    def _on_delivery(self, e: DeliveryReceived) -> None:
        link = e.link
        d = e.delivery
        entry = self.publishers.get(id(link))
        if entry is None:
            if self.txns is not None and self.txns.is_coordinator(link):
                self.txns.control(link, d)
                return
            if not d.remote_settled:
                d.settle(Rejected(error=Error(condition=ErrorCondition.NOT_FOUND, description="link has no node")))
            return
        node = entry[1]
        if node.deleted:
            self.fail_link(link, ErrorCondition.RESOURCE_DELETED, f"node {node.name!r} was deleted")
            return
        try:
            msg = parse_transfer(d.payload, self.broker.now(), node.needs_message_ids)
        except DecodeError as exc:
            if not d.remote_settled:
                d.settle(Rejected(error=Error(condition=ErrorCondition.DECODE_ERROR, description=str(exc))))
            self._touched.add(id(link))
            return
        msg.mark_origin(self.origin)
        if type(node) is AnonymousTarget:
            try:
                node = node.node_for(msg)
            except AddressError as exc:
                self._touched.add(id(link))
                self._unroutable(link, d, exc)
                return
        if d.remote_state is not None and isinstance(d.remote_state, TransactionalState):
            self._post(link, d, node, msg)
            return
        presettled = d.remote_settled

        def stored() -> None:
            if not presettled and not d.settled and not d._settle_pending:
                try:
                    d.settle(_ACCEPTED)
                except IllegalStateError:
                    pass
                if not self._handling:  # a commit callback: nobody else will flush
                    self.wake()

        if not node.publish(msg, stored):
            if presettled:
                pass
            elif isinstance(node, _ROUTERS) and not isinstance(node, Topic):
                d.settle(_RELEASED)  # no queue took it (RabbitMQ 4 answers the same)
            else:
                d.settle(Rejected(error=Error(condition=ErrorCondition.RESOURCE_LIMIT_EXCEEDED, description=f"node {node.name!r} is full")))
        self._touched.add(id(link))

    def _unroutable(self, link: Receiver, d: Delivery, exc: AddressError) -> None:
        """A message to the anonymous relay whose ``to`` names no node (or one it may not use):
        rejected, and the link stays up (the anonymous terminus spec, §2.2)."""
        if d.remote_settled or d.settled:
            return  # pre-settled: nothing to tell the sender
        rejected = Rejected(error=Error(condition=_CONDITIONS[exc.condition], description=exc.description))
        state = d.remote_state
        if isinstance(state, TransactionalState):
            txn = self._transactions().find(state, link)
            if txn is not None:
                d.settle(TransactionalState(txn_id=txn.txn_id, outcome=rejected))
            return
        d.settle(rejected)

    def _transactions(self) -> Transactions:
        if self.txns is None:
            self.txns = Transactions(self)
        return self.txns

    def _post(self, link: Receiver, d: Delivery, node: Node, msg: QueuedMessage) -> None:
        """A transfer in a transaction: transactional posting (§4.4.1)."""
        state: TransactionalState = d.remote_state
        self._touched.add(id(link))
        txns = self._transactions()
        txn = txns.find(state, link)
        if txn is not None:
            txns.post(txn, d, node, msg)

    def _on_aborted(self, e: DeliveryAborted) -> None:
        if id(e.link) in self.publishers:
            self._touched.add(id(e.link))
            return
        c = self.consumers.get(id(e.link))
        if c is not None:
            # resumption could not carry the delivery over (§2.6.13): the message goes back
            c.settled(e.delivery, None)

    def _on_update(self, e: DeliveryUpdated) -> None:
        d = e.delivery
        c = self.consumers.get(id(e.link))
        if c is None:
            return
        state = e.state
        if not _is_terminal(state):
            if state is None and e.settled:
                state = d.remote_state
            if isinstance(state, TransactionalState):
                self._retire(c, d, state)
                return
            if not e.settled:
                return
        c.settled(d, state)
        if not d.settled:
            try:
                d.settle()
            except IllegalStateError:
                pass

    def _retire(self, c: LinkConsumer, d: Delivery, state: TransactionalState) -> None:
        """A consumer's outcome inside a transaction (§4.4.2): applied at its commit."""
        txns = self._transactions()
        txn = txns.find(state, c.link)
        if txn is None:
            return
        txns.retire(txn, c, d, state.outcome)
        if not d.settled:
            try:
                d.settle()
            except IllegalStateError:
                pass

    def _on_credit(self, e: CreditAdded) -> None:
        c = self.consumers.get(id(e.link))
        if c is not None:
            c.node.consumer_ready(c)

    def _on_drain(self, e: DrainRequested) -> None:
        """§2.6.7 drain: send what the node has, then give back the rest of the credit
        with a flow (drain, credit 0), also when the transfers took exactly all there
        was. If the credit ran out with messages still waiting, the drain was met by
        transfers alone: no flow, which would tell the receiver the node is empty."""
        c = self.consumers.get(id(e.link))
        if c is not None:
            c.node.consumer_ready(c)
            if c.credit() <= 0 and c.has_more():
                return
        e.link.drained()


def _resource(node: Node) -> tuple[str, ResourceKind]:
    """What a permission check names for ``node``: an exchange (also behind
    ``/exchanges/X/KEY`` and a 1.0 topic) or a queue (queues and streams)."""
    if isinstance(node, ExchangeTarget):
        return node.exchange.name, "exchange"
    if isinstance(node, Exchange):
        return node.name, "exchange"
    return node.name, "queue"


def _capabilities(node: Node, requested: Any, sub: Subscription | None) -> list[Any]:
    """A terminus's capabilities in our answer: the node's kind (``queue``, ``topic``,
    ``stream``, as the AMQP JMS mapping looks for them) and the subscription's
    ``shared``/``global``, which we honour."""
    caps = [node.kind] if node.kind in ("queue", "topic", STREAM_CAPABILITY) else []
    if sub is not None and sub.shared:
        caps += [c for c in capabilities_of(requested) if c in ("shared", "global")]
    return [symbol(c) for c in caps]


def _echo(terminus: Any, cls: type[Source] | type[Target]) -> Any:
    """The peer's terminus as sent, for our attach's other side (§2.6.3); an empty one
    if it sent none (a null terminus in an answer means a refused link)."""
    return terminus if isinstance(terminus, cls) else cls()


def _made_by_link(terminus: Any) -> bool:
    """The link made its node (a dynamic terminus) and did not ask it to outlive the link
    (expiry-policy ``never``, §3.5.6): the node ends with the link."""
    return isinstance(terminus, (Source, Target)) and bool(terminus.dynamic) and terminus.expiry_policy != "never"


def _redelivery_form(msg: QueuedMessage) -> bytes:
    """The 1.0 bytes of a message from another protocol, or sent again (delivery-count set)."""
    if isinstance(msg, Amqp1Message):
        return msg.redelivery_form()
    data: bytes = msg.form(Amqp1Message.format)
    return data


def _awaits_store(d: Delivery) -> bool:
    """A producer's complete delivery with no outcome yet: its message waits for a commit."""
    return d.state is None and bool(d.payload) and not d.remote_settled


def _is_terminal(state: Any) -> bool:
    return isinstance(state, (Accepted, Rejected, Released, Modified))
