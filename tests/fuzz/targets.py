"""Fuzz targets: one function per protocol surface, bytes in, an exception only for a bug.

Each target takes the fuzzer's bytes and raises (AssertionError or the failure the
engine's own fuzz tests define) only when the surface breaks its promise: whatever a
peer sends, the answer is events and a clean protocol-level failure, never a stray
Python exception, never a wedged state, never unbounded work. The documented errors
(`DecodeError` for the message decoders, a `WebSocketError`-caused
`BrokenResourceError` for the WebSocket stream) are the expected way out.

`atheris_main.py` runs them coverage-guided; `test_targets.py` replays the corpus in
`corpus/<name>/` plus a few thousand mutations of it in the test suite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from amqp10.amqp010 import HEADER as AMQP010_HEADER
from amqp10.amqp010 import CommandReceived, Compound, LoginRequested, OpenRequested, SessionDetached
from amqp10.amqp010 import Connection as Connection010
from amqp10.amqp010.connection import Session as Session010
from amqp10.amqp010.spec import OPS
from amqp10.amqp091 import AMQP_0_9_1
from amqp10.io.websocket import WebSocketError, WebSocketStream
from amqp10.message import LazyMessage, Message
from amqp10.sasl import SaslConnection
from amqp10.sasl.credentials import InMemoryCredentialStore
from amqp10.sasl.events import SaslCompleted, SaslEvent, SaslFailed, SaslSkipped
from amqp10.sasl.frames import SaslFrameError, parse_sasl_frame
from amqp10.sasl.layer import SaslServer
from amqp10.transport.framing import AMQP_HEADER, SASL_HEADER
from amqp10.types import DecodeError
from amqp10.types.errors import AMQPTypeError

from ..amqp091.test_fuzz import _feed as feed_091
from ..io.test_websocket_fuzz import CLOSE_CODES, ScriptedStream, server_websocket
from ..transport.test_fuzz import mid_session_prefix, run_case

__all__ = ["TARGETS"]


def _chunks(spec: int, n: int) -> list[int] | None:
    """How to cut ``n`` bytes: 0 whole, else pieces of ``spec`` bytes."""
    return None if spec == 0 else [spec] * (n // spec + 1)


def _pieces(data: bytes, spec: int) -> list[bytes]:
    if spec == 0:
        return [data]
    return [data[i : i + spec] for i in range(0, len(data), spec)] or [b""]


# -- AMQP 1.0: frame decoder + engine ------------------------------------------------------
_PREFIX = mid_session_prefix()


def amqp1_engine(data: bytes) -> None:
    """Byte 0 picks where the bytes go (raw, after the header, mid-session); byte 1 cuts them."""
    if len(data) < 2:
        return
    mode, cut, rest = data[0] % 3, data[1] % 16, data[2:]
    if mode == 0:
        run_case(rest, _chunks(cut, len(rest)))
    elif mode == 1:
        run_case(AMQP_HEADER + rest, _chunks(cut, len(rest) + 8))
    else:
        run_case([*_PREFIX, rest], _chunks(cut, len(rest)))


# -- SASL, server role (and the hand-over to the engine) -----------------------------------
_STORE = InMemoryCredentialStore(secret=b"fuzz", default_iterations=1)
_STORE.add_user("guest", "guest", iterations=1)
_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-1", "PLAIN", "ANONYMOUS", "EXTERNAL")


def sasl_server(data: bytes) -> None:
    """Byte 0: require SASL or not, TLS identity or not; byte 1 cuts; then the client's bytes."""
    if len(data) < 2:
        return
    flags, cut, rest = data[0], data[1] % 16, data[2:]
    sasl = SaslServer(
        _MECHANISMS,
        _STORE,
        tls_identity="CN=fuzz" if flags & 2 else None,
        require=not flags & 1,
        max_frame_size=512,
    )
    conn = SaslConnection.server(sasl, "fuzz", max_frame_size=4096)
    if flags & 4:
        rest = SASL_HEADER + rest
    events: list[Any] = []
    out = bytearray()
    for piece in _pieces(rest, cut):
        if not piece:
            continue
        events += conn.receive_data(piece)
        events += conn.poll_events()
        conn.tick(1.0)
        out += conn.data_to_send()
    ends = [e for e in events if isinstance(e, (SaslCompleted, SaslFailed, SaslSkipped))]
    assert len(ends) <= 1, ends
    assert all(isinstance(e, SaslEvent) for e in ends)
    if sasl.failed:
        assert conn.is_closed and isinstance(ends[0], SaslFailed)
    if sasl.authenticated:
        assert isinstance(ends[0], SaslCompleted)
        assert ends[0].identity in (None, "guest", "CN=fuzz"), ends[0]
    # what we wrote is the SASL header and whole SASL frames (then AMQP, after success)
    if out and sasl.skipped:
        assert out.startswith(AMQP_HEADER), bytes(out[:8])
    elif out:
        assert out.startswith(SASL_HEADER), bytes(out[:8])
        pos = 8
        while pos < len(out) and out[pos : pos + 4] != b"AMQP":
            try:
                parsed = parse_sasl_frame(bytes(out[pos:]), 4096)
            except SaslFrameError as exc:  # pragma: no cover - a bug
                raise AssertionError(f"the server wrote a bad SASL frame: {exc}") from exc
            if parsed is None:
                if sasl.authenticated:
                    break  # AMQP frames after the outcome
                raise AssertionError("the server wrote part of a SASL frame")
            pos += parsed[1]
    conn.receive_data(b"")
    conn.poll_events()
    conn.data_to_send()
    assert sasl.done, sasl


# -- the message decoders ------------------------------------------------------------------
_LAZY_ACCESSORS = ("header", "delivery_annotations", "message_annotations", "properties", "application_properties", "footer", "body")  # fmt: skip


def message(data: bytes) -> None:
    """Message.decode and LazyMessage agree on what is well formed; both fail only with
    DecodeError."""
    try:
        whole: Message | None = Message.decode(data)
    except DecodeError:
        whole = None
    try:
        lazy: LazyMessage | None = LazyMessage(data)
    except DecodeError:
        lazy = None
    if lazy is None:
        assert whole is None, "LazyMessage refused what Message.decode accepted"
        return
    try:
        # every accessor, then the whole message, decoded lazily
        for name in _LAZY_ACCESSORS:
            getattr(lazy, name)
        again = lazy.message()
    except (DecodeError, AMQPTypeError):
        assert whole is None, "a lazy section failed that Message.decode accepted"
        return
    if whole is not None:
        assert again.body_type == whole.body_type
    lazy.with_annotations({"x-fuzz": 1})


# -- AMQP 0-9-1, server role -------------------------------------------------------------
def amqp091_engine(data: bytes) -> None:
    """Byte 0 cuts; byte 1 says whether the 0-9-1 header goes first."""
    if len(data) < 2:
        return
    cut, header, rest = data[0] % 16, data[1] & 1, data[2:]
    stream = AMQP_0_9_1.header + rest if header else rest
    feed_091(stream, [cut or len(stream)] * (len(stream) // max(cut, 1) + 1))


# -- AMQP 0-10, server role -------------------------------------------------------------
def amqp010_engine(data: bytes) -> None:
    """Byte 0 cuts; byte 1 says whether the 0-10 header goes first. The application says yes
    to every login and open and completes every command (so the session paths run too);
    whatever the bytes, the engine answers with events and frames, and bad input closes it
    (``connection.close``) or its session, never with a Python exception."""
    if len(data) < 2:
        return
    cut, header, rest = data[0] % 16, data[1] & 1, data[2:]
    stream = AMQP010_HEADER + rest if header else rest
    conn = Connection010(mechanisms=["ANONYMOUS", "PLAIN"], max_session_timeout=30)
    kept: dict[bytes, Session010] = {}  # sessions detached with a timeout, offered back
    conn.resumable = lambda channel, name: kept.pop(name, None)
    conn.tick(0.0)
    out = 0
    for piece in _pieces(stream, cut):
        attached = dict(conn.sessions)
        for e in conn.receive_data(piece):
            if isinstance(e, LoginRequested):
                conn.accept_login()
            elif isinstance(e, OpenRequested):
                conn.accept_open()
            elif isinstance(e, SessionDetached):
                s = attached.get(e.channel)
                if s is not None and s.timeout and not s.failed:
                    kept[s.name] = s
            elif isinstance(e, CommandReceived):
                if e.command.name == "queue.delete":
                    conn.exception(e.channel, e.command, "not-found", "fuzz")
                else:
                    if e.command.name == "message.subscribe":  # a delivery (kept for a replay)
                        conn.send_command(e.channel, Compound(OPS["message.transfer"]))
                    conn.complete(e.channel, e.command)
        out += len(conn.data_to_send())
        assert out <= 64 * (len(stream) + 4096), "output out of proportion to the input"
        if conn.is_closed:
            break
    conn.receive_data(b"")
    assert conn.is_closed


# -- WebSocket framing after the upgrade -------------------------------------------------
def websocket(data: bytes) -> None:
    """Byte 0 cuts the bytes a client sends after the upgrade."""
    if not data:
        return
    transport = ScriptedStream(_pieces(data[1:], data[0] % 32))
    stream = WebSocketStream(transport, server_websocket(), max_message_size=500)

    async def drain() -> BaseException:
        received = 0
        for _ in range(len(data) + 2):  # every receive consumes input: bounded work
            try:
                received += len(await stream.receive())
            except (anyio.EndOfStream, anyio.BrokenResourceError) as exc:
                return exc
            assert received <= len(data), "more payload out than bytes in"
        raise AssertionError("the WebSocket stream kept returning data past its input")

    ending = anyio.run(drain)
    if isinstance(ending, anyio.BrokenResourceError):
        cause = ending.__cause__
        assert isinstance(cause, WebSocketError), repr(ending)
        if cause.code in CLOSE_CODES:
            assert transport.sent, "closed without a close frame"
        else:
            assert 1000 <= cause.code < 5000, cause.code


TARGETS: dict[str, Callable[[bytes], None]] = {
    "amqp1_engine": amqp1_engine,
    "sasl_server": sasl_server,
    "message": message,
    "amqp091_engine": amqp091_engine,
    "amqp010_engine": amqp010_engine,
    "websocket": websocket,
}
