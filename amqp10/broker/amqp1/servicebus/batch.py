"""Service Bus's batch transfers: one delivery of message-format ``0x80013700``
whose data sections are each an encoded message (``ServiceBusMessageBatch``).

The broker takes each as a message of its own, and accepts the delivery once every
one of them is stored; an undecodable part rejects the delivery, and a part the
node does not take settles it as a single message would be (see
:data:`amqp10.broker.amqp1.publishers.OUTCOMES`).
"""

from __future__ import annotations

from collections.abc import Callable

from ....message import Message
from ....transport import Delivery
from ....types import Accepted, DecodeError, Error, ErrorCondition, Rejected
from ...core import Node
from ..message import parse_transfer
from ..publishers import OUTCOMES

__all__ = ["BATCH_FORMAT", "publish_batch"]

BATCH_FORMAT = 0x80013700


def publish_batch(d: Delivery, node: Node, now: float, origin: object, wake: Callable[[], None]) -> None:
    """Publish each message of a batch delivery to ``node``; settle ``d`` when all are stored."""
    try:
        outer = Message.decode(d.payload)
        parts = outer.body if outer.body_type == "data" else None
        if not isinstance(parts, list) or not parts:
            raise DecodeError("a batch's body is one data section per message")
        msgs = [parse_transfer(bytes(p), now, node.needs_message_ids) for p in parts]
    except (DecodeError, LookupError, ValueError) as exc:
        if not d.remote_settled:
            d.settle(Rejected(error=Error(condition=ErrorCondition.DECODE_ERROR, description=f"bad batch: {exc}")))
        return
    waiting = len(msgs)

    def stored() -> None:
        nonlocal waiting
        waiting -= 1
        if waiting == 0 and not d.remote_settled and not d.settled:
            d.settle(Accepted())
            wake()

    for msg in msgs:
        msg.mark_origin(origin)
        result = node.publish(msg, stored)
        if not result:
            if not d.remote_settled and not d.settled:
                d.settle(OUTCOMES[result](node))  # the same answer as for a single message
            return
