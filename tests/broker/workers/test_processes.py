"""N worker processes are one broker for AMQP 1.0 clients on queues (``amqp10 broker --workers 2``).

Real processes on 127.0.0.1: our client opens connections until it has one served by each
worker (the open frame's properties say which), and uses queues owned by one worker
from connections on the other. Every wait is bounded; none is a timed assertion.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from amqp10.broker.amqp1.frontend import WORKER_PROPERTY
from amqp10.broker.config import AddressRule, QueuePolicy
from amqp10.broker.workers.ownership import Ownership
from amqp10.client import Connection, connect
from amqp10.errors import AMQPError
from amqp10.message import Message
from amqp10.types import Accepted, Released
from tests.broker.conftest import make_config
from tests.broker.test_workers import WAIT, Parent
from tests.broker.workers_mode import start_processes

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def owned_by(worker: int, prefix: str) -> str:
    """A queue name that worker ``worker`` of 2 owns."""
    ownership = Ownership(2)
    for i in range(100):
        name = f"{prefix}{i}"
        if ownership.owner("/", name) == worker:
            return name
    raise AssertionError("no such name")  # pragma: no cover


@asynccontextmanager
async def one_on_each(p: Parent, user: tuple[str, str] | None = None) -> AsyncIterator[dict[int, Connection]]:
    """A connection served by worker 0 and one by worker 1 (the kernel spreads them), as
    ``user`` (name, password; None: anonymous)."""
    auth = f"{user[0]}:{user[1]}@" if user else ""
    async with connected_on_each(f"amqp://{auth}127.0.0.1:{p.port}") as conns:
        yield conns


@asynccontextmanager
async def connected_on_each(address: str) -> AsyncIterator[dict[int, Connection]]:
    """A connection to ``address`` (what :func:`amqp10.client.connect` takes) served by
    worker 0 and one by worker 1 (the kernel spreads them)."""
    async with AsyncExitStack() as stack:
        by_worker: dict[int, Connection] = {}
        for _ in range(64):
            conn = await stack.enter_async_context(await connect(address, timeout=WAIT))
            by_worker.setdefault(int((conn.remote_properties or {})[WORKER_PROPERTY]), conn)
            if len(by_worker) == 2:
                break
        assert sorted(by_worker) == [0, 1]
        yield by_worker


async def test_sent_on_one_worker_received_on_the_other_once_in_order(broker: Parent) -> None:
    async with one_on_each(broker) as conns:
        for owner in (0, 1):  # a queue the sender's worker owns, and one it does not
            name = owned_by(owner, "order")
            sender = await conns[owner].open_sender(name)
            for i in range(200):
                assert isinstance(await sender.send(Message(body=i)), Accepted)
            receiver = await conns[1 - owner].open_receiver(name, credit=50)
            got = []
            for _ in range(200):
                d = await receiver.receive(timeout=WAIT)
                got.append(d.message.body)
                await d.accept()
            assert got == list(range(200))
            with pytest.raises(AMQPError):
                await receiver.receive(timeout=0.5)  # nothing more: each once
            await receiver.close()
            await sender.close()


async def test_a_full_queue_stops_its_publishers_credit_on_either_worker_until_it_drains(tmp_path: Path) -> None:
    config = make_config(tmp_path, addresses=[AddressRule(pattern="small.*", policy=QueuePolicy(max_length=5))])
    with contextmanager(start_processes)(config, 2) as b:
        async with one_on_each(b) as conns:  # type: ignore[arg-type]
            for owner, publisher in ((0, 1), (1, 0), (0, 0)):
                name = owned_by(owner, f"small.{publisher}.")
                sender = await conns[publisher].open_sender(name)
                with anyio.fail_after(WAIT):
                    while sender.credit < 5:  # (the owner's room, once it answered)
                        await anyio.sleep(0.01)
                assert sender.credit == 5
                for i in range(5):
                    assert isinstance(await sender.send(Message(body=i)), Accepted)
                assert sender.credit == 0
                receiver = await conns[1 - publisher].open_receiver(name, credit=10)
                got = [(await receiver.receive(timeout=WAIT)).message.body for _ in range(5)]
                assert isinstance(await sender.send(Message(body=5), timeout=WAIT), Accepted)  # credit back
                got.append((await receiver.receive(timeout=WAIT)).message.body)
                assert got == list(range(6))
                await receiver.close()
                await sender.close()


async def test_a_publisher_held_back_by_the_whole_brokers_memory_limit_goes_on_once_it_drains(tmp_path: Path) -> None:
    with contextmanager(start_processes)(make_config(tmp_path, limits={"memory_limit_bytes": 4096}), 2) as b:
        async with one_on_each(b) as conns:  # type: ignore[arg-type]
            for publisher in (0, 1):  # to a queue of the other worker
                name = owned_by(1 - publisher, "big")
                sender = await conns[publisher].open_sender(name)
                for _ in range(3):
                    assert isinstance(await sender.send(Message(body=b"x" * 2000), timeout=WAIT), Accepted)
                with anyio.fail_after(WAIT):
                    while sender.credit:  # held back: 6000 bytes queued on the other worker
                        await anyio.sleep(0.01)
                receiver = await conns[1 - publisher].open_receiver(name, credit=10)
                for _ in range(3):
                    await (await receiver.receive(timeout=WAIT)).accept()
                assert isinstance(await sender.send(Message(body=b"after"), timeout=WAIT), Accepted)
                assert (await receiver.receive(timeout=WAIT)).message.body == b"after"
                await receiver.close()
                await sender.close()


async def test_competing_consumers_on_both_workers(broker: Parent) -> None:
    n = 300
    async with one_on_each(broker) as conns:
        name = owned_by(1, "compete")
        receivers = [await conns[w].open_receiver(name, credit=10) for w in (0, 1)]
        got: dict[int, list[Any]] = {0: [], 1: []}
        done = anyio.Event()

        async def take(w: int) -> None:
            while not done.is_set():
                try:
                    d = await receivers[w].receive(timeout=0.2)
                except AMQPError:
                    continue
                got[w].append(d.message.body)
                await d.accept()
                if len(got[0]) + len(got[1]) == n:
                    done.set()

        with anyio.fail_after(WAIT * 2):
            async with anyio.create_task_group() as tg:
                tg.start_soon(take, 0)
                tg.start_soon(take, 1)
                sender = await conns[0].open_sender(name)
                for i in range(n):
                    assert isinstance(await sender.send(Message(body=i)), Accepted)
        assert sorted(got[0] + got[1]) == list(range(n))  # each once
        assert got[0] and got[1]  # both workers' consumers took some
        for w in (0, 1):
            assert got[w] == sorted(got[w])  # each in the queue's order


async def test_a_sigkilled_owner_comes_back_with_every_accepted_message(broker: Parent) -> None:
    name = owned_by(1, "durable")
    accepted: list[int] = []
    released = 0
    async with one_on_each(broker) as conns:
        sender = await conns[0].open_sender(name)  # on worker 0: every message crosses to 1
        killed = False
        mark = len(broker.lines)
        deadline = time.monotonic() + WAIT * 2
        i = 0
        while len(accepted) < 400:
            assert time.monotonic() < deadline, f"{len(accepted)} accepted, {released} released"
            outcome = await sender.send(Message(body=i, durable=True), timeout=WAIT)
            if isinstance(outcome, Accepted):
                accepted.append(i)
            else:
                assert isinstance(outcome, Released)  # the owner was unavailable
                released += 1
                await anyio.sleep(0.02)
            i += 1
            if len(accepted) == 150 and not killed:
                killed = True
                os.kill(broker.worker_pids()[1], signal.SIGKILL)
                broker.wait_for(r"worker 1 \(pid \d+\) ended .*killed by SIGKILL", mark)
        # (sent while the owner was down: held for it and accepted once it is back; released
        # only if it was not back within worker_down_hold: never lost silently)
    recovered = broker.wait_for(r"worker=1 logger=amqp10.broker msg=.recovered (\d+) messages", mark)
    assert int(recovered[1]) >= 150  # from its store file
    async with one_on_each(broker) as conns:
        receiver = await conns[0].open_receiver(name, credit=100)
        got: list[int] = []
        while True:
            try:
                d = await receiver.receive(timeout=2.0)
            except AMQPError:
                break
            got.append(d.message.body)
            await d.accept()
            assert len(got) <= i
    assert set(accepted) <= set(got)  # no accepted message lost (one released may come twice)
    assert got == sorted(got)
