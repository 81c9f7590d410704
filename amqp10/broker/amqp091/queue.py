"""The 0-9-1 front end's ``queue.*`` methods: declare, bind, unbind, purge, delete.

Carried out on the connection's virtual host with RabbitMQ's checks and reply
texts: reserved ``amq.*`` names, equivalence of a re-declaration, exclusive
queues (owned by the connection's context), server-named queues.
"""

from __future__ import annotations

import secrets
import struct
from collections.abc import Callable
from typing import Any

from ...amqp091 import ReplyCode
from ...amqp091 import methods as m
from ...amqp091.fields import encode_value
from ...management.model import queue_type
from ..core import (
    NodeElsewhere,
    NotFound,
    PreconditionFailed,
    Queue,
    ResourceLocked,
    Stream,
    VirtualHost,
)
from ..core.replies import REPLY_TO
from .channel import Channel
from .context import Amqp091Context, ChannelError, locked_text
from .exchange import bind, flag, unbind

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
            _check_equivalent(ctx.vhost, q, method, q.name)
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
                _check_equivalent(vh, q, method, name)
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
                _check_equivalent(ctx.vhost, record, method, q.name)

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


_COMPARED: dict[str, tuple[str, ...]] = {
    "classic": (
        "x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
        "x-max-length", "x-max-length-bytes", "x-max-priority", "x-overflow", "x-queue-mode",
        "x-queue-version", "x-single-active-consumer", "x-queue-type", "x-queue-master-locator",
    ),
    "quorum": (
        "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-dead-letter-strategy", "x-expires",
        "x-max-length", "x-max-length-bytes", "x-max-in-memory-length", "x-max-in-memory-bytes",
        "x-overflow", "x-single-active-consumer", "x-queue-type", "x-quorum-initial-group-size",
        "x-delivery-limit", "x-message-ttl", "x-queue-leader-locator",
    ),
    "stream": (
        "x-max-length-bytes", "x-queue-type", "x-max-age", "x-stream-max-segment-size-bytes",
        "x-initial-cluster-size", "x-queue-leader-locator",
    ),
}  # fmt: skip
"""The arguments RabbitMQ 3.10 compares when a queue of each type is declared again, in its
order (``rabbit_queue_type:arguments(queue_arguments, Type)``, each type's ``capabilities()``;
``rabbit_amqqueue:assert_args_equivalence``): any other may differ or be left out."""

_FIELD_TYPES = {
    "t": "bool", "b": "byte", "B": "unsignedbyte", "s": "short", "u": "unsignedshort", "I": "signedint",
    "i": "unsignedint", "l": "long", "f": "float", "d": "double", "D": "decimal", "S": "longstr",
    "T": "timestamp", "F": "table", "A": "array", "V": "void", "x": "binary",
}  # fmt: skip
"""RabbitMQ's name of each field type (``rabbit_binary_parser``), as its texts give it."""

_ABSENT = object()
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


def _check_equivalent(vhost: VirtualHost, q: Queue | Stream, method: m.QueueDeclare, name: str) -> None:
    """A re-declaration must match the queue as it is (RabbitMQ's inequivalence texts); a
    stream's arguments are those it has (``VirtualHost.stream_arguments``)."""
    vh = vhost.name
    if isinstance(q, Queue):
        if bool(method.exclusive) != (q.owner is not None):  # RabbitMQ checks the owner first
            raise ResourceLocked(locked_text(name, vh))
        checks = [("auto_delete", method.auto_delete, q.auto_delete)]
        if q.owner is None:
            checks.insert(0, ("durable", method.durable, q.durable_node))
        for arg, received, current in checks:
            if bool(received) != bool(current):
                raise PreconditionFailed(
                    f"inequivalent arg '{arg}' for queue '{name}' in vhost '{vh}': "
                    f"received '{flag(received)}' but current is '{flag(current)}'"
                )
        current_args = q.arguments
    else:
        current_args = vhost.stream_arguments.get(name, {})
    compared = _COMPARED.get(queue_type(current_args, stream=isinstance(q, Stream)), _COMPARED["classic"])
    for key in compared:  # (as rabbit_misc:assert_args_equivalence/4)
        new, old = method.arguments.get(key, _ABSENT), current_args.get(key, _ABSENT)
        if new is _ABSENT and old is _ABSENT:
            continue
        if new is not _ABSENT and old is not _ABSENT:
            # (names of their own: the compiled build checks a name's one type, and the loop
            # above has ``received`` and ``current`` bool)
            new_term, old_term = _parsed(new)[1], _parsed(old)[1]
            if _same(new_term, old_term):
                continue
            shown = _val(new_term), _val(old_term)  # (the values alone: their types are not said)
        elif key == "x-queue-type" and (old if new is _ABSENT else new) == "classic":
            continue  # a classic queue's type may be given or left out (rabbitmq-common#341)
        else:
            shown = _typed_val(new), _typed_val(old)
        raise PreconditionFailed(
            f"inequivalent arg '{key}' for queue '{name}' in vhost '{vh}': received {shown[0]} but current is {shown[1]}"
        )


def _parsed(value: Any) -> tuple[str, Any]:
    """``value`` as RabbitMQ parses it from a field table: the name of its field type and its
    Erlang term (a binary as ``bytes``, an atom as ``str``, a tuple or list as one)."""
    buf = bytearray()
    try:
        encode_value(buf, value)
    except (TypeError, ValueError, OverflowError, struct.error):  # (no field type: e.g. a 1.0 uuid)
        return "longstr", str(value).encode()
    code = chr(buf[0])
    term: Any
    if code in "Sx":
        term = value.encode() if isinstance(value, str) else bytes(value)
    elif code == "t":
        term = "true" if value else "false"
    elif code == "V":
        term = "undefined"
    elif code == "D":
        term = (buf[1], _U32.unpack_from(buf, 2)[0])
    elif code == "T":
        term = _U64.unpack_from(buf, 1)[0]
    elif code == "F":
        term = [(k.encode(), *_parsed(v)) for k, v in value.items()]
    elif code == "A":
        term = [_parsed(v) for v in value]
    elif code in "fd":
        term = float(value)
    else:
        term = int(value)
    return _FIELD_TYPES[code], term


def _same(a: Any, b: Any) -> bool:
    """Whether two Erlang terms are exactly equal (``=:=``: an integer is not the float of its value)."""
    if isinstance(a, (list, tuple)) and isinstance(b, type(a)):
        return len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


def _val(term: Any) -> str:
    """An argument's value alone as RabbitMQ's texts give it (``rabbit_misc:val/1``)."""
    return "none" if term == "undefined" else f"'{_shown(term)}'"


def _typed_val(value: Any) -> str:
    """An argument with its type as RabbitMQ's texts give it (``rabbit_misc:val/1``), or none."""
    if value is _ABSENT:
        return "none"
    type_name, term = _parsed(value)
    return f"the value '{_shown(term)}' of type '{type_name}'"


def _shown(term: Any) -> str:
    """An Erlang term as ``rabbit_misc:val/1`` prints it: a binary's text (``~s``), else ``~p``
    (on one line)."""
    return term.decode(errors="replace") if isinstance(term, bytes) else _printed(term)


def _printed(term: Any) -> str:
    """An Erlang term as ``~p`` prints it (on one line)."""
    if isinstance(term, bytes):
        printable = all(32 <= c < 127 and c not in b'"\\' for c in term)
        return f'<<"{term.decode()}">>' if printable else f"<<{','.join(map(str, term))}>>"
    if isinstance(term, tuple):
        return "{" + ",".join(map(_printed, term)) + "}"
    if isinstance(term, list):
        return "[" + ",".join(map(_printed, term)) + "]"
    return str(term)
