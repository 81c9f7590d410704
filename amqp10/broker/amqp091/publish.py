"""``basic.publish``: a message routed through the virtual host, and 0-9-1's answer to it.

The core says what became of a publish (:class:`~amqp10.broker.core.PublishResult`);
:data:`ANSWERS` is the one table that turns that into 0-9-1's answers: a
``basic.return`` for a mandatory message no queue took, and the publisher confirm.
A reply to a direct reply-to address goes straight to its consumer (the broker's
:class:`~amqp10.broker.core.replies.DirectReplies`), through no queue.
"""

from __future__ import annotations

import logging
from typing import Final, Literal, NamedTuple

from ...amqp091 import BasicProperties, ContentReceived, ReplyCode
from ...amqp091 import methods as m
from ..core import (
    Exchange,
    NodeElsewhere,
    NotFound,
    PreconditionFailed,
    PublishResult,
    Queue,
    QueuedMessage,
    Refused,
    Stream,
    nothing,
)
from ..core.replies import REPLY_PREFIX, REPLY_TO
from .channel import Channel, PendingPublish
from .confirm import Confirms
from .context import Amqp091Context, ChannelError, HardError
from .message import from_publish, unpack

__all__ = ["ANSWERS", "NO_ROUTE", "Answer", "Publisher"]

log = logging.getLogger("amqp10.broker")

NO_ROUTE: Final = 312


class Answer(NamedTuple):
    """0-9-1's answer to one :class:`~amqp10.broker.core.PublishResult`."""

    returned: tuple[int, str] | None
    """A mandatory message goes back in a ``basic.return`` with this reply code and text
    (None: it is not returned)."""
    confirm: Literal["when stored", "ack", "nack"]
    """The publisher confirm (in confirm mode): once the broker has it safe, at once, or a
    ``basic.nack`` at once."""


ANSWERS: Final[dict[PublishResult, Answer]] = {
    PublishResult.TAKEN: Answer(None, "when stored"),
    # no queue matched: returned if mandatory, and confirmed (RabbitMQ acks it)
    PublishResult.UNROUTABLE: Answer((NO_ROUTE, "NO_ROUTE"), "ack"),
    # every queue it reached is full (overflow reject-publish): RabbitMQ nacks it
    PublishResult.FULL: Answer(None, "nack"),
    PublishResult.REFUSED: Answer(None, "nack"),
}


class Publisher:
    """``basic.publish`` on one connection's channels."""

    def __init__(self, ctx: Amqp091Context, confirms: Confirms) -> None:
        self.ctx = ctx
        self.confirms = confirms
        self.published = False
        """A publish since the router last looked (it checks the broker's memory then)."""
        self._dropping = False  # dropping publishes (no confirms) while the store has no room

    def publish(self, ch: Channel, method: m.BasicPublish, e: ContentReceived) -> None:
        if method.immediate:
            raise HardError(ReplyCode.NOT_IMPLEMENTED, "immediate=true")
        ctx = self.ctx
        vh = ctx.vhost
        x = vh.exchange(method.exchange)
        if x is None:
            raise NotFound(f"no exchange '{method.exchange}' in vhost '{vh.name}'")
        if x.internal:
            raise ChannelError(
                ReplyCode.ACCESS_REFUSED, f"cannot publish to internal exchange '{x.name}' in vhost '{vh.name}'"
            )
        ctx.authorize(x.name, "write", "exchange")
        props = e.properties
        assert isinstance(props, BasicProperties)
        raw = e.raw_properties
        if props.reply_to == REPLY_TO:
            if ch.reply_tag is None:
                raise PreconditionFailed("fast reply consumer does not exist")
            props.reply_to = ch.reply_address
            buf = bytearray()
            props.encode(buf)
            raw = bytes(buf)
        msg = from_publish(method.exchange, method.routing_key, props, raw, e.body, ctx.broker.now(), ctx.origin)
        self.published = True
        seq = self.confirms.number(ch) if ch.confirm else 0  # (0: what number says, without the call)
        if ch.tx is not None:
            ch.tx.append(PendingPublish(x, msg, method.routing_key, method.mandatory, seq))
        else:
            self.route(ch, x, msg, method.routing_key, method.mandatory, seq)

    def route(
        self,
        ch: Channel,
        x: Exchange,
        msg: QueuedMessage,
        key: str,
        mandatory: bool,
        seq: int,
        reached: list[Queue | Stream | NodeElsewhere] | None = None,
    ) -> None:
        """Route ``msg`` from ``x`` and answer as :data:`ANSWERS` says (``seq`` 0: no confirm;
        ``reached``: the queues it reaches, found already: :meth:`VirtualHost.route`'s)."""
        ctx = self.ctx
        vh = ctx.vhost
        if x.name == "" and key.startswith(REPLY_PREFIX):  # (is_reply_address, inline: per message)
            target = ctx.broker.replies.consumer(vh, key)
            if target is not None:
                target.deliver_reply(msg)
                if seq:
                    self.confirms.settle(ch, seq, True)
                return

        stalled = ctx.broker.journal.stalled
        if stalled is not None:  # the disk is full: nothing new is taken that cannot be stored
            self._refuse_unstorable(ch, seq, stalled)
            return
        self._dropping = False

        # a queue that answers later (another worker's) may refuse it after all: what tells
        # the client is made only where there are such queues (workers > 1) and it listens
        if seq:
            confirms = self.confirms

            def stored() -> None:
                confirms.settle(ch, seq, True)

            if ctx.broker.placement is None:
                result = vh.route(x, msg, key, stored, None, reached)
            else:
                result = vh.route(x, msg, key, stored, self._refused(ch, x, msg, key, mandatory, seq), reached)
        elif mandatory and ctx.broker.placement is not None:
            result = vh.route(x, msg, key, nothing, self._refused(ch, x, msg, key, mandatory, seq), reached)
        else:
            result = vh.route(x, msg, key, nothing, None, reached)
        if result is PublishResult.TAKEN:
            return  # (confirmed by ``stored``)
        self._answer(ch, x, msg, key, mandatory, seq, result)

    def _answer(
        self, ch: Channel, x: Exchange, msg: QueuedMessage, key: str, mandatory: bool, seq: int, result: PublishResult
    ) -> None:
        """Answer a publish no queue took as :data:`ANSWERS` says."""
        ctx = self.ctx
        answer = ANSWERS[result]
        if mandatory and answer.returned is not None:
            code, text = answer.returned
            content = unpack(msg.data)
            ctx.send_content(
                ch.number,
                m.BasicReturn(reply_code=code, reply_text=text, exchange=x.name, routing_key=key),
                content.properties,
                content.body,
            )
        if seq:
            self.confirms.settle(ch, seq, answer.confirm != "nack")

    def _refused(
        self, ch: Channel, x: Exchange, msg: QueuedMessage, key: str, mandatory: bool, seq: int
    ) -> Refused:
        """What answers a publish that a queue another worker owns did not take after all
        (None: that worker could not be reached: a nack)."""

        def refused(result: PublishResult | None) -> None:
            if not ch.closed:  # (the confirm and the return wake the writer)
                self._answer(ch, x, msg, key, mandatory, seq, PublishResult.REFUSED if result is None else result)

        return refused

    def _refuse_unstorable(self, ch: Channel, seq: int, why: str) -> None:
        """A publish while the store has no room: ``basic.nack`` in confirm mode (RabbitMQ's
        answer to a message it could not persist); without confirms the client cannot be
        told, so it is dropped, and the first drop of each such spell is logged."""
        if seq:
            self.confirms.settle(ch, seq, False)
        elif not self._dropping:
            self._dropping = True
            log.warning(
                "dropping 0-9-1 publishes of %s (no publisher confirms to refuse them with): %s", self.ctx.user, why
            )
