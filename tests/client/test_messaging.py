"""Our client against our direct peer, over TCP on 127.0.0.1: messaging end to end."""

from __future__ import annotations

import os

import anyio
import pytest

import amqp10
from amqp10.client import SettleMode, connect
from amqp10.message import Message
from amqp10.types import Accepted, Modified, Rejected, Released

from .helpers import WAIT, Service, no_leftover_tasks, running, wait_for

pytestmark = pytest.mark.anyio


async def test_send_and_outcome_accepted() -> None:
    svc = Service()
    async with (
        no_leftover_tasks(),
        running(svc) as server,
        await amqp10.connect(server.url, timeout=WAIT) as conn,
    ):
        sender = await conn.open_sender("queue")
        outcome = await sender.send(Message(body="hello", subject="greeting"))
        assert isinstance(outcome, Accepted)
        await svc.wait(lambda: len(svc.received) == 1)
        got = svc.received[0]
        assert got.message.body == "hello"
        assert got.message.subject == "greeting"
        assert not got.remote_settled
        assert conn.remote_container_id == svc.connections[0].container_id
    assert isinstance(conn.error, amqp10.errors.ConnectionClosed)


@pytest.mark.parametrize(
    ("subject", "expected"),
    [("reject", Rejected), ("release", Released), ("modify", Modified), ("none", type(None))],
)
async def test_outcomes(subject: str, expected: type) -> None:
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        sender = await conn.open_sender("queue", settle_mode=SettleMode.AT_LEAST_ONCE)
        outcome = await sender.send(Message(body=1, subject=subject))
        assert type(outcome) is expected
        if isinstance(outcome, Rejected):
            assert outcome.error is not None
            assert str(outcome.error.condition) == "amqp:not-allowed"
            assert outcome.error.description == "no thanks"
        if isinstance(outcome, Modified):
            assert outcome.delivery_failed and outcome.undeliverable_here


@pytest.mark.parametrize(
    "mode",
    [SettleMode.AT_MOST_ONCE, SettleMode.AT_LEAST_ONCE, SettleMode.MIXED, SettleMode.TWO_PHASE],
)
async def test_sender_settle_modes(mode: SettleMode) -> None:
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        sender = await conn.open_sender("queue", settle_mode=mode)
        outcomes = [await sender.send(Message(body=i)) for i in range(5)]
        await svc.wait(lambda: len(svc.received) == 5)
        assert [d.message.body for d in svc.received] == list(range(5))
        if mode is SettleMode.AT_MOST_ONCE:
            assert outcomes == [None] * 5
            assert all(d.remote_settled for d in svc.received)
        else:
            assert all(isinstance(o, Accepted) for o in outcomes)
        if mode is SettleMode.TWO_PHASE:
            # the receiver's outcome becomes final once our settlement reached it
            await svc.wait(lambda: all(d.settled and d.remote_settled for d in svc.received))
        elif mode is not SettleMode.AT_MOST_ONCE:
            # the receiver settled first: we settle without telling it
            assert not any(d.remote_settled for d in svc.received)
        if mode is SettleMode.MIXED:
            assert await sender.send(Message(body="pre"), settled=True) is None
            await svc.wait(lambda: len(svc.received) == 6)
            assert svc.received[-1].remote_settled


async def test_settle_mode_by_name_and_bad_value() -> None:
    async with running(Service()) as server, await connect(server.url, timeout=WAIT) as conn:
        sender = await conn.open_sender("q", settle_mode="at-most-once")
        assert await sender.send(Message(body=1)) is None
        with pytest.raises(ValueError, match="settle_mode must be one of"):
            await conn.open_sender("q", settle_mode="sometimes")
        with pytest.raises(amqp10.errors.IllegalStateError, match="pre-settled"):
            await sender.send(Message(body=1), settled=False)


@pytest.mark.parametrize(
    "mode",
    [SettleMode.AT_MOST_ONCE, SettleMode.AT_LEAST_ONCE, SettleMode.MIXED, SettleMode.TWO_PHASE],
)
async def test_receive_settle_modes(mode: SettleMode) -> None:
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        receiver = await conn.open_receiver("gen/4", settle_mode=mode, credit=10)
        got = [await receiver.receive() for _ in range(4)]
        assert sorted(d.message.body for d in got) == ["m0", "m1", "m2", "m3"]
        presettled = mode is SettleMode.AT_MOST_ONCE
        assert all(d.remote_settled is presettled for d in got)
        for d in got:
            await d.accept()
        if presettled:
            await svc.wait(lambda: len(svc.outcomes) == 4)
            assert svc.outcomes == [None] * 4
        else:
            await svc.wait(lambda: len(svc.outcomes) == 4)
            assert all(isinstance(o, Accepted) for o in svc.outcomes)
        # TWO_PHASE: our accept is final only after the sender settled
        await wait_for(receiver._sig, lambda: all(d.settled for d in got))
        with pytest.raises(amqp10.errors.IllegalStateError, match="already settled"):
            await got[0].accept()


async def test_async_iteration_and_auto_accept() -> None:
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        receiver = await conn.open_receiver("gen/3", auto_accept=True)
        bodies = []
        async for d in receiver:
            bodies.append(d.message.body)
            if len(bodies) == 3:
                break
        assert sorted(bodies) == ["m0", "m1", "m2"]
        await svc.wait(lambda: len(svc.outcomes) == 3)
        assert all(isinstance(o, Accepted) for o in svc.outcomes)
        await receiver.close()
        # a closed receiver ends iteration
        assert [d async for d in receiver] == []


async def test_iteration_ends_when_the_connection_closes() -> None:
    async with running(Service()) as server, await connect(server.url, timeout=WAIT) as conn:
        receiver = await conn.open_receiver("nothing-here")
        seen = []
        async with anyio.create_task_group() as tg:

            async def consume() -> None:
                async for d in receiver:
                    seen.append(d)

            tg.start_soon(consume)
            await conn.close()
        assert seen == []


@pytest.mark.parametrize("size", [200_000, 3 * 1024 * 1024])
async def test_large_messages_both_ways(size: int) -> None:
    svc = Service()
    payload = os.urandom(size)
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        sender = await conn.open_sender("big")
        outcome = await sender.send(Message(body=payload))
        assert isinstance(outcome, Accepted)
        await svc.wait(lambda: len(svc.received) == 1)
        assert svc.received[0].message.body == payload
        # and back: the service replies with the same bytes on our reply link
        response = await conn.request("big", Message(body=payload[:1000]))
        assert response.body == f"pong: {payload[:1000]!r}"


async def test_many_frames_with_a_small_max_frame_size() -> None:
    svc = Service()
    payload = os.urandom(100_000)  # about 200 frames of 512 bytes
    async with (
        running(svc, max_frame_size=512) as server,
        await connect(server.url, timeout=WAIT, max_frame_size=512) as conn,
    ):
        sender = await conn.open_sender("small-frames")
        for _ in range(3):
            assert isinstance(await sender.send(Message(body=payload)), Accepted)
        await svc.wait(lambda: len(svc.received) == 3)
        assert all(d.message.body == payload for d in svc.received)


async def test_raw_payload_bytes_round_trip() -> None:
    svc = Service()
    encoded = Message(body=[1, 2, 3], subject="raw").encode()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        sender = await conn.open_sender("raw")
        assert isinstance(await sender.send(encoded), Accepted)
        await svc.wait(lambda: len(svc.received) == 1)
        assert svc.received[0].payload == encoded
        with pytest.raises(TypeError, match="Message or the bytes"):
            await sender.send("not a message")  # type: ignore[arg-type]


async def test_drain_takes_what_is_available_then_returns_credit() -> None:
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        receiver = await conn.open_receiver("gen/3", credit=0)
        await svc.wait(lambda: len(svc.links) == 1)
        server_sender = svc.links[0]
        assert isinstance(server_sender, amqp10.client.Sender)
        await anyio.wait_all_tasks_blocked()  # the service's sends are queued ...
        assert server_sender.queued == 3  # ... waiting for credit
        receiver.add_credit(10)
        await receiver.drain()
        assert receiver.credit == 0
        assert receiver.buffered == 3
        # a drain with nothing left: the sender hands the credit straight back
        receiver.add_credit(5)
        await receiver.drain()
        assert receiver.credit == 0
        assert receiver.buffered == 3
        assert server_sender.credit == 0


async def test_manual_credit() -> None:
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        receiver = await conn.open_receiver("gen/5", credit=0)
        with pytest.raises(amqp10.errors.TimeoutError, match="receive from 'gen/5' timed out"):
            await receiver.receive(timeout=0.05)
        receiver.add_credit(2)
        first = [await receiver.receive() for _ in range(2)]
        assert len(first) == 2
        assert receiver.credit == 0
        receiver.add_credit(3)
        rest = [await receiver.receive() for _ in range(3)]
        assert sorted(d.message.body for d in first + rest) == [f"m{i}" for i in range(5)]


async def test_credit_window_is_replenished() -> None:
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        receiver = await conn.open_receiver("gen/50", credit=4)
        bodies = [(await receiver.receive()).message.body for _ in range(50)]
        assert sorted(bodies) == sorted(f"m{i}" for i in range(50))
        assert receiver.buffered == 0


@pytest.mark.parametrize("via_sender", [False, True], ids=["reply-link", "opened-sender"])
async def test_request_response(via_sender: bool) -> None:
    svc = Service(reply_via_sender=via_sender)
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        response = await conn.request("service", Message(body="ping"))
        assert response.body == "pong: ping"
        # concurrent requests are matched by correlation-id
        results: dict[int, str] = {}

        async def ask(i: int) -> None:
            results[i] = (await conn.request("service", Message(body=i))).body

        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(ask, i)
        assert results == {i: f"pong: {i}" for i in range(10)}


async def test_explicit_sessions() -> None:
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        s1 = await conn.session()
        s2 = await conn.session()
        a = await s1.open_sender("a")
        b = await s2.open_sender("b")
        assert isinstance(await a.send(Message(body="a")), Accepted)
        assert isinstance(await b.send(Message(body="b")), Accepted)
        await s1.close()
        assert not a.is_open
        with pytest.raises(amqp10.errors.LinkDetached):
            await a.send(Message(body="late"))
        assert isinstance(await b.send(Message(body="b2")), Accepted)
        r = await s2.open_receiver("gen/1")
        assert (await r.receive()).message.body == "m0"


async def test_dynamic_receiver_and_peer_sessions() -> None:
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        receiver = await conn.open_receiver(dynamic=True)
        assert receiver.address is not None and receiver.address.startswith("amqp10.dynamic.")
        await svc.wait(lambda: len(svc.links) == 1)
        assert svc.links[0].address == receiver.address
        # the service can send to it: the peer's sender is linked to our receiver
        served = svc.links[0]
        assert isinstance(served, amqp10.client.Sender)
        outcomes = []
        async with anyio.create_task_group() as tg:

            async def send() -> None:
                outcomes.append(await served.send(Message(body="direct")))

            tg.start_soon(send)
            got = await receiver.receive()
            assert got.message.body == "direct"
            await got.accept()
        assert isinstance(outcomes[0], Accepted)


async def test_fetch_takes_what_arrived_and_settle_all_settles_the_batch() -> None:
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        receiver = await conn.open_receiver("gen/6", credit=10)
        await wait_for(receiver._sig, lambda: receiver.buffered == 6)
        first = await receiver.fetch(4)
        assert len(first) == 4 and receiver.buffered == 2
        rest = await receiver.fetch(10)  # what is there, without waiting for more
        assert len(rest) == 2 and receiver.buffered == 0
        assert receiver.credit == 10  # the window is topped up once the batch is taken
        assert sorted(d.message.body for d in first + rest) == [f"m{i}" for i in range(6)]
        await receiver.accept_all(first)
        await receiver.settle_all(rest, Released())
        assert all(d.settled for d in first + rest)
        await svc.wait(lambda: len(svc.outcomes) == 6)
        assert sorted(type(o).__name__ for o in svc.outcomes) == ["Accepted"] * 4 + ["Released"] * 2
        with anyio.fail_after(WAIT):
            assert await receiver.fetch(10, timeout=0.05) == []  # nothing came in time
        with pytest.raises(ValueError, match="at least 1"):
            await receiver.fetch(0)
        with pytest.raises(amqp10.errors.IllegalStateError, match="already settled"):
            await receiver.accept_all(first[:1])
        await receiver.close()
        with pytest.raises(amqp10.errors.AMQPError):
            await receiver.fetch(1, timeout=0.05)


async def test_accept_checks_for_cancellation_without_yielding() -> None:
    """A per-message loop over what has arrived settles it all before another task runs
    (its dispositions go out together), and a cancelled accept still settles."""
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        receiver = await conn.open_receiver("gen/6", credit=10)
        await wait_for(receiver._sig, lambda: receiver.buffered == 6)
        others: list[str] = []

        async def other() -> None:
            others.append("ran")

        async with anyio.create_task_group() as tg:
            tg.start_soon(other)  # runs at the first scheduling point
            for _ in range(5):
                await (await receiver.receive()).accept()
            assert others == []
        assert others == ["ran"]
        last = await receiver.receive()
        with anyio.CancelScope() as scope:
            scope.cancel()
            await last.accept()
        assert scope.cancelled_caught and last.settled
        await svc.wait(lambda: len(svc.outcomes) == 6)
        assert all(isinstance(o, Accepted) for o in svc.outcomes)


async def test_fetch_payloads_gives_the_bytes_and_accepts_the_unsettled() -> None:
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        receiver = await conn.open_receiver("gen/6", credit=10)
        await wait_for(receiver._sig, lambda: receiver.buffered == 6)
        first = await receiver.fetch_payloads(4)
        assert len(first) == 4 and receiver.buffered == 2
        rest = await receiver.fetch_payloads(10)
        assert len(rest) == 2 and receiver.buffered == 0
        assert receiver.credit == 10  # the window is topped up as with fetch()
        assert sorted(Message.decode(p).body for p in first + rest) == [f"m{i}" for i in range(6)]
        await svc.wait(lambda: len(svc.outcomes) == 6)  # each one accepted
        assert [type(o).__name__ for o in svc.outcomes] == ["Accepted"] * 6
        with anyio.fail_after(WAIT):
            assert await receiver.fetch_payloads(10, timeout=0.05) == []
        with pytest.raises(ValueError, match="at least 1"):
            await receiver.fetch_payloads(0)
