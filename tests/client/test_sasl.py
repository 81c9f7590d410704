"""SASL on connect() and serve(): ANONYMOUS by default, SCRAM/PLAIN from URL credentials."""

from __future__ import annotations

import pytest

from amqp10 import errors
from amqp10.client import connect, serve
from amqp10.io.tls import client_context, server_context
from amqp10.message import Message
from amqp10.sasl import InMemoryCredentialStore
from amqp10.types import Accepted

from .helpers import WAIT, Certs, Service, no_leftover_tasks, running

pytestmark = pytest.mark.anyio


def _users() -> InMemoryCredentialStore:
    store = InMemoryCredentialStore()
    store.add_user("alice", "wonderland")
    return store


def _with_user(url: str, user: str, password: str) -> str:
    return url.replace("://", f"://{user}:{password}@")


async def test_anonymous_by_default_and_plain_amqp_allowed() -> None:
    svc = Service()
    async with running(svc) as server:
        async with await connect(server.url, timeout=WAIT) as conn:
            sender = await conn.open_sender("q")
            assert isinstance(await sender.send(Message(body=1)), Accepted)
        async with await connect(server.url, sasl=False, timeout=WAIT) as conn:
            sender = await conn.open_sender("q")
            assert isinstance(await sender.send(Message(body=2)), Accepted)
    assert [c.authenticated_as for c in svc.connections] == [None, None]


@pytest.mark.parametrize("mechanisms", [None, ["PLAIN"], ["SCRAM-SHA-256"]])
async def test_login_with_url_credentials(mechanisms: list[str] | None) -> None:
    svc = Service()
    async with running(svc, credentials=_users()) as server:
        url = _with_user(server.url, "alice", "wonderland")
        async with await connect(url, sasl_mechanisms=mechanisms, timeout=WAIT) as conn:
            assert (await conn.request("svc", Message(body="hi"))).body == "pong: hi"
    assert svc.connections[0].authenticated_as == "alice"


async def test_refused_login_says_so_in_one_line() -> None:
    async with running(Service(), credentials=_users()) as server:
        url = _with_user(server.url, "alice", "looking-glass")
        async with no_leftover_tasks():
            with pytest.raises(errors.AuthenticationError) as info:
                await connect(url, timeout=WAIT)
        message = str(info.value)
        assert message.startswith(f"SASL authentication with 127.0.0.1:{server.port} failed: ")
        assert "refused SCRAM-SHA-512 authentication" in message
        assert "\n" not in message
        assert info.value.condition == "sasl:auth"
        assert isinstance(info.value, ConnectionError)


async def test_no_credentials_for_a_server_that_requires_them() -> None:
    async with running(Service(), credentials=_users()) as server:
        with pytest.raises(errors.AuthenticationError, match="no SASL mechanism in common"):
            await connect(server.url, timeout=WAIT)
        with pytest.raises(errors.ConnectionError):
            await connect(server.url, sasl=False, timeout=WAIT)


async def test_sasl_client_against_a_peer_without_sasl() -> None:
    async with running(Service(), sasl_mechanisms=()) as server:
        with pytest.raises(errors.AuthenticationError, match="does not do SASL"):
            await connect(server.url, timeout=WAIT)
        async with await connect(server.url, sasl=False, timeout=WAIT) as conn:
            assert conn.is_open


async def test_bad_mechanism_names() -> None:
    with pytest.raises(ValueError, match="unsupported SASL mechanism"):
        serve("127.0.0.1", 0, Service(), sasl_mechanisms=["MAGIC"])
    with pytest.raises(errors.AuthenticationError, match="unsupported SASL mechanism"):
        await connect("amqp://127.0.0.1:1", sasl_mechanisms=["MAGIC"], timeout=WAIT)
    with pytest.raises(ValueError, match="need SASL"):
        await connect("amqp://u:p@127.0.0.1:1", sasl=False, timeout=WAIT)


async def test_external_with_a_client_certificate(certs: Certs) -> None:
    svc = Service()
    ctx = server_context(
        certs.server_cert, certs.server_key, cafile=certs.ca, require_client_cert=True
    )
    async with running(svc, ssl=ctx, credentials=_users()) as server:
        tls = client_context(cafile=certs.ca, certfile=certs.client_cert, keyfile=certs.client_key)
        async with await connect(server.url, ssl=tls, sasl_mechanisms=["EXTERNAL"], timeout=WAIT):
            pass
    assert svc.connections[0].authenticated_as == "CN=amqp10-test-client"
