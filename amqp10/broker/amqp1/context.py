"""What one 1.0 connection lends its per-concern handlers: :class:`Amqp1Context`.

The router (:class:`.handler.ConnectionHandler`) owns the connection; the handlers
for publishers, consumers, transactions and request nodes each hold this small
context instead of the router, so none of them can reach another's state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...transport import (
    Connection,
    ConnectionState,
    Delivery,
    IllegalStateError,
    Link,
    LinkState,
    SessionState,
)
from ...types import Error, ErrorCondition, symbol
from ..core import Action, Broker, Node, ResourceKind, SuspendedLink, VirtualHost, nothing
from ..core.recovery import Unsettled

if TYPE_CHECKING:
    from ..oauth import TokenGrant
    from .plugin import Amqp1Plugin

__all__ = ["Amqp1Context", "FailLink", "refuse", "settle_quietly"]

log = logging.getLogger("amqp10.broker")

FailLink = Callable[[Link, "ErrorCondition | symbol", str], None]
"""Close an attached link for its peer's error and forget it at once (the router's)."""


class Amqp1Context:
    """One connection as its handlers see it: the broker and virtual host, the user and
    what the user may do, the plug-in (Service Bus or none), and the three things a
    handler asks of the connection: :meth:`wake` the writer, :meth:`fail_link`, and
    whether it is :attr:`closed`."""

    def __init__(self, broker: Broker, conn: Connection, plugin: Amqp1Plugin, *, user: str | None) -> None:
        self.broker = broker
        self.conn = conn
        self.plugin = plugin
        """The addresses and checks a plug-in adds (:mod:`.plugin`; the default adds none)."""
        self.user = user
        """The authenticated user (None: anonymous); set by the service after SASL."""
        self.grant: TokenGrant | None = None
        """What the OAuth 2 token it logged in with allows (None: no token; the users file decides)."""
        self.vhost: VirtualHost = broker.default
        """The virtual host the open frame named (the default one until then)."""
        self.origin = object()
        """Marks what this connection publishes (for no-local filters)."""
        self.closed = False
        """The connection ended (its handlers have let go of everything)."""
        self.wake: Callable[[], None] = nothing
        """Tell the writer there is output (the driver's ``flush_soon``; cheap, call freely)."""
        self.after_write: Callable[[Callable[[], None]], None] = _at_once
        """Call a function once the output queued so far is written, in a write of its own
        (the driver's ``after_write``; without a driver: at once)."""
        self.fail_link: FailLink = _no_link
        self.renew_token: Callable[[str | bytes], str | None] = _no_renewal
        """Replace the connection's OAuth 2 token (``PUT /auth/tokens``): None, or why not."""
        """Close an attached link for its peer's error, and forget it at once."""

    @property
    def remote_container_id(self) -> str:
        """The peer's container id (from its open; "" before it)."""
        ro = self.conn.remote_open
        return ro.container_id if ro is not None else ""

    def may(self, resource: str, action: Action) -> bool:
        """Whether the user may do ``action`` on ``resource`` in this virtual host."""
        return self.broker.authorize(self.vhost, self.user, resource, action, grant=self.grant)

    def denial(self, resource: str, kind: ResourceKind, action: Action) -> str | None:
        """None if the user may do ``action`` on ``resource``; else why not."""
        return self.broker.denial(self.vhost, self.user, resource, kind, action, grant=self.grant)

    def can_answer(self, link: Link) -> bool:
        """``link`` still waits for our attach (its session and connection are open)."""
        return (
            not self.closed
            and link.state is LinkState.ATTACH_RCVD
            and link.session.state is SessionState.MAPPED
            and self.conn.state is ConnectionState.OPENED
        )

    def take_suspended(self, link: Link, address: str | None, node: Node | None) -> SuspendedLink | None:
        """The suspended record ``link``'s attach resumes (§2.6.13), if it does (else the
        record is dropped). It does if it carries an unsettled map, for the same address
        and node (``node`` None: this attach cannot resume a link)."""
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

    def resume_elsewhere(
        self, link: Link, address: str | None, answered: Callable[[Unsettled | None], None]
    ) -> bool:
        """A resuming attach (it carries an unsettled map) of a link this worker keeps no
        record of: with several workers, ask the others for theirs
        (:attr:`~amqp10.broker.core.LinkRecovery.elsewhere`; ``answered`` gets the
        unsettled deliveries one handed over, or None). False: nothing asked (one worker,
        or not a resume)."""
        ask = self.broker.recovery.elsewhere
        remote = link.remote_attach
        if ask is None or remote is None or remote.unsettled is None:
            return False
        ask((self.remote_container_id, link.name, link.role), address, answered)
        return True

    def delete_dynamic(self, node: Node) -> None:
        """Delete a node a link made (a dynamic terminus), if it is still that node
        (a direct reply-to queue's address goes with it)."""
        if self.vhost.nodes.get(node.name) is node:
            self.vhost.delete_node(node.name)
            self.broker.replies.unregister(node.name)


def refuse(link: Link, condition: ErrorCondition | symbol, description: str) -> None:
    """Refuse (or close) ``link`` with an error: a detach that closes it."""
    link.detach(Error(condition=condition, description=description), closed=True)


def settle_quietly(d: Delivery, state: Any = None) -> None:
    """Settle a delivery whose link may have gone meanwhile (then there is no one to tell)."""
    try:
        d.settle(state)
    except IllegalStateError:
        pass


def _no_renewal(token: str | bytes) -> str | None:
    return "this connection did not log in with an OAuth 2 token"


def _at_once(callback: Callable[[], None]) -> None:
    callback()


def _no_link(link: Link, condition: ErrorCondition | symbol, description: str) -> None:
    refuse(link, condition, description)
