"""Deliveries (Part 2 §2.6.12, §2.6.14): settlement modes, dispositions, outcomes, large and aborted messages."""

from __future__ import annotations

from typing import Any

import pytest

from amqp10.transport import (
    Connection,
    DeliveryAborted,
    DeliveryReceived,
    DeliveryUpdated,
    IllegalStateError,
)
from amqp10.types import (
    Accepted,
    Disposition,
    Error,
    ErrorCondition,
    Modified,
    ReceiverSettleMode,
    Rejected,
    Released,
    SenderSettleMode,
    Transfer,
    symbol,
)

from .pair import C2S, S2C, Pair, names, of_type

UNSETTLED, SETTLED, MIXED = SenderSettleMode.UNSETTLED, SenderSettleMode.SETTLED, SenderSettleMode.MIXED
FIRST, SECOND = ReceiverSettleMode.FIRST, ReceiverSettleMode.SECOND


def deliveries(events: list, tp: type = DeliveryReceived) -> list:  # type: ignore[type-arg]
    return [e.delivery for e in events if isinstance(e, tp)]


# -- settlement modes (§2.8.2, §2.8.3) --------------------------------------------------------


@pytest.mark.parametrize("snd_mode", [UNSETTLED, SETTLED, MIXED], ids=["snd-unsettled", "snd-settled", "snd-mixed"])
@pytest.mark.parametrize("rcv_mode", [FIRST, SECOND], ids=["rcv-first", "rcv-second"])
@pytest.mark.parametrize("client_role", ["sender", "receiver"])
def test_settlement_modes(snd_mode: int, rcv_mode: int, client_role: str, pair: Pair) -> None:
    pair.open()
    pair.session()
    cl, sl = pair.link("modes", client_role=client_role, snd_settle_mode=snd_mode, rcv_settle_mode=rcv_mode)
    snd, rcv = (cl, sl) if client_role == "sender" else (sl, cl)
    to_rcv, to_snd = (C2S, S2C) if client_role == "sender" else (S2C, C2S)
    # the peer honours the modes asked for by the attaching end (§2.7.3)
    assert snd.snd_settle_mode == rcv.effective_snd_settle_mode == snd_mode
    assert rcv.rcv_settle_mode == snd.effective_rcv_settle_mode == rcv_mode
    rcv.flow(1)
    pair.pump()
    sd = snd.send(b"payload")
    pair.pump()
    t = pair.performatives(to_rcv, tp=Transfer)[0]
    presettled = snd_mode == SETTLED
    assert bool(t.settled) is presettled
    rd = deliveries(pair.client_events + pair.server_events)[0]
    assert rd.remote_settled is presettled
    m = pair.mark()
    rd.accept()
    ev = pair.pump()
    if presettled:
        # at-most-once: nothing to say back (§2.6.12, figure 2.55)
        assert pair.performatives(to_snd, m) == []
        assert rd.settled and sd.settled and not rcv.unsettled and not snd.unsettled
        return
    disp = pair.performatives(to_snd, m, Disposition)
    assert len(disp) == 1 and disp[0].role is True and disp[0].state == Accepted()
    sender_events = ev[0] if client_role == "sender" else ev[1]
    upd = of_type(sender_events, DeliveryUpdated)
    assert upd and upd[0].delivery is sd and upd[0].state == Accepted()
    if rcv_mode == FIRST:
        assert disp[0].settled is True and rd.settled and not rcv.unsettled
        assert upd[0].settled and sd.remote_settled
        m = pair.mark()
        sd.settle()
        pair.pump()
        assert pair.performatives(to_rcv, m) == []  # the receiver already forgot it
    else:
        # second: the receiver's outcome goes unsettled; it settles once the sender has
        assert disp[0].settled is False and not rd.settled and b"0" in rcv.unsettled
        assert not upd[0].settled
        with pytest.raises(IllegalStateError):
            rd.accept()  # its settlement is already under way
        m = pair.mark()
        sd.settle()
        ev = pair.pump()
        back = pair.performatives(to_rcv, m, Disposition)
        assert len(back) == 1 and back[0].role is False and back[0].settled is True
        receiver_events = ev[1] if client_role == "sender" else ev[0]
        assert of_type(receiver_events, DeliveryUpdated)[0].settled
        assert rd.settled and not rcv.unsettled
        assert pair.performatives(to_snd, pair.mark() - 1) == []  # nothing more from the receiver
    assert sd.settled and not snd.unsettled


def test_mixed_mode_sends_both_kinds(pair: Pair) -> None:
    snd, rcv = pair.attached(credit=2)
    a = snd.send(b"a", settled=True)
    b = snd.send(b"b")
    pair.pump()
    assert [t.settled for t in pair.performatives(C2S, tp=Transfer)] == [True, False]
    assert a.settled and a.delivery_id is not None and b.tag in snd.unsettled and a.tag not in snd.unsettled


def test_sender_settling_first(pair: Pair) -> None:
    snd, rcv = pair.attached(credit=1)
    sd = snd.send(b"x")
    pair.pump()
    rd = deliveries(pair.server_events)[0]
    m = pair.mark()
    sd.settle(Released())  # e.g. the TTL expired at the sender
    _, se = pair.pump()
    disp = pair.performatives(C2S, m, Disposition)[0]
    assert disp.role is False and disp.settled and disp.state == Released()
    assert of_type(se, DeliveryUpdated)[0].settled and rd.remote_settled
    m = pair.mark()
    rd.settle()  # the sender has forgotten it: no disposition (§2.6.12, figure 2.54)
    pair.pump()
    assert pair.performatives(S2C, m) == []
    assert not rcv.unsettled and not snd.unsettled


def test_non_terminal_update(pair: Pair) -> None:
    from amqp10.types import Received

    snd, rcv = pair.attached(credit=1)
    sd = snd.send(b"x")
    pair.pump()
    rd = deliveries(pair.server_events)[0]
    rd.update(Received(section_number=1, section_offset=10))
    ce, _ = pair.pump()
    disp = pair.performatives(S2C, tp=Disposition)[0]
    assert not disp.settled and disp.state == Received(section_number=1, section_offset=10)
    assert sd.remote_state == Received(section_number=1, section_offset=10) and not sd.remote_settled


# -- dispositions: ranges and batching ---------------------------------------------------


def sent_and_received(pair: Pair, n: int) -> tuple[Any, Any, list[Any]]:
    """Attach with credit ``n``, send ``n`` deliveries in one batch: (sender, receiver,
    the receiver's deliveries)."""
    snd, rcv = pair.attached(credit=n)
    for i in range(n):
        snd.send(b"%d" % i)
    pair.client_to_server()
    got = deliveries(pair.server_events)
    assert len(got) == n and rcv.credit == 0
    return snd, rcv, got


def test_settling_a_hundred_in_a_row_is_one_disposition(pair: Pair) -> None:
    snd, rcv, got = sent_and_received(pair, 100)
    m = pair.mark()
    for d in got:
        d.accept()
    ce, _ = pair.pump()
    disp = pair.performatives(S2C, m, Disposition)
    assert [(d.first, d.last, d.settled, d.state) for d in disp] == [(0, 99, True, Accepted())]
    assert len(of_type(ce, DeliveryUpdated)) == 100
    assert all(d.remote_settled for d in snd.unsettled.values())


def test_different_outcomes_split_the_ranges(pair: Pair) -> None:
    snd, rcv, got = sent_and_received(pair, 10)
    m = pair.mark()
    for i, d in enumerate(got):
        d.reject() if i == 4 else d.accept()
    pair.pump()
    disp = pair.performatives(S2C, m, Disposition)
    assert [(d.first, d.last) for d in disp] == [(0, 3), (4, None), (5, 9)]
    assert disp[1].state == Rejected()


def test_dispositions_flush_before_later_frames(pair: Pair) -> None:
    snd, rcv = pair.attached(credit=3)
    for i in range(3):
        snd.send(b"%d" % i)
    pair.pump()
    got = deliveries(pair.server_events)
    m = pair.mark()
    got[0].accept()
    rcv.flow(5)
    pair.pump()
    kinds = [type(p).__name__ for p in pair.performatives(S2C, m)]
    assert kinds == ["Disposition", "Flow"]


def test_a_batch_settled_with_credit_topped_up_twice_is_two_frames(pair: Pair) -> None:
    # a consumer that settles a read's deliveries one by one and tops its credit up
    # twice on the way (as bench/scale_bench.py's does): the flows are written with the
    # output, after the dispositions - one range and one flow, where a flow written at
    # once split the range (Disposition, Flow, Disposition: one frame more for the peer
    # to read on every round trip)
    snd, rcv, got = sent_and_received(pair, 10)
    m = pair.mark()
    for i, d in enumerate(got):
        d.accept()
        if i in (0, 5):
            rcv.flow(10, echo=i == 0)
    pair.pump()
    perfs = pair.performatives(S2C, m)
    assert [type(p).__name__ for p in perfs] == ["Disposition", "Flow"]
    assert (perfs[0].first, perfs[0].last) == (0, 9)
    assert (perfs[1].delivery_count, perfs[1].link_credit, perfs[1].echo) == (10, 10, True)
    assert snd.credit == 10


def test_a_pending_flow_goes_before_a_later_frame_of_its_session(pair: Pair) -> None:
    snd, rcv = pair.attached(credit=1)
    m = pair.mark()
    rcv.flow(3)
    rcv.detach(closed=True)
    pair.pump()
    assert [type(p).__name__ for p in pair.performatives(S2C, m)] == ["Flow", "Detach"]


def test_incoming_disposition_with_a_range(pair: Pair) -> None:
    snd, rcv = pair.attached(credit=5)
    sent = [snd.send(b"%d" % i) for i in range(5)]
    pair.pump()
    from .pair import frame

    d = Disposition(role=True, first=1, last=3, settled=True, state=Accepted())
    events = pair.feed(pair.client, frame(0, d))
    assert [e.delivery for e in events] == sent[1:4]
    assert [s.remote_settled for s in sent] == [False, True, True, True, False]
    # a wide range (ids we never used): only what we hold is touched, quickly
    events = pair.feed(pair.client, frame(0, Disposition(role=True, first=0, last=2**32 - 1, state=Released())))
    assert {e.delivery.tag for e in events} == {b"0", b"4"}


# -- outcomes (Part 3 §3.4) --------------------------------------------------------------


@pytest.mark.parametrize(
    "settle, expected",
    [
        (lambda d: d.accept(), Accepted()),
        (lambda d: d.reject(Error(condition=ErrorCondition.DECODE_ERROR, description="bad body", info={"k": 1})),
         Rejected(error=Error(condition=ErrorCondition.DECODE_ERROR, description="bad body", info={"k": 1}))),
        (lambda d: d.release(), Released()),
        (lambda d: d.modify(delivery_failed=True, undeliverable_here=True, message_annotations={symbol("x-opt-why"): "later"}),
         Modified(delivery_failed=True, undeliverable_here=True, message_annotations={symbol("x-opt-why"): "later"})),
        (lambda d: d.modify(), Modified()),
    ],
    ids=["accepted", "rejected", "released", "modified", "modified-empty"],
)
def test_outcomes_reach_the_sender(settle, expected, pair: Pair) -> None:  # type: ignore[no-untyped-def]
    snd, rcv = pair.attached(credit=1)
    sd = snd.send(b"x")
    pair.pump()
    settle(deliveries(pair.server_events)[0])
    ce, _ = pair.pump()
    assert pair.performatives(S2C, tp=Disposition)[0].state == expected
    upd = of_type(ce, DeliveryUpdated)[0]
    assert upd.state == expected and sd.remote_state == expected and upd.settled


def test_delivery_misuse_raises_and_changes_nothing(pair: Pair) -> None:
    snd, rcv = pair.attached(credit=1)
    queued = snd.send(b"x" * 10)
    snd2_queued = snd.send(b"waits")  # no credit for this one
    pair.pump()
    with pytest.raises(IllegalStateError):
        snd2_queued.settle(Accepted())  # not sent yet: abort() it instead
    assert snd2_queued.state is None and not snd2_queued.settled
    rd = deliveries(pair.server_events)[0]
    rd.accept()
    pair.pump()
    for call in (rd.accept, rd.release, lambda: rd.update(Accepted()), rd.abort):
        with pytest.raises(IllegalStateError):
            call()
        assert pair.server.data_to_send() == b""
    with pytest.raises(IllegalStateError):
        queued.abort()  # fully sent
    assert not queued.aborted
    queued.settle()
    with pytest.raises(IllegalStateError):
        queued.settle()
    assert pair.client.data_to_send() == b""


# -- large messages (§2.6.14) ------------------------------------------------------------

MAX = 512


def _sizes_near_frame_edges() -> list[int]:
    """Message sizes around where a delivery needs one more frame (0 to 3 frames' worth)."""
    pair = Pair(server=Connection("server", max_frame_size=MAX))
    snd, rcv = pair.attached(credit=5000)
    counts = {}
    for size in range(0, 3 * MAX + 64):
        m = pair.mark()
        snd.send(b"\xab" * size, tag=b"t", settled=True)
        pair.client_to_server()
        counts[size] = len(pair.performatives(C2S, m, Transfer))
    edges = [s for s in range(1, len(counts)) if counts[s] != counts[s - 1]]
    assert len(edges) >= 3
    return sorted({s + d for s in [0, *edges] for d in (-2, -1, 0, 1, 2) if s + d >= 0})


EDGES = _sizes_near_frame_edges()


def test_every_size_up_to_three_frames_is_split_and_reassembled() -> None:
    pair = Pair(server=Connection("server", max_frame_size=MAX))
    snd, rcv = pair.attached(credit=5000)
    sizes = range(0, 3 * MAX + 64)
    for size in sizes:
        snd.send(bytes((size + i) % 256 for i in range(size)), settled=True)
    pair.pump()
    got = deliveries(pair.server_events)
    assert [d.payload for d in got] == [bytes((s + i) % 256 for i in range(s)) for s in sizes]
    frames = [f for f in pair.frames(C2S) if type(f.performative) is Transfer]
    assert all(f.size <= MAX for f in frames)
    # every frame but a delivery's last is full: the split wastes nothing
    for f in frames:
        if f.performative.more:
            assert f.size == MAX


@pytest.mark.parametrize("size", EDGES)
def test_sizes_at_frame_edges(size: int, chunk: int | None) -> None:
    pair = Pair(server=Connection("server", max_frame_size=MAX), chunk=chunk)
    snd, rcv = pair.attached(credit=1)
    payload = bytes(i % 253 for i in range(size))
    snd.send(payload, tag=b"t")
    _, se = pair.pump()
    got = deliveries(se)
    assert len(got) == 1 and got[0].payload == payload and got[0].size == size
    transfers = [f for f in pair.frames(C2S) if type(f.performative) is Transfer]
    assert all(f.size <= MAX for f in transfers)
    assert [t.performative.more for t in transfers] == [True] * (len(transfers) - 1) + [False]
    assert transfers[0].performative.delivery_id == 0 and transfers[0].performative.delivery_tag == b"t"
    assert all(t.performative.delivery_tag is None for t in transfers[1:])
    assert snd.delivery_count == rcv.delivery_count == 1  # one delivery, however many frames


def test_interleaved_large_messages_on_two_links(pair: Pair) -> None:
    pair.server = Connection("server", max_frame_size=MAX)
    pair.open()
    pair.session()
    a, ra = pair.link("a", credit=1)
    b, rb = pair.link("b", credit=1)
    big_a, big_b = b"A" * 2000, b"B" * 2000
    a.send(big_a)
    b.send(big_b)
    pair.pump()
    assert [d.payload for d in deliveries(pair.server_events)] in ([big_a, big_b], [big_b, big_a])


# -- aborted deliveries (§2.6.14) --------------------------------------------------------


def test_abort_mid_delivery(chunk: int | None) -> None:
    pair = Pair(server=Connection("server", max_frame_size=MAX), chunk=chunk).open()
    cs = pair.client.session()
    cs.begin()
    _, se = pair.pump()
    ss = se[0].session
    ss.begin(incoming_window=2)
    pair.pump()
    snd, rcv = pair.link(sessions=(cs, ss), credit=2)
    d = snd.send(b"z" * 3000)  # 7 frames; 2 go out, then the window closes
    pair.client_to_server()
    assert len(pair.performatives(C2S, pair.mark() - 1, Transfer)) == 2
    d.abort()
    assert d.aborted and d.settled and d.tag not in snd.unsettled
    after = snd.send(b"next one")
    m = pair.mark()
    _, se = pair.pump()
    transfers = pair.performatives(C2S, m, Transfer)
    assert transfers[0].aborted and not transfers[0].more and transfers[0].handle == snd.handle
    assert names(se) == ["DeliveryAborted", "DeliveryReceived"]
    aborted = se[0].delivery
    assert aborted.aborted and aborted.payload == b"" and aborted.tag not in rcv.unsettled
    assert se[1].delivery.payload == b"next one" and after.delivery_id == 1
    # two deliveries, two units of credit; the aborted one counted
    assert snd.delivery_count == rcv.delivery_count == 2


def test_abort_before_anything_was_sent(pair: Pair) -> None:
    snd, rcv = pair.attached()
    d = snd.send(b"never")
    d.abort()
    rcv.flow(1)
    pair.pump()
    assert pair.performatives(C2S, tp=Transfer) == []
    assert snd.credit == 1 and snd.delivery_count == 0 and not snd.unsettled and snd.queued == 0
    assert not of_type(pair.server_events, DeliveryAborted)


def test_receiver_gets_an_aborted_first_frame(pair: Pair) -> None:
    from .pair import frame

    snd, rcv = pair.attached(credit=2)
    events = pair.feed(pair.server, frame(0, Transfer(handle=0, delivery_id=0, delivery_tag=b"a", message_format=0, more=True), b"partial"))
    assert events == []
    events = pair.feed(pair.server, frame(0, Transfer(handle=0, aborted=True), b"ignored"))
    assert names(events) == ["DeliveryAborted"] and not rcv.unsettled
    events = pair.feed(pair.server, frame(0, Transfer(handle=0, delivery_id=1, delivery_tag=b"b", message_format=0, aborted=True, more=True)))
    assert names(events) == ["DeliveryAborted"]
    assert rcv.credit == 0


def test_continuation_with_another_delivery_id_is_refused(pair: Pair) -> None:
    from .pair import frame

    snd, rcv = pair.attached(credit=2)
    pair.feed(pair.server, frame(0, Transfer(handle=0, delivery_id=0, delivery_tag=b"a", message_format=0, more=True), b"1"))
    events = pair.feed(pair.server, frame(0, Transfer(handle=0, delivery_id=5), b"2"))
    assert names(events) == ["LinkFailed"] and events[0].error.condition == ErrorCondition.INVALID_FIELD
