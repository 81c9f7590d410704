"""Links (Part 2 §2.6): attach/detach, credit-based flow control, deliveries."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from ..types import (
    Attach,
    Detach,
    Error,
    ErrorCondition,
    ReceiverSettleMode,
    Role,
    SenderSettleMode,
    Transfer,
    codec,
)
from . import serial
from .delivery import Delivery
from .errors import IllegalStateError, ProtocolViolation
from .events import (
    CreditAdded,
    CreditLowered,
    DeliveryAborted,
    DeliveryReceived,
    DeliveryUpdated,
    DrainRequested,
    FlowReceived,
    LinkAttached,
    LinkDetached,
)
from .link_state import ACCEPTS_FRAMES, LinkInput, LinkState, next_state
from .resume import attach_unsettled, prepare_resume, resume_link

if TYPE_CHECKING:
    from ..types import Flow
    from .resume import Resumption
    from .session import Session

__all__ = ["Link", "Receiver", "Sender"]

_MASK: Final = serial.MASK
encode = codec.encode
# upper bounds of a transfer performative's encoding plus the frame header: a first
# frame without a state (all fields present, uint handle/id/format, the tag's bytes
# added on top) and a continuation frame; above these the size is measured exactly
_TRANSFER_BOUND: Final = 8 + 48
_CONTINUATION_BOUND: Final = 8 + 24
# what each message's path compares with, as constants: in the compiled build a Final
# name is a static, where ``LinkState.ATTACHED`` is a dict and an attribute lookup a time
_ATTACHED: Final = LinkState.ATTACHED
_ATTACH_SENT: Final = LinkState.ATTACH_SENT
_SND_SETTLED: Final = SenderSettleMode.SETTLED
_SND_UNSETTLED: Final = SenderSettleMode.UNSETTLED
_RCV_SECOND: Final = ReceiverSettleMode.SECOND
_SENDER: Final = Role.SENDER
_RECEIVER: Final = Role.RECEIVER


def _is_outcome(state: Any) -> bool:
    """A terminal delivery state (Part 3 §3.4: accepted, rejected, released, modified)."""
    return "outcome" in (getattr(type(state), "PROVIDES", None) or "")


class Link:
    """A link endpoint; use :class:`Sender` or :class:`Receiver`.

    Resuming a link (§2.6.3, §2.6.13): pass ``unsettled={tag: state}`` and/or
    ``resume_deliveries=old_link.unsettled.values()`` (here or to ``attach()``);
    the attach then carries the unsettled map and, once the peer's attach is in,
    the deliveries are reconciled as :mod:`amqp10.transport.resume` describes.
    Without either, the attach carries no map: a new link, or a re-attach.

    ``max_message_size`` is the largest message we accept (receivers detach with
    ``amqp:link:message-size-exceeded`` beyond it); ``max_unsettled`` bounds the
    deliveries the peer may leave unsettled with us on this link (the link is
    detached with ``amqp:resource-limit-exceeded`` beyond it).

    Its session hands it the peer's frames through the ``receive_*`` methods and
    ``teardown()``; its deliveries pass their verbs on through
    ``update_delivery``/``settle_delivery``/``abort_delivery``. The link writes
    through the session's public interface (``write``, ``write_flow``,
    ``queue_flow``, ``queue_disposition``, ...).
    """

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
        unsettled: Mapping[bytes, Any] | None = None,
        resume_deliveries: Iterable[Delivery] | None = None,
        incomplete_unsettled: bool = False,
        max_unsettled: int | None = None,
        initial_delivery_count: int = 0,
    ) -> None:
        if max_message_size is not None and not 0 <= max_message_size < 1 << 64:
            raise ValueError(f"max_message_size must be a ulong, got {max_message_size}")
        if not 0 <= initial_delivery_count <= _MASK:
            raise ValueError(f"initial_delivery_count must be a uint, got {initial_delivery_count}")
        self.session = session
        # the session's delivery-id table of our direction (ids the peer may still refer to)
        self._ids: dict[int, Delivery] = session.delivery_ids(self.role)
        self._emit = session.connection.emit
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
        self.delivery_count = initial_delivery_count if self.role == _SENDER else 0
        self.credit = 0
        self.available = 0
        self.drain = False
        # deliveries this end has not settled, by tag (what an unsettled map reports)
        self.unsettled: dict[bytes, Delivery] = {}
        self.incomplete_unsettled = incomplete_unsettled
        self.max_unsettled = max_unsettled
        self._resuming = False  # our attach carries an unsettled map (§2.6.13)
        self._attached_once = False
        if unsettled is not None or resume_deliveries is not None:
            self._resuming = True
            prepare_resume(self, unsettled, resume_deliveries)
        self._initial_count = 0  # the initial-delivery-count we announced (senders)
        self._max_limit = 0  # highest delivery-count + link-credit advertised (receivers)
        self.context: Any = None  # free for the application
        self._init_role()

    def _init_role(self) -> None:
        """The sender's or the receiver's own state, set up last in ``__init__`` (a hook: a
        ``super().__init__(session, name, **kwargs)`` is miscompiled by mypyc, setup.py)."""

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
        if self.role == _SENDER or self.remote_attach is None:
            return self.snd_settle_mode
        return int(self.remote_attach.snd_settle_mode)

    @property
    def effective_rcv_settle_mode(self) -> int:
        """The receiver's settle mode: ours on a receiver, the peer's on a sender."""
        if self.role == _RECEIVER or self.remote_attach is None:
            return self.rcv_settle_mode
        return int(self.remote_attach.rcv_settle_mode)

    @property
    def is_attached(self) -> bool:
        return self.state is _ATTACHED

    # -- attach / detach ------------------------------------------------------------
    def _move(self, event: LinkInput) -> None:
        new = next_state(self.state, event)
        if new is None:
            raise IllegalStateError(f"link {self.name!r}: cannot {event.value} in state {self.state.name}")
        self.state = new

    def attach(
        self,
        *,
        source: Any = None,
        target: Any = None,
        unsettled: Mapping[bytes, Any] | None = None,
        resume_deliveries: Iterable[Delivery] | None = None,
    ) -> None:
        """Send our attach: opening a link, or accepting one the peer opened.

        ``source``/``target`` given here replace the ones given at creation (a
        node container answering a peer's attach sets the terminus it grants).
        ``unsettled``/``resume_deliveries`` resume the link (see the class doc): a
        container that finds the peer's link in its store passes them here.
        """
        if next_state(self.state, LinkInput.SEND_ATTACH) is None:
            raise IllegalStateError(f"link {self.name!r}: cannot attach in state {self.state.name}")
        session = self.session
        handle = session.handle_for(self)
        if unsettled is not None or resume_deliveries is not None:
            self._resuming = True
            prepare_resume(self, unsettled, resume_deliveries)
        elif self._attached_once:
            # a later attach of this endpoint is a re-attach, not a resume: no map
            # (§2.7.3), and the restrictions of an incomplete map are over
            self._resuming = False
        if source is not None:
            self.source = source
        if target is not None:
            self.target = target
        session.write(
            Attach(
                name=self.name,
                handle=handle,
                role=bool(self.role),
                snd_settle_mode=self.snd_settle_mode,
                rcv_settle_mode=self.rcv_settle_mode,
                source=self.source,
                target=self.target,
                unsettled=attach_unsettled(self.unsettled) if self._resuming else None,
                incomplete_unsettled=self.incomplete_unsettled if self._resuming else None,
                initial_delivery_count=self.delivery_count if self.role == _SENDER else None,
                max_message_size=self.max_message_size,
                offered_capabilities=self.offered_capabilities,
                desired_capabilities=self.desired_capabilities,
                properties=self.properties,
            )
        )
        # the attach is written: only now change anything (a failed write changes nothing)
        self.handle = handle
        session.add_link(self)
        self._move(LinkInput.SEND_ATTACH)
        self._attached_once = True
        self._initial_count = self.delivery_count
        if isinstance(self, Sender):
            self._resume_only = False
        if self.state is _ATTACHED:
            self._on_attached()

    def detach(self, error: Error | None = None, *, closed: bool = False) -> None:
        """Detach the link (``closed=True`` closes it: the peer may discard its state).

        A link the peer attached and we never answered is first attached with
        no terminus, as §2.6.3 requires of a refusal.
        """
        if self.state is LinkState.ATTACH_RCVD:
            # our local terminus is null: the target for a receiver, the source for a
            # sender; the other echoes the peer's (§2.6.3, figure 2.33)
            if self.role == _RECEIVER:
                self.source, self.target = self.remote_source, None
            else:
                self.source, self.target = None, self.remote_target
            self.attach()
        if next_state(self.state, LinkInput.SEND_DETACH) is None:
            raise IllegalStateError(f"link {self.name!r}: cannot detach in state {self.state.name}")
        assert self.handle is not None
        self.session.write(Detach(handle=self.handle, closed=closed, error=error))
        self.session.connection.count_error(error)
        self._move(LinkInput.SEND_DETACH)
        self.closed = self.closed or closed
        if self.state is LinkState.DETACHED:
            self.session.release_link(self)

    def close(self, error: Error | None = None) -> None:
        """Close the link (detach with ``closed=True``)."""
        self.detach(error, closed=True)

    # -- frames from the peer (called by the session) -----------------------------------
    def receive_attach(self, attach: Attach) -> None:
        """The peer's attach for this link (the session found the link by name)."""
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
        if self.role == _RECEIVER and attach.initial_delivery_count is not None:
            self.delivery_count = attach.initial_delivery_count
            self._max_limit = (self.delivery_count + self.credit) & _MASK if self.credit else self.delivery_count
        elif self.role == _RECEIVER and attach.source is not None:
            raise ProtocolViolation(
                ErrorCondition.INVALID_FIELD,
                "a sender's attach must carry initial-delivery-count",
                "session",
                self.session,
            )
        if was is LinkState.DETACH_SENT:
            return
        self._emit(LinkAttached(link=self, resumed=attach.unsettled is not None))
        if self.state is _ATTACHED:
            self._on_attached()

    def _on_attached(self) -> None:
        """Both attaches exchanged: resume deliveries and start flowing."""
        plan = resume_link(self, self._resuming)
        if plan is not None:
            for d in plan.settled:
                self._forget(d)
            for event in plan.events:
                self._emit(event)
            self._resumed(plan)
        self._started()

    def _resumed(self, plan: Resumption) -> None:
        """Act on the rest of a resumption's plan (the sender requeues)."""

    def _started(self) -> None:
        """Both attaches are exchanged and any resumption done (a receiver grants its credit)."""

    def receive_detach(self, detach: Detach) -> None:
        """The peer's detach (the session has released the peer's handle)."""
        new = next_state(self.state, LinkInput.RECV_DETACH)
        if new is None:
            raise ProtocolViolation(
                ErrorCondition.ILLEGAL_STATE,
                f"detach for link {self.name!r} in state {self.state.name}",
                "session",
                self.session,
            )
        if self.state is LinkState.ATTACH_RCVD:
            # attached and detached before we answered: detach() answers with a refusing
            # attach first (§2.6.3), and the peer's detach then completes ours; in a
            # session we have not begun yet nothing can be written: forget the link
            if self.session.can_send():
                self.detach(closed=detach.closed)
                new = next_state(self.state, LinkInput.RECV_DETACH) or LinkState.DETACHED
            else:
                new = LinkState.DETACHED
        self.remote_detach = detach
        self.state = new
        self.closed = self.closed or detach.closed
        self._emit(LinkDetached(link=self, closed=detach.closed, error=detach.error))
        if self.state is LinkState.DETACH_RCVD and self.session.can_send():
            # answer in kind (detach for detach, close for close)
            self.detach(closed=detach.closed)
        else:
            # detached; or our end is out, which detaches every link of the session
            self.teardown()

    def teardown(self) -> None:
        """The link is gone without a detach exchange (its session ended, or it was
        stolen while its session was ending): detached, its handles released.

        Unsettled deliveries stay in ``unsettled``, to resume the link elsewhere.
        """
        self.state = LinkState.DETACHED
        self.session.release_link(self)

    def receive_flow(self, flow: Flow) -> None:
        """The peer's flow for this link (the session has taken its session fields)."""
        raise NotImplementedError

    def receive_transfer(self, transfer: Transfer, payload: bytes) -> None:
        """A transfer frame for this link, while it is attached."""
        raise ProtocolViolation(
            ErrorCondition.NOT_ALLOWED,
            f"transfer on link {self.name!r}, which is our sender",
            "link",
            self,
        )

    def receive_disposition(self, delivery: Delivery, state: Any, settled: bool) -> None:
        """The peer's disposition covered ``delivery`` (one of this link's)."""
        if delivery.settled or delivery.remote_settled:
            return  # the peer forgot it already: a later disposition cannot change it
        if state is not None:
            delivery.remote_state = state
        if settled:
            delivery.remote_settled = True
            if delivery.delivery_id is not None:
                # the peer will not refer to this id again: drop it from the session's table
                self._ids.pop(delivery.delivery_id, None)
        if delivery.settle_pending and settled:
            # rcv-settle-mode second: the sender settled, so we settle too (§2.6.12)
            delivery.settle_pending = False
            self._forget(delivery)
        self._emit(DeliveryUpdated(link=self, delivery=delivery, state=state, settled=settled))

    # -- delivery verbs (called by Delivery) -------------------------------------------
    def update_delivery(self, d: Delivery, state: Any) -> None:
        """``d.update(state)``: tell the peer ``d``'s state without settling it."""
        if d.delivery_id is None:
            raise IllegalStateError("delivery has not been sent yet")
        d.state = state
        if not d.remote_settled:
            self.session.queue_disposition(self.role, d.delivery_id, False, state)

    def settle_delivery(self, d: Delivery, state: Any) -> None:
        """``d.settle(state)``: settle ``d`` (with ``state`` as its outcome, if given)."""
        if d.delivery_id is None:
            raise IllegalStateError("delivery has not been sent yet; abort() it instead")
        if state is not None:
            d.state = state
        if d.remote_settled:
            # The peer has forgotten the delivery (pre-settled, or settled first): a
            # disposition would be meaningless to it (§2.6.12, figure 2.54).
            self._forget(d)
            return
        # (a receiver's effective_rcv_settle_mode is its own rcv_settle_mode: read directly)
        if self.role == _RECEIVER and self.rcv_settle_mode == _RCV_SECOND:
            # §2.6.12 / §2.8.3: state first, unsettled; we settle once the sender has
            d.settle_pending = True
            self.session.queue_disposition(self.role, d.delivery_id, False, d.state)
            return
        self.session.queue_disposition(self.role, d.delivery_id, True, d.state)
        self._forget(d)

    def abort_delivery(self, d: Delivery) -> None:
        """``d.abort()``: only a sender can abort (see :meth:`Sender.abort_delivery`)."""
        raise IllegalStateError("only a sender can abort a delivery")

    def _forget(self, d: Delivery) -> None:
        d.settled = True
        self.unsettled.pop(d.tag, None)
        if d.delivery_id is not None:
            self._ids.pop(d.delivery_id, None)

    def write_flow(self, *, echo: bool = False) -> None:
        """Write this link's flow state now (with the session's; the session calls it
        for a flow batched with ``queue_flow``)."""
        session = self.session
        if self.handle is None or not session.can_send():
            # an echo asked for before our attach (our attach answers it), or one
            # that arrives after our end: nothing to say
            return
        limit = (self.delivery_count + self.credit) & _MASK
        if serial.lt(self._max_limit, limit):
            self._max_limit = limit
        session.write_flow(
            echo=echo,
            handle=self.handle,
            delivery_count=self.delivery_count,
            link_credit=self.credit,
            available=self.available if self.role == _SENDER else None,
            drain=self.drain,
        )


class Sender(Link):
    """The sending end of a link: ``send()`` deliveries as credit allows."""

    role = Role.SENDER

    def _init_role(self) -> None:
        self._queue: deque[Delivery] = deque()
        self._next_tag = 0
        self._drain_open = False  # a drain the receiver asked for is not finished yet
        self._drain_after_queue = False  # drained() was called with deliveries queued
        self._drains_finished = 0  # drains answered with our flow (so an echo is not sent twice)
        # §2.7.3 incomplete-unsettled: after such an attach exchange, only resuming
        # transfers may be sent until the link is detached and re-attached
        self._resume_only = False

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
        state: Any = None,
    ) -> Delivery:
        """Queue a delivery; it is written as soon as credit and the session window allow.

        ``settled`` (pre-settled, "at most once") defaults to what the link's
        sender settle mode says (``settled`` mode: True, otherwise False); in
        ``mixed`` mode either value may be given. ``state`` goes on the first
        transfer frame (e.g. a ``transactional-state``, Part 4 §4.4.1) and is
        the delivery's local state from then on.
        """
        if self.state not in (_ATTACHED, _ATTACH_SENT) or not self.session.can_send():
            raise IllegalStateError(f"sender {self.name!r} is not attached ({self.state.name})")
        mode = self.snd_settle_mode
        if settled is None:
            settled = mode == _SND_SETTLED
        elif mode == _SND_SETTLED and not settled:
            raise IllegalStateError("this link's snd-settle-mode is 'settled': deliveries go pre-settled")
        elif mode == _SND_UNSETTLED and settled:
            raise IllegalStateError("this link's snd-settle-mode is 'unsettled': deliveries cannot be pre-settled")
        remote = self.remote_attach
        limit = remote.max_message_size if remote is not None else None
        if limit and len(payload) > limit:
            raise IllegalStateError(
                f"message of {len(payload)} bytes exceeds the peer's max-message-size {limit}"
            )
        if message_format != 0 and not 0 <= message_format <= _MASK:
            raise IllegalStateError(f"message-format must be a uint, got {message_format}")
        unsettled = self.unsettled
        if tag is None:
            n = self._next_tag
            tag = str(n).encode()  # ASCII decimal, as Proton does: some peers decode tags as UTF-8
            while tag in unsettled:  # skip tags still held by resumed deliveries
                n += 1
                tag = str(n).encode()
            self._next_tag = n + 1
        else:
            if type(tag) is not bytes:
                tag = bytes(tag)
            if len(tag) > 32:
                raise IllegalStateError("delivery-tag is at most 32 bytes")
            if tag in unsettled:
                # §2.6.12: unique amongst all deliveries either end may consider unsettled
                raise IllegalStateError(f"delivery-tag {tag!r} is already in use on this link")
        if type(payload) is not bytes:
            payload = bytes(payload)
        d = Delivery(self, tag, payload, message_format)
        d.settled = settled
        if state is not None:
            d.state = d.transfer_state = state
        if not settled:
            unsettled[tag] = d
        queue = self._queue
        session = self.session
        if (
            not queue
            and self.credit > 0
            and self.state is _ATTACHED
            and not self._resume_only
            and session.can_transfer()
            and self._write_whole(d, session.connection.remote_max_frame_size) is not None
        ):
            # the common case: nothing queued before it, credit and window for it, one
            # frame for the whole delivery (what _pump would find)
            if self._drain_open:
                self._after_drain_pump()
            return d
        queue.append(d)
        if self.state is _ATTACHED:
            self._pump()
        return d

    def pump(self) -> None:
        """Write what is queued, as far as credit and the session window allow (the
        session calls it when the peer's flow re-opens its window)."""
        if self.state in ACCEPTS_FRAMES and self._queue:
            self._pump()

    def _pump(self) -> None:
        """Write as much of the queue as credit and the session window allow.

        A delivery takes one unit of link-credit when its first frame goes out
        (§2.6.7); every frame takes one unit of the peer's incoming window
        (§2.5.6), which the session keeps. Frames are cut to the peer's
        max-frame-size; a delivery's frames are never interleaved with another
        delivery's on the same link (§2.6.14).
        """
        session = self.session
        queue = self._queue
        max_frame = session.connection.remote_max_frame_size
        handle = self.handle
        assert handle is not None
        # the session's state cannot change while we write: after this check, each
        # write says whether the window has room for the next frame
        room = session.can_transfer()
        while queue:
            if not room:
                session.wait_for_window(self)
                return
            d = queue[0]
            if d.aborted and d.delivery_id is not None:
                # a partly sent delivery the application aborted: the aborting
                # transfer waits for the window like any other (§2.6.14)
                room = session.write_transfer(Transfer(handle=handle, aborted=True, settled=True), b"")
                queue.popleft()
                continue
            first = d.delivery_id is None
            if first:
                if self.credit <= 0:
                    break
                if self._resume_only and not d.resume:
                    break  # §2.7.3 incomplete-unsettled: only resuming transfers for now
                whole = None if d.resume or d.aborted else self._write_whole(d, max_frame)
                if whole is not None:  # the common case, one frame for the whole delivery
                    queue.popleft()
                    room = whole
                    continue
                self.credit -= 1
                self.delivery_count = (self.delivery_count + 1) & _MASK
                d.delivery_id = session.assign_delivery_id(d)
            finished, room = self._write_frames(d, first, handle, max_frame)
            if not finished:
                session.wait_for_window(self)
                return
            d.sent = True
            queue.popleft()
            if d.aborted or (d.resume and d.settled):
                # a resumed delivery aborted or settled by its only transfer (§2.6.13)
                self._forget(d)
        if self._drain_open:  # (tested here: a call per send saved)
            self._after_drain_pump()

    def _write_whole(self, d: Delivery, max_frame: int) -> bool | None:
        """Write ``d`` (new: not yet sent, neither resumed nor aborted) as its one transfer
        frame, taking a unit of credit, if it goes as one (no state, fitting the peer's
        ``max_frame``): whether the session's window has room for another (the caller
        knows it had room for this one); None if not (nothing written)."""
        size = len(d.payload)
        if d.transfer_state is not None or size + _TRANSFER_BOUND + len(d.tag) > max_frame:
            return None
        self.credit -= 1
        self.delivery_count = (self.delivery_count + 1) & _MASK
        d.offset = size
        d.sent = True
        return self.session.write_delivery(self.handle, d)  # type: ignore[arg-type]  # (attached)

    def _write_frames(self, d: Delivery, first: bool, handle: int, max_frame: int) -> tuple[bool, bool]:
        """Write ``d``'s frames from where it got to, as the window allows: whether its
        last frame went out, and whether the window has room for another."""
        session = self.session
        payload = d.payload
        size = len(payload)
        while True:
            if first:
                t = Transfer(
                    handle=handle,
                    delivery_id=d.delivery_id,
                    delivery_tag=d.tag,
                    message_format=d.message_format,
                    settled=d.settled,
                    more=True,
                    state=d.transfer_state,
                    resume=d.resume,
                    aborted=d.aborted,
                )
            else:
                t = Transfer(handle=handle, more=True)
            left = size - d.offset
            if first and d.transfer_state is None:
                overhead = _TRANSFER_BOUND + len(d.tag)  # a safe upper bound
            elif not first:
                overhead = _CONTINUATION_BOUND
            else:
                overhead = 8 + len(encode(t))
            if d.aborted or left + overhead <= max_frame:
                room = left  # everything left fits: no need to measure
            else:
                overhead = 8 + len(encode(t))  # measure: more=True is the larger form
                room = max_frame - overhead
            end = d.offset + room
            more = end < size
            t.more = more
            if d.aborted:
                chunk: bytes | memoryview = b""
            elif d.offset == 0 and not more:
                chunk = payload
            else:
                chunk = memoryview(payload)[d.offset : end]
            window = session.write_transfer(t, chunk)  # (not ``room``: an int, for mypyc)
            first = False
            d.offset = min(end, size)
            if not more or not window:
                return not more, window

    def drained(self) -> None:
        """Finish a drain the receiver asked for (after ``DrainRequested``): we have
        nothing more to send.

        The unused credit is given back: delivery-count advances over it and our
        flow state goes to the receiver (§2.6.7 drain), also when the transfers
        alone used the credit up (then the flow says credit 0: nothing is left).
        Deliveries still queued go first; the drain completes once they are
        written. A no-op when no drain is outstanding.

        An application that still has messages when the credit runs out does not
        call it: the receiver's credit is used up by transfers, which is all a
        drain asks, and the receiver learns there is more when it grants credit
        again (a flow saying drained would tell it the node is empty: receivers
        such as rhea stop at that flow).
        """
        if not self._drain_open or self.state is not _ATTACHED:
            return
        if self._queue:
            self._drain_after_queue = True
            return
        self._finish_drain()

    def _finish_drain(self) -> None:
        self._drains_finished += 1
        self._drain_open = False
        self._drain_after_queue = False
        self.delivery_count = (self.delivery_count + self.credit) & _MASK
        self.credit = 0
        self.write_flow()

    def _after_drain_pump(self) -> None:
        """With a drain open, after a pump: the drain is done once the queue is written, if
        the application said it has no more; or, silently, once transfers used the credit
        up with more still queued."""
        if self._drain_after_queue:
            if not self._queue:
                self._finish_drain()
        elif self.credit <= 0 and self._queue:
            self._drain_open = False  # the credit went on transfers and more wait: no flow

    def set_available(self, available: int) -> None:
        """Tell the receiver how many messages we could send (§2.6.7 ``available``)."""
        self.available = available
        if self.state is _ATTACHED:
            self.write_flow()

    def receive_flow(self, flow: Flow) -> None:
        """The receiver's flow: its credit (and drain, echo) for us."""
        # link-credit(snd) := delivery-count(rcv) + link-credit(rcv) - delivery-count(snd)
        if flow.link_credit is None:
            if flow.echo:
                self.write_flow()
            return
        rcv_count = flow.delivery_count
        if rcv_count is None:
            rcv_count = self._initial_delivery_count()
        old = self.credit
        new = serial.diff((rcv_count + flow.link_credit) & _MASK, self.delivery_count)
        self.credit = max(new, 0)
        self.drain = flow.drain
        if self.credit > old:
            self._emit(CreditAdded(link=self, credit=self.credit))
        elif self.credit < old:
            self._emit(CreditLowered(link=self, credit=self.credit))
        if not self.drain:
            self._drain_open = self._drain_after_queue = False
        elif self.state is _ATTACHED:
            self._drain_open = True
        wrote = False
        if self.state is _ATTACHED:
            finished = self._drains_finished
            if self._queue and self.credit > 0:
                self._pump()  # may finish the drain (and write our flow)
            elif self._drain_open and self.credit <= 0:
                self._finish_drain()  # nothing to give back: answer at once
            wrote = self._drains_finished != finished
            if self._drain_open and not self._drain_after_queue:
                self._emit(DrainRequested(link=self))
        if flow.echo and not wrote:
            self.write_flow()

    def _initial_delivery_count(self) -> int:
        return self._initial_count

    def _resumed(self, plan: Resumption) -> None:
        self._resume_only = plan.resume_only
        queue = self._queue
        queue.extendleft(reversed(plan.resend))  # before deliveries queued by send() during the attach
        if queue and self.credit > 0:
            self._pump()

    def abort_delivery(self, d: Delivery) -> None:
        """``d.abort()``: stop sending ``d``; a partly sent delivery ends with an
        aborting transfer (§2.6.14)."""
        if d.sent:
            raise IllegalStateError("delivery was already sent in full; it cannot be aborted")
        d.aborted = True
        self.unsettled.pop(d.tag, None)
        if d.offset == 0 and d.delivery_id is None:
            # nothing went out yet: it never existed for the peer
            try:
                self._queue.remove(d)
            except ValueError:
                pass
            return
        # The aborting transfer stays at the head of the queue: it is a transfer like
        # any other and waits for the peer's session window (Proton closes with
        # window-violation otherwise); _pump writes it.
        d.settled = True
        if d.delivery_id is not None:
            self._ids.pop(d.delivery_id, None)
        self._pump()


class Receiver(Link):
    """The receiving end of a link: grant credit with ``flow()``; deliveries arrive as events."""

    role = Role.RECEIVER

    def _init_role(self) -> None:
        self._current: Delivery | None = None  # the delivery whose frames are arriving
        self._chunks: list[bytes] = []  # its payload so far
        self._ignoring = False  # it is a resumed delivery we do not know (§2.7.5 resume)
        self._drain_requested = False

    def flow(self, credit: int, *, drain: bool = False, echo: bool = False) -> None:
        """Set the link-credit to ``credit`` (and optionally ask the sender to drain)."""
        if credit < 0 or credit > _MASK:
            raise IllegalStateError(f"link-credit must be in [0, 2**32-1], got {credit}")
        if self.state not in (_ATTACHED, _ATTACH_SENT):
            raise IllegalStateError(f"receiver {self.name!r} is not attached ({self.state.name})")
        self.credit = credit
        self.drain = drain
        self._drain_requested = drain
        if self.state is _ATTACHED:
            self.session.queue_flow(self, echo)

    def add_credit(self, n: int) -> None:
        """Grant ``n`` more deliveries of credit."""
        self.flow(self.credit + n, drain=self.drain)

    def drain_credit(self) -> None:
        """Ask the sender to use its credit now or give it back (completion: FlowReceived.drained)."""
        self.flow(self.credit, drain=True)

    def _started(self) -> None:
        if self.credit > 0:
            self.write_flow()

    def teardown(self) -> None:
        self._current = None  # a partly received delivery is dropped
        self._chunks = []
        super().teardown()

    def receive_flow(self, flow: Flow) -> None:
        """The sender's flow: its delivery-count and available (and drain's completion)."""
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
        self._emit(FlowReceived(link=self, available=flow.available, drained=drained))
        if flow.echo:
            self.write_flow()

    def receive_transfer(self, t: Transfer, payload: bytes) -> None:
        d = self._current
        if d is None:
            d, ignored = self._first_transfer(t)
            if t.more and not t.aborted:
                self._chunks = [] if ignored else [payload]
                self._ignoring = ignored
                d.size = len(payload)
                self._current = d
                self._check_size(d)
                return
            if not ignored:
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
        if t.state is not None:
            d.remote_state = t.state
        if t.aborted:
            self._current = None
            self._chunks = []
            if not self._ignoring:
                self._deliver(d, t)
            return
        d.size += len(payload)
        if not self._ignoring:
            self._chunks.append(payload)
            self._check_size(d)
        if t.more:
            return
        self._current = None
        if not self._ignoring:
            d.payload = b"".join(self._chunks)
            self._deliver(d, t)
        self._chunks = []

    def _first_transfer(self, t: Transfer) -> tuple[Delivery, bool]:
        """Account for a delivery's first frame: credit, ids, the unsettled map.

        Returns the delivery and whether it is ignored (a resumed delivery we do not hold).
        """
        tag = t.delivery_tag
        if t.delivery_id is None or tag is None:
            raise ProtocolViolation(
                ErrorCondition.INVALID_FIELD,
                "the first transfer of a delivery must carry delivery-id and delivery-tag",
                "link",
                self,
            )
        # The sender may have used credit we have since reduced (§2.6.7: a flow
        # takes effect when the sender sees it), so the limit is the highest
        # delivery-count + link-credit we ever advertised, not our current credit.
        if not serial.lt(self.delivery_count, self._max_limit):
            raise ProtocolViolation(
                ErrorCondition.TRANSFER_LIMIT_EXCEEDED,
                f"transfer on link {self.name!r} without link credit",
                "link",
                self,
            )
        if not t.resume and self._resuming and self.incomplete_unsettled:
            # §2.7.3: after sending an incomplete unsettled map, only resumed deliveries
            raise ProtocolViolation(
                ErrorCondition.ILLEGAL_STATE,
                "a new delivery after our incomplete unsettled map",
                "link",
                self,
            )
        settled = bool(t.settled) or t.aborted
        if not settled and self.max_unsettled is not None and len(self.unsettled) >= self.max_unsettled:
            raise ProtocolViolation(
                ErrorCondition.RESOURCE_LIMIT_EXCEEDED,
                f"more than {self.max_unsettled} unsettled deliveries on link {self.name!r}",
                "link",
                self,
            )
        self.credit = max(self.credit - 1, 0)
        self.delivery_count = (self.delivery_count + 1) & _MASK
        if self.available:
            self.available -= 1  # §2.6.7: a floor of zero
        tag = bytes(tag)
        d: Delivery | None = None
        ignored = False
        if t.resume:
            # §2.7.5: a resumed delivery we do not hold unsettled is ignored
            known = self.unsettled.get(tag)
            if known is not None and known.resumed and known.delivery_id is None:
                d = known
                d.message_format = t.message_format or 0
            else:
                d = Delivery(self, tag, b"", t.message_format or 0)
                ignored = True
        if d is None:
            d = Delivery(self, tag, b"", t.message_format or 0)
        d.delivery_id = t.delivery_id
        d.remote_settled = settled
        d.resumed = t.resume
        if t.state is not None:
            d.remote_state = t.state
        if not settled and not ignored:
            self.unsettled[tag] = d
            self._ids[t.delivery_id] = d
        return d, ignored

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
        """The delivery's last frame is in: report it."""
        emit = self._emit
        if t.aborted:
            # §2.6.14: the data received so far is discarded; an aborted delivery is settled
            d.aborted = True
            d.payload = b""
            d.remote_settled = True
            self._forget(d)
            emit(DeliveryAborted(link=self, delivery=d))
            return
        if d.resumed and not d.payload and (d.remote_settled or _is_outcome(d.remote_state)):
            # §2.6.13: a resumed transfer carrying only the sender's state and settlement
            if d.remote_settled:
                self._forget(d)
            else:
                self.settle_delivery(d, d.remote_state)  # the sender restates: echo and settle
            emit(DeliveryUpdated(link=self, delivery=d, state=d.remote_state, settled=d.remote_settled))
            return
        emit(DeliveryReceived(link=self, delivery=d))
