"""Sessions (Part 2 §2.5): channels, transfer windows, delivery-ids, link handles."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ..types import (
    Attach,
    Begin,
    Detach,
    Disposition,
    End,
    Error,
    ErrorCondition,
    Flow,
    Role,
    Transfer,
)
from . import serial
from .connection_state import WRITABLE
from .errors import IllegalStateError, ProtocolViolation
from .events import LinkFailed, SessionBegun, SessionEnded
from .framing import FIELDLESS_OUTCOMES
from .link import Link, Receiver, Sender
from .link_state import ACCEPTS_FRAMES as LINK_ACCEPTS
from .link_state import LinkState
from .session_state import SessionInput, SessionState, next_state

if TYPE_CHECKING:
    from .connection import Connection
    from .delivery import Delivery

__all__ = ["Session"]

_MASK: Final = serial.MASK
_MAX_WINDOW = 0x7FFFFFFF
# link states in which a peer's attach answers ours
_AWAITING_ATTACH = frozenset({LinkState.ATTACH_SENT, LinkState.DETACH_SENT})
# link states in which a second attach of the same name steals the link (§2.6.1)
_STEALABLE = frozenset({LinkState.ATTACHED, LinkState.ATTACH_RCVD})
# states in which we may write frames on the session's channel (§2.5.5)
_SENDING: Final = frozenset({SessionState.BEGIN_SENT, SessionState.MAPPED, SessionState.END_RCVD})
_MAPPED: Final = SessionState.MAPPED  # (a static in the compiled build: no lookup a message)


class Session:
    """A session endpoint: create links on it with ``sender()``/``receiver()``.

    ``incoming_window`` is the number of transfer frames we let the peer send
    ahead (§2.5.6); the engine re-opens it with a session flow once half of it
    is used, so the application never has to. ``next_outgoing_id`` is the first
    transfer-id (and delivery-id) we assign: any value, counting on with RFC-1982
    wrap-around. ``handle_max`` bounds the handles the peer may attach with.

    Its connection hands it the peer's frames for its channel through the
    ``receive_*`` methods, asks it to ``flush()`` what it batched and to
    ``teardown()`` when the connection ends. Its links write through a small
    public interface: ``write``, ``write_flow``, ``queue_flow``,
    ``queue_disposition`` and, for senders, ``can_transfer``,
    ``assign_delivery_id``, ``write_transfer``, ``write_delivery``,
    ``wait_for_window``; they register and release themselves with
    ``handle_for``/``add_link``/``release_link``.
    """

    def __init__(
        self,
        connection: Connection,
        channel: int,
        *,
        incoming_window: int = 2048,
        outgoing_window: int = _MAX_WINDOW,
        handle_max: int = 0xFFFFFFFF,
        next_outgoing_id: int = 0,
        properties: dict[Any, Any] | None = None,
        offered_capabilities: list[str] | None = None,
        desired_capabilities: list[str] | None = None,
    ) -> None:
        if not 0 < incoming_window <= _MASK:
            raise ValueError(f"incoming_window must be in [1, 2**32-1], got {incoming_window}")
        if not 0 <= outgoing_window <= _MASK:
            raise ValueError(f"outgoing_window must be in [0, 2**32-1], got {outgoing_window}")
        if not 0 <= handle_max <= _MASK:
            raise ValueError(f"handle_max must be in [0, 2**32-1], got {handle_max}")
        if not 0 <= next_outgoing_id <= _MASK:
            raise ValueError(f"next_outgoing_id must be in [0, 2**32-1], got {next_outgoing_id}")
        self.connection = connection
        self.channel = channel
        self.remote_channel: int | None = None
        self.state = SessionState.UNMAPPED
        self.remote_begin: Begin | None = None
        self.remote_end: End | None = None
        self.properties = properties
        self.offered_capabilities = offered_capabilities
        self.desired_capabilities = desired_capabilities
        self.context: Any = None
        # session flow control (§2.5.6)
        self.next_outgoing_id = next_outgoing_id
        self._initial_outgoing_id = next_outgoing_id
        self.outgoing_window = outgoing_window
        self.max_incoming_window = incoming_window
        self.incoming_window = incoming_window  # what we last told the peer
        self.next_incoming_id = 0
        # the first transfer-id beyond what we last allowed the peer (its next-outgoing-id
        # when we told it our incoming-window, plus that window); None until both known
        self._incoming_limit: int | None = None
        self.remote_incoming_window = 0
        self.remote_outgoing_window = 0
        self.handle_max = handle_max
        self.remote_handle_max = 0xFFFFFFFF
        self._next_delivery_id = next_outgoing_id  # delivery-ids: an independent sequence
        # links by our handle, by the peer's handle, and by (name, role)
        self.links: dict[int, Link] = {}
        self._remote_links: dict[int, Link] = {}
        # deliveries we have not settled, by delivery-id: ours (outgoing) and the peer's
        self._outgoing: dict[int, Delivery] = {}
        self._incoming: dict[int, Delivery] = {}
        self._dispositions: list[list[Any]] = []  # [role, first, last, settled, state]
        self._flow_pending = False
        # receivers whose flow() is written with the next output (Proton's habit): the
        # credit they set then, after the dispositions, one frame per link per batch
        self._link_flows: dict[Link, bool] = {}  # link -> echo asked for
        self._blocked: list[Sender] = []  # senders waiting for the remote incoming window
        self._done = False

    def __repr__(self) -> str:
        return f"Session(channel={self.channel}, remote_channel={self.remote_channel}, state={self.state.name})"

    # -- begin / end ------------------------------------------------------------------
    def _move(self, event: SessionInput) -> None:
        new = next_state(self.state, event)
        if new is None:
            raise IllegalStateError(f"session: cannot {event.value} in state {self.state.name}")
        self.state = new

    def begin(
        self,
        *,
        incoming_window: int | None = None,
        handle_max: int | None = None,
        next_outgoing_id: int | None = None,
    ) -> None:
        """Send our begin: starting a session, or accepting one the peer began.

        The keyword arguments override the constructor's (useful when accepting
        a session the engine created for the peer's begin).
        """
        if next_state(self.state, SessionInput.SEND_BEGIN) is None or self._done:
            raise IllegalStateError(f"session: cannot begin in state {self.state.name}")
        self.connection.check_can_begin()
        if incoming_window is not None and not 0 < incoming_window <= _MASK:
            raise IllegalStateError(f"incoming_window must be in [1, 2**32-1], got {incoming_window}")
        if handle_max is not None and not 0 <= handle_max <= _MASK:
            raise IllegalStateError(f"handle_max must be in [0, 2**32-1], got {handle_max}")
        if next_outgoing_id is not None and not 0 <= next_outgoing_id <= _MASK:
            raise IllegalStateError(f"next_outgoing_id must be in [0, 2**32-1], got {next_outgoing_id}")
        window = self.max_incoming_window if incoming_window is None else incoming_window
        hmax = self.handle_max if handle_max is None else handle_max
        nid = self.next_outgoing_id if next_outgoing_id is None else next_outgoing_id
        self.connection.write_frame(
            self.channel,
            Begin(
                remote_channel=self.remote_channel,
                next_outgoing_id=nid,
                incoming_window=window,
                outgoing_window=self.outgoing_window,
                handle_max=hmax,
                offered_capabilities=self.offered_capabilities,
                desired_capabilities=self.desired_capabilities,
                properties=self.properties,
            ),
        )
        # written: now change state (a failed write changes nothing)
        self._move(SessionInput.SEND_BEGIN)
        self.max_incoming_window = self.incoming_window = window
        self.handle_max = hmax
        self.next_outgoing_id = self._initial_outgoing_id = self._next_delivery_id = nid
        if self.remote_begin is not None:
            self._incoming_limit = (self.next_incoming_id + window) & _MASK

    def end(self, error: Error | None = None) -> None:
        """End the session (detaching its links); a session the peer began is begun first."""
        event = SessionInput.SEND_END_ERROR if error is not None else SessionInput.SEND_END
        if self.state is SessionState.BEGIN_RCVD:
            self.begin()  # a refusal: §2.5.1 wants our begin before our end
        if next_state(self.state, event) is None or not self.connection.can_write():
            raise IllegalStateError(f"session: cannot end in state {self.state.name}")
        self._flush_dispositions()
        self.connection.write_frame(self.channel, End(error=error))
        self.connection.count_error(error)
        self._move(event)
        self._unmap_if_done()

    @property
    def is_mapped(self) -> bool:
        return self.state is _MAPPED

    # -- links ------------------------------------------------------------------------
    def sender(self, name: str, **kwargs: Any) -> Sender:
        """Create a sending link (attach it with ``link.attach()``)."""
        return Sender(self, name, **kwargs)

    def receiver(self, name: str, **kwargs: Any) -> Receiver:
        """Create a receiving link (attach it with ``link.attach()``)."""
        return Receiver(self, name, **kwargs)

    # -- the interface its links use: their handles and names ----------------------------
    def handle_for(self, link: Link) -> int:
        """The handle ``link`` attaches with: the one it holds, else the lowest free
        (ours are bounded by the peer's handle-max, §2.7.2).

        Raises :class:`IllegalStateError` if links cannot attach now, or if another
        attached link of this connection has the same name and role (§2.6.1).
        """
        if self.state not in (_MAPPED, SessionState.BEGIN_SENT):
            raise IllegalStateError(f"session is not mapped ({self.state.name})")
        other = self.connection.link_named(link.name, link.role)
        if other is not None and other is not link and other.state is not LinkState.DETACHED:
            raise IllegalStateError(f"a {link.role.name.lower()} link named {link.name!r} is already attached")
        handle = link.handle
        if handle is not None and self.links.get(handle) is link:
            return handle
        for h in range(min(len(self.links) + 1, self.remote_handle_max + 1)):
            if h not in self.links:
                return h
        raise IllegalStateError(f"no link handle free (the peer's handle-max is {self.remote_handle_max})")

    def add_link(self, link: Link) -> None:
        """Record ``link``, whose attach is written, under its handle and its name."""
        assert link.handle is not None
        self.links[link.handle] = link
        self.connection.add_link_name(link)

    def release_link(self, link: Link) -> None:
        """Forget ``link`` (detached): its handles are free, its name too unless stolen."""
        if link.handle is not None and self.links.get(link.handle) is link:
            del self.links[link.handle]
        if link.remote_handle is not None and self._remote_links.get(link.remote_handle) is link:
            del self._remote_links[link.remote_handle]
        if isinstance(link, Sender) and link in self._blocked:
            self._blocked.remove(link)
        self.connection.release_link_name(link)

    def delivery_ids(self, role: Role) -> dict[int, Delivery]:
        """The unsettled deliveries of links of ``role`` by delivery-id (our sends for
        senders, the peer's for receivers): the same dict each time; a link adds the
        deliveries the peer may still refer to and removes them once settled."""
        return self._outgoing if role is Role.SENDER else self._incoming

    # -- the interface its links use: output ---------------------------------------------
    def write(self, performative: Any) -> None:
        """Write a frame on our channel, after what was batched (dispositions, flows)."""
        if not self.can_send():
            raise IllegalStateError(f"session on channel {self.channel} cannot send ({self.state.name})")
        if self._dispositions:
            self._flush_dispositions()
        if self._link_flows:
            self._flush_link_flows()  # before a detach (or any frame) that follows them
        self.connection.write_frame(self.channel, performative)

    def can_transfer(self) -> bool:
        """True when a transfer may go out now: the session is mapped, the connection
        writable and the peer's incoming window has room (§2.5.6)."""
        return (
            self.remote_incoming_window > 0
            and self.state is _MAPPED
            and self.connection.state in WRITABLE  # (can_write(), without a call per message)
        )

    def wait_for_window(self, sender: Sender) -> None:
        """Call ``sender.pump()`` once the peer's flow re-opens its incoming window."""
        if sender not in self._blocked:
            self._blocked.append(sender)

    def assign_delivery_id(self, d: Delivery) -> int:
        """The next delivery-id, for ``d``'s first transfer; an unsettled ``d`` is
        tracked under it for the peer's dispositions."""
        delivery_id = self._next_delivery_id
        self._next_delivery_id = (delivery_id + 1) & _MASK
        if not d.settled:
            self._outgoing[delivery_id] = d
        return delivery_id

    def write_transfer(self, transfer: Transfer, payload: bytes | memoryview) -> bool:
        """Write one transfer frame: it takes one unit of the peer's window (§2.5.6).

        Returns whether the window has room for another (call only while
        ``can_transfer()``).
        """
        if self._dispositions:
            self._flush_dispositions()
        self.connection.write_frame(self.channel, transfer, payload)
        self.next_outgoing_id = (self.next_outgoing_id + 1) & _MASK
        self.remote_incoming_window -= 1
        return self.remote_incoming_window > 0

    def write_delivery(self, handle: int, d: Delivery) -> bool:
        """Write ``d`` whole, as its one transfer frame, with a new delivery-id.

        The per-message path: the frame is encoded without building a Transfer;
        the caller knows it fits the peer's max-frame-size (and has no state to carry).
        Returns whether the window has room for another, as ``write_transfer`` does.
        """
        # (assign_delivery_id, inline: a call per message saved)
        d.delivery_id = delivery_id = self._next_delivery_id
        self._next_delivery_id = (delivery_id + 1) & _MASK
        if not d.settled:
            self._outgoing[delivery_id] = d
        if self._dispositions:
            self._flush_dispositions()
        self.connection.write_delivery_frame(self.channel, handle, delivery_id, d)
        self.next_outgoing_id = (self.next_outgoing_id + 1) & _MASK
        self.remote_incoming_window = left = self.remote_incoming_window - 1
        return left > 0

    def _session_flow_fields(self) -> dict[str, Any]:
        # Each flow re-opens the incoming window in full (§2.5.6): from here on the
        # peer may send incoming-window transfers past next-incoming-id.
        self.incoming_window = self.max_incoming_window
        if self.remote_begin is not None:
            self._incoming_limit = (self.next_incoming_id + self.incoming_window) & _MASK
        return {
            "next_incoming_id": self.next_incoming_id if self.remote_begin is not None else None,
            "incoming_window": self.incoming_window,
            "next_outgoing_id": self.next_outgoing_id,
            "outgoing_window": self.outgoing_window,
        }

    def write_flow(self, *, echo: bool = False, **link_fields: Any) -> None:
        """Write a flow frame with our session fields, plus a link's (``handle``,
        ``delivery_count``, ``link_credit``, ...) when a link writes its flow."""
        self._flow_pending = False
        self.write(Flow(echo=echo, **link_fields, **self._session_flow_fields()))

    def can_send(self) -> bool:
        """True while our begin is sent and our end is not (and the connection writable)."""
        return self.state in _SENDING and self.connection.state in WRITABLE  # (can_write(), inline)

    def queue_disposition(self, role: Role, delivery_id: int, settled: bool, state: Any) -> None:
        """Batch a disposition (``role`` is the link's) until the next output:
        consecutive ids with the same outcome and settlement share one frame."""
        if not self.can_send():
            return  # the session is gone: the peer learns of it on resumption, if ever
        d = self._dispositions
        if not d:
            self.connection.flush_later(self)
        else:
            last = d[-1]
            if (
                last[0] == role
                and last[3] == settled
                and (last[4] is state or last[4] == state)  # a shared outcome object: no __eq__ call
                and ((last[2] + 1) & _MASK) == delivery_id
            ):
                last[2] = delivery_id
                return
        d.append([role, delivery_id, delivery_id, settled, state])

    def _flush_dispositions(self) -> None:
        pending = self._dispositions
        if not pending:
            return
        self._dispositions = []
        connection = self.connection
        for role, first, last, settled, state in pending:
            if type(state) in FIELDLESS_OUTCOMES:  # (accepted, released: no Disposition built)
                connection.write_disposition_frame(
                    self.channel, role, first, None if last == first else last, settled, state
                )
                continue
            connection.write_frame(
                self.channel,
                Disposition(
                    role=bool(role),
                    first=first,
                    last=None if last == first else last,
                    settled=settled,
                    state=state,
                ),
            )

    def queue_flow(self, link: Link, echo: bool) -> None:
        """Have ``link`` write its flow with the next output (a later flow() before then
        only changes what it says)."""
        flows = self._link_flows
        if not flows:
            self.connection.flush_later(self)
        flows[link] = echo or flows.get(link, False)

    def _flush_link_flows(self) -> None:
        flows, self._link_flows = self._link_flows, {}
        for link, echo in flows.items():
            link.write_flow(echo=echo)  # also carries the session's fields

    # -- the interface its connection uses ---------------------------------------------------
    def flush(self) -> None:
        """Write what was batched: dispositions, receivers' flows and a session flow
        (the connection calls it before handing out bytes, after ``flush_later``)."""
        if self._dispositions:
            self._flush_dispositions()
        if self._link_flows:
            self._flush_link_flows()
        if self._flow_pending and self.state is _MAPPED:
            self.write_flow()

    def _unblock(self) -> None:
        blocked, self._blocked = self._blocked, []
        for sender in blocked:
            sender.pump()

    # -- frames from the peer (called by the connection) ------------------------------------
    def receive_begin(self, begin: Begin, remote_channel: int) -> None:
        """The peer's begin, on its channel ``remote_channel`` (the connection mapped it)."""
        new = next_state(self.state, SessionInput.RECV_BEGIN)
        if new is None:
            raise ProtocolViolation(
                ErrorCondition.ILLEGAL_STATE, f"begin in session state {self.state.name}"
            )
        self.state = new
        self.remote_begin = begin
        self.remote_channel = remote_channel
        self.next_incoming_id = begin.next_outgoing_id
        self.remote_outgoing_window = begin.outgoing_window
        # what the peer will accept from us: its incoming window from our first id
        self.remote_incoming_window = begin.incoming_window
        self.remote_handle_max = begin.handle_max
        if self.state is _MAPPED:  # it answers ours: our window counts from here
            self._incoming_limit = (self.next_incoming_id + self.incoming_window) & _MASK
        self.connection.emit(SessionBegun(session=self))

    def receive_end(self, end: End) -> None:
        """The peer's end."""
        new = next_state(self.state, SessionInput.RECV_END)
        if new is None:
            raise ProtocolViolation(ErrorCondition.ILLEGAL_STATE, f"end in session state {self.state.name}")
        if self.state is SessionState.BEGIN_RCVD:
            # begun and ended before we answered: our begin must precede our end; before
            # our open nothing may be written, so the session is just forgotten
            if not self.connection.can_write():
                self.remote_end = end
                self.connection.emit(SessionEnded(session=self, error=end.error))
                self.teardown()
                return
            self.begin()
        self.state = new
        self.remote_end = end
        self.connection.emit(SessionEnded(session=self, error=end.error))
        if self.state is SessionState.END_RCVD:
            self.end()
        else:
            self._unmap_if_done()

    def _unmap_if_done(self) -> None:
        if self.state is SessionState.UNMAPPED:
            self.teardown()

    def teardown(self) -> None:
        """The session is gone (ended, or its connection closed): its links are detached.

        Unsettled deliveries stay in ``link.unsettled``, to resume the links
        elsewhere (§2.6.13); partly received deliveries are dropped.
        """
        self.state = SessionState.UNMAPPED
        self._done = True  # a session endpoint is not reused (§2.5.5: no need to retain it)
        self.connection.release_session(self)
        self._dispositions = []
        self._link_flows = {}
        self._flow_pending = False
        self._blocked = []
        for link in [*self.links.values(), *self._remote_links.values()]:
            link.teardown()
        self.links.clear()
        self._remote_links.clear()
        self._outgoing.clear()
        self._incoming.clear()

    def receive_attach(self, attach: Attach) -> None:
        """The peer's attach: it answers ours, or opens (or steals) a link."""
        h = attach.handle
        if h > self.handle_max:
            # §2.7.2 handle-max: "MUST close the connection with the framing-error"
            raise ProtocolViolation(
                ErrorCondition.FRAMING_ERROR, f"handle {h} exceeds handle-max {self.handle_max}"
            )
        if h in self._remote_links:
            # §2.7.3 handle: "responded to with ... a handle-in-use session-error"
            raise ProtocolViolation(
                ErrorCondition.HANDLE_IN_USE, f"handle {h} is already attached", "session", self
            )
        # the peer's role is attach.role; our endpoint has the other one
        our_role = Role.SENDER if attach.role else Role.RECEIVER
        link = self.connection.link_named(attach.name, our_role)
        if link is not None and link.session is self and link.state in _AWAITING_ATTACH:
            pass  # the answer to our attach (or one crossing our detach)
        else:
            if link is not None and link.state in _STEALABLE:
                # §2.6.1: a second attach of an active link steals it; the first is
                # detached with amqp:link:stolen. (Not closed: the terminus lives on,
                # now with the new link.)
                error = Error(condition=ErrorCondition.STOLEN, description=f"link {attach.name!r} stolen by a new attach")
                if link.session.can_send():
                    link.detach(error)
                else:  # its session is ending: that detaches it anyway
                    link.teardown()
                self.connection.emit(LinkFailed(link=link, error=error))
            link = Receiver(self, attach.name) if our_role == Role.RECEIVER else Sender(self, attach.name)
            link.snd_settle_mode = int(attach.snd_settle_mode)
            link.rcv_settle_mode = int(attach.rcv_settle_mode)
            self.connection.add_link_name(link)
        self._remote_links[h] = link
        link.receive_attach(attach)

    def _link_for(self, handle: int | None, what: str) -> Link:
        if handle is None:
            raise ProtocolViolation(ErrorCondition.INVALID_FIELD, f"{what} without a handle", "session", self)
        link = self._remote_links.get(handle)
        if link is None:
            raise ProtocolViolation(
                ErrorCondition.UNATTACHED_HANDLE, f"{what} for unattached handle {handle}", "session", self
            )
        return link

    def receive_detach(self, detach: Detach) -> None:
        """The peer's detach: the link's remote handle is free at once."""
        link = self._link_for(detach.handle, "detach")
        del self._remote_links[detach.handle]
        link.receive_detach(detach)

    def receive_flow(self, flow: Flow) -> None:
        """The peer's flow: its session window, and a link's flow if it names a handle."""
        # remote-incoming-window := next-incoming-id(flow) + incoming-window(flow) - next-outgoing-id
        nid = flow.next_incoming_id
        if nid is None:
            nid = self._initial_outgoing_id  # the peer has not seen our begin yet
        self.remote_incoming_window = serial.diff(
            (nid + flow.incoming_window) & _MASK, self.next_outgoing_id
        )
        self.remote_outgoing_window = flow.outgoing_window
        if flow.handle is not None:
            link = self._link_for(flow.handle, "flow")
            if link.state in LINK_ACCEPTS or link.state is LinkState.ATTACH_RCVD:
                # a peer may send its flow right behind its attach, before we answer
                # it (Proton's receivers do): keep the credit for when we attach
                link.receive_flow(flow)
        elif flow.echo and self.can_send():
            self.write_flow()
        if self._blocked and self.remote_incoming_window > 0:
            self._unblock()

    def receive_transfer(self, transfer: Transfer, payload: bytes) -> None:
        """A transfer frame: it takes one unit of our incoming window (§2.5.6)."""
        # §2.5.6: the transfer-id (implicitly next-incoming-id) must lie below the limit
        # we announced: next-incoming-id + incoming-window as of our last begin or flow
        limit = self._incoming_limit
        if limit is None or not serial.lt(self.next_incoming_id, limit):
            raise ProtocolViolation(
                ErrorCondition.WINDOW_VIOLATION,
                f"transfer {self.next_incoming_id} beyond the session's incoming window",
                "session",
                self,
            )
        self.next_incoming_id = nid = (self.next_incoming_id + 1) & _MASK
        self.remote_outgoing_window -= 1
        self.incoming_window = left = serial.diff(limit, nid)
        if left <= self.max_incoming_window // 2 and not self._flow_pending:
            # re-open the window with a session flow, written with the next output
            self._flow_pending = True
            self.connection.flush_later(self)
        link = self._link_for(transfer.handle, "transfer")
        if link.state in LINK_ACCEPTS:
            link.receive_transfer(transfer, payload)

    def receive_disposition(self, disp: Disposition) -> None:
        """The peer's disposition: each delivery it covers goes to its link."""
        # role is the peer's: a receiver's disposition is about our outgoing deliveries
        table = self._outgoing if disp.role else self._incoming
        first = disp.first
        last = disp.last
        ids: tuple[int, ...] | list[int]
        if last is None or last == first:
            ids = (first,)  # one delivery (a disposition per message): no list to build
        else:
            count = ((last - first) & _MASK) + 1
            if count > len(table):
                # a wide range: walk what we hold rather than the whole range
                ids = [i for i in table if serial.in_range(i, first, last)]
            else:
                ids = [(first + k) & _MASK for k in range(count)]
        for i in ids:
            d = table.get(i)
            if d is not None:
                d.link.receive_disposition(d, disp.state, disp.settled)
