"""The HTTP listener's io layer: routes, the WebSocket upgrade, and hostile WebSocket input.

A real :class:`~amqp10.io.net.Listener` on 127.0.0.1 serves an
:class:`~amqp10.io.http.HttpServer` whose WebSocket route echoes bytes; raw
clients (wsproto, or hand-made bytes where wsproto would refuse to misbehave)
poke at it. Each bad client must get the right answer - an HTTP error as JSON
or a WebSocket close code - while a good client keeps working.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from anyio.abc import ByteStream
from wsproto import ConnectionType
from wsproto.connection import Connection
from wsproto.events import (
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    TextMessage,
)

from amqp10 import errors
from amqp10.io.http import HttpRequest, HttpResponse, HttpServer, Route
from amqp10.io.net import Listener
from amqp10.io.websocket import SEND_MESSAGE_SIZE, WebSocketStream, connect_websocket

from .http_helpers import RawWebSocket, get, http_exchange, parse

pytestmark = pytest.mark.anyio

WAIT = 5.0
LIMIT = 4096  # max_ws_message_size of the server under test


async def echo(stream: WebSocketStream, peer: str) -> None:
    """The WebSocket route: echo what arrives until the stream ends."""
    try:
        while True:
            await stream.send(await stream.receive())
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass
    finally:
        await stream.aclose()


async def hello(request: HttpRequest) -> HttpResponse:
    return HttpResponse.json(200, {"hello": request.peer})


async def broken(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("secret internals")


@asynccontextmanager
async def http_server(
    request_timeout: float = 2.0, max_connections: int = 100
) -> AsyncIterator[int]:
    routes = {
        "/$amqp": Route(websocket=echo),
        "/hello": Route(get=hello),
        "/broken": Route(get=broken),
    }
    server = HttpServer(
        routes,
        request_timeout=request_timeout,
        max_ws_message_size=LIMIT,
        max_connections=max_connections,
    )
    listener = await Listener.bind("127.0.0.1", 0)
    async with anyio.create_task_group() as tg:
        await tg.start(listener.serve, server.handle, tg)
        try:
            yield listener.port
        finally:
            await listener.aclose()
            tg.cancel_scope.cancel()


async def test_routes_answer_json_and_errors_hold_no_internals(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with http_server() as port:
        status, body = parse(await http_exchange(port, get("/hello", "Connection: close")))
        assert status == 200 and str(body["hello"]).startswith("127.0.0.1:")
        assert parse(await http_exchange(port, get("/nope", "Connection: close"))) == (
            404,
            {"error": "no such resource: /nope"},
        )
        with caplog.at_level(logging.ERROR, "amqp10.http"):
            raw = await http_exchange(port, get("/broken", "Connection: close"))
        assert parse(raw) == (500, {"error": "internal error (see the broker's log)"})
        assert b"secret internals" not in raw and b"Traceback" not in raw
        assert "secret internals" in caplog.text  # ... but the log has it
        status, body = parse(await http_exchange(port, get("/$amqp", "Connection: close")))
        assert status == 426 and "subprotocol amqp" in str(body["error"])
        post = (
            b"POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
        )
        raw = await http_exchange(port, post)
        assert parse(raw) == (405, {"error": "method POST not allowed"})
        assert b"allow: GET, HEAD" in raw.lower() or b"allow: GET, HEAD" in raw
        status, body = parse(await http_exchange(port, b"NOT HTTP AT ALL\r\n\r\n"))
        assert status == 400 and str(body["error"]).startswith("bad request")


async def test_head_and_query_strings() -> None:
    async with http_server() as port:
        raw = await http_exchange(port, get("/hello?verbose=1", "Connection: close"))
        assert parse(raw)[0] == 200
        head = b"HEAD /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        raw = await http_exchange(port, head)
        assert raw.startswith(b"HTTP/1.1 200 OK") and raw.endswith(b"\r\n\r\n")  # no body
        assert _header(raw, b"content-length") not in (None, b"0")


def _header(raw: bytes, name: bytes) -> bytes | None:
    for line in raw.split(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


async def test_connections_over_the_limit_get_503_and_upgraded_ones_do_not_count() -> None:
    async with http_server(max_connections=1) as port:
        async with await anyio.connect_tcp("127.0.0.1", port) as idle:
            await idle.send(b"GET /hel")  # holds the one HTTP slot (once the server counts it)
            body = await until_status(port, 503)
            assert body == {"error": "too many connections"}
        await until_status(port, 200)  # free again once the server saw the close
        async with await anyio.connect_tcp("127.0.0.1", port) as tcp:
            ws = await connect_websocket(tcp, "127.0.0.1", "/$amqp", timeout=WAIT)
            raw = await http_exchange(port, get("/hello", "Connection: close"))
            assert parse(raw)[0] == 200  # the WebSocket took no HTTP slot
            await ws.aclose()


async def until_status(port: int, status: int) -> dict[str, object]:
    """GET /hello until it answers ``status`` (bounded); that answer's body."""
    with anyio.fail_after(WAIT):
        while True:
            got, body = parse(await http_exchange(port, get("/hello", "Connection: close")))
            if got == status:
                return body
            await anyio.sleep(0.01)


async def test_keep_alive_serves_several_requests_on_one_connection() -> None:
    async with http_server() as port:
        raw = await http_exchange(
            port, get("/hello") + get("/nope") + get("/hello", "Connection: close")
        )
        assert raw.count(b"HTTP/1.1 200 OK") == 2 and raw.count(b"HTTP/1.1 404 Not Found") == 1


async def test_bytes_round_trip_across_many_messages() -> None:
    async with http_server() as port, await anyio.connect_tcp("127.0.0.1", port) as tcp:
        ws = await connect_websocket(tcp, f"127.0.0.1:{port}", "/$amqp", timeout=WAIT)
        assert ws.subprotocol == "amqp"
        payload = bytes(range(256)) * 64  # 16 KiB, sent in messages within the server's limit
        for start in range(0, len(payload), LIMIT):
            await ws.send(payload[start : start + LIMIT])
        got = bytearray()
        with anyio.fail_after(WAIT):
            while len(got) < len(payload):
                got += await ws.receive(1000)  # max_bytes holds
        assert bytes(got) == payload
        await ws.aclose()
        assert ws.close_code == 1000


async def test_send_cuts_big_writes_into_bounded_messages() -> None:
    async with http_server() as port, await anyio.connect_tcp("127.0.0.1", port) as tcp:
        ws = await connect_websocket(tcp, f"127.0.0.1:{port}", "/$amqp", timeout=WAIT)
        writes: list[bytes] = []
        send = ws.transport.send

        async def record(data: bytes) -> None:
            writes.append(data)
            await send(data)

        ws.transport.send = record  # type: ignore[method-assign]
        await ws.send(b"x" * (SEND_MESSAGE_SIZE * 2 + 5))
        assert len(writes) == 1  # one write of three messages, as a server decodes them
        server = Connection(ConnectionType.SERVER)
        server.receive_data(writes[0])
        sizes = [len(e.data) for e in server.events() if isinstance(e, BytesMessage)]
        assert sizes == [SEND_MESSAGE_SIZE, SEND_MESSAGE_SIZE, 5]
        await ws.aclose()


async def test_ping_is_answered_with_pong() -> None:
    async with http_server() as port, RawWebSocket.open(port) as raw:
        await raw.stream.send(raw.ws.send(Ping(payload=b"are you there")))
        await raw.stream.send(raw.ws.send(BytesMessage(data=b"amqp bytes")))
        events = [await raw.next_event(), await raw.next_event()]
        assert Pong(payload=b"are you there") in events
        assert any(isinstance(e, BytesMessage) and e.data == b"amqp bytes" for e in events)


async def test_text_message_closes_with_1003(caplog: pytest.LogCaptureFixture) -> None:
    async with http_server() as port:
        with caplog.at_level(logging.WARNING, "amqp10.io"):
            async with RawWebSocket.open(port) as raw:
                await raw.stream.send(raw.ws.send(TextMessage(data="hello")))
                assert await raw.close_code() == 1003
        lines = [r.getMessage() for r in caplog.records if "close code 1003" in r.getMessage()]
        assert len(lines) == 1 and "text message" in lines[0] and "\n" not in lines[0]
        await assert_still_serves(port)


async def test_oversized_message_closes_with_1009() -> None:
    async with http_server() as port:
        async with RawWebSocket.open(port) as raw:
            # one message in two frames, together over the limit: fragments count too
            await raw.stream.send(
                raw.ws.send(BytesMessage(data=b"a" * 3000, message_finished=False))
            )
            await raw.stream.send(raw.ws.send(BytesMessage(data=b"b" * 3000)))
            events = []
            while True:
                event = await raw.next_event()
                events.append(event)
                if isinstance(event, CloseConnection):
                    break
            assert event.code == 1009
            echoed = sum(len(e.data) for e in events if isinstance(e, BytesMessage))
            assert echoed <= LIMIT  # nothing past the limit reached the application
        await assert_still_serves(port)


async def test_a_frame_announcing_a_huge_length_closes_with_1009() -> None:
    async with http_server() as port, RawWebSocket.open(port) as raw:
        # FIN+binary, masked, 64-bit length 2**40, then a mask and a little payload
        header = bytes([0x82, 0x80 | 127]) + (2**40).to_bytes(8, "big") + b"\x00\x00\x00\x00"
        await raw.stream.send(header + b"z" * (LIMIT + 10))
        assert await raw.close_code() == 1009


async def test_unmasked_client_frame_closes_with_1002() -> None:
    async with http_server() as port:
        async with RawWebSocket.open(port) as raw:
            await raw.stream.send(b"\x82\x05hello")  # a client's frames must be masked
            assert await raw.close_code() == 1002
        await assert_still_serves(port)


async def test_bad_handshakes_get_400_as_json(caplog: pytest.LogCaptureFixture) -> None:
    async with http_server() as port:
        with caplog.at_level(logging.INFO, "amqp10.http"):
            # no Sec-WebSocket-Key / version
            raw = await http_exchange(
                port, get("/$amqp", "Upgrade: websocket", "Connection: Upgrade")
            )
        status, body = parse(raw)
        assert status == 400 and str(body["error"]).startswith("bad WebSocket handshake")
        assert any(
            "bad WebSocket handshake from 127.0.0.1" in r.getMessage() for r in caplog.records
        )
        # a proper handshake without the amqp subprotocol
        headers = (
            "Upgrade: websocket",
            "Connection: Upgrade",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Version: 13",
            "Sec-WebSocket-Protocol: chat, mqtt",
        )
        status, body = parse(await http_exchange(port, get("/$amqp", *headers)))
        assert status == 400
        assert body == {"error": "the WebSocket subprotocol must be amqp (offered: chat, mqtt)"}
        await assert_still_serves(port)


async def test_draft_subprotocol_name_is_accepted() -> None:
    async with http_server() as port, await anyio.connect_tcp("127.0.0.1", port) as tcp:
        ws = await connect_websocket(
            tcp, "127.0.0.1", "/$amqp", subprotocols=("AMQPWSB10",), timeout=WAIT
        )
        assert ws.subprotocol == "AMQPWSB10"
        await ws.aclose()


async def test_a_client_that_never_finishes_its_request_gets_408(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with http_server(request_timeout=0.3) as port:
        with caplog.at_level(logging.INFO, "amqp10.http"):
            raw = await http_exchange(port, b"GET /$amqp HTTP/1.1\r\nUpgrade: web")
        assert parse(raw)[0] == 408
        assert any("incomplete after 0.3s" in r.getMessage() for r in caplog.records)
        # a client that says nothing at all is just hung up on
        assert await http_exchange(port, b"") == b""
        await assert_still_serves(port)


async def test_client_handshake_refused_is_a_connect_error() -> None:
    async with http_server() as port:
        async with await anyio.connect_tcp("127.0.0.1", port) as tcp:
            with pytest.raises(errors.ConnectError) as info:
                await connect_websocket(tcp, "127.0.0.1", "/elsewhere", timeout=WAIT)
        assert "HTTP 404" in str(info.value) and "no such resource: /elsewhere" in str(info.value)


async def test_client_handshake_times_out() -> None:
    listener = await Listener.bind("127.0.0.1", 0)

    async def silent(stream: ByteStream, peer: str) -> None:
        try:
            await anyio.sleep(WAIT)
        finally:
            await anyio.aclose_forcefully(stream)

    async with anyio.create_task_group() as tg:
        await tg.start(listener.serve, silent, tg)
        async with await anyio.connect_tcp("127.0.0.1", listener.port) as tcp:
            with pytest.raises(errors.TimeoutError, match=r"WebSocket handshake with .* timed out"):
                await connect_websocket(tcp, "127.0.0.1", "/", timeout=0.2)
        await listener.aclose()
        tg.cancel_scope.cancel()


async def assert_still_serves(port: int) -> None:
    """The listener still answers: a bad client closed only its own connection."""
    async with await anyio.connect_tcp("127.0.0.1", port) as tcp:
        ws = await connect_websocket(tcp, "127.0.0.1", "/$amqp", timeout=WAIT)
        await ws.send(b"still here")
        with anyio.fail_after(WAIT):
            assert await ws.receive() == b"still here"
        await ws.aclose()
