"""A 0-9-1 channel's state in the broker, and its consumers.

:class:`Channel` holds what one open channel keeps (delivery tags, unacknowledged
messages, prefetch, confirms, a transaction's pending work) and hands messages
out; :class:`BasicConsumer` is a ``basic.consume`` as the core's consumer. The
methods that change them are the per-concern handlers' (:mod:`.basic`,
:mod:`.publish`, :mod:`.confirm`, :mod:`.tx`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from ...amqp091 import Method, ReplyCode
from ...amqp091 import methods as m
from ..core import Exchange, Node, NodeElsewhere, NotFound, Queue, QueuedMessage, Stream
from ..core.consumer_timeout import UnsettledClock
from .context import Amqp091Context, ChannelError, Encoded
from .message import FORMAT, Content, unpack

__all__ = ["BasicConsumer", "Channel", "PendingPublish", "PendingSettle"]

_UNLIMITED: Final = 1 << 30
_TAG_AND_REDELIVERED: Final = struct.Struct(">QB")  # basic.deliver's delivery-tag and its bit octet


@dataclass(slots=True)
class PendingPublish:
    """A ``basic.publish`` in a transaction: routed at ``tx.commit``."""

    exchange: Exchange
    msg: QueuedMessage
    routing_key: str
    mandatory: bool
    seq: int
    """Its publish sequence number (0: not in confirm mode)."""
    reached: list[Queue | Stream | NodeElsewhere] | None = None
    """The queues it reaches, once ``tx.commit`` routed it (several workers:
    :class:`~amqp10.broker.core.RoutedOnce`)."""


@dataclass(slots=True)
class PendingSettle:
    """A ``basic.ack``, ``nack`` or ``reject`` in a transaction: applied at ``tx.commit``."""

    tags: list[int]
    outcome: str
    """``ack``, ``requeue`` or ``reject`` (:meth:`Channel.settle`)."""


class BasicConsumer:
    """A ``basic.consume``: the core's consumer, its credit the prefetch room left."""

    def __init__(
        self, channel: Channel, tag: str, node: Node, *, no_ack: bool, exclusive: bool, limit: int
    ) -> None:
        self.id = channel.ctx.broker.next_consumer_id()
        self.browse = False
        self.channel = channel
        self.tag = tag
        self.node = node
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.origin = channel.ctx.origin
        """Its connection (as that connection's publishes are marked: no-local queues)."""
        self.limit = limit
        self.unacked = 0
        self.active = True
        self.priority = 0
        """Its ``x-priority``: a queue serves higher ones first (core/queues.py)."""
        self.timeout: float | None = None
        """Its ``x-consumer-timeout`` (seconds), over its queue's (core/consumer_timeout.py)."""
        self.arguments: dict[str, Any] = {}
        """``basic.consume``'s arguments (what management lists)."""
        self.stream_offset: Any = None
        """Its ``x-stream-offset`` on a stream another worker owns (that worker reads it)."""
        self.selector: Callable[[QueuedMessage], bool] | None = None
        """None: it takes any message (0-9-1 has no selectors). Set, not left for the core's
        ``getattr`` default: a missing attribute costs a formatted AttributeError a message."""
        raw = tag.encode()
        self.wire_tag = bytes((len(raw),)) + raw
        """The consumer tag as a short string (``basic.deliver``'s first argument)."""

    def credit(self) -> int:
        ch = self.channel
        if not self.active or ch.closed:
            return 0
        if self.no_ack:
            return _UNLIMITED
        room = self.limit - self.unacked if self.limit else _UNLIMITED
        if ch.global_limit:
            room = min(room, ch.global_limit - ch.unacked_count)
        return room

    def deliver(self, node: Node, msg: QueuedMessage) -> None:
        """The core hands it ``msg``: a ``basic.deliver`` on its channel."""
        channel = self.channel
        encoded = channel.ctx.encoded_deliver

        def deliver_method(tag: int, redelivered: bool, content: Content) -> Method | Encoded:
            if encoded and content.address:  # the stored exchange and key, as they are
                return m.BasicDeliver, self.wire_tag + _TAG_AND_REDELIVERED.pack(tag, redelivered) + content.address
            return m.BasicDeliver(
                consumer_tag=self.tag,
                delivery_tag=tag,
                redelivered=redelivered,
                exchange=content.exchange,
                routing_key=content.routing_key,
            )

        channel.hand_out(node, msg, self, self.no_ack, deliver_method)

    def cancelled(self) -> None:
        self.channel.server_cancel(self)

    def details(self) -> dict[str, Any]:
        """What management lists of it (``FrontEndHandler.consumer_details``)."""
        return {
            "consumer_tag": self.tag, "channel": self.channel.number, "queue": self.node.name,
            "ack_required": not self.no_ack, "exclusive": self.exclusive, "prefetch_count": self.limit,
            "active": self.active, "arguments": self.arguments,
        }  # fmt: skip


class Channel:
    """One open channel's 0-9-1 state: delivery tags, consumers, prefetch, confirms, tx.

    It is also its direct reply-to consumer (a core
    :class:`~amqp10.broker.core.replies.ReplyConsumer`) while it has one."""

    def __init__(self, ctx: Amqp091Context, number: int) -> None:
        self.ctx = ctx
        self.number = number
        self.closed = False
        self.next_tag = 1
        self.unacked: dict[int, tuple[Node, QueuedMessage, BasicConsumer | None]] = {}
        self.unacked_count = 0
        self.consumers: dict[str, BasicConsumer] = {}
        self.consumer_limit = 0
        self.global_limit = 0
        self.confirm = False
        self.publish_seq = 0
        self.unconfirmed: set[int] = set()
        """Publish sequence numbers not yet confirmed (ack or nack)."""
        self.confirmable: list[int] = []
        """Sequence numbers ready to be acknowledged, sent together (``multiple``) by
        :meth:`.confirm.Confirms.flush`."""
        self.tx: list[PendingPublish | PendingSettle] | None = None
        """In tx mode: the work ``tx.commit`` does, in order (None: not in tx mode)."""
        self.last_queue: str | None = None
        self.reply_tag: str | None = None
        """The consumer tag of this channel's direct reply-to consumer."""
        self.reply_address = ""
        """Its address (``amq.rabbitmq.reply-to.<token>``), what publishes' reply-to becomes."""
        self.unsettled_clock = UnsettledClock()
        """When its unacknowledged deliveries were first seen unacknowledged (consumer timeouts)."""

    # -- deliveries -------------------------------------------------------------------------
    def hand_out(
        self,
        node: Node | None,
        msg: QueuedMessage,
        c: BasicConsumer | None,
        no_ack: bool,
        make: Callable[[int, bool, Content], Method | Encoded],
    ) -> None:
        """Send ``msg`` with the method ``make(tag, redelivered, content)`` (deliver, get-ok;
        or the method's class and its encoded arguments) under a new delivery tag; without
        ``no_ack`` it waits for the client's outcome."""
        tag = self.next_tag
        self.next_tag = tag + 1
        content = unpack(msg.form(FORMAT))
        if not content.exchange and not content.routing_key and node is not None:
            content.routing_key = node.name  # sent straight to the queue (by 1.0): as if by its name
            content.address = b""
        method = make(tag, msg.delivery_count > 0, content)
        if node is None or no_ack:
            if node is not None:
                node.ack(msg)
        else:
            self.unacked[tag] = (node, msg, c)
            self.unacked_count += 1
            if c is not None:
                c.unacked += 1
        self.ctx.send_content(self.number, method, content.properties, content.body)

    def settle(self, tags: list[int], outcome: str) -> None:
        """Apply ``ack``, ``requeue`` or ``reject`` to the messages under ``tags``."""
        nodes: dict[int, Node] = {}
        for tag in tags:
            entry = self.unacked.pop(tag, None)
            if entry is None:
                continue
            node, msg, c = entry
            self.unacked_count -= 1
            if c is not None:
                c.unacked -= 1
            if outcome == "ack":
                node.ack(msg)
            elif outcome == "requeue":
                node.release(msg, delivery_failed=True)
            else:
                node.reject(msg)
            nodes[id(node)] = node
        # prefetch room opened: each consumer back into its queue's ready ring
        ready = list(self.consumers.values())
        for c in ready:
            nodes.pop(id(c.node), None)
        for node in nodes.values():
            node.dispatch()
        for c in ready:
            c.node.consumer_ready(c)

    def queue_name(self, name: str) -> str:
        """The queue a method names: ``name``, or (empty) the last one declared on this channel."""
        if name:
            return name
        if self.last_queue is None:
            raise NotFound("no previously declared queue")
        return self.last_queue

    def tags_for(self, delivery_tag: int, multiple: bool) -> list[int]:
        if multiple:
            tags = [t for t in self.unacked if t <= delivery_tag or delivery_tag == 0]
            if delivery_tag and delivery_tag not in self.unacked and not tags:
                raise ChannelError(ReplyCode.PRECONDITION_FAILED, f"unknown delivery tag {delivery_tag}")
            return tags
        if delivery_tag not in self.unacked:
            raise ChannelError(ReplyCode.PRECONDITION_FAILED, f"unknown delivery tag {delivery_tag}")
        return [delivery_tag]

    def server_cancel(self, c: BasicConsumer) -> None:
        """The queue went away: the consumer is gone; tell the client if it understands."""
        c.active = False
        if self.consumers.pop(c.tag, None) is None or self.closed:
            return
        ctx = self.ctx
        if ctx.conn.peer_capability("consumer_cancel_notify"):
            ctx.notify(self.number, m.BasicCancel(consumer_tag=c.tag, no_wait=True))

    def close(self) -> None:
        """The channel is gone: its consumers stop, what it had unacknowledged goes back."""
        if self.closed:
            return
        self.closed = True
        for c in list(self.consumers.values()):
            c.active = False
            c.node.remove_consumer(c)
        self.consumers.clear()
        pending = list(self.unacked)
        self.settle(pending, "requeue")
        self.tx = None
        self.stop_replies()

    def stop_replies(self) -> None:
        if self.reply_tag is not None:
            self.ctx.broker.replies.unregister(self.reply_address)
            self.reply_tag = None

    def deliver_reply(self, msg: QueuedMessage) -> None:
        """A message published to this channel's direct reply-to address: straight to its consumer."""
        tag = self.reply_tag
        assert tag is not None

        def deliver_method(delivery_tag: int, redelivered: bool, content: Content) -> Method:
            return m.BasicDeliver(
                consumer_tag=tag,
                delivery_tag=delivery_tag,
                redelivered=False,
                exchange=content.exchange,
                routing_key=content.routing_key,
            )

        self.hand_out(None, msg, None, True, deliver_method)
