"""The anyio driver over real sockets: bare engines, batching, back-pressure, timers, errors."""

from __future__ import annotations

import errno
import logging
import os
import socket
import ssl
from collections.abc import Callable
from typing import Any

import anyio
import pytest
import sniffio
from anyio.abc import ByteStream
from anyio.streams.stapled import StapledObjectStream

from amqp10 import errors
from amqp10.client import SettleMode, connect, serve
from amqp10.io import Driver, Listener, Signal, connect_stream, map_io_error
from amqp10.io.asyncio_tcp import asyncio_tcp
from amqp10.io.tls import client_context, server_context
from amqp10.message import Message
from amqp10.transport import (
    Connection as Engine,
)
from amqp10.transport import (
    ConnectionOpened,
    DeliveryReceived,
    LinkAttached,
    LinkState,
    SessionBegun,
    SessionState,
)
from amqp10.types import Source, Target
from tests.client.helpers import WAIT, Certs, Service, no_leftover_tasks, running, wait_for

pytestmark = pytest.mark.anyio


class EnginePeer:
    """A bare engine run by a Driver; records events and accepts whatever the peer opens."""

    def __init__(self, stream: ByteStream, engine: Engine, *, max_read: int = 65536) -> None:
        self.engine = engine
        self.events: list[Any] = []
        self.changed = Signal()
        self.driver = Driver(stream, engine, self.on_events, peer="test peer", max_read=max_read)

    def on_events(self, events: list[Any]) -> None:
        for e in events:
            self.events.append(e)
            if isinstance(e, ConnectionOpened) and not self.engine.is_open:
                self.engine.open()
            elif isinstance(e, SessionBegun) and e.session.state is SessionState.BEGIN_RCVD:
                e.session.begin()
            elif isinstance(e, LinkAttached) and e.link.state is LinkState.ATTACH_RCVD:
                e.link.attach(source=e.link.remote_source, target=e.link.remote_target)
                if e.link.role.name == "RECEIVER":
                    e.link.flow(100)
            elif isinstance(e, DeliveryReceived):
                e.delivery.accept()
        self.changed.fire()

    def of(self, tp: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, tp)]

    async def wait(self, predicate: Callable[[], bool]) -> None:
        await wait_for(self.changed, predicate)


async def test_bare_engines_over_tcp_with_bounded_reads() -> None:
    peers: list[EnginePeer] = []
    payload = os.urandom(50_000)

    async def handle(stream: ByteStream, peer: str) -> None:
        p = EnginePeer(stream, Engine("server", send_header=False), max_read=512)
        peers.append(p)
        await p.driver.run()

    async with no_leftover_tasks():
        listener = await Listener.bind("127.0.0.1", 0)
        async with anyio.create_task_group() as tg:
            try:
                await tg.start(listener.serve, handle, tg)
                stream = await connect_stream("127.0.0.1", listener.port, timeout=WAIT)
                client = EnginePeer(stream, Engine("client"))
                tg.start_soon(client.driver.run)
                client.engine.open()
                session = client.engine.session()
                session.begin()
                sender = session.sender("s", source=Source(), target=Target(address="q"))
                sender.attach()
                delivery = sender.send(payload)
                client.driver.flush_soon()
                await client.wait(lambda: delivery.remote_settled)
                server = peers[0]
                received = server.of(DeliveryReceived)
                assert [e.delivery.payload for e in received] == [payload]
                assert (
                    server.driver.reads >= len(payload) // 512
                )  # never more than max_read at once
                client.engine.close()
                client.driver.flush_soon()
                await client.driver.wait_done()
                await server.driver.wait_done()
                assert client.driver.error is None and server.driver.error is None
            finally:
                await listener.aclose()


async def test_tcp_streams_are_written_directly_and_in_order() -> None:
    """A plain TCP stream on asyncio is written without awaiting (amqp10.io.asyncio_tcp), from the
    reading task when the writer sleeps: many small round trips arrive whole and in order
    (on trio, no direct writes: the same exchange through ``await send``)."""
    on_asyncio = sniffio.current_async_library() == "asyncio"
    peers: list[EnginePeer] = []
    found: list[object] = []

    async def handle(stream: ByteStream, peer: str) -> None:
        found.append(asyncio_tcp(stream))
        p = EnginePeer(stream, Engine("server", send_header=False))
        peers.append(p)
        await p.driver.run()

    async with no_leftover_tasks():
        listener = await Listener.bind("127.0.0.1", 0)
        async with anyio.create_task_group() as tg:
            try:
                await tg.start(listener.serve, handle, tg)
                stream = await connect_stream("127.0.0.1", listener.port, timeout=WAIT)
                assert (asyncio_tcp(stream) is not None) == on_asyncio
                client = EnginePeer(stream, Engine("client"))
                tg.start_soon(client.driver.run)
                client.engine.open()
                session = client.engine.session()
                session.begin()
                sender = session.sender("s", source=Source(), target=Target(address="q"))
                sender.attach()
                for i in range(90):  # one at a time (the server grants 100): small writes
                    d = sender.send(i.to_bytes(2, "big"))
                    client.driver.flush_soon()
                    await client.wait(lambda: d.remote_settled)  # noqa: B023 (awaited here)
                server = peers[0]
                assert (found[0] is not None) == on_asyncio
                got = [e.delivery.payload for e in server.of(DeliveryReceived)]
                assert got == [i.to_bytes(2, "big") for i in range(90)]
                assert server.driver.writes >= 90  # an answer per round trip, none lost
                client.engine.close()
                client.driver.flush_soon()
                await client.driver.wait_done()
                await server.driver.wait_done()
                assert client.driver.error is None and server.driver.error is None
            finally:
                await listener.aclose()


def test_no_direct_writes_to_other_streams() -> None:
    send, receive = anyio.create_memory_object_stream[bytes](1)
    assert asyncio_tcp(StapledObjectStream(send, receive)) is None  # type: ignore[arg-type]
    send.close()
    receive.close()


async def test_writes_are_batched() -> None:
    async with running(Service()) as server, await connect(server.url, timeout=WAIT) as conn:
        sender = await conn.open_sender("q", settle_mode=SettleMode.AT_MOST_ONCE)
        await sender.send(Message(body=0))  # credit has arrived
        writes = conn.driver.writes
        async with anyio.create_task_group() as tg:
            for i in range(100):
                tg.start_soon(sender.send, Message(body=i))
        assert conn.driver.writes - writes <= 10  # 100 transfers, a handful of writes


async def test_back_pressure_pauses_reading() -> None:
    svc = Service()
    async with (
        running(svc) as server,
        await connect(server.url, timeout=WAIT, max_buffered=5) as conn,
    ):
        # 60 messages of 4 KB: more than one read's worth
        receiver = await conn.open_receiver(
            "gen/60/4000", credit=100, settle_mode=SettleMode.AT_MOST_ONCE
        )
        await wait_for(conn._activity, lambda: conn.driver.reading_paused)
        assert receiver.buffered > 5
        paused_at = conn.driver.bytes_read
        await anyio.wait_all_tasks_blocked()
        assert conn.driver.bytes_read == paused_at  # nothing read while paused
        bodies = [(await receiver.receive()).message.body for _ in range(60)]
        assert sorted(b.split(":")[0] for b in bodies) == sorted(f"m{i}" for i in range(60))
        assert not conn.driver.reading_paused
        assert conn.driver.bytes_read > paused_at


async def test_idle_timeout_drops_a_silent_peer() -> None:
    async def silent(stream: ByteStream, peer: str) -> None:
        # answers the open, then never writes again (and never sends heartbeats)
        engine = Engine("silent", send_header=False)
        async with stream:
            while True:
                try:
                    data = await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return
                for e in engine.receive_data(data):
                    if isinstance(e, ConnectionOpened):
                        engine.open()
                out = engine.data_to_send()
                if out:
                    await stream.send(out)

    listener = await Listener.bind("127.0.0.1", 0)
    async with anyio.create_task_group() as tg:
        await tg.start(listener.serve, silent, tg)
        async with (
            no_leftover_tasks(),
            await connect(
                f"amqp://127.0.0.1:{listener.port}", idle_timeout=0.2, sasl=False, timeout=WAIT
            ) as conn,
        ):
            with anyio.fail_after(WAIT):
                await conn.wait_closed()
            assert isinstance(conn.error, errors.ConnectionError)
            assert conn.error.condition == "amqp:resource-limit-exceeded"
            assert "idle-time-out" in str(conn.error)
        await listener.aclose()
        tg.cancel_scope.cancel()


async def test_heartbeats_keep_idle_connections_alive() -> None:
    # each side asks the other for heartbeats; both drivers' timers answer
    async with (
        running(Service(), idle_timeout=0.5) as server,
        await connect(server.url, idle_timeout=0.5, timeout=WAIT) as conn,
    ):
        await anyio.sleep(0.8)  # longer than either idle timeout: the thing under test
        assert conn.is_open
        sender = await conn.open_sender("q")
        await sender.send(Message(body="still here"))


def test_error_mapping() -> None:
    refused = OSError("All connection attempts failed")
    refused.__cause__ = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    err = map_io_error(refused, "could not connect to h:1", connecting=True)
    assert type(err) is errors.ConnectError
    assert str(err) == "could not connect to h:1: connection refused"

    dns = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert (
        str(map_io_error(dns, "x", connecting=True))
        == "x: name resolution failed: Name or service not known"
    )

    broken = anyio.BrokenResourceError()
    broken.__cause__ = ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
    err = map_io_error(broken, "connection to h:1 failed (read)")
    assert type(err) is errors.ConnectionError
    assert str(err) == "connection to h:1 failed (read): connection reset by peer"

    cert = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] ...")
    cert.verify_message = "self-signed certificate"
    err = map_io_error(cert, "TLS handshake with h:1 failed")
    assert type(err) is errors.TLSError
    assert (
        str(err)
        == "TLS handshake with h:1 failed: certificate verify failed: self-signed certificate"
    )


async def test_handler_bug_stops_the_driver_cleanly(caplog: pytest.LogCaptureFixture) -> None:
    def broken(events: list[Any]) -> None:
        raise KeyError("bug")

    async with running(Service()) as server:
        stream = await connect_stream("127.0.0.1", server.port, timeout=WAIT)
        engine = Engine("client")
        driver = Driver(stream, engine, broken, peer="p")
        engine.open()
        with caplog.at_level(logging.CRITICAL, logger="amqp10.io"), anyio.fail_after(WAIT):
            await driver.run()
        assert driver.done
        assert isinstance(driver.error, errors.ConnectionError)
        assert "internal error while handling events: KeyError('bug')" in str(driver.error)
        with pytest.raises(errors.ConnectionError, match="internal error"):
            await driver.flush()


async def test_tls_handshake_timeout_and_listener_survives_bad_handshakes(certs: Certs) -> None:
    silent = await Listener.bind("127.0.0.1", 0)  # accepts TCP, never speaks TLS
    async with anyio.create_task_group() as tg:
        held: list[ByteStream] = []

        async def hold(stream: ByteStream, peer: str) -> None:
            held.append(stream)

        await tg.start(silent.serve, hold, tg)
        with pytest.raises(
            errors.TimeoutError, match=r"TLS handshake with 127.0.0.1:\d+ timed out after 0.2s"
        ):
            await connect_stream(
                "127.0.0.1", silent.port, ssl_context=client_context(cafile=certs.ca), timeout=0.2
            )
        await silent.aclose()
        for s in held:
            await s.aclose()
        tg.cancel_scope.cancel()

    ctx = server_context(certs.server_cert, certs.server_key)
    async with serve("127.0.0.1", 0, Service(), ssl=ctx) as server:
        # a client that does not trust the server fails; the listener keeps going
        with pytest.raises(errors.TLSError):
            await connect(server.url, ssl=client_context(cafile=certs.rogue_ca), timeout=WAIT)
        async with await connect(
            server.url, ssl=client_context(cafile=certs.ca), timeout=WAIT
        ) as conn:
            assert conn.is_open
        assert server.accepted == 1  # the failed handshake never reached the AMQP layer


async def test_listen_address_in_use() -> None:
    listener = await Listener.bind("127.0.0.1", 0)
    try:
        with pytest.raises(
            errors.ConnectError, match=rf"cannot listen on 127.0.0.1:{listener.port}: "
        ):
            await Listener.bind("127.0.0.1", listener.port)
    finally:
        await listener.aclose()
