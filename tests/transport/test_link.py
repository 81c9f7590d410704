"""Links (Part 2 §2.6): attach/detach/close, refusal, flow control (§2.6.7), stealing, limits."""

from __future__ import annotations

import pytest

from amqp10.transport import (
    Connection,
    CreditAdded,
    CreditLowered,
    DeliveryReceived,
    DrainRequested,
    FlowReceived,
    IllegalStateError,
    LinkAttached,
    LinkDetached,
    LinkFailed,
    LinkState,
    Receiver,
    Sender,
)
from amqp10.types import (
    Attach,
    Detach,
    Error,
    ErrorCondition,
    Flow,
    Role,
    Source,
    Target,
    Transfer,
)

from .pair import C2S, S2C, Pair, frame, names, of_type

U32 = 2**32


def received(pair: Pair, link: object = None) -> list[bytes]:
    return [
        e.delivery.payload
        for e in pair.server_events + pair.client_events
        if isinstance(e, DeliveryReceived) and (link is None or e.link is link)
    ]


# -- attach / detach / close ------------------------------------------------------------


@pytest.mark.parametrize("client_role", ["sender", "receiver"])
def test_attach_both_roles(client_role: str, pair: Pair) -> None:
    pair.open()
    pair.session()
    cl, sl = pair.link("l", client_role=client_role, source=Source(address="s"), target=Target(address="t"))
    assert isinstance(cl, Sender if client_role == "sender" else Receiver)
    assert isinstance(sl, Receiver if client_role == "sender" else Sender)
    assert cl.is_attached and sl.is_attached
    attaches = pair.performatives(C2S, tp=Attach) + pair.performatives(S2C, tp=Attach)
    assert [a.name for a in attaches] == ["l", "l"]
    assert attaches[0].role == (client_role == "receiver")  # role: True = receiver (§2.8.1)
    assert attaches[1].role != attaches[0].role
    sender_attach = attaches[0] if client_role == "sender" else attaches[1]
    assert sender_attach.initial_delivery_count == 0
    assert sl.remote_source.address == "s" and sl.remote_target.address == "t"
    assert attaches[0].unsettled is None and attaches[1].unsettled is None


@pytest.mark.parametrize("closed", [False, True])
def test_detach_and_close_are_answered_in_kind(closed: bool, pair: Pair) -> None:
    snd, rcv = pair.attached()
    snd.detach(closed=closed)
    assert snd.state is LinkState.DETACH_SENT
    ce, se = pair.pump()
    assert names(se) == ["LinkDetached"] and se[0].closed is closed and se[0].error is None
    assert names(ce) == ["LinkDetached"] and ce[0].closed is closed
    dets = pair.performatives(C2S, tp=Detach) + pair.performatives(S2C, tp=Detach)
    assert [d.closed for d in dets] == [closed, closed]
    assert snd.state is LinkState.DETACHED and rcv.state is LinkState.DETACHED
    assert snd.closed is closed and rcv.closed is closed


def test_detach_with_error_reaches_the_peer(pair: Pair) -> None:
    snd, rcv = pair.attached()
    err = Error(condition=ErrorCondition.DETACH_FORCED, description="admin")
    rcv.close(err)
    ce, _ = pair.pump()
    assert names(ce) == ["LinkDetached"] and ce[0].error == err and ce[0].closed


def test_reattach_after_detach(pair: Pair) -> None:
    snd, rcv = pair.attached()
    snd.detach()
    pair.pump()
    snd.attach()
    _, se = pair.pump()
    again = of_type(se, LinkAttached)[0].link
    again.attach(source=again.remote_source, target=again.remote_target)
    again.flow(1)
    pair.pump()
    assert snd.is_attached and snd.handle == 0
    snd.send(b"after re-attach")
    pair.pump()
    assert received(pair, again) == [b"after re-attach"]
    # a re-attach (not a resume) carries no unsettled map (§2.7.3)
    assert all(a.unsettled is None for a in pair.performatives(C2S, tp=Attach))


@pytest.mark.parametrize("client_role", ["sender", "receiver"])
def test_refusing_a_link_attaches_with_a_null_terminus_then_detaches(client_role: str, pair: Pair) -> None:
    pair.open()
    pair.session()
    cs = pair.client.sessions[0]
    cl = (cs.sender if client_role == "sender" else cs.receiver)("nope", source=Source(address="s"), target=Target(address="t"))
    cl.attach()
    _, se = pair.pump()
    sl = of_type(se, LinkAttached)[0].link
    m = pair.mark()
    sl.close(Error(condition=ErrorCondition.NOT_FOUND, description="no such node"))
    ce, _ = pair.pump()
    attach, detach = pair.performatives(S2C, m)[:2]
    assert type(attach) is Attach and type(detach) is Detach
    if client_role == "sender":  # the server is the receiver: its target (local terminus) is null
        assert attach.target is None and attach.source.address == "s"
    else:
        assert attach.source is None and attach.target.address == "t"
    assert detach.closed and detach.error.condition == ErrorCondition.NOT_FOUND
    assert names(ce) == ["LinkAttached", "LinkDetached"]
    assert cl.state is LinkState.DETACHED and sl.state is LinkState.DETACHED


def test_peer_attaches_and_detaches_before_we_answer(pair: Pair) -> None:
    pair.open()
    cs, ss = pair.session()
    snd = cs.sender("quick", source=Source(), target=Target())
    snd.attach()
    snd.detach()
    ce, se = pair.pump()
    assert names(se) == ["LinkAttached", "LinkDetached"]
    assert snd.state is LinkState.DETACHED and se[0].link.state is LinkState.DETACHED


# -- credit and delivery-count (§2.6.7) ----------------------------------------------------


def test_no_transfer_without_credit(pair: Pair) -> None:
    snd, rcv = pair.attached()
    for _ in range(3):
        snd.send(b"waiting")
    pair.pump()
    assert pair.performatives(C2S, tp=Transfer) == [] and snd.queued == 3
    rcv.flow(2)
    ce, _ = pair.pump()
    assert len(pair.performatives(C2S, tp=Transfer)) == 2 and snd.queued == 1
    assert of_type(ce, CreditAdded)[0].credit == 2
    assert (snd.delivery_count, snd.credit) == (2, 0)
    assert (rcv.delivery_count, rcv.credit) == (2, 0)
    rcv.add_credit(5)
    pair.pump()
    assert received(pair, rcv) == [b"waiting"] * 3
    assert (snd.delivery_count, snd.credit) == (3, 4) and (rcv.delivery_count, rcv.credit) == (3, 4)


def test_credit_granted_before_attach_completes(pair: Pair) -> None:
    pair.open()
    cs, ss = pair.session()
    rcv = cs.receiver("early", source=Source(address="q"), target=Target())
    rcv.attach()
    rcv.flow(3)  # kept and sent once the sender's attach (with its delivery-count) arrives
    _, se = pair.pump()
    snd = of_type(se, LinkAttached)[0].link
    snd.attach(source=snd.remote_source, target=snd.remote_target)
    pair.pump()
    assert snd.credit == 3


def test_delivery_count_wraps_around(pair: Pair) -> None:
    pair.open()
    pair.session()
    snd, rcv = pair.link(initial_delivery_count=U32 - 2)
    assert pair.performatives(C2S, tp=Attach)[0].initial_delivery_count == U32 - 2
    assert rcv.delivery_count == U32 - 2
    rcv.flow(5)
    for i in range(4):
        snd.send(b"%d" % i)
    pair.pump()
    assert received(pair, rcv) == [b"0", b"1", b"2", b"3"]
    assert snd.delivery_count == rcv.delivery_count == 2
    assert snd.credit == rcv.credit == 1
    m = pair.mark()
    rcv.flow(2)
    pair.pump()
    flow = pair.performatives(S2C, m, Flow)[0]
    assert (flow.delivery_count, flow.link_credit) == (2, 2)
    assert snd.credit == 2


def test_receiver_lowering_credit_while_transfers_are_in_flight(pair: Pair) -> None:
    snd, rcv = pair.attached(credit=5)
    for i in range(5):
        snd.send(b"%d" % i)
    in_flight = pair.client.data_to_send()
    rcv.flow(0)  # stop: but five are already on their way (§2.6.10)
    stop = pair.server.data_to_send()
    events = pair.feed(pair.server, in_flight)
    assert names(events) == ["DeliveryReceived"] * 5  # handled normally, no transfer-limit error
    pair.feed(pair.client, stop)
    assert snd.credit == 0


def test_a_flow_that_lowers_the_credit_says_so_to_the_sender(pair: Pair) -> None:
    snd, rcv = pair.attached(credit=5)
    snd.send(b"one")
    pair.pump()
    assert snd.credit == 4
    rcv.flow(1)  # (python-qpid-proton lowers a credit above its prefetch window so)
    ce, _ = pair.pump()
    assert names(ce) == ["CreditLowered"] and ce[0].link is snd and ce[0].credit == 1
    assert snd.credit == 1
    for body in (b"a", b"b"):
        snd.send(body)
    pair.pump()
    assert received(pair, rcv) == [b"one", b"a"] and snd.queued == 1  # one, as the credit said
    rcv.flow(3)
    ce, _ = pair.pump()
    assert isinstance(ce[0], CreditAdded) and not of_type(ce, CreditLowered)


def test_drain_gives_back_unused_credit(pair: Pair) -> None:
    snd, rcv = pair.attached(credit=5)
    snd.send(b"one")
    pair.pump()
    rcv.drain_credit()
    ce, se = pair.pump()
    assert names(ce) == ["DrainRequested"] and ce[0].link is snd
    assert snd.drain and snd.credit == 4
    m = pair.mark()
    snd.drained()
    _, se = pair.pump()
    flow = pair.performatives(C2S, m, Flow)[0]
    assert (flow.delivery_count, flow.link_credit) == (5, 0)
    assert names(se) == ["FlowReceived"] and se[0].drained
    assert (snd.delivery_count, snd.credit) == (5, 0)
    assert (rcv.delivery_count, rcv.credit, rcv.drain) == (5, 0, False)
    snd.drained()  # nothing outstanding: a no-op
    assert pair.client.data_to_send() == b""


def test_drain_sends_what_is_queued_first(pair: Pair) -> None:
    snd, rcv = pair.attached()
    snd.send(b"a")
    snd.send(b"b")
    rcv.flow(5, drain=True)
    ce, se = pair.pump()
    assert received(pair, rcv) == [b"a", b"b"]
    assert names(ce)[-1] == "DrainRequested"
    snd.drained()
    _, se = pair.pump()
    assert of_type(se, FlowReceived)[-1].drained
    assert snd.delivery_count == rcv.delivery_count == 5


def test_drain_used_up_by_transfers_with_more_queued_sends_no_flow(pair: Pair) -> None:
    """More is queued than the credit: the transfers use it up and the sender says
    nothing else (a drained flow would tell the receiver there is no more)."""
    snd, rcv = pair.attached()
    for i in range(3):
        snd.send(b"%d" % i)
    m = pair.mark()
    rcv.flow(2, drain=True)
    ce, se = pair.pump()
    assert not of_type(ce, DrainRequested)
    assert not of_type(se, FlowReceived) and not pair.performatives(C2S, m, Flow)
    assert rcv.credit == 0 and snd.queued == 1 and rcv.drain
    rcv.add_credit(2)  # rhea's drain.js: more credit, still draining
    ce, se = pair.pump()
    assert received(pair, rcv)[-1] == b"2"
    assert names(ce) == ["CreditAdded", "DrainRequested"]
    snd.drained()  # nothing more: the rest of the credit is given back
    _, se = pair.pump()
    assert of_type(se, FlowReceived)[-1].drained
    assert snd.delivery_count == rcv.delivery_count == 4 and rcv.credit == 0


def test_drain_used_up_exactly_by_transfers_is_answered_when_nothing_is_left(pair: Pair) -> None:
    snd, rcv = pair.attached()
    rcv.flow(2, drain=True)
    ce, _ = pair.pump()
    assert names(ce) == ["CreditAdded", "DrainRequested"]
    snd.send(b"a")
    snd.send(b"b")  # the credit is used up by transfers alone
    m = pair.mark()
    snd.drained()  # ... and nothing is left: the receiver is told, credit 0
    _, se = pair.pump()
    flow = pair.performatives(C2S, m, Flow)
    assert len(flow) == 1 and flow[0].drain and (flow[0].delivery_count, flow[0].link_credit) == (2, 0)
    assert of_type(se, FlowReceived)[-1].drained


def test_drain_with_no_credit_is_answered_at_once(pair: Pair) -> None:
    snd, rcv = pair.attached()
    rcv.flow(0, drain=True)
    ce, se = pair.pump()
    assert not of_type(ce, DrainRequested)
    assert of_type(se, FlowReceived)[0].drained


def test_drained_with_deliveries_still_queued_waits_for_them(chunk: int | None) -> None:
    pair = Pair(server=Connection("server"), chunk=chunk).open()
    cs = pair.client.session()
    cs.begin()
    _, se = pair.pump()
    ss = se[0].session
    ss.begin(incoming_window=1)
    pair.pump()
    snd, rcv = pair.link(sessions=(cs, ss))
    rcv.flow(10, drain=True)
    pair.pump()
    for i in range(3):
        snd.send(b"%d" % i)
    snd.drained()  # three are queued behind the session window
    pair.pump()
    assert received(pair, rcv) == [b"0", b"1", b"2"]
    assert of_type(pair.server_events, FlowReceived)[-1].drained
    assert snd.delivery_count == rcv.delivery_count == 10


def test_echo_asks_for_the_peers_flow_state(pair: Pair) -> None:
    snd, rcv = pair.attached()
    m = pair.mark()
    rcv.flow(3, echo=True)
    _, se = pair.pump()
    back = pair.performatives(C2S, m, Flow)
    assert len(back) == 1 and back[0].handle == snd.handle and not back[0].echo
    assert (back[0].delivery_count, back[0].link_credit) == (0, 3)
    assert names(se) == ["FlowReceived"]
    # and the other way: the sender asks
    m = pair.mark()
    pair.feed(pair.server, frame(0, Flow(next_incoming_id=0, incoming_window=100, next_outgoing_id=0, outgoing_window=100, handle=snd.handle, delivery_count=0, link_credit=3, echo=True)))
    pair.wire.append((S2C, pair.server.data_to_send()))
    answer = pair.performatives(S2C, m, Flow)
    assert len(answer) == 1 and answer[0].link_credit == 3 and not answer[0].echo


def test_available(pair: Pair) -> None:
    snd, rcv = pair.attached(credit=1)
    snd.set_available(7)
    _, se = pair.pump()
    assert names(se) == ["FlowReceived"] and se[0].available == 7 and not se[0].drained
    assert rcv.available == 7
    snd.send(b"x")
    pair.pump()
    assert rcv.available == 6


# -- stealing (§2.6.1) -------------------------------------------------------------------


def test_a_second_attach_with_the_same_name_steals_the_link(pair: Pair) -> None:
    snd, rcv = pair.attached("stolen")
    cs = pair.client.sessions[0]
    m = pair.mark()
    thief = Attach(name="stolen", handle=5, role=Role.SENDER, source=Source(), target=Target(address="t"), initial_delivery_count=0)
    events = pair.feed(pair.server, frame(cs.channel, thief))
    assert names(events) == ["LinkFailed", "LinkAttached"]
    assert events[0].link is rcv and events[0].error.condition == ErrorCondition.STOLEN
    new = events[1].link
    assert new is not rcv and new.name == "stolen" and new.remote_handle == 5
    pair.wire.append((S2C, pair.server.data_to_send()))
    detach = pair.performatives(S2C, m, Detach)[0]
    assert detach.handle == rcv.handle and detach.error.condition == ErrorCondition.STOLEN
    assert rcv.state is LinkState.DETACH_SENT
    assert pair.server.link_named("stolen", Role.RECEIVER) is new


def test_same_name_other_direction_is_another_link(pair: Pair) -> None:
    pair.open()
    pair.session()
    a, _ = pair.link("same", client_role="sender")
    b, _ = pair.link("same", client_role="receiver")
    assert a.is_attached and b.is_attached
    assert not of_type(pair.server_events, LinkFailed)


def test_attaching_a_name_in_use_locally_raises(pair: Pair) -> None:
    snd, rcv = pair.attached("dup")
    twin = pair.client.sessions[0].sender("dup")
    with pytest.raises(IllegalStateError):
        twin.attach()
    assert twin.state is LinkState.DETACHED and pair.client.data_to_send() == b""


# -- limits and violations ---------------------------------------------------------------


def test_sender_refuses_a_message_above_the_peers_max_message_size(pair: Pair) -> None:
    pair2 = pair.open()
    pair2.session()
    cs = pair2.client.sessions[0]
    s2 = cs.sender("small", source=Source(), target=Target())
    s2.attach()
    _, se = pair2.pump()
    r2 = se[0].link
    r2.max_message_size = 100
    r2.attach(source=r2.remote_source, target=r2.remote_target)
    r2.flow(5)
    pair2.pump()
    assert s2.remote_max_message_size == 100
    with pytest.raises(IllegalStateError):
        s2.send(b"x" * 101)
    assert s2.queued == 0 and not s2.unsettled and pair2.client.data_to_send() == b""
    s2.send(b"x" * 100)
    pair2.pump()
    assert received(pair2, r2) == [b"x" * 100]


def test_receiver_detaches_on_a_message_above_its_max_message_size(chunk: int | None) -> None:
    pair = Pair(server=Connection("server", max_frame_size=512), chunk=chunk).open()
    pair.session()
    keep_snd, keep_rcv = pair.link("keep", credit=1)
    snd, rcv = pair.link("big", credit=5)
    rcv.max_message_size = 1000
    snd.remote_attach.max_message_size = None  # play a sender that ignores the limit
    snd.send(b"y" * 1500)
    ce, se = pair.pump()
    failed = of_type(se, LinkFailed)
    assert failed and failed[0].link is rcv and failed[0].error.condition == ErrorCondition.MESSAGE_SIZE_EXCEEDED
    assert not of_type(se, DeliveryReceived)
    assert of_type(ce, LinkDetached)[0].error.condition == ErrorCondition.MESSAGE_SIZE_EXCEEDED
    keep_snd.send(b"fine")
    pair.pump()
    assert received(pair, keep_rcv) == [b"fine"]


def test_transfer_without_credit_detaches_with_transfer_limit_exceeded(pair: Pair) -> None:
    snd, rcv = pair.attached()
    cs = pair.client.sessions[0]
    t = Transfer(handle=snd.handle, delivery_id=0, delivery_tag=b"0", message_format=0)
    m = pair.mark()
    events = pair.feed(pair.server, frame(cs.channel, t, b"uninvited"))
    assert names(events) == ["LinkFailed"]
    assert events[0].error.condition == ErrorCondition.TRANSFER_LIMIT_EXCEEDED
    pair.wire.append((S2C, pair.server.data_to_send()))
    assert pair.performatives(S2C, m, Detach)[0].error.condition == ErrorCondition.TRANSFER_LIMIT_EXCEEDED
    assert pair.server.sessions[0].is_mapped


def test_unsettled_limit_detaches_with_resource_limit_exceeded(pair: Pair) -> None:
    snd, rcv = pair.attached(credit=10)
    rcv.max_unsettled = 3
    for i in range(3):
        snd.send(b"%d" % i)
    snd.send(b"pre-settled", settled=True)  # settled deliveries are not counted
    pair.pump()
    assert len(received(pair, rcv)) == 4 and len(rcv.unsettled) == 3
    snd.send(b"one too many")
    ce, se = pair.pump()
    failed = of_type(se, LinkFailed)
    assert failed and failed[0].error.condition == ErrorCondition.RESOURCE_LIMIT_EXCEEDED
    assert of_type(ce, LinkDetached)[0].error.condition == ErrorCondition.RESOURCE_LIMIT_EXCEEDED


def test_flow_from_a_sender_without_delivery_count_is_refused(pair: Pair) -> None:
    snd, rcv = pair.attached()
    # §2.7.4 delivery-count: "MUST be set" on a flow from the sender
    flow = Flow(next_incoming_id=0, incoming_window=100, next_outgoing_id=0, outgoing_window=100, handle=snd.handle, available=3)
    events = pair.feed(pair.server, frame(0, flow))
    assert names(events) == ["LinkFailed"] and events[0].link is rcv
    assert events[0].error.condition == ErrorCondition.INVALID_FIELD


def test_attach_of_a_sender_without_initial_delivery_count(pair: Pair) -> None:
    pair.open()
    cs, ss = pair.session()
    bad = Attach(name="nocount", handle=0, role=Role.SENDER, source=Source(), target=Target())
    events = pair.feed(pair.server, frame(cs.channel, bad))
    assert names(events) == ["SessionFailed"]
    assert events[0].error.condition == ErrorCondition.INVALID_FIELD


# -- local misuse ------------------------------------------------------------------------


def test_link_misuse_raises_and_changes_nothing(pair: Pair) -> None:
    snd, rcv = pair.attached(credit=1)
    cs = pair.client.sessions[0]

    def unchanged() -> None:
        assert snd.is_attached and rcv.is_attached
        assert pair.client.data_to_send() == b"" and pair.server.data_to_send() == b""

    with pytest.raises(IllegalStateError):
        snd.attach()  # attach twice
    unchanged()
    with pytest.raises(IllegalStateError):
        rcv.flow(-1)
    assert rcv.credit == 1
    unchanged()
    with pytest.raises(IllegalStateError):
        rcv.flow(U32)
    unchanged()
    with pytest.raises(IllegalStateError):
        snd.send(b"x", tag=b"t" * 33)
    unchanged()
    snd.send(b"x", tag=b"dup")
    pair.pump()
    with pytest.raises(IllegalStateError):
        snd.send(b"y", tag=b"dup")  # a tag still unsettled
    assert snd.queued == 0
    unchanged()
    snd.detach()
    pair.pump()
    with pytest.raises(IllegalStateError):
        snd.send(b"after detach")
    with pytest.raises(IllegalStateError):
        snd.detach()
    assert snd.queued == 0 and pair.client.data_to_send() == b""
    lone = cs.receiver("never-attached")
    with pytest.raises(IllegalStateError):
        lone.flow(1)
    assert lone.credit == 0


def test_send_mode_mismatch_raises(pair: Pair) -> None:
    pair.open()
    pair.session()
    unsettled, _ = pair.link("u", snd_settle_mode=0)
    settled, _ = pair.link("s", snd_settle_mode=1)
    with pytest.raises(IllegalStateError):
        unsettled.send(b"x", settled=True)
    with pytest.raises(IllegalStateError):
        settled.send(b"x", settled=False)
    assert unsettled.queued == settled.queued == 0


def test_constructor_checks() -> None:
    c = Connection("c")
    s = c.session()
    with pytest.raises(ValueError):
        s.sender("x", initial_delivery_count=-1)
    with pytest.raises(ValueError):
        s.receiver("x", max_message_size=-5)
