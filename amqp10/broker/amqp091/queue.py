"""The 0-9-1 front end's ``queue.*`` methods: declare, bind, unbind, purge, delete.

Carried out on the connection's virtual host with RabbitMQ's checks and reply
texts: reserved ``amq.*`` names, equivalence of a re-declaration, exclusive
queues (owned by the connection's context), server-named queues.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from ...amqp091 import ReplyCode
from ...amqp091 import methods as m
from ..core import (
    NodeElsewhere,
    NotFound,
    PreconditionFailed,
    Queue,
    ResourceLocked,
    Stream,
    VirtualHost,
)
from ..core.equivalence import check_redeclared
from ..core.replies import REPLY_TO
from .channel import Channel
from .context import Amqp091Context, ChannelError, locked_text
from .exchange import bind, unbind

__all__ = ["QueueMethods", "replayed_from_metadata"]


def replayed_from_metadata(method: m.QueueDeclare) -> bool:
    """Whether a replay answers ``method`` from the metadata alone (:meth:`QueueMethods.declare`
    on a connection moved here): a declaration that names a queue (not server-named, not
    ``amq.``), does not make it exclusive and asks for an answer. Its answer's counts are
    the one thing a replay on another worker may give differently (``frontend.as_compared``
    leaves them out). Not with ``no-wait``: nothing was written for it, so a replay that
    could not answer it (the queue not in the metadata there yet) would not show in the
    comparison; such a declaration decides the move at once, as without
    ``publishers_apart``."""
    name = method.queue
    return bool(name) and not name.startswith("amq.") and not method.exclusive and not method.no_wait


class QueueMethods:
    """``queue.declare``, ``bind``, ``unbind``, ``purge`` and ``delete``."""

    def __init__(self, ctx: Amqp091Context) -> None:
        self.ctx = ctx

    def declare(self, ch: Channel, method: m.QueueDeclare) -> None:
        ctx = self.ctx
        name = method.queue
        if method.passive and name == REPLY_TO:  # it exists for every channel (RabbitMQ)
            ctx.ok(ch.number, method.no_wait, m.QueueDeclareOk(queue=REPLY_TO))
            return
        if not method.passive:  # the host's default queue type, as RabbitMQ 3.10 declares and compares
            arguments = ctx.vhost.declared_arguments(
                method.arguments, durable=method.durable, exclusive=method.exclusive, auto_delete=method.auto_delete
            )
            if arguments is not method.arguments:
                method = m.QueueDeclare(
                    queue=name,
                    durable=method.durable,
                    exclusive=method.exclusive,
                    auto_delete=method.auto_delete,
                    no_wait=method.no_wait,
                    arguments=dict(arguments),
                )
        if ctx.replaying() and replayed_from_metadata(method):
            self._declare_replayed(ch, method)
            return
        elsewhere = ctx.elsewhere(ch.queue_name(name)) if name or method.passive else None
        if elsewhere is not None and method.exclusive and not method.passive:
            self._declare_exclusive(ch, method, elsewhere)
            return
        if elsewhere is not None:
            self._declare_elsewhere(ch, method, elsewhere)
            return
        self._declare_here(ch, method)

    def _declare_replayed(self, ch: Channel, method: m.QueueDeclare) -> None:
        """``queue.declare`` replayed on a connection another worker moved here (with
        ``publishers_apart`` a 0-9-1 connection moves at its first publish or consume, after
        its declarations): that worker answered it, so the queue is in this worker's copy
        of the metadata, as declared; the answer is compared with the one written there,
        its counts left out, and not sent. A queue not here (yet) fails the comparison
        (the channel is closed instead): the connection stays where it was."""
        ctx = self.ctx
        q = ctx.queue(method.queue)
        if not method.passive:
            ctx.authorize(q.name, "configure", "queue")
            _check_equivalent(ctx.vhost, q, method)
        ch.last_queue = q.name
        ctx.ok(ch.number, method.no_wait, m.QueueDeclareOk(queue=q.name))

    def _declare_here(self, ch: Channel, method: m.QueueDeclare) -> None:
        """``queue.declare`` of a queue of this worker's (or a new exclusive one)."""
        ctx = self.ctx
        vh = ctx.vhost
        name = method.queue
        if method.passive:
            q = ctx.queue(ch.queue_name(name))
        else:
            if not name:
                name = "amq.gen-" + secrets.token_urlsafe(16)
            elif name.startswith("amq."):
                raise ChannelError(ReplyCode.ACCESS_REFUSED, f"queue name '{name}' contains reserved prefix 'amq.*'")
            ctx.authorize(name, "configure", "queue")
            existing = vh.queue(name)
            if existing is not None:
                q = ctx.queue(name)
                _check_equivalent(vh, q, method)
            else:
                q = vh.declare_queue(
                    name,
                    durable=method.durable,
                    arguments=method.arguments,
                    exclusive_owner=ctx if method.exclusive else None,
                    auto_delete=method.auto_delete,
                )
        ch.last_queue = q.name
        ok = m.QueueDeclareOk(queue=q.name, message_count=q.count, consumer_count=len(q.consumers))
        if method.exclusive and not method.passive and not method.no_wait and vh.broker.metadata is not None:
            self._placed(ch, q, ok)  # (several workers: the order may place it elsewhere first)
            return
        (ctx.ok if method.passive else ctx.ok_committed)(ch.number, method.no_wait, ok)

    def _placed(self, ch: Channel, q: Queue | Stream, ok: m.QueueDeclareOk) -> None:
        """Answer an exclusive declaration once its placement is in the metadata's order: if
        another worker's placement of the name came first, the queue made here is gone
        again (workers/placing.py) and the declaration is refused as locked, as on one
        broker when another connection declared it first."""
        ctx = self.ctx
        vh = ctx.vhost

        def placed(answered: Callable[[Callable[[], None]], None]) -> None:
            ctx.broker.after_commit(lambda: answered(lambda: None))

        def answer(_: Callable[[], None]) -> None:
            if vh.nodes.get(q.name) is not q:
                raise ResourceLocked(locked_text(q.name, vh.name))
            if not ch.closed:
                ctx.send_method(ch.number, ok)

        ctx.later(placed, answer)

    def _declare_exclusive(self, ch: Channel, method: m.QueueDeclare, q: NodeElsewhere) -> None:
        """An exclusive ``queue.declare`` of a name another worker owns (by its hash, or as
        another connection's exclusive queue there): made here, on this connection's worker,
        unless the owner has such a queue already (then it is locked, as on one broker)."""

        def asked(answer: Callable[[], tuple[int, int]]) -> None:
            try:
                answer()
            except NotFound:
                if not ch.closed:  # (its connection may have gone meanwhile: nothing to own it)
                    self._declare_here(ch, method)
                return
            raise ResourceLocked(locked_text(q.name, self.ctx.vhost.name))

        self.ctx.later(q.ask_status, asked)

    def _declare_elsewhere(self, ch: Channel, method: m.QueueDeclare, q: NodeElsewhere) -> None:
        """``queue.declare`` of a queue another worker owns: answered from its owner (an
        exclusive queue is made here, on its connection's worker)."""
        ctx = self.ctx
        if not method.passive:
            if q.name.startswith("amq."):
                raise ChannelError(ReplyCode.ACCESS_REFUSED, f"queue name '{q.name}' contains reserved prefix 'amq.*'")
            ctx.authorize(q.name, "configure", "queue")
            record = ctx.vhost.queue(q.name)  # this worker's copy of it (workers/metadata.py)
            if record is not None:
                _check_equivalent(ctx.vhost, record, method)

        def declared(answer: Callable[[], tuple[int, int]]) -> None:
            messages, consumers = answer()
            ch.last_queue = q.name
            ctx.ok(ch.number, method.no_wait, m.QueueDeclareOk(queue=q.name, message_count=messages, consumer_count=consumers))

        if method.passive:
            ctx.later(q.ask_status, declared)
        else:
            ctx.later(
                lambda answered: q.ask_declare(
                    durable=method.durable, arguments=method.arguments, auto_delete=method.auto_delete, answered=answered
                ),
                declared,
            )

    def bind(self, ch: Channel, method: m.QueueBind) -> None:
        name = ch.queue_name(method.queue)
        key = method.routing_key if method.routing_key or method.queue else name
        bind(self.ctx, method.exchange, name, key, method.arguments, "queue")
        self.ctx.ok_committed(ch.number, method.no_wait, m.QueueBindOk())

    def unbind(self, ch: Channel, method: m.QueueUnbind) -> None:
        name = ch.queue_name(method.queue)
        key = method.routing_key if method.routing_key or method.queue else name
        unbind(self.ctx, method.exchange, name, key, method.arguments, "queue")
        self.ctx.ok_committed(ch.number, False, m.QueueUnbindOk())

    def purge(self, ch: Channel, method: m.QueuePurge) -> None:
        ctx = self.ctx
        name = ch.queue_name(method.queue)
        elsewhere = ctx.elsewhere(name)
        if elsewhere is not None:
            ctx.authorize(name, "read", "queue")
            ctx.later(
                elsewhere.ask_purge,
                lambda answer: ctx.ok(ch.number, method.no_wait, m.QueuePurgeOk(message_count=answer())),
            )
            return
        q = ctx.queue_to_read(name)
        if not isinstance(q, Queue):
            raise PreconditionFailed(f"queue '{q.name}' in vhost '{ctx.vhost.name}' is a stream: it cannot be purged")
        ctx.ok_committed(ch.number, method.no_wait, m.QueuePurgeOk(message_count=q.purge()))

    def delete(self, ch: Channel, method: m.QueueDelete) -> None:
        ctx = self.ctx
        name = ch.queue_name(method.queue)
        elsewhere = ctx.elsewhere(name)
        if elsewhere is not None:
            self._delete_elsewhere(ch, method, elsewhere)
            return
        if ctx.vhost.queue(name) is None:  # deleting what is not there is fine (RabbitMQ)
            ctx.ok(ch.number, method.no_wait, m.QueueDeleteOk(message_count=0))
            return
        q = ctx.queue(name)
        ctx.authorize(name, "configure", "queue")
        where = f"queue '{name}' in vhost '{ctx.vhost.name}'"
        if method.if_unused and q.consumers:
            raise PreconditionFailed(f"{where} in use")
        if method.if_empty and q.count:
            raise PreconditionFailed(f"{where} not empty")
        count = q.count
        with ctx.reply_first() as cancels:  # delete-ok, then the consumers' basic.cancel (RabbitMQ)
            ctx.vhost.delete_node(name)
        ctx.ok_committed(ch.number, method.no_wait, m.QueueDeleteOk(message_count=count), cancels)

    def _delete_elsewhere(self, ch: Channel, method: m.QueueDelete, q: NodeElsewhere) -> None:
        """``queue.delete`` of a queue another worker owns: done there (its consumers here are
        cancelled as its owner detaches their links)."""
        ctx = self.ctx
        ctx.authorize(q.name, "configure", "queue")
        ctx.later(
            lambda answered: q.ask_delete(if_unused=method.if_unused, if_empty=method.if_empty, answered=answered),
            _deleted(ch, method, ctx),
        )


def _deleted(ch: Channel, method: m.QueueDelete, ctx: Amqp091Context) -> Callable[[Callable[[], int]], None]:
    """What answers ``queue.delete`` of a queue another worker owns, from its owner's answer."""

    def deleted(answer: Callable[[], int]) -> None:
        try:
            count = answer()
        except NotFound:  # deleting what is not there is fine (RabbitMQ)
            count = 0
        ctx.ok(ch.number, method.no_wait, m.QueueDeleteOk(message_count=count))

    return deleted


def _check_equivalent(vhost: VirtualHost, q: Queue | Stream, method: m.QueueDeclare) -> None:
    """A re-declaration must match the queue as it is (RabbitMQ's texts: :mod:`..core.equivalence`)."""
    check_redeclared(
        vhost, q, durable=method.durable, auto_delete=method.auto_delete, exclusive=method.exclusive, arguments=method.arguments
    )
