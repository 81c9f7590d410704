"""Sessions (Part 2 §2.5): begin/end, channels, windows (§2.5.6), handles."""

from __future__ import annotations

import pytest

from amqp10.transport import (
    Connection,
    DeliveryReceived,
    IllegalStateError,
    Session,
    SessionBegun,
    SessionState,
)
from amqp10.types import (
    Attach,
    Begin,
    Close,
    Detach,
    Disposition,
    End,
    Error,
    ErrorCondition,
    Flow,
    Role,
    Source,
    Target,
    Transfer,
)

from .pair import C2S, S2C, Pair, frame, names, of_type

M = SessionState.MAPPED
U32 = 2**32


def test_begin_and_end_from_the_client(pair: Pair) -> None:
    pair.open()
    cs = pair.client.session()
    cs.begin()
    assert cs.state is SessionState.BEGIN_SENT
    _, se = pair.pump()
    assert names(se) == ["SessionBegun"]
    ss = se[0].session
    assert ss.state is SessionState.BEGIN_RCVD and ss.remote_channel == cs.channel
    ss.begin()
    ce, _ = pair.pump()
    assert names(ce) == ["SessionBegun"] and ce[0].session is cs
    assert cs.state is M and ss.state is M
    begins = pair.performatives(S2C, tp=Begin)
    assert begins[0].remote_channel == cs.channel  # §2.5.1: the answer names our channel
    assert pair.performatives(C2S, tp=Begin)[0].remote_channel is None
    cs.end()
    ce, se = pair.pump()
    assert names(se) == ["SessionEnded"] and se[0].error is None
    assert names(ce) == ["SessionEnded"]
    assert cs.state is SessionState.UNMAPPED and ss.state is SessionState.UNMAPPED
    assert pair.client.sessions == [] and pair.server.sessions == []


def test_end_from_the_server_with_an_error(pair: Pair) -> None:
    pair.open()
    cs, ss = pair.session()
    err = Error(condition=ErrorCondition.RESOURCE_LIMIT_EXCEEDED, description="too many")
    ss.end(err)
    assert ss.state is SessionState.DISCARDING
    ce, _ = pair.pump()
    assert names(ce) == ["SessionEnded"] and ce[0].error == err
    assert pair.performatives(C2S, tp=End)[-1].error is None  # answered in kind, no error
    assert cs.state is SessionState.UNMAPPED and ss.state is SessionState.UNMAPPED


def test_peer_initiated_session_refused(pair: Pair) -> None:
    pair.open()
    cs = pair.client.session()
    cs.begin()
    _, se = pair.pump()
    ss = of_type(se, SessionBegun)[0].session
    m = pair.mark()
    ss.end(Error(condition=ErrorCondition.NOT_ALLOWED, description="no sessions for you"))
    ce, _ = pair.pump()
    # §2.5.1: a begin answering the peer's, then the end
    assert [type(p).__name__ for p in pair.performatives(S2C, m)] == ["Begin", "End"]
    assert names(ce) == ["SessionBegun", "SessionEnded"]
    assert ce[1].error.condition == ErrorCondition.NOT_ALLOWED
    assert cs.state is SessionState.UNMAPPED


def test_simultaneous_end(pair: Pair) -> None:
    pair.open()
    cs, ss = pair.session()
    cs.end()
    ss.end()
    ce, se = pair.pump()
    assert names(ce) == names(se) == ["SessionEnded"]
    assert cs.state is SessionState.UNMAPPED and ss.state is SessionState.UNMAPPED
    assert len(pair.performatives(C2S, tp=End)) == len(pair.performatives(S2C, tp=End)) == 1


def test_sessions_begun_by_both_sides(pair: Pair) -> None:
    pair.open()
    a, _ = pair.session()
    sb = pair.server.session()
    sb.begin()
    ce, _ = pair.pump()
    cb = of_type(ce, SessionBegun)[0].session
    assert cb is not a and cb.state is SessionState.BEGIN_RCVD
    cb.begin()
    pair.pump()
    assert sb.is_mapped and cb.is_mapped
    assert sb.remote_channel == cb.channel and cb.remote_channel == sb.channel


def test_session_begin_override_on_accept(pair: Pair) -> None:
    pair.open()
    cs = pair.client.session()
    cs.begin()
    _, se = pair.pump()
    ss = se[0].session
    ss.begin(incoming_window=7, handle_max=3, next_outgoing_id=100)
    pair.pump()
    begin = pair.performatives(S2C, tp=Begin)[0]
    assert (begin.incoming_window, begin.handle_max, begin.next_outgoing_id) == (7, 3, 100)
    assert cs.remote_incoming_window == 7 and cs.remote_handle_max == 3 and cs.next_incoming_id == 100


def accept_session(pair: Pair, **kw: object) -> tuple[Session, Session]:
    """Begin a client session; the server accepts with ``begin(**kw)``."""
    cs = pair.client.session()
    cs.begin()
    _, se = pair.pump()
    ss = of_type(se, SessionBegun)[-1].session
    ss.begin(**kw)  # type: ignore[arg-type]
    pair.pump()
    return cs, ss


def received(pair: Pair, link: object = None) -> list[bytes]:
    return [
        e.delivery.payload
        for e in pair.server_events + pair.client_events
        if isinstance(e, DeliveryReceived) and (link is None or e.link is link)
    ]


def test_transfers_stop_at_the_remote_incoming_window_and_resume_on_flow(pair: Pair) -> None:
    pair.open()
    cs, ss = accept_session(pair, incoming_window=4)
    assert cs.remote_incoming_window == 4
    snd, rcv = pair.link(credit=10, sessions=(cs, ss))
    for i in range(10):
        snd.send(b"m%d" % i)
    # only 4 transfers go out: the peer's window is then closed and the rest waits
    data, events = pair.client_to_server()
    assert len(pair.performatives(C2S, pair.mark() - 1, Transfer)) == 4
    assert cs.remote_incoming_window == 0 and snd.queued == 6
    assert len(of_type(events, DeliveryReceived)) == 4
    # the server re-opens its window with a session flow; the rest follows
    m = pair.mark()
    pair.pump()
    flows = pair.performatives(S2C, m, Flow)
    assert flows and flows[0].incoming_window == 4 and flows[0].next_incoming_id == 4
    assert received(pair, rcv) == [b"m%d" % i for i in range(10)]
    assert snd.queued == 0 and ss.next_incoming_id == cs.next_outgoing_id == 10


def test_a_multi_frame_delivery_waits_for_the_window_between_frames(chunk: int | None) -> None:
    pair = Pair(server=Connection("server", max_frame_size=512), chunk=chunk).open()
    cs, ss = accept_session(pair, incoming_window=2)
    snd, rcv = pair.link(credit=1, sessions=(cs, ss))
    payload = bytes(range(256)) * 8  # 2048 bytes: 5 frames of 512
    snd.send(payload)
    pair.client_to_server()
    assert len(pair.performatives(C2S, pair.mark() - 1, Transfer)) == 2
    assert snd.queued == 1
    pair.pump()
    assert received(pair, rcv) == [payload]
    transfers = pair.performatives(C2S, tp=Transfer)
    assert len(transfers) == 5 and [t.more for t in transfers] == [True] * 4 + [False]


def test_ids_wrap_around_2_to_the_32(pair: Pair) -> None:
    pair.open()
    start = U32 - 3
    cs = pair.client.session(next_outgoing_id=start)
    cs.begin()
    _, se = pair.pump()
    ss = se[0].session
    ss.begin(next_outgoing_id=U32 - 2)
    pair.pump()
    assert ss.next_incoming_id == start and cs.next_incoming_id == U32 - 2
    snd, rcv = pair.link(credit=10, sessions=(cs, ss))
    for i in range(6):
        snd.send(b"%d" % i)
    pair.pump()
    transfers = pair.performatives(C2S, tp=Transfer)
    assert [t.delivery_id for t in transfers] == [U32 - 3, U32 - 2, U32 - 1, 0, 1, 2]
    assert cs.next_outgoing_id == 3 and ss.next_incoming_id == 3
    # settling them all in order: one disposition whose range wraps
    m = pair.mark()
    for e in of_type(pair.server_events, DeliveryReceived):
        e.delivery.accept()
    ce, _ = pair.pump()
    disps = pair.performatives(S2C, m, Disposition)
    assert [(d.first, d.last, d.settled) for d in disps] == [(U32 - 3, 2, True)]
    assert all(e.delivery.remote_settled for e in ce)
    assert len(ce) == 6
    # the other way: the server's session ids wrap too
    back_rcv, back_snd = pair.link("back", client_role="receiver", credit=5, sessions=(cs, ss))
    for i in range(4):
        back_snd.send(b"b%d" % i)
    pair.pump()
    ids = [t.delivery_id for t in pair.performatives(S2C, tp=Transfer)]
    assert ids == [U32 - 2, U32 - 1, 0, 1]
    assert ss.next_outgoing_id == 2 and cs.next_incoming_id == 2


def test_flows_carry_the_session_state(pair: Pair) -> None:
    pair.open()
    cs, ss = pair.session()
    snd, rcv = pair.link(sessions=(cs, ss))
    for _ in range(3):
        snd.send(b"x")
    m = pair.mark()
    rcv.flow(3)
    pair.pump()
    flow = pair.performatives(S2C, m, Flow)[0]
    assert flow.next_incoming_id == 0 and flow.next_outgoing_id == ss.next_outgoing_id
    assert flow.incoming_window == ss.max_incoming_window
    m = pair.mark()
    rcv.flow(1)
    pair.pump()
    flow = pair.performatives(S2C, m, Flow)[0]
    assert flow.next_incoming_id == 3  # three transfers received


def test_a_peer_exceeding_our_incoming_window_ends_the_session(pair: Pair) -> None:
    pair.open()
    keep_c, keep_s = pair.session()
    keep_snd, keep_rcv = pair.link("keep", sessions=(keep_c, keep_s), credit=5)
    cs, ss = accept_session(pair, incoming_window=3)
    snd, rcv = pair.link("victim", sessions=(cs, ss), credit=100)
    # play a sender that ignores the window: 4 transfers in one go
    raw = b"".join(
        frame(cs.channel, Transfer(handle=snd.handle, delivery_id=i, delivery_tag=b"%d" % i, message_format=0, settled=True), b"x")
        for i in range(4)
    )
    m = pair.mark()
    events = pair.feed(pair.server, raw)
    assert names(events) == ["DeliveryReceived"] * 3 + ["SessionFailed"]
    assert events[-1].error.condition == ErrorCondition.WINDOW_VIOLATION
    pair.wire.append((C2S, raw))
    pair.pump()
    end = pair.performatives(S2C, m, End)[0]
    assert end.error.condition == ErrorCondition.WINDOW_VIOLATION
    # the other session keeps working
    keep_snd.send(b"still here")
    pair.pump()
    assert received(pair, keep_rcv) == [b"still here"]
    assert pair.client.is_open and pair.server.is_open and keep_s.is_mapped


def test_frames_after_our_end_with_error_are_discarded(pair: Pair) -> None:
    pair.open()
    cs, ss = pair.session()
    snd, rcv = pair.link(sessions=(cs, ss), credit=5)
    ss.end(Error(condition=ErrorCondition.INTERNAL_ERROR))
    pair.server.data_to_send()
    # frames the client had in flight arrive at the server and are dropped
    snd.send(b"in flight")
    data = pair.client.data_to_send()
    assert pair.feed(pair.server, data) == []
    assert pair.server.data_to_send() == b""
    assert ss.state is SessionState.DISCARDING


@pytest.mark.parametrize(
    "perf",
    [
        Flow(next_incoming_id=0, incoming_window=10, next_outgoing_id=0, outgoing_window=10, handle=7, delivery_count=0, link_credit=5),
        Transfer(handle=7, delivery_id=0, delivery_tag=b"t", message_format=0),
        Detach(handle=7),
    ],
    ids=["flow", "transfer", "detach"],
)
def test_unattached_handle_ends_the_session(perf: object, pair: Pair) -> None:
    pair.open()
    cs, ss = pair.session()
    m = pair.mark()
    events = pair.feed(pair.server, frame(cs.channel, perf))
    assert names(events) == ["SessionFailed"]
    assert events[0].error.condition == ErrorCondition.UNATTACHED_HANDLE
    pair.pump()
    assert pair.performatives(S2C, m, End)[0].error.condition == ErrorCondition.UNATTACHED_HANDLE
    assert pair.server.is_open and pair.client.is_open


def test_attach_on_a_handle_in_use_ends_the_session(pair: Pair) -> None:
    pair.open()
    cs, ss = pair.session()
    snd, rcv = pair.link(sessions=(cs, ss))
    again = Attach(name="other", handle=snd.handle, role=Role.SENDER, source=Source(), target=Target(), initial_delivery_count=0)
    events = pair.feed(pair.server, frame(cs.channel, again))
    assert names(events) == ["SessionFailed"]
    assert events[0].error.condition == ErrorCondition.HANDLE_IN_USE


def test_a_handle_beyond_handle_max_closes_the_connection(pair: Pair) -> None:
    pair.open()
    cs, ss = accept_session(pair, handle_max=1)
    bad = Attach(name="x", handle=2, role=Role.SENDER, source=Source(), target=Target(), initial_delivery_count=0)
    m = pair.mark()
    events = pair.feed(pair.server, frame(cs.channel, bad))
    assert names(events) == ["ConnectionFailed"]
    assert events[0].error.condition == ErrorCondition.FRAMING_ERROR  # §2.7.2 handle-max
    pair.pump()
    assert pair.performatives(S2C, m, Close)


def test_our_handles_stay_within_the_peers_handle_max(pair: Pair) -> None:
    pair.open()
    cs, ss = accept_session(pair, handle_max=1)
    a = cs.sender("a")
    a.attach()
    b = cs.sender("b")
    b.attach()
    assert (a.handle, b.handle) == (0, 1)
    out = pair.client.data_to_send()
    c = cs.sender("c")
    with pytest.raises(IllegalStateError):
        c.attach()
    assert c.state.name == "DETACHED" and c.handle is None
    assert pair.client.data_to_send() == b""
    pair.feed(pair.server, out)
    # a detached handle is free again, lowest first
    a.detach()
    pair.pump()
    c.attach()
    assert c.handle == 0


def test_frame_on_a_channel_without_a_session(pair: Pair) -> None:
    pair.open()
    events = pair.feed(pair.server, frame(4, End()))
    assert names(events) == ["ConnectionFailed"]
    assert events[0].error.condition == ErrorCondition.FRAMING_ERROR


def test_begin_on_a_channel_in_use(pair: Pair) -> None:
    pair.open()
    cs, ss = pair.session()
    events = pair.feed(pair.server, frame(cs.channel, Begin(next_outgoing_id=0, incoming_window=5, outgoing_window=5)))
    assert names(events) == ["ConnectionFailed"]


def test_session_echo_flow_is_answered(pair: Pair) -> None:
    pair.open()
    cs, ss = pair.session()
    m = pair.mark()
    pair.feed(pair.server, frame(cs.channel, Flow(next_incoming_id=0, incoming_window=9, next_outgoing_id=0, outgoing_window=9, echo=True)))
    pair.wire.append((S2C, pair.server.data_to_send()))
    flows = pair.performatives(S2C, m, Flow)
    assert len(flows) == 1 and flows[0].handle is None and not flows[0].echo
    assert ss.remote_incoming_window == 9


def test_ending_a_session_detaches_its_links(pair: Pair) -> None:
    pair.open()
    cs, ss = pair.session()
    snd, rcv = pair.link(sessions=(cs, ss))
    snd.send(b"unsettled")
    rcv.flow(1)
    pair.pump()
    cs.end()
    pair.pump()
    assert snd.state.name == "DETACHED" and rcv.state.name == "DETACHED"
    assert list(snd.unsettled) == [b"0"]  # kept, to resume the link elsewhere
    with pytest.raises(IllegalStateError):
        snd.send(b"more")
    with pytest.raises(IllegalStateError):
        rcv.flow(1)


def test_session_misuse_raises_and_changes_nothing(pair: Pair) -> None:
    pair.open()
    cs, ss = pair.session()
    with pytest.raises(IllegalStateError):
        cs.begin()
    assert cs.is_mapped and pair.client.data_to_send() == b""
    cs.end()
    pair.pump()
    for call in (cs.end, cs.begin, lambda: cs.sender("x").attach()):
        with pytest.raises(IllegalStateError):
            call()
        assert cs.state is SessionState.UNMAPPED and pair.client.data_to_send() == b""
    s = pair.client.session()
    with pytest.raises(IllegalStateError):
        s.begin(incoming_window=0)
    assert s.state is SessionState.UNMAPPED and pair.client.data_to_send() == b""


def test_end_received_while_the_connection_closes(pair: Pair) -> None:
    pair.open()
    cs, ss = pair.session()
    ss.end()
    pair.client.close()
    ce, se = pair.pump()
    assert pair.client.is_closed and pair.server.is_closed
    assert cs.state is SessionState.UNMAPPED and ss.state is SessionState.UNMAPPED
