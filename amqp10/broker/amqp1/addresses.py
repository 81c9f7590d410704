"""1.0 addresses onto the AMQ model, in RabbitMQ 4's forms (its "v2" addresses).

- ``/queues/Q``: the queue (or stream) ``Q``; a source or a target.
- ``/exchanges/X/KEY``: exchange ``X`` with routing key ``KEY``; a target only.
- ``/exchanges/X``: exchange ``X``, the routing key taken from each message's
  ``subject``; a target only.
- a null target, or one with no address: each message's ``to`` holds one of
  these (or a plain node name), resolved per message (the anonymous relay; it
  never auto-creates a node).
- anything else is a plain node name, as before (queues, 1.0 topics, streams).

Segments are percent-encoded (``/queues/a%2Fb`` is the queue ``a/b``);
``amq.default`` names the nameless default exchange.

Direct reply-to (RabbitMQ 4.2's, through the broker's :class:`~amqp10.broker.core.replies.DirectReplies`,
shared with 0-9-1): a consumer whose source is dynamic with the capability
``rabbitmq:volatile-queue`` gets a queue named by a fresh reply address
(``/queues/amq.rabbitmq.reply-to.TOKEN`` in its attach answer), registered for every
front end; a publisher to a reply address a 0-9-1 requester holds (``/queues/...`` or
``to``) reaches it through :class:`ReplyTarget`, through no queue.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote, unquote

from ..config import QueuePolicy
from ..core import (
    DEFAULT_EXCHANGE,
    Exchange,
    Node,
    PublishResult,
    Queue,
    QueuedMessage,
    VirtualHost,
    nothing,
)
from ..core.replies import DirectReplies

__all__ = [
    "QUEUES",
    "VOLATILE_QUEUE",
    "AddressError",
    "AnonymousTarget",
    "ExchangeTarget",
    "ReplyQueue",
    "ReplyTarget",
    "parse",
    "queue_address",
    "resolve_target",
]

VOLATILE_QUEUE = "rabbitmq:volatile-queue"
"""The capability of a dynamic source that asks for a direct reply-to address."""

QUEUES = "/queues/"
EXCHANGES = "/exchanges/"


class AddressError(Exception):
    """An address that names nothing usable; ``condition`` says why (not-found, ...)."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


def parse(address: str) -> tuple[str, str, str | None] | None:
    """``("queue", Q, None)``, ``("exchange", X, KEY or None)``, or None: a plain name."""
    if address.startswith(QUEUES):
        name = address[len(QUEUES) :]
        if not name or "/" in name:
            raise AddressError("invalid-field", f"bad queue address {address!r}: use /queues/NAME")
        return ("queue", unquote(name), None)
    if address.startswith(EXCHANGES):
        rest = address[len(EXCHANGES) :]
        name, slash, key = rest.partition("/")
        if not name or "/" in key:
            raise AddressError("invalid-field", f"bad exchange address {address!r}: use /exchanges/NAME[/KEY]")
        x = unquote(name)
        return ("exchange", DEFAULT_EXCHANGE if x == "amq.default" else x, unquote(key) if slash else None)
    return None


class ExchangeTarget(Node):
    """A publisher's target: an exchange with a fixed routing key (``/exchanges/X/KEY``)."""

    kind = "exchange-target"

    def __init__(self, address: str, exchange: Exchange, key: str, vhost: VirtualHost) -> None:
        super().__init__(address, QueuePolicy())
        self.exchange = exchange
        self.key = key
        self.vhost = vhost

    @property
    def deleted(self) -> bool:
        """Its exchange's: a publisher to a deleted exchange is told."""
        return self.exchange.deleted

    @deleted.setter
    def deleted(self, value: bool) -> None:
        self.exchange.deleted = value

    def publish(self, msg: QueuedMessage, on_stored: Callable[[], None]) -> PublishResult:
        return self.vhost.route(self.exchange, msg, self.key, on_stored)

    def __eq__(self, other: object) -> bool:
        # the same exchange and key: what a resuming attach must find again (link recovery)
        return isinstance(other, ExchangeTarget) and other.exchange is self.exchange and other.key == self.key

    def __hash__(self) -> int:
        return hash((id(self.exchange), self.key))


class AnonymousTarget(Node):
    """A null target (the OASIS anonymous terminus): each message goes where its ``to`` says.

    ``to`` holds a v2 address or a plain node name; :meth:`node_for` finds that
    node for each message. The relay never creates a node: a ``to`` that names
    none is the sender's error (a typo, or a reply queue already gone), which
    the front end answers with ``rejected(amqp:not-found)``.
    """

    kind = "anonymous"

    def __init__(self, vhost: VirtualHost, resolve: Callable[[str], Node]) -> None:
        super().__init__("", QueuePolicy())
        self.vhost = vhost
        self.resolve = resolve

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AnonymousTarget) and other.vhost is self.vhost

    def __hash__(self) -> int:
        return hash(id(self.vhost))

    def node_for(self, msg: QueuedMessage) -> Node:
        """The node ``msg``'s ``to`` names; raises :class:`AddressError` if none."""
        to = msg.routing.to
        if not to:
            raise AddressError("not-found", "a message to the anonymous relay needs a 'to' address")
        return self.resolve(to)

    def publish(self, msg: QueuedMessage, on_stored: Callable[[], None]) -> PublishResult:
        try:
            node = self.node_for(msg)
        except AddressError:
            return PublishResult.UNROUTABLE
        return node.publish(msg, on_stored)


def queue_address(name: str) -> str:
    """The v2 address of queue ``name`` (``/queues/`` and the name percent-encoded)."""
    return QUEUES + quote(name, safe="")


class ReplyQueue:
    """A 1.0 requester's reply queue as the broker's direct reply-to registry sees it:
    what another front end sends to its address goes onto the queue."""

    def __init__(self) -> None:
        self.queue: Queue | None = None

    def deliver_reply(self, msg: QueuedMessage) -> None:
        q = self.queue
        if q is not None and not q.deleted:
            q.publish(msg, nothing)


class ReplyTarget(Node):
    """A reply address another front end's requester holds: its replies go straight to it."""

    kind = "reply-to"

    def __init__(self, vhost: VirtualHost, address: str) -> None:
        super().__init__(address, QueuePolicy())
        self.vhost = vhost
        self.needs_message_ids = False  # (an instance value: Node's is a slot when compiled)

    def publish(self, msg: QueuedMessage, on_stored: Callable[[], None]) -> PublishResult:
        consumer = self.vhost.broker.replies.consumer(self.vhost, self.name)
        if consumer is None:
            return PublishResult.UNROUTABLE  # the requester is gone
        consumer.deliver_reply(msg)
        on_stored()
        return PublishResult.TAKEN

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReplyTarget) and other.vhost is self.vhost and other.name == self.name

    def __hash__(self) -> int:
        return hash((id(self.vhost), self.name))


def resolve_target(vhost: VirtualHost, address: str, lookup: Callable[[str], Node | None]) -> Node:
    """The node a publisher's target address names (``lookup`` for plain names)."""
    parsed = parse(address)
    if parsed is None:
        node = lookup(address)
        if node is None:
            if DirectReplies.is_reply_address(address) and vhost.broker.replies.consumer(vhost, address):
                return ReplyTarget(vhost, address)
            raise AddressError("not-found", f"no node at address {address!r}")
        return node
    kind, name, key = parsed
    if kind == "queue":
        # another worker's queue (this worker's record of it is not the queue), or a
        # requester's there (the name says which): its owner routes each message by name
        # and makes nothing, unroutable if it has no such queue
        remote = vhost.elsewhere(name)
        if remote is not None:
            return remote
        q = vhost.queue(name)
        if q is not None:
            return q
        if DirectReplies.is_reply_address(name) and vhost.broker.replies.consumer(vhost, name):
            return ReplyTarget(vhost, name)
        raise AddressError("not-found", f"no queue {name!r} in vhost {vhost.name!r}")
    x = vhost.exchange(name)
    if x is None:
        raise AddressError("not-found", f"no exchange {name!r} in vhost {vhost.name!r}")
    if x.internal:
        raise AddressError("unauthorized-access", f"exchange {name!r} is internal: publishers cannot use it")
    if key is None:
        return x  # an exchange is a node: publish() takes the key from the subject
    return ExchangeTarget(address, x, key, vhost)
