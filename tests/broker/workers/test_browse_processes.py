"""A browser of another worker's queue leaves nothing held on either worker.

``amqp10 broker --workers 2`` on 127.0.0.1, a client pinned to the worker that does not
own the queue: a 0-10 not-acquired subscription and a 1.0 ``copy`` receiver read N
messages, and each worker's answer to the :data:`~amqp10.broker.workers.peers.UNSETTLED`
control question says what crosses its internal links unsettled (the owner's ``sent``,
the browsing worker's ``held``): nothing, as a browser settles nothing. A consumer that
takes messages, and a ``message.acquire`` of a browsed one, hold them on both sides until
settled (so the counts are not vacuous). Every wait is bounded; none is a timed assertion.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from amqp10.broker.workers.control import ask, control_path
from amqp10.broker.workers.peers import UNSETTLED
from amqp10.message import Message
from amqp10.types import Accepted, Source, symbol
from tests.broker.test_workers import WAIT, Parent

from .test_amqp010_processes import (
    BYTES,
    MESSAGES,
    UNLIMITED,
    counts,
    counts_become,
    one_on_each,
    publish,
)
from .test_processes import one_on_each as amqp1_one_on_each
from .test_processes import owned_by

pytestmark = pytest.mark.slow

N = 20


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def unsettled(data_dir: Path, worker: int) -> dict[str, int]:
    """Worker ``worker``'s answer to :data:`UNSETTLED` (its control socket, under ``data_dir``)."""

    async def asked() -> dict[str, int]:
        answer = await ask(control_path(data_dir / "workers", worker), "test", UNSETTLED, {}, timeout=WAIT)
        assert isinstance(answer, dict)
        return {str(k): int(v) for k, v in answer.items()}

    return anyio.run(asked)


def both(data_dir: Path, owner: int) -> tuple[int, int]:
    """(what the owner sent unsettled, what the other worker holds unsettled)."""
    return unsettled(data_dir, owner)["sent"], unsettled(data_dir, 1 - owner)["held"]


def both_become(data_dir: Path, owner: int, want: tuple[int, int]) -> None:
    deadline = time.monotonic() + WAIT
    while (got := both(data_dir, owner)) != want:
        assert time.monotonic() < deadline, f"unsettled across the workers stayed {got}, not {want}"
        time.sleep(0.02)


def test_a_0_10_browser_of_another_workers_queue_leaves_nothing_held(broker: Parent, tmp_path: Path) -> None:
    owner = 1
    with one_on_each(broker) as peers:
        name = owned_by(owner, "q010browsed")
        p = peers[1 - owner]
        p.call("queue.declare", queue=name)
        for i in range(N):
            publish(p, name, str(i).encode())
        p.call("message.subscribe", queue=name, destination="browser", accept_mode=0, acquire_mode=1)
        p.call("message.flow", destination="browser", unit=BYTES, value=UNLIMITED)
        p.call("message.flow", destination="browser", unit=MESSAGES, value=UNLIMITED)
        browsed = p.wait("message.transfer", N)
        assert [t.body for t in browsed] == [str(i).encode() for i in range(N)]
        # every copy has gone through both workers: neither keeps one
        assert both(tmp_path, owner) == (0, 0)
        # an acquired copy is the session's: held on both sides until accepted
        got = p.call("message.acquire", transfers=((browsed[0].id, browsed[0].id),))
        assert got is not None and got["transfers"] == ((browsed[0].id, browsed[0].id),)
        assert both(tmp_path, owner) == (1, 1)
        p.call("message.accept", transfers=((browsed[0].id, browsed[0].id),))
        both_become(tmp_path, owner, (0, 0))
        assert counts(p, name) == (N - 1, 1)
        # cancelled, the browser leaves the queue as it was: no copy goes back onto it
        p.call("message.cancel", destination="browser")
        counts_become(p, name, (N - 1, 0))
        assert both(tmp_path, owner) == (0, 0)


@pytest.mark.anyio
async def test_a_1_0_copy_receiver_of_another_workers_queue_leaves_nothing_held(
    broker: Parent, tmp_path: Path
) -> None:
    owner = 0
    async with amqp1_one_on_each(broker) as conns:
        name = owned_by(owner, "browsed")
        conn = conns[1 - owner]
        sender = await conn.open_sender(name)
        for i in range(N):
            assert isinstance(await sender.send(Message(body=i)), Accepted)
        browser = await conn.open_receiver(
            name, credit=N, source=Source(address=name, distribution_mode=symbol("copy"))
        )
        seen = [(await browser.receive(timeout=WAIT)).message.body for _ in range(N)]
        assert seen == list(range(N))
        assert await anyio.to_thread.run_sync(both, tmp_path, owner) == (0, 0)
        # a consumer that takes them holds them on both sides until it settles them
        receiver = await conn.open_receiver(name, credit=N)
        taken = [await receiver.receive(timeout=WAIT) for _ in range(N)]
        assert [d.message.body for d in taken] == list(range(N))
        assert await anyio.to_thread.run_sync(both, tmp_path, owner) == (N, N)
        for d in taken:
            await d.accept()
        await anyio.to_thread.run_sync(both_become, tmp_path, owner, (0, 0))
        await receiver.close()
        await browser.close()
        await sender.close()
