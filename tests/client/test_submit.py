"""Pipelined sends: ``Sender.submit`` and its ``Tracker``, against our direct peer on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import aclosing

import anyio
import pytest

from amqp10 import errors
from amqp10.client import Receiver, SettleMode, connect
from amqp10.message import Message
from amqp10.types import Accepted, Error, ErrorCondition, Modified, Rejected, Released

from .helpers import WAIT, Service, no_leftover_tasks, running

pytestmark = pytest.mark.anyio


async def test_submit_queues_without_yielding_and_outcomes_arrive_in_order() -> None:
    svc = Service()
    async with (
        no_leftover_tasks(),
        running(svc) as server,
        await connect(server.url, timeout=WAIT) as conn,
    ):
        sender = await conn.open_sender("queue")
        trackers = [sender.submit(Message(body=i)) for i in range(50)]
        # nothing yielded: nothing can have gone out, let alone come back
        assert not any(t.done for t in trackers)
        assert repr(trackers[0]) == "<Tracker waiting>"
        with pytest.raises(errors.IllegalStateError, match="still waiting"):
            trackers[0].result()
        outcomes = [await t for t in trackers]
        assert all(isinstance(o, Accepted) for o in outcomes)
        assert all(t.done and isinstance(t.result(), Accepted) for t in trackers)
        assert repr(trackers[-1]) == "<Tracker accepted>"
        assert [d.message.body for d in svc.received] == list(range(50))
        assert not sender._pending  # nothing is kept once settled


@pytest.mark.parametrize(
    ("subject", "expected"),
    [("reject", Rejected), ("release", Released), ("modify", Modified), ("ok", Accepted)],
)
async def test_each_tracker_gets_its_own_outcome(subject: str, expected: type) -> None:
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        sender = await conn.open_sender("queue")
        first = sender.submit(Message(body=0))
        tracker = sender.submit(Message(body=1, subject=subject))
        last = sender.submit(Message(body=2))
        assert type(await tracker.wait()) is expected
        assert isinstance(await first, Accepted) and isinstance(await last, Accepted)


async def test_pre_settled_submit_resolves_once_written() -> None:
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        sender = await conn.open_sender("queue", settle_mode=SettleMode.AT_MOST_ONCE)
        trackers = [sender.submit(Message(body=i)) for i in range(5)]
        assert [await t for t in trackers] == [None] * 5
        assert repr(trackers[0]) == "<Tracker sent>"
        await svc.wait(lambda: len(svc.received) == 5)
        assert all(d.remote_settled for d in svc.received)


async def test_waiting_times_out_and_withdraws_a_message_without_credit() -> None:
    svc = Service()
    async with (
        running(svc, link_credit=0) as server,
        no_leftover_tasks(),
        await connect(server.url, timeout=WAIT) as conn,
    ):
        sender = await conn.open_sender("q")
        tracker = sender.submit(Message(body="never"))
        assert sender.queued == 1
        with pytest.raises(errors.TimeoutError, match=r"timed out after 0.1s \(no credit"):
            await tracker.wait(0.1)
        assert sender.queued == 0
        with pytest.raises(errors.IllegalStateError, match="withdrawn"):
            tracker.result()
        server_receiver = svc.links[0]
        assert isinstance(server_receiver, Receiver)
        server_receiver.add_credit(10)
        assert isinstance(await sender.submit(Message(body="wanted")), Accepted)
        await svc.wait(lambda: len(svc.received) == 1)
        assert [d.message.body for d in svc.received] == ["wanted"]


async def test_a_detach_fails_every_waiting_tracker() -> None:
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        sender = await conn.open_sender("q")
        held = [sender.submit(Message(body=i, subject="hold")) for i in range(3)]
        await svc.wait(lambda: len(svc.held) == 3)
        await svc.links[0].close(Error(condition=ErrorCondition.RESOURCE_DELETED, description="gone"))
        for t in held:
            with pytest.raises(errors.LinkError, match="detached by the peer") as info:
                await t
            assert info.value.condition == "amqp:resource-deleted"
        assert not sender._pending
        with pytest.raises(errors.LinkError):
            sender.submit(Message(body="late"))


async def test_trackers_can_be_awaited_from_other_tasks() -> None:
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        sender = await conn.open_sender("q")
        held = sender.submit(Message(body="h", subject="hold"))
        got: list[object] = []

        async def waiter() -> None:
            got.append(await held)

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            tg.start_soon(waiter)
            await svc.wait(lambda: len(svc.held) == 1)
            await svc.held[0].accept()
        assert len(got) == 2 and all(isinstance(o, Accepted) for o in got)


async def test_sends_of_tasks_started_together_share_a_write() -> None:
    """A waiting ``send()`` writes at once only when nothing else is ready to run in
    that turn of the loop: the sends of tasks woken together still go out in one write."""
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        sender = await conn.open_sender("queue")
        assert isinstance(await sender.send(Message(body="warm")), Accepted)
        driver = conn.driver
        outcomes: list[object] = []
        go = anyio.Event()

        async def one(i: int) -> None:
            await go.wait()
            outcomes.append(await sender.send(Message(body=i)))

        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(one, i)
            await anyio.wait_all_tasks_blocked()
            writes = driver.writes
            go.set()  # the ten wake in one turn of the loop
        assert len(outcomes) == 10 and all(isinstance(o, Accepted) for o in outcomes)
        assert driver.writes - writes == 1
        assert sorted(d.message.body for d in svc.received[1:]) == list(range(10))


async def test_pre_settled_trackers_share_their_flushes() -> None:
    """Awaiting many pre-settled trackers asks for a write once per batch, not per message:
    a flush asked for after a message was queued covers it (``Driver.flush(after=...)``)."""
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        sender = await conn.open_sender("queue", settle_mode=SettleMode.AT_MOST_ONCE)
        driver = conn._driver
        before = driver._requested  # flushes asked for
        trackers = [sender.submit(Message(body=i)) for i in range(200)]
        assert [await t for t in trackers] == [None] * 200
        assert driver._requested - before <= 5
        await svc.wait(lambda: len(svc.received) == 200)
        assert [d.message.body for d in svc.received] == list(range(200))


async def test_pipeline_keeps_a_bounded_window_and_yields_outcomes_in_order() -> None:
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        sender = await conn.open_sender("queue")
        in_flight_seen: list[int] = []

        def messages() -> Iterator[Message]:
            for i in range(30):
                in_flight_seen.append(len(sender._pending))  # before this one is submitted
                yield Message(body=i, subject="reject" if i == 7 else None)

        outcomes = [o async for o in sender.pipeline(messages(), window=4)]
        assert [type(o) for o in outcomes] == [Rejected if i == 7 else Accepted for i in range(30)]
        assert max(in_flight_seen) == 3  # room for one more: never more than 4 in flight
        assert [d.message.body for d in svc.received] == list(range(30))
        with pytest.raises(ValueError, match="window"):
            [o async for o in sender.pipeline([Message(body=0)], window=0)]


async def test_stopping_a_pipeline_withdraws_what_did_not_go_out() -> None:
    svc = Service()
    async with (
        running(svc, link_credit=0) as server,
        await connect(server.url, timeout=WAIT) as conn,
    ):
        sender = await conn.open_sender("q")
        server_receiver = svc.links[0]
        assert isinstance(server_receiver, Receiver)
        server_receiver.add_credit(1)
        async with aclosing(
            sender.pipeline((Message(body=i) for i in range(10)), window=3)
        ) as outcomes:
            async for outcome in outcomes:
                assert isinstance(outcome, Accepted)
                break  # the first is in; the next two wait for credit
        assert sender.queued == 0 and not sender._pending
        server_receiver.add_credit(10)
        assert isinstance(await sender.send(Message(body="after")), Accepted)
        assert [d.message.body for d in svc.received] == [0, "after"]


async def test_done_callbacks_run_once_when_the_outcome_comes() -> None:
    svc = Service()
    async with running(svc) as server, await connect(server.url, timeout=WAIT) as conn:
        sender = await conn.open_sender("queue")
        seen: list[tuple[str, object]] = []
        tracker = sender.submit(Message(body=1, subject="reject"))
        tracker.add_done_callback(lambda t: seen.append(("first", t.outcome)))
        tracker.add_done_callback(lambda t: seen.append(("second", t.done)))
        assert seen == []  # nothing yielded yet
        await tracker
        assert [name for name, _ in seen] == ["first", "second"]
        assert isinstance(seen[0][1], Rejected) and seen[1][1] is True
        tracker.add_done_callback(lambda t: seen.append(("late", t.done)))  # done: runs at once
        assert seen[-1] == ("late", True)
        # a failed send calls back too, with the error on the tracker
        pending = sender.submit(Message(body=2, subject="hold"))
        failed: list[object] = []
        pending.add_done_callback(lambda t: failed.append(t.error))
        await svc.wait(lambda: len(svc.held) == 1)
        await sender.detach()
        assert len(failed) == 1 and isinstance(failed[0], errors.AMQPError)
