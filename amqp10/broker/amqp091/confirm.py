"""Publisher confirms: ``confirm.select`` and the acks and nacks it promises.

A publish in confirm mode takes the channel's next sequence number
(:meth:`Confirms.number`); once the broker has it safe (or has refused it),
:meth:`Confirms.settle` readies the ack (or sends the nack). Ready acks go out
together, as few as can be (one ``multiple`` ack for a run), when the batch of
events is done or just before the driver next writes (:meth:`Confirms.flush_all`).
"""

from __future__ import annotations

from ...amqp091 import methods as m
from ..core import PreconditionFailed
from .channel import Channel
from .context import Amqp091Context

__all__ = ["Confirms"]


class Confirms:
    """``confirm.select``, and one connection's confirms not yet sent."""

    def __init__(self, ctx: Amqp091Context) -> None:
        self.ctx = ctx
        self._ready: dict[int, Channel] = {}  # channels with acks to send

    def select(self, ch: Channel, method: m.ConfirmSelect) -> None:
        if ch.tx is not None:
            raise PreconditionFailed("cannot switch from tx to confirm mode")
        ch.confirm = True
        self.ctx.ok(ch.number, method.nowait, m.ConfirmSelectOk())

    @staticmethod
    def number(ch: Channel) -> int:
        """The sequence number of a publish on ``ch`` (0: the channel does not confirm)."""
        if not ch.confirm:
            return 0
        ch.publish_seq += 1
        seq = ch.publish_seq
        ch.unconfirmed.add(seq)
        return seq

    def settle(self, ch: Channel, seq: int, ack: bool) -> None:
        """The publish ``seq`` is safe (``ack``) or refused: a nack now, an ack with the next flush."""
        if ch.closed:
            return
        ch.unconfirmed.discard(seq)
        if not ack:
            self.ctx.send_method(ch.number, m.BasicNack(delivery_tag=seq, requeue=False))
        else:
            ch.confirmable.append(seq)
        # sent once the batch of events is done, or (a store commit's callback) when the
        # driver next writes: as few acks as can be
        self._ready[ch.number] = ch
        self.ctx.wake()

    def flush_all(self) -> None:
        if self._ready:
            ready, self._ready = self._ready, {}
            for ch in ready.values():
                if not ch.closed:
                    self.flush(ch)

    def flush(self, ch: Channel) -> None:
        """Acknowledge the ready publishes: every one below the oldest unconfirmed with one
        ``multiple`` ack, the others one by one."""
        ready, ch.confirmable = sorted(ch.confirmable), []
        if not ready:
            return
        oldest = min(ch.unconfirmed) if ch.unconfirmed else ready[-1] + 1
        below = [seq for seq in ready if seq < oldest]
        if below:
            self.ctx.send_method(ch.number, m.BasicAck(delivery_tag=below[-1], multiple=len(below) > 1))
        for seq in ready[len(below) :]:
            self.ctx.send_method(ch.number, m.BasicAck(delivery_tag=seq))
