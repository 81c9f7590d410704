"""The node a link's terminus names, for one 1.0 connection, under its user's permissions.

A publisher's target and a consumer's source name a node by a v2 address
(``/queues/Q``, ``/exchanges/X/KEY``), a plain name (with the kind its capabilities
ask for, made on first use when ``auto_create`` allows), ``$management``, an
address of the plug-in's, or nothing (a publisher's null target: the anonymous
relay). Whatever cannot be used raises :class:`~.addresses.AddressError`.
"""

from __future__ import annotations

from collections.abc import Callable

from ...addresses import partition_address
from ...transport import Link
from ...types import Source, Target
from ..core import Node, PartitionedStream, Queue, ResourceKind
from .addresses import (
    VOLATILE_QUEUE,
    AddressError,
    AnonymousTarget,
    ReplyQueue,
    parse,
    resolve_target,
)
from .context import Amqp1Context
from .management import ManagementNode
from .requests import RequestNodes
from .termini import remote_terminus, resource
from .topics import is_pattern, node_name_and_kind

__all__ = ["RESERVED", "NodeLookup"]

RESERVED = {"$cbs": "claims-based security ($cbs) is not enabled on this broker ([servicebus])"}
"""Request-node addresses that never become queues: why an attach to one is refused
when no plug-in serves it."""


class NodeLookup:
    """Finds the nodes one connection's links name."""

    def __init__(self, ctx: Amqp1Context, requests: RequestNodes) -> None:
        self.ctx = ctx
        self.requests = requests
        self._decided: dict[str, Node] = {}
        """While an attach the owner decided for (:meth:`decide_first`) is answered: the
        node it decided, by name."""

    def decide_first(self, link: Link, then: Callable[[], None]) -> bool:
        """With several workers: whether ``link``'s attach waits for the owner of the node
        its terminus names as a kind to decide what that node is
        (:meth:`VirtualHost.decide <amqp10.broker.core.VirtualHost.decide>`); ``then``
        attaches it once decided, its look-up finding the node decided."""
        ctx = self.ctx
        terminus = remote_terminus(link)
        if not isinstance(terminus, (Source, Target)) or terminus.dynamic or not terminus.address:
            return False
        if not ctx.broker.config.auto_create:
            return False
        name, kind = node_name_and_kind(terminus.address, terminus.capabilities)
        if kind is None or is_pattern(name):  # (the common case: no kind asked for)
            return False
        if parse(terminus.address) is not None:
            return False
        name, node = ctx.plugin.node_at(name)  # (as the look-up finds it)
        vhost = ctx.vhost
        if node is not None or vhost.has(name):
            return False  # (here already: nothing to decide)
        if self.requests.node_at(name) is not None or ctx.denial(name, _resource_kind(kind), "configure") is not None:
            return False  # (refused, or not made, by the look-up as before)

        def decided(node: Node | None) -> None:
            if not ctx.can_answer(link):  # the link went meanwhile
                return
            if node is not None:
                self._decided[name] = node
            try:
                then()
            finally:
                self._decided.pop(name, None)
            ctx.wake()

        return vhost.decide(name, kind, decided)

    def queue_named(self, link: Link) -> str | None:
        """The queue ``link``'s terminus names (a v2 ``/queues/`` address, or a plain name
        its look-up finds or makes as a queue), if it names one: None for a request node
        (``$management``, ``$cbs``), a plug-in's node, an exchange, a topic or stream, or no
        address."""
        terminus = remote_terminus(link)
        if not isinstance(terminus, (Source, Target)) or terminus.dynamic or not terminus.address:
            return None
        vhost = self.ctx.vhost
        try:
            parsed = parse(terminus.address)
        except AddressError:
            return None
        kind: str | None = "queue"
        if parsed is not None:
            if parsed[0] != "queue":
                return None
            name = parsed[1]
        else:
            name, kind = node_name_and_kind(terminus.address, terminus.capabilities)
            name, node = self.ctx.plugin.node_at(name)
            if node is not None or name in RESERVED or self.requests.node_at(name) is not None:
                return None
        if name in vhost.exchanges:
            return None
        record = vhost.nodes.get(name)
        if (record.kind if record is not None else kind or vhost.policy_for(name)[0]) != "queue":
            return None
        return name

    def lookup(self, address: str | None, *, kind: str | None, create: bool = True) -> Node | None:
        """The node a plain name names (``$management`` is this connection's own)."""
        ctx = self.ctx
        if address:
            address, node = ctx.plugin.node_at(address)
            if node is not None:
                return node
        if address:
            requests = self.requests.node_at(address)
            if requests is not None:
                return requests
            reserved = RESERVED.get(address)
            if reserved is not None:
                raise AddressError("not-found", reserved)
        vhost = ctx.vhost
        found = self._decided.get(address) if address and self._decided else None
        if found is not None:
            return found
        found = vhost.lookup(address, create=False, kind=kind)
        if found is None and create and address and ctx.broker.config.auto_create:
            # creating a node is declaring it: RabbitMQ's configure permission
            refused = ctx.denial(address, _resource_kind(kind), "configure")
            if refused is not None:
                raise AddressError("unauthorized-access", refused)
            found = vhost.lookup(address, create=True, kind=kind)
        return found

    def target_node(self, target: Target) -> Node:
        """The node a publisher's target names: a v2 address, a plain name, or (null) each
        message's ``to``; raises :class:`AddressError`."""
        if target.dynamic:
            return self.ctx.vhost.create_dynamic()
        if target.address is None:
            return AnonymousTarget(self.ctx.vhost, lambda to: self._writable(*node_name_and_kind(to, None), create=False))
        return self._writable(*node_name_and_kind(target.address, target.capabilities))

    def _writable(self, address: str, kind: str | None, *, create: bool = True) -> Node:
        node = resolve_target(self.ctx.vhost, address, lambda a: self.lookup(a, kind=kind, create=create))
        refused = self.ctx.denial(*resource(node), "write")
        if refused is not None:
            raise AddressError("unauthorized-access", refused)
        return node

    def _reply_queue(self) -> Queue:
        """A requester's queue for direct reply-to, named by a fresh reply address
        registered for every front end (it goes, unregistered, with its link)."""
        vhost = self.ctx.vhost
        registered = ReplyQueue()
        address = self.ctx.broker.replies.register(vhost, registered)
        q = vhost.create_node(address, "queue", dynamic=True)
        assert isinstance(q, Queue)
        registered.queue = q
        return q

    def source_node(self, source: Source) -> Node:
        """The node a consumer's source names (a v2 ``/queues/Q`` address or a plain name)."""
        vhost = self.ctx.vhost
        caps = source.capabilities
        volatile = VOLATILE_QUEUE in caps if isinstance(caps, list) else caps is not None and str(caps) == VOLATILE_QUEUE
        if source.dynamic and volatile:
            node: Node | None = self._reply_queue()
        elif source.dynamic:
            node = vhost.create_dynamic()
        else:
            address = source.address
            parsed = parse(address) if address else None
            if parsed is not None:
                if parsed[0] != "queue":
                    raise AddressError("invalid-field", f"consume from a queue (/queues/NAME), not {address!r}")
                node = vhost.queue(parsed[1])
                if node is not None:  # (another worker's queue: its stand-in, not the record here)
                    node = vhost.elsewhere(node.name) or node
            else:
                name, kind = node_name_and_kind(address, source.capabilities)
                node = self.lookup(name, kind=kind)
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
        refused = self.ctx.denial(*resource(node), "read")
        if refused is not None:
            raise AddressError("unauthorized-access", refused)
        return node


def _resource_kind(kind: str | None) -> ResourceKind:
    """What making a node of ``kind`` declares, for RabbitMQ's configure permission."""
    return "exchange" if kind == "topic" else "queue"
