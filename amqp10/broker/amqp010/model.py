"""The 0-10 front end's ``exchange.*`` and ``queue.*`` commands, carried out on the core's
virtual host. Each returns the struct its ``execution.result`` carries, or None.

Queue arguments: Qpid's (``qpid.max_count``, ``qpid.policy_type``, ``qpid.priorities``,
``qpid.group_header_key``, ``qpid.last_value_queue_key``… the core's table of them is in
core/arguments.py), ``no-local`` (:mod:`amqp10.broker.core.qpid_queues`) and ``x-*``
arguments, RabbitMQ's, pass to the core; other ``qpid.*`` arguments (the C++ broker's own
features) are ignored, as the C++ broker ignores what it does not know.
A queue's ``alternate-exchange`` is its dead-letter exchange, and where its messages go
when it is deleted, acquired ones too (the core's ``alternate-exchange`` argument).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from ...amqp010 import Compound, result_struct
from ..core import NodeElsewhere, NotFound, PreconditionFailed, Queue, Stream
from ..core.arguments import is_known
from ..core.exchanges import Exchange
from ..core.qpid_queues import ALTERNATE_EXCHANGE
from .context import Amqp010Context, CommandError
from .session import Amqp010Session

__all__ = ["EXCHANGE_TYPES", "ExchangeCommands", "QueueCommands", "queue_arguments"]

EXCHANGE_TYPES: Final = frozenset({"direct", "fanout", "topic", "headers"})
_POLICY_TYPES: Final = ("reject", "ring")


def queue_arguments(arguments: Mapping[str, Any] | None, alternate: str | None) -> dict[str, Any]:
    """A 0-10 ``queue.declare``'s arguments as the core's (see the module's docstring)."""
    out: dict[str, Any] = {}
    for k, v in (arguments or {}).items():
        if k == "qpid.policy_type" and v not in _POLICY_TYPES:
            continue  # (flow_to_disk, ring_strict: the C++ broker's own)
        if is_known(k) or (k.startswith("x-") and not k.startswith("x-qpid-")):
            out[k] = v
    if alternate:
        out["x-dead-letter-exchange"] = alternate  # (rejected messages go there)
        out[ALTERNATE_EXCHANGE] = alternate  # (and a deleted queue's)
    return out


class ExchangeCommands:
    """``exchange.declare``, ``delete``, ``query``, ``bind``, ``unbind`` and ``bound``."""

    def __init__(self, ctx: Amqp010Context) -> None:
        self.ctx = ctx

    def declare(self, s: Amqp010Session, c: Compound) -> None:
        ctx, vh = self.ctx, self.ctx.vhost
        name = c.get("exchange", "")
        if not name:
            raise CommandError("illegal-argument", "an exchange name is required")
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
            if alternate and alternate != x.alternate:
                raise CommandError(
                    "not-allowed",
                    f"exchange '{name}' in vhost '{vh.name}' exists with another alternate exchange",
                )
            return
        if name.startswith(("amq.", "qpid.")):
            raise CommandError(
                "not-allowed", f"exchange name '{name}' has a reserved prefix ('amq.', 'qpid.')"
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
            raise CommandError("invalid-argument", "the default exchange cannot be named here")
        ctx.authorize(name, "configure", "exchange")
        vh = ctx.vhost
        users = [x.name for x in vh.exchanges.values() if x.alternate == name and x.name != name]
        users += [
            q.name
            for q in vh.queues()
            if getattr(q, "arguments", {}).get("x-dead-letter-exchange") == name
        ]
        if users:
            raise CommandError(
                "not-allowed",
                f"exchange '{name}' is the alternate exchange of {', '.join(sorted(users))}",
            )
        vh.delete_exchange(name, if_unused=bool(c["if_unused"]))

    def query(self, s: Amqp010Session, c: Compound) -> Compound:
        x = self.ctx.vhost.exchange(c.get("name", ""))
        if x is None:
            return result_struct("exchange-query-result", not_found=True)
        return result_struct(
            "exchange-query-result", type=x.type, durable=x.durable, arguments=dict(x.arguments)
        )

    def bind(self, s: Amqp010Session, c: Compound) -> None:
        source, queue = self._binding(s, c)
        arguments = c.get("arguments", {})
        x = self.ctx.vhost.exchange(source)
        if x is not None and x.type == "headers" and "x-match" not in (arguments or {}):
            # (Qpid's broker has no default: RabbitMQ's "all" is 0-9-1's)
            raise CommandError(
                "internal-error",
                f"a binding to headers exchange '{source}' needs x-match ('all' or 'any')",
            )
        self.ctx.vhost.bind(source, queue, c.get("binding_key", ""), arguments)

    def unbind(self, s: Amqp010Session, c: Compound) -> None:
        """A 0-10 binding is its exchange, queue and key (``unbind`` has no arguments): the
        bindings with that key go whatever their arguments."""
        source, queue = self._binding(s, c)
        key = c.get("binding_key", "")
        if not self.ctx.vhost.unbind_key(source, queue, key):
            raise NotFound(
                f"no binding from '{source}' to '{queue}' with key '{key}' in vhost '{self.ctx.vhost.name}'"
            )

    def _binding(self, s: Amqp010Session, c: Compound) -> tuple[str, str]:
        ctx = self.ctx
        source, queue = c.get("exchange", ""), c.get("queue", "")
        if not source:
            raise CommandError("invalid-argument", "the default exchange cannot be named here")
        if ctx.vhost.exchange(source) is None:
            raise NotFound(f"no exchange '{source}' in vhost '{ctx.vhost.name}'")
        ctx.queue(queue, s)
        ctx.authorize(queue, "write", "queue")
        ctx.authorize(source, "read", "exchange")
        return source, queue

    def bound(self, s: Amqp010Session, c: Compound) -> Compound | None:
        """Which of the exchange, queue, binding key and arguments named are not there, or not
        bound (a queue not named: any queue; a key not named: any key). A queue another
        worker owns: its owner says whether it is there, its stand-in holds its bindings."""
        vh = self.ctx.vhost
        name, queue = c.get("exchange", ""), c.get("queue")
        x = vh.exchange(name)
        elsewhere = self.ctx.elsewhere(queue or "")
        if elsewhere is None:
            return _bound(x, queue, vh.queue(queue) if queue else None, c)

        def answered(answer: Callable[[], tuple[int, int]]) -> Compound:
            try:
                answer()
            except NotFound:
                return _bound(x, queue, None, c)
            return _bound(x, queue, elsewhere, c)

        self.ctx.later(elsewhere.ask_status, answered)
        return None


def _bound(
    x: Exchange | None, queue: str | None, q: Queue | Stream | NodeElsewhere | None, c: Compound
) -> Compound:
    """``exchange.bound``'s result for exchange ``x`` and queue ``q`` (None: not there)."""
    key, args = c.get("binding_key"), c.get("arguments")
    flags: dict[str, bool] = {}
    if x is None:
        flags["exchange_not_found"] = True
    if queue and q is None:
        flags["queue_not_found"] = True
    if x is not None and not (queue and q is None):
        # (a stand-in is bound as its queue: vhost.bind)
        bindings = list(x.bindings_to(q)) if q is not None else []
        if q is not None and not bindings:
            flags["queue_not_matched"] = True
        bindings = bindings or list(x.bindings.values())  # (a queue not bound: any queue's)
        if key is not None and not any(b.key == key for b in bindings):
            flags["key_not_matched"] = True
        if args and not any(_args_match(b.arguments, args) for b in bindings):
            flags["args_not_matched"] = True
    return result_struct("exchange-bound-result", **flags)


def _args_match(bound: Mapping[str, Any] | None, asked: Mapping[str, Any]) -> bool:
    have = dict(bound or {})
    return all(have.get(k) == v for k, v in asked.items())


class QueueCommands:
    """``queue.declare``, ``delete``, ``purge`` and ``query`` (of a queue another worker owns:
    answered by its owner, through :attr:`.context.Amqp010Context.later`)."""

    def __init__(self, ctx: Amqp010Context) -> None:
        self.ctx = ctx

    def declare(self, s: Amqp010Session, c: Compound) -> None:
        ctx, vh = self.ctx, self.ctx.vhost
        name = c.get("queue", "")
        if not name:
            raise CommandError("illegal-argument", "a queue name is required")
        elsewhere = ctx.elsewhere(name)
        if elsewhere is not None and (c["passive"] or not c["exclusive"]):
            self._declare_elsewhere(s, c, elsewhere)
            return
        if c["passive"]:  # any session may look (request/reply); exclusive: only its owner
            q = vh.queue(name)
            if q is None:
                raise NotFound(f"no queue '{name}' in vhost '{vh.name}'")
            if c["exclusive"] and not (isinstance(q, Queue) and q.owner is s):
                raise _not_exclusive(name, vh.name)
            return
        alternate = c.get("alternate_exchange")
        if alternate and vh.exchange(alternate) is None:
            raise NotFound(f"no alternate exchange '{alternate}' in vhost '{vh.name}'")
        existing = vh.queue(name)
        if existing is not None:
            ctx.queue(name, s)  # (another session's exclusive queue: resource-locked)
            if c["exclusive"] and isinstance(existing, Queue) and existing.owner is None:
                raise _exists_shared(name, vh.name)
            return
        if name.startswith("amq."):
            raise CommandError("not-allowed", f"queue name '{name}' has the reserved prefix 'amq.'")
        ctx.authorize(name, "configure", "queue")
        try:
            q = vh.declare_queue(
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
        if c["exclusive"] and ctx.broker.metadata is not None:
            self._placed(q)

    def _placed(self, q: Queue | Stream) -> None:
        """Complete an exclusive declaration once its placement is in the metadata's order
        (several workers): if another worker's placement of the name came first, the queue
        made here is gone again (workers/placing.py) and the declaration is refused as
        locked, as on one broker when another session declared it first."""
        ctx, vh = self.ctx, self.ctx.vhost

        def answer(_: Callable[[], None]) -> None:
            if vh.nodes.get(q.name) is not q:
                raise _not_exclusive(q.name, vh.name)

        ctx.after_order(answer)

    def _declare_elsewhere(self, s: Amqp010Session, c: Compound, q: NodeElsewhere) -> None:
        """``queue.declare`` of a queue another worker owns: done (or, passive, looked for)
        there; an exclusive one is made here, on its session's worker, so only a passive
        exclusive declare comes here (and is refused: the owner's queue is no session's)."""
        ctx, vh = self.ctx, self.ctx.vhost
        name = q.name
        if c["passive"]:

            def looked(answer: Callable[[], tuple[int, int]]) -> None:
                answer()
                if c["exclusive"]:
                    raise _not_exclusive(name, vh.name)

            ctx.later(q.ask_status, looked)
            return
        alternate = c.get("alternate_exchange")
        if alternate and vh.exchange(alternate) is None:
            raise NotFound(f"no alternate exchange '{alternate}' in vhost '{vh.name}'")
        if name.startswith("amq."):
            raise CommandError("not-allowed", f"queue name '{name}' has the reserved prefix 'amq.'")
        ctx.authorize(name, "configure", "queue")
        arguments = queue_arguments(c.get("arguments"), alternate)

        def declared(answer: Callable[[], tuple[int, int]]) -> None:
            try:
                answer()
            except PreconditionFailed as exc:
                raise CommandError("invalid-argument", str(exc)) from None

        ctx.later(
            lambda answered: q.ask_declare(
                durable=bool(c["durable"]),
                arguments=arguments,
                auto_delete=bool(c["auto_delete"]),
                answered=answered,
            ),
            declared,
        )

    def delete(self, s: Amqp010Session, c: Compound) -> None:
        ctx = self.ctx
        name = c.get("queue", "")
        elsewhere = ctx.elsewhere(name)
        if elsewhere is not None:  # (its owner checks if-unused and if-empty)
            ctx.authorize(name, "configure", "queue")
            ctx.later(
                lambda answered: elsewhere.ask_delete(
                    if_unused=bool(c["if_unused"]), if_empty=bool(c["if_empty"]), answered=answered
                ),
                _done,
            )
            return
        q = ctx.queue(name, s)
        ctx.authorize(name, "configure", "queue")
        where = f"queue '{name}' in vhost '{ctx.vhost.name}'"
        if c["if_unused"] and q.consumers:
            raise PreconditionFailed(f"{where} is in use")
        if c["if_empty"] and q.count:
            raise PreconditionFailed(f"{where} is not empty")
        ctx.vhost.delete_node(name)  # (its alternate exchange takes what is left: 0-10 §11.2)

    def purge(self, s: Amqp010Session, c: Compound) -> None:
        ctx = self.ctx
        elsewhere = ctx.elsewhere(c.get("queue", ""))
        if elsewhere is not None:
            ctx.authorize(elsewhere.name, "read", "queue")
            ctx.later(elsewhere.ask_purge, _done)
            return
        q = ctx.queue(c.get("queue", ""), s)
        ctx.authorize(q.name, "read", "queue")
        if not isinstance(q, Queue):
            raise CommandError("not-allowed", f"queue '{q.name}' is a stream: it cannot be purged")
        q.purge()

    def query(self, s: Amqp010Session, c: Compound) -> Compound | None:
        name = c.get("queue", "")
        q = self.ctx.vhost.queue(name)
        elsewhere = self.ctx.elsewhere(name)
        if elsewhere is None:
            if q is None:
                return _no_queue()
            return _query_result(q, q.count, len(q.consumers))

        def counted(answer: Callable[[], tuple[int, int]]) -> Compound:
            try:
                messages, consumers = answer()
            except NotFound:
                return _no_queue()
            # (what it was declared with: this worker's record of it, if it has one)
            return _query_result(q if q is not None else elsewhere, messages, consumers)

        self.ctx.later(elsewhere.ask_status, counted)
        return None


def _done(answer: Callable[[], object]) -> None:
    """What finishes a command whose owner's answer has no result to give: its refusal."""
    answer()


def _not_exclusive(name: str, vhost: str) -> CommandError:
    return CommandError(
        "resource-locked", f"queue '{name}' in vhost '{vhost}' is not exclusive to this session"
    )


def _exists_shared(name: str, vhost: str) -> CommandError:
    return CommandError(
        "resource-locked", f"queue '{name}' in vhost '{vhost}' exists and is not exclusive"
    )


def _no_queue() -> Compound:
    return result_struct("queue-query-result", message_count=0, subscriber_count=0)


def _query_result(q: Queue | Stream | NodeElsewhere, messages: int, consumers: int) -> Compound:
    """``queue.query``'s result for ``q`` (its counts as given: its owner's, for a queue
    another worker owns)."""
    args = dict(getattr(q, "arguments", None) or {})
    return result_struct(
        "queue-query-result",
        queue=q.name,
        alternate_exchange=args.get("x-dead-letter-exchange"),
        durable=bool(getattr(q, "durable_node", True)),
        exclusive=isinstance(q, Queue) and q.owner is not None,
        auto_delete=isinstance(q, Queue) and q.auto_delete,
        arguments=args,
        message_count=messages,
        subscriber_count=consumers,
    )
