"""Arbitrary bytes after the upgrade: the WebSocket stream yields data or fails cleanly.

One invariant, whatever the peer sends and however it is cut: ``receive()``
returns bytes, or ends with ``EndOfStream``, or fails with
``BrokenResourceError`` caused by a :class:`WebSocketError` carrying a close
code from RFC 6455 - and then a close frame with that code was written.
Nothing else escapes. Valid frames (masked, as a client sends them) mixed with
garbage make sure the fuzzer gets past the first header.
"""

from __future__ import annotations

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
