"""Tests for the SASL layer (Part 5 §5.3): `SaslClient`, `SaslServer`, `SaslConnection`.

Our client and server run back to back through a small in-memory pump (whole chunks or
byte by byte); hand-made frames cover what a well-behaved peer would never send.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import amqp10.sasl.mechanisms
from amqp10.sasl import (
    InMemoryCredentialStore,
    SaslClient,
    SaslCode,
    SaslCompleted,
    SaslConnection,
    SaslEvent,
    SaslFailed,
    SaslServer,
    SaslSkipped,
    SaslState,
)
from amqp10.sasl.frames import (
    HeaderKind,
    SaslFrameError,
    classify_header,
    encode_sasl_frame,
    parse_sasl_frame,
)
from amqp10.sasl.state import (
    CLIENT_TRANSITIONS,
    SERVER_TRANSITIONS,
    TERMINAL_STATES,
    SaslInput,
)
from amqp10.transport import Connection, ConnectionFailed, ConnectionOpened, SessionBegun
from amqp10.transport.framing import (
    AMQP_HEADER,
    FRAME_HEADER,
    SASL_HEADER,
    TLS_HEADER,
    encode_frame,
)
from amqp10.types import (
    ErrorCondition,
    Open,
    SaslChallenge,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    SaslResponse,
    codec,
)

LOW = 16  # SCRAM iteration count for tests (the client's floor is lowered to match)
ALL = ("SCRAM-SHA-512", "SCRAM-SHA-256", "SCRAM-SHA-1", "PLAIN", "EXTERNAL", "ANONYMOUS")
SCRAM = ("SCRAM-SHA-1", "SCRAM-SHA-256", "SCRAM-SHA-512")
PASSWORDS = (*SCRAM, "PLAIN")
TLS_ID = "CN=bob,O=amqp10-test"
Peer = Any  # SaslClient | SaslServer | SaslConnection | Connection: whatever speaks bytes


def make_store() -> InMemoryCredentialStore:
    store = InMemoryCredentialStore(secret=b"layer-tests", default_iterations=LOW)
    store.add_user("alice", "secret")
    return store


STORE = make_store()


def client(**kw: Any) -> SaslClient:
    kw.setdefault("min_iterations", LOW)
    return SaslClient(**kw)


def server(mechanisms: tuple[str, ...] = ALL, **kw: Any) -> SaslServer:
    kw.setdefault("store", STORE)
    return SaslServer(mechanisms, **kw)


# --------------------------------------------------------------------------- the pump


class Pump:
    """Moves bytes between two sans-IO peers until both are quiet.

    ``chunk`` feeds bytes in pieces of that size (1 = byte by byte). A peer whose
    ``is_closed`` turns true gets its stream closed: the other side sees ``b""``.
    ``tamper(direction, data)`` may rewrite bytes in flight ("c>s" or "s>c").
    """

    def __init__(
        self,
        a: Peer,
        b: Peer,
        *,
        chunk: int | None = None,
        tamper: Callable[[str, bytes], bytes] | None = None,
    ) -> None:
        self.a, self.b, self.chunk, self.tamper = a, b, chunk, tamper
        self.a_events: list[Any] = []
        self.b_events: list[Any] = []
        self.wire: list[tuple[str, bytes]] = []
        self._eof: set[str] = set()

    def _feed(self, peer: Peer, data: bytes) -> list[Any]:
        if self.chunk is None or not data:
            return list(peer.receive_data(data))
        events: list[Any] = []
        for i in range(0, len(data), self.chunk):
            events += peer.receive_data(data[i : i + self.chunk])
        return events

    def pump(self, max_rounds: int = 200) -> Pump:
        for _ in range(max_rounds):
            moved = False
            for src, dst, tag, sink in (
                (self.a, self.b, "c>s", self.b_events),
                (self.b, self.a, "s>c", self.a_events),
            ):
                data = src.data_to_send()
                if data:
                    if self.tamper is not None:
                        data = self.tamper(tag, data)
                    self.wire.append((tag, data))
                    sink += self._feed(dst, data)
                    moved = True
                elif src.is_closed and tag not in self._eof:
                    self._eof.add(tag)
                    sink += self._feed(dst, b"")
                    moved = True
            if not moved:
                return self
        raise AssertionError("pump did not quiesce")

    def sent(self, tag: str) -> bytes:
        return b"".join(d for t, d in self.wire if t == tag)


def frame(body: Any) -> bytes:
    buf = bytearray()
    encode_sasl_frame(buf, body)
    return bytes(buf)


def raw_frame(body: bytes, *, ftype: int = 1, doff: int = 2, size: int | None = None) -> bytes:
    n = 8 + len(body) if size is None else size
    return FRAME_HEADER.pack(n, doff, ftype, 0) + body


def frames_in(data: bytes) -> list[Any]:
    """Decode a stream of SASL bytes (headers skipped) into frame bodies."""
    out: list[Any] = []
    buf = bytearray(data)
    while buf:
        if classify_header(bytes(buf[:8])) in (HeaderKind.SASL, HeaderKind.AMQP):
            del buf[:8]
            continue
        parsed = parse_sasl_frame(buf)
        assert parsed is not None, buf
        body, size = parsed
        out.append(body)
        del buf[:size]
    return out


def of_type(events: list[Any], tp: type) -> list[Any]:
    return [e for e in events if isinstance(e, tp)]


def only(events: list[Any], tp: type) -> Any:
    found = of_type(events, tp)
    assert len(found) == 1, events
    return found[0]


def exchange(c: Peer, s: Peer, **kw: Any) -> Pump:
    return Pump(c, s, **kw).pump()


# --------------------------------------------------------------------------- success


CASES = [
    ("ANONYMOUS", {}, {}, None),
    ("PLAIN", {"username": "alice", "password": "secret"}, {}, "alice"),
    ("EXTERNAL", {"tls_client_certificate": True}, {"tls_identity": TLS_ID}, TLS_ID),
    *[(m, {"username": "alice", "password": "secret"}, {}, "alice") for m in SCRAM],
]


@pytest.mark.parametrize("chunk", [None, 1], ids=["whole", "bytewise"])
@pytest.mark.parametrize(("mech", "ckw", "skw", "identity"), CASES, ids=[c[0] for c in CASES])
def test_every_mechanism_succeeds(
    mech: str, ckw: dict[str, Any], skw: dict[str, Any], identity: str | None, chunk: int | None
) -> None:
    c = client(mechanisms=[mech], hostname="vhost", **ckw)
    s = server(**skw)
    p = exchange(c, s, chunk=chunk)
    done_c = only(p.a_events, SaslCompleted)
    done_s = only(p.b_events, SaslCompleted)
    assert done_s == SaslCompleted(outcome=SaslCode.OK, mechanism=mech, identity=identity)
    assert done_c.mechanism == mech and done_c.outcome is SaslCode.OK
    assert c.state is s.state is SaslState.AUTHENTICATED
    assert c.done and s.done and c.authenticated and s.authenticated
    assert not (c.failed or s.failed or c.is_closed or s.is_closed)
    assert c.outcome is s.outcome is SaslCode.OK
    assert s.identity == identity and s.mechanism == mech and s.hostname == "vhost"
    assert c.take_remaining() == s.take_remaining() == b""
    # the wire: headers first, then frames of type 0x01 only, on channel 0
    assert p.sent("c>s").startswith(SASL_HEADER) and p.sent("s>c").startswith(SASL_HEADER)
    bodies = frames_in(p.sent("c>s"))
    assert isinstance(bodies[0], SaslInit) and bodies[0].hostname == "vhost"
    assert all(isinstance(b, SaslResponse) for b in bodies[1:])
    server_bodies = frames_in(p.sent("s>c"))
    assert isinstance(server_bodies[0], SaslMechanisms)
    assert isinstance(server_bodies[-1], SaslOutcome) and server_bodies[-1].code == 0
    if mech.startswith("SCRAM"):
        assert server_bodies[-1].additional_data.startswith(b"v=")  # server-final


def test_sasl_frames_on_the_wire() -> None:
    p = exchange(client(), server(("ANONYMOUS",)))
    s2c = p.sent("s>c")
    assert s2c[:8] == SASL_HEADER
    size, doff, ftype, channel = FRAME_HEADER.unpack_from(s2c, 8)
    assert (doff, ftype, channel) == (2, 0x01, 0)
    assert codec.decode(s2c[16 : 8 + size]) == SaslMechanisms(sasl_server_mechanisms=["ANONYMOUS"])


@pytest.mark.parametrize(
    ("offered", "ckw", "chosen"),
    [
        (ALL, {"username": "alice", "password": "secret"}, "SCRAM-SHA-512"),
        (
            ("PLAIN", "SCRAM-SHA-1", "SCRAM-SHA-256"),
            {"username": "alice", "password": "secret"},
            "SCRAM-SHA-256",
        ),
        (("PLAIN", "ANONYMOUS"), {"username": "alice", "password": "secret"}, "PLAIN"),
        (
            ALL,
            {"username": "alice", "password": "secret", "tls_client_certificate": True},
            "EXTERNAL",
        ),
        (ALL, {}, "ANONYMOUS"),
        (
            ALL,
            {"username": "alice", "password": "secret", "mechanisms": ["PLAIN", "SCRAM-SHA-1"]},
            "PLAIN",
        ),
    ],
)
def test_client_picks_the_strongest_common_mechanism(
    offered: tuple[str, ...], ckw: dict[str, Any], chosen: str
) -> None:
    c = client(**ckw)
    s = server(offered, tls_identity=TLS_ID)
    exchange(c, s)
    assert c.authenticated and s.authenticated
    assert c.mechanism == s.mechanism == chosen
    assert c.offered == s.offered


def test_server_offers_external_only_with_a_tls_identity() -> None:
    assert "EXTERNAL" not in server().offered
    assert "EXTERNAL" in server(tls_identity=TLS_ID).offered
    c = client(mechanisms=["EXTERNAL"])
    s = server()
    p = exchange(c, s)
    assert only(p.a_events, SaslFailed).outcome is SaslCode.SYS_PERM
    assert "no SASL mechanism in common" in c.reason


def test_external_authzid_must_match_the_tls_identity() -> None:
    c = client(mechanisms=["EXTERNAL"], authzid="CN=mallory")
    s = server(tls_identity=TLS_ID)
    exchange(c, s)
    assert c.outcome is s.outcome is SaslCode.AUTH
    assert "may not act as" in s.reason


def test_scram_without_initial_response_takes_two_round_trips() -> None:
    """A client that sends sasl-init without initial-response gets an empty challenge first."""
    scram = amqp10.sasl.mechanisms.ScramClient("SHA-256", "alice", "secret", min_iterations=LOW)
    s = server()
    s.receive_data(SASL_HEADER + frame(SaslInit(mechanism="SCRAM-SHA-256")))
    (mechs, challenge) = frames_in(s.data_to_send())
    assert isinstance(mechs, SaslMechanisms) and challenge == SaslChallenge(challenge=b"")
    s.receive_data(frame(SaslResponse(response=scram.challenge(b""))))
    (first,) = frames_in(s.data_to_send())
    s.receive_data(frame(SaslResponse(response=scram.challenge(first.challenge))))
    (outcome,) = frames_in(s.data_to_send())
    scram.verify_outcome(outcome.additional_data)
    assert s.authenticated and s.identity == "alice"


# --------------------------------------------------------------------------- failures


@pytest.mark.parametrize("mech", PASSWORDS)
@pytest.mark.parametrize(
    ("user", "password"),
    [("alice", "wrong"), ("mallory", "secret")],
    ids=["wrong-password", "unknown-user"],
)
def test_bad_credentials_fail_with_auth(mech: str, user: str, password: str) -> None:
    c = client(mechanisms=[mech], username=user, password=password)
    s = server()
    p = exchange(c, s)
    fc, fs = only(p.a_events, SaslFailed), only(p.b_events, SaslFailed)
    assert fc.outcome is fs.outcome is SaslCode.AUTH
    assert fc.mechanism == fs.mechanism == mech
    assert ("wrong password" if user == "alice" else "unknown user") in fs.reason
    assert "sasl-code auth" in fc.reason
    if mech != "PLAIN":
        assert "e=invalid-proof" in fc.reason
    assert c.is_closed and s.is_closed and s.identity is None
    assert not of_type(p.a_events + p.b_events, SaslCompleted)


@pytest.mark.parametrize("mech", SCRAM)
def test_tampered_server_signature_is_refused(mech: str) -> None:
    def flip(direction: str, data: bytes) -> bytes:
        bodies = frames_in(data)
        if direction == "s>c" and bodies and isinstance(bodies[-1], SaslOutcome):
            sig = bytearray(base64.b64decode(bodies[-1].additional_data[2:]))
            sig[0] ^= 1
            return frame(
                SaslOutcome(code=SaslCode.OK, additional_data=b"v=" + base64.b64encode(sig))
            )
        return data

    c = client(mechanisms=[mech], username="alice", password="secret")
    s = server()
    p = exchange(c, s, tamper=flip)
    assert s.authenticated  # the server was happy ...
    failed = only(p.a_events, SaslFailed)  # ... but the client does not trust it
    assert failed.outcome is SaslCode.AUTH and "server signature is wrong" in failed.reason
    assert c.is_closed and c.identity is None


def test_scram_success_without_server_signature_is_refused() -> None:
    def strip(direction: str, data: bytes) -> bytes:
        bodies = frames_in(data)
        if direction == "s>c" and bodies and isinstance(bodies[-1], SaslOutcome):
            return frame(SaslOutcome(code=SaslCode.OK))
        return data

    c = client(mechanisms=["SCRAM-SHA-256"], username="alice", password="secret")
    exchange(c, server(), tamper=strip)
    assert c.failed and c.outcome is SaslCode.AUTH and "without its server signature" in c.reason


def test_replayed_scram_nonce_is_refused() -> None:
    c = client(mechanisms=["SCRAM-SHA-256"], username="alice", password="secret")
    p = exchange(c, server())
    assert c.authenticated
    init, client_final = frames_in(p.sent("c>s"))
    # an eavesdropper replays the whole conversation to a fresh server session
    s = server()
    s.receive_data(SASL_HEADER + frame(init))
    assert isinstance(frames_in(s.data_to_send())[-1], SaslChallenge)  # a new nonce
    events = s.receive_data(frame(client_final))
    failed = only(events, SaslFailed)
    assert failed.outcome is SaslCode.AUTH and "nonce mismatch" in failed.reason
    assert frames_in(s.data_to_send()) == [SaslOutcome(code=SaslCode.AUTH)]


def test_client_with_credentials_does_not_fall_back_to_anonymous() -> None:
    c = client(username="alice", password="secret")
    s = server(("ANONYMOUS",))
    p = exchange(c, s)
    assert only(p.a_events, SaslFailed).outcome is SaslCode.SYS_PERM
    assert frames_in(p.sent("c>s")) == []  # no sasl-init: the client just hangs up
    # the server sees the stream end mid-exchange
    assert only(p.b_events, SaslFailed).outcome is SaslCode.SYS_TEMP
    assert "closed the stream" in s.reason


# --------------------------------------------------------------------------- headers


def test_plain_amqp_client_against_a_server_that_requires_sasl() -> None:
    amqp = Connection("plain-client")
    amqp.open()
    sc = SaslConnection.server(server(), "srv")
    p = exchange(amqp, sc)
    assert p.sent("s>c") == SASL_HEADER  # §2.2: the header we want, then close
    failed = only(p.b_events, SaslFailed)
    assert failed.outcome is SaslCode.AUTH and "requires SASL" in failed.reason
    assert sc.is_closed and sc.sasl.done and sc.sasl.failed
    assert not of_type(p.b_events, ConnectionOpened)
    # the plain client's engine reports the unsupported header
    assert only(p.a_events, ConnectionFailed).error.condition == ErrorCondition.NOT_IMPLEMENTED


def test_sasl_client_against_a_plain_amqp_server() -> None:
    cc = SaslConnection.client(client(), "cli")
    amqp = Connection("plain-server", send_header=False)
    p = exchange(cc, amqp)
    failed = only(p.a_events, SaslFailed)
    assert failed.outcome is SaslCode.SYS_PERM
    assert "plain AMQP header" in failed.reason and "does not do SASL" in failed.reason
    assert cc.is_closed
    assert p.sent("c>s") == SASL_HEADER  # nothing of AMQP left our side


def test_sasl_client_fed_the_amqp_header_directly() -> None:
    c = client()
    events = c.receive_data(AMQP_HEADER)
    assert only(events, SaslFailed).outcome is SaslCode.SYS_PERM and c.is_closed
    assert c.receive_data(b"more bytes") == []  # a failed layer reads nothing more


@pytest.mark.parametrize("chunk", [None, 1])
def test_optional_sasl_lets_a_plain_amqp_client_through(chunk: int | None) -> None:
    amqp = Connection("plain-client")
    amqp.open()
    sc = SaslConnection.server(server(require=False), "srv")
    p = exchange(amqp, sc, chunk=chunk)
    assert only(p.b_events, SaslSkipped) == SaslSkipped()
    assert sc.sasl.skipped and sc.sasl.done and not sc.sasl.failed
    assert sc.sasl.outcome is None and sc.sasl.identity is None
    opened = only(p.b_events, ConnectionOpened)
    assert opened.remote.container_id == "plain-client"
    assert p.b_events.index(opened) > p.b_events.index(only(p.b_events, SaslSkipped))
    sc.open()
    p.pump()
    assert amqp.is_open and sc.is_open
    assert not p.sent("s>c").startswith(SASL_HEADER)


def test_optional_sasl_still_authenticates_sasl_clients() -> None:
    c = client(username="alice", password="secret")
    s = server(require=False)
    exchange(c, s)
    assert s.authenticated and s.identity == "alice" and not s.skipped


@pytest.mark.parametrize(
    ("header", "words"),
    [
        (TLS_HEADER, "TLS header"),
        (b"AMQP\x03\x02\x00\x00", "unsupported protocol header"),
        (b"AMQP\x00\x01\x00\x01", "unsupported protocol header"),
        (b"GET / HTTP/1.1\r\n", "unsupported protocol header"),
    ],
)
@pytest.mark.parametrize("require", [True, False])
def test_server_answers_other_headers_with_the_sasl_header(
    header: bytes, words: str, require: bool
) -> None:
    s = server(require=require)
    events = s.receive_data(header)
    failed = only(events, SaslFailed)
    assert failed.outcome is SaslCode.SYS_PERM and words in failed.reason
    assert s.data_to_send() == SASL_HEADER and s.is_closed


def test_garbage_is_refused_at_its_first_byte() -> None:
    s = server()
    assert s.receive_data(b"AM") == []
    assert only(s.receive_data(b"X"), SaslFailed).outcome is SaslCode.SYS_PERM


@pytest.mark.parametrize(
    ("header", "words"),
    [(TLS_HEADER, "TLS header"), (b"HTTP/1.1", "unsupported protocol header")],
)
def test_client_refuses_other_headers(header: bytes, words: str) -> None:
    c = client()
    failed = only(c.receive_data(header), SaslFailed)
    assert failed.outcome is SaslCode.SYS_PERM and words in failed.reason


def test_classify_header() -> None:
    assert classify_header(b"") is None
    assert classify_header(b"AMQP") is None
    assert classify_header(b"AMQP\x03") is None
    assert classify_header(SASL_HEADER) is HeaderKind.SASL
    assert classify_header(AMQP_HEADER) is HeaderKind.AMQP
    assert classify_header(TLS_HEADER) is HeaderKind.TLS
    assert classify_header(b"AMQP\x04") is HeaderKind.OTHER
    assert classify_header(b"\x16\x03\x01") is HeaderKind.OTHER  # a TLS ClientHello


# --------------------------------------------------------------------------- bad input: server


def server_at_init(**kw: Any) -> SaslServer:
    """A server that got the SASL header and sent sasl-mechanisms."""
    s = server(**kw)
    assert s.receive_data(SASL_HEADER) == []
    assert isinstance(frames_in(s.data_to_send())[0], SaslMechanisms)
    return s


def assert_server_failed(s: SaslServer, events: list[Any], code: SaslCode, words: str) -> None:
    failed = only(events, SaslFailed)
    assert failed.outcome is code, failed
    assert words in failed.reason, failed.reason
    assert s.failed and s.is_closed and s.outcome is code
    assert frames_in(s.data_to_send()) == [SaslOutcome(code=code)]
    # nothing more is read or written, and no exception
    assert s.receive_data(frame(SaslResponse(response=b"x"))) == []
    assert s.data_to_send() == b"" and s.take_remaining() == b""


_OPEN_FRAME = bytearray()
encode_frame(_OPEN_FRAME, 0, Open(container_id="x"))

BAD_FRAMES = [
    ("garbage body", raw_frame(b"\xff\xff\xff"), SaslCode.SYS, "malformed SASL frame body"),
    ("truncated body", raw_frame(b"\x00\x53\x41\xc0\x10\x02"), SaslCode.SYS, "malformed"),
    ("doff 1", raw_frame(b"\x00" * 8, doff=1), SaslCode.SYS, "invalid frame header"),
    ("doff past size", raw_frame(b"\x00" * 8, doff=9), SaslCode.SYS, "invalid frame header"),
    ("size below 8", raw_frame(b"", size=4), SaslCode.SYS, "invalid frame header"),
    ("empty frame", raw_frame(b""), SaslCode.SYS, "empty frame"),
    ("AMQP frame type", bytes(_OPEN_FRAME), SaslCode.SYS, "frame of type 0x00"),
    (
        "open in a SASL frame",
        raw_frame(bytes(_OPEN_FRAME[8:])),
        SaslCode.SYS,
        "not a SASL performative",
    ),
    ("unknown descriptor", raw_frame(b"\x00\x53\x4f\x45"), SaslCode.SYS, "not a SASL performative"),
    (
        "stray bytes",
        raw_frame(frame(SaslResponse(response=b""))[8:] + b"\x40"),
        SaslCode.SYS,
        "stray bytes",
    ),
    (
        "missing mechanism",
        raw_frame(b"\x00\x53\x41\x45"),
        SaslCode.SYS,
        "mandatory field mechanism",
    ),
    (
        "response before init",
        frame(SaslResponse(response=b"x")),
        SaslCode.SYS,
        "unexpected sasl-response in state init",
    ),
    (
        "mechanisms from a client",
        frame(SaslMechanisms(sasl_server_mechanisms=["PLAIN"])),
        SaslCode.SYS,
        "unexpected sasl-mechanisms",
    ),
    (
        "challenge from a client",
        frame(SaslChallenge(challenge=b"")),
        SaslCode.SYS,
        "unexpected sasl-challenge",
    ),
    (
        "outcome from a client",
        frame(SaslOutcome(code=SaslCode.OK)),
        SaslCode.SYS,
        "unexpected sasl-outcome",
    ),
    (
        "unknown mechanism",
        frame(SaslInit(mechanism="GSSAPI", initial_response=b"x")),
        SaslCode.AUTH,
        "'GSSAPI' is not offered",
    ),
    ("nonsense mechanism", frame(SaslInit(mechanism="X" * 300)), SaslCode.AUTH, "is not offered"),
    (
        "EXTERNAL without TLS",
        frame(SaslInit(mechanism="EXTERNAL", initial_response=b"")),
        SaslCode.AUTH,
        "not offered",
    ),
    (
        "malformed PLAIN",
        frame(SaslInit(mechanism="PLAIN", initial_response=b"no-nuls")),
        SaslCode.AUTH,
        "malformed response",
    ),
    (
        "malformed SCRAM",
        frame(SaslInit(mechanism="SCRAM-SHA-256", initial_response=b"x,y")),
        SaslCode.AUTH,
        "malformed response",
    ),
]


@pytest.mark.parametrize("chunk", [None, 1], ids=["whole", "bytewise"])
@pytest.mark.parametrize(
    ("data", "code", "words"), [b[1:] for b in BAD_FRAMES], ids=[b[0] for b in BAD_FRAMES]
)
def test_server_bad_input_ends_in_an_outcome(
    data: bytes, code: SaslCode, words: str, chunk: int | None
) -> None:
    s = server_at_init()
    events: list[Any] = []
    step = chunk or len(data)
    for i in range(0, len(data), step):
        events += s.receive_data(data[i : i + step])
    assert_server_failed(s, events, code, words)


def test_second_init_is_a_protocol_error() -> None:
    s = server_at_init()
    s.receive_data(frame(SaslInit(mechanism="PLAIN")))
    assert frames_in(s.data_to_send()) == [SaslChallenge(challenge=b"")]
    events = s.receive_data(frame(SaslInit(mechanism="PLAIN")))
    assert_server_failed(s, events, SaslCode.SYS, "unexpected sasl-init in state exchange")


def test_oversized_frame_is_refused_from_its_header_alone() -> None:
    s = server_at_init(max_frame_size=1024)
    events = s.receive_data(FRAME_HEADER.pack(1025, 2, 1, 0))  # no body needed to decide
    assert_server_failed(s, events, SaslCode.SYS, "exceeds the 1024-byte limit")
    s = server_at_init()
    events = s.receive_data(FRAME_HEADER.pack(0xFFFFFFFF, 2, 1, 0))
    assert_server_failed(s, events, SaslCode.SYS, "exceeds the 65536-byte limit")


def test_oversized_response_fails_with_auth() -> None:
    s = server_at_init(max_response_size=100)
    events = s.receive_data(
        frame(SaslInit(mechanism="PLAIN", initial_response=b"\x00a\x00" + b"p" * 200))
    )
    assert_server_failed(s, events, SaslCode.AUTH, "exceeds the 100-byte limit")


def test_too_many_round_trips() -> None:
    s = server_at_init(max_round_trips=0)
    events = s.receive_data(frame(SaslInit(mechanism="PLAIN")))  # PLAIN would need a challenge
    assert_server_failed(s, events, SaslCode.AUTH, "more than 0 round trips")
    # SCRAM without initial response needs two challenges
    scram = amqp10.sasl.mechanisms.ScramClient("SHA-256", "alice", "secret", min_iterations=LOW)
    s = server_at_init(max_round_trips=1)
    s.receive_data(frame(SaslInit(mechanism="SCRAM-SHA-256")))
    assert frames_in(s.data_to_send()) == [SaslChallenge(challenge=b"")]
    events = s.receive_data(frame(SaslResponse(response=scram.challenge(b""))))
    assert_server_failed(s, events, SaslCode.AUTH, "more than 1 round trips")


def test_end_of_stream_mid_exchange() -> None:
    s = server_at_init()
    events = s.receive_data(b"")
    assert only(events, SaslFailed).outcome is SaslCode.SYS_TEMP
    c = client()
    assert only(c.receive_data(b""), SaslFailed).outcome is SaslCode.SYS_TEMP
    # an end of stream after the exchange is not SASL's business
    c2, s2 = client(), server()
    exchange(c2, s2)
    assert c2.receive_data(b"") == [] and c2.authenticated


def test_handshake_timeout() -> None:
    s = server(handshake_timeout=5.0)
    assert s.tick(100.0) == 105.0
    s.receive_data(SASL_HEADER)
    s.data_to_send()
    assert s.tick(104.9) == 105.0
    assert s.tick(105.0) is None
    failed = only(s.poll_events(), SaslFailed)
    assert failed.outcome is SaslCode.SYS_TEMP and "within 5s" in failed.reason
    assert frames_in(s.data_to_send()) == [SaslOutcome(code=SaslCode.SYS_TEMP)]
    # the client hears the early outcome even though it has not sent sasl-init yet
    c = client(username="alice", password="secret", handshake_timeout=1.0)
    assert c.tick(0.0) == 1.0
    events = c.receive_data(SASL_HEADER + frame(SaslOutcome(code=SaslCode.SYS_TEMP)))
    assert only(events, SaslFailed).outcome is SaslCode.SYS_TEMP
    assert "ended the exchange early" in c.reason
    assert c.tick(2.0) is None and c.poll_events() == []
    assert server().tick(0.0) is None  # no timeout configured


def test_a_broken_mechanism_becomes_a_sys_outcome(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        name = "PLAIN"

        def step(self, response: bytes | None) -> Any:
            raise RuntimeError("bug")

    monkeypatch.setattr("amqp10.sasl.layer.make_server_mechanism", lambda *a, **k: Broken())
    s = server_at_init()
    events = s.receive_data(frame(SaslInit(mechanism="PLAIN", initial_response=b"\x00a\x00b")))
    assert_server_failed(s, events, SaslCode.SYS, "internal error")


# --------------------------------------------------------------------------- bad input: client


def client_at_exchange(mech: str = "SCRAM-SHA-256", **kw: Any) -> SaslClient:
    """A client that got sasl-mechanisms and sent sasl-init."""
    kw.setdefault("username", "alice")
    kw.setdefault("password", "secret")
    c = client(**kw)
    assert c.data_to_send() == SASL_HEADER
    c.receive_data(SASL_HEADER + frame(SaslMechanisms(sasl_server_mechanisms=[mech])))
    assert isinstance(frames_in(c.data_to_send())[0], SaslInit)
    return c


def assert_client_failed(c: SaslClient, events: list[Any], code: SaslCode, words: str) -> None:
    failed = only(events, SaslFailed)
    assert failed.outcome is code, failed
    assert words in failed.reason, failed.reason
    assert c.failed and c.is_closed and c.data_to_send() == b""
    assert c.receive_data(frame(SaslOutcome(code=SaslCode.OK))) == []


CLIENT_BAD = [
    ("garbage frame", "SCRAM-SHA-256", raw_frame(b"\xfe"), SaslCode.SYS, "malformed"),
    ("AMQP frame", "SCRAM-SHA-256", bytes(_OPEN_FRAME), SaslCode.SYS, "frame of type 0x00"),
    (
        "init from a server",
        "SCRAM-SHA-256",
        frame(SaslInit(mechanism="PLAIN")),
        SaslCode.SYS,
        "unexpected sasl-init",
    ),
    (
        "mechanisms twice",
        "SCRAM-SHA-256",
        frame(SaslMechanisms(sasl_server_mechanisms=["PLAIN"])),
        SaslCode.SYS,
        "unexpected sasl-mechanisms",
    ),
    (
        "response from a server",
        "SCRAM-SHA-256",
        frame(SaslResponse(response=b"")),
        SaslCode.SYS,
        "unexpected sasl-response",
    ),
    (
        "bad server-first",
        "SCRAM-SHA-256",
        frame(SaslChallenge(challenge=b"r=x,s=,i=1")),
        SaslCode.SYS,
        "SCRAM-SHA-256",
    ),
    (
        "challenge to PLAIN",
        "PLAIN",
        frame(SaslChallenge(challenge=b"?")),
        SaslCode.SYS,
        "never takes",
    ),
    (
        "refused",
        "PLAIN",
        frame(SaslOutcome(code=SaslCode.SYS_PERM)),
        SaslCode.SYS_PERM,
        "sasl-code sys-perm",
    ),
    (
        "oversized challenge",
        "SCRAM-SHA-256",
        frame(SaslChallenge(challenge=b"r" * 70_000)),
        SaslCode.SYS,
        "exceeds",
    ),
]


@pytest.mark.parametrize(
    ("mech", "data", "code", "words"), [b[1:] for b in CLIENT_BAD], ids=[b[0] for b in CLIENT_BAD]
)
def test_client_bad_input_fails_cleanly(mech: str, data: bytes, code: SaslCode, words: str) -> None:
    c = client_at_exchange(mech)
    assert_client_failed(c, c.receive_data(data), code, words)


def test_client_refuses_a_weak_iteration_count() -> None:
    c = SaslClient(username="alice", password="secret", mechanisms=["SCRAM-SHA-256"])
    c.data_to_send()
    c.receive_data(SASL_HEADER + frame(SaslMechanisms(sasl_server_mechanisms=["SCRAM-SHA-256"])))
    (init,) = frames_in(c.data_to_send())
    client_nonce = init.initial_response.split(b"r=")[1]
    challenge = b"r=" + client_nonce + b"xyz,s=" + base64.b64encode(b"salt") + b",i=16"
    events = c.receive_data(frame(SaslChallenge(challenge=challenge)))
    assert_client_failed(c, events, SaslCode.SYS, "below the minimum 4096")


def test_client_challenge_limits() -> None:
    c = client_at_exchange(max_challenge_size=10)
    assert_client_failed(
        c,
        c.receive_data(frame(SaslChallenge(challenge=b"x" * 11))),
        SaslCode.SYS,
        "11 bytes exceeds the 10-byte limit",
    )
    c = client_at_exchange(max_round_trips=0)
    assert_client_failed(
        c,
        c.receive_data(frame(SaslChallenge(challenge=b""))),
        SaslCode.SYS,
        "more than 0 challenges",
    )


def test_client_outcome_before_init() -> None:
    c = client()
    assert c.data_to_send() == SASL_HEADER
    events = c.receive_data(SASL_HEADER + frame(SaslOutcome(code=SaslCode.OK)))
    assert_client_failed(c, events, SaslCode.SYS, "unexpected sasl-outcome in state mechanisms")


def test_client_configuration_errors() -> None:
    with pytest.raises(ValueError, match="unsupported SASL mechanism"):
        SaslClient(mechanisms=["GSSAPI"])
    with pytest.raises(ValueError, match="must not be empty"):
        SaslClient(mechanisms=[])
    with pytest.raises(ValueError, match="max_frame_size"):
        SaslClient(max_frame_size=100)
    with pytest.raises(ValueError, match="handshake_timeout"):
        SaslClient(handshake_timeout=0)
    with pytest.raises(ValueError, match="unsupported SASL mechanism"):
        SaslServer(["KERBEROS"])
    with pytest.raises(ValueError, match="credential store"):
        SaslServer(["SCRAM-SHA-256"])
    # a mechanism the client cannot build (PLAIN with NUL in it) fails the exchange, not the caller
    c = client(mechanisms=["PLAIN"], username="al\x00ice", password="secret")
    events = c.receive_data(SASL_HEADER + frame(SaslMechanisms(sasl_server_mechanisms=["PLAIN"])))
    assert only(events, SaslFailed).outcome is SaslCode.SYS_PERM and c.data_to_send() == SASL_HEADER


@given(st.lists(st.binary(max_size=40), max_size=8))
def test_fuzz_server_never_raises(chunks: list[bytes]) -> None:
    s = server(("PLAIN", "SCRAM-SHA-256", "ANONYMOUS"))
    s.receive_data(SASL_HEADER)
    s.data_to_send()
    for data in chunks:
        for ev in s.receive_data(data):
            assert isinstance(ev, SaslEvent)
    out = frames_in(s.data_to_send())
    if s.failed:
        assert isinstance(out[-1], SaslOutcome) and out[-1].code != SaslCode.OK
    assert s.state in SaslState


@given(
    st.lists(st.binary(max_size=40), max_size=8),
    st.sampled_from(["PLAIN", "SCRAM-SHA-1", "ANONYMOUS"]),
)
def test_fuzz_client_never_raises(chunks: list[bytes], mech: str) -> None:
    c = client(username="alice", password="secret", mechanisms=[mech])
    c.receive_data(SASL_HEADER + frame(SaslMechanisms(sasl_server_mechanisms=[mech])))
    for data in chunks:
        for ev in c.receive_data(data):
            assert isinstance(ev, SaslEvent)
    assert c.state in SaslState


@given(st.binary(min_size=1, max_size=64))
def test_fuzz_frame_parser_raises_only_frame_errors(data: bytes) -> None:
    try:
        parse_sasl_frame(data)
    except SaslFrameError:
        pass


# --------------------------------------------------------------------------- state tables


def test_state_tables() -> None:
    for table in (CLIENT_TRANSITIONS, SERVER_TRANSITIONS):
        for (state, event), new in table.items():
            assert state not in TERMINAL_STATES
            if event is SaslInput.FAIL:
                assert new is SaslState.FAILED
    # the client never accepts the plain AMQP header; only a server can be bypassed
    assert not any(e is SaslInput.RECV_AMQP_HEADER for _, e in CLIENT_TRANSITIONS)
    assert SaslState.BYPASSED not in CLIENT_TRANSITIONS.values()
    # each role only receives the frames the other role sends
    client_inputs = {e for _, e in CLIENT_TRANSITIONS}
    server_inputs = {e for _, e in SERVER_TRANSITIONS}
    assert SaslInput.RECV_INIT not in client_inputs and SaslInput.RECV_RESPONSE not in client_inputs
    assert (
        not {SaslInput.RECV_MECHANISMS, SaslInput.RECV_CHALLENGE, SaslInput.RECV_OUTCOME}
        & server_inputs
    )


def test_sasl_code_has_one_home() -> None:
    from amqp10.types import SaslCode as TypesSaslCode

    assert amqp10.sasl.mechanisms.SaslCode is TypesSaslCode is SaslCode


# --------------------------------------------------------------------------- composition


def sasl_pair(
    ckw: dict[str, Any] | None = None, skw: dict[str, Any] | None = None
) -> tuple[SaslConnection, SaslConnection]:
    if ckw is None:
        ckw = {"username": "alice", "password": "secret"}
    cc = SaslConnection.client(client(**ckw), "cli", hostname="vhost")
    sc = SaslConnection.server(server(**(skw or {})), "srv")
    return cc, sc


@pytest.mark.parametrize("chunk", [None, 1, 7], ids=["whole", "bytewise", "chunk7"])
def test_amqp_open_over_the_same_stream(chunk: int | None) -> None:
    cc, sc = sasl_pair()
    cc.open()  # pipelined: held back until the SASL outcome
    first = cc.data_to_send()
    assert first == SASL_HEADER  # nothing of AMQP before SASL is done
    p = Pump(cc, sc, chunk=chunk)
    p.wire.append(("c>s", first))
    p.b_events += sc.receive_data(first)
    p.pump()
    done = only(p.b_events, SaslCompleted)
    opened = only(p.b_events, ConnectionOpened)
    assert p.b_events.index(done) < p.b_events.index(opened)
    assert opened.remote.container_id == "cli" and opened.remote.hostname == "vhost"
    assert only(p.a_events, SaslCompleted).identity == "alice"
    sc.open()
    session = cc.session()
    session.begin()
    p.pump()
    assert cc.is_open and sc.is_open
    assert only(p.a_events, ConnectionOpened).remote.container_id == "srv"
    assert of_type(p.b_events, SessionBegun)
    # the client's AMQP header follows its last SASL frame; the server's follows the outcome
    c2s, s2c = p.sent("c>s"), p.sent("s>c")
    init_end = len(SASL_HEADER) + FRAME_HEADER.unpack_from(c2s, 8)[0]
    sasl_end = init_end
    while c2s[sasl_end : sasl_end + 4] != b"AMQP":
        sasl_end += FRAME_HEADER.unpack_from(c2s, sasl_end)[0]
    assert c2s[sasl_end : sasl_end + 8] == AMQP_HEADER
    assert [type(b) for b in frames_in(c2s[:sasl_end])] == [SaslInit, SaslResponse]
    assert AMQP_HEADER in s2c and s2c.index(AMQP_HEADER) > s2c.index(SASL_HEADER)
    assert not cc.is_closed and not sc.is_closed
    cc.close()
    p.pump()
    assert cc.is_closed and sc.is_closed


def test_failed_auth_sends_no_amqp_and_ends_the_stream() -> None:
    cc, sc = sasl_pair({"username": "alice", "password": "wrong"})
    cc.open()
    p = exchange(cc, sc)
    assert only(p.a_events, SaslFailed).outcome is SaslCode.AUTH
    assert only(p.b_events, SaslFailed).outcome is SaslCode.AUTH
    assert cc.is_closed and sc.is_closed
    assert AMQP_HEADER not in p.sent("c>s") and AMQP_HEADER not in p.sent("s>c")
    assert cc.data_to_send() == sc.data_to_send() == b""
    assert cc.receive_data(AMQP_HEADER) == [] and cc.tick(1e9) is None
    assert not of_type(p.a_events + p.b_events, ConnectionOpened)


def test_server_takes_a_pipelined_amqp_header_in_the_same_chunk() -> None:
    s = server()
    data = SASL_HEADER + frame(SaslInit(mechanism="ANONYMOUS", initial_response=b"")) + AMQP_HEADER
    events = s.receive_data(data)
    assert only(events, SaslCompleted).mechanism == "ANONYMOUS"
    assert s.take_remaining() == AMQP_HEADER
    assert s.receive_data(b"more") == [] and s.take_remaining() == b"more"
    # composed: the engine gets the header and answers it after the outcome
    sc = SaslConnection.server(server(), "srv")
    events = sc.receive_data(data)
    assert [type(e) for e in events] == [SaslCompleted]
    out = sc.data_to_send()
    assert out.startswith(SASL_HEADER) and out.endswith(AMQP_HEADER)
    assert isinstance(frames_in(out[:-8])[-1], SaslOutcome)


def test_client_gets_amqp_bytes_pipelined_after_the_outcome() -> None:
    cc = SaslConnection.client(client(), "cli")
    cc.data_to_send()
    server_open = bytearray()
    encode_frame(server_open, 0, Open(container_id="srv"))
    mechanisms = frame(SaslMechanisms(sasl_server_mechanisms=["ANONYMOUS"]))
    cc.receive_data(SASL_HEADER + mechanisms)
    assert isinstance(frames_in(cc.data_to_send())[0], SaslInit)
    events = cc.receive_data(
        frame(SaslOutcome(code=SaslCode.OK)) + AMQP_HEADER + bytes(server_open)
    )
    assert [type(e) for e in events] == [SaslCompleted, ConnectionOpened]
    out = cc.data_to_send()
    assert out.startswith(AMQP_HEADER)


def test_composition_timers_and_delegation() -> None:
    cc = SaslConnection.client(client(handshake_timeout=10.0), "cli", idle_timeout=4.0)
    assert cc.tick(0.0) == 10.0  # the SASL timer, not the engine's
    assert cc.state is cc.connection.state  # attribute access reaches the engine
    assert cc.container_id == "cli"
    assert cc.tick(10.0) is None
    assert only(cc.poll_events(), SaslFailed).outcome is SaslCode.SYS_TEMP
    assert cc.is_closed
    cc, sc = sasl_pair(skw={}, ckw={})
    sc.connection.idle_timeout = 4.0
    exchange(cc, sc)
    assert sc.sasl.authenticated and sc.sasl.identity is None  # ANONYMOUS
    assert sc.tick(0.0) == 4.0  # the engine's idle timer now
    assert sc.poll_events() == []
    assert "SaslConnection(SaslServer(state=AUTHENTICATED" in repr(sc)


def test_composition_checks_the_engine_it_is_given() -> None:
    with pytest.raises(ValueError, match="send_header=False"):
        SaslConnection(server(), Connection("srv"))
    with pytest.raises(ValueError, match="send_header=True"):
        SaslConnection(client(), Connection("cli", send_header=False))
    opened = Connection("cli", send_header=False)
    opened.open()  # open() queues the header too
    SaslConnection(client(), opened)


def iter_chunks(data: bytes, n: int) -> Iterator[bytes]:
    for i in range(0, len(data), n):
        yield data[i : i + n]


def test_composed_server_is_fed_byte_by_byte_from_a_recording() -> None:
    """Record a whole client conversation, then replay it to a fresh server one byte at a time."""
    cc, sc = sasl_pair(ckw={}, skw={"mechanisms": ("ANONYMOUS",)})
    cc.open()
    p = exchange(cc, sc)
    recording = p.sent("c>s")
    fresh = SaslConnection.server(server(("ANONYMOUS",)), "srv2")
    events: list[Any] = []
    for piece in iter_chunks(recording, 1):
        events += fresh.receive_data(piece)
    assert [type(e) for e in events] == [SaslCompleted, ConnectionOpened]
