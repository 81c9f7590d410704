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

The consumer side (:class:`.consumers.LinkConsumer` and the attach, recovery
and drop of consumer links) lives in :mod:`.consumers`; what an attach answer
says about a node's terminus, in :mod:`.termini`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ...addresses import partition_address
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
    Source,
    Target,
    symbol,
)
from ...types.transactions import Coordinator, TransactionalState
from ..config import ServiceBusConfig
from ..core import (
    Broker,
    Exchange,
    Node,
    PartitionedStream,
    Queue,
    QueuedMessage,
    ResourceKind,
    SuspendedLink,
    Topic,
    VirtualHost,
)
from ..core import store as _store
from . import consumers
from .addresses import AddressError, AnonymousTarget, ExchangeTarget, parse, resolve_target
from .consumers import LinkConsumer
from .management import MANAGEMENT_ADDRESS, ManagementNode
from .message import parse_transfer
from .servicebus import Gate, entity_path
from .servicebus.batch import BATCH_FORMAT, publish_batch
from .servicebus.consumer import ServiceBusConsumer
from .termini import _CONDITIONS, _capabilities, _echo, _made_by_link, _resource
from .topics import node_name_and_kind
from .transactions import Transactions

ANONYMOUS_RELAY = symbol("ANONYMOUS-RELAY")
SHARED_SUBS = symbol("SHARED-SUBS")
DELAYED_DELIVERY = symbol("DELAYED_DELIVERY")
SESSION_LOCK_LOST = symbol("com.microsoft:session-lock-lost")
# what our open offers: the anonymous relay (OASIS "Using the AMQP Anonymous Terminus
# for Message Routing") and shared subscriptions (the AMQP JMS mapping)
OFFERED_CAPABILITIES = [ANONYMOUS_RELAY, SHARED_SUBS, DELAYED_DELIVERY]

__all__ = ["ConnectionHandler", "LinkConsumer"]

log = logging.getLogger("amqp10.broker")

# one accepted outcome for every message the broker accepts: the engine batches
# consecutive dispositions with the same state, and identity is the cheapest test
_ACCEPTED = Accepted()
_RELEASED = Released()
_REJECTED = Rejected()
# publishers' targets that route (a message that reaches no queue is released, not rejected)
_ROUTERS = (Exchange, ExchangeTarget)


class ConnectionHandler:
    """Drives one engine connection on behalf of the broker."""

    # the consumer side (see consumers.py)
    _attach_consumer = consumers.attach_consumer
    _add_consumer = consumers.add_consumer
    _attach_wildcard = consumers.attach_wildcard
    _attach_reply_link = consumers.attach_reply_link
    _attach_existing_subscription = consumers.attach_existing_subscription
    _suspend_consumer = consumers.suspend_consumer
    _drop_consumer = consumers.drop_consumer

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
        self._management: ManagementNode | None = None
        self.gate: Gate | None = None
        """Claims-based security (``[servicebus]``): the tokens put on ``$cbs``, the links they let in."""
        self.consumer_type: type[LinkConsumer] = LinkConsumer
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

    def use_claims(self, config: ServiceBusConfig | None) -> None:
        """Claims-based security for this connection (its links need tokens), or not (None)."""
        self.gate = None if config is None else Gate(config, self.broker.now, self.broker.leases, self._session_lost)
        self.consumer_type = LinkConsumer if config is None else ServiceBusConsumer

    def _session_lost(self, link: Link) -> None:
        """A session receiver's session lock ran out: its link is detached (Service Bus's way)."""
        if not self.closed:
            self.fail_link(link, SESSION_LOCK_LOST, "the session lock ran out without renewal")
            self.wake()

    def expire_tokens(self) -> None:
        """Detach the links whose tokens expired without renewal (the service's tick)."""
        if self.gate is None or self.closed:
            return
        gone = self.gate.expired()
        for link in gone:
            self.fail_link(link, ErrorCondition.UNAUTHORIZED_ACCESS, "the token for this link expired")
        if gone:
            self.wake()

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

    def stop_deliveries(self) -> None:
        """This side is closing the connection: no node may give its consumers more
        messages (the engine sends nothing more); what they hold is settled at cleanup."""
        for c in list(self.consumers.values()):
            c.node.remove_consumer(c)

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
    def _refuse(self, link: Link, condition: ErrorCondition | symbol, description: str) -> None:
        link.detach(Error(condition=condition, description=description), closed=True)

    def fail_link(self, link: Link, condition: ErrorCondition | symbol, description: str) -> None:
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
        if self.gate is not None:
            refused = self.gate.admit(link)
            if refused is not None:
                self._refuse(link, ErrorCondition.UNAUTHORIZED_ACCESS, refused)
                return
        if isinstance(link, Receiver):
            self._attach_publisher(link)
        else:
            assert isinstance(link, Sender)
            self._attach_consumer(link)

    def _request_node(self, address: str) -> ManagementNode | None:
        """The request/response node at ``address`` (``$management``; with claims, ``$cbs``
        and an entity's ``$management``), if it is one."""
        if self.gate is not None:
            node = self.gate.node_at(self.vhost, address)
            if isinstance(node, ManagementNode):
                return node
        if address == MANAGEMENT_ADDRESS:
            found = self._lookup(address, kind=None)
            assert isinstance(found, ManagementNode)
            return found
        return None

    def _lookup(self, address: str | None, *, kind: str | None, create: bool = True) -> Node | None:
        """The node a plain name names (``$management`` is this front end's own; see also
        :meth:`_request_node`)."""
        if address and self.gate is not None:
            address = entity_path(address)  # a Service Bus link names its entity by URI
            sb = self.gate.node_at(self.vhost, address)
            if sb is not None:
                return sb
        if address == MANAGEMENT_ADDRESS:
            if self._management is None:
                vhost = self.vhost
                self._management = ManagementNode(
                    vhost,
                    lambda resource: self.broker.authorize(vhost, self.user, resource, "configure"),
                    user=self.user,
                    may_reply_to=lambda address: self.broker.authorize(vhost, self.user, address, "write"),
                    is_open=lambda: self.conn.state is ConnectionState.OPENED,
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
            if node is None or isinstance(node, ManagementNode):
                raise AddressError("not-found", f"no node at address {address!r}")
            if isinstance(node, PartitionedStream):
                n = len(node.partitions)
                raise AddressError(
                    "invalid-field",
                    f"stream {node.name!r} has {n} partitions: read one of them, "
                    f"{partition_address(node.name, 0)!r} to {partition_address(node.name, n - 1)!r}",
                )
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

    def resource_alarm(self, raised: bool) -> None:
        """The broker's resource alarm: take every publisher's credit back (raised), or
        give it again to those held back (cleared)."""
        if self.closed:
            return
        if raised:
            for link, node in list(self.publishers.values()):
                self._grant(link, node)
            self.wake()
        else:
            self._unblock_all()

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

    # -- link recovery (§2.6.13; see recovery.py) ------------------------------------------
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
        if self.gate is not None:
            self.gate.forget(link)
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
        if d.message_format == BATCH_FORMAT and self.gate is not None:
            publish_batch(d, node, self.broker.now(), self.origin, self.wake)
            self._touched.add(id(link))
            return
        try:
            msg = parse_transfer(d.payload, self.broker.now(), node.needs_message_ids, self.origin)
        except DecodeError as exc:
            if not d.remote_settled:
                d.settle(Rejected(error=Error(condition=ErrorCondition.DECODE_ERROR, description=str(exc))))
            self._touched.add(id(link))
            return
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
        stalled = self.broker.journal.stalled
        if stalled is not None:  # the disk is full: nothing new is taken that cannot be stored
            if not presettled:
                d.settle(Rejected(error=Error(condition=ErrorCondition.RESOURCE_LIMIT_EXCEEDED, description=stalled)))
            self._touched.add(id(link))
            return

        def stored() -> None:
            if not presettled and not d.settled and not d._settle_pending:
                try:
                    d.settle(_ACCEPTED)
                except IllegalStateError:
                    pass
                if not self._handling:  # a commit callback: nobody else will flush
                    self.wake()

        if not node.publish(msg, stored) and not presettled:
            if isinstance(node, _ROUTERS) and not isinstance(node, Topic):
                d.settle(_RELEASED)  # no queue took it (RabbitMQ 4 answers the same)
            elif isinstance(node, ManagementNode):  # a request that cannot be answered
                d.settle(Rejected(error=node.refusal))
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
            try:
                # the outcome is echoed: a receiver that waits for it (mode second, or
                # Azure's pyamqp confirming a settlement) reads it from our disposition
                # (a rejection's error is the receiver's own: not sent back)
                d.settle(_REJECTED if isinstance(state, Rejected) else state if isinstance(state, _TERMINAL) else None)
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



def _awaits_store(d: Delivery) -> bool:
    """A producer's complete delivery with no outcome yet: its message waits for a commit."""
    return d.state is None and bool(d.payload) and not d.remote_settled


_TERMINAL = (Accepted, Rejected, Released, Modified)
"""The terminal delivery states (outcomes)."""
