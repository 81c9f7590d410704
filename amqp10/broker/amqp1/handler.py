"""The AMQP 1.0 front end: one engine connection's events routed to per-concern handlers.

Nothing here does I/O. :class:`ConnectionHandler` is the router: it answers the
connection and its sessions itself, and passes every other event, through one
table, to the handler for its concern, each holding the connection's small
:class:`~.context.Amqp1Context`:

=====================================  ==============================================
event                                  handler
=====================================  ==============================================
``ConnectionOpened``/``Closed``/       the router (virtual host, refusal, cleanup)
``Failed``, ``SessionBegun``/
``Ended``/``Failed``
``LinkAttached``                       the router's checks (limits, the plug-in's
                                       admission), then: a coordinator target →
                                       :class:`.transactions.Transactions`; another
                                       receiver → :class:`.publishers.Publishers`; a
                                       sender → :class:`.consumers.Consumers` (a reply
                                       link from ``$management``: the node from
                                       :class:`.requests.RequestNodes`)
``LinkDetached``/``LinkFailed``        each concern lets the link go
``DeliveryReceived``                   publishers (a coordinator's: transactions)
``DeliveryAborted``                    publishers, else consumers
``DeliveryUpdated``                    consumers (dispositions; transactional: at commit)
``CreditAdded``, ``CreditLowered``     consumers
``DrainRequested``                     consumers
=====================================  ==============================================

What a plug-in adds (Service Bus, ``[servicebus]``: addresses, token checks, its
consumers, a message format) comes through :class:`~.plugin.Amqp1Plugin`'s hooks.
The network side feeds :meth:`ConnectionHandler.handle` events and writes what
the engine produces; ``wake`` tells it there is output.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from ...transport import (
    Connection,
    ConnectionClosed,
    ConnectionFailed,
    ConnectionOpened,
    ConnectionState,
    CreditAdded,
    CreditLowered,
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
    Receiver,
    Sender,
    Session,
    SessionBegun,
    SessionEnded,
    SessionFailed,
    SessionState,
)
from ...types import Error, ErrorCondition, Rejected, symbol
from ...types.transactions import Coordinator
from ..config import ServiceBusConfig
from ..core import Broker, Exchange, PartitionedStream, Queue, Stream, nothing
from ..frontend import ContextHandler
from ..management.rabbitmq import RABBITMQ_VERSION
from .addresses import ExchangeTarget
from .consumers import Consumers, LinkConsumer
from .context import Amqp1Context, refuse
from .lookup import NodeLookup
from .plugin import NO_PLUGIN
from .publishers import Publishers
from .requests import RequestNodes
from .servicebus.cbs import Gate
from .servicebus.plugin import ServiceBusPlugin
from .termini import resource
from .transactions import Transactions

ANONYMOUS_RELAY = symbol("ANONYMOUS-RELAY")
SHARED_SUBS = symbol("SHARED-SUBS")
DELAYED_DELIVERY = symbol("DELAYED_DELIVERY")
# what our open offers: the anonymous relay (OASIS "Using the AMQP Anonymous Terminus
# for Message Routing") and shared subscriptions (the AMQP JMS mapping)
OFFERED_CAPABILITIES = [ANONYMOUS_RELAY, SHARED_SUBS, DELAYED_DELIVERY]
# what our open says of us: RabbitMQ 4's AMQP 1.0 clients connect only to a server
# whose product is RabbitMQ, 4.0 or later, and turn features on by its version
OPEN_PROPERTIES = {symbol("product"): "RabbitMQ", symbol("version"): RABBITMQ_VERSION, symbol("platform"): "amqp10"}

__all__ = ["ConnectionHandler", "LinkConsumer"]

log = logging.getLogger("amqp10.broker")


class ConnectionHandler(ContextHandler):
    """Drives one engine connection on behalf of the broker: the router."""

    ctx: Amqp1Context

    def __init__(
        self,
        broker: Broker,
        conn: Connection,
        *,
        wake: Callable[[], None] = nothing,
        after_write: Callable[[Callable[[], None]], None] | None = None,
        user: str | None = None,
    ) -> None:
        self.broker = broker
        self.conn = conn
        ctx = self.ctx = Amqp1Context(broker, conn, NO_PLUGIN, user=user)
        ctx.wake = wake
        if after_write is not None:
            ctx.after_write = after_write
        ctx.fail_link = self.fail_link
        ctx.renew_token = self._renew_token
        self.requests = RequestNodes(ctx)
        nodes = self.nodes = NodeLookup(ctx, self.requests)
        self.txns = Transactions(ctx)
        self.publishers = Publishers(ctx, nodes, self.txns, self._not_a_publisher)
        self.consumers = Consumers(ctx, nodes, self.requests, self.txns)
        broker.connections.add(self)
        self._recheck = False
        """The token was renewed: check the links again once this batch's replies are out."""
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
            DeliveryReceived: self.publishers.on_delivery,
            DeliveryAborted: self._on_aborted,
            DeliveryUpdated: self.consumers.on_update,
            CreditAdded: self.consumers.on_credit,
            CreditLowered: self.consumers.on_credit,
            DrainRequested: self.consumers.on_drain,
        }

    # -- what the service sees (and ``user``, ``vhost``: ContextHandler's) -------------------
    @property
    def closed(self) -> bool:
        return self.ctx.closed

    @property
    def remote_container_id(self) -> str:
        return self.ctx.remote_container_id

    @property
    def gate(self) -> Gate | None:
        """Claims-based security's tokens and the links they let in (None: not in use)."""
        plugin = self.ctx.plugin
        return plugin.gate if isinstance(plugin, ServiceBusPlugin) else None

    def use_claims(self, config: ServiceBusConfig | None) -> None:
        """Claims-based security for this connection (its links need tokens), or not (None)."""
        self.ctx.plugin = NO_PLUGIN if config is None else ServiceBusPlugin(self.ctx, config)

    def tick(self) -> None:
        """Once a second (the service's tick): run out what has a time limit (the OAuth 2
        token the connection logged in with, consumer timeouts, Service Bus tokens)."""
        if not self.ctx.closed:
            now = self.ctx.broker.now()
            if self.conn.state is ConnectionState.OPENED:
                expired = self.token_expired(now)
                if expired is not None:  # as RabbitMQ: the connection ends with its credential
                    self.conn.close(Error(condition=ErrorCondition.UNAUTHORIZED_ACCESS, description=expired))
                    self.stop_deliveries()
                    self.ctx.wake()
                    return
            self.consumers.time_out(now)
            self.ctx.plugin.tick()

    def resource_counts(self) -> tuple[int, int]:
        """Sessions and links this connection holds (see ``Broker.counts``)."""
        links = len(self.consumers.links) + len(self.publishers.links) + len(self.txns.coordinators)
        return len(self.conn.sessions), links

    def consumer_details(self) -> list[dict[str, Any]]:
        return [c.details() for c in self.consumers.links.values() if not c.browse]

    def resource_alarm(self, raised: bool) -> None:
        """The broker's resource alarm: publishers lose their credit (raised) or get it back."""
        if not self.ctx.closed:
            self.publishers.resource_alarm(raised)

    def handle(self, events: list[Event]) -> None:
        handlers = self._handlers
        for e in events:
            h = handlers.get(type(e))
            if h is not None:
                h(e)
        publishers = self.publishers
        if publishers.touched:
            publishers.top_up()
        if self._recheck:
            self._recheck = False
            self._recheck_links()

    # -- a renewed token --------------------------------------------------------------------------
    def _renew_token(self, token: str | bytes) -> str | None:
        """``PUT /auth/tokens``: :meth:`renew_token`, then the links checked again (once
        this batch is handled: the renewal's 204 goes out first, as RabbitMQ's does)."""
        why = self.renew_token(token)
        if why is None:
            self._recheck = True
        return why

    def _recheck_links(self) -> None:
        """As RabbitMQ re-checks a session's links when its connection's token is renewed:
        each queue consumer for read, each publisher to a queue or an exchange for write
        (not the management pair, dynamic nodes or the anonymous relay); a session holding
        one the new token does not allow ends with that refusal (amqp:unauthorized-access)."""
        denied: dict[Session, str] = {}
        for c in self.consumers.links.values():
            if isinstance(c.node, Queue | Stream) and not c.node.dynamic and c.link.session not in denied:
                why = self.ctx.denial(*resource(c.node), "read")
                if why is not None:
                    denied[c.link.session] = why
        for link, node in self.publishers.links.values():
            checked = isinstance(node, Queue | Stream | PartitionedStream | Exchange | ExchangeTarget)
            if checked and not node.dynamic and link.session not in denied:
                why = self.ctx.denial(*resource(node), "write")
                if why is not None:
                    denied[link.session] = why
        for session, why in denied.items():
            if session.state is not SessionState.MAPPED:
                continue
            log.info("ending session %d of user %r: %s", session.channel, self.ctx.user, why)
            self.consumers.session_ended(session)
            self.txns.session_ended(session)
            self.publishers.session_ended(session)
            session.end(Error(condition=ErrorCondition.UNAUTHORIZED_ACCESS, description=why))
        if denied:
            self.ctx.wake()

    def stop_deliveries(self) -> None:
        """This side is closing the connection: no node may give its consumers more
        messages (the engine sends nothing more); what they hold is settled at cleanup."""
        self.consumers.stop_deliveries()

    def cleanup(self) -> None:
        ctx = self.ctx
        if ctx.closed:
            return
        ctx.closed = True
        # a connection that ends detaches its links, it does not close them (§2.6.5):
        # durable subscriptions stay for the next attach with the same name. One that
        # is lost (no close from the peer: a dropped socket, an error, a time-out)
        # suspends its links for recovery (§2.6.13); a clean close gives back what
        # they held.
        suspend = self.conn.remote_close is None
        self.consumers.drop_all(suspend=suspend)
        self.publishers.drop_all(suspend=suspend)
        self.txns.close()  # §4.2: transactions end with their connection, rolled back
        ctx.vhost.owner_gone(ctx)  # exclusive queues (declared on /management) end with their connection
        self.broker.connections.discard(self)

    # -- connection and sessions ----------------------------------------------------------------
    def _on_open(self, e: ConnectionOpened) -> None:
        conn = self.conn
        if conn.state is not ConnectionState.OPEN_RCVD:
            return
        ro = conn.remote_open
        hostname = ro.hostname if ro is not None else None
        vhost = self.broker.vhost_for_hostname(hostname)
        offered = list(conn.offered_capabilities or [])
        conn.offered_capabilities = offered + [c for c in OFFERED_CAPABILITIES if c not in offered]
        conn.properties = {**OPEN_PROPERTIES, **(conn.properties or {})}
        conn.open()
        if self.refusal is not None:
            conn.close(Error(condition=ErrorCondition.RESOURCE_LIMIT_EXCEEDED, description=self.refusal))
            return
        if vhost is None:
            log.info("refusing a connection to %r: no such virtual host", hostname)
            conn.close(Error(condition=ErrorCondition.NOT_FOUND, description=f"no virtual host {hostname!r}"))
            return
        refused = self.broker.vhost_denial(vhost, self.ctx.user, grant=self.ctx.grant)
        if refused is not None:
            conn.close(Error(condition=ErrorCondition.UNAUTHORIZED_ACCESS, description=refused))
            return
        self.ctx.vhost = vhost

    def _on_closed(self, e: Any) -> None:
        self.cleanup()

    def _on_session_begun(self, e: SessionBegun) -> None:
        s = e.session
        if s.state.name != "BEGIN_RCVD" or self.conn.state.name != "OPENED":
            return  # the connection ended later in the same batch of frames: nothing to answer
        if len(self.conn.sessions) > self.broker.config.limits.max_sessions_per_connection:
            s.end(Error(condition=ErrorCondition.RESOURCE_LIMIT_EXCEEDED, description="too many sessions"))
            return
        s.begin()

    def _on_session_ended(self, e: Any) -> None:
        session = e.session
        self.consumers.session_ended(session)
        self.txns.session_ended(session)
        self.publishers.session_ended(session)

    # -- links ----------------------------------------------------------------------------------
    def _on_link_attached(self, e: LinkAttached) -> None:
        link = e.link
        if link.state.name != "ATTACH_RCVD" or link.session.state.name != "MAPPED" or self.conn.state.name != "OPENED":
            return  # its session or connection ended later in the same batch of frames
        if len(link.session.links) >= self.broker.config.limits.max_links_per_session:
            refuse(link, ErrorCondition.RESOURCE_LIMIT_EXCEEDED, "too many links on this session")
            return
        refused = self.ctx.plugin.admit(link)
        if refused is not None:
            refuse(link, ErrorCondition.UNAUTHORIZED_ACCESS, refused)
            return
        if self.broker.placement is not None and self.nodes.decide_first(link, partial(self._attach, link)):
            return  # (several workers: the owner decides what the node it names is first)
        self._attach(link)

    def _attach(self, link: Link) -> None:
        if isinstance(link, Sender):
            self.consumers.attach(link)
            return
        assert isinstance(link, Receiver)
        if isinstance(link.remote_target, Coordinator):
            self.txns.attach(link)
        else:
            self.publishers.attach(link)

    def fail_link(self, link: Link, condition: ErrorCondition | symbol, description: str) -> None:
        """Close an attached link for its peer's error, and forget it at once."""
        self.consumers.link_gone(link, closed=True, suspend=False)
        self.publishers.drop(id(link), suspend=False)
        try:
            refuse(link, condition, description)
        except IllegalStateError:
            pass

    def _on_link_detached(self, e: Any) -> None:
        link = e.link
        # LinkFailed (our detach, for the peer's violation) has no ``closed``: it ends the link
        closed = getattr(e, "closed", True)
        self.txns.link_gone(link)
        self.ctx.plugin.link_gone(link)
        # §2.6.13: detached, not closed: its state stays
        self.consumers.link_gone(link, closed=closed, suspend=not closed)
        self.publishers.drop(id(link), suspend=not closed)

    # -- deliveries -----------------------------------------------------------------------------
    def _not_a_publisher(self, link: Receiver, d: Delivery) -> None:
        """A transfer on a receiver link that is not a publisher's: a coordinator's control
        message, or one on a link that has no node (any more)."""
        if self.txns.is_coordinator(link):
            self.txns.control(link, d)
        elif not d.remote_settled:
            d.settle(Rejected(error=Error(condition=ErrorCondition.NOT_FOUND, description="link has no node")))

    def _on_aborted(self, e: DeliveryAborted) -> None:
        if not self.publishers.on_aborted(e.link):
            self.consumers.on_aborted(e.link, e.delivery)
