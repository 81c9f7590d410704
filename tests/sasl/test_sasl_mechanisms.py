"""Tests for the sans-IO SASL mechanisms, SCRAM helpers and credential stores."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from amqp10.sasl.credentials import (
    CredentialFormatError,
    InMemoryCredentialStore,
    PasswordHashCredential,
    ScramCredential,
    format_credential,
    format_scram_credential,
    make_decoy_credential,
    make_password_hash,
    make_scram_credential,
    parse_credential,
    parse_scram_credential,
    verify_password,
)
from amqp10.sasl.mechanisms import (
    MAX_RESPONSE_SIZE,
    AnonymousClient,
    AnonymousServer,
    ClientMechanism,
    ExternalClient,
    ExternalServer,
    PlainClient,
    PlainServer,
    RejectingServer,
    SaslAuthenticationError,
    SaslCode,
    SaslError,
    SaslMechanismError,
    SaslProtocolError,
    ScramClient,
    ScramServer,
    ServerChallenge,
    ServerMechanism,
    ServerOutcome,
)
from amqp10.sasl.scram import (
    SaslPrepError,
    ScramMessageError,
    b64encode,
    escape_saslname,
    parse_client_first,
    saslprep,
    scram_hash,
    unescape_saslname,
    xor_bytes,
)
from amqp10.sasl.selection import (
    client_choose,
    make_client_mechanism,
    make_server_mechanism,
    server_offer,
)

LOW = 16  # iteration count for tests that do not replay an RFC vector
SECRET = b"decoy-secret-for-tests-0123456789"
HASHES = ("SHA-1", "SHA-256", "SHA-512")
SCRAM_NAMES = tuple(f"SCRAM-{h}" for h in HASHES)


def make_store(*, secret: bytes = SECRET) -> InMemoryCredentialStore:
    store = InMemoryCredentialStore(secret=secret, default_iterations=LOW)
    store.add_user("alice", "secret")
    store.add_user("u,s=er", "pässword")
    return store


STORE = make_store()


def scram_client(
    hash_name: str = "SHA-256", username: str = "alice", password: str = "secret", authzid: str = ""
) -> ScramClient:
    return ScramClient(hash_name, username, password, authzid=authzid, min_iterations=LOW)


def run(client: ClientMechanism, server: ServerMechanism) -> ServerOutcome:
    """Pump one exchange to its outcome; verify the outcome on the client when ok."""
    step = server.step(client.initial_response())
    for _ in range(5):
        if isinstance(step, ServerOutcome):
            break
        step = server.step(client.challenge(step.challenge))
    assert isinstance(step, ServerOutcome)
    if step.ok:
        client.verify_outcome(step.additional_data)
    return step


def challenge_of(step: ServerChallenge | ServerOutcome) -> bytes:
    assert isinstance(step, ServerChallenge), step
    return step.challenge


def outcome_of(step: ServerChallenge | ServerOutcome) -> ServerOutcome:
    assert isinstance(step, ServerOutcome), step
    return step


def failed(step: ServerChallenge | ServerOutcome, code: SaslCode = SaslCode.AUTH) -> ServerOutcome:
    outcome = outcome_of(step)
    assert outcome.code is code, outcome
    assert outcome.identity is None
    return outcome


# --------------------------------------------------------------------------- RFC vectors

RFC5802 = {
    "hash": "SHA-1",
    "client_nonce": "fyko+d2lbbFgONRv9qkxdawL",
    "server_part": "3rfcNHYJY1ZVvWVs7j",
    "salt": "QSXCR+Q6sek8bf92",
    "client_first": b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
    "server_first": b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
    "client_final": b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,"
    b"p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
    "server_final": b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
}
RFC7677 = {
    "hash": "SHA-256",
    "client_nonce": "rOprNGfwEbeRWgbNEkqO",
    "server_part": "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    "salt": "W22ZaJ0SNY7soEsUEjb6gQ==",
    "client_first": b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
    "server_first": b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
    "client_final": b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    "server_final": b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
}
VECTORS = pytest.mark.parametrize("vec", [RFC5802, RFC7677], ids=["rfc5802", "rfc7677"])


@VECTORS
def test_rfc_vector_client(vec: dict[str, object]) -> None:
    client = ScramClient(str(vec["hash"]), "user", "pencil", nonce=str(vec["client_nonce"]))
    assert client.name == f"SCRAM-{vec['hash']}"
    assert client.initial_response() == vec["client_first"]
    assert client.challenge(vec["server_first"]) == vec["client_final"]  # type: ignore[arg-type]
    client.verify_outcome(vec["server_final"])  # type: ignore[arg-type]


@VECTORS
def test_rfc_vector_server(vec: dict[str, object]) -> None:
    store = InMemoryCredentialStore(secret=SECRET)
    salt = base64.b64decode(str(vec["salt"]))
    store.add_credential("user", make_scram_credential("pencil", str(vec["hash"]), 4096, salt))
    server = ScramServer(str(vec["hash"]), store, nonce=str(vec["server_part"]))
    assert challenge_of(server.step(vec["client_first"])) == vec["server_first"]  # type: ignore[arg-type]
    outcome = outcome_of(server.step(vec["client_final"]))  # type: ignore[arg-type]
    assert outcome.code is SaslCode.OK
    assert outcome.identity == "user"
    assert outcome.additional_data == vec["server_final"]
    assert server.outcome == outcome


@VECTORS
def test_rfc_vector_server_final_as_challenge(vec: dict[str, object]) -> None:
    """Some servers send server-final in a challenge and the outcome without data."""
    client = ScramClient(str(vec["hash"]), "user", "pencil", nonce=str(vec["client_nonce"]))
    client.initial_response()
    client.challenge(vec["server_first"])  # type: ignore[arg-type]
    assert client.challenge(vec["server_final"]) == b""  # type: ignore[arg-type]
    client.verify_outcome(None)
    client.verify_outcome(vec["server_final"])  # type: ignore[arg-type]


@VECTORS
def test_rfc_vector_tampered_server_signature(vec: dict[str, object]) -> None:
    client = ScramClient(str(vec["hash"]), "user", "pencil", nonce=str(vec["client_nonce"]))
    client.initial_response()
    client.challenge(vec["server_first"])  # type: ignore[arg-type]
    server_final = vec["server_final"]
    assert isinstance(server_final, bytes)
    good = base64.b64decode(server_final[2:])
    bad = bytes([good[0] ^ 1]) + good[1:]
    with pytest.raises(SaslAuthenticationError, match="server signature"):
        client.verify_outcome(b"v=" + base64.b64encode(bad))
    # A failed client stays failed.
    with pytest.raises(SaslAuthenticationError):
        client.verify_outcome(vec["server_final"])  # type: ignore[arg-type]


def test_sasl_code_matches_spec_xml() -> None:
    xml = Path(__file__).resolve().parents[2] / "../shared/spec/amqp-1.0/security.bare.xml"
    if not xml.exists():
        pytest.fail("spec XML not available (../shared/spec beside the repo)")
    root = ET.parse(xml).getroot()
    ns = {"a": "http://www.amqp.org/schema/amqp.xsd"}
    choices = root.findall(".//a:type[@name='sasl-code']/a:choice", ns)
    spec = {c.get("name"): int(c.get("value", "-1")) for c in choices}
    ours = {code.name.lower().replace("_", "-"): code.value for code in SaslCode}
    assert ours == spec


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("hash_name", HASHES)
def test_scram_round_trip(hash_name: str) -> None:
    outcome = run(scram_client(hash_name), ScramServer(hash_name, STORE))
    assert outcome.code is SaslCode.OK
    assert outcome.identity == "alice"
    assert outcome.additional_data is not None and outcome.additional_data.startswith(b"v=")


def test_scram_username_escaping_and_saslprep_round_trip() -> None:
    client = scram_client("SHA-256", "u,s=er", "pässword")
    first = client.initial_response()
    assert first.startswith(b"n,,n=u=2Cs=3Der,r=")
    server = ScramServer("SHA-256", STORE)
    step = server.step(first)
    outcome = outcome_of(server.step(client.challenge(challenge_of(step))))
    assert outcome.ok and outcome.identity == "u,s=er"


def test_scram_authzid_same_user_ok_other_user_refused() -> None:
    assert run(scram_client(authzid="alice"), ScramServer("SHA-256", STORE)).ok
    server = ScramServer("SHA-256", STORE)
    failed(server.step(scram_client(authzid="root").initial_response()))


def test_scram_without_initial_response() -> None:
    client = scram_client()
    server = ScramServer("SHA-256", STORE)
    assert challenge_of(server.step(None)) == b""
    step = server.step(client.challenge(b""))
    outcome = outcome_of(server.step(client.challenge(challenge_of(step))))
    assert outcome.ok
    client.verify_outcome(outcome.additional_data)


def test_scram_none_twice_fails() -> None:
    server = ScramServer("SHA-256", STORE)
    server.step(None)
    failed(server.step(None))


@pytest.mark.parametrize("hash_name", HASHES)
def test_scram_wrong_password(hash_name: str) -> None:
    outcome = run(scram_client(hash_name, password="wrong"), ScramServer(hash_name, STORE))
    assert outcome.code is SaslCode.AUTH
    assert outcome.additional_data == b"e=invalid-proof"
    assert "wrong password" in outcome.reason


def test_scram_unknown_user_looks_like_a_real_user() -> None:
    def server_first_for(store: InMemoryCredentialStore, user: str) -> bytes:
        return challenge_of(
            ScramServer("SHA-256", store).step(scram_client(username=user).initial_response())
        )

    def salt_and_count(message: bytes) -> tuple[bytes, bytes]:
        parts = dict(p.split(b"=", 1) for p in message.split(b","))
        return parts[b"s"], parts[b"i"]

    real = salt_and_count(server_first_for(STORE, "alice"))
    ghost = salt_and_count(server_first_for(STORE, "mallory"))
    assert len(base64.b64decode(ghost[0])) == len(base64.b64decode(real[0]))
    assert ghost[1] == real[1] == str(LOW).encode()
    # Stable across attempts, distinct per name, keyed by the store's secret.
    assert salt_and_count(server_first_for(STORE, "mallory")) == ghost
    assert salt_and_count(server_first_for(STORE, "trudy")) != ghost
    other = make_store(secret=b"another secret")
    assert salt_and_count(server_first_for(other, "mallory")) != ghost

    outcome = run(scram_client(username="mallory"), ScramServer("SHA-256", STORE))
    wrong_pw = run(scram_client(password="nope"), ScramServer("SHA-256", STORE))
    assert outcome.code is wrong_pw.code is SaslCode.AUTH
    assert outcome.additional_data == wrong_pw.additional_data
    assert "unknown user" in outcome.reason


def test_scram_replayed_client_final_is_refused() -> None:
    client = scram_client()
    server = ScramServer("SHA-256", STORE)
    first = client.initial_response()
    final = client.challenge(challenge_of(server.step(first)))
    assert outcome_of(server.step(final)).ok
    # An eavesdropper replays both messages against a fresh exchange.
    replay = ScramServer("SHA-256", STORE)
    replay.step(first)
    outcome = failed(replay.step(final))
    assert "nonce" in outcome.reason


def test_scram_mismatched_nonce_is_refused() -> None:
    client = scram_client()
    server = ScramServer("SHA-256", STORE)
    final = client.challenge(challenge_of(server.step(client.initial_response())))
    tampered = final.replace(b",r=", b",r=X", 1)
    assert "nonce" in failed(server.step(tampered)).reason


def manual_final(
    server_first: bytes,
    *,
    gs2: str,
    bare: str,
    password: str = "secret",
    hash_name: str = "SHA-256",
) -> bytes:
    """A client-final computed by hand, for headers ScramClient never sends."""
    h = scram_hash(hash_name)
    attrs = dict(p.split("=", 1) for p in server_first.decode().split(","))
    salted = h.salted_password(password, base64.b64decode(attrs["s"]), int(attrs["i"]))
    without = f"c={b64encode(gs2.encode())},r={attrs['r']}"
    auth = f"{bare},{server_first.decode()},{without}".encode()
    client_key = h.client_key(salted)
    proof = xor_bytes(client_key, h.hmac(h.digest(client_key), auth))
    return f"{without},p={b64encode(proof)}".encode()


def test_scram_y_flag_is_accepted_without_channel_binding() -> None:
    server = ScramServer("SHA-256", STORE)
    bare = "n=alice,r=abcdef"
    first = challenge_of(server.step(b"y,," + bare.encode()))
    assert outcome_of(server.step(manual_final(first, gs2="y,,", bare=bare))).ok


def test_scram_channel_binding_data_must_match_gs2_header() -> None:
    server = ScramServer("SHA-256", STORE)
    bare = "n=alice,r=abcdef"
    first = challenge_of(server.step(b"n,," + bare.encode()))
    outcome = failed(server.step(manual_final(first, gs2="y,,", bare=bare)))
    assert "channel binding" in outcome.reason


def test_scram_channel_binding_requested_is_refused() -> None:
    server = ScramServer("SHA-256", STORE)
    outcome = failed(server.step(b"p=tls-unique,,n=alice,r=abcdef"))
    assert outcome.additional_data == b"e=channel-binding-not-supported"


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"garbage",
        b"\xff\xfe\xfd",
        b"n,,n=alice,r=abc\xff",
        b"n,,",
        b"x,,n=alice,r=abc",
        b"n,n=alice,r=abc",
        b"n,b=bob,n=alice,r=abc",
        b"p=,,n=alice,r=abc",
        b"n,,r=abc",
        b"n,,n=alice",
        b"n,,n=alice,r=",
        b"n,,n=,r=abc",
        b"n,,n=al=ZZice,r=abc",
        b"n,,m=ext,n=alice,r=abc",
        b"n,,n=alice,r=ab\x7fc",
        b"n,,n=alice,r=abc\x00",
        b"n,,n=\x07bell,r=abc",
        b"n,,n=alice,,r=abc",
    ],
)
def test_scram_malformed_client_first(message: bytes) -> None:
    failed(ScramServer("SHA-256", STORE).step(message))


@pytest.mark.parametrize(
    "mangle",
    [
        lambda f: b"garbage",
        lambda f: b"\xff" + f,
        lambda f: f.split(b",p=")[0],  # no proof
        lambda f: f.replace(b"c=biws,", b""),  # no channel binding
        lambda f: f.replace(b"c=biws,", b"c=bi!s,"),  # not base64
        lambda f: b",".join(p for p in f.split(b",") if not p.startswith(b"r=")),
        lambda f: f.split(b",p=")[0] + b",p=AAAA",  # proof of the wrong length
        lambda f: f.split(b",p=")[0] + b",p=###",
        lambda f: f + b",p=AAAA",  # two proofs
        lambda f: f.replace(b",p=", b",x=1,p=").replace(b"c=biws", b"c=eSws"),
    ],
)
def test_scram_malformed_client_final(mangle: Callable[[bytes], bytes]) -> None:
    client = scram_client()
    server = ScramServer("SHA-256", STORE)
    final = client.challenge(challenge_of(server.step(client.initial_response())))
    failed(server.step(mangle(final)))


def test_scram_client_final_extension_is_covered_by_proof() -> None:
    client = scram_client()
    server = ScramServer("SHA-256", STORE)
    server_first = challenge_of(server.step(client.initial_response()))
    final = client.challenge(server_first)
    # Extensions are covered by the proof, so inserting one breaks it: still a clean failure.
    failed(server.step(final.replace(b",p=", b",x=ext,p=")))


def test_step_after_outcome_and_too_many_steps() -> None:
    server = ScramServer("SHA-256", STORE)
    outcome = run(scram_client(), server)
    assert outcome.ok
    for _ in range(3):
        assert "after the exchange finished" in failed(server.step(b"again")).reason
    assert server.outcome == outcome  # the real result is not overwritten


@pytest.mark.parametrize(
    "make_server",
    [
        lambda: ScramServer("SHA-256", STORE),
        lambda: PlainServer(STORE),
        lambda: ExternalServer("CN=alice"),
        AnonymousServer,
    ],
)
def test_oversize_response(make_server: Callable[[], ServerMechanism]) -> None:
    outcome = failed(make_server().step(b"a" * (MAX_RESPONSE_SIZE + 1)))
    assert "exceeds" in outcome.reason


def test_configurable_max_response_size() -> None:
    failed(PlainServer(STORE, max_response_size=8).step(b"\x00alice\x00secret"))
    assert outcome_of(PlainServer(STORE, max_response_size=13).step(b"\x00alice\x00secret")).ok


class BrokenStore:
    def lookup(self, username: str, mechanism: str) -> ScramCredential | None:
        raise RuntimeError("database is down")

    def decoy(self, username: str, mechanism: str) -> ScramCredential:
        raise RuntimeError("database is down")


class WrongHashStore:
    def lookup(self, username: str, mechanism: str) -> ScramCredential | None:
        return STORE.lookup(username, "SCRAM-SHA-1")

    def decoy(self, username: str, mechanism: str) -> ScramCredential:
        return STORE.decoy(username, "SCRAM-SHA-1")


def test_internal_errors_become_sys_outcomes() -> None:
    outcome = failed(ScramServer("SHA-256", BrokenStore()).step(b"n,,n=alice,r=abc"), SaslCode.SYS)
    assert "database is down" in outcome.reason
    failed(PlainServer(BrokenStore()).step(b"\x00alice\x00secret"), SaslCode.SYS)
    failed(ScramServer("SHA-256", WrongHashStore()).step(b"n,,n=alice,r=abc"), SaslCode.SYS)


def test_plain_round_trip_and_failures() -> None:
    ok = run(PlainClient("alice", "secret"), PlainServer(STORE))
    assert ok.ok and ok.identity == "alice" and ok.additional_data is None
    assert run(PlainClient("alice", "secret", authzid="alice"), PlainServer(STORE)).ok
    wrong = run(PlainClient("alice", "wrong"), PlainServer(STORE))
    ghost = run(PlainClient("mallory", "secret"), PlainServer(STORE))
    assert wrong.code is ghost.code is SaslCode.AUTH
    assert wrong.additional_data is ghost.additional_data is None
    assert "wrong password" in wrong.reason and "unknown user" in ghost.reason
    assert (
        run(PlainClient("alice", "secret", authzid="root"), PlainServer(STORE)).code
        is SaslCode.AUTH
    )


def test_plain_against_scram_credentials_with_saslprep() -> None:
    # "ä" precomposed vs. "a" + combining diaeresis: the same password after NFKC.
    assert run(PlainClient("u,s=er", "pa\u0308ssword"), PlainServer(STORE)).ok


def test_plain_without_initial_response() -> None:
    server = PlainServer(STORE)
    assert challenge_of(server.step(None)) == b""
    assert outcome_of(server.step(b"\x00alice\x00secret")).ok
    server = PlainServer(STORE)
    server.step(None)
    failed(server.step(None))


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"alice",
        b"\x00alice",
        b"\x00alice\x00",
        b"\x00\x00secret",
        b"\x00alice\x00secret\x00",
        b"\x00al\xffice\x00secret",
        b"\x00\x07\x00secret",
    ],
)
def test_plain_malformed(message: bytes) -> None:
    failed(PlainServer(STORE).step(message))


def test_plain_client_refuses_bad_arguments_and_challenges() -> None:
    with pytest.raises(ValueError):
        PlainClient("", "x")
    with pytest.raises(ValueError):
        PlainClient("a\x00b", "x")
    with pytest.raises(SaslProtocolError, match="challenge"):
        PlainClient("a", "b").challenge(b"")


def test_external() -> None:
    ok = run(ExternalClient(), ExternalServer("CN=alice"))
    assert ok.ok and ok.identity == "CN=alice"
    assert run(ExternalClient("CN=alice"), ExternalServer("CN=alice")).ok
    assert ExternalClient().initial_response() == b""
    failed(ExternalServer("CN=alice").step(b"CN=root"))
    failed(ExternalServer(None).step(b""))
    failed(ExternalServer("CN=alice").step(b"\xff"))
    server = ExternalServer("CN=alice")
    assert challenge_of(server.step(None)) == b""
    assert outcome_of(server.step(b"")).ok


def test_anonymous() -> None:
    client = AnonymousClient("someone@example.com")
    server = AnonymousServer()
    outcome = run(client, server)
    assert outcome.ok and outcome.identity is None
    assert server.trace == "someone@example.com"
    assert outcome_of(AnonymousServer().step(None)).ok
    failed(AnonymousServer().step(b"\xc3"))
    with pytest.raises(SaslProtocolError):
        client.challenge(b"x")


# --------------------------------------------------------------------------- SCRAM client errors


def started(hash_name: str = "SHA-256", max_iterations: int = 10**6) -> ScramClient:
    client = ScramClient(
        hash_name,
        "user",
        "pencil",
        nonce="cnonce",
        min_iterations=LOW,
        max_iterations=max_iterations,
    )
    client.initial_response()
    return client


@pytest.mark.parametrize(
    ("server_first", "match"),
    [
        (b"r=cnonceS,s=QSXCR+Q6sek8bf92,i=15", "below the minimum"),
        (b"r=cnonceS,s=QSXCR+Q6sek8bf92,i=99999999", "above the maximum"),
        (b"r=othernonce,s=QSXCR+Q6sek8bf92,i=16", "does not extend"),
        (b"r=cnonce,s=QSXCR+Q6sek8bf92,i=16", "does not extend"),
        (b"m=x,r=cnonceS,s=QSXCR+Q6sek8bf92,i=16", "extension"),
        (b"r=cnonceS,i=16", "'s='"),
        (b"r=cnonceS,s=QSXCR+Q6sek8bf92", "'i='"),
        (b"r=cnonceS,s=!!,i=16", "base64"),
        (b"r=cnonceS,s=,i=16", "empty salt"),
        (b"r=cnonceS,s=QSXCR+Q6sek8bf92,i=-1", "decimal"),
        (b"r=cnonceS,s=QSXCR+Q6sek8bf92,i=0", "positive"),
        (b"\xff", "UTF-8"),
        (b"", "attribute"),
    ],
)
def test_scram_client_bad_server_first(server_first: bytes, match: str) -> None:
    client = started(max_iterations=1000)
    with pytest.raises(SaslProtocolError, match=match):
        client.challenge(server_first)
    with pytest.raises(SaslProtocolError):
        client.challenge(server_first)  # failed clients stay failed


def test_scram_client_accepts_server_first_extensions() -> None:
    assert started().challenge(b"r=cnonceS,s=QSXCR+Q6sek8bf92,i=16,x=future").startswith(b"c=biws,")


def test_scram_client_outcome_checks() -> None:
    with pytest.raises(SaslAuthenticationError, match="before the exchange completed"):
        started().verify_outcome(None)
    client = started()
    client.challenge(b"r=cnonceS,s=QSXCR+Q6sek8bf92,i=16")
    with pytest.raises(SaslAuthenticationError, match="without its server signature"):
        client.verify_outcome(None)
    client = started()
    client.challenge(b"r=cnonceS,s=QSXCR+Q6sek8bf92,i=16")
    with pytest.raises(SaslAuthenticationError, match="invalid-proof"):
        client.verify_outcome(b"e=invalid-proof")
    client = started()
    client.challenge(b"r=cnonceS,s=QSXCR+Q6sek8bf92,i=16")
    with pytest.raises(SaslAuthenticationError):
        client.verify_outcome(b"v=not base64")
    client = started()
    client.challenge(b"r=cnonceS,s=QSXCR+Q6sek8bf92,i=16")
    with pytest.raises(SaslProtocolError):
        client.challenge(b"\xff")


def test_scram_client_state_misuse() -> None:
    client = started()
    with pytest.raises(SaslProtocolError, match="already started"):
        client.initial_response()
    fresh = scram_client()
    assert fresh.challenge(b"").startswith(b"n,,n=alice,r=")  # empty challenge asks for it
    with pytest.raises(ValueError):
        ScramClient("MD5", "a", "b")
    with pytest.raises(ValueError):
        ScramClient("SHA-256", "", "b")
    with pytest.raises(SaslPrepError):
        ScramClient("SHA-256", "a\u0007", "b")


# --------------------------------------------------------------------------- SASLprep and grammar


@pytest.mark.parametrize(
    ("raw", "prepared"),
    [
        ("I\u00adX", "IX"),  # RFC 4013 §3 examples
        ("user", "user"),
        ("USER", "USER"),
        ("\u00aa", "a"),
        ("\u2168", "IX"),
        ("a\u00a0b", "a b"),  # non-ASCII space maps to space
        ("\u0627\u0628", "\u0627\u0628"),
    ],
)
def test_saslprep(raw: str, prepared: str) -> None:
    assert saslprep(raw) == prepared


@pytest.mark.parametrize("raw", ["\u0007", "\u0627\u0031", "a\ue000", "\u0627a\u0628"])
def test_saslprep_prohibited(raw: str) -> None:
    with pytest.raises(SaslPrepError):
        saslprep(raw)


def test_saslprep_unassigned_only_in_queries() -> None:
    unassigned = "\u0221"  # unassigned in Unicode 3.2
    assert saslprep(unassigned) == unassigned
    with pytest.raises(SaslPrepError, match="unassigned"):
        saslprep(unassigned, allow_unassigned=False)


@given(st.text(max_size=30))
def test_saslname_escape_round_trip(name: str) -> None:
    escaped = escape_saslname(name)
    assert "," not in escaped
    assert unescape_saslname(escaped) == name


def test_parse_client_first_fields() -> None:
    first = parse_client_first(b"n,a=b=2Cob,n=u=3Dser,r=abc,x=ext")
    assert (first.gs2_header, first.authzid, first.username, first.nonce) == (
        "n,a=b=2Cob,",
        "b,ob",
        "u=ser",
        "abc",
    )
    assert first.bare == "n=u=3Dser,r=abc,x=ext"
    with pytest.raises(ScramMessageError):
        parse_client_first(b"n,a=,n=user,r=abc")


# --------------------------------------------------------------------------- credentials


@pytest.mark.parametrize("hash_name", HASHES)
def test_credential_text_round_trip(hash_name: str) -> None:
    cred = make_scram_credential("secret", hash_name, LOW)
    text = format_scram_credential(cred)
    assert text.startswith(f"SCRAM-{hash_name}${LOW}$")
    assert parse_scram_credential(text + "\n") == cred
    assert verify_password(cred, "secret")
    assert not verify_password(cred, "Secret")
    assert not verify_password(cred, "\u0007")
    assert "stored_key" not in repr(cred) and "salt" not in repr(cred)


def test_credential_accepts_mechanism_name_and_fixed_salt() -> None:
    a = make_scram_credential("pw", "SCRAM-SHA-256", LOW, b"salt")
    b = make_scram_credential("pw", "SHA-256", LOW, b"salt")
    assert a == b and a.mechanism == "SCRAM-SHA-256"


GOOD = format_scram_credential(make_scram_credential("pw", "SHA-256", LOW, b"0123456789abcdef"))


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("", "expected 5"),
        ("SCRAM-SHA-256$16$abc", "got 3"),
        (GOOD + "$extra", "got 6"),
        (GOOD.replace("SCRAM-SHA-256", "SCRAM-MD5"), "unknown mechanism"),
        (GOOD.replace("SCRAM-SHA-256", "PLAIN"), "unknown mechanism"),
        (GOOD.replace("$16$", "$sixteen$"), "iteration count"),
        (GOOD.replace("$16$", "$0$"), "iteration count"),
        (GOOD.replace("$16$", "$-16$"), "iteration count"),
        (GOOD.replace("$16$", "$$"), "iteration count"),
        ("$".join([*GOOD.split("$")[:2], "!!!", *GOOD.split("$")[3:]]), "salt is not valid base64"),
        ("$".join([*GOOD.split("$")[:2], "", *GOOD.split("$")[3:]]), "salt must not be empty"),
        ("$".join([*GOOD.split("$")[:3], "QUJD", GOOD.split("$")[4]]), "keys must be 32 bytes"),
        ("$".join([*GOOD.split("$")[:4], "é"]), "ServerKey is not valid base64"),
        (GOOD.replace("SCRAM-SHA-256", "SCRAM-SHA-1"), "keys must be 20 bytes"),
    ],
)
def test_credential_parse_errors(line: str, match: str) -> None:
    with pytest.raises(CredentialFormatError, match=match) as info:
        parse_scram_credential(line)
    message = str(info.value)
    assert "\n" not in message and message.startswith("bad SCRAM credential: ")
    assert GOOD.split("$")[3] not in message  # never echoes key material


def test_credential_validation() -> None:
    with pytest.raises(ValueError):
        ScramCredential(hash_name="MD5", salt=b"s", iterations=1, stored_key=b"", server_key=b"")
    with pytest.raises(ValueError):
        make_scram_credential("pw", "SHA-256", 0)
    with pytest.raises(SaslPrepError):
        make_scram_credential("\u0221", "SHA-256", LOW)  # unassigned: not for stored strings


def test_in_memory_store() -> None:
    store = InMemoryCredentialStore(secret=SECRET, default_iterations=LOW)
    store.add_user("bob", "pw", hash_names=("SHA-256",))
    cred = store.lookup("bob", "SCRAM-SHA-256")
    assert cred is not None and cred.iterations == LOW
    assert store.lookup("bob", "SCRAM-SHA-1") is None
    assert store.lookup("carol", "SCRAM-SHA-256") is None
    # PLAIN finds whichever hash is stored.
    assert run(PlainClient("bob", "pw"), PlainServer(store)).ok
    store.add_credential("carol", make_scram_credential("pw2", "SHA-512", LOW))
    assert run(scram_client("SHA-512", "carol", "pw2"), ScramServer("SHA-512", store)).ok
    store.remove_user("bob")
    store.remove_user("nobody")
    assert store.lookup("bob", "SCRAM-SHA-256") is None
    decoy = store.decoy("ghost", "SCRAM-SHA-256")
    assert decoy == make_decoy_credential(SECRET, "ghost", "SHA-256", LOW)
    assert not verify_password(decoy, "")
    with pytest.raises(ValueError):
        store.add_user("", "pw")


# --------------------------------------------------------------------------- selection


@pytest.mark.parametrize(
    ("offered", "kwargs", "chosen"),
    [
        ((*SCRAM_NAMES, "PLAIN", "ANONYMOUS"), {}, "SCRAM-SHA-512"),
        (("PLAIN", "SCRAM-SHA-1", "SCRAM-SHA-256"), {}, "SCRAM-SHA-256"),
        (("ANONYMOUS", "PLAIN"), {}, "PLAIN"),
        (("ANONYMOUS", "EXTERNAL", "SCRAM-SHA-256"), {"has_client_certificate": True}, "EXTERNAL"),
        (("ANONYMOUS", "SCRAM-SHA-256"), {"has_client_certificate": True}, "SCRAM-SHA-256"),
        (("ANONYMOUS", "PLAIN"), {"has_credentials": False}, "ANONYMOUS"),
        (
            ("EXTERNAL", "ANONYMOUS"),
            {"has_credentials": False, "has_client_certificate": True},
            "EXTERNAL",
        ),
        (("PLAIN", "SCRAM-SHA-512"), {"preferred": ["PLAIN", "SCRAM-SHA-512"]}, "PLAIN"),
    ],
)
def test_client_choose(offered: tuple[str, ...], kwargs: dict[str, object], chosen: str) -> None:
    assert client_choose(offered, **kwargs) == chosen  # type: ignore[arg-type]


def test_client_choose_errors() -> None:
    with pytest.raises(SaslMechanismError, match="no SASL mechanism in common"):
        client_choose(["ANONYMOUS"])  # has credentials: no silent downgrade
    with pytest.raises(SaslMechanismError, match="no SASL mechanism in common"):
        client_choose(["GSSAPI"], has_credentials=False)
    with pytest.raises(SaslMechanismError, match="unsupported"):
        client_choose(["GSSAPI"], preferred=["GSSAPI"])


def test_make_client_mechanism() -> None:
    for name in SCRAM_NAMES:
        mech = make_client_mechanism(name, username="a", password="b")
        assert isinstance(mech, ScramClient) and mech.name == name
    assert isinstance(make_client_mechanism("PLAIN", username="a", password="b"), PlainClient)
    assert isinstance(make_client_mechanism("EXTERNAL"), ExternalClient)
    assert make_client_mechanism("ANONYMOUS", trace="t").initial_response() == b"t"
    with pytest.raises(SaslMechanismError, match="username"):
        make_client_mechanism("PLAIN")
    with pytest.raises(SaslMechanismError, match="unsupported"):
        make_client_mechanism("GSSAPI")


def test_server_offer_and_factory() -> None:
    allowed = ["SCRAM-SHA-256", "PLAIN", "EXTERNAL", "GSSAPI", "PLAIN"]
    assert server_offer(allowed) == ("SCRAM-SHA-256", "PLAIN")
    assert server_offer(allowed, tls_identity="CN=x") == ("SCRAM-SHA-256", "PLAIN", "EXTERNAL")

    scram = make_server_mechanism("SCRAM-SHA-256", allowed=allowed, store=STORE)
    assert isinstance(scram, ScramServer) and scram.name == "SCRAM-SHA-256"
    assert run(scram_client(), scram).ok
    assert isinstance(make_server_mechanism("PLAIN", allowed=allowed, store=STORE), PlainServer)
    external = make_server_mechanism("EXTERNAL", allowed=allowed, store=None, tls_identity="CN=x")
    assert outcome_of(external.step(b"")).identity == "CN=x"
    anonymous = make_server_mechanism("ANONYMOUS", allowed=["ANONYMOUS"], store=None)
    assert isinstance(anonymous, AnonymousServer)

    for name in ("ANONYMOUS", "SCRAM-SHA-1", "GSSAPI", "x" * 1000):
        rejected = make_server_mechanism(name, allowed=allowed, store=STORE)
        assert isinstance(rejected, RejectingServer)
        failed(rejected.step(b"anything"))
        failed(rejected.step(None))
    no_store = make_server_mechanism("PLAIN", allowed=allowed, store=None)
    failed(no_store.step(b"\x00alice\x00secret"), SaslCode.SYS_PERM)


def test_errors_form_one_family() -> None:
    for cls in (SaslAuthenticationError, SaslProtocolError, SaslMechanismError):
        assert issubclass(cls, SaslError)


# --------------------------------------------------------------------------- property tests

SERVER_FACTORIES: dict[str, Callable[[], ServerMechanism]] = {
    "ANONYMOUS": AnonymousServer,
    "PLAIN": lambda: PlainServer(STORE),
    "EXTERNAL": lambda: ExternalServer("CN=alice"),
    "EXTERNAL-no-tls": lambda: ExternalServer(None),
    "REJECT": lambda: make_server_mechanism("GSSAPI", allowed=(), store=STORE),
    **{name: (lambda name=name: ScramServer(name, STORE)) for name in SCRAM_NAMES},  # type: ignore[misc]
}
MAX_STEPS_BEFORE_OUTCOME = 3


def check_steps(server: ServerMechanism, responses: list[bytes | None]) -> list[ServerOutcome]:
    """Only challenges or outcomes; at most three steps to the first outcome; then failures."""
    outcomes: list[ServerOutcome] = []
    for index, response in enumerate(responses):
        result = server.step(response)
        assert isinstance(result, ServerChallenge | ServerOutcome)
        if isinstance(result, ServerChallenge):
            assert not outcomes
            assert index < MAX_STEPS_BEFORE_OUTCOME
            assert isinstance(result.challenge, bytes)
        else:
            assert isinstance(result.code, SaslCode)
            if outcomes:
                assert not result.ok
            outcomes.append(result)
    return outcomes


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(sorted(SERVER_FACTORIES)),
    responses=st.lists(st.none() | st.binary(max_size=300), min_size=1, max_size=6),
)
def test_fuzz_servers_never_raise(name: str, responses: list[bytes | None]) -> None:
    outcomes = check_steps(SERVER_FACTORIES[name](), responses)
    if name in SCRAM_NAMES or name.startswith("REJECT") or name == "EXTERNAL-no-tls":
        assert not any(o.ok for o in outcomes)


# Each client-first field: a valid value, or (for at most one field) a doubtful one, so
# that most examples get past client-first and exercise the proof step.
_CLIENT_FIRST_FIELDS: dict[str, tuple[str, st.SearchStrategy[str]]] = {
    "flag": ("n", st.sampled_from(["y", "p=tls-unique", "x", "", "n=a"])),
    "authz": ("", st.sampled_from(["a=alice", "a=bob", "a=", "b"])),
    "user": (
        "alice",
        st.text(alphabet=st.sampled_from("abc=,2CD3\x00\x07é\u0627 "), max_size=8)
        | st.sampled_from(["u=2Cs=3Der", "mallory", ""]),
    ),
    "nonce": ("abc", st.text(max_size=6)),
    "extra": ("", st.sampled_from([",x=1", ",", ",m=1"])),
}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    hash_name=st.sampled_from(HASHES),
    doubtful=st.sampled_from([None, *_CLIENT_FIRST_FIELDS]),
    data=st.data(),
)
def test_fuzz_scram_structured(hash_name: str, doubtful: str | None, data: st.DataObject) -> None:
    """Plausibly-shaped SCRAM messages reach the deeper states; none may get in or raise."""
    fields = {name: valid for name, (valid, _) in _CLIENT_FIRST_FIELDS.items()}
    if doubtful is not None:
        fields[doubtful] = data.draw(_CLIENT_FIRST_FIELDS[doubtful][1], label=doubtful)
    flag, authz, user, nonce, extra = (
        fields[k] for k in ("flag", "authz", "user", "nonce", "extra")
    )
    server = ScramServer(hash_name, STORE)
    gs2 = f"{flag},{authz},"
    first = server.step(f"{gs2}n={user},r={nonce}{extra}".encode())
    if isinstance(first, ServerOutcome):
        assert not first.ok
        event("refused at client-first")
        return
    event("reached client-final")
    attrs = dict(p.split("=", 1) for p in first.challenge.decode().split(","))
    combined = attrs["r"]
    size = scram_hash(hash_name).digest_size
    c = data.draw(st.sampled_from([gs2, "n,,", "y,,", ""]), label="c")
    r = data.draw(st.sampled_from([combined, combined + "x", nonce, ""]), label="r")
    proof = data.draw(st.binary(min_size=size, max_size=size) | st.binary(max_size=70), label="p")
    tail = data.draw(st.sampled_from(["", ",x=1", ",p=AAAA"]), label="tail")
    final = f"c={b64encode(c.encode())},r={r},p={b64encode(proof)}{tail}".encode()
    outcome = outcome_of(server.step(final))
    assert not outcome.ok
    check_steps(server, [final, None])


@settings(max_examples=300, deadline=None)
@given(
    messages=st.lists(st.binary(max_size=200), min_size=1, max_size=4),
    prefix=st.sampled_from([b"", b"r=cnonce", b"r=cnonceS,s=QSXCR+Q6sek8bf92,i=16", b"v=", b"e="]),
)
def test_fuzz_scram_client_raises_only_sasl_errors(messages: list[bytes], prefix: bytes) -> None:
    client = started()
    for message in messages:
        try:
            response = client.challenge(prefix + message)
        except SaslError:
            continue
        assert isinstance(response, bytes)
    with contextlib.suppress(SaslError):
        client.verify_outcome(prefix + messages[0])


# -- RabbitMQ password hashes: PLAIN verifies them, SCRAM cannot use them ---------------

SALT = bytes.fromhex("908dc60a")


def test_matches_rabbitmqs_documented_algorithm() -> None:
    # base64(salt ++ sha256(salt ++ utf8(password))), salt 4 bytes (RabbitMQ's docs).
    expected = base64.b64encode(SALT + hashlib.sha256(SALT + b"test12").digest()).decode()
    cred = make_password_hash("test12", salt=SALT)
    assert cred.to_rabbit() == expected and len(expected) == 48
    parsed = PasswordHashCredential.from_rabbit(expected, "rabbit_password_hashing_sha256")
    assert parsed == cred and parsed.verify("test12") and not parsed.verify("test13")


@pytest.mark.parametrize(
    "algorithm",
    [
        "rabbit_password_hashing_sha256",
        "rabbit_password_hashing_sha512",
        "rabbit_password_hashing_md5",
    ],
)
def test_every_algorithm_round_trips_through_the_text_form(algorithm: str) -> None:
    cred = make_password_hash("pässword", algorithm)
    text = format_credential(cred)
    assert text.startswith(algorithm + "$")
    again = parse_credential(text)
    assert again == cred and verify_password(again, "pässword")
    assert not verify_password(again, "password")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rabbit_password_hashing_sha256$!!!", "not valid base64"),
        ("rabbit_password_hashing_sha256$AAAA", "salt must be 4 bytes"),
        (
            "rabbit_password_hashing_sha256$" + base64.b64encode(bytes(20)).decode(),
            "digest must be 32",
        ),
        ("rabbit_password_hashing_sha1$AAAA", "bad SCRAM credential"),
    ],
)
def test_bad_hashes_are_refused(text: str, message: str) -> None:
    with pytest.raises(CredentialFormatError, match=message):
        parse_credential(text)


def store_with_rabbit_user() -> InMemoryCredentialStore:
    store = InMemoryCredentialStore()  # the decoys' iteration count: what clients accept
    store.add_credential("guest", make_password_hash("guest"))
    return store


def test_plain_login_with_a_rabbit_hash() -> None:
    store = store_with_rabbit_user()
    ok = run(PlainClient("guest", "guest"), PlainServer(store))
    assert ok.ok and ok.identity == "guest"
    wrong = run(PlainClient("guest", "nope"), PlainServer(store))
    assert not wrong.ok and "wrong password" in wrong.reason


def test_scram_login_for_a_hash_only_user_fails_with_the_reason() -> None:
    store = store_with_rabbit_user()
    out = run(ScramClient("SCRAM-SHA-256", "guest", "guest"), ScramServer("SCRAM-SHA-256", store))
    assert not out.ok
    assert "only a RabbitMQ password hash, usable with PLAIN only" in out.reason
    ghost = run(ScramClient("SCRAM-SHA-256", "ghost", "x"), ScramServer("SCRAM-SHA-256", store))
    assert not ghost.ok and "unknown user" in ghost.reason


def test_plain_with_a_rabbit_hash_spends_the_decoys_pbkdf2_time_too() -> None:
    calls: list[str] = []

    class CountingStore(InMemoryCredentialStore):
        def decoy(self, username: str, mechanism: str) -> ScramCredential:
            calls.append(username)
            return super().decoy(username, mechanism)

    store = CountingStore(default_iterations=LOW)
    store.add_credential("guest", make_password_hash("guest"))
    assert run(PlainClient("guest", "guest"), PlainServer(store)).ok
    assert calls == ["guest"]


def test_mssbcbs_server_takes_no_identity_now_and_is_offered_only_when_allowed() -> None:
    """MSSBCBS (Azure's clients): the exchange succeeds at once with no identity (tokens
    follow on $cbs); it is advertised only where allowed, and refused by name otherwise."""
    assert "MSSBCBS" in server_offer(["MSSBCBS", "ANONYMOUS"])
    assert "MSSBCBS" not in server_offer(["ANONYMOUS", "PLAIN"])
    server = make_server_mechanism("MSSBCBS", allowed={"MSSBCBS"}, store=None)
    outcome = server.step(b"")
    assert isinstance(outcome, ServerOutcome)
    assert (outcome.code, outcome.identity) == (SaslCode.OK, None)
    refused = make_server_mechanism("MSSBCBS", allowed={"ANONYMOUS"}, store=None).step(b"")
    assert isinstance(refused, ServerOutcome) and refused.code is SaslCode.AUTH
