"""RabbitMQ 3.10's equivalence of a re-declared queue with the queue as it is: the one home
of the comparison every path that declares a queue again goes through (0-9-1's
``queue.declare``, a declaration put to the queue's owner by another worker, the parent's
check of two workers' declarations of one name, the HTTP API's and RabbitMQ 4's management
``PUT``).

As ``rabbit_amqqueue:assert_equivalence/5`` (3.10.8) compares, in its order:

1. the exclusive owner (``check_exclusive_access(Q, Owner, strict)``): an exclusive queue
   declared again without ``exclusive``, or a queue (or stream) that is not exclusive
   declared again with it, is :class:`ResourceLocked`;
2. ``durable`` (an exclusive declaration declares it non-durable, as RabbitMQ's channel
   does: ``Durable = DurableDeclare andalso not ExclusiveDeclare``), then ``auto_delete``:
   a stream is durable and never auto-delete, so a stream declared again non-durable or
   auto-delete is refused as a queue would be;
3. the arguments each queue type's capabilities list (:data:`COMPARED`), each as
   ``rabbit_misc:assert_args_equivalence/4`` compares them: both left out, or of the same
   type class (every integer type and the decimal one class, the two floats another) and
   equal (``==``), or exactly the same term (``=:=``: a long string is the binary of its
   bytes, an integer is not the float of its value); a classic queue's ``x-queue-type``
   may be given or left out.

Each refusal is :class:`PreconditionFailed` with RabbitMQ's text (``inequivalent arg 'KEY'
for queue 'NAME' in vhost 'VHOST': received NEW but current is OLD``, ``rabbit_misc:val/1``
for each value), which each front end answers its own way (0-9-1: 406 with the text,
the HTTP API: 400 with it as the reason).

One departure: where both values are given and one is a decimal, RabbitMQ 3.10 crashes
the channel (``val/1`` takes the decimal's term ``{Scale, Digits}`` for a ``{Type, Value}``
pair and formats the integer scale with ``~s``: connection closed 541 INTERNAL_ERROR);
here the refusal is the 406 the comparison means, the decimal shown as its value and
type (``the value '1.5' of type 'decimal'``).

Values are named as RabbitMQ parses them from a 0-9-1 field table (``rabbit_binary_parser``):
the field type :mod:`amqp10.amqp091.fields` encodes each Python value as, worked out here
from the value's type (the core reaches no protocol engine), a value with no field type
(a 1.0 uuid, say) as the long string of its text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from ...management.model import queue_type
from .field_terms import parsed
from .queues import Queue
from .vhost import PreconditionFailed, ResourceLocked

if TYPE_CHECKING:
    from .streams import Stream
    from .vhost import VirtualHost

__all__ = ["COMPARED", "check_redeclared", "inequivalent_argument", "locked_text", "parsed"]

COMPARED: Final[dict[str, tuple[str, ...]]] = {
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


def locked_text(queue: str, vhost: str) -> str:
    """RabbitMQ's text for an exclusive queue another connection owns, or one declared with
    another ``exclusive`` than its own (``rabbit_amqqueue:check_exclusive_access/3``)."""
    return (
        f"cannot obtain exclusive access to locked queue '{queue}' in vhost '{vhost}'. "
        "It could be originally declared on another connection or the exclusive property "
        "value does not match that of the original declaration."
    )


def check_redeclared(
    vhost: VirtualHost,
    node: Queue | Stream,
    *,
    durable: bool,
    auto_delete: bool,
    exclusive: bool,
    arguments: Mapping[str, Any],
) -> None:
    """Refuse a declaration of ``node`` (a queue or stream of ``vhost``) that is not
    equivalent to it, in RabbitMQ's words (see the module's text): :class:`ResourceLocked`
    for ``exclusive`` other than the queue's, else :class:`PreconditionFailed`. Whether an
    exclusive queue is the declaring connection's own is the caller's to check (the
    connection knows itself)."""
    name = node.name
    where = f"queue '{name}' in vhost '{vhost.name}'"
    current_args: Mapping[str, Any]
    if isinstance(node, Queue):
        owned = node.owner is not None
        flags = (("durable", bool(node.durable_node)), ("auto_delete", bool(node.auto_delete)))
        current_args = node.arguments
    else:  # a stream: durable, never exclusive nor auto-delete
        owned = False
        flags = (("durable", True), ("auto_delete", False))
        current_args = vhost.stream_arguments.get(name, {})
    if bool(exclusive) != owned:  # RabbitMQ checks the owner first
        raise ResourceLocked(locked_text(name, vhost.name))
    declared = {"durable": bool(durable) and not exclusive, "auto_delete": bool(auto_delete)}
    for flag_name, current in flags:
        received = declared[flag_name]
        if received != current:
            raise PreconditionFailed(
                f"inequivalent arg '{flag_name}' for {where}: received '{_flag(received)}' but current is '{_flag(current)}'"
            )
    differs = inequivalent_argument(queue_type(current_args, stream=not isinstance(node, Queue)), arguments, current_args)
    if differs is not None:
        key, shown_new, shown_old = differs
        raise PreconditionFailed(f"inequivalent arg '{key}' for {where}: received {shown_new} but current is {shown_old}")


def inequivalent_argument(
    kind: str, received: Mapping[str, Any], current: Mapping[str, Any]
) -> tuple[str, str, str] | None:
    """The first of the arguments RabbitMQ compares for a queue of type ``kind`` (classic,
    quorum, stream) where ``received`` is not equivalent to ``current``: its name and the
    two values as RabbitMQ's text shows them (received, current); None: equivalent.

    RabbitMQ takes two given values as equivalent if they are of one type class and equal
    (``==``) or if they are the same term (``=:=``); each field type's term is of one
    Python type here (an integer type's an ``int``, a float type's a ``float``, a decimal's
    a tuple), so the first never holds where the second does not: the same term it is."""
    for key in COMPARED.get(kind, COMPARED["classic"]):  # (as rabbit_misc:assert_args_equivalence/4)
        new: Any = received.get(key, _ABSENT)
        old: Any = current.get(key, _ABSENT)
        if new is _ABSENT and old is _ABSENT:
            continue
        if new is not _ABSENT and old is not _ABSENT:
            new_type, new_term = parsed(new)
            old_type, old_term = parsed(old)
            if _same(new_term, old_term):
                continue
            return key, _alone(new_type, new_term, new), _alone(old_type, old_term, old)
        if key == "x-queue-type" and (old if new is _ABSENT else new) == "classic":
            continue  # a classic queue's type may be given or left out (rabbitmq-common#341)
        return key, _typed(new), _typed(old)
    return None


def _flag(value: bool) -> str:
    return "true" if value else "false"


_ABSENT: Final = object()

def _same(a: Any, b: Any) -> bool:
    """Whether two Erlang terms are exactly equal (``=:=``: an integer is not the float of its value)."""
    if isinstance(a, (list, tuple)) and isinstance(b, type(a)):
        return len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


def _alone(type_name: str, term: Any, value: Any) -> str:
    """A value alone, as RabbitMQ's text gives it where both are given (``rabbit_misc:val/1``),
    but a decimal (see the module's text)."""
    if type_name == "decimal":
        return f"the value '{format(value, 'f')}' of type 'decimal'"
    return "none" if term == "undefined" else f"'{_shown(term)}'"


def _typed(value: Any) -> str:
    """A value with its type, as RabbitMQ's text gives it where the other is left out
    (``rabbit_misc:val/1``), or none."""
    if value is _ABSENT:
        return "none"
    type_name, term = parsed(value)
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
