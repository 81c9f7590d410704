"""``tx.select``, ``tx.commit``, ``tx.rollback``: a channel's transaction.

In tx mode a channel's publishes and outcomes wait in ``Channel.tx`` as records
(:class:`.channel.PendingPublish`, :class:`.channel.PendingSettle`); ``tx.commit``
carries them out in order and answers once the store has committed them.
"""

from __future__ import annotations

from collections.abc import Callable

from ...amqp091 import ReplyCode
from ...amqp091 import methods as m
from ..core import Answered, Node, PreconditionFailed, QueuedMessage, commit_reaching, route_once
from .channel import Channel, PendingPublish
from .context import Amqp091Context, ChannelError
from .publish import Publisher

__all__ = ["TxMethods"]


class TxMethods:
    """``tx.select``, ``commit`` and ``rollback``."""

    def __init__(self, ctx: Amqp091Context, publisher: Publisher) -> None:
        self.ctx = ctx
        self.publisher = publisher

    def select(self, ch: Channel, method: m.TxSelect) -> None:
        if ch.confirm:
            raise PreconditionFailed("cannot switch from confirm to tx mode")
        if ch.tx is None:
            ch.tx = []
        self.ctx.send_method(ch.number, m.TxSelectOk())

    def commit(self, ch: Channel, method: m.TxCommit) -> None:
        if ch.tx is None:
            raise PreconditionFailed("channel is not transactional")
        work, ch.tx = ch.tx, []
        stalled = self.ctx.broker.journal.stalled
        if stalled is not None and any(isinstance(w, PendingPublish) for w in work):
            # the store has no room for its publishes: the transaction fails as a whole
            raise ChannelError(ReplyCode.RESOURCE_ERROR, f"tx.commit refused: {stalled}")

        def apply() -> None:
            for w in work:
                if isinstance(w, PendingPublish):
                    self.publisher.route(ch, w.exchange, w.msg, w.routing_key, w.mandatory, w.seq, w.reached)
                else:
                    ch.settle(w.tags, w.outcome)

        coordinator = self.ctx.broker.coordinator
        if coordinator is not None:  # (several workers: its work may reach other workers' nodes)
            vh = self.ctx.vhost
            publishes: list[tuple[Node, QueuedMessage]] = []
            for w in work:
                if isinstance(w, PendingPublish):  # (routed once: apply publishes to these)
                    publishes += route_once(vh, w.exchange, w.msg, w.routing_key, w)
            acks = [
                (entry[0], entry[1])
                for w in work
                if not isinstance(w, PendingPublish) and w.outcome == "ack"
                for entry in (ch.unacked.get(tag) for tag in w.tags)
                if entry is not None
            ]

            def ask(answered: Answered[None]) -> None:
                commit_reaching(coordinator, publishes, acks, apply, answered)

            def then(answer: Callable[[], None]) -> None:
                answer()  # (raises the refusal: the channel closes)
                self.ctx.ok_committed(ch.number, False, m.TxCommitOk())

            self.ctx.later(ask, then)
            return
        apply()
        self.ctx.ok_committed(ch.number, False, m.TxCommitOk())

    def rollback(self, ch: Channel, method: m.TxRollback) -> None:
        if ch.tx is None:
            raise PreconditionFailed("channel is not transactional")
        ch.tx = []
        self.ctx.send_method(ch.number, m.TxRollbackOk())
