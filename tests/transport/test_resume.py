"""Link resumption (Part 2 §2.6.13): unsettled maps and the reconciliation of each case.

Each test plays a second connection between the same containers that re-attaches
the link by name, resuming from the unsettled state each end kept: the sender's
deliveries (``resume_deliveries``) and the receiver's map (``unsettled``).
The case numbers are the delivery-tags of the spec's resume example.
"""

from __future__ import annotations

from typing import Any

import pytest

from amqp10.transport import (
    Connection,
    DeliveryAborted,
    DeliveryReceived,
    DeliveryUpdated,
    LinkAttached,
    Receiver,
    Sender,
)
from amqp10.transport.delivery import Delivery
from amqp10.types import (
    Accepted,
    Attach,
    Data,
    Disposition,
    Received,
    ReceiverSettleMode,
    Rejected,
    Released,
    Source,
    Target,
    TerminusDurability,
    Transfer,
    encode,
)

from .pair import C2S, S2C, Pair, frame, names, of_type

SOURCE = Source(address="orders", durable=TerminusDurability.UNSETTLED_STATE)
TARGET = Target(address="orders", durable=TerminusDurability.UNSETTLED_STATE)
TWO_SECTIONS = encode(Data(b"abc")) + encode(Data(b"defghij"))


def carried(tag: bytes, payload: bytes = b"message", state: Any = None) -> Delivery:
    """A delivery an earlier sender endpoint left unsettled (as a store would rebuild it)."""
    d = Delivery(Connection("earlier").session().sender("orders"), tag, payload)
    d.state = state
    return d


def resume(
    chunk: int | None,
    sender_deliveries: list[Delivery],
    receiver_map: dict[bytes, Any] | None,
    *,
    credit: int = 20,
    sender_kw: dict[str, Any] | None = None,
    receiver_kw: dict[str, Any] | None = None,
) -> tuple[Pair, Sender, Receiver]:
    """A new connection; the client resumes its sender, the server its receiver."""
    pair = Pair(Connection("container-a"), Connection("container-b"), chunk=chunk).open()
    pair.session()
    cs = pair.client.sessions[0]
    snd = cs.sender("durable-link", source=SOURCE, target=TARGET, resume_deliveries=sender_deliveries, **(sender_kw or {}))
    snd.attach()
    _, se = pair.pump()
    attached = of_type(se, LinkAttached)[0]
    assert attached.resumed
    rcv = attached.link
    for k, v in (receiver_kw or {}).items():
        setattr(rcv, k, v)
    rcv.attach(source=rcv.remote_source, target=TARGET, unsettled=receiver_map)
    rcv.flow(credit)
    pair.pump()
    return pair, snd, rcv


def transfers(pair: Pair) -> list[Transfer]:
    return pair.performatives(C2S, tp=Transfer)


def only(xs: list[Any]) -> Any:
    assert len(xs) == 1, xs
    return xs[0]


# -- the attach exchange -------------------------------------------------------------


def test_resuming_attaches_carry_the_unsettled_maps(chunk: int | None) -> None:
    pair, snd, rcv = resume(
        chunk,
        [carried(b"1"), carried(b"2", state=Received(section_number=0, section_offset=3))],
        {b"2": None, b"9": Accepted()},
    )
    sent = only(pair.performatives(C2S, tp=Attach))
    assert sent.unsettled == {b"1": None, b"2": Received(section_number=0, section_offset=3)}
    assert not sent.incomplete_unsettled
    answer = only(pair.performatives(S2C, tp=Attach))
    assert answer.unsettled == {b"2": None, b"9": Accepted()}


def test_resuming_with_nothing_unsettled_sends_an_empty_map(chunk: int | None) -> None:
    pair, snd, rcv = resume(chunk, [], {})
    assert only(pair.performatives(C2S, tp=Attach)).unsettled == {}
    assert only(pair.performatives(S2C, tp=Attach)).unsettled == {}
    snd.send(b"new")
    pair.pump()
    assert only(transfers(pair)).resume is False


# -- the cases ------------------------------------------------------------------------


@pytest.mark.parametrize("local", [None, Received(section_number=0, section_offset=2)], ids=["case1-null", "case5-received"])
def test_cases_1_and_5_unknown_to_the_receiver_are_resent_as_new(local: Any, chunk: int | None) -> None:
    pair, snd, rcv = resume(chunk, [carried(b"1", b"full message", local)], {})
    t = only(transfers(pair))
    assert t.delivery_tag == b"1" and not t.resume and not t.settled and t.state is None
    got = only(of_type(pair.server_events, DeliveryReceived)).delivery
    assert got.payload == b"full message" and not got.resumed
    got.accept()
    ce, _ = pair.pump()
    assert only(of_type(ce, DeliveryUpdated)).state == Accepted()


@pytest.mark.parametrize("remote", [None, Received(section_number=0, section_offset=0)], ids=["case4-null", "received-0-0"])
def test_case_4_resumed_from_the_start(remote: Any, chunk: int | None) -> None:
    pair, snd, rcv = resume(chunk, [carried(b"4", b"all of it")], {b"4": remote})
    t = only(transfers(pair))
    assert t.resume and t.delivery_tag == b"4" and t.state is None
    got = only(of_type(pair.server_events, DeliveryReceived)).delivery
    assert got.resumed and got.payload == b"all of it" and got.remote_state is None


def test_case_2_resumed_from_where_the_receiver_got_to(chunk: int | None) -> None:
    where = Received(section_number=1, section_offset=3)
    pair, snd, rcv = resume(chunk, [carried(b"2", TWO_SECTIONS)], {b"2": where})
    t = only(transfers(pair))
    assert t.resume and t.state == where
    got = only(of_type(pair.server_events, DeliveryReceived)).delivery
    section0 = len(encode(Data(b"abc")))
    assert got.resumed and got.payload == TWO_SECTIONS[section0 + 3 :]
    assert got.remote_state == where  # where the data starts
    got.accept()
    ce, _ = pair.pump()
    assert only(of_type(ce, DeliveryUpdated)).state == Accepted()
    assert not rcv.unsettled


def test_case_6_local_received_not_beyond_the_receivers(chunk: int | None) -> None:
    local, remote = Received(section_number=0, section_offset=1), Received(section_number=1, section_offset=0)
    pair, snd, rcv = resume(chunk, [carried(b"6", TWO_SECTIONS, local)], {b"6": remote})
    t = only(transfers(pair))
    assert t.resume and t.state == remote
    got = only(of_type(pair.server_events, DeliveryReceived)).delivery
    assert got.payload == encode(Data(b"defghij"))


@pytest.mark.parametrize(
    "local, remote",
    [
        (Received(section_number=1, section_offset=5), Received(section_number=0, section_offset=2)),  # 7
        (Received(section_number=1, section_offset=0), None),  # 9
        (Accepted(), Received(section_number=0, section_offset=4)),  # 11
        (Released(), None),  # 14
    ],
    ids=["case7", "case9", "case11", "case14"],
)
def test_cases_7_9_11_14_are_aborted(local: Any, remote: Any, chunk: int | None) -> None:
    d = carried(b"x", TWO_SECTIONS, local)
    pair, snd, rcv = resume(chunk, [d], {b"x": remote})
    t = only(transfers(pair))
    assert t.resume and t.aborted and t.delivery_tag == b"x"
    assert only(of_type(pair.client_events, DeliveryAborted)).delivery.tag == b"x"
    assert only(of_type(pair.server_events, DeliveryAborted)).delivery.tag == b"x"
    assert not snd.unsettled and not rcv.unsettled
    assert pair.frames(C2S)[-1].payload == b""


@pytest.mark.parametrize("local", [None, Received(section_number=0, section_offset=3)], ids=["case3-null", "case8-received"])
@pytest.mark.parametrize("outcome", [Accepted(), Rejected(), Released()])
def test_cases_3_and_8_the_receivers_outcome_stands(local: Any, outcome: Any, chunk: int | None) -> None:
    pair, snd, rcv = resume(chunk, [carried(b"3", b"payload", local)], {b"3": outcome})
    t = only(transfers(pair))
    assert t.resume and t.settled and t.state == outcome
    assert pair.frames(C2S)[-1].payload == b""  # no message data: only the settlement
    upd = only(of_type(pair.client_events, DeliveryUpdated))
    assert upd.state == outcome and upd.delivery.settled
    r = only(of_type(pair.server_events, DeliveryUpdated))
    assert r.settled and r.state == outcome and r.delivery.settled
    assert not of_type(pair.server_events, DeliveryReceived)
    assert not snd.unsettled and not rcv.unsettled


def test_case_10_terminal_at_the_sender_unknown_to_the_receiver(chunk: int | None) -> None:
    pair, snd, rcv = resume(chunk, [carried(b"10", b"p", Accepted())], {})
    assert transfers(pair) == []
    upd = only(of_type(pair.client_events, DeliveryUpdated))
    assert upd.settled and upd.delivery.settled and not snd.unsettled


def test_case_12_both_terminal_the_same(chunk: int | None) -> None:
    pair, snd, rcv = resume(chunk, [carried(b"12", b"p", Accepted())], {b"12": Accepted()})
    t = only(transfers(pair))
    assert t.resume and t.settled and t.state == Accepted()
    assert not snd.unsettled and not rcv.unsettled
    assert only(of_type(pair.server_events, DeliveryUpdated)).settled
    assert pair.performatives(S2C, tp=Disposition) == []


def test_case_13_different_outcomes_the_senders_wins(chunk: int | None) -> None:
    pair, snd, rcv = resume(chunk, [carried(b"13", b"p", Released())], {b"13": Accepted()})
    t = only(transfers(pair))
    assert t.resume and not t.settled and t.state == Released()
    # the receiver echoes the sender's outcome and settles
    disp = only(pair.performatives(S2C, tp=Disposition))
    assert disp.settled and disp.state == Released() and disp.role is True
    assert not rcv.unsettled
    upd = of_type(pair.client_events, DeliveryUpdated)
    assert upd[-1].settled and upd[-1].state == Released()
    upd[-1].delivery.settle()
    assert not snd.unsettled


def test_only_the_receiver_knows_it_considered_settled(chunk: int | None) -> None:
    pair, snd, rcv = resume(chunk, [], {b"gone": Accepted(), b"also": None})
    assert transfers(pair) == []
    upd = of_type(pair.server_events, DeliveryUpdated)
    assert {u.delivery.tag for u in upd} == {b"gone", b"also"} and all(u.settled for u in upd)
    assert not rcv.unsettled


def test_all_cases_at_once(chunk: int | None) -> None:
    rcv_state = Received(section_number=0, section_offset=2)
    pair, snd, rcv = resume(
        chunk,
        [
            carried(b"1"),
            carried(b"2", TWO_SECTIONS),
            carried(b"3"),
            carried(b"10", state=Accepted()),
            carried(b"12", state=Accepted()),
            carried(b"14", state=Accepted()),
        ],
        {b"2": rcv_state, b"3": Accepted(), b"12": Accepted(), b"14": None, b"20": None},
    )
    by_tag = {t.delivery_tag: t for t in transfers(pair)}
    assert set(by_tag) == {b"1", b"2", b"3", b"12", b"14"}
    assert not by_tag[b"1"].resume and by_tag[b"2"].resume and by_tag[b"14"].aborted
    assert by_tag[b"3"].settled and by_tag[b"12"].settled
    # in the order they were carried over
    assert [t.delivery_tag for t in transfers(pair)] == [b"1", b"2", b"3", b"12", b"14"]
    # the resumed deliveries came before anything new
    snd.send(b"new")
    pair.pump()
    assert transfers(pair)[-1].delivery_tag not in by_tag and not transfers(pair)[-1].resume


# -- the receiver's side of resumed transfers ------------------------------------------------


def test_resumed_transfers_unknown_to_the_receiver_are_ignored(chunk: int | None) -> None:
    pair, snd, rcv = resume(chunk, [], {b"known": None}, credit=5)
    cs = pair.client.sessions[0]
    raw = frame(cs.channel, Transfer(handle=snd.handle, delivery_id=0, delivery_tag=b"stranger", message_format=0, resume=True, more=True), b"1")
    raw += frame(cs.channel, Transfer(handle=snd.handle, more=False), b"2")
    events = pair.feed(pair.server, raw)
    assert events == []
    assert rcv.credit == 4  # it still took a unit of credit
    assert b"stranger" not in rcv.unsettled


def test_sender_sends_nothing_new_after_an_incomplete_map(chunk: int | None) -> None:
    pair, snd, rcv = resume(chunk, [carried(b"a")], {b"a": None}, receiver_kw={"incomplete_unsettled": True})
    assert only(pair.performatives(S2C, tp=Attach)).incomplete_unsettled
    assert only(transfers(pair)).resume
    snd.send(b"new")
    pair.pump()
    assert len(transfers(pair)) == 1 and snd.queued == 1


def test_sender_keeps_deliveries_absent_from_an_incomplete_map(chunk: int | None) -> None:
    pair, snd, rcv = resume(chunk, [carried(b"a"), carried(b"b")], {b"a": None}, receiver_kw={"incomplete_unsettled": True})
    assert only(transfers(pair)).delivery_tag == b"a"
    assert b"b" in snd.unsettled  # not resent, not settled: left for the next resumption


def test_receiver_with_an_incomplete_map_refuses_new_deliveries(chunk: int | None) -> None:
    pair, snd, rcv = resume(chunk, [], {b"a": None}, receiver_kw={"incomplete_unsettled": True})
    cs = pair.client.sessions[0]
    events = pair.feed(pair.server, frame(cs.channel, Transfer(handle=snd.handle, delivery_id=0, delivery_tag=b"n", message_format=0), b"x"))
    assert names(events) == ["LinkFailed"]


# -- end to end: a connection drops, a new one resumes ------------------------------------


def test_connection_drop_and_resume(chunk: int | None) -> None:
    first = Pair(Connection("container-a"), Connection("container-b"), chunk=chunk).open()
    first.session()
    # exactly-once: the receiver settles second (after the sender), so its outcomes survive
    snd, rcv = first.link("durable-link", source=SOURCE, target=TARGET, credit=2, rcv_settle_mode=ReceiverSettleMode.SECOND)
    for i in range(3):
        snd.send(b"message %d" % i)
    first.pump()  # two go out; the third waits for credit
    got = of_type(first.server_events, DeliveryReceived)
    assert [e.delivery.payload for e in got] == [b"message 0", b"message 1"]
    got[0].delivery.accept()
    first.pump()  # the sender learns of the first outcome (and does not settle yet)
    got[1].delivery.accept()  # ... this disposition is lost with the connection
    first.client.receive_data(b"")
    first.server.receive_data(b"")
    assert snd.state.name == "DETACHED" and rcv.state.name == "DETACHED"
    assert sorted(snd.unsettled) == [b"0", b"1", b"2"]
    assert sorted(rcv.unsettled) == [b"0", b"1"]

    second = Pair(Connection("container-a"), Connection("container-b"), chunk=chunk).open()
    second.session()
    cs = second.client.sessions[0]
    snd2 = cs.sender("durable-link", source=SOURCE, target=TARGET, resume_deliveries=snd.unsettled.values())
    snd2.attach()
    _, se = second.pump()
    rcv2 = of_type(se, LinkAttached)[0].link
    rcv2.attach(source=rcv2.remote_source, target=TARGET, resume_deliveries=rcv.unsettled.values())
    rcv2.flow(5)
    second.pump()
    sent = only(second.performatives(C2S, tp=Attach)).unsettled
    assert sent == {b"0": Accepted(), b"1": None, b"2": None}
    assert only(second.performatives(S2C, tp=Attach)).unsettled == {b"0": Accepted(), b"1": Accepted()}
    by_tag = {t.delivery_tag: t for t in transfers(second)}
    assert set(by_tag) == {b"0", b"1", b"2"}
    for tag in (b"0", b"1"):  # cases 12 and 3: settled with the outcome, no payload
        assert by_tag[tag].resume and by_tag[tag].settled and by_tag[tag].state == Accepted()
    assert not by_tag[b"2"].resume  # case 1: sent as new
    new = only(of_type(second.server_events, DeliveryReceived)).delivery
    assert new.payload == b"message 2"
    new.accept()
    ce, _ = second.pump()
    outcomes = {e.delivery.tag: e.state for e in second.client_events if isinstance(e, DeliveryUpdated)}
    assert outcomes == {b"0": Accepted(), b"1": Accepted(), b"2": Accepted()}
    assert sorted(snd2.unsettled) == [b"2"] and not rcv2.unsettled.keys() - {b"2"}
    # the application's context follows its deliveries to the new link
    assert all(d.link is snd2 for d in snd2.unsettled.values())


def test_plain_reattach_is_not_a_resume(chunk: int | None) -> None:
    pair = Pair(chunk=chunk)
    snd, rcv = pair.attached("plain")
    assert all(a.unsettled is None for a in pair.performatives(C2S, tp=Attach) + pair.performatives(S2C, tp=Attach))
    assert not of_type(pair.server_events, LinkAttached)[0].resumed


def test_a_later_reattach_of_a_resumed_link_carries_no_map(chunk: int | None) -> None:
    pair, snd, rcv = resume(chunk, [carried(b"a")], {b"a": None}, receiver_kw={"incomplete_unsettled": True})
    snd.send(b"held back")
    pair.pump()
    assert snd.queued == 1
    snd.detach()
    pair.pump()
    m = pair.mark()
    snd.attach()
    _, se = pair.pump()
    again = of_type(se, LinkAttached)[0]
    assert not again.resumed and only(pair.performatives(C2S, m, Attach)).unsettled is None
    again.link.attach(source=again.link.remote_source, target=TARGET)
    again.link.flow(1)
    pair.pump()
    # with complete maps again, new deliveries may go (§2.7.3 incomplete-unsettled)
    assert [e.delivery.payload for e in of_type(pair.server_events, DeliveryReceived) if e.link is again.link] == [b"held back"]


def test_resumed_deliveries_go_before_ones_sent_during_the_attach(chunk: int | None) -> None:
    pair = Pair(Connection("container-a"), Connection("container-b"), chunk=chunk).open()
    pair.session()
    cs = pair.client.sessions[0]
    snd = cs.sender("durable-link", source=SOURCE, target=TARGET, resume_deliveries=[carried(b"old")])
    snd.attach()
    snd.send(b"new", tag=b"new")  # queued while the attach is in flight
    _, se = pair.pump()
    rcv = of_type(se, LinkAttached)[0].link
    rcv.attach(source=rcv.remote_source, target=TARGET, unsettled={b"old": None})
    rcv.flow(5)
    pair.pump()
    assert [(t.delivery_tag, t.resume) for t in transfers(pair)] == [(b"old", True), (b"new", False)]
