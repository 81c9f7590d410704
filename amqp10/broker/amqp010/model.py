"""The 0-10 front end's ``exchange.*`` and ``queue.*`` commands, carried out on the core's
virtual host. Each returns the struct its ``execution.result`` carries, or None.

Queue arguments: Qpid's ``qpid.max_count``, ``qpid.max_size`` and ``qpid.policy_type``
(``reject``, ``ring``) become the core's ``x-max-length``, ``x-max-length-bytes`` and
``x-overflow``; ``x-*`` arguments pass through as RabbitMQ's; other ``qpid.*`` arguments
(the C++ broker's own features) are ignored, as the C++ broker ignores what it does not know.
A queue's ``alternate-exchange`` is its dead-letter exchange.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ...amqp010 import Compound, result_struct
from ..core import Exchange, NotFound, PreconditionFailed, Queue
from .context import Amqp010Context, CommandError
from .session import Amqp010Session

__all__ = ["EXCHANGE_TYPES", "ExchangeCommands", "QueueCommands", "queue_arguments"]

EXCHANGE_TYPES: Final = frozenset({"direct", "fanout", "topic", "headers"})
_POLICY_TYPES: Final = {"reject": "reject-publish", "ring": "drop-head"}


def queue_arguments(arguments: Mapping[str, Any] | None, alternate: str | None) -> dict[str, Any]:
    """A 0-10 ``queue.declare``'s arguments as the core's (see the module's docstring)."""
    out: dict[str, Any] = {}
    for k, v in (arguments or {}).items():
        if k == "qpid.max_count" and v:
            out["x-max-length"] = int(v)
        elif k == "qpid.max_size" and v:
            out["x-max-length-bytes"] = int(v)
        elif k == "qpid.policy_type" and str(v) in _POLICY_TYPES:
            out["x-overflow"] = _POLICY_TYPES[str(v)]
        elif k.startswith("x-"):
            out[k] = v
    if alternate:
        out["x-dead-letter-exchange"] = alternate
    return out


class ExchangeCommands:
    """``exchange.declare``, ``delete``, ``query``, ``bind``, ``unbind`` and ``bound``."""

    def __init__(self, ctx: Amqp010Context) -> None:
        self.ctx = ctx

    def declare(self, s: Amqp010Session, c: Compound) -> None:
        ctx, vh = self.ctx, self.ctx.vhost
        name = c.get("exchange", "")
        if not name:
            raise CommandError("invalid-argument", "an exchange name is required")
        x = vh.exchange(name)
        if c["passive"]:
            if x is None:
                raise NotFound(f"no exchange '{name}' in vhost '{vh.name}'")
            return
        kind = c.get("type", "")
        if kind not in EXCHANGE_TYPES:
            raise CommandError(
                "not-found",
                f"exchange type '{kind}' is not known (one of {', '.join(sorted(EXCHANGE_TYPES))})",
            )
        alternate = c.get("alternate_exchange")
        if alternate and vh.exchange(alternate) is None:
            raise NotFound(f"no alternate exchange '{alternate}' in vhost '{vh.name}'")
        if x is not None:
            if x.type != kind:
                raise CommandError(
                    "not-allowed",
                    f"exchange '{name}' in vhost '{vh.name}' has type '{x.type}', not '{kind}'",
                )
            return
        if name.startswith("amq."):
            raise CommandError(
                "not-allowed", f"exchange name '{name}' has the reserved prefix 'amq.'"
            )
        ctx.authorize(name, "configure", "exchange")
        vh.declare_exchange(
            name,
            kind,
            durable=bool(c["durable"]),
            auto_delete=bool(c["auto_delete"]),
            alternate=alternate or None,
            arguments=c.get("arguments", {}),
        )

    def delete(self, s: Amqp010Session, c: Compound) -> None:
        ctx = self.ctx
        name = c.get("exchange", "")
        if not name:
            raise CommandError("invalid-argument", "an exchange name is required")
        ctx.authorize(name, "configure", "exchange")
        ctx.vhost.delete_exchange(name, if_unused=bool(c["if_unused"]))

    def query(self, s: Amqp010Session, c: Compound) -> Compound:
        x = self.ctx.vhost.exchange(c.get("name", ""))
        if x is None:
            return result_struct("exchange-query-result", not_found=True)
        return result_struct(
            "exchange-query-result", type=x.type, durable=x.durable, arguments=dict(x.arguments)
        )

    def bind(self, s: Amqp010Session, c: Compound) -> None:
        source, queue = self._binding(s, c)
        self.ctx.vhost.bind(source, queue, c.get("binding_key", ""), c.get("arguments", {}))

    def unbind(self, s: Amqp010Session, c: Compound) -> None:
        source, queue = self._binding(s, c)
        self.ctx.vhost.unbind(source, queue, c.get("binding_key", ""), None)

    def _binding(self, s: Amqp010Session, c: Compound) -> tuple[str, str]:
        ctx = self.ctx
        source, queue = c.get("exchange", ""), c.get("queue", "")
        if not source:
            raise CommandError("invalid-argument", "an exchange name is required")
        if ctx.vhost.exchange(source) is None:
            raise NotFound(f"no exchange '{source}' in vhost '{ctx.vhost.name}'")
        ctx.queue(queue, s)
        ctx.authorize(queue, "write", "queue")
        ctx.authorize(source, "read", "exchange")
        return source, queue

    def bound(self, s: Amqp010Session, c: Compound) -> Compound:
        vh = self.ctx.vhost
        x: Exchange | None = vh.exchange(c.get("exchange", "")) if c.get("exchange") else None
        q = vh.queue(c.get("queue", ""))
        flags: dict[str, bool] = {}
        if c.get("exchange") and x is None:
            flags["exchange_not_found"] = True
        if q is None:
            flags["queue_not_found"] = True
        if x is not None and q is not None:
            bindings = list(x.bindings_to(q))
            if not bindings:
                flags["queue_not_matched"] = True
            key = c.get("binding_key")
            if key is not None and not any(b.key == key for b in bindings):
                flags["key_not_matched"] = True
            args = c.get("arguments")
            if args and not any(dict(b.arguments or {}) == args for b in bindings):
                flags["args_not_matched"] = True
        return result_struct("exchange-bound-result", **flags)


class QueueCommands:
    """``queue.declare``, ``delete``, ``purge`` and ``query``."""

    def __init__(self, ctx: Amqp010Context) -> None:
        self.ctx = ctx

    def declare(self, s: Amqp010Session, c: Compound) -> None:
        ctx, vh = self.ctx, self.ctx.vhost
        name = c.get("queue", "")
        if not name:
            raise CommandError("invalid-argument", "a queue name is required")
        if c["passive"]:
            ctx.queue(name, s)
            return
        alternate = c.get("alternate_exchange")
        if alternate and vh.exchange(alternate) is None:
            raise NotFound(f"no alternate exchange '{alternate}' in vhost '{vh.name}'")
        existing = vh.queue(name)
        if existing is not None:
            ctx.queue(name, s)  # (another session's exclusive queue: resource-locked)
            if c["exclusive"] and isinstance(existing, Queue) and existing.owner is None:
                raise CommandError(
                    "resource-locked",
                    f"queue '{name}' in vhost '{vh.name}' exists and is not exclusive",
                )
            return
        if name.startswith("amq."):
            raise CommandError("not-allowed", f"queue name '{name}' has the reserved prefix 'amq.'")
        ctx.authorize(name, "configure", "queue")
        try:
            vh.declare_queue(
                name,
                durable=bool(c["durable"]),
                arguments=queue_arguments(c.get("arguments"), alternate),
                exclusive_owner=s if c["exclusive"] else None,
                # an exclusive queue goes with its session: auto-delete waits for that too
                # (qpid.messaging deletes a subscription's queue itself after cancelling)
                auto_delete=bool(c["auto_delete"]) and not c["exclusive"],
            )
        except PreconditionFailed as exc:
            raise CommandError("invalid-argument", str(exc)) from None

    def delete(self, s: Amqp010Session, c: Compound) -> None:
        ctx = self.ctx
        name = c.get("queue", "")
        q = ctx.queue(name, s)
        ctx.authorize(name, "configure", "queue")
        where = f"queue '{name}' in vhost '{ctx.vhost.name}'"
        if c["if_unused"] and q.consumers:
            raise PreconditionFailed(f"{where} is in use")
        if c["if_empty"] and q.count:
            raise PreconditionFailed(f"{where} is not empty")
        ctx.vhost.delete_node(name)

    def purge(self, s: Amqp010Session, c: Compound) -> None:
        ctx = self.ctx
        q = ctx.queue(c.get("queue", ""), s)
        ctx.authorize(q.name, "read", "queue")
        if not isinstance(q, Queue):
            raise CommandError("not-allowed", f"queue '{q.name}' is a stream: it cannot be purged")
        q.purge()

    def query(self, s: Amqp010Session, c: Compound) -> Compound:
        q = self.ctx.vhost.queue(c.get("queue", ""))
        if q is None:
            return result_struct("queue-query-result", message_count=0, subscriber_count=0)
        args = dict(getattr(q, "arguments", None) or {})
        return result_struct(
            "queue-query-result",
            queue=q.name,
            alternate_exchange=args.get("x-dead-letter-exchange"),
            durable=bool(getattr(q, "durable_node", True)),
            exclusive=isinstance(q, Queue) and q.owner is not None,
            auto_delete=isinstance(q, Queue) and q.auto_delete,
            arguments=args,
            message_count=q.count,
            subscriber_count=len(q.consumers),
        )
