"""A node whose kind a 1.0 attach chose is decided by the owner of its name (workers/making.py).

``amqp10 broker --workers 2`` on 127.0.0.1, a client on each worker. Worker ``a`` attaches
a name that worker ``o`` owns as a topic (``topic://``); a plain attach of the same name on
``o`` must find that topic, not make a queue of its own. The parent (the metadata's
sequencer) or the owner is stopped (SIGSTOP) to hold the race open: with the parent
stopped, ``o`` hears of a topic ``a`` made only later, so before the owner decided, its
plain attach made a queue, and the two workers disagreed for good. Waits are bounded
loops, never timed assertions.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
import pytest

from amqp10.client import Connection, Receiver
from amqp10.message import Message
from amqp10.types import Accepted
from tests.broker.test_workers import WAIT, Parent

from .test_processes import one_on_each, owned_by
from .test_topics import drain, subscribe, until_every_one_hears

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def stopped(pid: int) -> AsyncIterator[None]:
    """Process ``pid`` is stopped (SIGSTOP) inside the block, running again after it."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def kind_answered(r: Receiver) -> str:
    """The node's kind as the broker's attach answer names it (its source's capability)."""
    caps = [str(c) for c in (getattr(r.remote_source, "capabilities", None) or [])]
    kinds = [c for c in caps if c in ("queue", "topic", "stream")]
    assert len(kinds) == 1, caps
    return kinds[0]


async def subscribed(got: dict[str, Receiver], key: str, conn: Connection, address: str) -> None:
    """``got[key]``: a subscriber of ``address`` on ``conn``, once its attach is answered."""
    got[key] = await subscribe(conn, address)


def answered_or_made(got: dict[str, Receiver], broker: Parent, worker: int, name: str, after: int) -> bool:
    """Whether ``got`` has its attach answered, or ``worker`` logged making topic ``name``
    (after line ``after``)."""
    made = rf"worker={worker} logger=amqp10.broker msg=.created topic '{name}'"
    return bool(got) or any(re.search(made, line) for line in broker.lines[after:])


async def until(done: Any) -> None:
    """Bounded: until ``done()``."""
    with anyio.fail_after(WAIT):
        while not done():
            await anyio.sleep(0.05)


async def test_a_topic_attached_on_another_worker_is_the_node_its_owner_has(broker: Parent) -> None:
    """The parent is stopped: worker ``a``'s topic attach of a name ``o`` owns is decided by
    ``o`` (which makes the topic at once), so ``o``'s plain attach meanwhile is the topic's
    subscriber and publisher; a message published on either worker reaches both."""
    async with one_on_each(broker) as conns:
        for o in (0, 1):
            a = 1 - o
            name = owned_by(o, "kindtopic")
            mark = len(broker.lines)
            got: dict[str, Receiver] = {}
            async with anyio.create_task_group() as tg, stopped(broker.proc.pid):
                tg.start_soon(subscribed, got, "a", conns[a], f"topic://{name}")
                # the owner made it (the fix), or worker a made it alone and answered (before)
                await until(partial(answered_or_made, got, broker, o, name, mark))
                on_o = await subscribe(conns[o], name)  # plain: before, a new queue on o
                sender_o = await conns[o].open_sender(name)
            on_a_ = got["a"]
            assert kind_answered(on_a_) == kind_answered(on_o) == "topic"
            await until_every_one_hears(sender_o, [on_a_, on_o])
            sender_a = await conns[a].open_sender(f"topic://{name}")
            for i in range(5):
                assert isinstance(await sender_o.send(Message(body=i)), Accepted)
                assert isinstance(await sender_a.send(Message(body=10 + i)), Accepted)
            for r in (on_a_, on_o):  # each subscriber, each message once
                assert sorted(await drain(r)) == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]
            for link in (on_a_, on_o, sender_o, sender_a):
                await link.close()


async def test_a_topic_and_a_plain_queue_attached_at_once_are_one_kind(broker: Parent) -> None:
    """The owner ``o`` is stopped while worker ``a`` attaches a name ``o`` owns as a topic and
    ``o`` gets a plain attach of it: whichever ``o`` takes first decides, and both attaches
    answer that one kind; messages published on either worker go where that kind says
    (a topic: every subscriber; a queue: one of its competing consumers)."""
    async with one_on_each(broker) as conns:
        for o in (0, 1):
            a = 1 - o
            name = owned_by(o, "kindrace")
            got: dict[str, Receiver] = {}
            async with anyio.create_task_group() as tg, stopped(broker.worker_pids()[o]):
                tg.start_soon(subscribed, got, "a", conns[a], f"topic://{name}")
                tg.start_soon(subscribed, got, "o", conns[o], name)
                await anyio.sleep(0.5)  # (both sent: only makes the race likelier, never a pass)
            kind = kind_answered(got["a"])
            assert kind_answered(got["o"]) == kind
            senders = [await conns[a].open_sender(f"topic://{name}"), await conns[o].open_sender(name)]
            if kind == "topic":
                await until_every_one_hears(senders[1], [got["a"], got["o"]])
            for i in range(5):
                for k, sender in enumerate(senders):
                    assert isinstance(await sender.send(Message(body=10 * k + i)), Accepted)
            heard = {key: await drain(r) for key, r in got.items()}
            sent = [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]
            if kind == "topic":  # each subscriber, each message once
                assert all(sorted(h) == sent for h in heard.values()), heard
            else:  # competing consumers of one queue: each message once, to one of them
                assert sorted(heard["a"] + heard["o"]) == sent, heard
            for link in [*got.values(), *senders]:
                await link.close()
