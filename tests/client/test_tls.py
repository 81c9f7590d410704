"""amqps:// end to end: server certificates, client certificates, verification failures."""

from __future__ import annotations

import pytest
from anyio.streams.tls import TLSStream

from amqp10 import errors
from amqp10.client import connect
from amqp10.io.tls import client_context, server_context
from amqp10.message import Message
from amqp10.types import Accepted

from .helpers import WAIT, Certs, Service, no_leftover_tasks, running

pytestmark = pytest.mark.anyio


async def test_amqps_with_a_verified_server(certs: Certs) -> None:
    svc = Service()
    ctx = server_context(certs.server_cert, certs.server_key)
    async with no_leftover_tasks(), running(svc, ssl=ctx) as server:
        assert server.url.startswith("amqps://127.0.0.1:")
        async with await connect(
            server.url, ssl=client_context(cafile=certs.ca), timeout=WAIT
        ) as conn:
            assert isinstance(conn.driver.stream, TLSStream)
            sender = await conn.open_sender("q")
            assert isinstance(await sender.send(Message(body=b"x" * 300_000)), Accepted)
            assert (await conn.request("q", Message(body="ping"))).body == "pong: ping"


async def test_client_certificate_required(certs: Certs) -> None:
    ctx = server_context(
        certs.server_cert, certs.server_key, cafile=certs.ca, require_client_cert=True
    )
    async with running(Service(), ssl=ctx) as server:
        with_cert = client_context(
            cafile=certs.ca, certfile=certs.client_cert, keyfile=certs.client_key
        )
        async with await connect(server.url, ssl=with_cert, timeout=WAIT) as conn:
            sender = await conn.open_sender("q")
            assert isinstance(await sender.send(Message(body=1)), Accepted)
        # without one the server drops the connection (TLS 1.3: after our handshake)
        async with no_leftover_tasks():
            with pytest.raises(errors.TLSError) as info:
                await connect(server.url, ssl=client_context(cafile=certs.ca), timeout=WAIT)
        assert "ended the TLS session before sending anything" in str(info.value)
        assert "client certificate" in str(info.value)


async def test_untrusted_server_certificate(certs: Certs) -> None:
    ctx = server_context(certs.server_cert, certs.server_key)
    async with running(Service(), ssl=ctx) as server:
        async with no_leftover_tasks():
            with pytest.raises(errors.TLSError) as info:
                await connect(server.url, ssl=client_context(cafile=certs.rogue_ca), timeout=WAIT)
        message = str(info.value)
        assert message.startswith(
            f"TLS handshake with 127.0.0.1:{server.port} failed: certificate verify failed"
        )
        assert "\n" not in message


async def test_host_name_is_verified(certs: Certs) -> None:
    ctx = server_context(certs.other_cert, certs.other_key)
    async with running(Service(), ssl=ctx) as server:
        with pytest.raises(errors.TLSError, match=r"certificate verify failed: .*mismatch"):
            await connect(server.url, ssl=client_context(cafile=certs.ca), timeout=WAIT)
        # host-name checks can be turned off explicitly (the chain is still verified)
        loose = client_context(cafile=certs.ca, check_hostname=False)
        async with await connect(server.url, ssl=loose, timeout=WAIT) as conn:
            assert conn.is_open


async def test_amqps_needs_tls() -> None:
    with pytest.raises(ValueError, match="amqps:// needs TLS"):
        await connect("amqps://127.0.0.1:1", ssl=False)


async def test_plain_client_against_a_tls_listener(certs: Certs) -> None:
    ctx = server_context(certs.server_cert, certs.server_key)
    async with running(Service(), ssl=ctx) as server:
        url = server.url.replace("amqps://", "amqp://")
        async with no_leftover_tasks():
            with pytest.raises(errors.ConnectionError, match=r"closed the stream|reset by peer"):
                await connect(url, timeout=WAIT)
