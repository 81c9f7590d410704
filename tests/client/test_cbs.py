"""Claims-based security from the client: ``$cbs`` put-token against our broker's Service Bus mode.

The broker (``[servicebus] enabled``) checks every token as Azure Service Bus does: a
SAS token's HMAC against the key it names, its expiry, its scope against the link's
entity; a link without a covering token is refused, and detached once its token
expired without renewal. Everything runs over loopback; every wait is bounded.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import SocketAttribute
from anyio.streams.tls import TLSListener

import amqp10.sync
from amqp10 import errors
from amqp10.broker.amqp1.servicebus.tokens import check_sas
from amqp10.cbs import (
    SAS_TOKEN,
    CbsError,
    PutToken,
    make_sas_token,
    parse_put_token,
    parse_put_token_reply,
    parse_sas_token,
    put_token_reply,
    put_token_request,
    sas_signature_matches,
)
from amqp10.client import Claims, JwtCredential, SasCredential, SettleMode, Token, connect
from amqp10.client.azure import WEBSOCKET_PATH, parse_connection_string
from amqp10.client.reconnect import ReconnectPolicy
from amqp10.io import Signal
from amqp10.io.tls import client_context, server_context
from amqp10.message import Message
from amqp10.types import Accepted
from tests.broker.conftest import broker_in_loop, broker_with

from .helpers import WAIT, Certs, wait_for

KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"
JWT_SECRET = "jwt-secret"
SERVICEBUS = {
    "enabled": True,
    "shared_access_keys": [{"name": KEY_NAME, "key": KEY}],
    "jwt_secret": JWT_SECRET,
    "queues": [{"name": "q1"}, {"name": "q2"}],
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def servicebus(tmp_path: Path) -> AsyncIterator[int]:
    """Our broker in Service Bus mode, in this loop; yields its port."""
    async with broker_in_loop(tmp_path, servicebus=SERVICEBUS) as service:
        yield service.ports[0]


class Counting:
    """A credential that counts the tokens asked of it (by audience) and fires on each."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[str] = []
        self.asked = Signal()

    async def get_token(self, audience: str) -> Token:
        token: Token = await self.inner.get_token(audience)
        self.calls.append(audience)
        self.asked.fire()
        return token


def conn_str(port: int, key: str = KEY) -> str:
    return f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName={KEY_NAME};SharedAccessKey={key};UseDevelopmentEmulator=true"


def jwt(claims: dict[str, Any], secret: str = JWT_SECRET) -> str:
    def part(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    head = part({"alg": "HS256", "typ": "JWT"}) + "." + part(claims)
    sig = hmac.new(secret.encode(), head.encode(), hashlib.sha256).digest()
    return head + "." + base64.urlsafe_b64encode(sig).rstrip(b"=").decode()


async def round_trip(conn: Any, queue: str, body: str) -> None:
    sender = await conn.open_sender(queue, settle_mode=SettleMode.AT_LEAST_ONCE)
    assert isinstance(await sender.send(Message(body=body)), Accepted)
    receiver = await conn.open_receiver(queue, credit=1)
    d = await receiver.receive()
    assert d.message.body == body
    await d.accept()


# -- the shared messages ----------------------------------------------------------------------


def test_sas_tokens_made_here_pass_the_brokers_check() -> None:
    now = time.time()
    token = make_sas_token("sb://ns.example/q 1", KEY_NAME, KEY, int(now) + 60)
    grant = check_sas(token, {KEY_NAME: (KEY, frozenset({"Send"}))}, now)
    assert grant.scope == "sb://ns.example/q 1" and grant.expires == int(now) + 60
    fields = parse_sas_token(token)
    assert sas_signature_matches(fields, KEY) and not sas_signature_matches(fields, "other")
    with pytest.raises(CbsError, match="lacks sig"):
        parse_sas_token("SharedAccessSignature sr=x&se=1&skn=k")


def test_put_token_request_and_reply_round_trip() -> None:
    put = PutToken(SAS_TOKEN, "sb://ns/q", "the-token", 1_700_000_000.0)
    msg = Message.decode(put_token_request(put).encode())
    assert parse_put_token(msg.application_properties or {}, msg.body) == put
    assert parse_put_token_reply(put_token_reply(401, "no")) == (401, "no")
    assert parse_put_token_reply({"statusCode": 202}) == (202, "")
    assert parse_put_token_reply({"statusCode": 202, "statusDescription": "ok"}) == (202, "ok")
    assert parse_put_token_reply({})[0] == 500
    assert parse_put_token_reply({"status-code": True})[0] == 500  # a bool is no status code
    for props, reason in [
        ({"operation": "get-token"}, "unsupported"),
        ({"operation": "put-token", "type": "jwt"}, "audience"),
        ({"operation": "put-token", "type": "other", "name": "a"}, "token type"),
    ]:
        with pytest.raises(CbsError, match=reason):
            parse_put_token(props, "t")


def test_claims_audiences() -> None:
    per_entity = Claims(SasCredential("k", "v"), "sb://ns.example")
    assert per_entity.audience_for("q") == "sb://ns.example/q"
    assert (
        per_entity.audience_for("amqps://ns.example/t/Subscriptions/s")
        == "sb://ns.example/t/Subscriptions/s"
    )
    assert per_entity.audience_for("q/$management") == "sb://ns.example/q"
    assert per_entity.audience_for("$cbs") is None and per_entity.audience_for(None) is None
    assert (
        Claims(SasCredential("k", "v"), "sb://ns.example/", per_entity=False).audience_for("q")
        == "sb://ns.example/"
    )


# -- connection strings -----------------------------------------------------------------------


def test_connection_strings() -> None:
    cs = parse_connection_string(
        "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=abc=;EntityPath=q"
    )
    assert (cs.host, cs.key_name, cs.key, cs.entity_path, cs.emulator) == (
        "ns.servicebus.windows.net",
        "k",
        "abc=",
        "q",
        False,
    )
    assert cs.url() == "amqps://ns.servicebus.windows.net:5671"
    assert cs.url(websocket=True) == f"wss://ns.servicebus.windows.net:443{WEBSOCKET_PATH}"
    assert cs.resource == "sb://ns.servicebus.windows.net"
    emu = parse_connection_string(
        "endpoint=sb://localhost;sharedaccesskeyname=k;sharedaccesskey=v;UseDevelopmentEmulator=true;"
    )
    assert emu.url() == "amqp://localhost:5672"
    sig = make_sas_token("sb://ns/", "k", "v", 2_000_000_000)
    assert (
        parse_connection_string(f"Endpoint=sb://ns/;SharedAccessSignature={sig}").signature == sig
    )


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("SharedAccessKeyName=k;SharedAccessKey=v", "Endpoint is missing"),
        (
            "Endpoint=amqp://ns/;SharedAccessKeyName=k;SharedAccessKey=v",
            "Endpoint must be an sb://",
        ),
        ("Endpoint=sb://ns:x/;SharedAccessKeyName=k;SharedAccessKey=v", "Endpoint has a bad port"),
        ("Endpoint=sb://ns/;SharedAccessKeyName=k", "SharedAccessKey is missing"),
        ("Endpoint=sb://ns/;SharedAccessKey=v", "SharedAccessKeyName is missing"),
        ("Endpoint=sb://ns/", "SharedAccessKeyName and SharedAccessKey"),
        (
            "Endpoint=sb://ns/;SharedAccessKeyName=k;SharedAccessKey=",
            "SharedAccessKey has no value",
        ),
        (
            "Endpoint=sb://ns/;SharedAccessKeyName=k;SharedAccessKey=v;Colour=red",
            "unknown field 'Colour'",
        ),
        (
            "Endpoint=sb://ns/;Endpoint=sb://other/;SharedAccessKeyName=k;SharedAccessKey=v",
            "Endpoint is given twice",
        ),
        (
            "Endpoint=sb://ns/;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=yes",
            "UseDevelopmentEmulator",
        ),
        (
            "Endpoint=sb://ns/;SharedAccessSignature=Bearer x",
            "SharedAccessSignature is not a SAS token",
        ),
    ],
)
def test_a_bad_connection_string_names_the_field(text: str, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        parse_connection_string(text)


# -- against the broker ---------------------------------------------------------------------


@pytest.mark.anyio
async def test_connection_string_puts_a_sas_token_per_entity(tmp_path: Path) -> None:
    async with servicebus(tmp_path) as port, await connect(conn_str(port), timeout=WAIT) as conn:
        assert conn.claims is not None and conn.claims.per_entity
        await round_trip(conn, "q1", "hello")
        await round_trip(conn, "q2", "again")
        assert sorted(conn._audiences) == [f"sb://127.0.0.1:{port}/q1", f"sb://127.0.0.1:{port}/q2"]


def test_the_blocking_client_takes_a_connection_string(tmp_path: Path) -> None:
    with (
        broker_with(tmp_path, servicebus=SERVICEBUS) as b,
        amqp10.sync.connect(conn_str(b.port), timeout=WAIT) as conn,
    ):
        conn.open_sender("q1").send(Message(body="sync"))
        r = conn.open_receiver("q1", credit=1)
        d = r.receive(timeout=WAIT)
        assert d.message.body == "sync"
        d.accept()
        assert conn.put_token(f"sb://127.0.0.1:{b.port}/q1") > time.time()


@pytest.mark.anyio
async def test_a_wrong_key_is_an_authentication_error_naming_the_audience(tmp_path: Path) -> None:
    async with (
        servicebus(tmp_path) as port,
        await connect(conn_str(port, key="not-the-key"), timeout=WAIT) as conn,
    ):
        with pytest.raises(errors.AuthenticationError) as info:
            await conn.open_sender("q1")
        message = str(info.value)
        assert (
            f"sb://127.0.0.1:{port}/q1" in message and "signature does not match the key" in message
        )
        # a JWT signed with another secret: refused the same way, with the broker's reason
        with pytest.raises(errors.AuthenticationError, match="JWT's signature"):
            conn.use_claims(
                Claims(
                    JwtCredential(
                        lambda aud: (jwt({"exp": time.time() + 60}, "x"), time.time() + 60)
                    ),
                    "sb://h",
                )
            )
            await conn.open_sender("q1")


@pytest.mark.anyio
async def test_a_link_is_refused_until_its_token_is_put(tmp_path: Path) -> None:
    async with (
        servicebus(tmp_path) as port,
        await connect(f"amqp://127.0.0.1:{port}", timeout=WAIT) as conn,
    ):
        with pytest.raises(errors.LinkError, match="unauthorized-access"):
            await conn.open_sender("q1")
        conn.use_claims(Claims(SasCredential(KEY_NAME, KEY), f"sb://127.0.0.1:{port}"))
        await round_trip(conn, "q1", "after the token")


@pytest.mark.anyio
async def test_a_link_waits_for_its_put_token(tmp_path: Path) -> None:
    """A JWT from an async callable that holds its answer: the link waits for it."""
    release = anyio.Event()
    asked = anyio.Event()

    async def fetch(audience: str) -> tuple[str, float]:
        asked.set()
        await release.wait()
        expires = time.time() + 60
        return jwt({"exp": expires, "aud": audience, "rights": ["Send"]}), expires

    async with (
        servicebus(tmp_path) as port,
        await connect(
            f"amqp://127.0.0.1:{port}", claims=Claims(JwtCredential(fetch)), timeout=WAIT
        ) as conn,
    ):
        opened: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def open_it() -> None:
                opened.append(await conn.open_sender("q1", settle_mode=SettleMode.AT_LEAST_ONCE))

            tg.start_soon(open_it)
            with anyio.fail_after(WAIT):
                await asked.wait()
            assert not opened  # still waiting for the token
            release.set()
        assert isinstance(await opened[0].send(Message(body=1)), Accepted)
        # the token grants Send only: a receiver is refused by the broker
        with pytest.raises(errors.LinkError, match="unauthorized-access"):
            await conn.open_receiver("q1")


@pytest.mark.anyio
async def test_a_sync_jwt_callable_runs_off_the_loop(tmp_path: Path) -> None:
    def fetch(audience: str) -> tuple[str, float]:
        time.sleep(0.01)  # a blocking call to an identity provider would not stall the loop
        expires = time.time() + 60
        return jwt({"exp": expires}), expires

    async with (
        servicebus(tmp_path) as port,
        await connect(
            f"amqp://127.0.0.1:{port}", claims=Claims(JwtCredential(fetch)), timeout=WAIT
        ) as conn,
    ):
        await round_trip(conn, "q1", "jwt")


@pytest.mark.anyio
async def test_tokens_are_renewed_before_they_expire(tmp_path: Path) -> None:
    """Two-second SAS tokens renewed at half their life: the link outlives several tokens
    (the broker detaches a link whose token expired unrenewed)."""
    cred = Counting(SasCredential(KEY_NAME, KEY, lifetime=2))
    async with servicebus(tmp_path) as port, await connect(conn_str(port), timeout=WAIT) as conn:
        conn.use_claims(Claims(cred, f"sb://127.0.0.1:{port}", renew_at=0.5))
        sender = await conn.open_sender("q1", settle_mode=SettleMode.AT_LEAST_ONCE)
        first_expiry = conn._audiences[f"sb://127.0.0.1:{port}/q1"].expires
        await wait_for(cred.asked, lambda: len(cred.calls) >= 4, timeout=15)
        assert time.time() > first_expiry  # the first token is gone...
        assert isinstance(
            await sender.send(Message(body="still here")), Accepted
        )  # ...the link is not
        assert sender.is_open
        assert set(cred.calls) == {f"sb://127.0.0.1:{port}/q1"}


@pytest.mark.anyio
async def test_without_renewal_the_broker_detaches_the_link(tmp_path: Path) -> None:
    """The control for the test above: a token put once, not renewed, ends the link."""
    expires = time.time() + 2
    once = Claims(
        JwtCredential(lambda aud: (jwt({"exp": expires}), expires)), "sb://h", renew_at=0.99
    )
    async with (
        servicebus(tmp_path) as port,
        await connect(f"amqp://127.0.0.1:{port}", claims=once, timeout=WAIT) as conn,
    ):
        sender = await conn.open_sender("q1", settle_mode=SettleMode.AT_LEAST_ONCE)
        # the renewal (at 99 % of two seconds) puts the same, now expiring token; the
        # broker refuses it once expired and detaches the link
        with anyio.fail_after(15):
            while sender.is_open:
                await sender._sig.wait()
        assert "expired" in str(sender.error) or "unauthorized" in str(sender.error)


class CuttingProxy:
    """Forwards TCP to ``upstream``; :meth:`cut` drops every connection so far."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.scopes: list[anyio.CancelScope] = []

    def cut(self) -> None:
        for scope in self.scopes:
            scope.cancel()

    async def handle(self, client: Any) -> None:
        upstream = await anyio.connect_tcp("127.0.0.1", self.upstream)
        async with client, upstream, anyio.create_task_group() as tg:
            self.scopes.append(tg.cancel_scope)
            tg.start_soon(self.pump, client, upstream, tg.cancel_scope)
            tg.start_soon(self.pump, upstream, client, tg.cancel_scope)

    @staticmethod
    async def pump(src: Any, dst: Any, scope: anyio.CancelScope) -> None:
        try:
            async for chunk in src:
                await dst.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        scope.cancel()


@pytest.mark.anyio
async def test_tokens_are_put_again_after_a_reconnect_before_the_links_reattach(
    tmp_path: Path,
) -> None:
    cred = Counting(SasCredential(KEY_NAME, KEY))
    policy = ReconnectPolicy(initial_delay=0.05, max_delay=0.5, max_time=30.0)
    async with servicebus(tmp_path) as port:
        proxy = CuttingProxy(port)
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        front = listener.extra(SocketAttribute.local_port)
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, proxy.handle)
            claims = Claims(cred, f"sb://127.0.0.1:{port}")
            async with await connect(
                f"amqp://127.0.0.1:{front}", claims=claims, reconnect=policy, timeout=WAIT
            ) as conn:
                sender = await conn.open_sender("q1", settle_mode=SettleMode.AT_LEAST_ONCE)
                receiver = await conn.open_receiver("q2", credit=1)
                assert len(cred.calls) == 2
                proxy.cut()
                # the send waits for the new connection, its tokens, and the re-attach
                assert isinstance(await sender.send(Message(body="after")), Accepted)
                assert conn.reconnects == 1
                assert sorted(cred.calls[2:]) == [
                    f"sb://127.0.0.1:{port}/q1",
                    f"sb://127.0.0.1:{port}/q2",
                ]
                other = await conn.open_sender("q2")
                await other.send(Message(body="to q2"))
                d = await receiver.receive(timeout=WAIT)
                assert d.message.body == "to q2"
                await d.accept()
            tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_websocket_transport_asks_for_the_azure_endpoint(certs: Certs) -> None:
    """``websocket=True``: TLS to the endpoint's host, then the WebSocket upgrade for
    ``/$servicebus/websocket`` with the ``amqp`` subprotocol (our broker serves AMQP over
    WebSockets on other paths, so a listener here records the request and hangs up)."""
    seen: list[bytes] = []
    tls = server_context(certs.server_cert, certs.server_key)
    tcp = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = tcp.listeners[0].extra(SocketAttribute.local_port)
    listener = TLSListener(tcp, tls)

    async def handle(stream: Any) -> None:
        async with stream:
            head = b""
            with anyio.move_on_after(WAIT):
                while b"\r\n\r\n" not in head:
                    head += await stream.receive()
            seen.append(head)

    text = f"Endpoint=sb://localhost:{port}/;SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY}"
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        with pytest.raises(errors.AMQPError):
            await connect(text, websocket=True, ssl=client_context(cafile=certs.ca), timeout=WAIT)
        tg.cancel_scope.cancel()
    request = seen[0].decode().lower()
    assert request.startswith(f"get {WEBSOCKET_PATH.lower()} http/1.1\r\n")
    assert "sec-websocket-protocol: amqp" in request
    assert f"host: localhost:{port}" in request
