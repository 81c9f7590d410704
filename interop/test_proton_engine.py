"""Our engine against Proton's engine (python-qpid-proton), in memory, in both roles.

Every test runs with our side as the client (Proton answers: ``ours-client``)
and as the server (Proton opens the connection, begins the session and, unless
the test says otherwise, attaches the link: ``ours-server``). Bytes go through
:class:`interop.proton_pump.ProtonPump`; Proton's frame trace of each test is
printed at teardown, so a failing test shows it (``PN_TRACE_FRM=1`` prints it
live instead).

Messages are real AMQP messages: ``proton.Message(...).encode()`` on Proton's
side and :class:`amqp10.message.Message` on ours, each decoded by the other.

Proton 0.40 quirks worked around here (see the comments where they apply):

- the drain reply is never sent while Python still references a settled
  delivery of Proton's sender (``ProtonPump.forget_proton_events`` + ``del``);
- ``Delivery.tag`` is decoded as UTF-8, so tags here are ASCII;
- ``Transport.idle_timeout`` advertises half the local value (so do we, §2.4.5), and
  Proton's timeout fires on the second tick past the deadline;
- ``DELIVERY`` events fire for disposition updates too (guard on ``readable``);
- ``Link.detach()`` in the Python binding, unlike ``close()``, does not pass
  ``link.condition`` to the C endpoint (call ``_update_cond()`` first), and a detached
  (not closed) Proton link keeps its endpoint state: only events tell;
- Proton reads neither ``available`` nor ``echo`` from a flow, and never sends ``available``;
- a frame whose body is not a known performative makes Proton stop reading silently
  (no close, no error), so the error test uses a frame Proton does reject;
- Proton does not hold back a message larger than the receiver's max-message-size:
  our receiver detaches with ``amqp:link:message-size-exceeded`` (which the spec allows).
"""

from __future__ import annotations

import gc
import random
from collections.abc import Iterator
from typing import Any

import proton
import pytest
from proton import Condition, Disposition, Endpoint, Terminus
from proton import Event as PEvent
from proton import symbol as psymbol

from amqp10.message import Message
from amqp10.transport import (
    Connection,
    ConnectionClosed,
    ConnectionFailed,
    CreditAdded,
    DeliveryAborted,
    DeliveryReceived,
    DeliveryUpdated,
    DrainRequested,
    Event,
    FlowReceived,
    LinkAttached,
    LinkDetached,
    LinkFailed,
    LinkState,
    Receiver,
    Sender,
    SessionBegun,
    SessionEnded,
)
from amqp10.types import (
    Accepted,
    Error,
    ErrorCondition,
    Modified,
    Rejected,
    Released,
    Source,
    Target,
    symbol,
)
from interop.proton_pump import ProtonPump

pytestmark = pytest.mark.proton

ROLES = ("ours-client", "ours-server")
DIRECTIONS = ("ours-to-proton", "proton-to-ours")
ACTIVE = Endpoint.LOCAL_ACTIVE | Endpoint.REMOTE_ACTIVE
CLOSED = Endpoint.LOCAL_CLOSED | Endpoint.REMOTE_CLOSED
UNSETTLED, SETTLED, MIXED = 0, 1, 2
FIRST, SECOND = 0, 1


def of(events: list[Event], tp: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, tp)]


# -- the world: our Connection and Proton's, opened by the side the role says ------------------------
_WORLDS: list[World] = []


@pytest.fixture(autouse=True)
def _trace_on_failure() -> Iterator[None]:
    """Print each world's Proton frame trace at teardown (pytest shows it when a test fails)."""
    _WORLDS.clear()
    yield
    for w in _WORLDS:
        print(f"--- {w.role}: Proton frame trace ---")
        print(w.pump.dump_trace())
        print(f"--- {w.role}: our events ---")
        for e in w.pump.our_events:
            print(e)
    _WORLDS.clear()


@pytest.fixture(params=ROLES)
def role(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class World:
    """One connection between our engine and Proton's, plus helpers to build on it."""

    def __init__(self, role: str, *, ours_kw: dict[str, Any] | None = None, **pump_kw: Any) -> None:
        self.role = role
        self.ours = Connection("ours", **(ours_kw or {}))
        proton_role = "server" if role == "ours-client" else "client"
        self.pump = ProtonPump(self.ours, proton_role=proton_role, trace=True, **pump_kw)
        self.pconn = self.pump.conn
        self.session: Any = None  # ours
        self.psession: Any = None  # Proton's
        _WORLDS.append(self)

    @property
    def ours_initiates(self) -> bool:
        return self.role == "ours-client"

    def open(self) -> World:
        if self.ours_initiates:
            self.ours.open()
        else:
            self.pconn.open()
        self.pump.pump()
        assert self.ours.is_open
        assert self.pconn.state == ACTIVE
        return self

    def begin(self) -> World:
        if self.ours_initiates:
            self.session = self.ours.session()
            self.session.begin()
            _, pe = self.pump.pump()
            self.psession = next(e.session for e in pe if e.type == PEvent.SESSION_REMOTE_OPEN)
        else:
            self.psession = self.pconn.session()
            self.psession.open()
            oe, _ = self.pump.pump()
            self.session = of(oe, SessionBegun)[0].session
        assert self.session.is_mapped
        assert self.psession.state == ACTIVE
        return self

    def attach(
        self,
        direction: str,
        *,
        initiator: str | None = None,
        name: str = "link-1",
        snd_settle_mode: int = MIXED,
        rcv_settle_mode: int = FIRST,
        address: str = "queue-1",
        link_kw: dict[str, Any] | None = None,
    ) -> tuple[Any, Any]:
        """Attach a link; returns (our link, Proton's link). The client side initiates by default."""
        if initiator is None:
            initiator = "ours" if self.ours_initiates else "proton"
        ours_send = direction == "ours-to-proton"
        if initiator == "ours":
            make = self.session.sender if ours_send else self.session.receiver
            link = make(
                name,
                source=Source(address=address if not ours_send else "src"),
                target=Target(address=address if ours_send else "dst"),
                snd_settle_mode=snd_settle_mode,
                rcv_settle_mode=rcv_settle_mode,
                **(link_kw or {}),
            )
            link.attach()
            _, pe = self.pump.pump()
            plink = next(e.link for e in pe if e.type == PEvent.LINK_REMOTE_OPEN)
        else:
            plink = self.psession.receiver(name) if ours_send else self.psession.sender(name)
            if ours_send:
                plink.source.address = address
                plink.target.address = "dst"
            else:
                plink.source.address = "src"
                plink.target.address = address
            plink.snd_settle_mode = snd_settle_mode
            plink.rcv_settle_mode = rcv_settle_mode
            plink.open()
            oe, _ = self.pump.pump()
            link = of(oe, LinkAttached)[0].link
        assert link.is_attached, link
        assert plink.state == ACTIVE
        assert isinstance(link, Sender if ours_send else Receiver)
        return link, plink

    def connected(self, direction: str, **kw: Any) -> tuple[Any, Any]:
        return self.open().begin().attach(direction, **kw)


# -- messages ----------------------------------------------------------------------------------------
def our_message(i: int, body: bytes | None = None) -> bytes:
    return Message(
        body=body if body is not None else f"ours-{i}".encode(),
        id=f"ours-{i}",
        subject="amqp10",
        application_properties={"i": i},
    ).encode()


def proton_message(i: int, body: bytes | None = None) -> bytes:
    m = proton.Message(
        body=body if body is not None else f"proton-{i}".encode(),
        id=f"proton-{i}",
        subject="proton",
    )
    m.properties = {"i": i}
    return bytes(m.encode())


def decode_with_proton(data: bytes) -> Any:
    m = proton.Message()
    m.decode(data)
    return m


def proton_send(plink: Any, payload: bytes, tag: str, *, settled: bool = False) -> Any:
    d = plink.delivery(tag)
    plink.send(payload)
    plink.advance()
    if settled:
        d.settle()  # a pre-settled delivery is settled before it goes out
    return d


def proton_read(plink: Any) -> list[tuple[Any, bytes]]:
    """Every complete delivery waiting on Proton's receiver, with its bytes."""
    out = []
    while True:
        d = plink.current
        if d is None or not d.readable or d.partial or d.aborted:
            return out
        chunks = []
        while d.pending:
            chunks.append(bytes(plink.recv(d.pending)))
        plink.advance()
        out.append((d, b"".join(chunks)))


def proton_credit(w: World, plink: Any, n: int) -> None:
    plink.flow(n)
    w.pump.pump()


def proton_answer_detach(w: World, plink: Any) -> None:
    """Proton does not answer a detach by itself: close or detach in kind."""
    if plink.state & Endpoint.REMOTE_CLOSED:
        plink.close()
    else:
        plink.detach()
    w.pump.pump()


# ================================================================================================
# connection: open and close
# ================================================================================================
def test_open_exchanges_open_fields(role: str) -> None:
    w = World(role, ours_kw={"max_frame_size": 4096, "channel_max": 9, "hostname": "example.org"})
    w.pconn.hostname = "proton.example.org"
    w.open()
    assert w.pconn.remote_container == "ours"
    assert w.ours.remote_open is not None
    assert w.ours.remote_open.container_id == "proton"
    assert w.pump.transport.remote_max_frame_size == 4096
    assert w.pump.transport.remote_channel_max == 9
    assert w.ours.remote_max_frame_size == w.pump.transport.max_frame_size
    if w.ours_initiates:
        assert w.pconn.remote_hostname == "example.org"
    else:
        assert w.ours.remote_open.hostname == "proton.example.org"


def test_open_properties_and_capabilities(role: str) -> None:
    w = World(
        role,
        ours_kw={
            "properties": {symbol("product"): "amqp10"},
            "offered_capabilities": [symbol("ANONYMOUS-RELAY")],
            "desired_capabilities": [symbol("DELAYED_DELIVERY")],
        },
    )
    w.pconn.properties = {psymbol("product"): "proton"}
    w.pconn.offered_capabilities = [psymbol("cap-p")]
    w.open()
    assert w.pconn.remote_properties == {"product": "amqp10"}
    assert list(w.pconn.remote_offered_capabilities) == ["ANONYMOUS-RELAY"]
    assert list(w.pconn.remote_desired_capabilities) == ["DELAYED_DELIVERY"]
    assert w.ours.remote_open is not None
    assert w.ours.remote_open.properties == {"product": "proton"}
    assert list(w.ours.remote_open.offered_capabilities) == ["cap-p"]


@pytest.mark.parametrize("closer", ["ours", "proton"])
@pytest.mark.parametrize("with_error", [False, True], ids=["clean", "error"])
def test_close(role: str, closer: str, with_error: bool) -> None:
    w = World(role).open()
    err = None
    if closer == "ours":
        if with_error:
            err = Error(
                condition=ErrorCondition.INTERNAL_ERROR,
                description="ours is going",
                info={symbol("k"): "v"},
            )
        w.ours.close(err)
        _, pe = w.pump.pump()
        assert any(e.type == PEvent.CONNECTION_REMOTE_CLOSE for e in pe)
        rc = w.pconn.remote_condition
        if with_error:
            assert rc is not None
            assert (rc.name, rc.description, rc.info) == (
                "amqp:internal-error",
                "ours is going",
                {"k": "v"},
            )
        else:
            assert rc is None
        w.pconn.close()
        oe, _ = w.pump.pump()
        assert of(oe, ConnectionClosed) == [ConnectionClosed(error=None)]
    else:
        if with_error:
            w.pconn.condition = Condition(
                "amqp:connection:forced", "proton is going", {psymbol("k"): "v"}
            )
        w.pconn.close()
        oe, _ = w.pump.pump()
        (closed,) = of(oe, ConnectionClosed)
        if with_error:
            assert closed.error is not None
            assert closed.error.condition == ErrorCondition.CONNECTION_FORCED
            assert closed.error.description == "proton is going"
            assert closed.error.info == {"k": "v"}
        else:
            assert closed.error is None
        # our engine answers the close by itself
        assert w.pconn.remote_condition is None
    assert w.ours.is_closed
    assert w.pconn.state == CLOSED
    assert w.pump.transport.closed
    assert not of(w.pump.our_events, ConnectionFailed)


def test_close_before_open_answer(role: str) -> None:
    """The client opens and closes at once (pipelined); the server answers both."""
    w = World(role)
    if w.ours_initiates:
        w.ours.open()
        w.ours.close()
    else:
        w.pconn.open()
        w.pconn.close()
    w.pump.pump()
    if w.ours_initiates:
        w.pconn.close()  # Proton's application answers the close
        w.pump.pump()
    assert w.ours.is_closed
    assert w.pconn.state == CLOSED
    assert not of(w.pump.our_events, ConnectionFailed)


# ================================================================================================
# sessions
# ================================================================================================
def test_begin_several_sessions(role: str) -> None:
    w = World(role).open()
    pairs = []
    for _ in range(3):
        w.begin()
        pairs.append((w.session, w.psession))
    assert len({s.channel for s, _ in pairs}) == 3
    assert len(w.ours.sessions) == 3


@pytest.mark.parametrize("ender", ["ours", "proton"])
@pytest.mark.parametrize("with_error", [False, True], ids=["clean", "error"])
def test_end_session(role: str, ender: str, with_error: bool) -> None:
    w = World(role).open().begin()
    s, ps = w.session, w.psession
    if ender == "ours":
        err = (
            Error(condition=ErrorCondition.RESOURCE_DELETED, description="gone")
            if with_error
            else None
        )
        s.end(err)
        _, pe = w.pump.pump()
        assert any(e.type == PEvent.SESSION_REMOTE_CLOSE for e in pe)
        rc = ps.remote_condition
        assert (rc.name if rc else None) == ("amqp:resource-deleted" if with_error else None)
        ps.close()
        oe, _ = w.pump.pump()
        assert [e.error for e in of(oe, SessionEnded)] == [None]
    else:
        if with_error:
            ps.condition = Condition("amqp:session:window-violation", "proton says so")
        ps.close()
        oe, _ = w.pump.pump()
        (ended,) = of(oe, SessionEnded)
        if with_error:
            assert ended.error.condition == ErrorCondition.WINDOW_VIOLATION
            assert ended.error.description == "proton says so"
        else:
            assert ended.error is None
    assert ps.state == CLOSED
    assert s not in w.ours.sessions
    # the connection goes on: a new session works
    w.begin()
    assert w.ours.is_open


# ================================================================================================
# links: attach, detach, close, refusal
# ================================================================================================
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("initiator", ["ours", "proton"])
def test_attach(role: str, direction: str, initiator: str) -> None:
    w = World(role).open().begin()
    link, plink = w.attach(
        direction,
        initiator=initiator,
        name="the-link",
        address="q-7",
        snd_settle_mode=UNSETTLED,
        rcv_settle_mode=SECOND,
    )
    assert link.name == plink.name == "the-link"
    assert plink.is_sender == (direction == "proton-to-ours")
    # the initiator names the node: a sender's target, a receiver's source
    if initiator == "ours":
        term = plink.remote_target if direction == "ours-to-proton" else plink.remote_source
    else:
        term = link.remote_source if direction == "ours-to-proton" else link.remote_target
    assert term.address == "q-7"
    # the settle modes travel both ways
    assert link.effective_snd_settle_mode == UNSETTLED
    assert link.effective_rcv_settle_mode == SECOND
    assert plink.remote_snd_settle_mode == UNSETTLED
    assert plink.remote_rcv_settle_mode == SECOND


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_attach_link_properties_and_max_message_size(role: str, direction: str) -> None:
    w = World(role).open().begin()
    _link, plink = w.attach(
        direction,
        initiator="ours",
        link_kw={"max_message_size": 12345, "properties": {symbol("lp"): 1}},
    )
    assert plink.remote_max_message_size == 12345
    assert plink.remote_properties == {"lp": 1}


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("detacher", ["ours", "proton"])
@pytest.mark.parametrize("closed", [False, True], ids=["detach", "close"])
@pytest.mark.parametrize("with_error", [False, True], ids=["clean", "error"])
def test_detach(role: str, direction: str, detacher: str, closed: bool, with_error: bool) -> None:
    w = World(role)
    link, plink = w.connected(direction)
    if detacher == "ours":
        err = (
            Error(condition=ErrorCondition.DETACH_FORCED, description="bye", info={symbol("x"): 1})
            if with_error
            else None
        )
        link.detach(err, closed=closed)
        _, pe = w.pump.pump()
        want = PEvent.LINK_REMOTE_CLOSE if closed else PEvent.LINK_REMOTE_DETACH
        assert [
            e.type for e in pe if e.link is not None and e.type.name.startswith("PN_LINK_REMOTE")
        ] == [want]
        rc = plink.remote_condition
        if with_error:
            assert (rc.name, rc.description, rc.info) == (
                "amqp:link:detach-forced",
                "bye",
                {"x": 1},
            )
        else:
            assert rc is None
        proton_answer_detach(w, plink)
        (det,) = of(w.pump.our_events, LinkDetached)
        assert (det.closed, det.error) == (closed, None)
    else:
        if with_error:
            plink.condition = Condition("amqp:link:stolen", "proton's", {psymbol("x"): 2})
        if closed:
            plink.close()
        else:
            # Proton quirk (Python binding 0.40): Link.detach(), unlike close(), does not copy
            # ``link.condition`` to the C endpoint, so the detach would carry no error.
            plink._update_cond()
            plink.detach()
        oe, _ = w.pump.pump()
        (det,) = of(oe, LinkDetached)
        assert det.closed == closed
        if with_error:
            assert det.error is not None
            assert (det.error.condition, det.error.description, det.error.info) == (
                ErrorCondition.STOLEN,
                "proton's",
                {"x": 2},
            )
        else:
            assert det.error is None
    assert link.state is LinkState.DETACHED
    if closed:
        assert plink.state == CLOSED
    else:
        # Proton keeps a detached (not closed) link's endpoint state as it was: only events say so
        names = w.pump.proton_names()
        assert "PN_LINK_REMOTE_DETACH" in names and "PN_LINK_LOCAL_DETACH" in names
    # the session goes on: another link attaches on it
    link2, _ = w.attach(direction, name="link-2")
    assert link2.is_attached


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_ours_refuses_proton_link(role: str, direction: str) -> None:
    """A link Proton attaches is refused: attach with a null terminus, then detach with an error."""
    w = World(role).open().begin()
    refused: list[Any] = []

    def refuse(pump: ProtonPump, ev: Event) -> None:
        if isinstance(ev, LinkAttached) and ev.link.state is LinkState.ATTACH_RCVD:
            ev.link.detach(
                Error(condition=ErrorCondition.NOT_FOUND, description="no such node"), closed=True
            )
            refused.append(ev.link)

    w.pump.on_our_event = refuse
    w.pump.auto_accept = False
    plink = w.psession.receiver("r") if direction == "ours-to-proton" else w.psession.sender("s")
    plink.source.address = plink.target.address = "nowhere"
    plink.open()
    _, _pe = w.pump.pump()
    assert refused
    assert plink.state & Endpoint.REMOTE_CLOSED
    # §2.6.3: the refusing attach carries a null local terminus (a sender's source, a
    # receiver's target) and echoes the other one
    if direction == "ours-to-proton":
        assert plink.remote_source.type == Terminus.UNSPECIFIED
        assert plink.remote_target.address == "nowhere"
    else:
        assert plink.remote_target.type == Terminus.UNSPECIFIED
        assert plink.remote_source.address == "nowhere"
    assert plink.remote_condition.name == "amqp:not-found"
    plink.close()
    w.pump.pump()
    assert refused[0].state is LinkState.DETACHED


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_proton_refuses_our_link(role: str, direction: str) -> None:
    w = World(role).open().begin()

    def refuse(pump: ProtonPump, ev: Any) -> None:
        if ev.type == PEvent.LINK_REMOTE_OPEN:
            link = ev.link
            link.open()  # Proton attaches with null termini...
            link.condition = Condition("amqp:unauthorized-access", "not you")
            link.close()  # ...and closes with the reason

    w.pump.auto_accept = False
    w.pump.on_proton_event = refuse
    make = w.session.sender if direction == "ours-to-proton" else w.session.receiver
    link = make("l", source=Source(address="a"), target=Target(address="b"))
    link.attach()
    oe, _ = w.pump.pump()
    (_att,) = of(oe, LinkAttached)
    (det,) = of(oe, LinkDetached)
    assert det.closed
    assert det.error.condition == ErrorCondition.UNAUTHORIZED_ACCESS
    assert link.state is LinkState.DETACHED


def test_end_session_with_attached_links(role: str) -> None:
    """Ending a session implicitly detaches its links on both sides."""
    w = World(role)
    _link, _plink = w.connected("ours-to-proton")
    w.session.end()
    w.pump.pump()
    w.psession.close()
    w.pump.pump()
    assert w.psession.state == CLOSED
    assert w.session not in w.ours.sessions


# ================================================================================================
# credit, drain, available
# ================================================================================================
def test_credit_ours_sender(role: str) -> None:
    w = World(role)
    snd, prcv = w.connected("ours-to-proton")
    proton_credit(w, prcv, 3)
    assert of(w.pump.our_events, CreditAdded)[-1].credit == 3
    assert snd.credit == 3
    ds = [snd.send(our_message(i)) for i in range(5)]
    w.pump.pump()
    assert [m for _, m in proton_read(prcv)] == [our_message(i) for i in range(3)]
    assert snd.credit == 0 and snd.queued == 2
    assert prcv.credit == 0
    proton_credit(w, prcv, 4)
    assert [m for _, m in proton_read(prcv)] == [our_message(i) for i in (3, 4)]
    assert snd.credit == 2 and snd.queued == 0
    assert all(d.delivery_id is not None for d in ds)


def test_credit_ours_receiver(role: str) -> None:
    w = World(role)
    rcv, psnd = w.connected("proton-to-ours")
    rcv.flow(3)
    _, pe = w.pump.pump()
    assert any(e.type == PEvent.LINK_FLOW for e in pe)
    assert psnd.credit == 3
    for i in range(5):
        proton_send(psnd, proton_message(i), f"t{i}")
    oe, _ = w.pump.pump()
    got = [e.delivery.payload for e in of(oe, DeliveryReceived)]
    assert got == [proton_message(i) for i in range(3)]
    assert rcv.credit == 0 and rcv.delivery_count == 3
    rcv.add_credit(10)
    oe, _ = w.pump.pump()
    assert [e.delivery.payload for e in of(oe, DeliveryReceived)] == [
        proton_message(i) for i in (3, 4)
    ]
    assert rcv.credit == 8 and psnd.credit == 8
    assert [Message.decode(p).id for p in got] == ["proton-0", "proton-1", "proton-2"]


def test_drain_ours_sender(role: str) -> None:
    """Proton's receiver drains; our sender sends what it has, then gives the rest back."""
    w = World(role)
    snd, prcv = w.connected("ours-to-proton")
    proton_credit(w, prcv, 5)
    snd.send(our_message(0))
    w.pump.pump()
    prcv.drain(0)  # drain=true with the credit as it is
    oe, _ = w.pump.pump()
    assert len(of(oe, DrainRequested)) == 1
    assert snd.drain and snd.credit == 4
    snd.send(our_message(1))  # still allowed while draining
    snd.drained()
    w.pump.pump()
    assert [m for _, m in proton_read(prcv)] == [our_message(0), our_message(1)]
    assert prcv.credit == 0
    assert not prcv.draining()
    assert prcv.drained() == 3
    assert snd.credit == 0 and snd.delivery_count == 5


def test_drain_with_queued_messages_uses_credit(role: str) -> None:
    w = World(role)
    snd, prcv = w.connected("ours-to-proton")
    for i in range(2):
        snd.send(our_message(i))  # queued: no credit yet
    prcv.drain(3)  # credit and drain in one flow
    w.pump.pump()
    snd.drained()
    w.pump.pump()
    assert len(proton_read(prcv)) == 2
    assert prcv.credit == 0 and prcv.drained() == 1 and not prcv.draining()


def test_drain_ours_receiver(role: str) -> None:
    """Our receiver drains; Proton's sender answers with its credit given back."""
    w = World(role)
    rcv, psnd = w.connected("proton-to-ours")
    rcv.flow(5)
    w.pump.pump()
    d = proton_send(psnd, proton_message(0), "t0", settled=True)
    w.pump.pump()
    rcv.drain_credit()
    w.pump.pump()
    assert psnd.drain_mode
    # Proton 0.40 quirk: Sender.drained() sends no flow while Python references a settled
    # delivery of this sender (here ``d`` and the recorded DELIVERY events).
    del d
    w.pump.forget_proton_events()
    psnd.offered(2)  # Proton 0.40 does not send ``available`` (its flows never carry it)
    assert psnd.drained() == 4
    oe, _ = w.pump.pump()
    flows = of(oe, FlowReceived)
    assert flows and flows[-1].drained
    assert flows[-1].available is None
    assert rcv.credit == 0 and rcv.delivery_count == 5 and not rcv.drain
    assert len(of(w.pump.our_events, DeliveryReceived)) == 1


def test_available_on_the_wire(role: str) -> None:
    w = World(role)
    snd, _prcv = w.connected("ours-to-proton")
    snd.set_available(7)
    w.pump.pump()
    # Proton 0.40 ignores ``available`` and ``echo`` in a flow it receives (pn_do_flow does not
    # read those fields), so only the trace can show that ours arrived.
    assert any("@flow" in line and "available=0x7" in line for line in w.pump.trace)


# ================================================================================================
# settlement modes and outcomes
# ================================================================================================
def presettled_pattern(snd_mode: int) -> list[bool]:
    return {UNSETTLED: [False, False], SETTLED: [True, True], MIXED: [True, False]}[snd_mode]


@pytest.mark.parametrize(
    "snd_mode", [UNSETTLED, SETTLED, MIXED], ids=["snd-unsettled", "snd-settled", "snd-mixed"]
)
@pytest.mark.parametrize("rcv_mode", [FIRST, SECOND], ids=["rcv-first", "rcv-second"])
def test_settle_modes_ours_sender(role: str, snd_mode: int, rcv_mode: int) -> None:
    w = World(role)
    snd, prcv = w.connected("ours-to-proton", snd_settle_mode=snd_mode, rcv_settle_mode=rcv_mode)
    assert prcv.rcv_settle_mode == rcv_mode and prcv.remote_snd_settle_mode == snd_mode
    proton_credit(w, prcv, 10)
    pattern = presettled_pattern(snd_mode)
    ds = [snd.send(our_message(i), settled=pre) for i, pre in enumerate(pattern)]
    w.pump.pump()
    got = proton_read(prcv)
    assert [m for _, m in got] == [our_message(i) for i in range(len(pattern))]
    assert [pd.settled for pd, _ in got] == pattern  # remotely settled = pre-settled
    for (pd, _), pre in zip(got, pattern):
        if pre:
            pd.settle()
        else:
            pd.update(Disposition.ACCEPTED)
            if rcv_mode == FIRST:
                pd.settle()
    oe, _ = w.pump.pump()
    updates = of(oe, DeliveryUpdated)
    unsettled = [d for d, pre in zip(ds, pattern) if not pre]
    assert [u.delivery for u in updates] == unsettled
    for u in updates:
        assert u.state == Accepted()
        assert u.settled == (rcv_mode == FIRST)
        u.delivery.settle()
    oe, _pe = w.pump.pump()
    for (pd, _), pre in zip(got, pattern):
        if not pre and rcv_mode == SECOND:
            assert pd.settled  # the sender settled: Proton's receiver settles now
            pd.settle()
    w.pump.pump()
    assert all(d.settled for d in ds)
    assert snd.unsettled == {}
    assert snd.session.delivery_ids(snd.role) == {}
    assert prcv.unsettled == 0


@pytest.mark.parametrize(
    "snd_mode", [UNSETTLED, SETTLED, MIXED], ids=["snd-unsettled", "snd-settled", "snd-mixed"]
)
@pytest.mark.parametrize("rcv_mode", [FIRST, SECOND], ids=["rcv-first", "rcv-second"])
def test_settle_modes_ours_receiver(role: str, snd_mode: int, rcv_mode: int) -> None:
    w = World(role)
    rcv, psnd = w.connected("proton-to-ours", snd_settle_mode=snd_mode, rcv_settle_mode=rcv_mode)
    assert rcv.effective_snd_settle_mode == snd_mode and rcv.effective_rcv_settle_mode == rcv_mode
    rcv.flow(10)
    w.pump.pump()
    pattern = presettled_pattern(snd_mode)
    pds = [
        proton_send(psnd, proton_message(i), f"t{i}", settled=pre) for i, pre in enumerate(pattern)
    ]
    oe, _ = w.pump.pump()
    got = of(oe, DeliveryReceived)
    assert [e.delivery.payload for e in got] == [proton_message(i) for i in range(len(pattern))]
    assert [e.delivery.remote_settled for e in got] == pattern
    assert [e.delivery.tag for e in got] == [f"t{i}".encode() for i in range(len(pattern))]
    unsettled = [e.delivery for e in got if not e.delivery.remote_settled]
    for d in unsettled:
        d.accept()
    w.pump.pump()
    for pd, pre in zip(pds, pattern):
        if pre:
            continue
        assert pd.remote_state == Disposition.ACCEPTED
        assert pd.settled == (rcv_mode == FIRST)  # the receiver settled first, or waits for us
        pd.settle()
    oe, _ = w.pump.pump()
    if rcv_mode == SECOND:
        ups = of(oe, DeliveryUpdated)
        assert [u.delivery for u in ups] == unsettled
        assert all(u.settled for u in ups)
    assert all(e.delivery.settled or e.delivery.remote_settled for e in got)
    assert rcv.unsettled == {}
    assert rcv.session.delivery_ids(rcv.role) == {}
    assert psnd.unsettled == 0


def _outcomes() -> list[Any]:
    return [
        pytest.param(Accepted(), id="accepted"),
        pytest.param(
            Rejected(
                error=Error(
                    condition=symbol("amqp:precondition-failed"),
                    description="wrong",
                    info={symbol("field"): "ttl"},
                )
            ),
            id="rejected",
        ),
        pytest.param(Released(), id="released"),
        pytest.param(Modified(delivery_failed=True), id="modified-failed"),
        pytest.param(
            Modified(delivery_failed=True, undeliverable_here=True), id="modified-undeliverable"
        ),
        pytest.param(
            Modified(message_annotations={symbol("x-opt-reason"): "retry", symbol("x-opt-n"): 3}),
            id="modified-annotations",
        ),
    ]


PROTON_TYPE = {
    Accepted: Disposition.ACCEPTED,
    Rejected: Disposition.REJECTED,
    Released: Disposition.RELEASED,
    Modified: Disposition.MODIFIED,
}


def check_proton_remote_outcome(pd: Any, outcome: Any) -> None:
    assert pd.remote_state == PROTON_TYPE[type(outcome)]
    r = pd.remote
    if isinstance(outcome, Rejected):
        c = r.condition
        assert (c.name, c.description, c.info) == (
            "amqp:precondition-failed",
            "wrong",
            {"field": "ttl"},
        )
    if isinstance(outcome, Modified):
        assert r.failed == bool(outcome.delivery_failed)
        assert r.undeliverable == bool(outcome.undeliverable_here)
        assert (r.annotations or None) == outcome.message_annotations


def proton_apply_outcome(pd: Any, outcome: Any) -> None:
    if isinstance(outcome, Rejected):
        e = outcome.error
        pd.local.condition = Condition(
            str(e.condition), e.description, {psymbol(k): v for k, v in e.info.items()}
        )
    if isinstance(outcome, Modified):
        pd.local.failed = bool(outcome.delivery_failed)
        pd.local.undeliverable = bool(outcome.undeliverable_here)
        if outcome.message_annotations:
            pd.local.annotations = {psymbol(k): v for k, v in outcome.message_annotations.items()}
    pd.update(PROTON_TYPE[type(outcome)])
    pd.settle()


@pytest.mark.parametrize("outcome", _outcomes())
def test_outcome_from_ours(role: str, outcome: Any) -> None:
    """Our receiver settles with each outcome; Proton's sender reads it."""
    w = World(role)
    rcv, psnd = w.connected("proton-to-ours", snd_settle_mode=UNSETTLED)
    rcv.flow(1)
    w.pump.pump()
    pd = proton_send(psnd, proton_message(0), "t0")
    oe, _ = w.pump.pump()
    (got,) = of(oe, DeliveryReceived)
    got.delivery.settle(outcome)
    w.pump.pump()
    assert pd.settled
    check_proton_remote_outcome(pd, outcome)
    pd.settle()
    w.pump.pump()
    assert psnd.unsettled == 0 and rcv.unsettled == {}


@pytest.mark.parametrize("outcome", _outcomes())
def test_outcome_from_proton(role: str, outcome: Any) -> None:
    """Proton's receiver settles with each outcome; our sender reads it."""
    w = World(role)
    snd, prcv = w.connected("ours-to-proton", snd_settle_mode=UNSETTLED)
    proton_credit(w, prcv, 1)
    d = snd.send(our_message(0))
    w.pump.pump()
    ((pd, data),) = proton_read(prcv)
    assert decode_with_proton(data).id == "ours-0"
    proton_apply_outcome(pd, outcome)
    oe, _ = w.pump.pump()
    (up,) = of(oe, DeliveryUpdated)
    assert up.delivery is d and up.settled and d.remote_settled
    st = up.state
    assert type(st) is type(outcome)
    if isinstance(outcome, Rejected):
        assert st.error.condition == "amqp:precondition-failed"
        assert st.error.description == "wrong"
        assert st.error.info == {"field": "ttl"}
    if isinstance(outcome, Modified):
        # Proton always writes both booleans; the spec's default for absent ones is false
        assert bool(st.delivery_failed) == bool(outcome.delivery_failed)
        assert bool(st.undeliverable_here) == bool(outcome.undeliverable_here)
        assert (st.message_annotations or None) == outcome.message_annotations
    d.settle()
    w.pump.pump()
    assert snd.unsettled == {}


def test_non_terminal_state_received(role: str) -> None:
    """Our receiver reports progress (received) before the outcome; Proton's sender sees both."""
    from amqp10.types import Received

    w = World(role)
    rcv, psnd = w.connected("proton-to-ours", snd_settle_mode=UNSETTLED)
    rcv.flow(1)
    w.pump.pump()
    pd = proton_send(psnd, proton_message(0), "t0")
    oe, _ = w.pump.pump()
    (got,) = of(oe, DeliveryReceived)
    got.delivery.update(Received(section_number=1, section_offset=10))
    w.pump.pump()
    assert pd.remote_state == Disposition.RECEIVED and not pd.settled
    assert (pd.remote.section_number, pd.remote.section_offset) == (1, 10)
    got.delivery.accept()
    w.pump.pump()
    assert pd.remote_state == Disposition.ACCEPTED and pd.settled


# ================================================================================================
# multi-frame transfers
# ================================================================================================
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("small", ["ours", "proton", "both"])
@pytest.mark.parametrize("size", [3000, 70_000])
def test_multi_frame(role: str, direction: str, small: str, size: int) -> None:
    ours_kw = {"max_frame_size": 512} if small in ("ours", "both") else {}
    pump_kw = {"max_frame_size": 512} if small in ("proton", "both") else {}
    w = World(role, ours_kw=ours_kw, **pump_kw)
    body = random.Random(size).randbytes(size)
    t = w.pump.transport
    if direction == "ours-to-proton":
        snd, prcv = w.connected(direction)
        proton_credit(w, prcv, 3)
        frames0 = t.frames_input
        payloads = [our_message(i, body) for i in range(2)]
        for p in payloads:
            snd.send(p)
        w.pump.pump()
        got = proton_read(prcv)
        assert [g for _, g in got] == payloads  # byte for byte
        assert bytes(decode_with_proton(got[1][1]).body) == body
        frame_limit = t.max_frame_size
        nframes = t.frames_input - frames0
    else:
        rcv, psnd = w.connected(direction)
        rcv.flow(3)
        w.pump.pump()
        frames0 = t.frames_output
        payloads = [proton_message(i, body) for i in range(2)]
        for i, p in enumerate(payloads):
            proton_send(psnd, p, f"t{i}")
        oe, _ = w.pump.pump()
        got_d = [e.delivery for e in of(oe, DeliveryReceived)]
        assert [d.payload for d in got_d] == payloads
        assert Message.decode(got_d[1].payload).body == body
        frame_limit = w.ours.max_frame_size
        nframes = t.frames_output - frames0
    # the receiver's max-frame-size forced the sender to split each message
    assert nframes >= 2 * (len(payloads[0]) // frame_limit)
    if small in ("both", "ours" if direction == "proton-to-ours" else "proton"):
        assert nframes > 2 * 4


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_byte_by_byte(role: str, direction: str) -> None:
    """Each side's bytes are fed to the other in 1-byte (and odd-sized) pieces."""
    for chunk in (1, 7):
        w = World(role, ours_kw={"max_frame_size": 512}, chunk=chunk, max_frame_size=600)
        body = bytes(range(256)) * 6
        if direction == "ours-to-proton":
            snd, prcv = w.connected(direction)
            proton_credit(w, prcv, 2)
            snd.send(our_message(0, body))
            w.pump.pump()
            assert [g for _, g in proton_read(prcv)] == [our_message(0, body)]
        else:
            rcv, psnd = w.connected(direction)
            rcv.flow(2)
            w.pump.pump()
            proton_send(psnd, proton_message(0, body), "t")
            oe, _ = w.pump.pump()
            assert [e.delivery.payload for e in of(oe, DeliveryReceived)] == [
                proton_message(0, body)
            ]
        w.ours.close()
        w.pump.pump()
        w.pconn.close()
        w.pump.pump()
        assert w.ours.is_closed and w.pump.transport.closed


# ================================================================================================
# aborted deliveries
# ================================================================================================
def test_abort_from_proton(role: str) -> None:
    w = World(role, ours_kw={"max_frame_size": 512})
    rcv, psnd = w.connected("proton-to-ours")
    rcv.flow(5)
    w.pump.pump()
    pd = psnd.delivery("big")
    psnd.send(b"y" * 1500)  # not advanced: frames go out with more=true
    oe, _ = w.pump.pump()
    assert not of(oe, DeliveryReceived)
    pd.abort()
    oe, _ = w.pump.pump()
    (ab,) = of(oe, DeliveryAborted)
    assert ab.delivery.tag == b"big" and ab.delivery.aborted
    # the link goes on; the aborted delivery used one credit on both sides
    assert rcv.credit == psnd.credit == 4
    proton_send(psnd, proton_message(1), "next")
    oe, _ = w.pump.pump()
    assert [e.delivery.payload for e in of(oe, DeliveryReceived)] == [proton_message(1)]
    assert rcv.unsettled.keys() == {b"next"}


def test_abort_from_ours(role: str) -> None:
    """Our delivery is partly sent (Proton's session window is full), then aborted."""
    w = World(role, max_frame_size=512)
    if w.ours_initiates:
        w.open().begin()
        # Proton's begin already went out with an open window; its next flow (with the
        # link credit) carries the window this capacity gives: 3 frames
        w.psession.incoming_capacity = 512 * 3
    else:
        w.open()
        w.psession = w.pconn.session()
        w.psession.incoming_capacity = 512 * 3  # Proton's incoming window: 3 frames
        w.psession.open()
        oe, _ = w.pump.pump()
        w.session = of(oe, SessionBegun)[0].session
    snd, prcv = w.attach("ours-to-proton")
    proton_credit(w, prcv, 5)
    d = snd.send(b"x" * 3000)  # about 6 frames of 512 bytes
    w.pump.pump()
    pd = prcv.current
    assert pd is not None and pd.partial
    assert not d.sent
    d.abort()
    w.pump.pump()
    # Proton opens its window as the application reads; the abort follows the window (it is a
    # transfer like any other: sending it early is a session window violation for Proton)
    while not pd.aborted:
        assert prcv.recv(pd.pending) is not None
        _, _pe = w.pump.pump()
        assert w.pconn.state == ACTIVE
    pd.settle()
    assert snd.unsettled == {}
    snd.send(our_message(1))
    w.pump.pump()
    assert [m for _, m in proton_read(prcv)] == [our_message(1)]
    assert snd.credit == prcv.credit == 3


# ================================================================================================
# idle timeout
# ================================================================================================
def test_idle_heartbeats_keep_both_alive(role: str) -> None:
    w = World(role, ours_kw={"idle_timeout": 1.0}, idle_timeout=2.0).open()
    # both advertise half their local value (§2.4.5)
    assert w.ours.remote_idle_timeout == 1.0
    assert w.pump.transport.remote_idle_timeout == 0.5
    t0 = 1000.0
    sent0, recv0 = w.pump.bytes_to_proton, w.pump.bytes_to_ours
    for i in range(200):  # 20 s of virtual time, nothing but heartbeats
        w.pump.tick(t0 + i * 0.1)
    assert w.ours.is_open and w.pconn.state == ACTIVE
    assert not of(w.pump.our_events, ConnectionFailed)
    # empty frames (8 bytes) both ways, at least every half idle-time-out
    assert w.pump.bytes_to_proton - sent0 >= 8 * 20
    assert w.pump.bytes_to_ours - recv0 >= 8 * 20


def test_idle_proton_silent_we_close(role: str) -> None:
    """Proton sends nothing (never ticked): our engine closes with resource-limit-exceeded."""
    w = World(role, ours_kw={"idle_timeout": 1.0}).open()
    t0 = 1000.0
    dl = w.ours.tick(t0)
    assert dl is not None and dl <= t0 + 1.0
    i = 1
    while not of(w.pump.our_events, ConnectionFailed):
        w.pump.tick(t0 + i * 0.25, proton_=False)
        i += 1
        assert i < 20
    (failed,) = of(w.pump.our_events, ConnectionFailed)
    assert failed.error.condition == ErrorCondition.RESOURCE_LIMIT_EXCEEDED
    assert t0 + 1.0 <= t0 + (i - 1) * 0.25 <= t0 + 1.5
    rc = w.pconn.remote_condition
    assert rc is not None and rc.name == "amqp:resource-limit-exceeded"
    w.pconn.close()
    w.pump.pump()
    assert w.ours.is_closed and w.pump.transport.closed


def test_idle_ours_silent_proton_closes(role: str) -> None:
    """We send nothing (never ticked): Proton closes with resource-limit-exceeded and we report it."""
    w = World(role, idle_timeout=2.0).open()
    t0 = 1000.0
    for i in range(20):
        w.pump.tick(t0 + i * 0.25, ours=False)
        if of(w.pump.our_events, ConnectionClosed):
            break
    (closed,) = of(w.pump.our_events, ConnectionClosed)
    assert closed.error is not None
    assert closed.error.condition == ErrorCondition.RESOURCE_LIMIT_EXCEEDED
    assert closed.error.description == "local-idle-timeout expired"
    # Proton's timeout fires on the second tick past its deadline (2 s of silence)
    assert 2.0 <= i * 0.25 <= 3.0
    assert w.ours.is_closed
    assert w.pump.transport.condition.name == "amqp:resource-limit-exceeded"


# ================================================================================================
# errors
# ================================================================================================
def test_max_message_size_violation_detected_by_ours(role: str) -> None:
    """Proton 0.40 sends past our max-message-size; our receiver detaches with message-size-exceeded."""
    w = World(role)
    rcv, psnd = w.connected("proton-to-ours", link_kw={"max_message_size": 1000}, initiator="ours")
    assert psnd.remote_max_message_size == 1000
    rcv.flow(2)
    w.pump.pump()
    proton_send(psnd, proton_message(0, b"z" * 5000), "big")
    oe, pe = w.pump.pump()
    (failed,) = of(oe, LinkFailed)
    assert failed.error.condition == ErrorCondition.MESSAGE_SIZE_EXCEEDED
    assert not of(oe, DeliveryReceived)
    assert "PN_LINK_REMOTE_DETACH" in w.pump.proton_names(pe)
    assert psnd.remote_condition.name == "amqp:link:message-size-exceeded"
    proton_answer_detach(w, psnd)
    assert rcv.state is LinkState.DETACHED
    assert w.ours.is_open and w.session.is_mapped


def test_proton_rejects_bad_frame(role: str) -> None:
    """A malformed frame reaches Proton: it closes with an error and we report its condition."""
    w = World(role).open()
    # A flow (with an empty field list) on channel 0, where no session was begun. Proton
    # 0.40 closes with amqp:not-allowed. (A frame whose body is not a performative, or an
    # unknown descriptor, makes Proton 0.40 silently stop reading (tail closed, "<- EOS")
    # with no close and no error at all, so that cannot be tested for a condition.)
    w.pump.inject_to_proton(b"\x00\x00\x00\x0c\x02\x00\x00\x00\x00\x53\x13\x45")
    oe, _ = w.pump.pump()
    (closed,) = of(oe, ConnectionClosed)
    assert closed.error is not None
    assert closed.error.condition == ErrorCondition.NOT_ALLOWED
    assert closed.error.description == "no such channel: 0"
    assert w.ours.is_closed
    assert not of(oe, ConnectionFailed)


def test_proton_detach_error_while_messages_in_flight(role: str) -> None:
    """Proton's receiver closes its link with an error while our deliveries are unsettled."""
    w = World(role)
    snd, prcv = w.connected("ours-to-proton")
    proton_credit(w, prcv, 2)
    ds = [snd.send(our_message(i)) for i in range(3)]
    w.pump.pump()
    prcv.condition = Condition("amqp:internal-error", "consumer crashed")
    prcv.close()
    oe, _ = w.pump.pump()
    (det,) = of(oe, LinkDetached)
    assert det.closed and det.error.condition == ErrorCondition.INTERNAL_ERROR
    assert snd.state is LinkState.DETACHED
    assert not any(d.remote_settled for d in ds)
    with pytest.raises(Exception):  # noqa: B017 - IllegalStateError
        snd.send(our_message(9))


def test_full_conversation_many_messages(role: str) -> None:
    """A longer run in both directions at once: windows, credit replenishment, settlement."""
    w = World(role).open().begin()
    snd, prcv = w.attach("ours-to-proton", name="out")
    rcv, psnd = w.attach("proton-to-ours", name="in")
    proton_credit(w, prcv, 50)
    rcv.flow(50)
    n = 400
    sent = [snd.send(our_message(i)) for i in range(n)]
    for i in range(n):
        proton_send(psnd, proton_message(i), f"p{i}")
    received: list[bytes] = []
    proton_got: list[bytes] = []
    seen = 0
    for _ in range(200):
        w.pump.pump()
        oe, seen = w.pump.our_events[seen:], len(w.pump.our_events)
        for e in of(oe, DeliveryReceived):
            received.append(e.delivery.payload)
            e.delivery.accept()
        for pd, data in proton_read(prcv):
            proton_got.append(data)
            pd.update(Disposition.ACCEPTED)
            pd.settle()
        if rcv.credit < 25:
            rcv.flow(50)
        if prcv.credit < 25:
            prcv.flow(50 - prcv.credit)
        w.pump.pump()
        if len(received) == n and len(proton_got) == n:
            break
    assert received == [proton_message(i) for i in range(n)]
    assert proton_got == [our_message(i) for i in range(n)]
    oe, _ = w.pump.pump()
    assert all(d.remote_settled for d in sent)
    gc.collect()


def test_session_windows_under_load(role: str) -> None:
    """More transfers than either side's session window: both keep their windows moving."""
    w = World(role)
    rcv, psnd = w.connected("proton-to-ours")
    rcv.flow(3000)  # our incoming-window is 2048 transfers: it must be reopened on the way
    w.pump.pump()
    body = proton_message(0)
    for i in range(3000):
        proton_send(psnd, body, f"{i}", settled=True)
    oe, _ = w.pump.pump()
    assert len(of(oe, DeliveryReceived)) == 3000
    assert w.ours.is_open and not of(oe, ConnectionFailed)

    w2 = World(role, max_frame_size=512)
    snd, prcv = w2.connected("ours-to-proton")
    w2.psession.incoming_capacity = 512 * 4  # Proton's window: 4 frames at a time
    proton_credit(w2, prcv, 1000)
    for i in range(1000):
        snd.send(our_message(i), settled=True)
    got: list[bytes] = []
    for _ in range(2000):
        w2.pump.pump()
        for pd, data in proton_read(prcv):
            got.append(data)
            pd.settle()
        if len(got) == 1000:
            break
    assert got == [our_message(i) for i in range(1000)]
    assert snd.queued == 0 and w2.pconn.state == ACTIVE


def test_pipelined_everything(role: str) -> None:
    """The client writes open, begin, attach (and flow or transfer) before any answer."""
    w = World(role)
    if w.ours_initiates:

        def grant(pump: ProtonPump, ev: Any) -> None:
            if ev.type == PEvent.LINK_REMOTE_OPEN:
                ev.link.flow(1)

        w.pump.on_proton_event = grant
        w.ours.open()
        s = w.ours.session()
        s.begin()
        snd = s.sender("p", target=Target(address="q"))
        snd.attach()
        snd.send(our_message(0))  # queued until Proton's credit arrives
        w.pump.pump()
        prcv = w.pconn.link_head(0)
    else:

        def send(pump: ProtonPump, ev: Event) -> None:
            if isinstance(ev, CreditAdded):
                ev.link.send(our_message(0))

        w.pump.on_our_event = send
        w.pconn.open()
        ps = w.pconn.session()
        ps.open()
        prcv = ps.receiver("p")
        prcv.source.address = "q"
        prcv.open()
        prcv.flow(1)  # Proton writes this flow before our attach: the credit must not be lost
        w.pump.pump()
    assert [m for _, m in proton_read(prcv)] == [our_message(0)]


@pytest.mark.parametrize("closer", ["ours", "proton"])
def test_close_connection_with_everything_open(role: str, closer: str) -> None:
    """Closing the connection with sessions, links and unsettled deliveries in both directions."""
    w = World(role)
    snd, prcv = w.connected("ours-to-proton", name="out")
    rcv, psnd = w.attach("proton-to-ours", name="in")
    proton_credit(w, prcv, 5)
    rcv.flow(5)
    w.pump.pump()
    snd.send(our_message(0))
    proton_send(psnd, proton_message(0), "t0")
    w.pump.pump()
    if closer == "ours":
        w.ours.close(Error(condition=ErrorCondition.CONNECTION_FORCED, description="shutdown"))
        w.pump.pump()
        assert w.pconn.remote_condition.name == "amqp:connection:forced"
        w.pconn.close()
    else:
        w.pconn.condition = Condition("amqp:connection:forced", "shutdown")
        w.pconn.close()
    w.pump.pump()
    assert w.ours.is_closed and w.pconn.state == CLOSED and w.pump.transport.closed
    if closer == "proton":
        (closed,) = of(w.pump.our_events, ConnectionClosed)
        assert closed.error.description == "shutdown"
