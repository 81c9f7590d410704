"""RabbitMQ's queues, exchanges and bindings (its JSON fields) onto :class:`~.api.Management`.

RabbitMQ's HTTP API (:mod:`amqp10.broker.rabbitmq_api`) and its AMQP 1.0 management
node (HTTP over AMQP, :mod:`amqp10.broker.amqp1.rabbitmq_management`) take the same
fields for the same entities — a queue's ``durable``, ``auto_delete``, ``exclusive``,
``arguments`` (its ``x-queue-type`` classic, quorum or stream); an exchange's ``type``,
``durable``, ``auto_delete``, ``internal``, ``arguments``; a binding's source,
destination, key and arguments — and declare as RabbitMQ declares: an equal
declaration of an existing entity is fine, a different one is refused
(:class:`Inequivalent`, RabbitMQ's ``PRECONDITION_FAILED``: the HTTP API answers it
400, the 1.0 node 409). This module is that one mapping; each front end shapes the
answers and the errors its own way.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

from ...field_types import Int64
from ...management import model
from ..core import ModelError
from ..core.equivalence import check_redeclared
from .access import Caller
from .api import Management
from .errors import BadRequest, Conflict, NotFoundError

__all__ = [
    "RABBITMQ_VERSION",
    "Inequivalent",
    "amqp_table",
    "binding_of",
    "declare_exchange",
    "declare_queue",
    "exchange_name",
    "find_queue",
    "node_name",
    "queue_type",
    "rabbit_flag",
]

RABBITMQ_VERSION = "4.2.0"
"""The RabbitMQ version whose conventions the broker follows: what its HTTP API's overview
reports and what a 1.0 open's ``version`` says (RabbitMQ 4's clients turn features on by
it: stream filters 4.1, SQL filters and direct reply-to 4.2)."""

QueueFound = tuple[dict[str, Any], str]
"""A queue's management attributes and its entity type (``queue`` or ``stream``)."""


class Inequivalent(Conflict):
    """A declaration that differs from the existing entity (RabbitMQ's PRECONDITION_FAILED)."""


def rabbit_flag(value: Any, name: str, default: bool) -> bool:
    """A boolean as RabbitMQ takes it: true/false, or the strings ``rabbitmqadmin`` sends."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise BadRequest(f"{name} must be true or false, not {value!r}")


def _arguments(value: Any) -> dict[str, Any]:
    if value is None or value == "":
        return {}
    if not isinstance(value, Mapping):
        raise BadRequest(f"arguments must be a map, not {value!r}")
    return dict(value)


def node_name() -> str:
    """This broker as a RabbitMQ node name (``amqp10@HOST``): a queue's leader and replicas."""
    return f"amqp10@{socket.gethostname()}"


def exchange_name(name: str) -> str:
    """RabbitMQ's name for the default exchange in paths, ``amq.default``, is ``""``."""
    return "" if name == "amq.default" else name


def queue_type(attrs: Mapping[str, Any], kind: str) -> str:
    """RabbitMQ's type of a queue: stream, or what its ``x-queue-type`` says (classic, quorum)."""
    return model.queue_type(attrs.get("arguments"), stream=kind == "stream")


def find_queue(m: Management, caller: Caller, vhost: str, name: str) -> QueueFound | None:
    """The queue or stream ``name`` in ``vhost`` (None: there is none; a missing
    virtual host raises :class:`NotFoundError`)."""
    for kind in ("queue", "stream"):
        try:
            return m.read(caller, kind, name, vhost=vhost), kind
        except NotFoundError:
            if vhost not in m.broker.vhosts:
                raise
    return None


def declare_queue(
    m: Management, caller: Caller, vhost: str, name: str, body: Mapping[str, Any]
) -> tuple[QueueFound, bool]:
    """Declare queue ``name`` from RabbitMQ's fields; the queue, and whether it is new.
    An existing queue must be declared equivalent to it, as RabbitMQ 3.10 has it (else
    :class:`Inequivalent`, RabbitMQ's text: :mod:`..core.equivalence`); RabbitMQ's API
    declares no exclusive queue (its declaration has no connection to own one). Without
    ``x-queue-type``, the host's default queue type is added as a 0-9-1 declaration adds it
    (RabbitMQ's API declares through its channel: :meth:`~..core.vhost.VirtualHost.declared_arguments`)."""
    durable = rabbit_flag(body.get("durable"), "durable", True)
    auto_delete = rabbit_flag(body.get("auto_delete"), "auto_delete", False)
    found = find_queue(m, caller, vhost, name)  # (a missing host raises here)
    v = m.broker.vhosts[vhost]
    args = v.declared_arguments(
        amqp_table(_arguments(body.get("arguments"))), durable=durable, exclusive=False, auto_delete=auto_delete
    )
    attrs = {"durable": durable, "auto_delete": auto_delete, "arguments": args}
    kind = "stream" if args.get("x-queue-type") == "stream" else "queue"
    if found is not None:
        node = v.queue(name)
        if node is not None:
            try:
                check_redeclared(
                    v, node, durable=durable, auto_delete=auto_delete, exclusive=False, arguments=args
                )
            except ModelError as exc:
                raise Inequivalent(str(exc)) from None
        return found, False
    m.create(caller, kind, name, attrs, vhost=vhost)
    return (m.read(caller, kind, name, vhost=vhost), kind), True


def amqp_table(value: Any) -> Any:
    """JSON arguments as RabbitMQ's management API types them (``rabbit_misc:to_amqp_table/1``):
    an integer is a long (an integer beyond 64 bits stays one), the rest as JSON has them."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return Int64(value) if -(1 << 63) <= value < 1 << 63 else value
    if isinstance(value, Mapping):
        return {k: amqp_table(v) for k, v in value.items()}
    if isinstance(value, list):
        return [amqp_table(v) for v in value]
    return value


def declare_exchange(
    m: Management, caller: Caller, vhost: str, name: str, body: Mapping[str, Any]
) -> bool:
    """Declare exchange ``name`` from RabbitMQ's fields; whether it is new. An existing
    exchange must be declared the same (else :class:`Inequivalent`)."""
    attrs: dict[str, Any] = {
        "exchange_type": str(body.get("type", "direct")),
        "durable": rabbit_flag(body.get("durable"), "durable", True),
        "auto_delete": rabbit_flag(body.get("auto_delete"), "auto_delete", False),
        "internal": rabbit_flag(body.get("internal"), "internal", False),
        "arguments": _arguments(body.get("arguments")),
    }
    try:
        have = m.read(caller, "exchange", exchange_name(name), vhost=vhost)
    except NotFoundError:
        if vhost not in m.broker.vhosts:
            raise
        m.create(caller, "exchange", name, attrs, vhost=vhost)
        return True
    for key in ("exchange_type", "durable", "auto_delete", "internal"):
        if have.get(key) != attrs[key]:
            shown = "type" if key == "exchange_type" else key
            raise Inequivalent(
                f"inequivalent arg '{shown}' for exchange '{name}' in vhost '{vhost}'"
            )
    return False


def binding_of(
    source: str, destination_type: str, destination: str, key: Any, arguments: Any
) -> dict[str, Any]:
    """A binding's management attributes from RabbitMQ's parts."""
    if not isinstance(key, str):
        raise BadRequest("the routing key must be a string")
    return {
        "source": source,
        "destination": destination,
        "destination_type": destination_type,
        "routing_key": key,
        "arguments": _arguments(arguments),
    }
