"""End to end over loopback: our own client (``amqp10.connect``, and ``amqp10.sync``) against our broker.

The broker runs in a thread with its own event loop (``broker_with``); the
async tests run in pytest's loop. Every wait is bounded; the only sleep lets a
message's TTL run out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from anyio.streams.tls import TLSAttribute

import amqp10.sync
from amqp10 import errors
from amqp10.broker.config import AddressRule, Listener, QueuePolicy
from amqp10.broker.core import Queue, Topic
from amqp10.client import Receiver, connect
from amqp10.io.tls import client_context
from amqp10.message import Message
from amqp10.types import (
    Accepted,
    Error,
    ErrorCondition,
    Rejected,
    Source,
    TerminusDurability,
    symbol,
)
from tests.broker.amqp1.e2e import ADDRESS_RULES, QUIET, T, client, nothing_arrives
from tests.broker.conftest import RunningBroker, broker_with, with_certificate_user
from tests.client.helpers import Certs, have_openssl, make_certs, wait_for

pytestmark = pytest.mark.anyio



@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_with(tmp_path, addresses=ADDRESS_RULES) as b:
        yield b


async def in_broker(b: RunningBroker, fn: Callable[[], Any]) -> Any:
    """Evaluate ``fn`` in the broker's event loop (no race with its thread)."""
    return await anyio.to_thread.run_sync(b.portal.call, fn)


def queue(b: RunningBroker, name: str) -> Queue:
    node = b.broker.nodes[name]
    assert isinstance(node, Queue)
    return node


async def take(r: Receiver, n: int, *, accept: bool = True) -> list[Any]:
    bodies = []
    for _ in range(n):
        d = await r.receive(timeout=T)
        bodies.append(d.message.body)
        if accept:
            await d.accept()
    return bodies


# -- queues -----------------------------------------------------------------------------------
async def test_competing_consumers_round_robin(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        receivers = [
            await conn.open_receiver("work", credit=20, name=f"worker-{i}") for i in range(3)
        ]
        sender = await conn.open_sender("work")
        for i in range(12):
            assert isinstance(await sender.send(Message(body=i)), Accepted)
        got = [await take(r, 4) for r in receivers]
        assert got == [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8, 11]]
        assert await nothing_arrives(receivers[0])
    q = queue(broker, "work")
    assert await in_broker(broker, lambda: (q.count, q.stats.acked)) == (0, 12)


async def test_competing_consumers_on_separate_connections(broker: RunningBroker) -> None:
    async with client(broker) as a, client(broker) as b, client(broker) as p:
        ra = await a.open_receiver("shared", credit=5)
        rb = await b.open_receiver("shared", credit=5)
        sender = await p.open_sender("shared")
        for i in range(40):
            await sender.send(Message(body=i))
        got_a: list[int] = []
        got_b: list[int] = []

        async def drain(r: Receiver, into: list[int]) -> None:
            while len(got_a) + len(got_b) < 40:
                try:
                    d = await r.receive(timeout=QUIET)
                except errors.TimeoutError:
                    continue
                into.append(d.message.body)
                await d.accept()

        with anyio.fail_after(T):
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain, ra, got_a)
                tg.start_soon(drain, rb, got_b)
    assert sorted(got_a + got_b) == list(range(40))
    assert got_a == sorted(got_a) and got_b == sorted(got_b)
    assert len(got_a) >= 5 and len(got_b) >= 5


async def test_priority_ordering(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        sender = await conn.open_sender("prio")
        for i, prio in enumerate([1, 9, 4, 9, 0, 4]):
            await sender.send(Message(body=i, priority=prio))
        r = await conn.open_receiver("prio", credit=10)
        assert await take(r, 6) == [1, 3, 2, 5, 0, 4]


async def test_release_and_modify(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        sender = await conn.open_sender("mod")
        await sender.send(Message(body="x"))
        r = await conn.open_receiver("mod", credit=1)
        d = await r.receive(timeout=T)
        assert d.message.delivery_count == 0
        await d.release()  # released: not a failed attempt
        d = await r.receive(timeout=T)
        assert d.message.delivery_count == 0
        for expected in (1, 2):
            await d.modify(delivery_failed=True)
            d = await r.receive(timeout=T)
            assert (d.message.delivery_count, d.message.first_acquirer) == (expected, False)
        await d.modify(delivery_failed=False)  # modified without failure: not counted
        d = await r.receive(timeout=T)
        assert d.message.delivery_count == 2
        await d.accept()


async def test_modified_undeliverable_here(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        await (await conn.open_sender("undeliv")).send(Message(body="picky"))
        a = await conn.open_receiver("undeliv", credit=5)
        d = await a.receive(timeout=T)
        await d.modify(delivery_failed=True, undeliverable_here=True)
        assert await nothing_arrives(a)
        b = await conn.open_receiver("undeliv", credit=5)
        d = await b.receive(timeout=T)
        assert (d.message.body, d.message.delivery_count) == ("picky", 1)
        await d.accept()


async def test_reject_and_delivery_limit_dead_letter(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        await (await conn.open_sender("dl.orders")).send(Message(body="bad order"))
        await (await conn.open_sender("limit.jobs")).send(Message(body="poison"))
        r = await conn.open_receiver("dl.orders", credit=1)
        d = await r.receive(timeout=T)
        await d.reject(Error(condition=ErrorCondition.DECODE_ERROR, description="unreadable"))
        r2 = await conn.open_receiver("limit.jobs", credit=1)
        for _ in range(2):
            d = await r2.receive(timeout=T)
            await d.modify(delivery_failed=True)
        assert await nothing_arrives(r2)
        dlq = await conn.open_receiver("dlq", credit=5)
        dead = {}
        for _ in range(2):
            d = await dlq.receive(timeout=T)
            dead[d.message.body] = d.message.delivery_count
            await d.accept()
    assert dead == {"bad order": 0, "poison": 2}


async def test_ttl_expired_never_delivered_and_dead_lettered(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        sender = await conn.open_sender("ttl.q")
        await sender.send(Message(body="short", ttl=0.2))
        await sender.send(Message(body="past", expiry_time=time.time() - 60))
        await sender.send(Message(body="long", ttl=60))
        await anyio.sleep(0.4)  # let "short" expire: time itself is what is tested
        r = await conn.open_receiver("ttl.q", credit=10)
        assert await take(r, 1) == ["long"]
        assert await nothing_arrives(r)
        dlq = await conn.open_receiver("ttl-dlq", credit=10)
        assert sorted(await take(dlq, 2)) == ["past", "short"]


async def test_browse_with_distribution_mode_copy(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        sender = await conn.open_sender("browsed")
        for i in range(3):
            await sender.send(Message(body=i))
        browser = await conn.open_receiver(
            "browsed", credit=10, source=Source(address="browsed", distribution_mode=symbol("copy"))
        )
        assert browser.remote_source.distribution_mode == "copy"
        seen = []
        for _ in range(3):
            d = await browser.receive(timeout=T)
            assert d.remote_settled  # a browsed copy is sent settled
            seen.append(d.message.body)
        assert seen == [0, 1, 2]
        assert await nothing_arrives(browser)
        consumer = await conn.open_receiver("browsed", credit=10)
        assert await take(consumer, 3) == [0, 1, 2]
    q = queue(broker, "browsed")
    assert await in_broker(broker, lambda: q.count) == 0


async def test_dynamic_reply_to_request_response(broker: RunningBroker) -> None:
    reply_addresses: set[str] = set()

    async def responder(ready: anyio.Event) -> None:
        async with client(broker) as rconn:
            r = await rconn.open_receiver("rpc", credit=5)
            ready.set()
            for _ in range(3):
                d = await r.receive(timeout=T)
                await d.accept()
                reply_addresses.add(d.message.reply_to)
                await rconn.reply(d, Message(body=str(d.message.body).upper()))

    async with anyio.create_task_group() as tg:
        ready = anyio.Event()
        tg.start_soon(responder, ready)
        with anyio.fail_after(T):
            await ready.wait()
        async with client(broker) as conn:
            for word in ("ping", "pong", "done"):
                reply = await conn.request("rpc", Message(body=word), timeout=T)
                assert reply.body == word.upper()
            # one dynamic reply queue per connection, made by the broker
            (reply_to,) = reply_addresses
            assert reply_to.startswith("amqp10.dynamic.")
            assert await in_broker(broker, lambda: reply_to in broker.broker.nodes)
    # ... and deleted with its link
    assert not await in_broker(broker, lambda: reply_to in broker.broker.nodes)


# -- topics -------------------------------------------------------------------------------------
def durable_source(address: str) -> Source:
    return Source(
        address=address, durable=TerminusDurability.UNSETTLED_STATE, expiry_policy=symbol("never")
    )


async def test_durable_subscription_across_detach_and_reattach(broker: RunningBroker) -> None:
    async with client(broker) as pconn:
        pub = await pconn.open_sender("news.sport")
        async with client(broker, container_id="sub-client") as c1:
            sub = await c1.open_receiver(
                "news.sport", name="sport", source=durable_source("news.sport")
            )
            plain = await c1.open_receiver("news.sport", name="sport-plain")
            await pub.send(Message(body="m0"))
            assert await take(sub, 1) == ["m0"]
            assert await take(plain, 1) == ["m0"]  # each subscriber gets a copy
            await sub.detach()  # not a close: the subscription stays
        topic = broker.broker.nodes["news.sport"]
        assert isinstance(topic, Topic)
        assert await in_broker(broker, lambda: list(topic.subscriptions)) == ["sub-client#sport"]
        await pub.send(Message(body="m1"))
        await pub.send(Message(body="m2"))
        async with client(broker, container_id="sub-client") as c2:
            sub = await c2.open_receiver(
                "news.sport", name="sport", source=durable_source("news.sport")
            )
            assert sub.remote_source.expiry_policy == "never"
            assert await take(sub, 2) == ["m1", "m2"]
            await sub.close()
        assert await in_broker(broker, lambda: list(topic.subscriptions)) == []


# -- flow control and settlement ---------------------------------------------------------------------
async def test_max_length_blocks_the_publisher_until_consumers_drain(broker: RunningBroker) -> None:
    async with client(broker) as pconn, client(broker) as cconn:
        sender = await pconn.open_sender("small.q")
        for i in range(5):
            await sender.send(Message(body=i))
        assert sender.credit == 0
        with pytest.raises(errors.TimeoutError, match="no credit"):
            await sender.send(Message(body="withdrawn"), timeout=QUIET)
        outcome: list[Any] = []

        async def late() -> None:
            outcome.append(await sender.send(Message(body=5), timeout=T))

        async with anyio.create_task_group() as tg:
            tg.start_soon(late)
            await anyio.wait_all_tasks_blocked()
            assert not outcome  # still blocked: the queue is full
            r = await cconn.open_receiver("small.q", credit=10)
            got = await take(r, 5)
        assert isinstance(outcome[0], Accepted)
        got += await take(r, 1)
    assert got == [0, 1, 2, 3, 4, 5]


async def test_at_most_once_both_ways(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        sender = await conn.open_sender("amo", settle_mode="at-most-once")
        for i in range(20):
            assert await sender.send(Message(body=i)) is None
        r = await conn.open_receiver("amo", credit=50, settle_mode="at-most-once")
        got = []
        for _ in range(20):
            d = await r.receive(timeout=T)
            assert d.remote_settled
            got.append(d.message.body)
        assert got == list(range(20))
    q = queue(broker, "amo")
    assert await in_broker(broker, lambda: (q.count, q.stats.acked)) == (0, 20)


async def test_two_phase_both_ways(broker: RunningBroker) -> None:
    async with client(broker) as conn:
        sender = await conn.open_sender("twophase", settle_mode="two-phase")
        assert isinstance(await sender.send(Message(body="x")), Accepted)
        r = await conn.open_receiver("twophase", credit=1, settle_mode="two-phase")
        d = await r.receive(timeout=T)
        await d.accept()
        # rcv-settle-mode second: settled only once the broker (the sender) has settled
        await wait_for(conn._activity, lambda: d.settled, timeout=T)
    q = queue(broker, "twophase")
    assert await in_broker(broker, lambda: (q.count, q.stats.acked)) == (0, 1)


async def test_large_multi_frame_message(broker: RunningBroker) -> None:
    big = bytes(range(256)) * (2 * 1024 * 1024 // 256)
    async with client(broker) as conn:
        sender = await conn.open_sender("big")
        assert isinstance(await sender.send(Message(body=big, durable=True)), Accepted)
        r = await conn.open_receiver("big", credit=1)
        d = await r.receive(timeout=T)
        assert d.message.body == big
        await d.accept()


# -- authentication and TLS ---------------------------------------------------------------------------
@pytest.fixture
def secured(tmp_path: Path, users_file: Path) -> Iterator[RunningBroker]:
    with broker_with(tmp_path, sasl={"users_file": users_file, "allow_anonymous": False}) as b:
        yield b


def users_of(b: RunningBroker) -> list[str | None]:
    return [c.handler.user for c in b.service.clients]


def drivers_of(b: RunningBroker) -> list[str]:
    """The driver class of each connection: DirectDriver on plain TCP, Driver over TLS."""
    return [type(c.driver).__name__ for c in b.service.clients]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
async def test_password_login(secured: RunningBroker, mechanism: str) -> None:
    url = f"amqp://alice:secret@{secured.url}"
    async with await connect(url, sasl_mechanisms=[mechanism], timeout=T) as conn:
        assert await in_broker(secured, lambda: users_of(secured)) == ["alice"]
        # SASL (and the guard's HeldOutput) over the transport's callbacks
        assert await in_broker(secured, lambda: drivers_of(secured)) == ["DirectDriver"]
        sender = await conn.open_sender("authed")
        assert isinstance(await sender.send(Message(body="hi")), Accepted)


async def test_wrong_password_is_refused(secured: RunningBroker) -> None:
    with pytest.raises(errors.AuthenticationError) as info:
        await connect(
            f"amqp://alice:wrong@{secured.url}", sasl_mechanisms=["SCRAM-SHA-256"], timeout=T
        )
    assert "refused SCRAM-SHA-256 authentication" in str(info.value)
    assert "\n" not in str(info.value)


async def test_anonymous_is_refused(secured: RunningBroker) -> None:
    with pytest.raises(errors.AuthenticationError, match="no SASL mechanism in common"):
        await connect(f"amqp://{secured.url}", sasl_mechanisms=["ANONYMOUS"], timeout=T)
    with pytest.raises(errors.ConnectionError):  # no SASL at all: the broker requires it
        await connect(f"amqp://{secured.url}", timeout=T)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    if not have_openssl():
        pytest.fail("the openssl command is needed to make test certificates")
    return make_certs(tmp_path_factory.mktemp("certs"))


def _tls_broker(tmp_path: Path, certs: Certs, users: Path) -> Iterator[RunningBroker]:
    listener = Listener(
        host="127.0.0.1",
        port=0,
        tls_cert=certs.server_cert,
        tls_key=certs.server_key,
        tls_ca=certs.ca,
    )
    sasl = {
        "users_file": users,
        "allow_anonymous": False,
        "mechanisms": ["EXTERNAL", "SCRAM-SHA-256"],
    }
    with broker_with(tmp_path, listeners=[listener], sasl=sasl) as b:
        yield b


@pytest.fixture
def tls_broker(tmp_path: Path, certs: Certs, users_file: Path) -> Iterator[RunningBroker]:
    """A TLS broker whose users file also holds the client certificate's identity."""
    yield from _tls_broker(tmp_path, certs, with_certificate_user(users_file, tmp_path))


async def test_tls_with_scram(tls_broker: RunningBroker, certs: Certs) -> None:
    url = f"amqps://alice:secret@{tls_broker.url}"
    async with await connect(url, ssl=client_context(cafile=certs.ca), timeout=T) as conn:
        assert conn.driver.stream.extra(TLSAttribute.tls_version).startswith("TLS")
        assert await in_broker(tls_broker, lambda: users_of(tls_broker)) == ["alice"]
        assert await in_broker(tls_broker, lambda: drivers_of(tls_broker)) == ["Driver"]
        sender = await conn.open_sender("secure")
        assert isinstance(await sender.send(Message(body=b"x" * 300_000)), Accepted)
        r = await conn.open_receiver("secure", credit=1)
        assert (await r.receive(timeout=T)).message.body == b"x" * 300_000


async def test_tls_external_with_a_client_certificate(
    tls_broker: RunningBroker, certs: Certs
) -> None:
    ctx = client_context(cafile=certs.ca, certfile=certs.client_cert, keyfile=certs.client_key)
    url = f"amqps://{tls_broker.url}"
    async with await connect(url, ssl=ctx, sasl_mechanisms=["EXTERNAL"], timeout=T) as conn:
        assert await in_broker(tls_broker, lambda: users_of(tls_broker)) == [
            "CN=amqp10-test-client"
        ]
        sender = await conn.open_sender("secure")
        assert isinstance(await sender.send(Message(body="by certificate")), Accepted)
    # without a certificate EXTERNAL is not offered
    with pytest.raises(errors.AuthenticationError, match="no SASL mechanism in common"):
        await connect(
            url, ssl=client_context(cafile=certs.ca), sasl_mechanisms=["EXTERNAL"], timeout=T
        )


async def test_tls_untrusted_broker_certificate(tls_broker: RunningBroker, certs: Certs) -> None:
    with pytest.raises(errors.TLSError, match="certificate verify failed"):
        await connect(
            f"amqps://{tls_broker.url}", ssl=client_context(cafile=certs.rogue_ca), timeout=T
        )


async def test_tls_external_identity_without_a_user_is_refused(
    tmp_path: Path, certs: Certs, users_file: Path
) -> None:
    ctx = client_context(cafile=certs.ca, certfile=certs.client_cert, keyfile=certs.client_key)
    for b in _tls_broker(tmp_path, certs, users_file):
        with pytest.raises(errors.ConnectionError) as refused:
            await connect(f"amqps://{b.url}", ssl=ctx, sasl_mechanisms=["EXTERNAL"], timeout=T)
        assert refused.value.condition == "amqp:unauthorized-access"


# -- the blocking facade ----------------------------------------------------------------------------
def test_sync_send_receive_and_request(broker: RunningBroker) -> None:
    url = f"amqp://{broker.url}"
    stop = threading.Event()
    errors_seen: list[BaseException] = []

    def serve() -> None:
        try:
            with amqp10.sync.connect(url, timeout=T) as rconn:
                r = rconn.open_receiver("sync-rpc", credit=5)
                served.set()
                while not stop.is_set():
                    try:
                        d = r.receive(timeout=QUIET)
                    except errors.TimeoutError:
                        continue
                    d.accept()
                    rconn.reply(d, Message(body=f"re: {d.message.body}"))
        except BaseException as exc:
            errors_seen.append(exc)

    served = threading.Event()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        assert served.wait(T)
        with amqp10.sync.connect(url, timeout=T) as conn:
            sender = conn.open_sender("sync-q")
            for i in range(5):
                assert isinstance(sender.send(Message(body=i)), Accepted)
            r = conn.open_receiver("sync-q", credit=10)
            got = []
            for _ in range(5):
                d = r.receive(timeout=T)
                got.append(d.message.body)
                d.accept()
            assert got == list(range(5))
            assert conn.request("sync-rpc", Message(body="hello"), timeout=T).body == "re: hello"
            rej = conn.open_receiver("dl.sync", credit=1)
            sender2 = conn.open_sender("dl.sync")
            sender2.send(Message(body="nope"))
            rej.receive(timeout=T).reject()
            assert conn.open_receiver("dlq", credit=1).receive(timeout=T).message.body == "nope"
    finally:
        stop.set()
        t.join(T)
    assert not t.is_alive() and not errors_seen


def test_sync_scram_login_and_refusal(tmp_path: Path, users_file: Path) -> None:
    with broker_with(tmp_path, sasl={"users_file": users_file, "allow_anonymous": False}) as b:
        with amqp10.sync.connect(f"amqp://bob:hunter2@{b.url}", timeout=T) as conn:
            outcome = conn.open_sender("sync-auth").send(Message(body="x"))
            assert isinstance(outcome, Accepted)
        with pytest.raises(errors.AuthenticationError):
            amqp10.sync.connect(f"amqp://bob:wrong@{b.url}", timeout=T)


async def test_rejected_publish_reports_the_condition(tmp_path: Path) -> None:
    rules = [AddressRule(pattern="full", policy=QueuePolicy(max_length=1, overflow="reject"))]
    with broker_with(tmp_path, addresses=rules) as b:
        async with client(b) as conn:
            sender = await conn.open_sender("full")
            assert isinstance(await sender.send(Message(body=1)), Accepted)
            outcome = await sender.send(Message(body=2))
            assert isinstance(outcome, Rejected)
            assert (
                outcome.error is not None
                and outcome.error.condition == "amqp:resource-limit-exceeded"
            )
