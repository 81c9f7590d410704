"""SASL mechanisms, sans-IO: client and server objects that exchange bytes.

The SASL frames of AMQP Part 5 §5.3 carry what these objects produce: a client's
`initial_response()` goes in sasl-init, `challenge()` answers each sasl-challenge with a
sasl-response, and `verify_outcome()` checks a successful sasl-outcome's additional-data.
A server mechanism's `step()` takes sasl-init's initial-response (None when absent) and
then each sasl-response, and returns either a challenge to send or the outcome.

Server mechanisms never raise on peer input: malformed, oversize, out-of-order or wrong
data becomes an `auth` outcome, and an internal failure (say, a broken credential store)
becomes `sys`. Every server mechanism finishes within a fixed number of steps.
"""

from __future__ import annotations

import enum
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol, TypeAlias

from ..types import SaslCode  # re-exported below; its one definition is in amqp10.types
from .credentials import (
    Credential,
    CredentialStore,
    PasswordHashCredential,
    ScramCredential,
    verify_password,
)
from .scram import (
    ClientFirst,
    SaslPrepError,
    ScramHash,
    ScramMessageError,
    b64encode,
    client_final_without_proof,
    client_first,
    make_nonce,
    parse_client_final,
    parse_client_first,
    parse_server_final,
    parse_server_first,
    saslprep,
    scram_hash,
    server_first,
    xor_bytes,
)

__all__ = [
    "DEFAULT_MAX_ITERATIONS",
    "DEFAULT_MIN_ITERATIONS",
    "MAX_RESPONSE_SIZE",
    "AnonymousClient",
    "AnonymousServer",
    "ClientMechanism",
    "ExternalClient",
    "ExternalServer",
    "PlainClient",
    "PasswordCheck",
    "PlainServer",
    "RejectingServer",
    "SaslAuthenticationError",
    "SaslCode",
    "SaslError",
    "SaslMechanismError",
    "SaslProtocolError",
    "ScramClient",
    "ScramServer",
    "ServerChallenge",
    "ServerMechanism",
    "ServerOutcome",
    "ServerStep",
]

MAX_RESPONSE_SIZE = 64 * 1024
"""Default cap, in bytes, on one initial-response or response a server mechanism accepts."""

DEFAULT_MIN_ITERATIONS = 4096
"""The lowest SCRAM iteration count a client accepts (RFC 7677 §4 floor)."""

DEFAULT_MAX_ITERATIONS = 10_000_000
"""The highest SCRAM iteration count a client accepts; more is a server burning our CPU."""

PasswordCheck: TypeAlias = "Callable[[str, str], str | None]"
"""PLAIN's hook before the store: (user name, password) -> the identity, or None (check the store)."""

_NONCE_BYTES = 18  # 144 bits, 24 base64 characters


# --------------------------------------------------------------------------- errors and results


class SaslError(Exception):
    """Base class of SASL failures raised on the client side or for local misuse."""


class SaslProtocolError(SaslError):
    """The peer sent a message the mechanism cannot accept (malformed, unexpected, too weak)."""


class SaslAuthenticationError(SaslError):
    """Authentication failed, or the server could not prove it knows the password."""


class SaslMechanismError(SaslError):
    """No usable mechanism: nothing in common, unknown name, or missing credentials."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerChallenge:
    """The server mechanism wants another round trip: send this in a sasl-challenge."""

    challenge: bytes
    """The challenge bytes (possibly empty)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerOutcome:
    """The exchange is over: send a sasl-outcome with `code` and `additional_data`."""

    code: SaslCode
    """The sasl-code to send."""
    identity: str | None = None
    """The authenticated identity on success; None on failure and for ANONYMOUS."""
    additional_data: bytes | None = None
    """additional-data for the sasl-outcome (SCRAM's server-final-message), or None."""
    reason: str = ""
    """Why, in one line, for the server's logs only: never send it to the peer."""
    username: str | None = None
    """On a failure, the user name the client claimed (for throttling by user), if any."""

    @property
    def ok(self) -> bool:
        """True when the code is `SaslCode.OK`."""
        return self.code == SaslCode.OK


ServerStep: TypeAlias = ServerChallenge | ServerOutcome
"""What `ServerMechanism.step` returns."""


# --------------------------------------------------------------------------- interfaces


class ClientMechanism(Protocol):
    """The client half of one SASL mechanism."""

    @property
    def name(self) -> str:
        """The mechanism name sent in sasl-init, e.g. "SCRAM-SHA-256"."""
        ...

    def initial_response(self) -> bytes | None:
        """The initial-response for sasl-init (None to send none)."""
        ...

    def challenge(self, data: bytes) -> bytes:
        """The sasl-response to a sasl-challenge; raises `SaslError` on a bad challenge."""
        ...

    def verify_outcome(self, additional_data: bytes | None) -> None:
        """Check a sasl-outcome whose code is ok; raises `SaslAuthenticationError`."""
        ...


class ServerMechanism(Protocol):
    """The server half of one SASL mechanism."""

    @property
    def name(self) -> str:
        """The mechanism name, as offered in sasl-mechanisms."""
        ...

    def step(self, response: bytes | None) -> ServerStep:
        """Consume sasl-init's initial-response (first call) or a sasl-response.

        Never raises because of the peer's bytes.
        """
        ...


class _MalformedResponse(ValueError):
    """Peer bytes a non-SCRAM server mechanism cannot parse."""


_PEER_INPUT_ERRORS = (_MalformedResponse, ScramMessageError, SaslPrepError)


def _utf8(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _MalformedResponse(f"{what} is not valid UTF-8") from None


def _fail(
    reason: str,
    code: SaslCode = SaslCode.AUTH,
    data: bytes | None = None,
    username: str | None = None,
) -> ServerOutcome:
    return ServerOutcome(code=code, additional_data=data, reason=reason, username=username)


# --------------------------------------------------------------------------- client side


class _SingleMessageClient:
    """A mechanism whose only message is the initial response (ANONYMOUS, PLAIN, EXTERNAL)."""

    name: str

    def __init__(self, message: bytes) -> None:
        self._message = message

    def initial_response(self) -> bytes | None:
        """The whole client message."""
        return self._message

    def challenge(self, data: bytes) -> bytes:
        """These mechanisms take no challenge: always raises `SaslProtocolError`."""
        raise SaslProtocolError(
            f"{self.name}: server sent a challenge, which {self.name} never takes"
        )

    def verify_outcome(self, additional_data: bytes | None) -> None:
        """Nothing to verify: the server proves nothing in these mechanisms."""


class AnonymousClient(_SingleMessageClient):
    """ANONYMOUS (RFC 4505): no credentials, an optional trace string."""

    name = "ANONYMOUS"

    def __init__(self, trace: str = "") -> None:
        super().__init__(trace.encode("utf-8"))


class PlainClient(_SingleMessageClient):
    """PLAIN (RFC 4616): sends the password in clear, so use it only over TLS."""

    name = "PLAIN"

    def __init__(self, username: str, password: str, authzid: str = "") -> None:
        if not username or not password:
            raise ValueError("PLAIN needs a non-empty username and password")
        if "\x00" in username or "\x00" in password or "\x00" in authzid:
            raise ValueError("PLAIN fields must not contain NUL")
        super().__init__(f"{authzid}\x00{username}\x00{password}".encode())


class ExternalClient(_SingleMessageClient):
    """EXTERNAL (RFC 4422 App. A): identity comes from TLS; optionally ask for an authzid."""

    name = "EXTERNAL"

    def __init__(self, authzid: str = "") -> None:
        super().__init__(authzid.encode("utf-8"))


class _ClientState(enum.Enum):
    START = enum.auto()
    FIRST_SENT = enum.auto()
    FINAL_SENT = enum.auto()
    VERIFIED = enum.auto()
    FAILED = enum.auto()


class ScramClient:
    """SCRAM-SHA-1/-256/-512 client (RFC 5802, RFC 7677), without channel binding.

    Mutual: `verify_outcome` (or a server-final-message arriving as a challenge) checks
    the server's signature, and success without it raises `SaslAuthenticationError`.
    """

    def __init__(
        self,
        hash_name: str,
        username: str,
        password: str,
        *,
        authzid: str = "",
        nonce: str | None = None,
        min_iterations: int = DEFAULT_MIN_ITERATIONS,
        max_iterations: int = DEFAULT_MAX_ITERATIONS,
    ) -> None:
        """`hash_name` is "SHA-256" or "SCRAM-SHA-256" style; `nonce` is for tests only.

        Raises ValueError for an unknown hash or names/passwords SASLprep refuses.
        """
        self._hash: ScramHash = scram_hash(hash_name)
        self.name: str = self._hash.mechanism
        prepared_user = saslprep(username)
        self._password = saslprep(password)
        if not prepared_user or not self._password:
            raise ValueError("SCRAM needs a non-empty username and password")
        if not 1 <= min_iterations <= max_iterations:
            raise ValueError("need 1 <= min_iterations <= max_iterations")
        self._min_iterations = min_iterations
        self._max_iterations = max_iterations
        self._first: ClientFirst = client_first(
            prepared_user,
            make_nonce(os.urandom(_NONCE_BYTES)) if nonce is None else nonce,
            saslprep(authzid) if authzid else "",
        )
        self._state = _ClientState.START
        self._server_signature = b""

    def initial_response(self) -> bytes:
        """The client-first-message."""
        if self._state is not _ClientState.START:
            raise SaslProtocolError(f"{self.name}: exchange already started")
        self._state = _ClientState.FIRST_SENT
        return self._first.to_bytes()

    def challenge(self, data: bytes) -> bytes:
        """Answer server-first with client-final; accept server-final sent as a challenge."""
        state = self._state
        self._state = _ClientState.FAILED  # until this step succeeds
        try:
            if state is _ClientState.START and not data:
                # RFC 4422 §5: an empty challenge asks for the initial response.
                response = self._first.to_bytes()
                self._state = _ClientState.FIRST_SENT
            elif state is _ClientState.FIRST_SENT:
                response = self._client_final(data)
                self._state = _ClientState.FINAL_SENT
            elif state is _ClientState.FINAL_SENT:
                # Some servers send server-final in a challenge and the outcome empty.
                self._check_server_final(data)
                response = b""
                self._state = _ClientState.VERIFIED
            else:
                raise SaslProtocolError(f"{self.name}: unexpected challenge in state {state.name}")
        except ScramMessageError as exc:
            raise SaslProtocolError(f"{self.name}: {exc}") from None
        return response

    def verify_outcome(self, additional_data: bytes | None) -> None:
        """Check the server signature (server-final-message) of a successful outcome."""
        state = self._state
        self._state = _ClientState.FAILED
        try:
            if state is _ClientState.FINAL_SENT:
                if not additional_data:
                    raise SaslAuthenticationError(
                        f"{self.name}: server reported success without its server signature"
                    )
                self._check_server_final(additional_data)
            elif state is _ClientState.VERIFIED:
                if additional_data:
                    self._check_server_final(additional_data)
            else:
                raise SaslAuthenticationError(
                    f"{self.name}: server reported success before the exchange completed"
                )
        except ScramMessageError as exc:
            raise SaslAuthenticationError(f"{self.name}: {exc}") from None
        self._state = _ClientState.VERIFIED

    def _client_final(self, data: bytes) -> bytes:
        h = self._hash
        first = parse_server_first(data)
        if not first.nonce.startswith(self._first.nonce) or first.nonce == self._first.nonce:
            raise SaslProtocolError(f"{self.name}: server nonce does not extend the client nonce")
        if first.iterations < self._min_iterations:
            raise SaslProtocolError(
                f"{self.name}: iteration count {first.iterations} is below"
                f" the minimum {self._min_iterations}"
            )
        if first.iterations > self._max_iterations:
            raise SaslProtocolError(
                f"{self.name}: iteration count {first.iterations} is above"
                f" the maximum {self._max_iterations}"
            )
        salted = h.salted_password(self._password, first.salt, first.iterations)
        self._password = ""  # no longer needed; do not keep it around
        client_key = h.client_key(salted)
        without_proof = client_final_without_proof(self._first.gs2_header, first.nonce)
        auth_message = f"{self._first.bare},{first.message},{without_proof}".encode()
        proof = xor_bytes(client_key, h.hmac(h.digest(client_key), auth_message))
        self._server_signature = h.hmac(h.server_key(salted), auth_message)
        return f"{without_proof},p={b64encode(proof)}".encode()

    def _check_server_final(self, data: bytes) -> None:
        final = parse_server_final(data)
        if final.error is not None:
            shown = "".join(ch for ch in final.error[:64] if ch.isprintable())
            raise SaslAuthenticationError(f"{self.name}: server refused: {shown}")
        if final.verifier is None or not hmac.compare_digest(
            final.verifier, self._server_signature
        ):
            raise SaslAuthenticationError(
                f"{self.name}: server signature is wrong (server does not know the password)"
            )


# --------------------------------------------------------------------------- server side


class _ServerBase:
    """Bookkeeping shared by the server mechanisms: limits, step count, final outcome."""

    name: str
    _max_steps: ClassVar[int]

    def __init__(self, *, max_response_size: int = MAX_RESPONSE_SIZE) -> None:
        self._max_response_size = max_response_size
        self._steps = 0
        self._outcome: ServerOutcome | None = None

    @property
    def outcome(self) -> ServerOutcome | None:
        """The outcome once the exchange has finished, else None."""
        return self._outcome

    def step(self, response: bytes | None) -> ServerStep:
        """See `ServerMechanism.step`."""
        if self._outcome is not None:
            return _fail(f"{self.name}: response after the exchange finished")
        self._steps += 1
        result: ServerStep
        try:
            if self._steps > self._max_steps:
                result = _fail(f"{self.name}: too many steps")
            elif response is not None and len(response) > self._max_response_size:
                result = _fail(
                    f"{self.name}: response of {len(response)} bytes"
                    f" exceeds the {self._max_response_size}-byte limit"
                )
            else:
                result = self._step(response)
        except _PEER_INPUT_ERRORS as exc:
            result = _fail(f"{self.name}: malformed response: {exc}")
        except Exception as exc:
            # A bug or a failing credential store: report a system error to the peer
            # instead of tearing down whatever drives us.
            result = _fail(f"{self.name}: internal error: {exc!r}", SaslCode.SYS)
        if isinstance(result, ServerOutcome):
            self._outcome = result
        return result

    def _step(self, response: bytes | None) -> ServerStep:
        raise NotImplementedError


class AnonymousServer(_ServerBase):
    """ANONYMOUS: anyone gets in, with no identity. Offer it only on purpose."""

    name = "ANONYMOUS"
    _max_steps = 1

    def __init__(self, *, max_response_size: int = MAX_RESPONSE_SIZE) -> None:
        super().__init__(max_response_size=max_response_size)
        self.trace: str | None = None
        """The client's trace string (RFC 4505), for logs."""

    def _step(self, response: bytes | None) -> ServerStep:
        self.trace = None if response is None else _utf8(response, "trace")
        return ServerOutcome(code=SaslCode.OK, identity=None, reason="anonymous")


class CbsServer(AnonymousServer):
    """MSSBCBS (Azure's clients): no identity now, tokens follow on ``$cbs``
    (claims-based security); the broker then asks a token for every link."""

    name = "MSSBCBS"


class PlainServer(_ServerBase):
    """PLAIN, checked against the store's SCRAM credentials (no cleartext passwords kept),
    or a RabbitMQ password hash (a user imported from a RabbitMQ definitions file).

    An authzid is accepted only when it names the authenticating user itself.

    ``password_check`` (a broker's OAuth 2 tokens as passwords) is asked first: it returns
    the identity a (user name, password) pair logs in as, or None to check the store.
    """

    name = "PLAIN"
    _max_steps = 2
    _LOOKUP_ORDER: ClassVar[tuple[str, ...]] = (
        "SCRAM-SHA-512",
        "SCRAM-SHA-256",
        "SCRAM-SHA-1",
        PasswordHashCredential.mechanism,
    )

    def __init__(
        self,
        store: CredentialStore,
        *,
        max_response_size: int = MAX_RESPONSE_SIZE,
        password_check: PasswordCheck | None = None,
    ) -> None:
        super().__init__(max_response_size=max_response_size)
        self._store = store
        self._password_check = password_check

    def _step(self, response: bytes | None) -> ServerStep:
        if response is None:
            if self._steps == 1:
                return ServerChallenge(challenge=b"")  # RFC 4422 §5: ask for the message
            return _fail("PLAIN: missing response")
        parts = _utf8(response, "PLAIN message").split("\x00")
        if len(parts) != 3:
            raise _MalformedResponse("PLAIN message must have exactly three NUL-separated fields")
        authzid, authcid, password = parts
        if not authcid or not password:
            raise _MalformedResponse("PLAIN username and password must not be empty")
        username = saslprep(authcid)
        if not username:
            raise _MalformedResponse("PLAIN username is empty after SASLprep")
        if self._password_check is not None:
            identity = self._password_check(username, password)
            if identity is not None:
                if authzid and saslprep(authzid) != identity:
                    return _fail(f"PLAIN: {identity!r} may not act as {authzid!r}")
                return ServerOutcome(code=SaslCode.OK, identity=identity, reason="PLAIN (token)")
        credential: Credential | None = None
        for mechanism in self._LOOKUP_ORDER:
            credential = self._store.lookup(username, mechanism)
            if credential is not None:
                break
        known = credential is not None
        if credential is None:
            # Spend the same PBKDF2 time, so timing does not tell which users exist.
            credential = self._store.decoy(username, "SCRAM-SHA-256")
        elif isinstance(credential, PasswordHashCredential):
            # A RabbitMQ hash takes one SHA-2 run; spend the PBKDF2 time an unknown
            # user costs too, so timing does not single such users out.
            verify_password(self._store.decoy(username, "SCRAM-SHA-256"), password)
        if not (verify_password(credential, password) and known):
            why = "wrong password" if known else "unknown user"
            return _fail(f"PLAIN: authentication failed for {username!r}: {why}", username=username)
        if authzid and saslprep(authzid) != username:
            return _fail(f"PLAIN: {username!r} may not act as {authzid!r}")
        return ServerOutcome(code=SaslCode.OK, identity=username, reason="PLAIN")


class ExternalServer(_ServerBase):
    """EXTERNAL: the identity established by TLS (e.g. the client certificate's subject).

    The client may send an authzid; it must then equal that identity.
    """

    name = "EXTERNAL"
    _max_steps = 2

    def __init__(
        self, identity_from_tls: str | None, *, max_response_size: int = MAX_RESPONSE_SIZE
    ) -> None:
        super().__init__(max_response_size=max_response_size)
        self._identity = identity_from_tls

    def _step(self, response: bytes | None) -> ServerStep:
        if response is None:
            if self._steps == 1:
                return ServerChallenge(challenge=b"")
            return _fail("EXTERNAL: missing response")
        authzid = _utf8(response, "EXTERNAL authzid")
        if self._identity is None:
            return _fail("EXTERNAL: the connection has no TLS client identity")
        if authzid and authzid != self._identity:
            return _fail(f"EXTERNAL: {self._identity!r} may not act as {authzid!r}")
        return ServerOutcome(code=SaslCode.OK, identity=self._identity, reason="EXTERNAL")


class _ScramServerState(enum.Enum):
    START = enum.auto()
    WAIT_FIRST = enum.auto()
    WAIT_FINAL = enum.auto()


class ScramServer(_ServerBase):
    """SCRAM-SHA-1/-256/-512 server (RFC 5802, RFC 7677), without channel binding.

    An unknown user gets the store's decoy salt and iteration count and fails at the
    proof, exactly like a wrong password. On success the outcome's additional-data is the
    server-final-message `v=<ServerSignature>`; on a bad proof it is `e=invalid-proof`.
    """

    _max_steps = 3

    def __init__(
        self,
        hash_name: str,
        store: CredentialStore,
        *,
        nonce: str | None = None,
        max_response_size: int = MAX_RESPONSE_SIZE,
    ) -> None:
        """`nonce` fixes the server's nonce part; it is for tests only."""
        super().__init__(max_response_size=max_response_size)
        self._hash: ScramHash = scram_hash(hash_name)
        self.name = self._hash.mechanism
        self._store = store
        if nonce is not None and not (
            nonce and all("\x21" <= c <= "\x7e" and c != "," for c in nonce)
        ):
            raise ValueError("SCRAM nonce must be non-empty printable ASCII without ','")
        self._fixed_nonce = nonce
        self._state = _ScramServerState.START
        # Set once the client-first-message has been accepted:
        self._client_first: ClientFirst | None = None
        self._username = ""
        self._known = False
        self._unknown_why = "unknown user"
        self._credential: ScramCredential | None = None
        self._server_first = ""
        self._nonce = ""

    def _step(self, response: bytes | None) -> ServerStep:
        state = self._state
        if state is _ScramServerState.START and response is None:
            self._state = _ScramServerState.WAIT_FIRST
            return ServerChallenge(challenge=b"")  # RFC 4422 §5: ask for client-first
        if response is None:
            return _fail(f"{self.name}: missing response")
        if state is _ScramServerState.WAIT_FINAL:
            return self._on_client_final(response)
        return self._on_client_first(response)

    def _on_client_first(self, data: bytes) -> ServerStep:
        first = parse_client_first(data)
        if first.cbind_flag.startswith("p="):
            # We offer no -PLUS mechanism, so a client demanding channel binding is
            # either misconfigured or the target of a downgrade: refuse.
            return _fail(
                f"{self.name}: client requires channel binding, which is not supported",
                data=b"e=channel-binding-not-supported",
            )
        username = saslprep(first.username)
        if not username:
            raise _MalformedResponse("username is empty after SASLprep")
        if first.authzid and saslprep(first.authzid) != username:
            return _fail(f"{self.name}: {username!r} may not act as {first.authzid!r}")
        credential = self._store.lookup(username, self.name)
        self._known = isinstance(credential, ScramCredential)
        if not isinstance(credential, ScramCredential):
            if isinstance(
                self._store.lookup(username, PasswordHashCredential.mechanism),
                PasswordHashCredential,
            ):
                # Said only in the local log (the reason): the peer sees a plain failure.
                self._unknown_why = (
                    "the user has only a RabbitMQ password hash, usable with PLAIN only"
                )
            credential = self._store.decoy(username, self.name)
        if credential.hash_name != self._hash.name:
            return _fail(
                f"{self.name}: credential store returned a {credential.mechanism} credential",
                SaslCode.SYS,
            )
        server_part = (
            make_nonce(os.urandom(_NONCE_BYTES)) if self._fixed_nonce is None else self._fixed_nonce
        )
        self._nonce = first.nonce + server_part
        self._server_first = server_first(
            self._nonce, credential.salt, credential.iterations
        ).message
        self._client_first = first
        self._username = username
        self._credential = credential
        self._state = _ScramServerState.WAIT_FINAL
        return ServerChallenge(challenge=self._server_first.encode())

    def _on_client_final(self, data: bytes) -> ServerStep:
        first, credential = self._client_first, self._credential
        if first is None or credential is None:
            return _fail(f"{self.name}: client-final before client-first", SaslCode.SYS)
        final = parse_client_final(data)
        if final.channel_binding != first.gs2_header.encode():
            return _fail(f"{self.name}: channel binding data does not match the GS2 header")
        if final.nonce != self._nonce:
            return _fail(f"{self.name}: nonce mismatch (replayed or forged client-final)")
        h = self._hash
        if len(final.proof) != h.digest_size:
            return _fail(f"{self.name}: client proof has the wrong length")
        auth_message = f"{first.bare},{self._server_first},{final.without_proof}".encode()
        client_key = xor_bytes(final.proof, h.hmac(credential.stored_key, auth_message))
        if not (hmac.compare_digest(h.digest(client_key), credential.stored_key) and self._known):
            why = "wrong password" if self._known else self._unknown_why
            return _fail(
                f"{self.name}: authentication failed for {self._username!r}: {why}",
                data=b"e=invalid-proof",
                username=self._username,
            )
        signature = h.hmac(credential.server_key, auth_message)
        return ServerOutcome(
            code=SaslCode.OK,
            identity=self._username,
            additional_data=b"v=" + b64encode(signature).encode("ascii"),
            reason=self.name,
        )


class RejectingServer(_ServerBase):
    """Stands in for a mechanism that may not be used: every step gives a failed outcome."""

    _max_steps = 1

    def __init__(self, name: str, code: SaslCode, reason: str) -> None:
        super().__init__()
        self.name = name
        self._code = code
        self._reason = reason

    def _step(self, response: bytes | None) -> ServerStep:
        return _fail(self._reason, self._code)
