"""What one worker keeps, found from any worker (``amqp10 broker --workers 2``), each client
pinned to a chosen worker:

- a consumer of a queue worker 1 owns, lost on worker 0 with four deliveries unsettled
  (two of them accepted by the client, the dispositions lost with the link), resumed on
  worker 1: worker 0's record is handed over through the queue's owner, so the resume
  carries the unsettled state; the two accepted are settled, once, and not sent again;
  the other two are resumed, once; nothing else comes and the queue ends empty (before,
  the owner asked no one: the record stayed held on worker 0, and the resumed link got
  nothing of it). The same at ``--workers 3`` with the queue on worker 2: the owner moves
  the messages from worker 0's consumer to worker 1 (before, worker 0 dropped the
  record: the messages went back to the queue and came again, the accepted ones too).
- a 1.0 publisher's attach naming a stream by its capability alone, on the worker that
  does not own the name (nothing declared it): its owner makes a stream (read twice from
  its first offset, each reader gets every message; the attach answers the ``stream``
  capability), as one broker does (before, the owner made a queue: the capability
  stayed on the worker that asked).
- JMS's look-up of a durable subscription by its link name alone (a null source) on the
  worker that does not keep it (the subscription's queue is on the worker that owns its
  name): found, with its backlog, and the detach that closes it unsubscribes it there
  (before, refused: the look-up searched the worker it landed on only).

Real processes on 127.0.0.1; every wait is bounded, none is a timed assertion.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from amqp10.broker.workers.ownership import Ownership
from amqp10.client import Connection
from amqp10.client.receiver import Receiver as ClientReceiver
from amqp10.errors import AMQPError
from amqp10.message import Message
from amqp10.types import Accepted, Source, Target, symbol
from tests.broker.amqp1.test_link_recovery import until
from tests.broker.test_workers import WAIT, Parent

from .conftest import running
from .test_copies_and_resumes_processes import on_worker, reattached, subscribed_meanwhile
from .test_processes import owned_by
from .test_resumption_processes import bodies_left, logged
from .test_streams import bodies, reader
from .test_topics import drain

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _resume(conn: Connection, queue: str, name: str, kept: Source, deliveries: list[Any]) -> tuple[ClientReceiver, list[bytes]]:
    """Attach link ``name`` on ``conn`` again, resuming ``deliveries`` (§2.6.13): the new
    receiver, and the deliveries the broker's attach says it still has unsettled."""
    again = await reattached(conn, queue, name, deliveries, window=10, source=kept, target=None)
    answer = again._link.remote_attach
    assert answer is not None and answer.unsettled is not None
    return again, sorted(bytes(tag) for tag in answer.unsettled)


async def _lost_and_resumed(broker: Parent, queue: str, lost_on: int, resumed_on: int) -> None:
    """Four deliveries of ``queue`` unsettled on worker ``lost_on``, two accepted in doubt;
    the link resumed on worker ``resumed_on``: one broker's outcome."""
    cid, name = f"resumed-{queue}", "r"
    kept = Source(address=queue, timeout=3600)  # outlives the link (the broker keeps it 60 s)
    async with on_worker(broker, lost_on, cid) as conn:
        sender = await conn.open_sender(queue)
        for i in range(4):
            assert isinstance(await sender.send(Message(body=i), timeout=WAIT), Accepted)
        rcv = await conn.open_receiver(queue, credit=4, name=name, source=kept)
        got = [await rcv.receive(timeout=WAIT) for _ in range(4)]
        assert [d.message.body for d in got] == [0, 1, 2, 3]
        deliveries = list(rcv._link.unsettled.values())
        for old in deliveries[:2]:  # accepted here; the disposition never leaves: in doubt
            old.state = Accepted()
        await rcv.detach(timeout=WAIT)
        await until(logged(broker, f"suspended SuspendedLink('{cid}', '{name}'"), "the link was suspended", WAIT)
    async with on_worker(broker, resumed_on, cid) as conn:
        again, unsettled = await _resume(conn, queue, name, kept, deliveries)
        assert unsettled == sorted(bytes(d.tag) for d in deliveries)  # the record, handed over
        resent = [await again.receive(timeout=WAIT) for _ in range(2)]
        assert sorted(d.message.body for d in resent) == [2, 3]  # the in-doubt accepted ones are not
        for d in resent:
            await d.accept()
        assert await drain(again) == []  # nothing else comes
        await again.close()
    assert logged(broker, f"handing SuspendedLink('{cid}', '{name}'")()
    assert await anyio.to_thread.run_sync(bodies_left, broker, queue) == []  # each settled once


async def test_a_consumer_lost_on_worker_0_is_resumed_on_worker_1_the_queues_owner(broker: Parent) -> None:
    await _lost_and_resumed(broker, owned_by(1, "lost-on-0-"), 0, 1)


@pytest.fixture
def three(tmp_path: Path) -> Iterator[Parent]:
    """``amqp10 broker --workers 3``."""
    yield from running(Parent(tmp_path, workers=3))


async def test_a_consumer_lost_on_worker_0_is_resumed_on_worker_1_through_worker_2_the_owner(three: Parent) -> None:
    ownership = Ownership(3)
    queue = next(f"owned-by-2-{i}" for i in range(100) if ownership.owner("/", f"owned-by-2-{i}") == 2)
    await _lost_and_resumed(three, queue, 0, 1)


async def _look_up(conn: Connection, name: str) -> tuple[ClientReceiver, str]:
    """JMS's look-up of a durable subscription by its link name alone (a null source): the
    receiver, and the address of the subscription's source the broker answered."""
    session = conn._session_for(None)
    link = session._session.receiver(name, source=None, target=Target())
    found = ClientReceiver(conn, session, link, address=None, window=10)
    await conn._attach(found, WAIT)
    assert isinstance(link.remote_source, Source) and link.remote_source.address is not None
    return found, str(link.remote_source.address)


async def test_a_durable_subscription_is_found_by_its_link_name_on_the_worker_that_does_not_keep_it(
    broker: Parent,
) -> None:
    ownership = Ownership(2)
    for w in (0, 1):
        cid = f"jms{w}"
        topic = next(f"news{w}-{i}" for i in range(100) if ownership.owner("/", f"news{w}-{i}::{cid}#sub") == 1 - w)
        durable = Source(address=f"topic://{topic}", durable=2, expiry_policy=symbol("never"))
        async with on_worker(broker, w, cid) as conn:
            sender = await subscribed_meanwhile(conn, durable, f"topic://{topic}")
            found, address = await _look_up(conn, "sub")  # kept by worker 1 - w
            assert address == topic
            assert await drain(found) == [0, 1, 2]  # the subscription's backlog
            await found.close()  # JMS's unsubscribe: ended on the worker that keeps it
            for _ in range(100):  # bounded: the owner applies the unsubscribe
                try:
                    again, _ = await _look_up(conn, "sub")
                except AMQPError:
                    break
                await again.detach()
                await anyio.sleep(0.05)
            else:
                raise AssertionError("the subscription was not ended")
            assert isinstance(await sender.send(Message(body="after"), timeout=WAIT), Accepted)
            await sender.close()


async def test_a_stream_made_by_a_capability_on_the_worker_that_does_not_own_it(broker: Parent) -> None:
    for w in (0, 1):
        name = owned_by(1 - w, f"capstream{w}-")
        async with on_worker(broker, w, f"streamer{w}") as conn:
            target = Target(address=name, capabilities=[symbol("stream")])
            sender = await conn.open_sender(name, target=target)
            assert list(sender._link.remote_target.capabilities or []) == [symbol("stream")]
            for i in range(3):
                assert isinstance(await sender.send(Message(body=i), timeout=WAIT), Accepted)
            for _ in range(2):  # a stream: each reader from the first offset reads it all
                r = await reader(conn, name, "first")
                assert await bodies(r, 3) == [0, 1, 2]
                await r.close()
            await sender.close()
