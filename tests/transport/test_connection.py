"""Connections (Part 2 §2.2-§2.4): headers, open, limits, idle timeout, close, EOF."""

from __future__ import annotations

import pytest

from amqp10.transport import (
    Connection,
    ConnectionClosed,
    ConnectionFailed,
    ConnectionOpened,
    ConnectionState,
    IllegalStateError,
    LinkAttached,
    SessionBegun,
)
from amqp10.transport.framing import AMQP_HEADER, SASL_HEADER, TLS_HEADER
from amqp10.types import Begin, Close, Error, ErrorCondition, Open, Source, Target

from .pair import C2S, S2C, Pair, decode_frames, empty_frame, frame, names, of_type

S = ConnectionState


def test_header_exchange_and_open(pair: Pair) -> None:
    pair.client.open()
    ce, se = pair.pump()
    assert names(se) == ["ConnectionOpened"]
    assert pair.server.state is S.OPEN_RCVD and pair.client.state is S.OPEN_SENT
    pair.server.open()
    ce2, _ = pair.pump()
    assert names(ce + ce2) == ["ConnectionOpened"]
    assert pair.client.state is S.OPENED and pair.server.state is S.OPENED
    # each direction starts with the AMQP 1.0.0 header, then the open on channel 0
    for direction in (C2S, S2C):
        first = next(data for d, data in pair.wire if d == direction)
        assert first.startswith(AMQP_HEADER)
        frames = pair.frames(direction)
        assert type(frames[0].performative) is Open and frames[0].channel == 0
    assert pair.server.remote_open is not None and pair.server.remote_open.container_id == "client"


def test_server_waits_for_the_header_before_sending_its_own(chunk: int | None) -> None:
    pair = Pair(server=Connection("server", send_header=False), chunk=chunk)
    assert pair.server.data_to_send() == b""
    assert pair.server.state is S.START
    pair.feed(pair.server, pair.client.data_to_send())
    assert pair.server.state is S.HDR_EXCH
    assert pair.server.data_to_send() == AMQP_HEADER


@pytest.mark.parametrize(
    "header",
    [
        b"AMQP\x00\x01\x00\x01",  # a later revision
        b"AMQP\x00\x01\x01\x00",  # a later minor version
        SASL_HEADER,
        TLS_HEADER,
        b"HTTP/1.1 200 OK\r\n",
        b"\x00\x00\x00\x00\x00\x00\x00\x00",
    ],
    ids=["revision", "minor", "sasl", "tls", "http", "zeros"],
)
def test_version_negotiation_refuses_other_headers(header: bytes, chunk: int | None) -> None:
    pair = Pair(server=Connection("server", send_header=False), chunk=chunk)
    events = pair.feed(pair.server, header)
    assert names(events) == ["ConnectionFailed"]
    # §2.2: we answer with the header we speak and nothing else, then the stream ends
    assert pair.server.data_to_send() == AMQP_HEADER
    assert pair.server.state is S.END and pair.server.is_closed
    assert pair.server.receive_data(b"more bytes") == []
    assert pair.server.data_to_send() == b""


def test_client_gets_a_header_it_does_not_speak(chunk: int | None) -> None:
    pair = Pair(chunk=chunk)
    pair.client.open()
    pair.client.data_to_send()
    events = pair.feed(pair.client, SASL_HEADER)
    assert names(events) == ["ConnectionFailed"]
    assert pair.client.state is S.END
    assert pair.client.data_to_send() == b""  # no close: no AMQP connection ever existed


def test_pipelined_open_begin_attach_in_one_write(chunk: int | None) -> None:
    pair = Pair(server=Connection("server", send_header=False), chunk=chunk)
    c = pair.client
    c.open()
    assert c.state is S.OPEN_PIPE  # open sent before the peer's header arrived
    cs = c.session()
    cs.begin()
    snd = cs.sender("pipelined", source=Source(address="a"), target=Target(address="q"))
    snd.attach()
    data = c.data_to_send()
    assert data.startswith(AMQP_HEADER)
    assert [type(f.performative).__name__ for f in decode_frames(data)] == ["Open", "Begin", "Attach"]
    events = pair.feed(pair.server, data)
    assert names(events) == ["ConnectionOpened", "SessionBegun", "LinkAttached"]
    pair.wire.append((C2S, data))
    pair.server.open()
    of_type(events, SessionBegun)[0].session.begin()
    link = of_type(events, LinkAttached)[0].link
    link.attach(source=link.remote_source, target=link.remote_target)
    link.flow(1)
    pair.pump()
    assert c.is_open and cs.is_mapped and snd.is_attached and snd.credit == 1


def test_simultaneous_open(pair: Pair) -> None:
    pair.client.open()
    pair.server.open()
    ce, se = pair.pump()
    assert names(ce) == names(se) == ["ConnectionOpened"]
    assert pair.client.is_open and pair.server.is_open


def test_limits_are_negotiated(chunk: int | None) -> None:
    client = Connection("client", max_frame_size=1024, channel_max=7, idle_timeout=30)
    server = Connection("server", max_frame_size=4096, channel_max=3, idle_timeout=10)
    pair = Pair(client, server, chunk=chunk).open()
    assert client.remote_max_frame_size == 4096 and server.remote_max_frame_size == 1024
    assert client.remote_channel_max == 3 and server.remote_channel_max == 7
    # §2.4.5: each advertises half the idle timeout it enforces
    assert client.remote_idle_timeout == 5 and server.remote_idle_timeout == 15
    sent = pair.performatives(C2S, tp=Open)[0]
    assert (sent.max_frame_size, sent.channel_max, sent.idle_time_out) == (1024, 7, 15000)


@pytest.mark.parametrize("peer_max", [512, 1000, 4096])
def test_frames_never_exceed_the_peers_max_frame_size(peer_max: int, chunk: int | None) -> None:
    pair = Pair(server=Connection("server", max_frame_size=peer_max), chunk=chunk)
    snd, rcv = pair.attached(credit=10)
    for size in (0, peer_max - 40, peer_max, 3 * peer_max + 7):
        snd.send(bytes(size % 251 for _ in range(size)))
    pair.pump()
    assert all(f.size <= peer_max for f in pair.frames(C2S))
    got = [e.delivery.size for e in pair.server_events if type(e).__name__ == "DeliveryReceived"]
    assert got == [0, peer_max - 40, peer_max, 3 * peer_max + 7]


def test_before_the_peers_open_frames_stay_within_512_bytes() -> None:
    client = Connection("client")
    client.open()
    s = client.session()
    s.begin()
    assert client.remote_max_frame_size == 512
    before = client.data_to_send()
    big = s.sender("big", properties={"padding": "x" * 600})
    with pytest.raises(IllegalStateError):
        big.attach()
    assert big.handle is None and big.state.name == "DETACHED" and not s.links
    assert client.data_to_send() == b""
    assert all(f.size <= 512 for f in decode_frames(before))


def test_channel_max_bounds_our_sessions(pair: Pair) -> None:
    pair.server = Connection("server", channel_max=1)
    pair.open()
    assert [pair.client.session().channel for _ in range(2)] == [0, 1]
    out = pair.client.data_to_send()
    with pytest.raises(IllegalStateError):
        pair.client.session()
    assert pair.client.data_to_send() == out == b""


def test_before_the_peers_open_only_channel_0() -> None:
    client = Connection("client")
    client.open()
    assert client.session().channel == 0
    with pytest.raises(IllegalStateError):
        client.session()


def test_peer_begin_beyond_our_channel_max_is_a_framing_error(pair: Pair) -> None:
    pair.server = Connection("server", channel_max=2)
    pair.open()
    m = pair.mark()
    events = pair.feed(pair.server, frame(3, Begin(next_outgoing_id=0, incoming_window=10, outgoing_window=10)))
    assert names(events) == ["ConnectionFailed"]
    assert events[0].error.condition == ErrorCondition.FRAMING_ERROR
    pair.pump()
    close = pair.performatives(S2C, m, Close)[0]
    assert close.error.condition == ErrorCondition.FRAMING_ERROR


def test_channels_are_reused_lowest_first(pair: Pair) -> None:
    pair.open()
    (a, _), (b, _), (c, _) = pair.session(), pair.session(), pair.session()
    assert [a.channel, b.channel, c.channel] == [0, 1, 2]
    b.end()
    pair.pump()
    assert pair.client.session().channel == 1


def test_heartbeats_at_half_the_peers_idle_timeout(pair: Pair) -> None:
    pair.client = Connection("client", idle_timeout=20)  # it advertises 10
    pair.open()
    srv = pair.server
    assert srv.tick(100.0) == 105.0
    assert srv.tick(104.9) == 105.0
    assert srv.data_to_send() == b""
    assert srv.tick(105.0) == 110.0
    beat = srv.data_to_send()
    assert beat == empty_frame(0)
    assert [f.performative for f in decode_frames(beat)] == [None]
    # the empty frame counts as traffic: the client's idle timer restarts
    assert pair.feed(pair.client, beat) == []
    # output of our own resets the heartbeat timer: no empty frame is needed
    srv.session().begin()
    assert srv.data_to_send()
    assert srv.tick(107.0) == 112.0
    assert srv.tick(111.0) == 112.0 and srv.data_to_send() == b""
    # never after our close (§2.4.5)
    srv.close()
    srv.data_to_send()
    assert srv.tick(200.0) is None and srv.tick(300.0) is None
    assert srv.data_to_send() == b""


def test_no_heartbeats_without_a_peer_idle_timeout(pair: Pair) -> None:
    pair.open()
    assert pair.server.tick(0.0) is None
    assert pair.server.tick(1e9) is None
    assert pair.server.data_to_send() == b""


def test_we_advertise_half_the_idle_timeout_we_enforce(pair: Pair) -> None:
    """§2.4.5: the open's idle-time-out is half the threshold, so a peer that beats at half
    of what it was told (every 0.5 s here) may be nearly four intervals late."""
    pair.client = c = Connection("client", idle_timeout=2)
    pair.open()
    assert pair.server.remote_idle_timeout == 1.0
    c.tick(0.0)
    for now in (1.9, 3.8, 5.7):  # beats 1.9 s apart
        assert pair.feed(c, empty_frame(0)) == []
        c.tick(now)
        assert c.poll_events() == [] and c.is_open
    c.tick(7.7)  # silent for 2 s: closed
    assert names(c.poll_events()) == ["ConnectionFailed"]


def test_idle_timeout_closes_a_silent_peer(pair: Pair) -> None:
    pair.client = Connection("client", idle_timeout=2)
    pair.open()
    c = pair.client
    assert c.tick(0.0) == 2.0
    assert c.tick(1.9) == 2.0
    assert c.poll_events() == []
    assert c.tick(2.0) == 4.0  # now waiting for the peer to answer our close
    failed = c.poll_events()
    assert names(failed) == ["ConnectionFailed"]
    assert failed[0].error.condition == ErrorCondition.RESOURCE_LIMIT_EXCEEDED
    assert c.state is S.DISCARDING
    m = pair.mark()
    _, se = pair.pump()
    assert pair.performatives(C2S, m, Close)[0].error.condition == ErrorCondition.RESOURCE_LIMIT_EXCEEDED
    assert names(se) == ["ConnectionClosed"]
    assert c.state is S.END and pair.server.state is S.END


def test_idle_timeout_gives_up_on_a_peer_that_never_answers_the_close(pair: Pair) -> None:
    pair.client = c = Connection("client", idle_timeout=1)
    pair.open()
    c.tick(0.0)
    c.tick(1.0)
    assert names(c.poll_events()) == ["ConnectionFailed"]
    assert c.state is not S.END
    assert c.tick(1.5) == 2.0
    assert c.tick(2.0) is None
    assert c.state is S.END and c.poll_events() == []


def test_traffic_keeps_the_idle_timer_alive(pair: Pair) -> None:
    pair.client = Connection("client", idle_timeout=2)
    pair.open()
    c, srv = pair.client, pair.server
    now = 0.0
    for _ in range(10):
        c.tick(now)
        srv.tick(now)
        pair.pump()
        now += 1.0
    assert c.state is S.OPENED and c.poll_events() == []


def test_close_without_error(pair: Pair) -> None:
    pair.open()
    pair.client.close()
    assert pair.client.state is S.CLOSE_SENT
    ce, se = pair.pump()
    assert names(se) == ["ConnectionClosed"] and se[0].error is None
    assert names(ce) == ["ConnectionClosed"]
    assert pair.client.state is S.END and pair.server.state is S.END
    assert [type(p).__name__ for p in pair.performatives(C2S)][-1] == "Close"
    assert [type(p).__name__ for p in pair.performatives(S2C)][-1] == "Close"


def test_close_with_error_discards_until_the_peers_close(pair: Pair) -> None:
    pair.open()
    err = Error(condition=ErrorCondition.NOT_ALLOWED, description="go away")
    pair.client.close(err)
    assert pair.client.state is S.DISCARDING
    # frames arriving before the peer's close are discarded silently
    events = pair.feed(pair.client, frame(0, Begin(next_outgoing_id=0, incoming_window=5, outgoing_window=5)))
    assert events == []
    ce, se = pair.pump()
    assert names(se) == ["ConnectionClosed"] and se[0].error == err
    assert pair.client.state is S.END


def test_simultaneous_close(pair: Pair) -> None:
    pair.open()
    pair.client.close()
    pair.server.close(Error(condition=ErrorCondition.CONNECTION_FORCED, description="shutdown"))
    ce, se = pair.pump()
    assert names(ce) == names(se) == ["ConnectionClosed"]
    assert ce[0].error.condition == ErrorCondition.CONNECTION_FORCED
    assert pair.client.is_closed and pair.server.is_closed
    assert len(pair.performatives(C2S, tp=Close)) == len(pair.performatives(S2C, tp=Close)) == 1


def test_close_before_the_peers_open_sends_open_then_close(pair: Pair) -> None:
    pair.client.close()
    assert pair.client.state is S.OC_PIPE
    ce, se = pair.pump()
    assert [type(p).__name__ for p in pair.performatives(C2S)] == ["Open", "Close"]
    assert names(se) == ["ConnectionOpened", "ConnectionClosed"]
    assert pair.client.is_closed and pair.server.is_closed


def test_eof_without_close_fails_the_connection(pair: Pair) -> None:
    pair.open()
    cs, _ = pair.session()
    events = pair.client.receive_data(b"")
    assert names(events) == ["ConnectionFailed"]
    assert events[0].error.condition == ErrorCondition.CONNECTION_FORCED
    assert pair.client.state is S.END and pair.client.data_to_send() == b""
    assert cs.state.name == "UNMAPPED"
    assert pair.client.receive_data(b"") == []


def test_eof_after_our_close_just_ends(pair: Pair) -> None:
    pair.open()
    pair.client.close()
    pair.client.data_to_send()
    assert pair.client.receive_data(b"") == []
    assert pair.client.state is S.END


def test_frames_after_the_end_are_ignored(pair: Pair) -> None:
    pair.open()
    pair.client.close()
    pair.pump()
    assert pair.client.is_closed
    junk = frame(0, Begin(next_outgoing_id=0, incoming_window=5, outgoing_window=5)) + b"\xff" * 50
    assert pair.feed(pair.client, junk) == []
    assert pair.client.data_to_send() == b""


def test_oversized_frame_is_refused_before_it_is_buffered(pair: Pair) -> None:
    pair.server = Connection("server", max_frame_size=1024)
    pair.open()
    m = pair.mark()
    header = (100_000).to_bytes(4, "big") + b"\x02\x00\x00\x00"
    events = pair.feed(pair.server, header)  # only the frame header arrives
    assert names(events) == ["ConnectionFailed"]
    assert events[0].error.condition == ErrorCondition.FRAMING_ERROR
    assert len(pair.server._inbuf) == 0
    assert pair.feed(pair.server, b"\x00" * 5000) == []  # the rest of it is never read
    pair.pump()
    assert pair.performatives(S2C, m, Close)[0].error.condition == ErrorCondition.FRAMING_ERROR


@pytest.mark.parametrize(
    "data, condition",
    [
        (b"\x00\x00\x00\x07\x02\x00\x00\x00", ErrorCondition.FRAMING_ERROR),  # size < 8
        (b"\x00\x00\x00\x10\x01\x00\x00\x00" + b"\x00" * 8, ErrorCondition.FRAMING_ERROR),  # doff < 2
        (b"\x00\x00\x00\x0c\x02\x01\x00\x00\x00\x53\x40\x45", ErrorCondition.FRAMING_ERROR),  # SASL frame
        (b"\x00\x00\x00\x0c\x02\x00\x00\x00\xff\xff\xff\xff", ErrorCondition.DECODE_ERROR),
        (b"\x00\x00\x00\x0b\x02\x00\x00\x00\x00\x53\x99", ErrorCondition.DECODE_ERROR),
    ],
    ids=["short", "doff", "sasl-type", "junk", "unknown-descriptor"],
)
def test_bad_frames_close_the_connection(data: bytes, condition: ErrorCondition, pair: Pair) -> None:
    pair.open()
    m = pair.mark()
    events = pair.feed(pair.server, data)
    assert names(events) == ["ConnectionFailed"]
    assert events[0].error.condition == condition
    pair.pump()
    assert pair.performatives(S2C, m, Close)[0].error.condition == condition


def test_a_frame_before_open_is_an_error(chunk: int | None) -> None:
    pair = Pair(chunk=chunk)
    pair.server.data_to_send()
    data = AMQP_HEADER + frame(0, Begin(next_outgoing_id=0, incoming_window=5, outgoing_window=5))
    events = pair.feed(pair.server, data)
    assert names(events) == ["ConnectionFailed"]
    assert [type(f.performative).__name__ for f in decode_frames(pair.server.data_to_send())] == ["Open", "Close"]


def test_second_open_is_an_error(pair: Pair) -> None:
    pair.open()
    events = pair.feed(pair.server, frame(0, Open(container_id="again")))
    assert names(events) == ["ConnectionFailed"]
    assert events[0].error.condition == ErrorCondition.ILLEGAL_STATE


def test_open_with_a_max_frame_size_below_512_is_refused(chunk: int | None) -> None:
    pair = Pair(chunk=chunk)
    pair.server.data_to_send()
    events = pair.feed(pair.server, AMQP_HEADER + frame(0, Open(container_id="x", max_frame_size=100)))
    assert names(events) == ["ConnectionFailed"]
    assert events[0].error.condition == ErrorCondition.INVALID_FIELD


def test_heartbeat_frames_on_any_channel_are_accepted(pair: Pair) -> None:
    pair.open()
    assert pair.feed(pair.server, empty_frame(0) + empty_frame(5) + empty_frame(0)) == []
    assert pair.server.is_open and pair.server.data_to_send() == b""


def test_misuse_raises_and_changes_nothing(pair: Pair) -> None:
    pair.open()
    pair.client.close()
    pair.pump()
    c = pair.client
    for call in (c.open, lambda: c.session().begin()):
        with pytest.raises(IllegalStateError):
            call()
        assert c.state is S.END and c.data_to_send() == b""
    c.close()  # closing a closed connection is a no-op
    assert c.data_to_send() == b""


def test_begin_before_open_raises(chunk: int | None) -> None:
    c = Connection("client")
    s = c.session()
    with pytest.raises(IllegalStateError):
        s.begin()
    assert s.state.name == "UNMAPPED"
    assert c.data_to_send() == AMQP_HEADER


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError):
        Connection("x", max_frame_size=100)
    with pytest.raises(ValueError):
        Connection("x", channel_max=70000)
    with pytest.raises(ValueError):
        Connection("x", idle_timeout=-1)


def test_peer_failure_events_carry_the_peer_error(pair: Pair) -> None:
    pair.open()
    err = Error(condition=ErrorCondition.CONNECTION_REDIRECT, description="elsewhere", info={"hostname": "h"})
    pair.server.close(err)
    ce, _ = pair.pump()
    closed = of_type(ce, ConnectionClosed)
    assert closed and closed[0].error == err
    assert not of_type(ce, ConnectionFailed) and not of_type(ce, ConnectionOpened)


@pytest.mark.parametrize("name", ["connection", "session", "link"])
def test_state_diagrams_are_drawn_from_the_tables(name: str) -> None:
    from amqp10.transport._diagrams import TABLES, dot

    source = dot(name)
    table, _ = TABLES[name]
    for (state, _inp), new in table.items():
        assert f'"{state.name}" -> "{new.name}"' in source
    assert source.count("->") == len({(s.name, n.name) for (s, _), n in table.items()})
