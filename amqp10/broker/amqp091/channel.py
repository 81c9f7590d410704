"""A 0-9-1 channel's state in the broker, and its consumers.

:class:`ChannelContext` holds what one open channel keeps (delivery tags,
unacknowledged messages, prefetch, confirms, ``tx``) and hands messages out;
:class:`BasicConsumer` is a ``basic.consume`` as the core's consumer. The
methods that change them are :class:`.handler.Amqp091Handler`'s.
"""

from __future__ import annotations

import base64
import itertools
import os
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from ...amqp091 import Method, ReplyCode, reply_text
from ...amqp091 import methods as m
from ..core import Node, Queue, QueuedMessage, Stream
from .message import FORMAT, Content, unpack

if TYPE_CHECKING:
    from .handler import Amqp091Handler

__all__ = ["REPLY_TO", "BasicConsumer", "ChannelContext", "ChannelError", "Encoded", "HardError"]

Encoded = tuple[type[Method], bytes]
"""A content method as its class and its arguments already encoded (``send_encoded_content``)."""

_ids = itertools.count(1 << 40)  # consumer ids, apart from the 1.0 front end's
_UNLIMITED: Final = 1 << 30
_TAG_AND_REDELIVERED = struct.Struct(">QB")  # basic.deliver's delivery-tag and its bit octet
REPLY_TO: Final = "amq.rabbitmq.reply-to"
"""RabbitMQ's direct reply-to pseudo-queue: consume from it (no-ack), publish with it as reply-to."""
_replies: dict[str, ChannelContext] = {}
"""Direct reply-to addresses (``amq.rabbitmq.reply-to.<token>``) and the channel consuming them."""


def _token() -> str:
    return base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


class ChannelError(Exception):
    """A channel exception (soft error): the channel closes with this code and text."""

    def __init__(self, code: int, explanation: str) -> None:
        super().__init__(explanation)
        self.code = code
        self.text = reply_text(code, explanation)


class HardError(ChannelError):
    """A connection exception: the whole connection closes."""


class BasicConsumer:
    """A ``basic.consume``: the core's consumer, its credit the prefetch room left."""

    def __init__(
        self, channel: ChannelContext, tag: str, node: Queue | Stream, *, no_ack: bool, exclusive: bool, limit: int
    ) -> None:
        self.id = next(_ids)
        self.browse = False
        self.channel = channel
        self.tag = tag
        self.node = node
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.limit = limit
        self.unacked = 0
        self.active = True
        self.priority = 0
        """Its ``x-priority``: a queue serves higher ones first (core/queues.py)."""
        raw = tag.encode()
        self.wire_tag = bytes((len(raw),)) + raw
        """The consumer tag as a short string (``basic.deliver``'s first argument)."""

    def credit(self) -> int:
        ch = self.channel
        if not self.active or not ch.flow_active or ch.closed:
            return 0
        if self.no_ack:
            return _UNLIMITED
        room = self.limit - self.unacked if self.limit else _UNLIMITED
        if ch.global_limit:
            room = min(room, ch.global_limit - ch.unacked_count)
        return room

    def deliver(self, node: Node, msg: QueuedMessage) -> None:
        self.channel.deliver(self, node, msg)

    def cancelled(self) -> None:
        self.channel.server_cancel(self)


class ChannelContext:
    """One open channel's 0-9-1 state: delivery tags, consumers, prefetch, confirms, tx."""

    def __init__(self, handler: Amqp091Handler, number: int) -> None:
        self.handler = handler
        self.number = number
        self.closed = False
        self.next_tag = 1
        self.unacked: dict[int, tuple[Queue | Stream, QueuedMessage, BasicConsumer | None]] = {}
        self.unacked_count = 0
        self.consumers: dict[str, BasicConsumer] = {}
        self.consumer_limit = 0
        self.global_limit = 0
        self.flow_active = True
        self.confirm = False
        self.publish_seq = 0
        self.unconfirmed: set[int] = set()
        """Publish sequence numbers not yet confirmed (ack or nack)."""
        self.confirmable: list[int] = []
        """Sequence numbers ready to be acknowledged, sent together (``multiple``) by
        :meth:`Amqp091Handler.flush_confirms`."""
        self.tx: list[Callable[[], None]] | None = None
        self.last_queue: str | None = None
        self.reply_tag: str | None = None
        """The consumer tag of this channel's direct reply-to consumer."""
        self.reply_address = ""
        """Its address (``amq.rabbitmq.reply-to.<token>``), what publishes' reply-to becomes."""

    # -- deliveries -------------------------------------------------------------------------
    def _take_tag(self) -> int:
        tag = self.next_tag
        self.next_tag += 1
        return tag

    def deliver(self, c: BasicConsumer, node: Node, msg: QueuedMessage) -> None:
        assert isinstance(node, (Queue, Stream))

        encoded = self.handler.encoded_deliver

        def deliver_method(tag: int, redelivered: bool, content: Content) -> Method | Encoded:
            if encoded and content.address:  # the stored exchange and key, as they are
                return m.BasicDeliver, c.wire_tag + _TAG_AND_REDELIVERED.pack(tag, redelivered) + content.address
            return m.BasicDeliver(
                consumer_tag=c.tag,
                delivery_tag=tag,
                redelivered=redelivered,
                exchange=content.exchange,
                routing_key=content.routing_key,
            )

        self.hand_out(node, msg, c, c.no_ack, deliver_method)

    def hand_out(
        self,
        node: Queue | Stream | None,
        msg: QueuedMessage,
        c: BasicConsumer | None,
        no_ack: bool,
        make: Callable[[int, bool, Content], Method | Encoded],
    ) -> None:
        """Send ``msg`` with the method ``make(tag, redelivered, content)`` (deliver, get-ok;
        or the method's class and its encoded arguments) under a new delivery tag; without
        ``no_ack`` it waits for the client's outcome."""
        tag = self._take_tag()
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
        self.handler.send_content(self.number, method, content.properties, content.body)

    def settle(self, tags: list[int], outcome: str) -> None:
        """Apply ``ack``, ``requeue`` or ``reject`` to the messages under ``tags``."""
        nodes: dict[int, Queue | Stream] = {}
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
        h = self.handler
        if h.conn.peer_capability("consumer_cancel_notify"):
            h.send_method(self.number, m.BasicCancel(consumer_tag=c.tag, no_wait=True))
            h.wake_if_idle()

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
            _replies.pop(self.reply_address, None)
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
