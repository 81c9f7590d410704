"""Service Bus as a plug-in of the 1.0 front end (:class:`~..plugin.Amqp1Plugin`).

For a connection under claims-based security (``[servicebus]``, no user), it
registers its addresses (``$cbs``, entity paths, each entity's ``$management``),
its checks (a token on each attach; tokens that run out, each tick), session
receivers, its consumers (lock tokens and annotations) and the batch message
format, all on one :class:`~.cbs.Gate`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ....transport import Delivery, Link, Sender
from ....types import ErrorCondition, Source, symbol
from ...config import ServiceBusConfig
from ...core import Node, NodeElsewhere, Queue, Stream
from ..consumers import LinkConsumer
from ..context import Amqp1Context
from ..management import ManagementNode
from ..plugin import Amqp1Plugin, ConsumerView, PublishFormat
from .batch import BATCH_FORMAT, publish_batch
from .cbs import Gate, entity_path
from .consumer import ServiceBusConsumer
from .sessions import session_locks

__all__ = ["SESSION_LOCK_LOST", "ServiceBusPlugin"]

SESSION_LOCK_LOST = symbol("com.microsoft:session-lock-lost")


class ServiceBusPlugin(Amqp1Plugin):
    """Claims-based security and Service Bus's conventions for one connection."""

    def __init__(self, ctx: Amqp1Context, config: ServiceBusConfig) -> None:
        self.ctx = ctx
        broker = ctx.broker
        self.gate = Gate(
            config,
            broker.now,
            broker.leases,
            self._session_lost,
            session_locks(broker),
        )
        """The tokens put on ``$cbs``, and the links they let in."""
        self.formats: Mapping[int, PublishFormat] = {BATCH_FORMAT: self._publish_batch}

    def admit(self, link: Link) -> str | None:
        return self.gate.admit(link)

    def node_at(self, address: str) -> tuple[str, Node | None]:
        address = entity_path(address)  # a Service Bus link names its entity by URI
        return address, self.gate.node_at(self.ctx.vhost, address)

    def request_node(self, address: str) -> ManagementNode | None:
        node = self.gate.node_at(self.ctx.vhost, address)
        return node if isinstance(node, ManagementNode) else None

    def request_nodes(self) -> Iterable[ManagementNode]:
        return self.gate.nodes.values()

    def consumer_view(self, link: Sender, source: Source, queue: Queue) -> ConsumerView | None:
        return self.gate.claim_session(link, source, queue)

    def claim_elsewhere(self, link: Sender, source: Source) -> dict[Any, Any] | None:
        return self.gate.session_wanted(source)

    def claimed_elsewhere(self, link: Sender, queue: Node, filters: dict[Any, Any]) -> None:
        self.gate.session_held(link, queue, filters)

    def consumer(self, ctx: Amqp1Context, link: Sender, queue: Queue | Stream | NodeElsewhere, *, browse: bool) -> LinkConsumer:
        return ServiceBusConsumer(ctx, link, queue, browse=browse, lock_duration=self.gate.lock_duration(queue.name))

    def link_gone(self, link: Link) -> None:
        self.gate.forget(link)

    def tick(self) -> None:
        """Detach the links whose tokens expired without renewal."""
        gone = self.gate.expired()
        for link in gone:
            self.ctx.fail_link(link, ErrorCondition.UNAUTHORIZED_ACCESS, "the token for this link expired")
        if gone:
            self.ctx.wake()

    def _publish_batch(self, d: Delivery, node: Node) -> None:
        ctx = self.ctx
        publish_batch(d, node, ctx.broker.now(), ctx.origin, ctx.wake)

    def _session_lost(self, link: Link) -> None:
        """A session receiver's session lock ran out: its link is detached (Service Bus's way)."""
        if not self.ctx.closed:
            self.ctx.fail_link(link, SESSION_LOCK_LOST, "the session lock ran out without renewal")
            self.ctx.wake()
