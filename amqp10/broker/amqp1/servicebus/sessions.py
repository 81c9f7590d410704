"""Service Bus sessions: a receiver locked to the messages of one session.

A message's session is its ``group-id`` (the SDK's ``session_id``). A receiver
asks for a session with the ``com.microsoft:session-filter`` source filter: a
session id, or null for the next available one (the session of the first message
in the queue that no other receiver holds). The session is locked to that link
while it is attached (another receiver asking for it is refused with
``amqp:resource-locked``); the attach answer names the session in the same filter
and its lock's end in the ``com.microsoft:locked-until-utc`` link property (.NET
ticks). The session's state (``get-session-state``/``set-session-state`` on the
entity's ``$management``) is the queue's group state
(:meth:`Queue.set_group_state <amqp10.broker.core.Queue.set_group_state>`): a
durable queue keeps it in the store, across restarts, until it is cleared or the
queue deleted.

At ``workers`` > 1 a receiver on a queue another worker owns sends its session filter to
that worker in its consumer's attach over the internal link: the owner picks and locks the
session there (:func:`owner_claim`, held while that link is attached) and names it in its
answer, which the receiver's attach answer waits for; the lock's end, and its renewal, are
the receiver's worker's (:class:`~.cbs.Gate`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from weakref import WeakKeyDictionary

from ....transport import Link, LinkState, Sender
from ....types import Source, symbol
from ...core import Broker, ConsumerClaim, NotFound, Queue, QueuedMessage, ResourceLocked
from ..addresses import AddressError

__all__ = [
    "SESSION_FILTER",
    "SessionLocks",
    "claim_session",
    "session_asked",
    "owner_claim",
    "session_locks",
    "session_state",
    "set_session_state",
    "ticks",
]

SESSION_FILTER = symbol("com.microsoft:session-filter")
LOCKED_UNTIL = symbol("com.microsoft:locked-until-utc")
_EPOCH_TICKS = 621355968000000000  # .NET ticks (100 ns since year 1) at the Unix epoch

SessionLocks = WeakKeyDictionary[Queue, dict[str, Link]]
"""Which link holds each session of a queue (one per broker: :meth:`Broker.front_end_state`)."""


def session_locks(broker: Broker) -> SessionLocks:
    """Which link holds each session, for every connection (and internal link) of ``broker``."""
    locks: SessionLocks = broker.shared("servicebus.session-locks", WeakKeyDictionary)
    return locks


def owner_claim(broker: Broker) -> ConsumerClaim:
    """The :data:`~amqp10.broker.core.ConsumerClaim` of a session receiver on another worker:
    the session its source asks for, locked to the consumer's internal link (raises the
    core's NotFound: none available, or ResourceLocked: held; the receiver's worker answers
    each as one worker does, not-found or resource-locked)."""

    def claim(link: Sender, source: Source, queue: Queue) -> tuple[dict[Any, Any], Callable[[QueuedMessage], bool]] | None:
        try:
            return claim_session(session_locks(broker), link, source, queue, broker.now())
        except AddressError as exc:
            raise (NotFound if exc.condition == "not-found" else ResourceLocked)(exc.description) from None

    return claim


def ticks(seconds: float) -> int:
    """Unix time as .NET ticks (how Service Bus gives a session lock's end)."""
    return _EPOCH_TICKS + int(seconds * 10_000_000)


def session_state(queue: Queue, sid: str) -> bytes | None:
    """The state of ``queue``'s session ``sid`` (None: none set)."""
    return queue.group_states.get(sid)


def set_session_state(queue: Queue, sid: str, state: bytes | None) -> None:
    """Set (None: clear) the state of ``queue``'s session ``sid``."""
    queue.set_group_state(sid, state)


def _held(locks: SessionLocks, queue: Queue, sid: str, link: Link) -> bool:
    other = locks.get(queue, {}).get(sid)
    return other is not None and other is not link and other.state in (LinkState.ATTACHED, LinkState.ATTACH_RCVD)


def session_asked(source: Source) -> dict[Any, Any] | None:
    """The session filter of a receiver's source (None: not a session receiver): the
    session it names, or None for the next available."""
    wanted = source.filter or {}
    return {SESSION_FILTER: wanted[SESSION_FILTER]} if SESSION_FILTER in wanted else None


def claim_session(
    locks: SessionLocks, link: Sender, source: Source, queue: Queue, locked_until: float
) -> tuple[dict[Any, Any], Callable[[QueuedMessage], bool]] | None:
    """Lock the session a receiver's source asks for: None (it asks for none), or the
    filters for the attach answer and the consumer's view; raises :class:`AddressError`."""
    asked = session_asked(source)
    if asked is None:
        return None
    sid = asked[SESSION_FILTER]
    if sid is None:
        sid = next((m.group for m in queue.browse() if m.group is not None and not _held(locks, queue, m.group, link)), None)
        if sid is None:
            raise AddressError("not-found", f"no session available in {queue.name!r}")
    sid = str(sid)
    if _held(locks, queue, sid, link):
        raise AddressError("resource-locked", f"session {sid!r} is locked by another receiver")
    locks.setdefault(queue, {})[sid] = link
    link.properties = {**(link.properties or {}), LOCKED_UNTIL: ticks(locked_until)}
    return {SESSION_FILTER: sid}, lambda m: m.group == sid
