"""Link resumption (Part 2 §2.6.13): reconcile unsettled deliveries after a re-attach.

A link endpoint created with ``unsettled={tag: state}`` and/or
``resume_deliveries=[...]`` (deliveries of an earlier endpoint of the same link,
typically ``old_link.unsettled.values()``) *resumes* the link: its attach carries
the unsettled map (§2.7.3). Once both attaches are exchanged, each side compares
its map with the peer's, following the cases of the spec's resume example
(delivery-tags 1-14 there; the numbers below refer to them):

sender (source)                          receiver (target)            the sender
-------------------------------------    -------------------------    ---------------------------------
no state / received (1, 5)               absent                       resends it as a new delivery
terminal outcome (10)                    absent                       settles it (the receiver had it all)
no state (2, 4), received <= peer's (6)  received / null              resumes it (``resume=true``) from
                                                                      where the receiver got to
received beyond the peer's (7, 9)        received / null              aborts it (``resume=true``,
                                                                      ``aborted=true``)
no state / received (3, 8)               terminal outcome             takes the outcome and settles it
                                                                      (a resumed transfer, no payload)
terminal (11, 14)                        received / null              aborts it
terminal, the same (12)                  the same terminal            settles it (no payload)
terminal, another (13)                   another terminal             restates its own outcome (no
                                                                      payload, unsettled); the
                                                                      receiver echoes it and settles
absent                                   anything                     ignores it; the receiver
                                                                      considers it settled

A null state in a receiver's map is the same as ``received(0, 0)``. When either
map is marked incomplete, absence from it proves nothing: such deliveries are
left as they are, and the sender sends no new (non-resuming) deliveries on the
link until it is detached and resumed again with complete maps.

The receiver reports what resumption did with events: ``DeliveryReceived`` for
resumed message data (``delivery.resumed`` is True; ``delivery.remote_state`` is a
``Received`` telling where the data starts, or None for the start),
``DeliveryUpdated`` for a state or settlement the sender carried over, and
``DeliveryAborted``. The sender reports ``DeliveryUpdated`` (the receiver's outcome,
or settlement) and ``DeliveryAborted`` for the deliveries it had to abort.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..types import DecodeError, Received, Role, codec
from .delivery import Delivery
from .errors import IllegalStateError
from .events import DeliveryAborted, DeliveryUpdated, Event

if TYPE_CHECKING:
    from .link import Link

__all__ = ["Resumption", "attach_unsettled", "prepare_resume", "resume_link"]


@dataclass(slots=True)
class Resumption:
    """What reconciling a resumed link asks of the link (returned by :func:`resume_link`).

    The function decides and changes the deliveries' own fields; the link, which
    owns its unsettled map, its queue and the way to the application, acts on this.
    """

    events: list[Event] = field(default_factory=list)
    """To report to the application, in this order."""
    settled: list[Delivery] = field(default_factory=list)
    """Deliveries that are settled now: the link forgets them."""
    resend: list[Delivery] = field(default_factory=list)
    """Sender: deliveries to send before anything queued since, in this order."""
    resume_only: bool = False
    """Sender: either map was incomplete, so only resuming transfers may go out until
    the link is detached and resumed again (§2.7.3 incomplete-unsettled)."""

_NONE, _RECEIVED, _TERMINAL, _OTHER = range(4)


def _kind(state: Any) -> int:
    if state is None:
        return _NONE
    if type(state) is Received:
        return _RECEIVED
    if "outcome" in (getattr(type(state), "PROVIDES", None) or ""):
        return _TERMINAL
    return _OTHER  # e.g. a transactional state: not resumable here


def prepare_resume(
    link: Link,
    unsettled: Mapping[bytes, Any] | None,
    deliveries: Iterable[Delivery] | None,
) -> None:
    """Load the unsettled state a resuming endpoint starts from into ``link.unsettled``.

    ``deliveries`` are copied (tag, payload, message-format, state, context) into
    fresh deliveries of ``link``; ``unsettled`` adds entries known only by tag and
    state (a sender cannot resend those: it has no payload).
    """
    carried: dict[bytes, Delivery] = {}
    for old in deliveries or ():
        if old.settled:
            continue
        d = Delivery(link, bytes(old.tag), old.payload, old.message_format)
        d.state = old.state
        d.context = old.context
        d.remote_state = old.remote_state
        if d.state is None and link.role == Role.SENDER and _kind(old.remote_state) == _TERMINAL:
            # the receiver's outcome reached us (figure 2.51): it is our view of it now
            d.state = old.remote_state
        carried[d.tag] = d
    for tag, state in (unsettled or {}).items():
        if tag is None:
            raise IllegalStateError("an unsettled map has no null delivery-tags (§2.7.3)")
        tag = bytes(tag)
        if tag in carried:
            carried[tag].state = state
            continue
        d = Delivery(link, tag, b"", 0)
        d.state = state
        d.no_payload = True
        carried[tag] = d
    for d in carried.values():
        d.resumed = True
        link.unsettled[d.tag] = d


def attach_unsettled(unsettled: Mapping[bytes, Delivery]) -> dict[bytes, Any]:
    """The unsettled map a resuming link's attach carries (§2.7.3), from ``link.unsettled``."""
    return {d.tag: d.state for d in unsettled.values() if d.resumed and d.delivery_id is None}


def resume_link(link: Link, resuming: bool) -> Resumption | None:
    """Both attaches are exchanged: reconcile unsettled deliveries per §2.6.13.

    ``resuming`` says whether our attach carried an unsettled map. Returns None
    when there is nothing to reconcile (a fresh attach, or a re-attach).
    """
    remote = link.remote_attach
    if remote is None or (not resuming and remote.unsettled is None):
        return None
    peer_map: dict[Any, Any] = {}
    for tag, state in (remote.unsettled or {}).items():
        peer_map[bytes(tag) if isinstance(tag, (bytes, bytearray, memoryview)) else tag] = state
    peer_incomplete = bool(remote.incomplete_unsettled)
    if link.role == Role.SENDER:
        return _resume_sender(link, peer_map, peer_incomplete)
    return _resume_receiver(link, peer_map, peer_incomplete)


def _resume_sender(link: Link, peer: dict[Any, Any], peer_incomplete: bool) -> Resumption:
    out = Resumption(resume_only=peer_incomplete or link.incomplete_unsettled)
    emit = out.events.append
    resumes = out.resend
    for d in [d for d in link.unsettled.values() if d.resumed and d.delivery_id is None]:
        local = _kind(d.state)
        if d.tag not in peer:
            if peer_incomplete:
                continue  # absence proves nothing; left for the next resumption
            if local in (_NONE, _RECEIVED) and not d.no_payload:
                d.resumed = False  # cases 1 and 5: a new delivery, from the start
                d.resume = False
                resumes.append(d)
            elif local == _TERMINAL:
                out.settled.append(d)  # case 10: the receiver had all of it and forgot it
                emit(DeliveryUpdated(link=link, delivery=d, state=None, settled=True))
            else:
                out.settled.append(d)  # no payload to resend: lost
                d.aborted = True
                emit(DeliveryAborted(link=link, delivery=d))
            continue
        remote_state = peer[d.tag]
        remote = _kind(remote_state)
        d.resume = True
        if remote == _TERMINAL:
            d.remote_state = remote_state
            if local == _TERMINAL:
                d.transfer_state = d.state
                d.settled = d.state == remote_state  # 12: settle; 13: restate ours, unsettled
            else:
                # cases 3 and 8: the receiver's outcome stands; settle with it
                d.state = d.transfer_state = remote_state
                d.settled = True
            emit(DeliveryUpdated(link=link, delivery=d, state=remote_state, settled=False))
            d.payload = b""
            resumes.append(d)
            continue
        if remote_state is None:
            remote_state = Received(section_number=0, section_offset=0)
        if remote == _OTHER or local in (_TERMINAL, _OTHER) or d.no_payload:
            emit(_abort(d))  # cases 11 and 14 (and states this engine cannot resume)
        elif local == _RECEIVED and _received_after(d.state, remote_state):
            emit(_abort(d))  # cases 7 and 9: we cannot resend what the receiver still needs
        else:
            # cases 2, 4 and 6: resume from where the receiver got to
            offset = _byte_offset(d, remote_state)
            d.offset = offset
            if offset:
                d.transfer_state = remote_state
        resumes.append(d)
    return out


def _abort(d: Delivery) -> Event:
    d.aborted = True
    d.settled = True  # an aborted delivery is implicitly settled (§2.7.5)
    d.payload = b""
    d.offset = 0
    return DeliveryAborted(link=d.link, delivery=d)


def _received_after(a: Any, b: Any) -> bool:
    return bool((a.section_number, a.section_offset) > (b.section_number, b.section_offset))


def _byte_offset(d: Delivery, received: Any) -> int:
    """Where ``received(section-number, section-offset)`` points into the payload.

    Sections are the described values a message (format 0, Part 3 §3.2) is made of;
    for another format, or a payload that does not parse, the whole message is
    resent (a resumed transfer that starts at section 0, offset 0).
    """
    number, offset = received.section_number, received.section_offset
    if number == 0 and offset == 0:
        return 0
    if d.message_format != 0:
        return 0
    payload = d.payload
    pos = 0
    try:
        for _ in range(number):
            if pos >= len(payload):
                return 0
            _, pos = codec.decode_at(payload, pos)
    except DecodeError:
        return 0
    pos += offset
    return pos if pos <= len(payload) else 0


def _resume_receiver(link: Link, peer: dict[Any, Any], peer_incomplete: bool) -> Resumption:
    out = Resumption()
    for d in [d for d in link.unsettled.values() if d.resumed and d.delivery_id is None]:
        if d.tag in peer:
            continue  # the sender resumes it: a transfer with resume=true follows
        if peer_incomplete:
            continue
        # only the target considers it unsettled: it MUST be considered settled
        d.remote_settled = True
        out.settled.append(d)
        out.events.append(DeliveryUpdated(link=link, delivery=d, state=None, settled=True))
    return out
