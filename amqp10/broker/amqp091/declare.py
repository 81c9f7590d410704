"""The 0-9-1 front end's ``exchange.*`` and ``queue.*`` methods: declare, delete, bind, purge.

Methods of :class:`.handler.Amqp091Handler` (bound there as class attributes),
carried out on the connection's virtual host with RabbitMQ's checks and reply
texts: reserved ``amq.*`` names, equivalence of a re-declaration, exclusive
queues, and the permissions binding needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ...amqp091 import ReplyCode
from ...amqp091 import methods as m
from ..core import Exchange, NotFound, PreconditionFailed, Queue, ResourceLocked, Stream
from .channel import REPLY_TO, ChannelContext, ChannelError, _token

if TYPE_CHECKING:
    from .handler import Amqp091Handler

EXCHANGE_TYPES: Final = frozenset({"direct", "fanout", "topic", "headers"})


# -- exchanges (methods of Amqp091Handler, bound there as class attributes)
def exchange_declare(self: Amqp091Handler, ch: ChannelContext, method: m.ExchangeDeclare) -> None:
    name, vh = method.exchange, self.vhost
    x = vh.exchange(name)
    if method.passive:
        if x is None:
            raise NotFound(f"no exchange '{name}' in vhost '{vh.name}'")
        self._ok(ch, method.no_wait, m.ExchangeDeclareOk())
        return
    if method.type not in EXCHANGE_TYPES:
        # RabbitMQ 4 closes the channel (3.x closed the connection with 503)
        raise PreconditionFailed(f"invalid exchange type '{method.type}'")
    if name == "" or name.startswith("amq."):
        raise ChannelError(
            ReplyCode.ACCESS_REFUSED, f"exchange name '{name}' contains reserved prefix 'amq.*'"
        )
    self._authorize(name, "configure", "exchange")
    if x is not None:
        for arg, received, current in (
            ("type", method.type, x.type),
            ("durable", _flag(method.durable), _flag(x.durable)),
            ("auto_delete", _flag(method.auto_delete), _flag(x.auto_delete)),
            ("internal", _flag(method.internal), _flag(x.internal)),
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
    self._ok_committed(ch, method.no_wait, m.ExchangeDeclareOk())


def exchange_delete(self: Amqp091Handler, ch: ChannelContext, method: m.ExchangeDelete) -> None:
    name = method.exchange
    if name == "" or name.startswith("amq."):
        raise ChannelError(ReplyCode.ACCESS_REFUSED, f"operation not permitted on exchange '{name}'")
    self._authorize(name, "configure", "exchange")
    if self.vhost.exchange(name) is not None:  # deleting what is not there is fine (RabbitMQ)
        try:
            self.vhost.delete_exchange(name, if_unused=method.if_unused)
        except PreconditionFailed:
            raise PreconditionFailed(f"exchange '{name}' in vhost '{self.vhost.name}' in use") from None
    self._ok_committed(ch, method.no_wait, m.ExchangeDeleteOk())


def exchange_bind(self: Amqp091Handler, ch: ChannelContext, method: m.ExchangeBind) -> None:
    self._bind(method.source, method.destination, method.routing_key, method.arguments, "exchange")
    self._ok_committed(ch, method.no_wait, m.ExchangeBindOk())


def exchange_unbind(self: Amqp091Handler, ch: ChannelContext, method: m.ExchangeUnbind) -> None:
    self._unbind(method.source, method.destination, method.routing_key, method.arguments, "exchange")
    self._ok_committed(ch, method.no_wait, m.ExchangeUnbindOk())


def check_source(self: Amqp091Handler, source: str, kind: str) -> Exchange:
    if source == "":
        raise ChannelError(ReplyCode.ACCESS_REFUSED, "operation not permitted on the default exchange")
    x = self.vhost.exchange(source)
    if x is None:
        raise NotFound(f"no exchange '{source}' in vhost '{self.vhost.name}'")
    return x


def check_destination(self: Amqp091Handler, name: str, kind: str) -> None:
    if kind == "exchange":
        if self.vhost.exchange(name) is None:
            raise NotFound(f"no exchange '{name}' in vhost '{self.vhost.name}'")
    else:
        self._queue_node(name)


def check_binding(self: Amqp091Handler, source: str, dest: str, kind: str) -> None:
    """Both ends exist; the user may write to the destination and read the source
    (RabbitMQ's permissions for binding and unbinding)."""
    self._check_source(source, kind)
    self._check_destination(dest, kind)
    self._authorize(dest, "write", "exchange" if kind == "exchange" else "queue")
    self._authorize(source, "read", "exchange")


def bind(self: Amqp091Handler, source: str, dest: str, key: str, args: dict[str, Any], kind: str) -> None:
    self._check_binding(source, dest, kind)
    self.vhost.bind(source, dest, key, args, destination_kind=kind)


def unbind(self: Amqp091Handler, source: str, dest: str, key: str, args: dict[str, Any], kind: str) -> None:
    self._check_binding(source, dest, kind)
    try:
        self.vhost.unbind(source, dest, key, args, destination_kind=kind)
    except NotFound:
        pass  # unbinding what is not bound succeeds (RabbitMQ)


# -- queues
def queue_name(self: Amqp091Handler, ch: ChannelContext, name: str) -> str:
    if name:
        return name
    if ch.last_queue is None:
        raise NotFound("no previously declared queue")
    return ch.last_queue


def queue_node(self: Amqp091Handler, name: str) -> Queue | Stream:
    q = self.vhost.queue(name)
    if q is None:
        raise NotFound(f"no queue '{name}' in vhost '{self.vhost.name}'")
    if isinstance(q, Queue) and q.owner is not None and q.owner is not self:
        raise ResourceLocked(
            f"cannot obtain exclusive access to locked queue '{name}' in vhost '{self.vhost.name}'. "
            "It could be originally declared on another connection or the exclusive property value "
            "does not match that of the original declaration."
        )
    return q


def queue_declare(self: Amqp091Handler, ch: ChannelContext, method: m.QueueDeclare) -> None:
    vh = self.vhost
    name = method.queue
    if method.passive and name == REPLY_TO:  # it exists for every channel (RabbitMQ)
        self._ok(ch, method.no_wait, m.QueueDeclareOk(queue=REPLY_TO))
        return
    if method.passive:
        q = self._queue_node(self._queue_name(ch, name))
    else:
        if not name:
            name = "amq.gen-" + _token()
        elif name.startswith("amq."):
            raise ChannelError(ReplyCode.ACCESS_REFUSED, f"queue name '{name}' contains reserved prefix 'amq.*'")
        self._authorize(name, "configure", "queue")
        existing = vh.queue(name)
        if existing is not None:
            q = self._queue_node(name)
            self._check_equivalent(q, method, name)
        else:
            q = vh.declare_queue(
                name,
                durable=method.durable,
                arguments=method.arguments,
                exclusive_owner=self if method.exclusive else None,
                auto_delete=method.auto_delete,
            )
    ch.last_queue = q.name
    (self._ok if method.passive else self._ok_committed)(
        ch,
        method.no_wait,
        m.QueueDeclareOk(queue=q.name, message_count=q.count, consumer_count=len(q.consumers)),
    )


def check_equivalent(self: Amqp091Handler, q: Queue | Stream, method: m.QueueDeclare, name: str) -> None:
    vh = self.vhost.name
    if isinstance(q, Queue):
        checks = [("exclusive", method.exclusive, q.owner is not None), ("auto_delete", method.auto_delete, q.auto_delete)]
        if q.owner is None:
            checks.insert(0, ("durable", method.durable, q.durable_node))
        for arg, received, current in checks:
            if bool(received) != bool(current):
                raise PreconditionFailed(
                    f"inequivalent arg '{arg}' for queue '{name}' in vhost '{vh}': "
                    f"received '{_flag(received)}' but current is '{_flag(current)}'"
                )
        current_args = q.arguments
    else:
        current_args = {}
    for key in sorted(set(method.arguments) | set(current_args)):
        if key == "x-queue-type" and isinstance(q, Stream):
            continue
        new, old = method.arguments.get(key), current_args.get(key)
        if new != old:
            raise PreconditionFailed(
                f"inequivalent arg '{key}' for queue '{name}' in vhost '{vh}': "
                f"received {_describe(new)} but current is {_describe(old)}"
            )


def queue_bind(self: Amqp091Handler, ch: ChannelContext, method: m.QueueBind) -> None:
    name = self._queue_name(ch, method.queue)
    key = method.routing_key if method.routing_key or method.queue else name
    self._bind(method.exchange, name, key, method.arguments, "queue")
    self._ok_committed(ch, method.no_wait, m.QueueBindOk())


def queue_unbind(self: Amqp091Handler, ch: ChannelContext, method: m.QueueUnbind) -> None:
    name = self._queue_name(ch, method.queue)
    key = method.routing_key if method.routing_key or method.queue else name
    self._unbind(method.exchange, name, key, method.arguments, "queue")
    self._ok_committed(ch, False, m.QueueUnbindOk())


def queue_purge(self: Amqp091Handler, ch: ChannelContext, method: m.QueuePurge) -> None:
    q = self._queue_node(self._queue_name(ch, method.queue))
    self._authorize(q.name, "read", "queue")
    if not isinstance(q, Queue):
        raise PreconditionFailed(f"queue '{q.name}' in vhost '{self.vhost.name}' is a stream: it cannot be purged")
    self._ok_committed(ch, method.no_wait, m.QueuePurgeOk(message_count=q.purge()))


def queue_delete(self: Amqp091Handler, ch: ChannelContext, method: m.QueueDelete) -> None:
    name = self._queue_name(ch, method.queue)
    if self.vhost.queue(name) is None:  # deleting what is not there is fine (RabbitMQ)
        self._ok(ch, method.no_wait, m.QueueDeleteOk(message_count=0))
        return
    q = self._queue_node(name)
    self._authorize(name, "configure", "queue")
    where = f"queue '{name}' in vhost '{self.vhost.name}'"
    if method.if_unused and q.consumers:
        raise PreconditionFailed(f"{where} in use")
    if method.if_empty and q.count:
        raise PreconditionFailed(f"{where} not empty")
    count = q.count
    self.vhost.delete_node(name)
    self._ok_committed(ch, method.no_wait, m.QueueDeleteOk(message_count=count))


def _flag(v: Any) -> str:
    return "true" if v else "false"


def _describe(v: Any) -> str:
    return "none" if v is None else f"the value '{v}'"
