"""The broker's HTTP listener: AMQP over ws:// and wss://, /healthz, /readyz, hostile input.

The broker runs in this event loop on free ports of 127.0.0.1 (``[http]`` picks
a free port too when the AMQP listeners do); our client connects with
``ws://127.0.0.1:PORT/$amqp``. Raw clients (tests/io/http_helpers.py) send what
a good client would not.
"""

from __future__ import annotations

import logging
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from wsproto.events import BytesMessage, TextMessage

from amqp10 import errors
from amqp10.broker.config import BrokerConfig, ConfigError, Listener, load_config
from amqp10.broker.http import broker_routes
from amqp10.broker.service import BrokerService
from amqp10.client import connect
from amqp10.io.http import HttpServer
from amqp10.io.net import Listener as NetListener
from amqp10.io.tls import client_context
from amqp10.io.websocket import WebSocketStream
from amqp10.message import Message
from amqp10.types import Accepted
from tests.client.helpers import Certs, have_openssl, make_certs
from tests.io.http_helpers import RawWebSocket, get, http_exchange, parse

from .conftest import broker_in_loop, broker_process, cli, make_config

pytestmark = pytest.mark.anyio

T = 10.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Certs]:
    if not have_openssl():
        pytest.fail("the openssl command is needed to make test certificates")
    yield make_certs(tmp_path_factory.mktemp("certs"))


broker = broker_in_loop


def ws_url(service: BrokerService, path: str = "/$amqp", *, user: str = "") -> str:
    return f"ws://{user}127.0.0.1:{service.http_port}{path}"


# -- AMQP over WebSockets ----------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/$amqp", "/"])
async def test_send_and_receive_over_ws(tmp_path: Path, path: str) -> None:
    async with broker(tmp_path) as service:
        assert service.http_port not in (None, 0, 8672)  # a free port, as the AMQP listener's
        async with await connect(ws_url(service, path), timeout=T) as conn:
            assert isinstance(conn.driver.stream, WebSocketStream)
            sender = await conn.open_sender("q")
            for i in range(20):
                assert isinstance(await sender.send(Message(body=f"m{i}")), Accepted)
            receiver = await conn.open_receiver("q", credit=20)
            bodies = []
            for _ in range(20):
                d = await receiver.receive(timeout=T)
                bodies.append(d.message.body)
                await d.accept()
            assert bodies == [f"m{i}" for i in range(20)]
        # a TCP client sees what the WebSocket client sent: one broker behind both
        async with await connect(f"amqp://127.0.0.1:{service.ports[0]}", timeout=T) as tcp:
            await (await tcp.open_sender("q")).send(Message(body="over tcp"))
        async with await connect(ws_url(service, path), timeout=T) as conn:
            d = await (await conn.open_receiver("q", credit=1)).receive(timeout=T)
            assert d.message.body == "over tcp"


async def test_large_messages_span_many_websocket_messages(tmp_path: Path) -> None:
    big = bytes(range(256)) * 4096 * 3  # 3 MiB: many AMQP frames, many WebSocket messages
    async with broker(tmp_path) as service, await connect(ws_url(service), timeout=T) as conn:
        stream = conn.driver.stream
        sender = await conn.open_sender("big")
        receiver = await conn.open_receiver("big", credit=2)
        for _ in range(2):
            assert isinstance(await sender.send(Message(body=big), timeout=T), Accepted)
        for _ in range(2):
            d = await receiver.receive(timeout=T)
            assert d.message.body == big
            await d.accept()
        assert isinstance(stream, WebSocketStream) and stream.close_code is None
        assert conn.driver.bytes_read > 2 * len(big) and conn.driver.reads > 2 * 48


async def test_sasl_plain_over_ws(tmp_path: Path, users_file: Path) -> None:
    sasl = {"users_file": users_file, "allow_anonymous": False}
    async with broker(tmp_path, sasl=sasl) as service:
        url = ws_url(service, user="alice:secret@")
        async with await connect(url, sasl_mechanisms=["PLAIN"], timeout=T) as conn:
            assert [c.handler.user for c in service.clients] == ["alice"]
            sender = await conn.open_sender("authed")
            assert isinstance(await sender.send(Message(body="hi")), Accepted)
        with pytest.raises(errors.AuthenticationError):
            await connect(
                ws_url(service, user="alice:wrong@"), sasl_mechanisms=["PLAIN"], timeout=T
            )
        with pytest.raises(errors.AuthenticationError, match="no SASL mechanism in common"):
            await connect(ws_url(service), sasl_mechanisms=["ANONYMOUS"], timeout=T)


async def test_wss_verifies_the_server_like_amqps(tmp_path: Path, certs: Certs) -> None:
    http = {"tls_cert": certs.server_cert, "tls_key": certs.server_key}
    async with broker(tmp_path, http=http) as service:
        port = service.http_port
        ctx = client_context(cafile=certs.ca)
        for host in ("localhost", "127.0.0.1"):  # both are in the certificate
            async with await connect(f"wss://{host}:{port}/$amqp", ssl=ctx, timeout=T) as conn:
                sender = await conn.open_sender("secure")
                assert isinstance(await sender.send(Message(body=b"x" * 200_000)), Accepted)
        with pytest.raises(errors.TLSError, match="certificate verify failed"):
            await connect(
                f"wss://127.0.0.1:{port}/$amqp",
                ssl=client_context(cafile=certs.rogue_ca),
                timeout=T,
            )
        with pytest.raises(ValueError, match="wss:// needs TLS"):
            await connect(f"wss://127.0.0.1:{port}/$amqp", ssl=False, timeout=T)
        # plain ws:// to a TLS listener fails cleanly
        with pytest.raises(errors.ConnectionError):
            await connect(f"ws://127.0.0.1:{port}/$amqp", timeout=2)


async def test_wss_checks_the_host_name(tmp_path: Path, certs: Certs) -> None:
    http = {"tls_cert": certs.other_cert, "tls_key": certs.other_key}  # for another host
    async with broker(tmp_path, http=http) as service:
        with pytest.raises(errors.TLSError, match="certificate verify failed"):
            await connect(
                f"wss://127.0.0.1:{service.http_port}/$amqp",
                ssl=client_context(cafile=certs.ca),
                timeout=T,
            )


async def test_ws_client_counts_against_max_connections(tmp_path: Path) -> None:
    async with (
        broker(tmp_path, limits={"max_connections": 1}) as service,
        await connect(ws_url(service), timeout=T),
    ):
        with pytest.raises(errors.ConnectionError):
            await connect(ws_url(service), timeout=2)


async def test_shutdown_closes_websocket_clients_with_connection_forced(tmp_path: Path) -> None:
    service = BrokerService(make_config(tmp_path))
    stop = anyio.CancelScope()

    async def run_broker(*, task_status: Any) -> None:
        with stop:  # cancels the broker only, as SIGTERM does
            await service.run(task_status=task_status)

    async with anyio.create_task_group() as tg:
        await tg.start(run_broker)
        async with await connect(ws_url(service), timeout=T) as conn:
            await conn.open_sender("q")
            stream = conn.driver.stream
            stop.cancel()
            with anyio.fail_after(T):
                await conn.wait_closed()
            assert isinstance(conn.error, errors.ConnectionError)
            assert conn.error.condition == "amqp:connection:forced", conn.error
        # then the WebSocket closes normally (whichever side's close frame came first)
        assert isinstance(stream, WebSocketStream) and stream.close_code == 1000
    assert service.http is not None
    with pytest.raises(OSError):  # the HTTP listener is closed too
        await anyio.connect_tcp("127.0.0.1", service.http.port)


# -- health ------------------------------------------------------------------------------------
async def test_health_endpoints_over_a_socket(tmp_path: Path) -> None:
    async with broker(tmp_path) as service:
        port = service.http_port
        assert port is not None
        assert parse(await http_exchange(port, get("/healthz", "Connection: close"))) == (
            200,
            {"status": "ok"},
        )
        assert parse(await http_exchange(port, get("/readyz", "Connection: close"))) == (
            200,
            {"status": "ready"},
        )
        raw = await http_exchange(port, get("/nowhere", "Connection: close"))
        assert parse(raw) == (404, {"error": "no such resource: /nowhere"})
        assert b"content-type: application/json" in raw.lower()


async def test_readyz_says_why_not_with_503() -> None:
    reasons = ["the store is not open"]

    async def no_amqp(stream: WebSocketStream, peer: str) -> None:
        await stream.aclose()

    server = HttpServer(broker_routes(amqp=no_amqp, not_ready=lambda: reasons[0]))
    listener = await NetListener.bind("127.0.0.1", 0)
    async with anyio.create_task_group() as tg:
        await tg.start(listener.serve, server.handle, tg)
        raw = await http_exchange(listener.port, get("/readyz", "Connection: close"))
        assert parse(raw) == (503, {"status": "not ready", "reason": "the store is not open"})
        reasons[0] = None  # type: ignore[call-overload]
        assert (
            parse(await http_exchange(listener.port, get("/readyz", "Connection: close")))[0] == 200
        )
        await listener.aclose()
        tg.cancel_scope.cancel()


async def test_readiness_of_a_stopping_broker(tmp_path: Path) -> None:
    async with broker(tmp_path) as service:
        assert service.not_ready() is None
    assert service.not_ready() == "shutting down"


# -- hostile input -------------------------------------------------------------------------------
async def test_hostile_websocket_input_closes_only_that_connection(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with broker(tmp_path, http={"max_ws_message_size": 65536}) as service:
        port = service.http_port
        assert port is not None
        async with await connect(ws_url(service), timeout=T) as good:
            sender = await good.open_sender("calm")
            with caplog.at_level(logging.INFO):
                async with RawWebSocket.open(port) as raw:  # a text frame
                    await raw.stream.send(raw.ws.send(TextMessage(data="AMQP\x00\x01\x00\x00")))
                    assert await raw.close_code() == 1003
                async with RawWebSocket.open(port) as raw:  # over max_ws_message_size
                    # well-formed AMQP (the header, then empty frames) the engine takes in
                    # stride, in one WebSocket message over the limit
                    amqp = b"AMQP\x00\x01\x00\x00" + b"\x00\x00\x00\x08\x02\x00\x00\x00" * 9000
                    await raw.stream.send(raw.ws.send(BytesMessage(data=amqp)))
                    assert await raw.close_code() == 1009
                async with RawWebSocket.open(port) as raw:  # unmasked (a server's frame)
                    await raw.stream.send(b"\x82\x08AMQP\x00\x01\x00\x00")
                    assert await raw.close_code() == 1002
                bad = await http_exchange(
                    port, get("/$amqp", "Upgrade: websocket", "Connection: Upgrade")
                )
                assert parse(bad)[0] == 400
            assert isinstance(await sender.send(Message(body="still fine")), Accepted)
        one_liners = [r.getMessage() for r in caplog.records if "close code" in r.getMessage()]
        assert len(one_liners) == 3 and all("\n" not in line for line in one_liners)
        assert any("bad WebSocket handshake" in r.getMessage() for r in caplog.records)


async def test_a_client_that_never_finishes_the_upgrade_is_hung_up_on(tmp_path: Path) -> None:
    async with broker(tmp_path, limits={"handshake_timeout": 0.5}) as service:
        assert service.http_port is not None
        raw = await http_exchange(service.http_port, b"GET /$amqp HTTP/1.1\r\nHost: x\r\n")
        assert parse(raw)[0] == 408
        # upgraded, but no AMQP header: the broker's own handshake timeout closes it
        async with RawWebSocket.open(service.http_port) as ws:
            with anyio.fail_after(T):
                while True:
                    event = await ws.next_event()
                    if type(event).__name__ == "CloseConnection":
                        break


# -- configuration and command line ------------------------------------------------------------
def test_http_port_defaults() -> None:
    assert BrokerConfig().http_port == 8672
    assert BrokerConfig().http.enabled and BrokerConfig().http.host == "127.0.0.1"
    zero = [Listener(port=0)]
    assert BrokerConfig(listeners=zero).http_port == 0  # tests and embedding: any free port
    assert (
        BrokerConfig.model_validate({"listeners": zero, "http": {"port": 9000}}).http_port == 9000
    )
    with pytest.raises(ConfigError, match="tls_cert and tls_key go together"):
        load_config(http={"tls_cert": "cert.pem"})
    with pytest.raises(ConfigError, match=r"http\.max_ws_message_size"):
        load_config(http={"max_ws_message_size": 100})


async def test_http_off(tmp_path: Path) -> None:
    async with broker(tmp_path, http={"enabled": False}) as service:
        assert service.http is None and service.http_port is None
        async with await connect(f"amqp://127.0.0.1:{service.ports[0]}", timeout=T):
            pass


def test_command_line_http_flags(tmp_path: Path) -> None:
    with broker_process("--port", "0", "--data-dir", str(tmp_path), "--http-port", "0") as bp:
        port = _http_port(bp)
        raw = anyio.run(http_exchange, port, get("/healthz", "Connection: close"))
        assert parse(raw) == (200, {"status": "ok"})
        assert bp.terminate() == 0
    with broker_process("--port", "0", "--data-dir", str(tmp_path), "--no-http") as bp:
        anyio.run(_amqp_round_trip, bp.url)  # it serves (and handles SIGTERM by now)
        assert bp.terminate() == 0
        assert "HTTP on" not in bp.log and "broker stopped" in bp.log


def test_http_port_in_use_stops_the_broker_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ("--port", "0", "--data-dir", str(tmp_path), "--http-port", str(port))
        res = subprocess.run(cli(*args), capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    last = res.stderr.strip().splitlines()[-1]
    assert last == f"amqp10 broker: cannot listen on 127.0.0.1:{port}: address already in use"


async def _amqp_round_trip(url: str) -> None:
    async with await connect(f"amqp://{url}", timeout=T) as conn:
        assert isinstance(await (await conn.open_sender("q")).send(Message(body=1)), Accepted)


def _http_port(bp: Any) -> int:
    """The HTTP port from the broker's log (the line follows the AMQP listener's)."""
    deadline = time.monotonic() + T
    while time.monotonic() < deadline:
        m = re.search(r"HTTP on 127\.0\.0\.1:(\d+)", bp.log)
        if m:
            return int(m.group(1))
        time.sleep(0.02)
    raise AssertionError("no HTTP listener in the log:\n" + bp.log)
