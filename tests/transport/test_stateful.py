"""Stateful and state-space tests of the engine: two correct peers, random applications.

``EnginePairMachine`` drives a client and a server ``Connection`` with random
application actions on both sides (sessions, links of every settle-mode
combination, credit, drain, echo, sends of 0..3 frames, aborts, settlements)
and moves the bytes between them in random amounts and chunk sizes. Every
frame either side writes is decoded and checked against what that side had
seen of its peer when it wrote it (``WireTracker``): session windows, link
credit, max-frame-size, settlement at most once, no frame on a channel or
handle that is not (or no longer) ours. ``settle_and_verify`` drives both
sides to quiescence and checks that nothing was lost or duplicated and that
every delivery was settled at each end.

``TestTransitionTables`` feeds every peer input the three transition tables do
not allow, in every reachable state, and checks for a clean protocol-error
teardown with the right condition; every input they allow must move the endpoint
as the table says (h2's ``tests/test_state_machines.py`` idea).

Longer runs: ``AMQP10_STATEFUL=long`` (or ``bench/fuzz_engine.py --stateful``);
``AMQP10_NOSHRINK=1`` skips shrinking (a failure is reported at once, unshrunk).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from amqp10.transport import (
    Connection,
    ConnectionClosed,
    ConnectionFailed,
    ConnectionOpened,
    CreditAdded,
    CreditLowered,
    Delivery,
    DeliveryAborted,
    DeliveryReceived,
    DeliveryUpdated,
    DrainRequested,
    Event,
    FlowReceived,
    IllegalStateError,
    Link,
    LinkAttached,
    LinkDetached,
    LinkFailed,
    LinkState,
    Receiver,
    Sender,
    Session,
    SessionBegun,
    SessionEnded,
    SessionFailed,
    SessionState,
    serial,
)
from amqp10.transport import connection_state as cstate
from amqp10.transport import link_state as lstate
from amqp10.transport import session_state as sstate
from amqp10.transport.framing import AMQP_HEADER, FRAME_HEADER, encode_frame
from amqp10.types import (
    Accepted,
    Attach,
    Begin,
    Close,
    Detach,
    Disposition,
    End,
    Error,
    ErrorCondition,
    Flow,
    Modified,
    Open,
    Received,
    ReceiverSettleMode,
    Rejected,
    Released,
    Role,
    SenderSettleMode,
    Source,
    Target,
    Transfer,
    codec,
)

SENDER_MODES = (SenderSettleMode.UNSETTLED, SenderSettleMode.SETTLED, SenderSettleMode.MIXED)
RECEIVER_MODES = (ReceiverSettleMode.FIRST, ReceiverSettleMode.SECOND)
FRAME_SIZES = (512, 1024, 4096)
WINDOWS = (1, 2, 3, 8, 2048)
FAILURES = (ConnectionFailed, SessionFailed, LinkFailed)


# --------------------------------------------------------------------------------------
# frames on the wire
# --------------------------------------------------------------------------------------
@dataclass
class Frame:
    """One decoded frame (or the protocol header, with ``perf`` None and ``header`` set)."""

    size: int
    channel: int = 0
    perf: Any = None
    payload: int = 0
    header: bool = False


def split_frames(data: bytes, header_expected: bool) -> Iterator[tuple[Frame, bytes]]:
    """Split what ``data_to_send()`` returned into whole frames (it never returns part of one)."""
    pos = 0
    if header_expected:
        assert data[:8] == AMQP_HEADER, f"expected the protocol header, got {data[:8]!r}"
        yield Frame(size=8, header=True), data[:8]
        pos = 8
    while pos < len(data):
        assert len(data) - pos >= 8, "data_to_send() returned part of a frame header"
        size, doff, ftype, channel = FRAME_HEADER.unpack_from(data, pos)
        assert doff == 2 and ftype == 0, (doff, ftype)
        assert pos + size <= len(data), "data_to_send() returned part of a frame"
        if size == 8:
            yield Frame(size=8, channel=channel), data[pos : pos + 8]
        else:
            perf, end = codec.decode_at(data, pos + 8)
            assert end <= pos + size
            yield (
                Frame(size=size, channel=channel, perf=perf, payload=pos + size - end),
                data[pos : pos + size],
            )
        pos += size


@dataclass
class LinkWire:
    """A link as one endpoint's wire traffic shows it."""

    name: str
    role: Role | None = None  # our role, once our attach is out
    initial: int = 0  # initial-delivery-count (when we are the sender)
    snd_count: int = 0  # our delivery-count, as sender
    rcv_limit: int = 0  # delivery-count + link-credit the peer last granted us
    current: tuple[str, bytes] | None = None  # multi-frame delivery in progress (outgoing)


@dataclass
class SessWire:
    """A session as one endpoint's wire traffic shows it."""

    initial_out: int | None = None  # our begin's next-outgoing-id
    next_out: int = 0
    peer_nid: int | None = None  # next-incoming-id of the peer's last flow (None: our initial)
    peer_iw: int | None = None  # incoming-window of the peer's begin / last flow
    links: dict[str, LinkWire] = field(default_factory=dict)
    out_handles: dict[int, str] = field(default_factory=dict)
    in_handles: dict[int, str] = field(default_factory=dict)
    out_ids: dict[int, tuple[str, bytes]] = field(default_factory=dict)
    in_ids: dict[int, tuple[str, bytes]] = field(default_factory=dict)
    in_current: dict[int, int] = field(default_factory=dict)
    peer_ended: bool = False
    we_ended: bool = False

    def remote_window(self) -> int:
        assert self.initial_out is not None and self.peer_iw is not None
        nid = self.initial_out if self.peer_nid is None else self.peer_nid
        return serial.diff(serial.add(nid, self.peer_iw), self.next_out)


class WireTracker:
    """Decodes one endpoint's output and input and checks what it writes.

    ``on_in`` is called when a frame has been delivered to the endpoint in full,
    ``on_out`` for each frame it writes; the harness drains the endpoint after
    every piece of input, so a frame is judged against what its writer had seen.
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self.peer_max_frame = 512
        self.by_out: dict[int, SessWire] = {}
        self.by_in: dict[int, SessWire] = {}
        self.settled: set[tuple[str, bytes]] = set()
        self.header_out = False
        self.frames_out = 0

    def fail(self, msg: str) -> None:
        raise AssertionError(f"{self.label} wrote a bad frame: {msg}")

    # -- what the endpoint received -------------------------------------------------
    def on_in(self, f: Frame) -> None:
        p = f.perf
        if p is None:
            return
        tp = type(p)
        if tp is Open:
            self.peer_max_frame = p.max_frame_size
            return
        if tp is Close:
            return
        if tp is Begin:
            if p.remote_channel is not None:
                rec = self.by_out[p.remote_channel]
            else:
                rec = SessWire()
            rec.peer_nid = None
            rec.peer_iw = p.incoming_window
            self.by_in[f.channel] = rec
            return
        rec = self.by_in.get(f.channel)
        assert rec is not None and not rec.peer_ended, (
            f"the peer of {self.label} sent {p!r} on unmapped channel {f.channel}"
        )
        if tp is End:
            rec.peer_ended = True  # kept: our begin may still answer the peer's
        elif tp is Flow:
            rec.peer_nid = p.next_incoming_id
            rec.peer_iw = p.incoming_window
            if p.handle is not None and p.link_credit is not None:
                lw = rec.links.get(rec.in_handles.get(p.handle, ""))
                if lw is not None and lw.role == Role.SENDER:
                    dc = lw.initial if p.delivery_count is None else p.delivery_count
                    lw.rcv_limit = serial.add(dc, p.link_credit)
        elif tp is Attach:
            rec.in_handles[p.handle] = p.name
            rec.in_current.pop(p.handle, None)
            rec.links.setdefault(p.name, LinkWire(p.name))
        elif tp is Detach:
            rec.in_handles.pop(p.handle, None)
            rec.in_current.pop(p.handle, None)  # a delivery cut short by the detach
        elif tp is Transfer:
            name = rec.in_handles[p.handle]
            cur = rec.in_current.get(p.handle)
            if cur is None:
                rec.in_ids[p.delivery_id] = (name, p.delivery_tag)
                if p.more and not p.aborted:
                    rec.in_current[p.handle] = p.delivery_id
            elif not p.more or p.aborted:
                del rec.in_current[p.handle]

    # -- what the endpoint wrote ------------------------------------------------------
    def on_out(self, f: Frame) -> None:
        self.frames_out += 1
        if f.header:
            self.header_out = True
            return
        if f.size > self.peer_max_frame:
            self.fail(f"frame of {f.size} bytes > the peer's max-frame-size {self.peer_max_frame}")
        p = f.perf
        if p is None:
            return
        tp = type(p)
        if tp is not Transfer and f.payload:
            self.fail(f"{tp.__name__} with {f.payload} bytes after the performative")
        if tp in (Open, Close):
            if f.channel != 0 and tp is Open:
                self.fail("open on a channel other than 0")
            return
        if tp is Begin:
            old = self.by_out.get(f.channel)
            if old is not None and not (old.we_ended and old.peer_ended):
                self.fail(f"begin on channel {f.channel}, which is still in use")
            if p.remote_channel is not None:
                rec = self.by_in.get(p.remote_channel)
                if rec is None:
                    self.fail(f"begin answers peer channel {p.remote_channel}, which is not mapped")
                    return
            else:
                rec = SessWire()
            rec.initial_out = rec.next_out = p.next_outgoing_id
            self.by_out[f.channel] = rec
            return
        rec = self.by_out.get(f.channel)
        if rec is None or rec.we_ended:
            self.fail(
                f"{tp.__name__} on channel {f.channel}, which has no begun session (or was ended)"
            )
            return
        if tp is End:
            rec.we_ended = True  # kept: the peer's begin may still answer ours
        elif tp is Attach:
            if p.handle in rec.out_handles:
                self.fail(f"attach on handle {p.handle}, which is in use")
            rec.out_handles[p.handle] = p.name
            lw = rec.links.setdefault(p.name, LinkWire(p.name))
            lw.role = Role.RECEIVER if p.role else Role.SENDER
            if lw.role == Role.SENDER:
                if p.initial_delivery_count is None:
                    self.fail("a sender's attach without initial-delivery-count")
                lw.initial = lw.snd_count = lw.rcv_limit = p.initial_delivery_count
        elif tp is Detach:
            if rec.out_handles.pop(p.handle, None) is None:
                self.fail(f"detach on handle {p.handle}, which is not attached")
        elif tp is Flow:
            if p.handle is not None:
                name = rec.out_handles.get(p.handle)
                if name is None:
                    self.fail(f"flow on handle {p.handle}, which is not attached")
                    return
                lw = rec.links[name]
                if lw.role == Role.SENDER:
                    dc = p.delivery_count
                    if dc is None or serial.lt(dc, lw.snd_count):
                        self.fail(f"sender flow moves delivery-count back ({dc} < {lw.snd_count})")
                    # an advance (a drain giving back credit) stops at the limit in force; the
                    # receiver may since have lowered it below a count we reached before
                    if dc != lw.snd_count and serial.lt(lw.rcv_limit, dc):
                        self.fail(
                            f"sender flow delivery-count {dc} beyond the granted limit {lw.rcv_limit}"
                        )
                    if p.link_credit and serial.lt(lw.rcv_limit, serial.add(dc, p.link_credit)):
                        self.fail(
                            f"sender flow claims credit {p.link_credit} beyond the granted limit"
                            f" {lw.rcv_limit} (delivery-count {dc})"
                        )
                    lw.snd_count = dc
        elif tp is Transfer:
            self._on_out_transfer(rec, p)
        elif tp is Disposition:
            table = rec.in_ids if p.role else rec.out_ids
            last = p.first if p.last is None else p.last
            n = serial.diff(last, p.first) + 1
            if not 1 <= n <= 1 << 16:
                self.fail(f"disposition range {p.first}..{last}")
            for k in range(n):
                i = serial.add(p.first, k)
                key = table.get(i)
                if key is None:
                    self.fail(f"disposition for delivery-id {i}, which was never transferred")
                    return
                if p.settled:
                    if key in self.settled:
                        self.fail(f"disposition settles {key}, which this end settled before")
                    self.settled.add(key)

    def _on_out_transfer(self, rec: SessWire, p: Transfer) -> None:
        name = rec.out_handles.get(p.handle)
        if name is None:
            self.fail(f"transfer on handle {p.handle}, which is not attached")
            return
        lw = rec.links[name]
        if lw.role != Role.SENDER:
            self.fail(f"transfer on link {name!r}, where this end is the receiver")
        if rec.peer_iw is None:
            self.fail("transfer before the peer's begin arrived")
        if rec.remote_window() <= 0:
            self.fail(
                f"transfer {rec.next_out} beyond the peer's incoming window "
                f"(next-incoming-id {rec.peer_nid}, incoming-window {rec.peer_iw})"
            )
        rec.next_out = serial.add(rec.next_out, 1)
        if lw.current is None:
            if p.delivery_id is None or p.delivery_tag is None:
                self.fail("first transfer of a delivery without delivery-id or tag")
                return
            if serial.diff(lw.rcv_limit, lw.snd_count) <= 0:
                self.fail(
                    f"new delivery on {name!r} without credit (delivery-count {lw.snd_count},"
                    f" limit {lw.rcv_limit})"
                )
            lw.snd_count = serial.add(lw.snd_count, 1)
            key = (name, bytes(p.delivery_tag))
            if p.delivery_id in rec.out_ids:
                self.fail(f"delivery-id {p.delivery_id} used twice")
            rec.out_ids[p.delivery_id] = key
            if p.more and not p.aborted:
                lw.current = key
        else:
            key = lw.current
            if p.delivery_id is not None and rec.out_ids.get(p.delivery_id) != key:
                self.fail("continuation transfer names another delivery")
            if not p.more or p.aborted:
                lw.current = None
        if p.settled:
            self.settled.add(key)


# --------------------------------------------------------------------------------------
# the application model
# --------------------------------------------------------------------------------------
class SentRec:
    """A delivery the application sent (records are plain classes: short reprs in reports)."""

    def __init__(
        self, key: tuple[str, bytes], delivery: Delivery, payload: bytes, app_settled: bool
    ) -> None:
        self.key = key
        self.delivery = delivery
        self.payload = payload
        self.aborted = False
        self.app_settled = app_settled
        self.updated = False  # the receiver sent a disposition for it

    def __repr__(self) -> str:
        return f"sent{self.key}"


class RecvRec:
    """A delivery the application received."""

    def __init__(self, key: tuple[str, bytes], delivery: Delivery) -> None:
        self.key = key
        self.delivery = delivery
        self.app_settled = False

    def __repr__(self) -> str:
        return f"received{self.key}"


class LinkRec:
    """Both endpoints of one link (names are never reused)."""

    def __init__(self, name: str, sender_side: str) -> None:
        self.name = name
        self.sender_side = sender_side
        self.sender: Sender | None = None
        self.receiver: Receiver | None = None
        self.next_payload = 0


class Side:
    """One peer: its engine, what the application knows, and its outbound byte queue."""

    def __init__(self, name: str, conn: Connection, tracker: WireTracker) -> None:
        self.name = name
        self.conn = conn
        self.tracker = tracker
        self.outq: deque[tuple[bytearray, Frame]] = deque()
        self.sessions: list[Session] = []
        self.links: list[Link] = []
        self.pending_sessions: list[Session] = []
        self.pending_links: list[Link] = []
        self.sent: dict[tuple[str, bytes], SentRec] = {}
        self.received: dict[tuple[str, bytes], RecvRec] = {}

    def __repr__(self) -> str:
        return "client" if self.name == "c" else "server"


def payload_for(name: str, n: int, size: int) -> bytes:
    seed = f"{name}/{n};".encode()
    return (seed * (size // len(seed) + 1))[:size]


def live_session(s: Session) -> bool:
    return s.state in (SessionState.MAPPED, SessionState.BEGIN_SENT)


def live_link(link: Link) -> bool:
    return link.state in (LinkState.ATTACHED, LinkState.ATTACH_SENT) and live_session(link.session)


OUTCOMES = st.sampled_from(
    [
        Accepted(),
        Released(),
        Rejected(error=Error(condition=ErrorCondition.NOT_ALLOWED, description="no")),
        Modified(delivery_failed=True, undeliverable_here=False),
        None,
    ]
)


class EnginePairMachine(RuleBasedStateMachine):
    """Two engines, random correct applications on both sides, bytes moved at random."""

    def __init__(self) -> None:
        super().__init__()
        self.sides: dict[str, Side] = {}
        self.link_recs: dict[str, LinkRec] = {}
        self.counter = 0
        self.accept_window = 2048

    # -- plumbing ----------------------------------------------------------------------
    def other(self, side: Side) -> Side:
        return self.sides["s" if side.name == "c" else "c"]

    def drain(self, side: Side) -> None:
        self.handle(side, side.conn.poll_events())  # events raised by local calls
        data = side.conn.data_to_send()
        if not data:
            return
        for f, raw in split_frames(data, not side.tracker.header_out):
            side.tracker.on_out(f)
            side.outq.append((bytearray(raw), f))

    def deliver(self, src: Side, budget: int | None, chunk: int | None) -> int:
        """Move up to ``budget`` bytes from ``src`` to its peer in pieces of ``chunk``."""
        dst = self.other(src)
        moved = 0
        while src.outq and (budget is None or moved < budget):
            seg, f = src.outq[0]
            k = len(seg)
            if chunk is not None:
                k = min(k, chunk)
            if budget is not None:
                k = min(k, budget - moved)
            piece = bytes(seg[:k])
            del seg[:k]
            moved += k
            events = dst.conn.receive_data(piece)
            if not seg:
                src.outq.popleft()
                dst.tracker.on_in(f)
            self.handle(dst, events)
            self.drain(dst)
        return moved

    def pump_until_quiet(self, chunk: int | None = None) -> None:
        for _ in range(10_000):
            for side in self.sides.values():
                self.drain(side)
                self.accept_pending(side)
                self.drain(side)
            c, s = self.sides["c"], self.sides["s"]
            if not c.outq and not s.outq:
                return
            self.deliver(c, None, chunk)
            self.deliver(s, None, chunk)
        raise AssertionError("the pair did not quiesce")

    # -- events: what a correct application does -------------------------------------------
    def handle(self, side: Side, events: list[Event]) -> None:
        for ev in events:
            if isinstance(ev, FAILURES):
                raise AssertionError(f"{side.name}: the engine reported a peer violation: {ev!r}")
            if isinstance(ev, ConnectionClosed):
                raise AssertionError(f"{side.name}: unexpected close {ev!r}")
            if isinstance(ev, ConnectionOpened):
                continue
            if isinstance(ev, SessionBegun):
                if ev.session not in side.sessions:
                    side.sessions.append(ev.session)
                if ev.session.state is SessionState.BEGIN_RCVD:
                    side.pending_sessions.append(ev.session)
            elif isinstance(ev, SessionEnded):
                assert (
                    ev.error is None or ev.error.condition == ErrorCondition.RESOURCE_LIMIT_EXCEEDED
                ), ev
            elif isinstance(ev, LinkAttached):
                link = ev.link
                if link not in side.links:
                    side.links.append(link)
                if link.state is LinkState.ATTACH_RCVD:
                    side.pending_links.append(link)
                    rec = self.link_recs[link.name]
                    if isinstance(link, Sender):
                        assert rec.sender is None
                        rec.sender = link
                    else:
                        assert isinstance(link, Receiver) and rec.receiver is None
                        rec.receiver = link
            elif isinstance(ev, LinkDetached):
                pass
            elif isinstance(ev, DeliveryReceived):
                d = ev.delivery
                key = (ev.link.name, bytes(d.tag))
                assert key not in side.received, f"{key} received twice"
                sent = self.other(side).sent.get(key)
                assert sent is not None, f"{key} received but never sent"
                assert not sent.aborted, f"{key} received in full but the sender aborted it"
                assert d.payload == sent.payload, (
                    f"{key}: payload differs ({len(d.payload)} vs {len(sent.payload)} bytes)"
                )
                assert d.remote_settled == sent.delivery.settled or not d.remote_settled
                side.received[key] = RecvRec(key, d)
            elif isinstance(ev, DeliveryAborted):
                key = (ev.link.name, bytes(ev.delivery.tag))
                sent = self.other(side).sent.get(key)
                assert sent is not None and sent.aborted, f"{key} reported aborted but was not"
                assert key not in side.received
            elif isinstance(ev, DeliveryUpdated):
                if isinstance(ev.link, Sender):
                    srec = side.sent.get((ev.link.name, bytes(ev.delivery.tag)))
                    assert srec is not None, ev
                    srec.updated = True
            elif isinstance(ev, (CreditAdded, CreditLowered, DrainRequested, FlowReceived)):
                pass
            else:  # pragma: no cover - a new event type
                raise AssertionError(f"unknown event {ev!r}")

    def accept_pending(self, side: Side) -> None:
        for s in side.pending_sessions:
            if s.state is SessionState.BEGIN_RCVD:
                s.max_incoming_window = self.accept_window  # what we let the peer send ahead
                s.begin()
        side.pending_sessions.clear()
        keep = []
        for link in side.pending_links:
            if link.state is not LinkState.ATTACH_RCVD:
                continue
            if link.session.state not in (SessionState.MAPPED, SessionState.BEGIN_SENT):
                keep.append(link)
                continue
            link.attach(source=link.remote_source, target=link.remote_target)
        side.pending_links = keep
        self.drain(side)

    # -- setup ----------------------------------------------------------------------------------
    @initialize(
        c_frame=st.sampled_from(FRAME_SIZES),
        s_frame=st.sampled_from(FRAME_SIZES),
        chunk=st.sampled_from([None, 1, 13]),
        window=st.sampled_from(WINDOWS),
        accept_window=st.sampled_from(WINDOWS),
        modes=st.lists(
            st.tuples(st.sampled_from(SENDER_MODES), st.sampled_from(RECEIVER_MODES)),
            min_size=2,
            max_size=2,
        ),
        credit=st.integers(0, 5),
    )
    def setup(
        self,
        c_frame: int,
        s_frame: int,
        chunk: int | None,
        window: int,
        accept_window: int,
        modes: list[tuple[int, int]],
        credit: int,
    ) -> None:
        self.accept_window = accept_window
        self.sides = {
            "c": Side("c", Connection("client", max_frame_size=c_frame), WireTracker("client")),
            "s": Side("s", Connection("server", max_frame_size=s_frame), WireTracker("server")),
        }
        self.sides["c"].conn.open()
        self.drain(self.sides["c"])
        self.deliver(self.sides["c"], None, chunk)
        self.sides["s"].conn.open()
        self.pump_until_quiet(chunk)
        assert self.sides["c"].conn.is_open and self.sides["s"].conn.is_open
        # a session with a link each way, so that most runs move deliveries early
        c = self.sides["c"]
        s = c.conn.session(incoming_window=window)
        s.begin()
        c.sessions.append(s)
        for sender, (snd_mode, rcv_mode) in zip((True, False), modes):
            self.new_link(c, s, sender, snd_mode, rcv_mode, None)
        self.pump_until_quiet(chunk)
        for sd in self.sides.values():
            for lk in sd.links:
                if isinstance(lk, Receiver):
                    lk.flow(credit)
            self.drain(sd)

    # -- candidates --------------------------------------------------------------------------------
    def live_sessions(self) -> list[tuple[Side, Session]]:
        return [(sd, s) for sd in self.sides.values() for s in sd.sessions if live_session(s)]

    def live_links(self, kind: type[Link] = Link) -> list[tuple[Side, Link]]:
        return [
            (sd, lk)
            for sd in self.sides.values()
            for lk in sd.links
            if isinstance(lk, kind) and live_link(lk)
        ]

    # -- rules: sessions ---------------------------------------------------------------------
    @precondition(lambda self: len(self.live_sessions()) < 6)
    @rule(side=st.sampled_from("cs"), window=st.sampled_from(WINDOWS))
    def begin_session(self, side: str, window: int) -> None:
        sd = self.sides[side]
        s = sd.conn.session(incoming_window=window)
        s.begin()
        sd.sessions.append(s)
        self.drain(sd)

    @precondition(lambda self: bool(self.live_sessions()))
    @rule(data=st.data(), with_error=st.booleans())
    def end_session(self, data: st.DataObject, with_error: bool) -> None:
        sd, s = data.draw(st.sampled_from(self.live_sessions()))
        s.end(
            Error(condition=ErrorCondition.RESOURCE_LIMIT_EXCEEDED, description="bye")
            if with_error
            else None
        )
        self.drain(sd)

    # -- rules: links ------------------------------------------------------------------------
    @precondition(lambda self: bool(self.live_sessions()) and len(self.live_links()) < 10)
    @rule(
        data=st.data(),
        sender=st.booleans(),
        snd_mode=st.sampled_from(SENDER_MODES),
        rcv_mode=st.sampled_from(RECEIVER_MODES),
        max_message_size=st.sampled_from([None, 1 << 20]),
    )
    def attach_link(
        self,
        data: st.DataObject,
        sender: bool,
        snd_mode: int,
        rcv_mode: int,
        max_message_size: int | None,
    ) -> None:
        sd, s = data.draw(st.sampled_from(self.live_sessions()))
        self.new_link(sd, s, sender, snd_mode, rcv_mode, max_message_size)

    def new_link(
        self,
        sd: Side,
        s: Session,
        sender: bool,
        snd_mode: int,
        rcv_mode: int,
        max_message_size: int | None,
    ) -> None:
        self.counter += 1
        name = f"L{self.counter}"
        kwargs: dict[str, Any] = {
            "source": Source(address=f"src-{name}"),
            "target": Target(address=f"dst-{name}"),
            "snd_settle_mode": snd_mode,
            "rcv_settle_mode": rcv_mode,
            "max_message_size": max_message_size,
        }
        rec = LinkRec(name, sender_side=sd.name if sender else self.other(sd).name)
        link: Link
        if sender:
            link = rec.sender = s.sender(name, **kwargs)
        else:
            link = rec.receiver = s.receiver(name, **kwargs)
        self.link_recs[name] = rec
        link.attach()
        sd.links.append(link)
        self.drain(sd)

    @precondition(lambda self: bool(self.live_links()))
    @rule(data=st.data(), closed=st.booleans(), with_error=st.booleans())
    def detach_link(self, data: st.DataObject, closed: bool, with_error: bool) -> None:
        sd, link = data.draw(st.sampled_from(self.live_links()))
        err = (
            Error(condition=ErrorCondition.DETACH_FORCED, description="app") if with_error else None
        )
        link.detach(err, closed=closed)
        self.drain(sd)

    # -- rules: credit --------------------------------------------------------------------------
    @precondition(lambda self: bool(self.live_links(Receiver)))
    @rule(
        data=st.data(), n=st.integers(0, 6), how=st.sampled_from(["flow", "add", "drain", "echo"])
    )
    def grant_credit(self, data: st.DataObject, n: int, how: str) -> None:
        sd, link = data.draw(st.sampled_from(self.live_links(Receiver)))
        assert isinstance(link, Receiver)
        if how == "flow":
            link.flow(n)
        elif how == "add":
            link.add_credit(n)
        elif how == "drain":
            link.drain_credit()
        else:
            link.flow(n, echo=True)
        self.drain(sd)

    @precondition(lambda self: any(lk.drain and lk.credit > 0 for _, lk in self.live_links(Sender)))
    @rule(data=st.data())
    def sender_drained(self, data: st.DataObject) -> None:
        cands = [(sd, lk) for sd, lk in self.live_links(Sender) if lk.drain and lk.credit > 0]
        sd, link = data.draw(st.sampled_from(cands))
        assert isinstance(link, Sender)
        link.drained()
        self.drain(sd)

    # -- rules: deliveries -------------------------------------------------------------------
    @precondition(lambda self: bool(self.live_links(Sender)))
    @rule(
        data=st.data(),
        sizes=st.lists(st.sampled_from([0, 0.01, 0.3, 0.98, 1, 1.5, 2.9]), min_size=1, max_size=4),
        presettle=st.booleans(),
    )
    def send(self, data: st.DataObject, sizes: list[float], presettle: bool) -> None:
        """Send 1-4 messages of 0..3 frames' worth (of the receiving peer's max-frame-size)."""
        sd, link = data.draw(st.sampled_from(self.live_links(Sender)))
        assert isinstance(link, Sender)
        rec = self.link_recs[link.name]
        max_frame = self.other(sd).conn.max_frame_size
        for frames in sizes:
            payload = payload_for(link.name, rec.next_payload, int(frames * max_frame))
            rec.next_payload += 1
            settled: bool | None = None
            if link.snd_settle_mode == SenderSettleMode.MIXED:
                settled = presettle
            d = link.send(payload, settled=settled)
            key = (link.name, bytes(d.tag))
            assert key not in sd.sent
            sd.sent[key] = SentRec(key, d, payload, d.settled)
        self.drain(sd)

    def abortable(self) -> list[tuple[Side, SentRec]]:
        return [
            (sd, r)
            for sd in self.sides.values()
            for r in sd.sent.values()
            if not r.aborted and not r.delivery.sent and live_link(r.delivery.link)
        ]

    @precondition(lambda self: bool(self.abortable()))
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        cands = self.abortable()
        started = [c for c in cands if c[1].delivery.delivery_id is not None]
        if started and data.draw(st.booleans(), label="started") is True:
            cands = started  # part of it is on the wire: the peer sees the abort
        sd, r = data.draw(st.sampled_from(cands))
        r.delivery.abort()
        r.aborted = True
        r.app_settled = True
        self.drain(sd)

    def settleable(self) -> list[tuple[Side, SentRec | RecvRec]]:
        out: list[tuple[Side, SentRec | RecvRec]] = []
        for sd in self.sides.values():
            for r in sd.sent.values():
                d = r.delivery
                if (
                    not r.app_settled
                    and not r.aborted
                    and d.delivery_id is not None
                    and live_link(d.link)
                ):
                    out.append((sd, r))
            for rr in sd.received.values():
                if not rr.app_settled and live_link(rr.delivery.link):
                    out.append((sd, rr))
        return out

    @precondition(lambda self: bool(self.settleable()))
    @rule(data=st.data(), outcome=OUTCOMES, update_only=st.booleans())
    def settle(self, data: st.DataObject, outcome: Any, update_only: bool) -> None:
        sd, r = data.draw(st.sampled_from(self.settleable()))
        d = r.delivery
        if update_only:
            d.update(
                Received(section_number=0, section_offset=len(d.payload))
                if outcome is None
                else outcome
            )
        else:
            d.settle(outcome)
            r.app_settled = True
        self.drain(sd)

    # -- rules: moving bytes -------------------------------------------------------------------
    @rule(
        side=st.sampled_from("cs"),
        budget=st.integers(1, 5000),
        chunk=st.sampled_from([None, 1, 3, 8, 100, 1000]),
    )
    def pump_some(self, side: str, budget: int, chunk: int | None) -> None:
        sd = self.sides[side]
        self.drain(sd)
        self.deliver(sd, budget, chunk)

    @rule(side=st.sampled_from("cs"))
    def react(self, side: str) -> None:
        self.accept_pending(self.sides[side])

    @rule(chunk=st.sampled_from([None, 7, 512]))
    def pump_all(self, chunk: int | None) -> None:
        self.pump_until_quiet(chunk)

    # -- rules: deliberate misuse ---------------------------------------------------------------
    def fingerprint(self, sd: Side) -> Any:
        c = sd.conn
        sess = tuple(
            (s.state, s.next_outgoing_id, s.incoming_window, s.remote_incoming_window, len(s.links))
            for s in sd.sessions
        )
        links = tuple(
            (
                lk.state,
                lk.handle,
                lk.credit,
                lk.delivery_count,
                lk.drain,
                tuple(lk.unsettled),
                lk.queued if isinstance(lk, Sender) else None,
            )
            for lk in sd.links
        )
        dels = tuple(
            (r.delivery.settled, r.delivery.state, r.delivery.aborted, r.delivery.sent)
            for r in (*sd.sent.values(), *sd.received.values())
        )
        return (c.state, sess, links, dels, len(c.sessions))

    def misuses(self) -> list[tuple[str, Side, Callable[[], Any]]]:
        out: list[tuple[str, Side, Callable[[], Any]]] = []
        for sd in self.sides.values():
            for s in sd.sessions:
                if s.state is SessionState.MAPPED:
                    out.append(("begin a mapped session", sd, s.begin))
                if s.state is SessionState.UNMAPPED:
                    out.append(("end an unmapped session", sd, s.end))
            for lk in sd.links:
                if lk.state is LinkState.ATTACHED:
                    out.append(("attach an attached link", sd, lk.attach))
                if lk.state is LinkState.DETACHED:
                    out.append(("detach a detached link", sd, lk.detach))
                if isinstance(lk, Sender):
                    if lk.state is LinkState.DETACHED:
                        out.append(("send on a detached link", sd, lambda lk=lk: lk.send(b"x")))
                    if lk.state is LinkState.ATTACHED:
                        out.append(
                            ("tag of 33 bytes", sd, lambda lk=lk: lk.send(b"x", tag=b"t" * 33))
                        )
                        if lk.snd_settle_mode == SenderSettleMode.UNSETTLED:
                            out.append(
                                (
                                    "presettle in unsettled mode",
                                    sd,
                                    lambda lk=lk: lk.send(b"x", settled=True),
                                )
                            )
                        if lk.snd_settle_mode == SenderSettleMode.SETTLED:
                            out.append(
                                (
                                    "unsettled in settled mode",
                                    sd,
                                    lambda lk=lk: lk.send(b"x", settled=False),
                                )
                            )
                        for tag in list(lk.unsettled)[:1]:
                            out.append(
                                (
                                    "reuse an unsettled tag",
                                    sd,
                                    lambda lk=lk, tag=tag: lk.send(b"x", tag=tag),
                                )
                            )
                        limit = lk.remote_max_message_size
                        if limit is not None and limit < 1 << 21:
                            out.append(
                                (
                                    "message too large",
                                    sd,
                                    lambda lk=lk, n=limit: lk.send(b"x" * (n + 1)),
                                )
                            )
                if isinstance(lk, Receiver):
                    if lk.state in (LinkState.ATTACHED, LinkState.ATTACH_SENT):
                        out.append(("negative credit", sd, lambda lk=lk: lk.flow(-1)))
                    if lk.state is LinkState.DETACHED:
                        out.append(("flow on a detached link", sd, lambda lk=lk: lk.flow(1)))
            for r in sd.sent.values():
                d = r.delivery
                if r.aborted or d.settled:
                    out.append(
                        ("settle a settled/aborted delivery", sd, lambda d=d: d.settle(Accepted()))
                    )
                elif d.delivery_id is None:
                    out.append(("settle a delivery not sent yet", sd, d.settle))
                if r.aborted:
                    out.append(("abort an aborted delivery", sd, d.abort))
                elif d.sent:
                    out.append(("abort a delivery sent in full", sd, d.abort))
            for rr in sd.received.values():
                out.append(("a receiver aborts", sd, rr.delivery.abort))
                if rr.app_settled:
                    out.append(("settle twice", sd, lambda d=rr.delivery: d.settle(Released())))
        return out

    @precondition(lambda self: bool(self.misuses()))
    @rule(data=st.data())
    def misuse(self, data: st.DataObject) -> None:
        what, sd, fn = data.draw(st.sampled_from(self.misuses()), label="misuse")
        self.drain(sd)
        before = self.fingerprint(sd)
        with pytest.raises(IllegalStateError):
            fn()
        assert self.fingerprint(sd) == before, f"{what}: the failed call changed the engine's state"
        assert sd.conn.data_to_send() == b"", f"{what}: the failed call wrote bytes"

    # -- quiescence -------------------------------------------------------------------------------
    def live_pairs(self) -> list[LinkRec]:
        return [
            r
            for r in self.link_recs.values()
            if r.sender is not None
            and r.receiver is not None
            and r.sender.state is LinkState.ATTACHED
            and r.receiver.state is LinkState.ATTACHED
            and r.sender.session.state is SessionState.MAPPED
            and r.receiver.session.state is SessionState.MAPPED
        ]

    @rule()
    def settle_and_verify(self) -> None:
        """Grant enough credit, settle everything, pump to quiescence; then nothing is lost."""
        for _ in range(50):
            self.pump_until_quiet()
            progress = False
            for rec in self.live_pairs():
                assert rec.sender is not None and rec.receiver is not None
                snd, rcv = rec.sender, rec.receiver
                if snd.queued and rcv.credit < snd.queued:
                    rcv.flow(snd.queued + 1)
                    progress = True
                if snd.drain and snd.credit > 0 and not snd.queued:
                    snd.drained()
                    progress = True
            for sd in self.sides.values():
                for rr in sd.received.values():
                    if not rr.app_settled and live_link(rr.delivery.link):
                        rr.delivery.settle(Accepted())
                        rr.app_settled = True
                        progress = True
                for r in sd.sent.values():
                    d = r.delivery
                    if r.app_settled or r.aborted or not live_link(d.link):
                        continue
                    # the receiver's disposition (in rcv-settle-mode second, maybe with
                    # no outcome at all) is the sender's cue to settle
                    if d.remote_settled or d.remote_state is not None or r.updated:
                        d.settle()
                        r.app_settled = True
                        progress = True
                self.drain(sd)
            if not progress:
                break
        self.pump_until_quiet()
        for rec in self.live_pairs():
            snd_side = self.sides[rec.sender_side]
            rcv_side = self.other(snd_side)
            assert rec.sender is not None and rec.receiver is not None
            assert rec.sender.queued == 0, f"{rec.name}: deliveries still queued"
            for key, r in snd_side.sent.items():
                if key[0] != rec.name:
                    continue
                got = rcv_side.received.get(key)
                if r.aborted:
                    assert got is None
                    continue
                assert got is not None, f"{key} was lost"
                assert r.delivery.settled, f"{key} never settled at the sender ({r.delivery!r})"
                assert got.delivery.settled, (
                    f"{key} never settled at the receiver ({got.delivery!r})"
                )
            assert not rec.sender.unsettled, (
                f"{rec.name}: sender still holds {list(rec.sender.unsettled)}"
            )
            assert not rec.receiver.unsettled, (
                f"{rec.name}: receiver still holds {list(rec.receiver.unsettled)}"
            )

    # -- invariants ----------------------------------------------------------------------------
    @invariant()
    def credit_and_windows(self) -> None:
        for sd in self.sides.values():
            for lk in sd.links:
                assert lk.credit >= 0, f"{sd.name}: {lk!r} has credit {lk.credit}"
            for s in sd.sessions:
                assert s.incoming_window >= 0, s
                assert s.remote_incoming_window >= 0, (
                    f"{sd.name}: {s!r} remote window {s.remote_incoming_window}"
                )
            assert sd.conn.is_open, sd.conn

    def teardown(self) -> None:
        if self.sides and all(sd.conn.is_open for sd in self.sides.values()):
            self.settle_and_verify()


LONG = os.environ.get("AMQP10_STATEFUL") == "long"
STATEFUL_SETTINGS = settings(
    max_examples=2000 if LONG else 200,
    stateful_step_count=100 if LONG else 50,
    deadline=None,
    report_multiple_bugs=False,
    phases=[Phase.explicit, Phase.reuse, Phase.generate]
    if os.environ.get("AMQP10_NOSHRINK")
    else list(Phase),
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)
TestEnginePair = EnginePairMachine.TestCase
TestEnginePair.settings = STATEFUL_SETTINGS


# --------------------------------------------------------------------------------------
# every (state, peer input) pair of the three transition tables
# --------------------------------------------------------------------------------------
def raw_frame(channel: int, perf: Any) -> bytes:
    buf = bytearray()
    encode_frame(buf, channel, perf)
    return bytes(buf)


PEER_OPEN = raw_frame(0, Open(container_id="peer", max_frame_size=4096))
PEER_CLOSE = raw_frame(0, Close())
PEER_CH = 3  # the peer's channel for its sessions: not ours, to catch mix-ups
PEER_HANDLE = 5


def peer_begin(remote_channel: int | None) -> bytes:
    return raw_frame(
        PEER_CH,
        Begin(
            remote_channel=remote_channel,
            next_outgoing_id=0,
            incoming_window=100,
            outgoing_window=100,
        ),
    )


def peer_attach(name: str, role: Role, handle: int = PEER_HANDLE) -> bytes:
    """The peer's attach of link ``name`` as ``role`` (its own role)."""
    return raw_frame(
        PEER_CH,
        Attach(
            name=name,
            handle=handle,
            role=bool(role),
            source=Source(address="s"),
            target=Target(address="t"),
            initial_delivery_count=0 if role == Role.SENDER else None,
        ),
    )


def out_frames(conn: Connection) -> list[Frame]:
    data = conn.data_to_send()
    header = data[:8] == AMQP_HEADER
    return [f for f, _ in split_frames(data, header) if not f.header]


class Probe:
    """An engine under test, driven by hand-made peer frames."""

    def __init__(self, *, send_header: bool = True) -> None:
        self.conn = Connection("engine", max_frame_size=4096, send_header=send_header)
        self.events: list[Event] = []

    def feed(self, data: bytes) -> None:
        self.events += self.conn.receive_data(data)

    def opened(self) -> Probe:
        self.feed(AMQP_HEADER + PEER_OPEN)
        self.conn.open()
        return self


def reach_connection(state: cstate.ConnectionState) -> Probe:
    """An engine in ``state``."""
    S = cstate.ConnectionState
    if state is S.START:
        return Probe(send_header=False)
    p = Probe()
    if state is S.HDR_SENT:
        return p
    if state is S.OPEN_PIPE:
        p.conn.open()
    elif state is S.OC_PIPE:
        p.conn.open()
        p.conn.close()
    elif state is S.HDR_EXCH:
        p.feed(AMQP_HEADER)
    elif state is S.OPEN_RCVD:
        p.feed(AMQP_HEADER + PEER_OPEN)
    elif state is S.OPEN_SENT:
        p.feed(AMQP_HEADER)
        p.conn.open()
    elif state is S.CLOSE_PIPE:
        p.feed(AMQP_HEADER)
        p.conn.open()
        p.conn.close()
    elif state is S.OPENED:
        p.opened()
    elif state is S.CLOSE_SENT:
        p.opened().conn.close()
    elif state is S.DISCARDING:
        p.opened().conn.close(Error(condition=ErrorCondition.INTERNAL_ERROR, description="test"))
    elif state is S.END:
        p.opened().conn.close()
        p.feed(PEER_CLOSE)
    else:  # pragma: no cover - TRANSIENT
        raise AssertionError(state)
    assert p.conn.state is state, (p.conn.state, state)
    return p


def reach_session(state: sstate.SessionState) -> tuple[Probe, Session | None]:
    S = sstate.SessionState
    p = Probe().opened()
    if state is S.UNMAPPED:
        return p, None
    if state is S.BEGIN_RCVD:
        p.feed(peer_begin(None))
        session = [e.session for e in p.events if isinstance(e, SessionBegun)][-1]
    else:
        session = p.conn.session()
        session.begin()
        if state is S.MAPPED:
            p.feed(peer_begin(session.channel))
        # END_SENT and DISCARDING: ended before the peer's begin came (it may cross our end)
        if state is S.END_SENT:
            session.end()
        elif state is S.DISCARDING:
            session.end(Error(condition=ErrorCondition.INTERNAL_ERROR, description="test"))
        elif state is not S.BEGIN_SENT and state is not S.MAPPED:  # pragma: no cover
            raise AssertionError(state)
    assert session.state is state, (session.state, state)
    return p, session


def reach_link(state: lstate.LinkState) -> tuple[Probe, Session, Link | None]:
    S = lstate.LinkState
    p, session = reach_session(sstate.SessionState.MAPPED)
    assert session is not None
    if state is S.DETACHED:
        return p, session, None
    if state is S.ATTACH_RCVD:
        p.feed(peer_attach("x", Role.SENDER))
        link: Link = [e.link for e in p.events if isinstance(e, LinkAttached)][-1]
    else:
        link = session.receiver("x", source=Source(address="s"), target=Target(address="t"))
        link.attach()
        if state is S.ATTACHED:
            p.feed(peer_attach("x", Role.SENDER))
        # DETACH_SENT: detached before the peer's attach came (it may cross our detach)
        if state is S.DETACH_SENT:
            link.detach()
        elif state is not S.ATTACH_SENT and state is not S.ATTACHED:  # pragma: no cover
            raise AssertionError(state)
    assert link.state is state, (link.state, state)
    return p, session, link


# What a peer input the table does not allow must cause: ("connection", condition) a
# close carrying it; ("session", condition) an end; ("header", None) no AMQP
# connection at all (our header, then END); ("ignored", None) nothing, because we
# already closed and discard all but the peer's close (§2.4.3, DISCARDING).
C_S, C_I = cstate.ConnectionState, cstate.ConnectionInput
HEADER_PHASE = {C_S.START, C_S.HDR_SENT, C_S.OPEN_PIPE, C_S.OC_PIPE}
CLOSING = {C_S.CLOSE_PIPE, C_S.CLOSE_SENT, C_S.DISCARDING, C_S.END}


def expected_connection(
    state: cstate.ConnectionState, inp: cstate.ConnectionInput
) -> tuple[str, Any]:
    if state in HEADER_PHASE:
        return ("header", None)  # a frame where the protocol header should be
    if state in CLOSING:
        return ("ignored", None)
    if inp is C_I.RECV_HEADER:  # a second header reads as a frame header of absurd size
        return ("connection", ErrorCondition.FRAMING_ERROR)
    return ("connection", ErrorCondition.ILLEGAL_STATE)


CONNECTION_INPUTS = {
    C_I.RECV_HEADER: AMQP_HEADER,
    C_I.RECV_OPEN: PEER_OPEN,
    C_I.RECV_CLOSE: PEER_CLOSE,
}


# States the engine passes through inside one call, answering the peer at once (its
# header, close, end, detach): never observable, so no input can arrive in them.
TRANSIENT = {
    cstate.ConnectionState.HDR_RCVD,
    cstate.ConnectionState.CLOSE_RCVD,
    sstate.SessionState.END_RCVD,
    lstate.LinkState.DETACH_RCVD,
}


def recv_pairs(table: dict[Any, Any], states: Any, inputs: Any) -> tuple[list[Any], list[Any]]:
    """(pairs the table allows, pairs it does not), over the peer's inputs only."""
    states = [s for s in states if s not in TRANSIENT]
    recv = [i for i in inputs if i.name.startswith("RECV_")]
    allowed = [(s, i) for s in states for i in recv if (s, i) in table]
    missing = [(s, i) for s in states for i in recv if (s, i) not in table]
    return allowed, missing


CONN_ALLOWED, CONN_MISSING = recv_pairs(
    cstate.TRANSITIONS, cstate.ConnectionState, cstate.ConnectionInput
)
SESS_ALLOWED, SESS_MISSING = recv_pairs(
    sstate.TRANSITIONS, sstate.SessionState, sstate.SessionInput
)
LINK_ALLOWED, LINK_MISSING = recv_pairs(lstate.TRANSITIONS, lstate.LinkState, lstate.LinkInput)


def pair_id(pair: Any) -> str:
    return f"{pair[0].name}-{pair[1].name}"


TABLE_SETTINGS = settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
# how the offending input arrives: whole, byte by byte, or followed by garbage
FEEDS = st.tuples(st.sampled_from([None, 1, 5]), st.binary(max_size=24))


def feed_in(p: Probe, data: bytes, chunk: int | None) -> None:
    if chunk is None:
        p.feed(data)
    else:
        for i in range(0, len(data), chunk):
            p.feed(data[i : i + chunk])


def check_teardown(
    p: Probe, kind: str, condition: Any, before: Any, session: Session | None = None
) -> None:
    """The engine tore down what ``kind`` says, with ``condition``, and wrote it."""
    frames = out_frames(p.conn)
    perfs = [f.perf for f in frames if f.perf is not None]
    internal = [
        e
        for e in p.events
        if isinstance(e, ConnectionFailed) and e.error.condition == ErrorCondition.INTERNAL_ERROR
    ]
    assert not internal, f"a bug caught by the catch-all: {internal}"
    if kind == "ignored":
        assert not [e for e in p.events if isinstance(e, FAILURES)], p.events
        assert not perfs, perfs
        assert p.conn.state in (before, C_S.END), (p.conn.state, before)
        return
    if kind == "header":
        assert [e for e in p.events if isinstance(e, ConnectionFailed)], p.events
        assert p.conn.is_closed, p.conn.state
        assert not perfs, f"frames written to a peer that never spoke AMQP: {perfs}"
        return
    if kind == "connection":
        failed = [e for e in p.events if isinstance(e, ConnectionFailed)]
        assert failed and failed[0].error.condition == condition, (p.events, condition)
        closes = [x for x in perfs if isinstance(x, Close)]
        assert (
            closes and closes[-1].error is not None and closes[-1].error.condition == condition
        ), perfs
        assert p.conn.state in (C_S.DISCARDING, C_S.CLOSE_PIPE, C_S.END), p.conn.state
        return
    assert kind == "session" and session is not None
    failed_s = [e for e in p.events if isinstance(e, SessionFailed)]
    assert failed_s and failed_s[0].error.condition == condition, (p.events, condition)
    assert not [e for e in p.events if isinstance(e, ConnectionFailed)], p.events
    ends = [f.perf for f in frames if isinstance(f.perf, End) and f.channel == session.channel]
    assert ends and ends[-1].error is not None and ends[-1].error.condition == condition, perfs
    assert session.state in (SessionState.DISCARDING, SessionState.UNMAPPED), session.state
    assert p.conn.is_open


class TestTransitionTables:
    """Peer inputs outside the tables are protocol errors; inside, they move as the table says."""

    @pytest.mark.parametrize("pair", CONN_MISSING, ids=pair_id)
    @given(feed=FEEDS)
    @TABLE_SETTINGS
    def test_connection_missing(self, pair: Any, feed: tuple[int | None, bytes]) -> None:
        state, inp = pair
        p = reach_connection(state)
        out_frames(p.conn)
        p.events.clear()
        chunk, trailing = feed
        feed_in(p, CONNECTION_INPUTS[inp], chunk)
        kind, condition = expected_connection(state, inp)
        check_teardown(p, kind, condition, state)
        feed_in(p, trailing, chunk)  # more input after the teardown: no exception
        p.conn.receive_data(b"")

    @pytest.mark.parametrize("pair", CONN_ALLOWED, ids=pair_id)
    def test_connection_allowed(self, pair: Any) -> None:
        state, inp = pair
        p = reach_connection(state)
        p.events.clear()
        p.feed(CONNECTION_INPUTS[inp])
        assert not [e for e in p.events if isinstance(e, FAILURES)], p.events
        new = cstate.TRANSITIONS[(state, inp)]
        then = {C_S.HDR_RCVD: C_S.HDR_EXCH, C_S.CLOSE_RCVD: C_S.END}  # the engine's own answer
        assert p.conn.state is then.get(new, new), (p.conn.state, new)

    @pytest.mark.parametrize("pair", SESS_MISSING, ids=pair_id)
    @given(feed=FEEDS)
    @TABLE_SETTINGS
    def test_session_missing(self, pair: Any, feed: tuple[int | None, bytes]) -> None:
        state, inp = pair
        p, session = reach_session(state)
        out_frames(p.conn)
        p.events.clear()
        chunk, trailing = feed
        if inp is sstate.SessionInput.RECV_BEGIN:
            # a second begin on the peer's channel: the channel is in use
            data = peer_begin(None)
        else:
            # an end where the peer has begun nothing: no session is mapped there
            data = raw_frame(PEER_CH, End())
        feed_in(p, data, chunk)
        check_teardown(p, "connection", ErrorCondition.FRAMING_ERROR, C_S.OPENED)
        feed_in(p, trailing, chunk)

    @pytest.mark.parametrize("pair", SESS_ALLOWED, ids=pair_id)
    def test_session_allowed(self, pair: Any) -> None:
        state, inp = pair
        p, session = reach_session(state)
        p.events.clear()
        if inp is sstate.SessionInput.RECV_BEGIN:
            p.feed(peer_begin(None if session is None else session.channel))
        else:
            if session is not None and session.remote_channel is None:
                p.feed(peer_begin(session.channel))  # the peer's begin crossed our end
            p.feed(raw_frame(PEER_CH, End()))
        assert not [e for e in p.events if isinstance(e, FAILURES)], p.events
        new = sstate.TRANSITIONS[(state, inp)]
        if session is None:
            session = [e.session for e in p.events if isinstance(e, SessionBegun)][-1]
        then = {sstate.SessionState.END_RCVD: sstate.SessionState.UNMAPPED}
        assert session.state is then.get(new, new), (session.state, new)
        out_frames(p.conn)

    @pytest.mark.parametrize("pair", LINK_MISSING, ids=pair_id)
    @given(feed=FEEDS)
    @TABLE_SETTINGS
    def test_link_missing(self, pair: Any, feed: tuple[int | None, bytes]) -> None:
        state, inp = pair
        p, session, link = reach_link(state)
        out_frames(p.conn)
        p.events.clear()
        chunk, trailing = feed
        if inp is lstate.LinkInput.RECV_ATTACH:
            # a second attach on the peer's handle (in use)
            data, condition = peer_attach("x", Role.SENDER), ErrorCondition.HANDLE_IN_USE
        else:
            # a detach of a handle the peer never attached
            data, condition = (
                raw_frame(PEER_CH, Detach(handle=PEER_HANDLE)),
                ErrorCondition.UNATTACHED_HANDLE,
            )
        feed_in(p, data, chunk)
        check_teardown(p, "session", condition, C_S.OPENED, session)
        feed_in(p, trailing, chunk)

    @pytest.mark.parametrize("pair", LINK_ALLOWED, ids=pair_id)
    def test_link_allowed(self, pair: Any) -> None:
        state, inp = pair
        p, _session, link = reach_link(state)
        p.events.clear()
        if inp is lstate.LinkInput.RECV_ATTACH:
            p.feed(peer_attach("x", Role.SENDER))
        else:
            if link is not None and link.remote_attach is None:
                p.feed(peer_attach("x", Role.SENDER))  # the peer's attach crossed our detach
            p.feed(raw_frame(PEER_CH, Detach(handle=PEER_HANDLE)))
        assert not [e for e in p.events if isinstance(e, FAILURES)], p.events
        new = lstate.TRANSITIONS[(state, inp)]
        if link is None:
            link = [e.link for e in p.events if isinstance(e, LinkAttached)][-1]
        # the engine answers a detach at once (and an attach it must refuse, with a detach)
        then = {lstate.LinkState.DETACH_RCVD: lstate.LinkState.DETACHED}
        assert link.state is then.get(new, new), (link.state, new)
        out_frames(p.conn)

    def test_transient_states(self) -> None:
        """The states left out above are never seen between calls: the engine answers at once."""
        p = Probe(send_header=False)
        p.feed(AMQP_HEADER)
        assert p.conn.state is C_S.HDR_EXCH  # not HDR_RCVD: our header went out
        p = Probe().opened()
        p.feed(PEER_CLOSE)
        assert p.conn.state is C_S.END  # not CLOSE_RCVD: our close went out
        p, session = reach_session(sstate.SessionState.MAPPED)
        assert session is not None
        p.feed(raw_frame(PEER_CH, End()))
        assert session.state is SessionState.UNMAPPED  # not END_RCVD
        p, _, link = reach_link(lstate.LinkState.ATTACHED)
        assert link is not None
        p.feed(raw_frame(PEER_CH, Detach(handle=PEER_HANDLE)))
        assert link.state is LinkState.DETACHED  # not DETACH_RCVD
