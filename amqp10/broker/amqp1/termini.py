"""Our side of a link's termini: what an attach answer says about the node it reaches.

Helpers of the publisher and consumer handlers (no state): the node's kind as
capabilities, the peer's terminus echoed, a consumer's source filled in, the
resource a permission check names, whether a dynamic node ends with its link.
"""

from __future__ import annotations

from typing import Any

from ...transport import Link, Sender
from ...types import ErrorCondition, Released, Source, Target, symbol
from ..core import Exchange, Node, ResourceKind
from ..workers.link import STREAM_OFFSET_FILTER
from .addresses import ExchangeTarget
from .topics import Subscription, capabilities_of

RABBITMQ_OFFSET_FILTER = symbol("rabbitmq:stream-offset-spec")
"""RabbitMQ's: a described first/last/next, an offset or a timestamp."""
STREAM_CAPABILITY = "stream"

__all__ = [
    "CONDITIONS",
    "STREAM_CAPABILITY",
    "STREAM_OFFSET_FILTER",
    "capabilities",
    "echo",
    "made_by_link",
    "remote_terminus",
    "resource",
    "source_answer",
    "stream_offset",
]

_OUTCOMES = [
    symbol("amqp:accepted:list"),
    symbol("amqp:rejected:list"),
    symbol("amqp:released:list"),
    symbol("amqp:modified:list"),
]
CONDITIONS: dict[str, ErrorCondition] = {
    "not-found": ErrorCondition.NOT_FOUND,
    "invalid-field": ErrorCondition.INVALID_FIELD,
    "unauthorized-access": ErrorCondition.UNAUTHORIZED_ACCESS,
    "resource-locked": ErrorCondition.RESOURCE_LOCKED,
    "precondition-failed": ErrorCondition.PRECONDITION_FAILED,
}
"""The error condition of each :class:`~.addresses.AddressError` condition: how a link
refused for its address, or a message the anonymous relay cannot route, is answered."""


def stream_offset(filter_set: Any) -> tuple[symbol, Any]:
    """Where a stream consumer's filter-set says to start: the entry's key and value
    (ours, ``amqp10:stream-offset``, or RabbitMQ's ``rabbitmq:stream-offset-spec``)."""
    for key in (STREAM_OFFSET_FILTER, RABBITMQ_OFFSET_FILTER):
        spec = (filter_set or {}).get(key)
        if spec is not None:
            return key, spec
    return STREAM_OFFSET_FILTER, None


def source_answer(
    source: Source, *, address: str | None, browse: bool, filters: Any, capabilities: list[Any]
) -> Source:
    """Our source for a consumer: the node as we serve it, every field filled in."""
    return Source(
        address=address,
        durable=source.durable or 0,
        expiry_policy=source.expiry_policy or symbol("session-end"),
        timeout=source.timeout or 0,
        dynamic=source.dynamic,
        distribution_mode=symbol("copy") if browse else symbol("move"),
        filter=filters,
        default_outcome=Released() if source.default_outcome is None else source.default_outcome,
        outcomes=_OUTCOMES,
        capabilities=capabilities or None,  # an empty array trips some decoders (Azure's pyamqp)
    )


def remote_terminus(link: Link) -> Any:
    """The terminus the peer's attach gave for the node ``link`` names: a consumer's
    source, a publisher's target (as decoded: a :class:`Source` or :class:`Target`, or
    whatever the peer sent)."""
    return link.remote_source if isinstance(link, Sender) else link.remote_target


def resource(node: Node) -> tuple[str, ResourceKind]:
    """What a permission check names for ``node``: an exchange (also behind
    ``/exchanges/X/KEY`` and a 1.0 topic) or a queue (queues and streams)."""
    if isinstance(node, ExchangeTarget):
        return node.exchange.name, "exchange"
    if isinstance(node, Exchange):
        return node.name, "exchange"
    return node.name, "queue"


def capabilities(kind: str, requested: Any, sub: Subscription | None) -> list[Any]:
    """A terminus's capabilities in our answer: its node's ``kind`` (``queue``, ``topic``,
    ``stream``, as the AMQP JMS mapping looks for them: ``VirtualHost.kind_of``, the owner's
    for a node another worker owns) and the subscription's ``shared``/``global``, which we honour."""
    caps = [kind] if kind in ("queue", "topic", STREAM_CAPABILITY) else []
    if sub is not None and sub.shared:
        caps += [c for c in capabilities_of(requested) if c in ("shared", "global")]
    return [symbol(c) for c in caps]


def echo(terminus: Any, cls: type[Source] | type[Target]) -> Any:
    """The peer's terminus as sent, for our attach's other side (§2.6.3); an empty one
    if it sent none (a null terminus in an answer means a refused link)."""
    return terminus if isinstance(terminus, cls) else cls()


def made_by_link(terminus: Any) -> bool:
    """The link made its node (a dynamic terminus) and did not ask it to outlive the link
    (expiry-policy ``never``, §3.5.6): the node ends with the link."""
    return isinstance(terminus, (Source, Target)) and bool(terminus.dynamic) and terminus.expiry_policy != "never"
