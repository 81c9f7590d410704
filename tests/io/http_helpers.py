"""Raw HTTP and WebSocket clients for tests of the HTTP listener (bytes the test controls)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.abc import ByteStream
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Request

WAIT = 5.0


async def http_exchange(port: int, raw: bytes) -> bytes:
    """Send ``raw`` and read until the server closes the connection."""
    out = bytearray()
    with anyio.fail_after(WAIT):
        async with await anyio.connect_tcp("127.0.0.1", port) as s:
            await s.send(raw)
            try:
                while True:
                    out += await s.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass
    return bytes(out)


def parse(response: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = response.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body) if body else {}


def get(path: str, *headers: str) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", *headers, "", ""]
    return "\r\n".join(lines).encode()


class RawWebSocket:
    """A wsproto client on a TCP stream: the test decides what to send."""

    def __init__(self, stream: ByteStream, ws: WSConnection) -> None:
        self.stream = stream
        self.ws = ws

    @classmethod
    @asynccontextmanager
    async def open(
        cls, port: int, subprotocols: tuple[str, ...] = ("amqp",), path: str = "/$amqp"
    ) -> AsyncIterator[RawWebSocket]:
        async with await anyio.connect_tcp("127.0.0.1", port) as s:
            ws = WSConnection(ConnectionType.CLIENT)
            await s.send(
                ws.send(Request(host="127.0.0.1", target=path, subprotocols=list(subprotocols)))
            )
            client = cls(s, ws)
            event = await client.next_event()
            assert isinstance(event, AcceptConnection), event
            yield client

    async def next_event(self) -> object:
        with anyio.fail_after(WAIT):
            while True:
                for event in self.ws.events():
                    return event
                try:
                    data = await self.stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    data = None
                self.ws.receive_data(data)

    async def close_code(self) -> int:
        """Read until the server's close frame; its code."""
        while True:
            event = await self.next_event()
            if isinstance(event, CloseConnection):
                return event.code
