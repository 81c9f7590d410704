"""The request/response nodes of one 1.0 connection: ``$management``, ``/management`` and a plug-in's.

Each connection has its own :class:`~.management.ManagementNode` (its replies go to
this connection's reply links, its checks are this user's), made when an address
first names it, and its own RabbitMQ 4 management node
(:class:`~.rabbitmq_management.RabbitManagementNode`, HTTP over AMQP on ``/management``,
answering on the paired receiver link); a plug-in adds nodes of its own (Service Bus: ``$cbs`` and each
entity's ``$management``). A request is a transfer to one of them (see
:mod:`.publishers`); its answer goes to a receiver link from the node (see
:mod:`.consumers`), whose queue goes when that link does.
"""

from __future__ import annotations

from ...transport import ConnectionState
from ..core import Queue
from .context import Amqp1Context
from .management import MANAGEMENT_ADDRESS, ManagementNode
from .rabbitmq_management import RABBITMQ_MANAGEMENT_ADDRESS, RabbitManagementNode

__all__ = ["RequestNodes"]


class RequestNodes:
    """The management concern of one connection: its request/response nodes."""

    def __init__(self, ctx: Amqp1Context) -> None:
        self.ctx = ctx
        self.management: ManagementNode | None = None
        """This connection's ``$management`` (made on first use)."""
        self.rabbitmq: RabbitManagementNode | None = None
        """This connection's ``/management`` (made on first use)."""

    def node_at(self, address: str) -> ManagementNode | None:
        """The request node at ``address`` (``$management``, or a plug-in's), if it is one."""
        node = self.ctx.plugin.request_node(address)
        if node is not None:
            return node
        if address == MANAGEMENT_ADDRESS:
            return self.management_node()
        if address == RABBITMQ_MANAGEMENT_ADDRESS:
            return self.rabbitmq_node()
        return None

    def management_node(self) -> ManagementNode:
        """This connection's ``$management``, made for its user and virtual host."""
        if self.management is None:
            ctx = self.ctx
            self.management = ManagementNode(
                ctx.vhost,
                lambda resource: ctx.may(resource, "configure"),
                user=ctx.user,
                may_reply_to=lambda address: ctx.may(address, "write"),
                is_open=lambda: ctx.conn.state is ConnectionState.OPENED,
            )
        return self.management

    def rabbitmq_node(self) -> RabbitManagementNode:
        """This connection's ``/management`` (RabbitMQ 4's), made for its user and virtual host."""
        if self.rabbitmq is None:
            ctx = self.ctx
            self.rabbitmq = RabbitManagementNode(
                ctx.vhost,
                lambda resource: ctx.may(resource, "configure"),
                user=ctx.user,
                owner=ctx,
                renew_token=ctx.renew_token,
                grant=lambda: ctx.grant,
                is_open=lambda: ctx.conn.state is ConnectionState.OPENED,
            )
        return self.rabbitmq

    def reply_link_gone(self, queue: Queue) -> None:
        """A receiver link from a request node detached: its reply queue goes."""
        for requests in (self.management, self.rabbitmq, *self.ctx.plugin.request_nodes()):
            if requests is not None:
                requests.reply_link_gone(queue)
