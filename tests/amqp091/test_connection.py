"""The connection handshake, tuning, heartbeats, closing and errors, over the pair harness."""

from __future__ import annotations

from typing import Any

import pytest

from amqp10.amqp091 import (
    AMQP_0_8,
    AMQP_0_9,
    AMQP_0_9_1,
    CAPABILITIES,
    ChannelOpened,
    ConnectionBlocked,
    ConnectionClosed,
    ConnectionFailed,
    ConnectionLost,
    ConnectionOpened,
    ConnectionState,
    ConnectionTuned,
    ConnectionUnblocked,
    IllegalStateError,
    LoginRequested,
    ReplyCode,
    SecretUpdated,
    SecretUpdateRequested,
    SecureChallenge,
    SecureResponse,
    VirtualHostRequested,
)
from amqp10.amqp091 import methods as m
from amqp10.amqp091.auth import amqplain_response, parse_credentials, plain_response
from amqp10.amqp091.connection import Connection
from amqp10.amqp091.framing import FRAME_HEARTBEAT

from .pair import Pair, frames, method_frame, raw_frame


def of(events: list[Any], tp: type) -> list[Any]:
    return [e for e in events if isinstance(e, tp)]


def test_handshake(pair: Pair) -> None:
    pair.open()
    s, c = pair.server_events, pair.client_events
    assert [type(e) for e in s] == [
        LoginRequested,
        ConnectionTuned,
        VirtualHostRequested,
        ConnectionOpened,
    ]
    assert [type(e) for e in c] == [ConnectionTuned, ConnectionOpened]
    login = s[0]
    assert (login.mechanism, login.username, login.password) == ("PLAIN", "guest", "guest")
    assert login.client_properties["capabilities"]["connection.blocked"] is True
    assert s[2].virtual_host == "/"
    # the server announced its capability table and the 0-9-1 version
    start = pair.sent("s>c")[0].method
    assert isinstance(start, m.ConnectionStart)
    assert (start.version_major, start.version_minor) == (0, 9)
    assert start.server_properties["capabilities"] == CAPABILITIES
    assert start.mechanisms == b"PLAIN AMQPLAIN"
    assert pair.client.peer_capability("publisher_confirms")
    assert pair.wire[0] == ("c>s", AMQP_0_9_1.header + pair.wire[0][1][8:])


@pytest.mark.parametrize(
    ("server", "client", "expected"),
    [
        ({}, {}, (2047, 131072, 60)),
        ({}, {"channel_max": 10, "frame_max": 8192, "heartbeat": 5}, (10, 8192, 5)),
        ({"heartbeat": 0}, {"heartbeat": None}, (2047, 131072, 0)),
        ({"heartbeat": 30}, {"heartbeat": None}, (2047, 131072, 30)),
        ({"channel_max": 0, "frame_max": 0}, {"channel_max": 0, "frame_max": 0}, (0, 0, 60)),
    ],
)
def test_tune_negotiation(
    server: dict[str, Any], client: dict[str, Any], expected: tuple[int, int, int]
) -> None:
    pair = Pair(server=server, client=client).open()
    for events in (pair.server_events, pair.client_events):
        (tuned,) = of(events, ConnectionTuned)
        assert (tuned.channel_max, tuned.frame_max, tuned.heartbeat) == expected
    assert (pair.server.channel_max, pair.server.frame_max, pair.server.heartbeat) == expected


@pytest.mark.parametrize("mechanism", ["AMQPLAIN", "PLAIN"])
def test_credentials_for_each_mechanism(mechanism: str) -> None:
    pair = Pair(
        client={"mechanism": mechanism, "username": "ü", "password": "p\0w"[:1] + "w"}
    ).open()
    (login,) = of(pair.server_events, LoginRequested)
    assert (login.mechanism, login.username, login.password) == (mechanism, "ü", "pw")


def test_external_mechanism_reports_no_password() -> None:
    pair = Pair(server={"mechanisms": ("EXTERNAL",)}, client={"mechanism": "EXTERNAL"}).open()
    (login,) = of(pair.server_events, LoginRequested)
    assert (login.mechanism, login.response, login.username, login.password) == (
        "EXTERNAL",
        b"",
        None,
        None,
    )


def test_credential_parsing() -> None:
    assert parse_credentials("PLAIN", plain_response("u", "p", "z")) == ("u", "p")
    assert parse_credentials("PLAIN", b"no nuls") == (None, None)
    assert parse_credentials("AMQPLAIN", amqplain_response("u", "p")) == ("u", "p")
    assert parse_credentials("AMQPLAIN", b"\x05LOGIN") == (None, None)
    assert parse_credentials("EXTERNAL", b"x") == (None, None)


def test_secure_round(chunk: int | None) -> None:
    pair = Pair(chunk=chunk, auto=False)
    s, _ = pair.pump()
    assert of(s, LoginRequested)
    pair.server.challenge(b"nonce")
    _, c = pair.pump()
    (challenge,) = of(c, SecureChallenge)
    assert challenge.challenge == b"nonce"
    pair.client.secure_ok(b"answer")
    s, _ = pair.pump()
    (response,) = of(s, SecureResponse)
    assert response.response == b"answer"
    pair.server.accept_login()
    s, _ = pair.pump()
    pair.server.accept_open()
    pair.pump()
    assert pair.client.state is ConnectionState.OPEN


def test_rejected_login_closes_with_access_refused(chunk: int | None) -> None:
    pair = Pair(chunk=chunk, auto=False)
    pair.pump()
    pair.server.reject_login()
    s, c = pair.pump()
    (closed,) = of(c, ConnectionClosed)
    assert closed.reply_code == ReplyCode.ACCESS_REFUSED
    assert closed.reply_text == (
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
        "For details see the broker logfile."
    )
    assert closed.by_peer
    (server_closed,) = of(s, ConnectionClosed)
    assert not server_closed.by_peer
    assert pair.server.state is ConnectionState.CLOSED
    assert pair.client.state is ConnectionState.CLOSED


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (ReplyCode.NOT_ALLOWED, "NOT_ALLOWED - vhost /x not found"),
        (
            ReplyCode.ACCESS_REFUSED,
            "ACCESS_REFUSED - access to vhost '/x' refused for user 'guest'",
        ),
    ],
)
def test_refused_virtual_host(code: int, text: str) -> None:
    pair = Pair(auto=False, client={"virtual_host": "/x"})
    pair.pump()
    pair.server.accept_login()
    s, _ = pair.pump()
    assert of(s, VirtualHostRequested)[0].virtual_host == "/x"
    pair.server.refuse_open(code)
    _, c = pair.pump()
    (closed,) = of(c, ConnectionClosed)
    assert (closed.reply_code, closed.reply_text, closed.class_id, closed.method_id) == (
        code,
        text,
        10,
        40,
    )


def test_unknown_mechanism_is_command_invalid() -> None:
    pair = Pair(client={"mechanism": "EXTERNAL"})
    s, c = pair.pump()
    (failed,) = of(s, ConnectionFailed)
    assert failed.reply_code == ReplyCode.COMMAND_INVALID
    assert failed.reply_text == "COMMAND_INVALID - unknown authentication mechanism 'EXTERNAL'"
    assert of(c, ConnectionClosed)[0].reply_code == ReplyCode.COMMAND_INVALID


def _server_after_start_ok() -> Connection:
    server = Connection("server")
    server.receive_data(AMQP_0_9_1.header)
    server.receive_data(method_frame(0, m.ConnectionStartOk(mechanism="PLAIN", response=b"\0u\0p")))
    server.accept_login()
    server.data_to_send()
    return server


@pytest.mark.parametrize(
    ("tune_ok", "text"),
    [
        (
            m.ConnectionTuneOk(channel_max=5000, frame_max=4096),
            "NOT_ALLOWED - channel_max=5000 > 2047 max",
        ),
        (
            m.ConnectionTuneOk(frame_max=1 << 20),
            "NOT_ALLOWED - frame_max=1048576 > 131072 max size",
        ),
        (m.ConnectionTuneOk(frame_max=100), "NOT_ALLOWED - frame_max=100 < 4096 min size"),
    ],
)
def test_tune_ok_beyond_the_offer_is_not_allowed(tune_ok: m.ConnectionTuneOk, text: str) -> None:
    server = _server_after_start_ok()
    events = server.receive_data(method_frame(0, tune_ok))
    (failed,) = of(events, ConnectionFailed)
    assert (failed.reply_code, failed.reply_text) == (ReplyCode.NOT_ALLOWED, text)
    (close,) = [f.method for f in frames(server.data_to_send())]
    assert isinstance(close, m.ConnectionClose)
    assert (close.reply_code, close.class_id, close.method_id) == (530, 10, 31)


def test_method_out_of_order_is_command_invalid() -> None:
    server = Connection("server")
    server.receive_data(AMQP_0_9_1.header)
    events = server.receive_data(method_frame(0, m.ConnectionOpen(virtual_host="/")))
    (failed,) = of(events, ConnectionFailed)
    assert failed.reply_code == ReplyCode.COMMAND_INVALID
    assert (failed.class_id, failed.method_id) == (10, 40)
    assert server.state is ConnectionState.CLOSE_SENT


def test_heartbeats_keep_a_quiet_connection_alive() -> None:
    pair = Pair(client={"heartbeat": 10}).open()
    now = 0.0
    for conn in (pair.server, pair.client):
        assert conn.tick(now) == 5.0
    for _ in range(20):  # 100 seconds, both sides ticking at their deadlines
        now += 5
        for conn in (pair.server, pair.client):
            conn.tick(now)
        pair.pump()
    assert pair.server.state is ConnectionState.OPEN and pair.client.state is ConnectionState.OPEN
    beats = [f for f in pair.sent("s>c") if f.type == FRAME_HEARTBEAT]
    assert len(beats) >= 19
    assert not of(pair.server_events + pair.client_events, ConnectionLost)


def test_missed_heartbeats_lose_the_connection() -> None:
    pair = Pair(client={"heartbeat": 10}).open()
    assert pair.server.tick(0.0) == 5.0
    pair.server.data_to_send()
    assert pair.server.tick(5.0) == 10.0  # it sent a heartbeat; the peer stays quiet
    assert pair.server.tick(19.9) is not None
    assert pair.server.tick(20.0) is None
    (lost,) = pair.server.poll_events()
    assert isinstance(lost, ConnectionLost)
    assert lost.reason == "missed heartbeats from the peer, timeout: 10s"
    assert pair.server.state is ConnectionState.CLOSED
    assert pair.server.receive_data(b"more") == []


def test_heartbeat_zero_means_none() -> None:
    pair = Pair(client={"heartbeat": 0}).open()
    assert pair.server.tick(0.0) is None
    assert pair.server.tick(10_000.0) is None
    assert pair.server.data_to_send() == b""


def test_handshake_timeout() -> None:
    server = Connection("server", handshake_timeout=10.0)
    assert server.tick(0.0) == 10.0
    server.receive_data(AMQP_0_9_1.header)
    assert server.tick(10.0) is None
    (lost,) = server.poll_events()
    assert isinstance(lost, ConnectionLost)


def test_extended_handshake_counts_the_held_time_out() -> None:
    server = Connection("server", handshake_timeout=10.0)
    assert server.tick(0.0) == 10.0
    server.receive_data(AMQP_0_9_1.header)
    server.extend_handshake(5.0)  # the broker held an answer back 5 s
    assert server.tick(10.0) == 15.0 and not server.poll_events()
    assert server.tick(15.0) is None
    (lost,) = server.poll_events()
    assert isinstance(lost, ConnectionLost)


def test_oversized_frame_is_a_frame_error() -> None:
    pair = Pair(client={"frame_max": 4096}).open()
    ch = pair.open_channel()
    payload = b"\x00\x3c\x00\x28" + b"\x00" * 5000  # a method frame beyond frame-max
    events = pair.server.receive_data(raw_frame(1, ch, payload))
    (failed,) = of(events, ConnectionFailed)
    assert failed.reply_code == ReplyCode.FRAME_ERROR
    assert failed.reply_text == "FRAME_ERROR - frame of 5012 bytes exceeds frame-max 4096"


def test_bad_frame_end_is_a_frame_error() -> None:
    pair = Pair().open()
    events = pair.server.receive_data(raw_frame(FRAME_HEARTBEAT, 0, b"", end=0))
    (failed,) = of(events, ConnectionFailed)
    assert failed.reply_code == ReplyCode.FRAME_ERROR
    # the stream cannot be trusted after that: more input is ignored
    assert pair.server.receive_data(raw_frame(FRAME_HEARTBEAT, 0, b"")) == []


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (raw_frame(9, 0, b""), ReplyCode.FRAME_ERROR),
        (raw_frame(FRAME_HEARTBEAT, 1, b""), ReplyCode.FRAME_ERROR),
        (raw_frame(1, 0, b"\x00\x0a"), ReplyCode.FRAME_ERROR),
        (raw_frame(1, 0, b"\x00\x63\x00\x01"), ReplyCode.NOT_IMPLEMENTED),
        (raw_frame(1, 0, b"\x00\x0a\x00\x32\x00"), ReplyCode.SYNTAX_ERROR),
        (method_frame(0, m.ConnectionStart()), ReplyCode.COMMAND_INVALID),
        (method_frame(0, m.BasicQos()), ReplyCode.COMMAND_INVALID),
        (method_frame(3, m.ConnectionTuneOk()), ReplyCode.COMMAND_INVALID),
    ],
)
def test_connection_level_errors(frame: bytes, code: int) -> None:
    pair = Pair().open()
    events = pair.server.receive_data(frame)
    (failed,) = of(events, ConnectionFailed)
    assert failed.reply_code == code
    assert failed.reply_text.startswith(ReplyCode(code).name + " - ")
    _, c = pair.pump()
    assert of(c, ConnectionClosed)[0].reply_code == code
    assert pair.server.state is ConnectionState.CLOSED


@pytest.mark.parametrize("closer", ["client", "server"])
def test_close_either_way(pair: Pair, closer: str) -> None:
    pair.open()
    ours = pair.client if closer == "client" else pair.server
    ours.close(320, "CONNECTION_FORCED - bye")
    s, c = pair.pump()
    mine, theirs = (c, s) if closer == "client" else (s, c)
    (a,) = of(mine, ConnectionClosed)
    (b,) = of(theirs, ConnectionClosed)
    assert (a.by_peer, b.by_peer) == (False, True)
    assert (b.reply_code, b.reply_text) == (320, "CONNECTION_FORCED - bye")
    assert pair.server.state is pair.client.state is ConnectionState.CLOSED


def test_crossing_closes() -> None:
    pair = Pair().open()
    pair.client.close()
    pair.server.close()
    s, c = pair.pump()
    assert of(s, ConnectionClosed) and of(c, ConnectionClosed)
    assert pair.server.state is pair.client.state is ConnectionState.CLOSED


def test_after_our_close_only_close_ok_matters() -> None:
    pair = Pair().open()
    pair.server.close()
    junk = method_frame(1, m.BasicQos()) + raw_frame(3, 1, b"x")
    assert pair.server.receive_data(junk) == []
    assert pair.server.state is ConnectionState.CLOSE_SENT
    pair.pump()
    assert pair.server.state is ConnectionState.CLOSED


def test_close_timeout() -> None:
    pair = Pair().open()
    pair.server.close()
    pair.server.tick(0.0)
    assert pair.server.tick(10.0) is None
    assert isinstance(pair.server.poll_events()[0], ConnectionLost)


def test_blocked_and_unblocked(pair: Pair) -> None:
    pair.open()
    assert pair.server.block("low on memory")
    assert not pair.server.block("again")
    _, c = pair.pump()
    assert of(c, ConnectionBlocked)[0].reason == "low on memory"
    assert pair.server.unblock()
    _, c = pair.pump()
    assert of(c, ConnectionUnblocked)


def test_block_only_for_clients_that_understand_it() -> None:
    pair = Pair(client={"client_properties": {"capabilities": {}}}).open()
    assert not pair.server.block("low on memory")
    assert pair.server.data_to_send() == b""


def test_update_secret() -> None:
    pair = Pair().open()
    pair.client.update_secret(b"token", "refresh")
    s, _ = pair.pump()
    (req,) = of(s, SecretUpdateRequested)
    assert (req.new_secret, req.reason) == (b"token", "refresh")
    pair.server.update_secret_ok()
    _, c = pair.pump()
    assert of(c, SecretUpdated)


def test_end_of_stream() -> None:
    pair = Pair().open()
    (lost,) = pair.server.receive_data(b"")
    assert isinstance(lost, ConnectionLost)
    assert pair.server.state is ConnectionState.CLOSED


@pytest.mark.parametrize("header", [b"AMQP\x01\x01\x00\x0a", b"AMQP\x00\x01\x00\x00", b"HTTP/1.1"])
def test_server_answers_a_wrong_header_with_its_own(header: bytes) -> None:
    server = Connection("server")
    (lost,) = server.receive_data(header)
    assert isinstance(lost, ConnectionLost)
    assert server.data_to_send() == AMQP_0_9_1.header


def test_client_sees_the_server_refuse_its_version() -> None:
    client = Connection("client")
    (lost,) = client.receive_data(b"AMQP\x00\x00\x09\x01")
    assert isinstance(lost, ConnectionLost)


@pytest.mark.parametrize("dialect", [AMQP_0_9, AMQP_0_8], ids=["0-9", "0-8"])
def test_older_dialects_handshake_and_close(dialect: Any, chunk: int | None) -> None:
    pair = Pair(chunk=chunk, server={"dialect": dialect}, client={"dialect": dialect}).open()
    assert pair.wire[0][1][:8] == dialect.header
    start = frames(pair.wire[1][1], dialect)[0].method
    assert isinstance(start, m.ConnectionStart)
    assert (start.version_major, start.version_minor) == dialect.version
    pair.client.close()
    s, c = pair.pump()
    assert of(s, ConnectionClosed) and of(c, ConnectionClosed)
    if dialect is AMQP_0_8:  # connection.close is method 60 there
        closes = [
            f
            for f in frames(b"".join(d for w, d in pair.wire if w == "c>s")[8:], dialect)
            if f.method
        ]
        assert closes[-1].payload[:4] == b"\x00\x0a\x00\x3c"


def test_application_misuse_raises_before_anything_changes() -> None:
    pair = Pair(auto=False)
    pair.pump()
    with pytest.raises(IllegalStateError):
        pair.server.accept_open()
    with pytest.raises(IllegalStateError):
        pair.client.accept_login()
    with pytest.raises(IllegalStateError):
        pair.client.open_channel()
    assert pair.server.state is ConnectionState.AUTHENTICATING
    with pytest.raises(ValueError):
        Connection("server", frame_max=100)
    with pytest.raises(ValueError):
        Connection("server", mechanisms=("GSSAPI",))


_BASIC_QOS = m.BasicQos.CLASS_ID << 16 | m.BasicQos.METHOD_ID
"""basic.qos's key in a dialect's table of decoders."""


def test_a_bug_of_ours_is_internal_error_never_an_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pair = Pair().open()
    ch = pair.open_channel()

    def broken(*args: Any) -> None:
        raise KeyError("oops")

    # basic.qos's decoder in the dialect's table, not a method: the compiled build's
    # methods cannot be replaced
    monkeypatch.setitem(pair.server.dialect._decoders, _BASIC_QOS, broken)
    events = pair.server.receive_data(method_frame(ch, m.BasicQos()))
    (failed,) = of(events, ConnectionFailed)
    assert failed.reply_code == ReplyCode.INTERNAL_ERROR
    assert failed.reply_text == "INTERNAL_ERROR - KeyError: 'oops'"


def test_after_a_bug_of_ours_the_rest_of_the_read_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A frame that fails with a bug of ours: the frames after it in the same read are not
    handled, and nothing of the read is kept (the compiled build too: what a read leaves of a
    cut frame is kept only while no bug of ours was met)."""
    pair = Pair().open()
    ch = pair.open_channel()
    calls: list[bytes] = []

    def broken(payload: bytes, pos: int) -> None:
        calls.append(payload)
        raise KeyError("oops")

    monkeypatch.setitem(pair.server.dialect._decoders, _BASIC_QOS, broken)
    frame = method_frame(ch, m.BasicQos())
    events = pair.server.receive_data(frame * 3 + frame[:5])
    assert len(of(events, ConnectionFailed)) == 1 and len(calls) == 1
    assert len(pair.server._in) == 0
    assert pair.server.receive_data(frame) == [] and len(calls) == 1


def test_channel_numbers_run_out() -> None:
    pair = Pair(client={"channel_max": 2}).open()
    assert [pair.client.open_channel(), pair.client.open_channel()] == [1, 2]
    with pytest.raises(IllegalStateError, match="all 2 channels"):
        pair.client.open_channel()
    with pytest.raises(ValueError):
        pair.client.open_channel(3)


def test_server_limits_how_many_channels_not_their_numbers() -> None:
    """As RabbitMQ (rabbit_reader): any channel number opens while fewer than channel-max
    are open; one more closes the connection with NOT_ALLOWED and RabbitMQ's text."""
    pair = Pair(client={"channel_max": 2}).open()
    events = pair.server.receive_data(method_frame(65535, m.ChannelOpen()) + method_frame(3, m.ChannelOpen()))
    assert len(of(events, ChannelOpened)) == 2
    (failed,) = of(pair.server.receive_data(method_frame(7, m.ChannelOpen())), ConnectionFailed)
    assert failed.reply_code == ReplyCode.NOT_ALLOWED
    assert failed.reply_text == "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)"
