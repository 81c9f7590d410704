"""The 0-9-1 front end's ``exchange.*`` methods, and binding (shared with ``queue.bind``).

Carried out on the connection's virtual host with RabbitMQ's checks and reply
texts: reserved ``amq.*`` names, equivalence of a re-declaration, and the
permissions binding needs.
"""

from __future__ import annotations

from typing import Any, Final

from ...amqp091 import ReplyCode
from ...amqp091 import methods as m
from ..core import EXCHANGE_TYPES as CORE_EXCHANGE_TYPES
from ..core import NotFound, PreconditionFailed
from .channel import Channel
from .context import Amqp091Context, ChannelError

__all__ = ["EXCHANGE_TYPES", "ExchangeMethods", "bind", "flag", "unbind"]

EXCHANGE_TYPES: Final = frozenset(CORE_EXCHANGE_TYPES)


class ExchangeMethods:
    """``exchange.declare``, ``delete``, ``bind`` and ``unbind``."""

    def __init__(self, ctx: Amqp091Context) -> None:
        self.ctx = ctx

    def declare(self, ch: Channel, method: m.ExchangeDeclare) -> None:
        ctx = self.ctx
        name, vh = method.exchange, ctx.vhost
        if name == "":  # passive or not (RabbitMQ's check_not_default_exchange)
            raise ChannelError(ReplyCode.ACCESS_REFUSED, "operation not permitted on the default exchange")
        x = vh.exchange(name)
        if method.passive:
            if x is None:
                raise NotFound(f"no exchange '{name}' in vhost '{vh.name}'")
            ctx.ok(ch.number, method.no_wait, m.ExchangeDeclareOk())
            return
        if method.type not in EXCHANGE_TYPES:
            # RabbitMQ 4 closes the channel (3.x closed the connection with 503)
            raise PreconditionFailed(f"invalid exchange type '{method.type}'")
        if x is None and name.startswith("amq."):  # (an amq.* one re-declared as it is: fine)
            raise ChannelError(
                ReplyCode.ACCESS_REFUSED, f"exchange name '{name}' contains reserved prefix 'amq.*'"
            )
        ctx.authorize(name, "configure", "exchange")
        if x is not None:
            for arg, received, current in (
                ("type", method.type, x.type),
                ("durable", flag(method.durable), flag(x.durable)),
                ("auto_delete", flag(method.auto_delete), flag(x.auto_delete)),
                ("internal", flag(method.internal), flag(x.internal)),
            ):
                if received != current:
                    raise PreconditionFailed(
                        f"inequivalent arg '{arg}' for exchange '{name}' in vhost '{vh.name}': "
                        f"received '{received}' but current is '{current}'"
                    )
        else:
            vh.declare_exchange(
                name,
                method.type,
                durable=method.durable,
                auto_delete=method.auto_delete,
                internal=method.internal,
                arguments=method.arguments,
            )
        ctx.ok_committed(ch.number, method.no_wait, m.ExchangeDeclareOk())

    def delete(self, ch: Channel, method: m.ExchangeDelete) -> None:
        ctx = self.ctx
        name = method.exchange
        if name == "" or name.startswith("amq."):
            raise ChannelError(ReplyCode.ACCESS_REFUSED, f"operation not permitted on exchange '{name}'")
        ctx.authorize(name, "configure", "exchange")
        if ctx.vhost.exchange(name) is not None:  # deleting what is not there is fine (RabbitMQ)
            try:
                ctx.vhost.delete_exchange(name, if_unused=method.if_unused)
            except PreconditionFailed:
                raise PreconditionFailed(f"exchange '{name}' in vhost '{ctx.vhost.name}' in use") from None
        ctx.ok_committed(ch.number, method.no_wait, m.ExchangeDeleteOk())

    def bind(self, ch: Channel, method: m.ExchangeBind) -> None:
        bind(self.ctx, method.source, method.destination, method.routing_key, method.arguments, "exchange")
        self.ctx.ok_committed(ch.number, method.no_wait, m.ExchangeBindOk())

    def unbind(self, ch: Channel, method: m.ExchangeUnbind) -> None:
        unbind(self.ctx, method.source, method.destination, method.routing_key, method.arguments, "exchange")
        self.ctx.ok_committed(ch.number, method.no_wait, m.ExchangeUnbindOk())


# -- binding (exchange.bind and queue.bind)
def bind(ctx: Amqp091Context, source: str, dest: str, key: str, args: dict[str, Any], kind: str) -> None:
    """Bind ``dest`` (an exchange or a queue, by ``kind``) to the exchange ``source``."""
    _check_binding(ctx, source, dest, kind)
    ctx.vhost.bind(source, dest, key, args, destination_kind=kind)


def unbind(ctx: Amqp091Context, source: str, dest: str, key: str, args: dict[str, Any], kind: str) -> None:
    """Unbinding what is not bound succeeds, also where an end is gone (RabbitMQ 3.10 answers
    unbind-ok: an auto-delete exchange the broker removed with its last binding, a deleted
    queue); the default exchange, permissions and another connection's exclusive queue
    still fail."""
    try:
        _check_binding(ctx, source, dest, kind)
    except NotFound:
        return
    try:
        ctx.vhost.unbind(source, dest, key, args, destination_kind=kind)
    except NotFound:
        pass


def _check_binding(ctx: Amqp091Context, source: str, dest: str, kind: str) -> None:
    """The user may write to the destination and read the source (RabbitMQ's permissions
    for binding and unbinding, checked first as RabbitMQ does); both ends exist."""
    if source == "":
        raise ChannelError(ReplyCode.ACCESS_REFUSED, "operation not permitted on the default exchange")
    ctx.authorize(dest, "write", "exchange" if kind == "exchange" else "queue")
    ctx.authorize(source, "read", "exchange")
    if ctx.vhost.exchange(source) is None:
        raise NotFound(f"no exchange '{source}' in vhost '{ctx.vhost.name}'")
    if kind == "exchange":
        if ctx.vhost.exchange(dest) is None:
            raise NotFound(f"no exchange '{dest}' in vhost '{ctx.vhost.name}'")
    else:
        ctx.queue(dest)


def flag(v: Any) -> str:
    """A flag as RabbitMQ's inequivalence texts show it."""
    return "true" if v else "false"
