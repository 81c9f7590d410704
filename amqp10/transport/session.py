"""Sessions (Part 2 §2.5): channels, transfer windows, delivery-ids, link handles."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
from .errors import IllegalStateError, ProtocolViolation
from .events import SessionBegun, SessionEnded
from .link import Link, Receiver, Sender
from .link_state import ACCEPTS_FRAMES as LINK_ACCEPTS, LinkState
from .session_state import ACCEPTS_FRAMES, SessionInput, SessionState, next_state

if TYPE_CHECKING:
    from .connection import Connection
    from .delivery import Delivery

__all__ = ["Session"]

_MASK = serial.MASK
_MAX_WINDOW = 0x7FFFFFFF


class Session:
    """A session endpoint: create links on it with ``sender()``/``receiver()``."""

    def __init__(
        self,
        connection: Connection,
        channel: int,
        *,
        incoming_window: int = 2048,
        outgoing_window: int = _MAX_WINDOW,
        handle_max: int = 0xFFFFFFFF,
        properties: dict[Any, Any] | None = None,
        offered_capabilities: list[str] | None = None,
        desired_capabilities: list[str] | None = None,
    ) -> None:
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
        self.next_outgoing_id = 0
        self.outgoing_window = outgoing_window
        self.max_incoming_window = incoming_window
        self.incoming_window = incoming_window
        self.next_incoming_id = 0
        self.remote_incoming_window = 0
        self.remote_outgoing_window = 0
        self.handle_max = handle_max
        self.remote_handle_max = 0xFFFFFFFF
        self._next_delivery_id = 0
        # links by our handle, by the peer's handle, and by (name, role)
        self.links: dict[int, Link] = {}
        self._remote_links: dict[int, Link] = {}
        # deliveries we have not settled, by delivery-id: ours (outgoing) and the peer's
        self._outgoing: dict[int, Delivery] = {}
        self._incoming: dict[int, Delivery] = {}
        self._dispositions: list[list[Any]] = []  # [role, first, last, settled, state]
        self._flow_pending = False
        self._blocked: list[Sender] = []  # senders waiting for the remote incoming window

    def __repr__(self) -> str:
        return f"Session(channel={self.channel}, remote_channel={self.remote_channel}, state={self.state.name})"

    # -- begin / end ------------------------------------------------------------------
    def _move(self, event: SessionInput) -> None:
        new = next_state(self.state, event)
        if new is None:
            raise IllegalStateError(f"session: cannot {event.value} in state {self.state.name}")
        self.state = new

    def begin(self) -> None:
        """Send our begin: starting a session, or accepting one the peer began."""
        if next_state(self.state, SessionInput.SEND_BEGIN) is None:
            raise IllegalStateError(f"session: cannot begin in state {self.state.name}")
        self.connection._check_can_begin()
        self._move(SessionInput.SEND_BEGIN)
        self.connection._write_frame(
            self.channel,
            Begin(
                remote_channel=self.remote_channel,
                next_outgoing_id=self.next_outgoing_id,
                incoming_window=self.incoming_window,
                outgoing_window=self.outgoing_window,
                handle_max=self.handle_max,
                offered_capabilities=self.offered_capabilities,
                desired_capabilities=self.desired_capabilities,
                properties=self.properties,
            ),
        )

    def end(self, error: Error | None = None) -> None:
        """End the session (detaching its links); a session the peer began is begun first."""
        if self.state is SessionState.BEGIN_RCVD:
            self.begin()
        event = SessionInput.SEND_END_ERROR if error is not None else SessionInput.SEND_END
        if next_state(self.state, event) is None:
            raise IllegalStateError(f"session: cannot end in state {self.state.name}")
        self._flush_dispositions()
        self._move(event)
        self.connection._write_frame(self.channel, End(error=error))
        self._unmap_if_done()

    @property
    def is_mapped(self) -> bool:
        return self.state is SessionState.MAPPED

    # -- links ------------------------------------------------------------------------
    def sender(self, name: str, **kwargs: Any) -> Sender:
        """Create a sending link (attach it with ``link.attach()``)."""
        return Sender(self, name, **kwargs)

    def receiver(self, name: str, **kwargs: Any) -> Receiver:
        """Create a receiving link (attach it with ``link.attach()``)."""
        return Receiver(self, name, **kwargs)

    def _check_can_attach(self) -> None:
        if self.state not in (SessionState.MAPPED, SessionState.BEGIN_SENT):
            raise IllegalStateError(f"session is not mapped ({self.state.name})")

    def _allocate_handle(self, link: Link) -> int:
        for h in range(min(len(self.links) + 1, self.handle_max + 1, self.remote_handle_max + 1)):
            if h not in self.links:
                self.links[h] = link
                return h
        raise IllegalStateError("no link handle free (handle-max reached)")

    def _release_link(self, link: Link) -> None:
        if link.handle is not None and self.links.get(link.handle) is link:
            del self.links[link.handle]
        if link.remote_handle is not None and self._remote_links.get(link.remote_handle) is link:
            del self._remote_links[link.remote_handle]
        if link in self._blocked:
            self._blocked.remove(link)  # type: ignore[arg-type]
        self.connection._link_names.pop((link.name, link.role), None)

    # -- output -----------------------------------------------------------------------
    def _write(self, performative: Any) -> None:
        if self._dispositions:
            self._flush_dispositions()
        self.connection._write_frame(self.channel, performative)

    def _write_transfer(self, transfer: Transfer, payload: bytes | memoryview) -> None:
        if self._dispositions:
            self._flush_dispositions()
        self.connection._write_frame(self.channel, transfer, payload)
        self.next_outgoing_id = (self.next_outgoing_id + 1) & _MASK
        self.remote_incoming_window -= 1

    def _session_flow_fields(self) -> dict[str, Any]:
        return {
            "next_incoming_id": self.next_incoming_id if self.remote_begin is not None else None,
            "incoming_window": self.incoming_window,
            "next_outgoing_id": self.next_outgoing_id,
            "outgoing_window": self.outgoing_window,
        }

    def _write_flow(self, link: Link | None = None, *, echo: bool = False) -> None:
        self._flow_pending = False
        if link is None:
            self._write(Flow(echo=echo, **self._session_flow_fields()))
            return
        self._write(
            Flow(
                handle=link.handle,
                delivery_count=link.delivery_count,
                link_credit=link.credit,
                available=link.available if link.role == Role.SENDER else None,
                drain=link.drain,
                echo=echo,
                **self._session_flow_fields(),
            )
        )

    def _queue_disposition(self, role: Role, delivery_id: int, settled: bool, state: Any) -> None:
        d = self._dispositions
        if not d:
            self.connection._dirty_sessions.add(self)
        else:
            last = d[-1]
            if (
                last[0] == role
                and last[3] == settled
                and last[4] == state
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
        write = self.connection._write_frame
        for role, first, last, settled, state in pending:
            write(
                self.channel,
                Disposition(
                    role=bool(role),
                    first=first,
                    last=None if last == first else last,
                    settled=settled,
                    state=state,
                ),
            )

    def _flush(self) -> None:
        """Write what was batched: dispositions and a session flow."""
        if self._dispositions:
            self._flush_dispositions()
        if self._flow_pending and self.state is SessionState.MAPPED:
            self._write_flow()

    # -- sending deliveries ---------------------------------------------------------------
    def _pump(self, link: Sender) -> None:
        """Write as much of the sender's queue as credit and the session window allow."""
        queue = link._queue
        max_payload = self.connection._max_transfer_payload
        while queue:
            if self.remote_incoming_window <= 0 or self.state is not SessionState.MAPPED:
                if link not in self._blocked:
                    self._blocked.append(link)
                return
            d = queue[0]
            if d.delivery_id is None:
                if link.credit <= 0:
                    return
                link.credit -= 1
                link.delivery_count = (link.delivery_count + 1) & _MASK
                d.delivery_id = self._next_delivery_id
                self._next_delivery_id = (self._next_delivery_id + 1) & _MASK
                if not d.settled:
                    self._outgoing[d.delivery_id] = d
                first = True
            else:
                first = False
            payload = d.payload
            size = len(payload)
            while True:
                # room left in a frame once the transfer performative is written
                room = max_payload - (26 + len(d.tag) if first else 17)
                end = d._offset + room
                more = end < size
                chunk = payload[d._offset : end] if (more or d._offset) else payload
                assert link.handle is not None
                if first:
                    t = Transfer(
                        handle=link.handle,
                        delivery_id=d.delivery_id,
                        delivery_tag=d.tag,
                        message_format=d.message_format,
                        settled=d.settled,
                        more=more,
                    )
                else:
                    t = Transfer(handle=link.handle, more=more)
                self._write_transfer(t, chunk)
                first = False
                d._offset = min(end, size)
                if not more:
                    break
                if self.remote_incoming_window <= 0:
                    if link not in self._blocked:
                        self._blocked.append(link)
                    return
            d.sent = True
            queue.popleft()
            if link.drain and link.credit > 0 and not queue:
                pass  # the application finishes the drain with drained()

    def _unblock(self) -> None:
        blocked, self._blocked = self._blocked, []
        for link in blocked:
            if link.state in LINK_ACCEPTS and link._queue:
                self._pump(link)

    # -- delivery bookkeeping ---------------------------------------------------------------
    def _track_incoming(self, d: Delivery) -> None:
        assert d.delivery_id is not None
        self._incoming[d.delivery_id] = d

    def _forget_delivery(self, role: Role, delivery_id: int) -> None:
        if role == Role.SENDER:
            self._outgoing.pop(delivery_id, None)
        else:
            self._incoming.pop(delivery_id, None)

    # -- frames from the peer (called by the connection) ------------------------------------
    def _on_begin(self, begin: Begin, remote_channel: int) -> None:
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
        self.connection._emit(SessionBegun(session=self))

    def _on_end(self, end: End) -> None:
        new = next_state(self.state, SessionInput.RECV_END)
        if new is None:
            raise ProtocolViolation(ErrorCondition.ILLEGAL_STATE, f"end in session state {self.state.name}")
        self.state = new
        self.remote_end = end
        self.connection._emit(SessionEnded(session=self, error=end.error))
        if self.state is SessionState.END_RCVD:
            self.end()
        else:
            self._unmap_if_done()

    def _unmap_if_done(self) -> None:
        if self.state is SessionState.UNMAPPED:
            self.connection._unmap_session(self)

    def _accepts_frames(self) -> bool:
        return self.state in ACCEPTS_FRAMES

    def _on_attach(self, attach: Attach) -> None:
        h = attach.handle
        if h > self.handle_max:
            raise ProtocolViolation(
                ErrorCondition.NOT_ALLOWED,
                f"handle {h} exceeds handle-max {self.handle_max}",
                "session",
                self,
            )
        if h in self._remote_links:
            raise ProtocolViolation(
                ErrorCondition.HANDLE_IN_USE, f"handle {h} is already attached", "session", self
            )
        # the peer's role is attach.role; our endpoint has the other one
        our_role = Role.SENDER if attach.role else Role.RECEIVER
        key = (attach.name, our_role)
        link = self.connection._link_names.get(key)
        if link is not None and link.session is not self:
            link = None  # named link on another session: handled as stealing below
        if link is None or link.state not in (LinkState.ATTACH_SENT, LinkState.DETACH_SENT):
            if link is not None and link.state in LINK_ACCEPTS:
                # a new attach for a link already active: the new one steals the name (§2.6.1)
                link.detach(Error(condition=ErrorCondition.STOLEN, description="link stolen by a new attach"))
            old = self.connection._link_names.get(key)
            if old is not None and old.session is not self and old.state in LINK_ACCEPTS:
                old.detach(Error(condition=ErrorCondition.STOLEN, description="link stolen by a new attach"))
            link = Receiver(self, attach.name) if our_role == Role.RECEIVER else Sender(self, attach.name)
            link.snd_settle_mode = attach.snd_settle_mode
            link.rcv_settle_mode = attach.rcv_settle_mode
            self.connection._link_names[key] = link
        self._remote_links[h] = link
        link._on_attach(attach)

    def _link_for(self, handle: int | None, what: str) -> Link:
        if handle is None:
            raise ProtocolViolation(ErrorCondition.INVALID_FIELD, f"{what} without a handle", "session", self)
        link = self._remote_links.get(handle)
        if link is None:
            raise ProtocolViolation(
                ErrorCondition.UNATTACHED_HANDLE, f"{what} for unattached handle {handle}", "session", self
            )
        return link

    def _on_detach(self, detach: Detach) -> None:
        link = self._link_for(detach.handle, "detach")
        del self._remote_links[detach.handle]
        link._on_detach(detach)

    def _on_flow(self, flow: Flow) -> None:
        # remote-incoming-window := next-incoming-id(flow) + incoming-window(flow) - next-outgoing-id
        nid = flow.next_incoming_id
        if nid is None:
            nid = 0  # the peer has not seen our begin: our initial next-outgoing-id
        self.remote_incoming_window = serial.diff(
            (nid + flow.incoming_window) & _MASK, self.next_outgoing_id
        )
        self.remote_outgoing_window = flow.outgoing_window
        if flow.handle is not None:
            link = self._link_for(flow.handle, "flow")
            if link.state in LINK_ACCEPTS:
                link._on_flow(flow)
        elif flow.echo:
            self._write_flow()
        if self._blocked and self.remote_incoming_window > 0:
            self._unblock()

    def _on_transfer(self, transfer: Transfer, payload: bytes) -> None:
        if self.incoming_window <= 0:
            raise ProtocolViolation(
                ErrorCondition.WINDOW_VIOLATION,
                "transfer beyond the session's incoming window",
                "session",
                self,
            )
        self.next_incoming_id = (self.next_incoming_id + 1) & _MASK
        self.incoming_window -= 1
        self.remote_outgoing_window -= 1
        if self.incoming_window <= self.max_incoming_window // 2:
            self.incoming_window = self.max_incoming_window
            self._flow_pending = True
            self.connection._dirty_sessions.add(self)
        link = self._link_for(transfer.handle, "transfer")
        if link.state in LINK_ACCEPTS:
            link._on_transfer(transfer, payload)

    def _on_disposition(self, disp: Disposition) -> None:
        # role is the peer's: a receiver's disposition is about our outgoing deliveries
        table = self._outgoing if disp.role else self._incoming
        first = disp.first
        last = first if disp.last is None else disp.last
        count = ((last - first) & _MASK) + 1
        if count > len(table):
            # a wide range: walk what we hold rather than the whole range
            ids = [i for i in table if serial.in_range(i, first, last)]
        else:
            ids = [(first + k) & _MASK for k in range(count)]
        for i in ids:
            d = table.get(i)
            if d is not None:
                d.link._on_disposition(d, disp.state, disp.settled)
