"""OAuth 2 tokens on a real broker, as RabbitMQ's oauth2 backend takes them: a JWT as the
SASL PLAIN password (our 1.0 client, pika over 0-9-1), its scopes deciding publish,
consume and declare, refused at login when expired, badly signed or for another
audience; a connection closed when its token expires, unless renewed (1.0: ``PUT
/auth/tokens`` on ``/management``; 0-9-1: ``connection.update-secret``), and a renewal
re-checking what the connection holds; the token as ``Authorization: Bearer`` on
RabbitMQ's HTTP API and as the web console's login."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pika
import pika.exceptions
import pytest

from amqp10 import errors
from amqp10.broker.users import add_user
from amqp10.client import Connection, connect
from amqp10.management import http
from amqp10.message import Message
from amqp10.types import Accepted, Source, Target
from tests.amqp010.peer import SocketPeer

from .conftest import RunningBroker, broker_with
from .management.test_rabbitmq_api import call
from .test_oauth import KEYS, make_token

T = 10.0
UNAUTHORIZED = "amqp:unauthorized-access"
SHORT = 2.5
"""Seconds a short-lived token lives (the connection must see it expire)."""
MANAGE = "rabbitmq.write:*/%2Fmanagement"
"""The scope that lets a connection attach to ``/management`` (to renew its token there)."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    users = tmp_path / "users.toml"
    add_user(users, "carol", "carol-pw", iterations=1000)  # a file user beside the tokens
    oauth2 = {"resource_server_id": "rabbitmq", "signing_keys": KEYS}
    with broker_with(tmp_path, sasl={"users_file": users, "allow_anonymous": False}, oauth2=oauth2, queues=["in", "out"]) as b:
        yield b


def token(sub: str = "alice", *, lifetime: float = 600, scope: str = "", **claims: Any) -> str:
    scopes = scope or "rabbitmq.read:*/in rabbitmq.write:*/out rabbitmq.write:*/amq.default rabbitmq.configure:*/mine.* rabbitmq.write:*/mine.*"
    return make_token({"sub": sub, "aud": "rabbitmq", "exp": time.time() + lifetime, "scope": scopes, **claims})


@asynccontextmanager
async def token_client(b: RunningBroker, jwt: str) -> AsyncIterator[Connection]:
    async with await connect(f"amqp://anyone:{jwt}@{b.url}", sasl_mechanisms=["PLAIN"], timeout=T) as conn:
        yield conn


async def closed_by_broker(conn: Connection) -> errors.AMQPError:
    """Wait (bounded) until the broker closes ``conn``; the error a new link then gets."""
    with anyio.fail_after(T):
        await conn.wait_closed()
    with pytest.raises(errors.AMQPError) as ended:
        await conn.open_sender("out")
    return ended.value


async def put_token(conn: Connection, jwt: str | bytes) -> tuple[int, Any]:
    """``PUT /auth/tokens`` on RabbitMQ 4's management node, as its clients send it."""
    name = f"management-link-pair-{uuid.uuid4().hex[:6]}"
    s = await conn.open_sender(http.ADDRESS, name=name, source=Source(address=http.ADDRESS), properties=dict(http.LINK_PROPERTIES))
    r = await conn.open_receiver(
        http.ADDRESS, name=name, target=Target(address=http.ADDRESS), credit=1, properties=dict(http.LINK_PROPERTIES)
    )
    body = jwt.encode() if isinstance(jwt, str) else jwt
    assert isinstance(await s.send(Message(body=body, id="renew", to=http.TOKENS, subject="PUT", reply_to="$me")), Accepted)
    d = await r.receive(timeout=T)
    await d.accept()
    await s.close()
    await r.close()
    return int(str(d.message.subject)), d.message.body


# -- AMQP 1.0 ---------------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_a_token_logs_in_and_its_scopes_decide_publish_consume_and_declare(broker: RunningBroker) -> None:
    async with token_client(broker, token()) as conn:
        assert isinstance(await (await conn.open_sender("out")).send(Message("ok")), Accepted)
        await conn.open_receiver("in", credit=1)
        await conn.open_sender("mine.new")  # configure: mine.* may be declared
        assert "mine.new" in broker.broker.nodes
        for address, action in (("in", "write"), ("theirs.new", "configure")):
            with pytest.raises(errors.LinkError) as refused:
                await conn.open_sender(address)
            assert refused.value.condition == UNAUTHORIZED and action in str(refused.value)
        with pytest.raises(errors.LinkError) as refused:
            await conn.open_receiver("out")
        assert refused.value.condition == UNAUTHORIZED and "'alice'" in str(refused.value)
        assert any(c.handler.user == "alice" for c in broker.service.clients)  # the token's user


@pytest.mark.anyio
async def test_rabbitmq_management_takes_a_token_and_its_scopes_without_a_tag(broker: RunningBroker) -> None:
    """RabbitMQ 4's ``/management`` asks no management tag, only the permissions of what a
    request touches (its HTTP API and console do ask one): on a broker with a users file, a
    token with no ``tag:`` scope declares what its configure scope allows, and no more."""
    async with token_client(broker, token(scope=f"{MANAGE} rabbitmq.configure:*/mine.*")) as conn:
        m = conn.management(protocol="rabbitmq")
        await m.declare_queue("mine.by-token")
        assert "mine.by-token" in broker.broker.nodes
        with pytest.raises(errors.ForbiddenError):
            await m.declare_queue("theirs.by-token")
        assert "theirs.by-token" not in broker.broker.nodes


@pytest.mark.anyio
async def test_rabbitmq_management_asks_a_file_user_no_tag_either(broker: RunningBroker) -> None:
    """carol has no tags, and full permissions on '/' (the users file's default)."""
    async with await connect(f"amqp://carol:carol-pw@{broker.url}", sasl_mechanisms=["PLAIN"], timeout=T) as conn:
        await conn.management(protocol="rabbitmq").declare_queue("carols")
        assert "carols" in broker.broker.nodes
        with pytest.raises(errors.ForbiddenError):  # the $management node keeps its tags
            await conn.management(protocol="oasis").declare_queue("carols-2")


@pytest.mark.anyio
async def test_file_users_log_in_as_before(broker: RunningBroker) -> None:
    async with await connect(f"amqp://carol:carol-pw@{broker.url}", sasl_mechanisms=["PLAIN"], timeout=T) as conn:
        await conn.open_receiver("out", credit=1)  # the users file: full access on '/'


@pytest.mark.anyio
@pytest.mark.parametrize(
    "jwt",
    [
        token(lifetime=-5),
        make_token({"sub": "alice", "aud": "rabbitmq", "exp": time.time() + 600}, key=b"not the key at all, not at all.."),
        token(aud="another-server"),
    ],
    ids=["expired", "bad-signature", "wrong-audience"],
)
async def test_tokens_that_do_not_check_out_are_refused_at_login(broker: RunningBroker, jwt: str) -> None:
    with pytest.raises(errors.AuthenticationError):
        async with token_client(broker, jwt):
            pass


@pytest.mark.anyio
async def test_a_connection_is_closed_when_its_token_expires(broker: RunningBroker) -> None:
    async with token_client(broker, token(lifetime=SHORT)) as conn:
        ended = await closed_by_broker(conn)
        assert ended.condition == UNAUTHORIZED and ended.description == "credential expired"


@pytest.mark.anyio
async def test_put_auth_tokens_renews_and_refuses_bad_or_foreign_tokens(broker: RunningBroker) -> None:
    async with token_client(broker, token(lifetime=SHORT, scope=f"rabbitmq.read:*/* {MANAGE}")) as conn:
        assert await put_token(conn, token("mallory")) == (401, "failed to update credential: the new token is for user 'mallory', not 'alice'")
        status, why = await put_token(conn, token(aud="elsewhere"))
        assert status == 401 and "audience" in why
        status, why = await put_token(conn, token(scope="rabbitmq.read:other-vhost/*"))
        assert status == 401 and "vhost '/'" in why
        assert (await put_token(conn, token(lifetime=600, scope="rabbitmq.write:*/*")))[0] == 204
        await anyio.sleep(SHORT + 1.5)  # past the first token's expiry, and a tick more
        # still open, and the renewed token's scopes apply: write anywhere, read nothing
        assert isinstance(await (await conn.open_sender("in")).send(Message("after")), Accepted)
        with pytest.raises(errors.LinkError):
            await conn.open_receiver("in")


@pytest.mark.anyio
async def test_a_renewal_ends_the_sessions_holding_links_the_new_token_does_not_allow(broker: RunningBroker) -> None:
    """As RabbitMQ re-checks each session's links when the token is renewed: a session with
    a consumer the new token may not read from ends (amqp:unauthorized-access, the
    refusal), the others go on; the renewal itself is answered 204 first."""
    first = f"rabbitmq.read:*/in rabbitmq.write:*/out {MANAGE}"
    async with token_client(broker, token(scope=first)) as conn:
        reading = await conn.session()
        consumer = await conn.open_receiver("in", credit=5, session=reading)
        writing = await conn.session()
        sender = await conn.open_sender("out", session=writing)
        assert (await put_token(conn, token(scope=f"rabbitmq.write:*/out {MANAGE}")))[0] == 204
        with anyio.fail_after(T):
            while reading.is_open:
                await anyio.sleep(0.05)
        with pytest.raises(errors.AMQPError) as ended:
            await consumer.receive(timeout=T)
        assert f"{UNAUTHORIZED}: read access to queue 'in' in vhost '/' refused for user 'alice'" in str(ended.value)
        assert isinstance(await sender.send(Message("still allowed")), Accepted)
        assert writing.is_open and not broker.broker.nodes["in"].consumers


@pytest.mark.anyio
async def test_a_renewal_that_still_allows_every_link_ends_nothing(broker: RunningBroker) -> None:
    async with token_client(broker, token(scope=f"rabbitmq.read:*/in rabbitmq.write:*/out {MANAGE}")) as conn:
        consumer = await conn.open_receiver("in", credit=5)
        sender = await conn.open_sender("out")
        assert (await put_token(conn, token(scope=f"rabbitmq.read:*/* rabbitmq.write:*/* {MANAGE}")))[0] == 204
        assert isinstance(await sender.send(Message("ok")), Accepted)
        await (await conn.open_sender("in")).send(Message("to the consumer"))
        assert (await consumer.receive(timeout=T)).message.body == "to the consumer"


@pytest.mark.anyio
async def test_put_auth_tokens_on_a_file_users_connection_is_refused(broker: RunningBroker) -> None:
    async with await connect(f"amqp://carol:carol-pw@{broker.url}", sasl_mechanisms=["PLAIN"], timeout=T) as conn:
        status, why = await put_token(conn, token("carol"))
        assert status == 401 and "did not log in with an OAuth 2 token" in why


# -- AMQP 0-9-1 (pika) ---------------------------------------------------------------------------------
def pika_connect(b: RunningBroker, jwt: str) -> pika.BlockingConnection:
    creds = pika.PlainCredentials("anyone", jwt)
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port, credentials=creds, blocked_connection_timeout=T))


def test_pika_logs_in_with_a_token_and_its_scopes_decide(broker: RunningBroker) -> None:
    conn = pika_connect(broker, token())
    try:
        ch = conn.channel()
        ch.basic_publish("", "out", b"ok")
        ch.queue_declare("mine.q")  # configure mine.*
        ch.basic_consume("in", lambda *a: None)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            ch.queue_declare("theirs.q")
        assert refused.value.reply_code == 403
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            ch.basic_consume("out", lambda *a: None)
        assert refused.value.reply_code == 403 and "alice" in refused.value.reply_text
    finally:
        if conn.is_open:
            conn.close()


@pytest.mark.parametrize("jwt", [token(lifetime=-5), token(aud="x")], ids=["expired", "wrong-audience"])
def test_pika_with_a_bad_token_is_refused(broker: RunningBroker, jwt: str) -> None:
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika_connect(broker, jwt)


def wait_closed(conn: pika.BlockingConnection) -> pika.exceptions.ConnectionClosedByBroker:
    deadline = time.monotonic() + T
    while time.monotonic() < deadline:
        try:
            conn.process_data_events(time_limit=0.2)
        except pika.exceptions.ConnectionClosedByBroker as exc:
            return exc
    raise AssertionError("the broker did not close the connection")


def test_pika_connection_closed_at_expiry_unless_renewed_by_update_secret(broker: RunningBroker) -> None:
    expiring = pika_connect(broker, token(lifetime=SHORT))
    renewed = pika_connect(broker, token(lifetime=SHORT))
    renewed.update_secret(token(lifetime=600), "renewal")
    closed = wait_closed(expiring)
    assert (closed.reply_code, closed.reply_text) == (320, "CONNECTION_FORCED - credential expired")
    renewed.channel().basic_publish("", "out", b"still here")  # past the first token's expiry
    renewed.process_data_events(time_limit=0.1)
    assert renewed.is_open
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as refused:  # the connection ends
        renewed.update_secret(token("mallory"), "someone else")
    assert refused.value.reply_code == 530


def test_pika_update_secret_cancels_the_consumers_the_new_token_does_not_allow(broker: RunningBroker) -> None:
    """As RabbitMQ's channels re-check their consumers after ``connection.update-secret``:
    one on a queue the new token may not read is cancelled (``basic.cancel``, which pika
    takes), the channel stays open and its other consumers go on."""
    conn = pika_connect(broker, token(scope="rabbitmq.read:*/in rabbitmq.read:*/out rabbitmq.write:*/*"))
    try:
        ch = conn.channel()
        cancelled: list[str] = []
        ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
        got: list[bytes] = []
        ch.basic_consume("in", lambda c, m, p, body: None, consumer_tag="on-in")
        ch.basic_consume("out", lambda c, m, p, body: got.append(body), auto_ack=True, consumer_tag="on-out")
        conn.update_secret(token(scope="rabbitmq.read:*/out rabbitmq.write:*/*"), "narrower")
        deadline = time.monotonic() + T
        while not cancelled and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)
        assert cancelled == ["on-in"]
        assert not broker.broker.nodes["in"].consumers
        ch.basic_publish("", "out", b"still consumed")
        while not got and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)
        assert got == [b"still consumed"] and ch.is_open
    finally:
        if conn.is_open:
            conn.close()


# -- AMQP 0-10 ---------------------------------------------------------------------------------------
def test_0_10_plain_takes_a_token_too(broker: RunningBroker) -> None:
    p = SocketPeer(broker.port, mechanism="PLAIN", response=b"\x00anyone\x00" + token().encode())
    try:
        p.attach()
        p.call("queue.declare", queue="mine.q010")  # configure mine.*
        assert "mine.q010" in broker.broker.nodes
        assert any(c.handler.user == "alice" for c in broker.service.clients)
    finally:
        p.close()
    with pytest.raises(AssertionError, match="authentication failed"):
        SocketPeer(broker.port, mechanism="PLAIN", response=b"\x00anyone\x00" + token(lifetime=-5).encode())


@pytest.mark.anyio
async def test_tokens_alone_without_a_users_file(tmp_path: Path) -> None:
    oauth2 = {"resource_server_id": "rabbitmq", "signing_keys": KEYS}
    with broker_with(tmp_path, sasl={"allow_anonymous": False}, oauth2=oauth2, queues=["out"]) as b:
        async with token_client(b, token()) as conn:  # PLAIN is offered for tokens
            assert isinstance(await (await conn.open_sender("out")).send(Message("ok")), Accepted)
        with pytest.raises(errors.AuthenticationError):
            async with await connect(f"amqp://carol:carol-pw@{b.url}", sasl_mechanisms=["PLAIN"], timeout=T):
                pass
        await anyio.to_thread.run_sync(lambda: pika_connect(b, token()).close())



@pytest.mark.anyio
async def test_guest_still_logs_in_when_tokens_turn_plain_on(tmp_path: Path) -> None:
    """No users file, anonymous allowed (the quick start) plus [oauth2]: PLAIN is offered
    for tokens, and RabbitMQ's clients send guest/guest by habit (they chose ANONYMOUS
    before PLAIN was offered): guest logs in (1.0 as ``guest``, 0-9-1 as the anonymous
    user); other passwords that are not tokens, and bad tokens, are still refused."""
    oauth2 = {"resource_server_id": "rabbitmq", "signing_keys": KEYS}
    with broker_with(tmp_path, oauth2=oauth2, queues=["out"]) as b:
        async with await connect(f"amqp://guest:guest@{b.url}", sasl_mechanisms=["PLAIN"], timeout=T) as conn:
            assert isinstance(await (await conn.open_sender("out")).send(Message("ok")), Accepted)
            assert any(c.handler.user == "guest" for c in b.service.clients)
        for user, password in (("guest", "wrong"), ("carol", "carol-pw"), ("guest", token(lifetime=-5))):
            with pytest.raises(errors.AuthenticationError):
                async with await connect(f"amqp://{user}:{password}@{b.url}", sasl_mechanisms=["PLAIN"], timeout=T):
                    pass
        await anyio.to_thread.run_sync(lambda: pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port)).close())


# -- HTTP: RabbitMQ's API and the console ---------------------------------------------------------
ADMIN = "rabbitmq.tag:administrator rabbitmq.read:*/* rabbitmq.write:*/* rabbitmq.configure:*/*"


def http_call(b: RunningBroker, method: str, path: str, *, headers: dict[str, str] | None = None, body: Any = None) -> tuple[int, dict[str, str], Any]:
    """``method path`` on the broker's HTTP listener, with no basic authentication."""
    return call(b, method, path, body, auth=None, headers=headers)


def bearer(jwt: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {jwt}"}


def test_the_http_api_takes_a_bearer_token_its_tags_and_scopes(broker: RunningBroker) -> None:
    """RabbitMQ's management API with OAuth 2: ``Authorization: Bearer <JWT>``, the token's
    ``tag:`` scopes as the management tags, its resource scopes as the permissions."""
    status, _, me = http_call(broker, "GET", "/api/whoami", headers=bearer(token(scope=ADMIN)))
    assert (status, me) == (200, {"name": "alice", "tags": ["administrator"]})
    assert http_call(broker, "PUT", "/api/queues/%2F/by-token", headers=bearer(token(scope=ADMIN)), body={})[0] == 201
    assert "by-token" in broker.broker.nodes
    # management tag, but configure only on mine.*: listing works, declaring theirs is refused
    managed = token(scope="rabbitmq.tag:management rabbitmq.configure:*/mine.* rabbitmq.read:*/*")
    assert http_call(broker, "GET", "/api/queues", headers=bearer(managed))[0] == 200
    assert http_call(broker, "PUT", "/api/queues/%2F/mine.q", headers=bearer(managed), body={})[0] == 201
    status, _, why = http_call(broker, "PUT", "/api/queues/%2F/theirs.q", headers=bearer(managed), body={})
    assert status == 401 and "alice" in why["reason"]
    # no management tag at all: refused at the door, as RabbitMQ refuses it
    status, headers, why = http_call(broker, "GET", "/api/overview", headers=bearer(token()))
    assert (status, why["reason"]) == (401, "Not management user") and "www-authenticate" in headers


@pytest.mark.parametrize(
    "jwt",
    [token(lifetime=-5, scope=ADMIN), token(aud="elsewhere", scope=ADMIN), "not.a.token"],
    ids=["expired", "wrong-audience", "garbage"],
)
def test_the_http_api_refuses_a_bad_token(broker: RunningBroker, jwt: str) -> None:
    status, _, why = http_call(broker, "GET", "/api/overview", headers=bearer(jwt))
    assert (status, why) == (401, {"error": "not_authorised", "reason": "Not_Authorized"})


def test_the_http_api_checks_expiry_at_each_request(broker: RunningBroker) -> None:
    jwt = token(lifetime=SHORT, scope=ADMIN)
    assert http_call(broker, "GET", "/api/overview", headers=bearer(jwt))[0] == 200
    time.sleep(SHORT + 0.5)  # past its expiry
    assert http_call(broker, "GET", "/api/overview", headers=bearer(jwt))[0] == 401


def test_a_bearer_token_on_the_quick_start_is_judged_by_the_token(tmp_path: Path) -> None:
    """No users file, anonymous allowed, loopback: a request without credentials gets in
    as the guest, one with a token is the token's user (and an expired token is refused)."""
    oauth2 = {"resource_server_id": "rabbitmq", "signing_keys": KEYS}
    with broker_with(tmp_path, oauth2=oauth2) as b:
        assert http_call(b, "GET", "/api/whoami")[2] == {"name": "guest", "tags": ["administrator"]}
        assert http_call(b, "GET", "/api/whoami", headers=bearer(token(scope=ADMIN)))[2]["name"] == "alice"
        assert http_call(b, "GET", "/api/whoami", headers=bearer(token(lifetime=-5, scope=ADMIN)))[0] == 401


def console_login(b: RunningBroker, jwt: str) -> tuple[int, str | None, Any]:
    """``POST /console/api/login`` with a token: the status, the session cookie, the body."""
    status, headers, body = http_call(b, "POST", "/console/api/login", body={"token": jwt})
    cookie = headers.get("set-cookie")
    return status, cookie.split(";")[0] if cookie else None, body


def test_the_console_logs_in_with_a_token_until_it_expires(broker: RunningBroker) -> None:
    status, cookie, body = console_login(broker, token(lifetime=SHORT + 1, scope=ADMIN))
    assert status == 200 and body["user"] == "alice" and cookie is not None
    assert http_call(broker, "GET", "/console/api/overview", headers={"Cookie": cookie})[0] == 200
    status, _, me = http_call(broker, "GET", "/console/api/rmq/whoami", headers={"Cookie": cookie})
    assert (status, me["tags"]) == (200, ["administrator"])
    time.sleep(SHORT + 1.5)  # past the token's expiry: the session ends with it
    assert http_call(broker, "GET", "/console/api/overview", headers={"Cookie": cookie})[0] == 401


@pytest.mark.parametrize(
    ("jwt", "status", "why"),
    [
        (token(scope="rabbitmq.tag:management rabbitmq.read:*/*"), 403, "its token gives no administrator tag"),
        (token(lifetime=-5, scope=ADMIN), 401, "the token does not log in"),
    ],
    ids=["no-admin-tag", "expired"],
)
def test_the_console_refuses_a_token_without_the_admin_tag_or_expired(broker: RunningBroker, jwt: str, status: int, why: str) -> None:
    got, cookie, body = console_login(broker, jwt)
    assert (got, cookie) == (status, None) and why in body["error"]
