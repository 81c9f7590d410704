"""A bare 0-10 client peer for the tests: controls and commands encoded with the engine's
codec and framing, and what comes back assembled; in memory against a server
:class:`~amqp10.amqp010.Connection` (:class:`Pair`) or over TCP (:class:`SocketPeer`)."""

from __future__ import annotations

import socket
import ssl
import time
from typing import Any

from amqp10.amqp010 import HEADER, Compound, Connection, Event, op
from amqp10.amqp010.framing import Assembler, encode_op
from amqp10.amqp010.spec import STRUCTS

__all__ = ["Pair", "Peer", "SocketPeer", "struct"]


def struct(name: str, **values: Any) -> Compound:
    return Compound(STRUCTS[name], values)


class Peer:
    """The client side's bytes: what it sends, and the controls and commands it got."""

    def __init__(self, max_frame: int = 0xFFFF) -> None:
        self.out = bytearray()
        self.assembler = Assembler(max_frame)
        self.max_frame = max_frame
        self.got: list[tuple[int, Compound]] = []
        self.next_id: dict[int, int] = {}
        self.incoming: dict[int, int] = {}
        """The id the next command received on each channel gets."""
        self.header = b""

    def send(self, op_name: str, channel: int = 0, /, **values: Any) -> Compound:
        """A control sent now."""
        item = op(op_name, **values)
        encode_op(self.out, channel, item, self.max_frame)
        return item

    def command(
        self,
        op_name: str,
        channel: int = 1,
        /,
        *,
        sync: bool = True,
        headers: list[Compound] | None = None,
        body: bytes = b"",
        **values: Any,
    ) -> int:
        item = op(op_name, **values)
        item.sync = sync
        item.headers = headers or []
        item.body = body
        encode_op(self.out, channel, item, self.max_frame)
        cid = self.next_id.get(channel, 0)
        self.next_id[channel] = cid + 1
        return cid

    def feed(self, data: bytes) -> None:
        if len(self.header) < 8:
            need = 8 - len(self.header)
            self.header += data[:need]
            data = data[need:]
        for channel, item in self.assembler.feed(data):
            if item.name == "session.command-point":
                self.incoming[channel] = item["command_id"]
            elif item.spec.kind == "command":  # its id: the next of the sender's
                item.id = self.incoming.get(channel, 0)
                self.incoming[channel] = item.id + 1
            self.got.append((channel, item))

    def take(self, name: str | None = None) -> list[tuple[int, Compound]]:
        """What came (only ``name``s, if given), taken out."""
        keep, out = [], []
        for ch, item in self.got:
            (out if name is None or item.name == name else keep).append((ch, item))
        self.got = keep
        return out

    def names(self) -> list[str]:
        return [item.name for _, item in self.got]


class Pair:
    """A :class:`Peer` wired to a server :class:`Connection` in memory; ``now`` is the clock."""

    def __init__(self, server: Connection | None = None, max_frame: int = 0xFFFF) -> None:
        self.server = server or Connection(mechanisms=["ANONYMOUS", "PLAIN"])
        self.client = Peer(max_frame)
        self.events: list[Event] = []
        self.now = 1000.0
        self.server.tick(self.now)

    def flush(self, raw: bytes = b"") -> list[Event]:
        """Client bytes (``raw`` first) to the server, the server's answer back; the events."""
        data = raw + bytes(self.client.out)
        self.client.out.clear()
        events = self.server.receive_data(data) if data else []
        events += self.server.poll_events()
        self.client.feed(self.server.data_to_send())
        self.events += events
        return events

    def open(self, mechanism: str = "ANONYMOUS", response: bytes = b"") -> None:
        """The handshake up to ``open-ok`` (the server application's answers given here)."""
        self.flush(HEADER)
        self.client.send(
            "connection.start-ok", mechanism=mechanism, response=response, locale="en_US"
        )
        self.flush()
        self.server.accept_login()
        self.client.feed(self.server.data_to_send())
        self.client.send(
            "connection.tune-ok", channel_max=10, max_frame_size=self.client.max_frame, heartbeat=0
        )
        self.client.send("connection.open", virtual_host="/")
        self.flush()
        self.server.accept_open()
        self.events += self.server.poll_events()
        self.client.feed(self.server.data_to_send())

    def attach(self, channel: int = 1, name: bytes = b"s1") -> None:
        self.client.send("session.attach", channel, name=name)
        self.client.send("session.command-point", channel, command_id=0, command_offset=0)
        self.flush()


class SocketPeer(Peer):
    """A :class:`Peer` over a TCP connection to the broker (logs in, opens, attaches)."""

    def __init__(
        self,
        port: int,
        *,
        mechanism: str = "ANONYMOUS",
        response: bytes = b"",
        timeout: float = 10.0,
        tls: ssl.SSLContext | None = None,
        virtual_host: str = "/",
        heartbeat: int = 0,
    ) -> None:
        super().__init__()
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname="localhost")
        self.timeout = timeout
        try:
            self.sock.sendall(HEADER)
            (start,) = self.wait("connection.start")
            self.server_properties: dict[str, Any] = dict(start.get("server_properties") or {})
            self.send("connection.start-ok", mechanism=mechanism, response=response, locale="en_US")
            self.flush()
            self.wait("connection.tune")
            self.send("connection.tune-ok", channel_max=10, max_frame_size=0xFFFF, heartbeat=heartbeat)
            self.send("connection.open", virtual_host=virtual_host)
            self.flush()
            self.wait("connection.open-ok")
        except BaseException:
            self.sock.close()
            raise

    def flush(self) -> None:
        self.sock.sendall(bytes(self.out))
        self.out.clear()

    def wait(self, name: str, count: int = 1) -> list[Compound]:
        """Read until ``count`` of ``name`` came; take and return them."""
        deadline = time.monotonic() + self.timeout
        while sum(1 for _, item in self.got if item.name == name) < count:
            if name != "connection.close" and any(
                item.name == "connection.close" for _, item in self.got
            ):
                raise AssertionError(f"the connection closed: {self.take('connection.close')}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {name} within {self.timeout}s; got {self.names()}")
            self.sock.settimeout(left)
            data = self.sock.recv(65536)
            if not data:
                raise AssertionError(f"the connection ended waiting for {name}; got {self.names()}")
            self.feed(data)
        return [item for _, item in self.take(name)][:count]

    def attach(self, channel: int = 1, name: bytes = b"s1") -> None:
        self.send("session.attach", channel, name=name)
        self.send("session.command-point", channel, command_id=0, command_offset=0)
        self.flush()
        self.wait("session.attached")

    def call(self, name: str, channel: int = 1, /, **values: Any) -> Compound | None:
        """A sync command, waited for until completed; its result (if it has one)."""
        cid = self.command(name, channel, **values)
        self.flush()
        deadline = time.monotonic() + self.timeout
        while True:
            for _, item in self.got:
                if item.name == "execution.exception":
                    raise AssertionError(f"{name} failed: {item}")
            done = [
                c
                for _, c in self.got
                if c.name == "session.completed"
                and any(lo <= cid <= hi for lo, hi in c.get("commands", ()))
            ]
            if done:
                results = [
                    c
                    for _, c in self.got
                    if c.name == "execution.result" and c["command_id"] == cid
                ]
                self.take("session.completed")
                return results[0]["value"] if results else None
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} not completed; got {self.names()}")
            self.sock.settimeout(max(deadline - time.monotonic(), 0.01))
            data = self.sock.recv(65536)
            if not data:
                raise AssertionError("the connection ended")
            self.feed(data)

    def close(self) -> None:
        try:
            self.send("connection.close", reply_code=200)
            self.flush()
        finally:
            self.sock.close()
