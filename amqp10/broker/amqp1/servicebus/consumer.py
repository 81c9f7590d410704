"""A consumer link as ``azure-servicebus`` reads it.

Each delivery's tag is a fresh 16-byte lock token (the SDK reads the tag as a
UUID), and its message annotations carry ``x-opt-sequence-number`` (the message's
:attr:`~amqp10.broker.core.QueuedMessage.number`: the seq it got when published,
kept by a scheduled message when it becomes due), ``x-opt-enqueued-time``, ``x-opt-locked-until``
and ``x-opt-lock-token``. A peek-locked delivery's lock lasts the entity's lock
duration: ``com.microsoft:renew-lock`` extends it; when it runs out the message goes
back to the queue (its delivery count one up, dead-lettered with the reason
``MaxDeliveryCountExceeded`` past the max delivery count, as an abandon) and the
delivery's settlement is then answered with ``rejected`` carrying
``com.microsoft:message-lock-lost`` (the SDK raises ``MessageLockLostError``). The outcomes the SDK sends are the core's: complete is
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
from weakref import WeakKeyDictionary

from ....message import LazyMessage, Message
from ....transport import Delivery, Sender
from ....types import DecodeError, Error, Modified, Rejected, symbol, timestamp
from ...core import Broker, Lease, Node, NodeElsewhere, Queue, QueuedMessage, Stream
from ..consumers import LinkConsumer
from ..context import Amqp1Context
from ..message import Amqp1Message
from .deferred import defer

__all__ = ["MESSAGE_LOCK_LOST", "REMOVE", "ServiceBusConsumer", "annotated", "holder", "rewrite", "with_reason"]

DEAD_LETTER = "com.microsoft:dead-letter"
MESSAGE_LOCK_LOST = "com.microsoft:message-lock-lost"
_LOST = "the message's lock ran out before it was settled (it went back to the queue)"
_REASON = ("DeadLetterReason", "DeadLetterErrorDescription")
_SEQ = symbol("x-opt-sequence-number")
_ENQUEUED = symbol("x-opt-enqueued-time")
_LOCKED_UNTIL = symbol("x-opt-locked-until")
_ENQUEUE_SEQ = symbol("x-opt-enqueue-sequence-number")
_STATE = symbol("x-opt-message-state")
ACTIVE, DEFERRED = 0, 1
"""``x-opt-message-state`` values (Service Bus's ServiceBusMessageState; 2, scheduled, is never shown)."""
_LOCK_TOKEN = symbol("x-opt-lock-token")


class ServiceBusConsumer(LinkConsumer):
    """A broker sender link whose deliveries carry Service Bus's lock tokens and annotations,
    and whose peek-locks run out (a lease each, :mod:`amqp10.broker.core.leases`)."""

    def __init__(self, ctx: Amqp1Context, link: Sender, node: Queue | Stream | NodeElsewhere, *, browse: bool, lock_duration: float) -> None:
        super().__init__(ctx, link, node, browse=browse)
        self.lock_duration = lock_duration
        """How long a peek-lock lasts (the entity's lock duration)."""
        self.locks: dict[bytes, tuple[Lease, uuid.UUID]] = {}
        """The running locks of the unsettled deliveries, by delivery tag."""
        self.lost: set[bytes] = set()
        """Tags of deliveries whose lock ran out (their messages went back to the queue)."""

    def payload(self, msg: QueuedMessage) -> tuple[bytes, bytes | None]:
        data, _ = super().payload(msg)
        token = uuid.uuid4()
        tag = token.bytes_le
        lock = self.lock_duration
        now = self.ctx.broker.now()
        node = self.node
        if not self.presettled and isinstance(node, (Queue, NodeElsewhere)):  # (another worker's queue: held here too)
            lease = self.ctx.broker.leases.take(lock, lambda: self._lock_lost(tag))
            self.locks[tag] = (lease, token)
            _holders(self.ctx.broker, node)[token] = self
        annotations = {_LOCKED_UNTIL: timestamp(int((now + lock) * 1000)), _LOCK_TOKEN: token}
        return annotated(data, msg, annotations), tag

    def _unlock(self, tag: bytes) -> None:
        held = self.locks.pop(tag, None)
        if held is not None:
            self.ctx.broker.leases.drop(held[0])
            _holders(self.ctx.broker, self.node).pop(held[1], None)

    def _lock_lost(self, tag: bytes) -> None:
        """The lock ran out: the message goes back to its queue, a failed delivery."""
        held = self.locks.pop(tag, None)
        if held is not None:
            _holders(self.ctx.broker, self.node).pop(held[1], None)
        msg = self.in_flight.pop(tag, None)
        node = self.node
        if msg is None or not isinstance(node, (Queue, NodeElsewhere)):
            return
        self.lost.add(tag)
        _abandon(node, msg)
        self.ctx.wake()

    def renew(self, token: uuid.UUID) -> float | None:
        """Renew the lock ``token`` names: its new end (None: the lock is lost)."""
        held = self.locks.get(token.bytes_le)
        leases = self.ctx.broker.leases
        if held is None or not leases.renew(held[0]):
            return None
        return held[0].expires

    def settle_by_token(self, token: uuid.UUID, state: Any) -> bool:
        """Settle the delivery whose lock ``token`` names (``update-disposition``); False: lost."""
        tag = token.bytes_le
        d = self.link.unsettled.get(tag)
        if d is None or tag not in self.in_flight:
            return False
        self.settled(d, state)
        if not d.settled:
            d.settle(state if not isinstance(state, Rejected) else Rejected())
        return True

    def settled(self, d: Delivery, state: Any) -> None:
        if d.tag in self.lost:
            self.lost.discard(d.tag)
            if not d.settled:
                d.settle(Rejected(error=Error(condition=symbol(MESSAGE_LOCK_LOST), description=_LOST)))
            return
        self._unlock(d.tag)
        super().settled(d, state)

    def release_all(self) -> None:
        for tag in list(self.locks):
            self._unlock(tag)
        self.lost.clear()
        super().release_all()

    def apply(self, msg: QueuedMessage, state: Any) -> None:
        node = self.node
        if isinstance(state, Modified) and state.undeliverable_here and isinstance(node, (Queue, NodeElsewhere)):
            defer(node, msg)  # defer_message: set aside for receive_deferred_messages (on its owner)
            return
        if isinstance(state, Modified) and state.delivery_failed and isinstance(node, (Queue, NodeElsewhere)):
            _abandon(node, msg)
            return
        error = getattr(state, "error", None) if isinstance(state, Rejected) else None
        if error is not None and str(error.condition) == DEAD_LETTER and isinstance(error.info, dict):
            with_reason(msg, error.info, node)
        super().apply(msg, state)


def holder(broker: Broker, queue: Queue | NodeElsewhere, token: uuid.UUID) -> ServiceBusConsumer | None:
    """The consumer that holds the peek-lock ``token`` on ``queue`` (None: no such lock runs;
    a queue another worker owns: the locks its consumers here hold, on its stand-in)."""
    return _holders(broker, queue).get(token)


def _holders(broker: Broker, queue: Node) -> dict[uuid.UUID, ServiceBusConsumer]:
    """The peek-locks held on ``queue``, by token (kept by the broker, for every connection)."""
    by_queue: WeakKeyDictionary[Node, dict[uuid.UUID, ServiceBusConsumer]] = broker.shared(
        "servicebus.peek-locks", WeakKeyDictionary
    )
    return by_queue.setdefault(queue, {})


def _abandon(queue: Queue | NodeElsewhere, msg: QueuedMessage) -> None:
    """Back to the queue as a failed delivery; one past the max delivery count, dead-lettered
    with the reason Service Bus gives (``MaxDeliveryCountExceeded``). (A queue another worker
    owns: its delivery limit there, which its owner told.)"""
    limit = queue.policy.delivery_limit
    if limit is not None and msg.delivery_count + 1 >= limit:
        reason = {"DeadLetterReason": "MaxDeliveryCountExceeded", "DeadLetterErrorDescription": f"delivered {limit} times"}
        with_reason(msg, reason, queue)
    queue.release(msg, delivery_failed=True)


def annotated(data: bytes, msg: QueuedMessage, extra: dict[Any, Any] | None = None, *, state: int = ACTIVE) -> bytes:
    """``data`` (``msg``'s 1.0 bytes) annotated as Service Bus does: its sequence number for
    life, the one it was enqueued with (they differ for a scheduled message: the core gave
    it a new place when due), its enqueued time and its ``state``; and ``extra``. (A
    publisher's ``x-opt-partition-key`` travels in the message annotations as sent.)"""
    try:
        return LazyMessage(data).with_annotations(
            {
                _SEQ: msg.number,
                _ENQUEUE_SEQ: msg.seq,
                _ENQUEUED: timestamp(int(msg.arrival * 1000)),
                _STATE: state,
                **(extra or {}),
            }
        )
    except DecodeError:
        return data  # sent as it is


def with_reason(msg: QueuedMessage, info: dict[Any, Any], node: Node | None = None) -> None:
    """Put the dead-letter reason and description into the message's application properties
    (``node``: where it came from; one another worker owns is told, so its owner's copy
    takes the change before the outcome: :meth:`~amqp10.broker.core.Node.rewritten`)."""
    changes = []
    for key in _REASON:
        value = info.get(key, info.get(symbol(key)))
        if value is not None:
            changes.append((False, key, value.decode() if isinstance(value, bytes) else str(value)))
    # its size stays as counted; the dead-lettered copy counts its own
    if rewrite(msg, changes) and isinstance(node, NodeElsewhere):
        node.rewritten(msg)


REMOVE: Any = object()
"""A change's value that removes the property (see :func:`rewrite`)."""


def rewrite(msg: QueuedMessage, changes: list[tuple[bool, str, Any]]) -> bool:
    """Change ``msg``'s bytes: each change is (a message field? the field's accessor on
    :class:`~amqp10.message.Message`, else an application property's name, the value or
    :data:`REMOVE`). False (and left as it is): not an AMQP 1.0 message, or undecodable."""
    if type(msg) is not Amqp1Message:
        return False
    try:
        m = Message.decode(msg.data)
    except (DecodeError, LookupError, ValueError):
        return False
    props = dict(m.application_properties or {})
    for field, name, value in changes:
        if field:
            setattr(m, name, None if value is REMOVE else value)
        elif value is REMOVE:
            props.pop(name, None)
        else:
            props[name] = value
    m.application_properties = props
    msg.data = m.encode()
    msg.forget_fields()
    return True
