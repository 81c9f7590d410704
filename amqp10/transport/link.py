"""Links (Part 2 §2.6): attach/detach, credit-based flow control, deliveries."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from ..types import (
    Attach,
    Detach,
    Error,
    ErrorCondition,
    ReceiverSettleMode,
    Role,
    SenderSettleMode,
    Source,
    Target,
    Transfer,
)
from . import serial
from .delivery import Delivery
from .errors import IllegalStateError, ProtocolViolation
from .events import (
    CreditAdded,
    DeliveryAborted,
    DeliveryReceived,
    DeliveryUpdated,
    DrainRequested,
    FlowReceived,
    LinkAttached,
    LinkDetached,
)
from .link_state import ACCEPTS_FRAMES, LinkInput, LinkState, next_state

if TYPE_CHECKING:
    from ..types import Flow
    from .session import Session

__all__ = ["Link", "Receiver", "Sender"]

_MASK = serial.MASK


class Link:
    """A link endpoint; use :class:`Sender` or :class:`Receiver`."""

    role: Role = Role.SENDER

    def __init__(
        self,
        session: Session,
        name: str,
        *,
        source: Any = None,
        target: Any = None,
        snd_settle_mode: int = SenderSettleMode.MIXED,
        rcv_settle_mode: int = ReceiverSettleMode.FIRST,
        max_message_size: int | None = None,
        properties: dict[Any, Any] | None = None,
        offered_capabilities: list[str] | None = None,
        desired_capabilities: list[str] | None = None,
        unsettled: dict[bytes, Any] | None = None,
    ) -> None:
        self.session = session
        self.name = name
        self.state = LinkState.DETACHED
        self.handle: int | None = None
        self.remote_handle: int | None = None
        self.source = source
        self.target = target
        self.snd_settle_mode = int(snd_settle_mode)
        self.rcv_settle_mode = int(rcv_settle_mode)
        self.max_message_size = max_message_size
        self.properties = properties
        self.offered_capabilities = offered_capabilities
        self.desired_capabilities = desired_capabilities
        self.remote_attach: Attach | None = None
        self.remote_detach: Detach | None = None
        self.closed = False
        # credit-based flow control (§2.6.7)
        self.delivery_count = 0
        self.credit = 0
        self.available = 0
        self.drain = False
        # deliveries this end has not settled, by tag (what an unsettled map reports)
        self.unsettled: dict[bytes, Delivery] = {}
        self.resume_unsettled = unsettled
        self._initial_count = 0  # the initial-delivery-count we announced (senders)
        self.context: Any = None  # free for the application

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, handle={self.handle}, state={self.state.name})"

    # -- what the peer asked for ------------------------------------------------------
    @property
    def remote_source(self) -> Any:
        """The source terminus in the peer's attach."""
        return self.remote_attach.source if self.remote_attach else None

    @property
    def remote_target(self) -> Any:
        """The target terminus in the peer's attach."""
        return self.remote_attach.target if self.remote_attach else None

    @property
    def remote_max_message_size(self) -> int | None:
        r = self.remote_attach
        return r.max_message_size if r is not None and r.max_message_size else None

    @property
    def effective_snd_settle_mode(self) -> int:
        """The sender's settle mode: ours on a sender, the peer's on a receiver."""
        if self.role == Role.SENDER or self.remote_attach is None:
            return self.snd_settle_mode
        return int(self.remote_attach.snd_settle_mode)

    @property
    def effective_rcv_settle_mode(self) -> int:
        """The receiver's settle mode: ours on a receiver, the peer's on a sender."""
        if self.role == Role.RECEIVER or self.remote_attach is None:
            return self.rcv_settle_mode
        return int(self.remote_attach.rcv_settle_mode)

    @property
    def is_attached(self) -> bool:
        return self.state is LinkState.ATTACHED

    # -- attach / detach ------------------------------------------------------------
    def _move(self, event: LinkInput) -> None:
        new = next_state(self.state, event)
        if new is None:
            raise IllegalStateError(f"link {self.name!r}: cannot {event.value} in state {self.state.name}")
        self.state = new

    def attach(self, *, source: Any = None, target: Any = None) -> None:
        """Send our attach: opening a link, or accepting one the peer opened.

        ``source``/``target`` given here replace the ones given at creation (a
        node container answering a peer's attach sets the terminus it grants).
        """
        if next_state(self.state, LinkInput.SEND_ATTACH) is None:
            raise IllegalStateError(f"link {self.name!r}: cannot attach in state {self.state.name}")
        self.session._check_can_attach()
        names = self.session.connection._link_names
        key = (self.name, self.role)
        other = names.get(key)
        if other is not None and other is not self and other.state is not LinkState.DETACHED:
            raise IllegalStateError(f"a {self.role.name.lower()} link named {self.name!r} is already attached")
        names[key] = self
        if source is not None:
            self.source = source
        if target is not None:
            self.target = target
        if self.handle is None:
            self.handle = self.session._allocate_handle(self)
        self._move(LinkInput.SEND_ATTACH)
        self._initial_count = self.delivery_count
        unsettled = None
        if self.resume_unsettled is not None:
            unsettled = dict(self.resume_unsettled)
        elif self.unsettled:
            unsettled = {tag: d.state for tag, d in self.unsettled.items()}
        self.session._write(
            Attach(
                name=self.name,
                handle=self.handle,
                role=bool(self.role),
                snd_settle_mode=self.snd_settle_mode,
                rcv_settle_mode=self.rcv_settle_mode,
                source=self.source,
                target=self.target,
                unsettled=unsettled,
                initial_delivery_count=self.delivery_count if self.role == Role.SENDER else None,
                max_message_size=self.max_message_size,
                offered_capabilities=self.offered_capabilities,
                desired_capabilities=self.desired_capabilities,
                properties=self.properties,
            )
        )
        if self.state is LinkState.ATTACHED:
            self._on_attached()

    def detach(self, error: Error | None = None, *, closed: bool = False) -> None:
        """Detach the link (``closed=True`` closes it: the peer may discard its state).

        A link the peer attached and we never answered is first attached with
        no terminus, as §2.6.3 requires of a refusal.
        """
        if self.state is LinkState.ATTACH_RCVD:
            self.source = None if self.role == Role.RECEIVER else self.source
            self.target = None if self.role == Role.SENDER else self.target
            self.attach()
        if next_state(self.state, LinkInput.SEND_DETACH) is None:
            raise IllegalStateError(f"link {self.name!r}: cannot detach in state {self.state.name}")
        self._move(LinkInput.SEND_DETACH)
        self.closed = self.closed or closed
        assert self.handle is not None
        self.session._write(Detach(handle=self.handle, closed=closed, error=error))
        if self.state is LinkState.DETACHED:
            self.session._release_link(self)

    def close(self, error: Error | None = None) -> None:
        """Close the link (detach with ``closed=True``)."""
        self.detach(error, closed=True)

    # -- frames from the peer (called by the session) -----------------------------------
    def _on_attach(self, attach: Attach) -> None:
        new = next_state(self.state, LinkInput.RECV_ATTACH)
        if new is None:
            raise ProtocolViolation(
                ErrorCondition.ILLEGAL_STATE,
                f"attach for link {self.name!r} in state {self.state.name}",
                "session",
                self.session,
            )
        self.remote_attach = attach
        self.remote_handle = attach.handle
        was = self.state
        self.state = new
        if self.role == Role.RECEIVER and attach.initial_delivery_count is not None:
            self.delivery_count = attach.initial_delivery_count
        elif self.role == Role.RECEIVER and attach.source is not None:
            raise ProtocolViolation(
                ErrorCondition.INVALID_FIELD,
                "a sender's attach must carry initial-delivery-count",
                "session",
                self.session,
            )
        if was is LinkState.DETACH_SENT:
            return
        resumed = attach.unsettled is not None and len(attach.unsettled) > 0
        if self.state is LinkState.ATTACHED:
            self._on_attached()
        self.session.connection._emit(LinkAttached(link=self, resumed=resumed))

    def _on_attached(self) -> None:
        """Both attaches exchanged: resume deliveries and start flowing."""
        from .resume import resume_link

        resume_link(self)

    def _on_detach(self, detach: Detach) -> None:
        new = next_state(self.state, LinkInput.RECV_DETACH)
        if new is None:
            raise ProtocolViolation(
                ErrorCondition.ILLEGAL_STATE,
                f"detach for link {self.name!r} in state {self.state.name}",
                "session",
                self.session,
            )
        self.remote_detach = detach
        self.state = new
        self.closed = self.closed or detach.closed
        self.session.connection._emit(
            LinkDetached(link=self, closed=detach.closed, error=detach.error)
        )
        if self.state is LinkState.DETACH_RCVD:
            # answer in kind (detach for detach, close for close)
            self.detach(closed=detach.closed)
        else:
            self.session._release_link(self)

    def _on_flow(self, flow: Flow) -> None:
        raise NotImplementedError

    def _on_transfer(self, transfer: Transfer, payload: bytes) -> None:
        raise ProtocolViolation(
            ErrorCondition.NOT_ALLOWED,
            f"transfer on link {self.name!r}, which is our sender",
            "link",
            self,
        )

    def _on_disposition(self, delivery: Delivery, state: Any, settled: bool) -> None:
        if delivery.settled:
            return
        if state is not None:
            delivery.remote_state = state
        if settled:
            delivery.remote_settled = True
        if delivery._settle_pending and settled:
            # rcv-settle-mode second: the sender settled, so we settle too (§2.6.12)
            delivery._settle_pending = False
            self._forget(delivery)
        self.session.connection._emit(
            DeliveryUpdated(link=self, delivery=delivery, state=state, settled=settled)
        )

    # -- delivery verbs (called by Delivery) -------------------------------------------
    def _delivery_update(self, d: Delivery, state: Any, settled: bool) -> None:
        if d.delivery_id is None:
            raise IllegalStateError("delivery has not been sent yet")
        self.session._queue_disposition(self.role, d.delivery_id, settled, state)

    def _delivery_settle(self, d: Delivery) -> None:
        if d.delivery_id is None:
            raise IllegalStateError("delivery has not been sent yet; abort() it instead")
        if (
            self.role == Role.RECEIVER
            and self.effective_rcv_settle_mode == ReceiverSettleMode.SECOND
            and not d.remote_settled
        ):
            d._settle_pending = True
            self.session._queue_disposition(self.role, d.delivery_id, False, d.state)
            return
        # No disposition is needed if the peer already settled and we add no state.
        if not (d.remote_settled and d.state is None):
            self.session._queue_disposition(self.role, d.delivery_id, True, d.state)
        self._forget(d)

    def _delivery_abort(self, d: Delivery) -> None:
        raise IllegalStateError("only a sender can abort a delivery")

    def _forget(self, d: Delivery) -> None:
        d.settled = True
        self.unsettled.pop(d.tag, None)
        if d.delivery_id is not None:
            self.session._forget_delivery(self.role, d.delivery_id)

    def _write_flow(self, *, echo: bool = False) -> None:
        assert self.handle is not None
        self.session._write_flow(self, echo=echo)


class Sender(Link):
    """The sending end of a link: ``send()`` deliveries as credit allows."""

    role = Role.SENDER

    def __init__(self, session: Session, name: str, **kwargs: Any) -> None:
        super().__init__(session, name, **kwargs)
        self._queue: deque[Delivery] = deque()
        self._next_tag = 0

    @property
    def queued(self) -> int:
        """Deliveries accepted by ``send()`` and not yet fully written."""
        return len(self._queue)

    def send(
        self,
        payload: bytes,
        *,
        tag: bytes | None = None,
        settled: bool | None = None,
        message_format: int = 0,
    ) -> Delivery:
        """Queue a delivery; it is written as soon as credit and the session window allow.

        ``settled`` (pre-settled, "at most once") defaults to what the link's
        sender settle mode says (``settled`` mode: True, otherwise False); in
        ``mixed`` mode either value may be given.
        """
        if self.state not in (LinkState.ATTACHED, LinkState.ATTACH_SENT):
            raise IllegalStateError(f"sender {self.name!r} is not attached ({self.state.name})")
        mode = self.snd_settle_mode
        if settled is None:
            settled = mode == SenderSettleMode.SETTLED
        elif mode == SenderSettleMode.SETTLED and not settled:
            raise IllegalStateError("this link's snd-settle-mode is 'settled': deliveries go pre-settled")
        elif mode == SenderSettleMode.UNSETTLED and settled:
            raise IllegalStateError("this link's snd-settle-mode is 'unsettled': deliveries cannot be pre-settled")
        limit = self.remote_max_message_size
        if limit is not None and len(payload) > limit:
            raise IllegalStateError(
                f"message of {len(payload)} bytes exceeds the peer's max-message-size {limit}"
            )
        if tag is None:
            n = self._next_tag
            self._next_tag = n + 1
            # ASCII decimal, as Proton does: some peers decode tags as UTF-8
            tag = str(n).encode()
        elif len(tag) > 32:
            raise IllegalStateError("delivery-tag is at most 32 bytes")
        d = Delivery(self, tag, payload, message_format)
        d.settled = settled
        if not settled:
            if tag in self.unsettled:
                raise IllegalStateError(f"delivery-tag {tag!r} is already in use on this link")
            self.unsettled[tag] = d
        self._queue.append(d)
        if self.state is LinkState.ATTACHED:
            self.session._pump(self)
        return d

    def drained(self) -> None:
        """Finish a drain: give back unused credit (delivery-count advances over it)."""
        if self.credit > 0 and self.drain and not self._queue:
            self.delivery_count = (self.delivery_count + self.credit) & _MASK
            self.credit = 0
            self._write_flow()

    def set_available(self, available: int) -> None:
        """Tell the receiver how many messages we could send (§2.6.7 ``available``)."""
        self.available = available
        if self.state is LinkState.ATTACHED:
            self._write_flow()

    def _on_flow(self, flow: Flow) -> None:
        # link-credit(snd) := delivery-count(rcv) + link-credit(rcv) - delivery-count(snd)
        if flow.link_credit is None:
            if flow.echo:
                self._write_flow()
            return
        rcv_count = flow.delivery_count
        if rcv_count is None:
            rcv_count = self._initial_delivery_count()
        old = self.credit
        new = serial.diff((rcv_count + flow.link_credit) & _MASK, self.delivery_count)
        self.credit = max(new, 0)
        self.drain = flow.drain
        conn = self.session.connection
        if self.credit > old:
            conn._emit(CreditAdded(link=self, credit=self.credit))
        if self._queue and self.credit > 0:
            self.session._pump(self)
        if self.drain and self.credit > 0:
            conn._emit(DrainRequested(link=self))
        if flow.echo:
            self._write_flow()

    def _initial_delivery_count(self) -> int:
        return self._initial_count

    def _delivery_abort(self, d: Delivery) -> None:
        if d.sent:
            raise IllegalStateError("delivery was already sent in full; it cannot be aborted")
        d.aborted = True
        self.unsettled.pop(d.tag, None)
        if d._offset == 0 and d.delivery_id is None:
            # nothing went out yet: it never existed for the peer
            try:
                self._queue.remove(d)
            except ValueError:
                pass
            return
        self._queue.remove(d)
        assert self.handle is not None
        self.session._write_transfer(
            Transfer(handle=self.handle, aborted=True, more=False, settled=True), b""
        )
        d.settled = True
        if d.delivery_id is not None:
            self.session._forget_delivery(Role.SENDER, d.delivery_id)


class Receiver(Link):
    """The receiving end of a link: grant credit with ``flow()``; deliveries arrive as events."""

    role = Role.RECEIVER

    def __init__(self, session: Session, name: str, **kwargs: Any) -> None:
        super().__init__(session, name, **kwargs)
        self._current: Delivery | None = None
        self._drain_requested = False

    def flow(self, credit: int, *, drain: bool = False, echo: bool = False) -> None:
        """Set the link-credit to ``credit`` (and optionally ask the sender to drain)."""
        if credit < 0 or credit > _MASK:
            raise IllegalStateError(f"link-credit must be in [0, 2**32-1], got {credit}")
        if self.state not in (LinkState.ATTACHED, LinkState.ATTACH_SENT):
            raise IllegalStateError(f"receiver {self.name!r} is not attached ({self.state.name})")
        self.credit = credit
        self.drain = drain
        self._drain_requested = drain
        if self.state is LinkState.ATTACHED:
            self._write_flow(echo=echo)

    def add_credit(self, n: int) -> None:
        """Grant ``n`` more deliveries of credit."""
        self.flow(self.credit + n, drain=self.drain)

    def drain_credit(self) -> None:
        """Ask the sender to use its credit now or give it back (completion: FlowReceived.drained)."""
        self.flow(self.credit, drain=True)

    def _on_attached(self) -> None:
        super()._on_attached()
        if self.credit > 0:
            self._write_flow()

    def _on_flow(self, flow: Flow) -> None:
        if flow.delivery_count is None:
            raise ProtocolViolation(
                ErrorCondition.INVALID_FIELD, "a sender's flow must carry delivery-count", "link", self
            )
        # keep the limit (delivery-count + credit) we granted; the sender may advance its count
        limit = (self.delivery_count + self.credit) & _MASK
        self.delivery_count = flow.delivery_count
        self.credit = max(serial.diff(limit, self.delivery_count), 0)
        self.available = flow.available or 0
        drained = False
        if self._drain_requested and self.credit == 0:
            drained = True
            self._drain_requested = False
            self.drain = False
        self.session.connection._emit(
            FlowReceived(link=self, available=flow.available, drained=drained)
        )
        if flow.echo:
            self._write_flow()

    def _on_transfer(self, t: Transfer, payload: bytes) -> None:
        d = self._current
        if d is None:
            # the first frame of a new delivery
            if t.delivery_id is None or t.delivery_tag is None:
                raise ProtocolViolation(
                    ErrorCondition.INVALID_FIELD,
                    "the first transfer of a delivery must carry delivery-id and delivery-tag",
                    "link",
                    self,
                )
            if self.credit <= 0:
                raise ProtocolViolation(
                    ErrorCondition.TRANSFER_LIMIT_EXCEEDED,
                    f"transfer on link {self.name!r} without link credit",
                    "link",
                    self,
                )
            self.credit -= 1
            self.delivery_count = (self.delivery_count + 1) & _MASK
            d = Delivery(self, t.delivery_tag, b"", t.message_format or 0)
            d.delivery_id = t.delivery_id
            d.remote_settled = bool(t.settled)
            d.resumed = t.resume
            if t.state is not None:
                d.remote_state = t.state
            if not d.remote_settled:
                self.unsettled[d.tag] = d
                self.session._track_incoming(d)
            if t.more:
                d._chunks = [payload]
                d.size = len(payload)
                self._current = d
                self._check_size(d)
                return
            d.payload = payload
            d.size = len(payload)
            self._check_size(d)
            self._deliver(d, t)
            return
        # a continuation frame
        if t.delivery_id is not None and t.delivery_id != d.delivery_id:
            raise ProtocolViolation(
                ErrorCondition.INVALID_FIELD,
                f"continuation transfer for delivery-id {t.delivery_id}, expected {d.delivery_id}",
                "link",
                self,
            )
        if t.settled:
            d.remote_settled = True
        if t.aborted:
            self._current = None
            d.aborted = True
            d._chunks = None
            self._forget(d)
            self.session.connection._emit(DeliveryAborted(link=self, delivery=d))
            return
        assert d._chunks is not None
        d._chunks.append(payload)
        d.size += len(payload)
        self._check_size(d)
        if t.more:
            return
        self._current = None
        d.payload = b"".join(d._chunks)
        d._chunks = None
        self._deliver(d, t)

    def _check_size(self, d: Delivery) -> None:
        limit = self.max_message_size
        if limit and d.size > limit:
            raise ProtocolViolation(
                ErrorCondition.MESSAGE_SIZE_EXCEEDED,
                f"message of at least {d.size} bytes exceeds max-message-size {limit}",
                "link",
                self,
            )

    def _deliver(self, d: Delivery, t: Transfer) -> None:
        if t.aborted:
            d.aborted = True
            self._forget(d)
            self.session.connection._emit(DeliveryAborted(link=self, delivery=d))
            return
        if d.remote_settled and d.tag in self.unsettled:
            # settled by the sender in a later frame: nothing left to report back
            pass
        self.session.connection._emit(DeliveryReceived(link=self, delivery=d))
