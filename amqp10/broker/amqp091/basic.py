"""The 0-9-1 front end's consuming side of ``basic.*``: qos, consume, cancel, get, and the
client's outcomes (ack, nack, reject, recover).

``basic.consume`` becomes a core consumer (:class:`.channel.BasicConsumer`) whose
credit is its prefetch room; on the direct reply-to pseudo-queue it makes the
channel a requester in the broker's :class:`~amqp10.broker.core.replies.DirectReplies`.
``basic.publish`` is :mod:`.publish`'s.
"""

from __future__ import annotations

import datetime as _dt
import secrets
from collections.abc import Callable
from typing import Any, Final

from ...amqp091 import Method, ReplyCode
from ...amqp091 import methods as m
from ...amqp091.fields import Timestamp
from ...types import timestamp
from ..core import (
    ConsumeResult,
    Node,
    NodeElsewhere,
    PreconditionFailed,
    Queue,
    QueuedMessage,
    Stream,
    answer_now,
    settled_everywhere,
)
from ..core.replies import REPLY_TO
from .channel import BasicConsumer, Channel, PendingSettle
from .context import Amqp091Context, ChannelError, HardError, locked_text
from .message import Content

__all__ = ["CONSUME_REFUSALS", "BasicMethods"]

CONSUME_REFUSALS: Final[dict[ConsumeResult, tuple[int, str]]] = {
    ConsumeResult.EXCLUSIVE_HELD: (ReplyCode.ACCESS_REFUSED, "queue '{queue}' in vhost '{vhost}' in exclusive use"),
    ConsumeResult.IN_USE: (ReplyCode.ACCESS_REFUSED, "queue '{queue}' in vhost '{vhost}' in exclusive use"),
    ConsumeResult.LOCKED: (ReplyCode.RESOURCE_LOCKED, locked_text("{queue}", "{vhost}")),
}
"""How ``basic.consume`` answers each of the core's refusals: the channel closes with this
reply code and text (RabbitMQ's)."""


class BasicMethods:
    """``basic.qos``, ``consume``, ``cancel``, ``get``, ``ack``, ``nack``, ``reject``, ``recover``."""

    def __init__(self, ctx: Amqp091Context) -> None:
        self.ctx = ctx

    def qos(self, ch: Channel, method: m.BasicQos) -> None:
        if method.prefetch_size:
            raise HardError(ReplyCode.NOT_IMPLEMENTED, f"prefetch_size!=0 ({method.prefetch_size})")
        if method.global_:
            ch.global_limit = method.prefetch_count
        else:
            ch.consumer_limit = method.prefetch_count
        self.ctx.send_method(ch.number, m.BasicQosOk())
        for c in list(ch.consumers.values()):
            c.node.consumer_ready(c)

    def consume(self, ch: Channel, method: m.BasicConsume) -> None:
        if method.queue == REPLY_TO:
            self._consume_replies(ch, method)
            return
        ctx = self.ctx
        name = ch.queue_name(method.queue)
        elsewhere = ctx.elsewhere(name)
        q: Node = ctx.queue_to_read(name) if elsewhere is None else elsewhere
        if elsewhere is not None:
            ctx.authorize(name, "read", "queue")
        tag = method.consumer_tag or "amq.ctag-" + secrets.token_urlsafe(16)
        if tag in ch.consumers:
            raise HardError(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
        if elsewhere is None:
            admitted = q.admits(exclusive=method.exclusive)
            if not admitted:
                raise _refused(admitted, q.name, ctx.vhost.name)
        start: int | None = None
        if isinstance(q, Stream):
            try:
                start = q.start_offset(_stream_offset(method.arguments.get("x-stream-offset", "next")))
            except ValueError as exc:
                raise PreconditionFailed(str(exc)) from None
        priority = method.arguments.get("x-priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise PreconditionFailed(
                f"invalid arg 'x-priority' for queue '{q.name}' in vhost '{ctx.vhost.name}': "
                f"{priority!r} is not an integer"
            )
        c = BasicConsumer(
            ch, tag, q, no_ack=method.no_ack, exclusive=method.exclusive, limit=ch.consumer_limit
        )
        c.priority = priority
        timeout = method.arguments.get("x-consumer-timeout")
        if timeout is not None:
            if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout <= 0:
                raise PreconditionFailed(
                    f"invalid arg 'x-consumer-timeout' for queue '{q.name}' in vhost '{ctx.vhost.name}': "
                    f"{timeout!r} is not a positive integer"
                )
            c.timeout = timeout / 1000
        c.arguments = dict(method.arguments)
        if elsewhere is not None:  # its owner admits it (or not), and then answers
            offset = method.arguments.get("x-stream-offset")
            if offset is not None:  # (read there if it is a stream, as start is here)
                c.stream_offset = _stream_offset(offset)
            self._consume_elsewhere(ch, method, elsewhere, c)
            return
        ch.consumers[tag] = c
        ctx.ok(ch.number, method.no_wait, m.BasicConsumeOk(consumer_tag=tag))
        if isinstance(q, Stream):
            q.add_consumer_at(c, start)
        else:
            q.add_consumer(c)

    def _consume_elsewhere(self, ch: Channel, method: m.BasicConsume, q: NodeElsewhere, c: BasicConsumer) -> None:
        """``basic.consume`` on a queue another worker owns: consume-ok once it admitted ``c``."""
        ctx = self.ctx

        def admitted(answer: Callable[[], ConsumeResult]) -> None:
            result = answer()
            if not result:
                raise _refused(result, q.name, ctx.vhost.name)
            if ch.closed:  # the channel went meanwhile
                c.active = False
                q.remove_consumer(c)
                return
            ch.consumers[c.tag] = c
            ctx.ok(ch.number, method.no_wait, m.BasicConsumeOk(consumer_tag=c.tag))

        ctx.later(lambda answered: q.ask_consume(c, exclusive=method.exclusive, answered=answered), admitted)

    def _consume_replies(self, ch: Channel, method: m.BasicConsume) -> None:
        if not method.no_ack:
            raise PreconditionFailed("reply consumer cannot acknowledge")
        if ch.reply_tag is not None:
            raise PreconditionFailed("reply consumer already set")
        tag = method.consumer_tag or "amq.ctag-" + secrets.token_urlsafe(16)
        if tag in ch.consumers:
            raise HardError(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
        ch.reply_tag = tag
        ch.reply_address = self.ctx.broker.replies.register(self.ctx.vhost, ch)
        self.ctx.ok(ch.number, method.no_wait, m.BasicConsumeOk(consumer_tag=tag))

    def cancel(self, ch: Channel, method: m.BasicCancel) -> None:
        if method.consumer_tag == ch.reply_tag:
            ch.stop_replies()
        ctx = self.ctx
        ok = m.BasicCancelOk(consumer_tag=method.consumer_tag)
        c = ch.consumers.pop(method.consumer_tag, None)
        if c is not None:
            c.active = False
            node = c.node
            if isinstance(node, NodeElsewhere):  # cancel-ok once its owner dropped it too

                def dropped(_: Callable[[], None]) -> None:
                    if not ch.closed:
                        ctx.ok(ch.number, method.no_wait, ok)

                ctx.later(lambda answered: node.ask_cancel(c, answered), dropped)
                return
            node.remove_consumer(c)
        ctx.ok(ch.number, method.no_wait, ok)

    def get(self, ch: Channel, method: m.BasicGet) -> None:
        ctx = self.ctx
        name = ch.queue_name(method.queue)
        elsewhere = ctx.elsewhere(name)
        if elsewhere is not None:
            ctx.authorize(name, "read", "queue")

            def got(answer: Callable[[], tuple[QueuedMessage | None, int]]) -> None:
                msg, count = answer()
                if msg is not None and ch.closed:
                    elsewhere.release(msg)  # the channel went meanwhile: it goes back
                elif msg is not None:
                    ch.hand_out(elsewhere, msg, None, method.no_ack, _get_ok(count))
                else:
                    ctx.send_method(ch.number, m.BasicGetEmpty())

            ctx.later(elsewhere.ask_get, got)
            return
        q = ctx.queue_to_read(name)
        if not isinstance(q, Queue):
            raise PreconditionFailed(f"queue '{q.name}' in vhost '{ctx.vhost.name}' is a stream: use basic.consume")
        msg = q.get()
        if msg is None:
            ctx.send_method(ch.number, m.BasicGetEmpty())
            return
        ch.hand_out(q, msg, None, method.no_ack, _get_ok(q.count))

    # -- the client's outcomes (in tx mode: applied at tx.commit)
    def ack(self, ch: Channel, method: m.BasicAck) -> None:
        _settle(ch, ch.tags_for(method.delivery_tag, method.multiple), "ack")

    def nack(self, ch: Channel, method: m.BasicNack) -> None:
        self._refuse(ch, ch.tags_for(method.delivery_tag, method.multiple), method.requeue)

    def reject(self, ch: Channel, method: m.BasicReject) -> None:
        self._refuse(ch, ch.tags_for(method.delivery_tag, False), method.requeue)

    def _refuse(self, ch: Channel, tags: list[int], requeue: bool) -> None:
        """nack or reject: messages of a queue another worker holds that are dead now (not
        requeued) are dead-lettered there; the client's next methods wait until their dead
        letters are in their queues, as one broker has them before it reads on."""
        if requeue or ch.tx is not None:
            _settle(ch, tags, "requeue" if requeue else "reject")
            return
        unacked = ch.unacked
        elsewhere = {id(n): n for n in (unacked[t][0] for t in tags if t in unacked) if isinstance(n, NodeElsewhere)}
        ch.settle(tags, "reject")
        if elsewhere:
            self.ctx.later(lambda answered: settled_everywhere(list(elsewhere.values()), answered), answer_now)

    def recover(self, ch: Channel, method: m.BasicRecover | m.BasicRecoverAsync) -> None:
        if not method.requeue:
            raise HardError(ReplyCode.NOT_IMPLEMENTED, "requeue=false")
        ch.settle(list(ch.unacked), "requeue")
        if isinstance(method, m.BasicRecover):
            self.ctx.send_method(ch.number, m.BasicRecoverOk())


def _refused(result: ConsumeResult, queue: str, vhost: str) -> ChannelError:
    """The channel error for a consume the queue did not admit (:data:`CONSUME_REFUSALS`)."""
    code, text = CONSUME_REFUSALS[result]
    return ChannelError(code, text.format(queue=queue, vhost=vhost))


def _get_ok(count: int) -> Callable[[int, bool, Content], Method]:
    """What makes ``basic.get-ok`` for a message, ``count`` messages left in its queue."""

    def get_ok(tag: int, redelivered: bool, content: Content) -> Method:
        return m.BasicGetOk(
            delivery_tag=tag,
            redelivered=redelivered,
            exchange=content.exchange,
            routing_key=content.routing_key,
            message_count=count,
        )

    return get_ok


def _settle(ch: Channel, tags: list[int], outcome: str) -> None:
    if ch.tx is not None:
        ch.tx.append(PendingSettle(tags, outcome))
    else:
        ch.settle(tags, outcome)


def _stream_offset(v: Any) -> Any:
    """An ``x-stream-offset`` argument as the core's stream takes it (a datetime: a timestamp)."""
    if isinstance(v, _dt.datetime):
        return timestamp(int(v.timestamp() * 1000))
    if isinstance(v, Timestamp):  # (a table's ``T``, as clients send a datetime: seconds)
        return timestamp(int(v) * 1000)
    if isinstance(v, bytes):
        return v.decode()
    return v
