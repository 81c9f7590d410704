"""A consumer link as ``azure-servicebus`` reads it.

Each delivery's tag is a fresh 16-byte lock token (the SDK reads the tag as a
UUID), and its message annotations carry ``x-opt-sequence-number`` (the queue's
sequence number of the message), ``x-opt-enqueued-time``, ``x-opt-locked-until``
and ``x-opt-lock-token``. The outcomes the SDK sends are the core's: complete is
accepted (ack), abandon is modified with delivery-failed (released, the delivery
count goes up; the queue's delivery limit dead-letters), defer is modified with
undeliverable-here (set aside, :mod:`.deferred`), and dead-letter is rejected
with ``com.microsoft:dead-letter``, whose reason and description go into the
dead-lettered message's application properties (``DeadLetterReason``,
``DeadLetterErrorDescription``) before the core dead-letters it.
"""

from __future__ import annotations

import uuid
from typing import Any

from ....message import LazyMessage, Message
from ....types import DecodeError, Modified, Rejected, symbol, timestamp
from ...core import Queue, QueuedMessage
from ..consumers import LinkConsumer
from ..message import Amqp1Message
from .deferred import defer

__all__ = ["ServiceBusConsumer", "annotated", "with_reason"]

DEAD_LETTER = "com.microsoft:dead-letter"
_REASON = ("DeadLetterReason", "DeadLetterErrorDescription")
_SEQ = symbol("x-opt-sequence-number")
_ENQUEUED = symbol("x-opt-enqueued-time")
_LOCKED_UNTIL = symbol("x-opt-locked-until")
_LOCK_TOKEN = symbol("x-opt-lock-token")


class ServiceBusConsumer(LinkConsumer):
    """A broker sender link whose deliveries carry Service Bus's lock tokens and annotations."""


    def payload(self, msg: QueuedMessage) -> tuple[bytes, bytes | None]:
        data, _ = super().payload(msg)
        token = uuid.uuid4()
        gate = self.handler.gate
        lock = gate.lock_duration(self.node.name) if gate is not None else 60.0
        now = self.handler.broker.now()
        return annotated(data, msg, {_LOCKED_UNTIL: timestamp(int((now + lock) * 1000)), _LOCK_TOKEN: token}), token.bytes_le

    def apply(self, msg: QueuedMessage, state: Any) -> None:
        if isinstance(state, Modified) and state.undeliverable_here and isinstance(self.node, Queue):
            defer(self.node, msg)  # defer_message: set aside for receive_deferred_messages
            return
        error = getattr(state, "error", None) if isinstance(state, Rejected) else None
        if error is not None and str(error.condition) == DEAD_LETTER and isinstance(error.info, dict):
            with_reason(msg, error.info)
        super().apply(msg, state)


def annotated(data: bytes, msg: QueuedMessage, extra: dict[Any, Any] | None = None) -> bytes:
    """``data`` (``msg``'s 1.0 bytes) with its sequence number and enqueued time as
    Service Bus annotates them, and ``extra`` annotations."""
    try:
        return LazyMessage(data).with_annotations(
            {_SEQ: msg.seq, _ENQUEUED: timestamp(int(msg.arrival * 1000)), **(extra or {})}
        )
    except DecodeError:
        return data  # sent as it is


def with_reason(msg: QueuedMessage, info: dict[Any, Any]) -> None:
    """Put the dead-letter reason and description into the message's application properties."""
    if type(msg) is not Amqp1Message:
        return
    try:
        m = Message.decode(msg.data)
    except (DecodeError, LookupError, ValueError):
        return
    props = dict(m.application_properties or {})
    for key in _REASON:
        value = info.get(key, info.get(symbol(key)))
        if value is not None:
            props[key] = value.decode() if isinstance(value, bytes) else str(value)
    m.application_properties = props
    msg.data = m.encode()  # its size stays as counted; the dead-lettered copy counts its own
