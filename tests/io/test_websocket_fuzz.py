"""Arbitrary bytes after the upgrade: the WebSocket stream yields data or fails cleanly.

One invariant, whatever the peer sends and however it is cut: ``receive()``
returns bytes, or ends with ``EndOfStream``, or fails with
``BrokenResourceError`` caused by a :class:`WebSocketError` carrying a close
code from RFC 6455 - and then a close frame with that code was written.
Nothing else escapes. Valid frames (masked, as a client sends them) mixed with
garbage make sure the fuzzer gets past the first header.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import anyio
from anyio.abc import ByteStream
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from wsproto import ConnectionType, WSConnection
from wsproto.connection import Connection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Request, TextMessage

from amqp10.io.websocket import WebSocketError, WebSocketStream

CLOSE_CODES = {1002, 1003, 1007, 1009}


class ScriptedStream(ByteStream):
    """Hands out the given chunks, then end of stream; records what is sent."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)
        self.sent = bytearray()

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self.chunks:
            raise anyio.EndOfStream
        return self.chunks.pop(0)

    async def send(self, item: bytes) -> None:
        self.sent += item

    async def send_eof(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        pass

    @property
    def extra_attributes(self) -> Mapping[Any, Any]:
        return {}


def server_websocket() -> WSConnection:
    """A server-side wsproto connection that has accepted a client's upgrade."""
    client = WSConnection(ConnectionType.CLIENT)
    server = WSConnection(ConnectionType.SERVER)
    server.receive_data(client.send(Request(host="h", target="/$amqp", subprotocols=["amqp"])))
    assert any(isinstance(e, Request) for e in server.events())
    server.send(AcceptConnection(subprotocol="amqp"))
    return server


def client_frames(payloads: list[bytes | str]) -> bytes:
    """Masked binary (or text) frames, as a real client would send them."""
    client = Connection(ConnectionType.CLIENT)
    out = b""
    for p in payloads:
        event = BytesMessage(data=p) if isinstance(p, bytes) else TextMessage(data=p)
        out += client.send(event)
    return out


def close_frame(code: int) -> bytes:
    return Connection(ConnectionType.CLIENT).send(CloseConnection(code=code, reason="bye"))


pieces = st.one_of(
    st.sampled_from([1000, 1001, 1003, 1008, 1011, 3000, 4999]).map(close_frame),
    st.binary(max_size=64),
    st.lists(st.binary(max_size=300), max_size=3).map(client_frames),
    st.lists(st.integers(0, 1500).map(bytes), min_size=1, max_size=2).map(client_frames),
    st.lists(st.one_of(st.binary(max_size=50), st.text(max_size=5)), max_size=3).map(client_frames),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(pieces, max_size=6), cuts=st.lists(st.integers(1, 50), max_size=20))
def test_any_input_yields_data_or_a_clean_failure(parts: list[bytes], cuts: list[int]) -> None:
    data = b"".join(parts)
    chunks, at = [], 0
    for n in cuts:
        if at >= len(data):
            break
        chunks.append(data[at : at + n])
        at += n
    if at < len(data):
        chunks.append(data[at:])
    transport = ScriptedStream(chunks)
    stream = WebSocketStream(transport, server_websocket(), max_message_size=500)

    async def drain() -> BaseException:
        while True:
            try:
                await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError) as exc:
                return exc

    ending = anyio.run(drain)
    code = ending.__cause__.code if isinstance(ending.__cause__, WebSocketError) else None
    event(f"ended with {type(ending).__name__} {code or ''}")
    if isinstance(ending, anyio.BrokenResourceError):
        cause = ending.__cause__
        assert isinstance(cause, WebSocketError)
        if cause.code in CLOSE_CODES:  # we closed it: our close frame says why
            peer = Connection(ConnectionType.CLIENT)
            peer.receive_data(bytes(transport.sent))
            closes = [e for e in peer.events() if isinstance(e, CloseConnection)]
            assert [c.code for c in closes] == [cause.code]
        else:  # the peer closed it with an unusual code: we answered its close
            assert stream.close_code == cause.code


# -- the HTTP side: arbitrary requests ------------------------------------------------------------
request_pieces = st.one_of(
    st.binary(max_size=40),
    st.sampled_from(
        [
            b"GET /$amqp HTTP/1.1\r\n",
            b"GET /healthz HTTP/1.1\r\n",
            b"POST /healthz HTTP/1.1\r\n",
            b"Host: x\r\n",
            b"Upgrade: websocket\r\n",
            b"Connection: Upgrade\r\n",
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
            b"Sec-WebSocket-Version: 13\r\n",
            b"Sec-WebSocket-Protocol: amqp\r\n",
            b"Content-Length: 3\r\n",
            b"Transfer-Encoding: chunked\r\n",
            b"\r\n",
        ]
    ),
)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(request_pieces, max_size=12), cut=st.integers(1, 64))
def test_any_request_bytes_get_an_http_answer_or_nothing(parts: list[bytes], cut: int) -> None:
    from amqp10.io.http import HttpRequest, HttpResponse, HttpServer, Route

    data = b"".join(parts)
    transport = ScriptedStream([data[i : i + cut] for i in range(0, len(data), cut)])

    async def ok(request: HttpRequest) -> HttpResponse:
        return HttpResponse.json(200, {"status": "ok"})

    async def amqp(stream: WebSocketStream, peer: str) -> None:
        try:
            while True:
                await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            pass

    server = HttpServer({"/healthz": Route(get=ok), "/$amqp": Route(websocket=amqp)})
    failures: list[logging.LogRecord] = []
    handler = _Collect(failures)
    log = logging.getLogger("amqp10.http")
    log.addHandler(handler)
    try:
        anyio.run(server.handle, transport, "fuzz")
    finally:
        log.removeHandler(handler)
    assert not [r for r in failures if r.exc_info], [r.getMessage() for r in failures]
    sent = bytes(transport.sent)
    assert sent == b"" or sent.startswith(b"HTTP/1.1 "), sent[:80]
    assert server.connections == 0


class _Collect(logging.Handler):
    def __init__(self, into: list[logging.LogRecord]) -> None:
        super().__init__(logging.DEBUG)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record)
