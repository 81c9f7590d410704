"""The SASL layer (AMQP Part 5 §5.3), sans-IO: `SaslClient` and `SaslServer`.

Both have the engine's shape: ``receive_data(bytes) -> list[SaslEvent]``,
``data_to_send() -> bytes``, ``tick(now)``, ``poll_events()``. They run the exchange

    client                                  server
    SASL header           ------------->
                          <-------------    SASL header, sasl-mechanisms
    sasl-init             ------------->
                          <-------------    sasl-challenge   } as many rounds as
    sasl-response         ------------->                     } the mechanism needs
                          <-------------    sasl-outcome (+ additional-data)

and then stop reading: whatever the peer sent after the last SASL frame is AMQP, kept
for `take_remaining()`. `SaslConnection` does that hand-over to the AMQP engine.

Bad input never raises. A server answers it with a sasl-outcome (or, when the peer did
not even send the SASL header, with the SASL header alone, as Part 2 §2.2 asks) and
fails; a client fails (it has nothing to send: the stream just ends). Either way
`failed` is True, a `SaslFailed` event says why, and `is_closed` tells the driver to
close the stream once `data_to_send()` is empty.

The mechanisms themselves (ANONYMOUS, PLAIN, EXTERNAL, SCRAM-SHA-*) are in
`amqp10.sasl.mechanisms`; the state tables in `amqp10.sasl.state`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import ClassVar, Final

from ..transport.framing import SASL_HEADER
from ..types import SaslChallenge, SaslCode, SaslInit, SaslMechanisms, SaslOutcome, SaslResponse
from .credentials import CredentialStore
from .events import SaslCompleted, SaslEvent, SaslFailed, SaslSkipped
from .frames import (
    DEFAULT_MAX_FRAME_SIZE,
    HeaderKind,
    SaslFrame,
    SaslFrameError,
    classify_header,
    encode_sasl_frame,
    parse_sasl_frame,
)
from .mechanisms import (
    DEFAULT_MIN_ITERATIONS,
    MAX_RESPONSE_SIZE,
    ClientMechanism,
    PasswordCheck,
    SaslError,
    SaslProtocolError,
    ServerChallenge,
    ServerMechanism,
)
from .selection import (
    CLIENT_MECHANISMS,
    SERVER_MECHANISMS,
    client_choose,
    make_client_mechanism,
    make_server_mechanism,
    server_offer,
)
from .state import (
    CLIENT_TRANSITIONS,
    SERVER_TRANSITIONS,
    TERMINAL_STATES,
    SaslInput,
    SaslState,
    next_state,
)

__all__ = ["DEFAULT_MAX_ROUND_TRIPS", "PASSWORD_MECHANISMS", "SaslClient", "SaslServer"]

DEFAULT_MAX_ROUND_TRIPS: Final = 8
"""Challenges allowed per exchange by default; SCRAM needs two at most, the others one."""

PASSWORD_MECHANISMS: Final = ("SCRAM-SHA-512", "SCRAM-SHA-256", "SCRAM-SHA-1", "PLAIN")
"""Mechanisms that check a user name and password against a `CredentialStore`."""

_MIN_FRAME_SIZE: Final = 512  # MIN-MAX-FRAME-SIZE: every peer must accept this much

_FRAME_INPUTS: Final[Mapping[type, SaslInput]] = {
    SaslMechanisms: SaslInput.RECV_MECHANISMS,
    SaslInit: SaslInput.RECV_INIT,
    SaslChallenge: SaslInput.RECV_CHALLENGE,
    SaslResponse: SaslInput.RECV_RESPONSE,
    SaslOutcome: SaslInput.RECV_OUTCOME,
}


def _code_name(code: SaslCode) -> str:
    return code.name.lower().replace("_", "-")


def _printable(data: bytes, limit: int = 64) -> str:
    text = data[:limit].decode("utf-8", "replace")
    return "".join(ch if ch.isprintable() else "?" for ch in text)


class _SaslLayer:
    """What the client and server share: buffers, frame parsing, the table, timers."""

    _transitions: ClassVar[Mapping[tuple[SaslState, SaslInput], SaslState]]
    _handlers: dict[SaslInput, Callable[[SaslFrame], None]]

    def __init__(
        self,
        *,
        max_frame_size: int,
        max_round_trips: int,
        handshake_timeout: float | None,
    ) -> None:
        if max_frame_size < _MIN_FRAME_SIZE:
            raise ValueError(f"max_frame_size must be at least {_MIN_FRAME_SIZE}")
        if max_round_trips < 0:
            raise ValueError("max_round_trips must not be negative")
        if handshake_timeout is not None and not handshake_timeout > 0:
            raise ValueError("handshake_timeout must be positive seconds")
        self.max_frame_size = max_frame_size
        self.max_round_trips = max_round_trips
        self.handshake_timeout = handshake_timeout
        self.state = SaslState.HEADER
        self.outcome: SaslCode | None = None
        """The sasl-code once done (None while running, and for a server the client
        skipped SASL on); see `SaslFailed.outcome` for failures that crossed no wire."""
        self.mechanism: str | None = None
        """The mechanism in use, once chosen."""
        self.identity: str | None = None
        """Who authenticated (see `SaslCompleted.identity`)."""
        self.reason = ""
        """Why the exchange failed ("" unless it did)."""
        self._in = bytearray()
        self._out = bytearray()
        self._remaining = bytearray()
        self._events: list[SaslEvent] = []
        self._round_trips = 0
        self._deadline: float | None = None

    # -- status ------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """The exchange is over, one way or the other."""
        return self.state in TERMINAL_STATES

    @property
    def drained(self) -> bool:
        """Nothing left to write or to report (once done, nothing more comes)."""
        return not self._out and not self._events

    @property
    def failed(self) -> bool:
        """The exchange failed: no AMQP may follow on this stream."""
        return self.state is SaslState.FAILED

    @property
    def authenticated(self) -> bool:
        """The exchange ended with outcome ok."""
        return self.state is SaslState.AUTHENTICATED

    @property
    def is_closed(self) -> bool:
        """True once the stream should end (after `data_to_send()` has been written)."""
        return self.state is SaslState.FAILED

    # -- bytes in / out --------------------------------------------------------------------
    def receive_data(self, data: bytes) -> list[SaslEvent]:
        """Feed bytes read from the peer; ``b""`` means the peer closed the stream.

        Once the exchange is done, bytes given here are not SASL: they are kept for
        `take_remaining` (or dropped, after a failure).
        """
        if not data:
            if not self.done:
                self._fail(SaslCode.SYS_TEMP, "the peer closed the stream during the SASL exchange")
        elif self.state is SaslState.FAILED:
            pass  # nothing more is read from a failed exchange
        elif self.done:
            self._remaining += data
        else:
            self._in += data
            self._process()
        return self.poll_events()

    def data_to_send(self) -> bytes:
        """Everything to write to the peer, in order (empty if nothing)."""
        out = bytes(self._out)
        self._out.clear()
        return out

    def take_remaining(self) -> bytes:
        """The bytes that followed the exchange: the AMQP layer's input. Empties the buffer."""
        rest = bytes(self._remaining)
        self._remaining.clear()
        return rest

    def poll_events(self) -> list[SaslEvent]:
        """Events not yet returned (e.g. a failure raised by `tick`)."""
        events, self._events = self._events, []
        return events

    def tick(self, now: float) -> float | None:
        """Enforce `handshake_timeout` (if set) at time `now`; return the deadline or None.

        The first call starts the clock.
        """
        if self.done or self.handshake_timeout is None:
            return None
        if self._deadline is None:
            self._deadline = now + self.handshake_timeout
        elif now >= self._deadline:
            self._fail(
                SaslCode.SYS_TEMP,
                f"the SASL exchange did not finish within {self.handshake_timeout:g}s",
            )
            return None
        return self._deadline

    # -- parsing -------------------------------------------------------------------------------
    def _process(self) -> None:
        while not self.done:
            if self.state is SaslState.HEADER:
                head = bytes(self._in[:8])
                kind = classify_header(head)
                if kind is None:
                    break
                self._on_header(kind, head)
                continue
            try:
                parsed = parse_sasl_frame(self._in, self.max_frame_size)
            except SaslFrameError as exc:
                self._fail(SaslCode.SYS, str(exc))
                break
            if parsed is None:
                break
            body, size = parsed
            del self._in[:size]
            self._on_frame(body)
        if self.state is SaslState.FAILED:
            self._in.clear()
        elif self.done:
            self._remaining += self._in
            self._in.clear()

    def _on_frame(self, body: SaslFrame) -> None:
        event = _FRAME_INPUTS[type(body)]
        if not self._move(event):
            self._unexpected(body)
            return
        self._handlers[event](body)

    def _unexpected(self, body: SaslFrame) -> None:
        self._fail(SaslCode.SYS, f"unexpected {body.AMQP_NAME} in state {self.state.value}")

    def _on_header(self, kind: HeaderKind, head: bytes) -> None:
        raise NotImplementedError

    # -- state -----------------------------------------------------------------------------------
    def _move(self, event: SaslInput) -> bool:
        new = next_state(self._transitions, self.state, event)
        if new is None:
            return False
        self.state = new
        return True

    def _write(self, body: SaslFrame) -> None:
        encode_sasl_frame(self._out, body)

    def _succeed(self) -> None:
        self._move(SaslInput.SUCCEED)
        self.outcome = SaslCode.OK
        assert self.mechanism is not None
        self._events.append(
            SaslCompleted(outcome=SaslCode.OK, mechanism=self.mechanism, identity=self.identity)
        )

    def _fail(
        self,
        code: SaslCode,
        reason: str,
        additional_data: bytes | None = None,
        username: str | None = None,
    ) -> None:
        if self.done:
            return
        self._before_fail(code, additional_data)
        self._move(SaslInput.FAIL)
        self.outcome = code
        self.reason = reason
        self.identity = None
        self._events.append(
            SaslFailed(outcome=code, reason=reason, mechanism=self.mechanism, username=username)
        )

    def _before_fail(self, code: SaslCode, additional_data: bytes | None) -> None:
        """What the role tells the peer when the exchange fails."""


class SaslClient(_SaslLayer):
    """The client side of the SASL layer: sends the SASL header at once, picks a mechanism.

    Without `mechanisms`, the strongest one both sides support wins (`client_choose`):
    EXTERNAL with a TLS client certificate, then SCRAM-SHA-512 > -256 > -1 > PLAIN with a
    user name and password, and ANONYMOUS only for a client without credentials (so a
    server cannot quietly downgrade a client that means to log in). With `mechanisms`,
    the first of those the server offers wins. SCRAM's server signature is verified
    before the exchange counts as a success.
    """

    _transitions = CLIENT_TRANSITIONS

    def __init__(
        self,
        *,
        username: str | None = None,
        password: str | None = None,
        authzid: str = "",
        mechanisms: Sequence[str] | None = None,
        tls_client_certificate: bool = False,
        hostname: str | None = None,
        trace: str = "",
        min_iterations: int = DEFAULT_MIN_ITERATIONS,
        max_challenge_size: int = MAX_RESPONSE_SIZE,
        max_round_trips: int = DEFAULT_MAX_ROUND_TRIPS,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        handshake_timeout: float | None = None,
    ) -> None:
        """`hostname` goes in sasl-init (the virtual host asked for); `trace` is ANONYMOUS's
        trace string; `tls_client_certificate` says TLS presented a client certificate,
        which makes EXTERNAL the first choice. Raises ValueError for unknown mechanisms."""
        super().__init__(
            max_frame_size=max_frame_size,
            max_round_trips=max_round_trips,
            handshake_timeout=handshake_timeout,
        )
        if mechanisms is not None:
            mechanisms = tuple(mechanisms)
            if not mechanisms:
                raise ValueError("mechanisms must not be empty (use None for the default choice)")
            unknown = [m for m in mechanisms if m not in CLIENT_MECHANISMS]
            if unknown:
                raise ValueError(
                    f"unsupported SASL mechanism(s) {', '.join(unknown)};"
                    f" supported: {', '.join(CLIENT_MECHANISMS)}"
                )
        if max_challenge_size < 0:
            raise ValueError("max_challenge_size must not be negative")
        self.username = username
        self.authzid = authzid
        self.hostname = hostname
        self.preferred = mechanisms
        self.tls_client_certificate = tls_client_certificate
        self.trace = trace
        self.min_iterations = min_iterations
        self.max_challenge_size = max_challenge_size
        self.offered: tuple[str, ...] = ()
        """The server's sasl-server-mechanisms, once received."""
        self._password = password
        self._mech: ClientMechanism | None = None
        self._handlers = {
            SaslInput.RECV_MECHANISMS: self._on_mechanisms,
            SaslInput.RECV_CHALLENGE: self._on_challenge,
            SaslInput.RECV_OUTCOME: self._on_outcome,
        }
        self._out += SASL_HEADER

    def __repr__(self) -> str:
        return f"SaslClient(state={self.state.name}, mechanism={self.mechanism!r})"

    def _on_header(self, kind: HeaderKind, head: bytes) -> None:
        if kind is HeaderKind.SASL:
            del self._in[:8]
            self._move(SaslInput.RECV_SASL_HEADER)
        elif kind is HeaderKind.AMQP:
            self._fail(
                SaslCode.SYS_PERM,
                "the server answered with the plain AMQP header: it does not do SASL"
                " (connect without SASL, or to a listener that authenticates)",
            )
        elif kind is HeaderKind.TLS:
            self._fail(
                SaslCode.SYS_PERM,
                "the server answered with the AMQP TLS header: it wants TLS first (use amqps)",
            )
        else:
            self._fail(
                SaslCode.SYS_PERM,
                f"the server answered with an unsupported protocol header {head!r}",
            )

    def _on_mechanisms(self, body: SaslFrame) -> None:
        assert isinstance(body, SaslMechanisms)
        self.offered = tuple(str(name) for name in body.sasl_server_mechanisms)
        password, self._password = self._password, None  # the mechanism keeps what it needs
        try:
            name = client_choose(
                self.offered,
                self.preferred,
                has_credentials=bool(self.username and password),
                has_client_certificate=self.tls_client_certificate,
            )
            self.mechanism = name
            mech = make_client_mechanism(
                name,
                username=self.username,
                password=password,
                authzid=self.authzid,
                trace=self.trace,
                min_iterations=self.min_iterations,
            )
            initial = mech.initial_response()
        except (SaslError, ValueError) as exc:
            self._fail(SaslCode.SYS_PERM, str(exc))
            return
        self._mech = mech
        self._write(SaslInit(mechanism=name, initial_response=initial, hostname=self.hostname))

    def _on_challenge(self, body: SaslFrame) -> None:
        assert isinstance(body, SaslChallenge) and self._mech is not None
        if self._round_trips >= self.max_round_trips:
            self._fail(SaslCode.SYS, f"the server sent more than {self.max_round_trips} challenges")
            return
        self._round_trips += 1
        challenge = bytes(body.challenge)
        if len(challenge) > self.max_challenge_size:
            self._fail(
                SaslCode.SYS,
                f"challenge of {len(challenge)} bytes exceeds the"
                f" {self.max_challenge_size}-byte limit",
            )
            return
        try:
            response = self._mech.challenge(challenge)
        except SaslProtocolError as exc:  # a challenge the mechanism cannot accept
            self._fail(SaslCode.SYS, str(exc))
            return
        except SaslError as exc:  # e.g. SCRAM's server-final in a challenge, refusing us
            self._fail(SaslCode.AUTH, str(exc))
            return
        self._write(SaslResponse(response=response))

    def _on_outcome(self, body: SaslFrame) -> None:
        assert isinstance(body, SaslOutcome) and self._mech is not None
        code = SaslCode(body.code)
        data = None if body.additional_data is None else bytes(body.additional_data)
        if code is not SaslCode.OK:
            detail = f" ({_printable(data)})" if data else ""
            self._fail(
                code,
                f"the server refused {self.mechanism} authentication:"
                f" sasl-code {_code_name(code)}{detail}",
            )
            return
        try:
            self._mech.verify_outcome(data)
        except SaslError as exc:
            self._fail(SaslCode.AUTH, str(exc))
            return
        if self.mechanism in PASSWORD_MECHANISMS:
            self.identity = self.username
        self._succeed()

    def _unexpected(self, body: SaslFrame) -> None:
        if isinstance(body, SaslOutcome) and body.code != SaslCode.OK:
            # a server that gives up early (a timeout, a protocol error it saw)
            code = SaslCode(body.code)
            self._fail(code, f"the server ended the exchange early: sasl-code {_code_name(code)}")
        else:
            super()._unexpected(body)


class SaslServer(_SaslLayer):
    """The server side of the SASL layer: waits for the client's header, offers mechanisms.

    `mechanisms` are the ones allowed, in the order offered; EXTERNAL is offered only when
    `tls_identity` (the TLS client certificate's subject, say) is known. PLAIN and SCRAM
    check users in `store`. With ``require=False`` a client that sends the plain AMQP
    header skips SASL (`SaslSkipped`); otherwise it gets the SASL header back and fails.
    """

    _transitions = SERVER_TRANSITIONS

    def __init__(
        self,
        mechanisms: Iterable[str],
        store: CredentialStore | None = None,
        *,
        tls_identity: str | None = None,
        require: bool = True,
        max_round_trips: int = DEFAULT_MAX_ROUND_TRIPS,
        max_response_size: int = MAX_RESPONSE_SIZE,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        handshake_timeout: float | None = None,
        password_check: PasswordCheck | None = None,
    ) -> None:
        """Raises ValueError for unknown mechanisms, or PLAIN/SCRAM without a `store`.
        ``password_check``: PLAIN asks it before the store (see `PlainServer`)."""
        super().__init__(
            max_frame_size=max_frame_size,
            max_round_trips=max_round_trips,
            handshake_timeout=handshake_timeout,
        )
        allowed = tuple(dict.fromkeys(mechanisms))
        unknown = [m for m in allowed if m not in SERVER_MECHANISMS]
        if unknown:
            raise ValueError(
                f"unsupported SASL mechanism(s) {', '.join(unknown)};"
                f" supported: {', '.join(SERVER_MECHANISMS)}"
            )
        if store is None and any(m in PASSWORD_MECHANISMS for m in allowed):
            raise ValueError("PLAIN and SCRAM mechanisms need a credential store")
        self.allowed = allowed
        self.offered = server_offer(allowed, tls_identity=tls_identity)
        """What sasl-mechanisms advertises."""
        self.require = require
        self.tls_identity = tls_identity
        self.max_response_size = max_response_size
        self.hostname: str | None = None
        """The hostname the client named in sasl-init, if any."""
        self._store = store
        self._password_check = password_check
        self._mech: ServerMechanism | None = None
        self._header_sent = False
        self._handlers = {
            SaslInput.RECV_INIT: self._on_init,
            SaslInput.RECV_RESPONSE: self._on_response,
        }

    def __repr__(self) -> str:
        return f"SaslServer(state={self.state.name}, mechanism={self.mechanism!r})"

    @property
    def skipped(self) -> bool:
        """The client sent the plain AMQP header and SASL was optional."""
        return self.state is SaslState.BYPASSED

    def _send_header(self) -> None:
        if not self._header_sent:
            self._header_sent = True
            self._out += SASL_HEADER

    def _on_header(self, kind: HeaderKind, head: bytes) -> None:
        if kind is HeaderKind.SASL:
            del self._in[:8]
            self._move(SaslInput.RECV_SASL_HEADER)
            self._send_header()
            self._write(SaslMechanisms(sasl_server_mechanisms=list(self.offered)))
        elif kind is HeaderKind.AMQP and not self.require:
            # the header stays in the input: it is the AMQP layer's first bytes
            self._move(SaslInput.RECV_AMQP_HEADER)
            self._events.append(SaslSkipped())
        elif kind is HeaderKind.AMQP:
            self._fail(
                SaslCode.AUTH,
                "the client sent the plain AMQP header, but this server requires SASL",
            )
        elif kind is HeaderKind.TLS:
            self._fail(
                SaslCode.SYS_PERM,
                "the client sent the AMQP TLS header; this listener does not do TLS upgrades",
            )
        else:
            self._fail(
                SaslCode.SYS_PERM, f"the client sent an unsupported protocol header {head!r}"
            )

    def _before_fail(self, code: SaslCode, additional_data: bytes | None) -> None:
        if self.state is SaslState.HEADER:
            # the peer does not speak SASL (yet): Part 2 §2.2, answer with the header we
            # want and close
            self._send_header()
        else:
            self._write(SaslOutcome(code=code, additional_data=additional_data))

    def _on_init(self, body: SaslFrame) -> None:
        assert isinstance(body, SaslInit)
        name = str(body.mechanism)
        self.mechanism = name[:40]  # a real name has at most 20 characters (RFC 4422 §3.1)
        self.hostname = body.hostname
        self._mech = make_server_mechanism(
            name,
            allowed=self.offered,
            store=self._store,
            tls_identity=self.tls_identity,
            max_response_size=self.max_response_size,
            password_check=self._password_check,
        )
        self._step(body.initial_response)

    def _on_response(self, body: SaslFrame) -> None:
        assert isinstance(body, SaslResponse)
        self._step(body.response)

    def _step(self, response: bytes | None) -> None:
        mech = self._mech
        assert mech is not None
        try:
            step = mech.step(None if response is None else bytes(response))
        except Exception as exc:  # a mechanism promises not to raise; a bug must not escape
            self._fail(SaslCode.SYS, f"{mech.name}: internal error: {exc!r}")
            return
        if isinstance(step, ServerChallenge):
            if self._round_trips >= self.max_round_trips:
                self._fail(
                    SaslCode.AUTH, f"{mech.name}: more than {self.max_round_trips} round trips"
                )
                return
            self._round_trips += 1
            self._write(SaslChallenge(challenge=step.challenge))
        elif step.ok:
            self._write(SaslOutcome(code=SaslCode.OK, additional_data=step.additional_data))
            self.identity = step.identity
            self._succeed()
        else:
            self._fail(step.code, step.reason, step.additional_data, step.username)
