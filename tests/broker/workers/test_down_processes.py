"""A message published while the worker that owns one of its nodes is down (``amqp10 broker
--workers 2``): its outcome waits until every copy was taken, or it is refused.

Worker 1 is SIGKILLed while the parent is SIGSTOPped, so it stays down (the parent restarts
it once continued); the publishers are on worker 0, pinned by their connection's worker.
Before the held copies, the copy for worker 1's node was dropped and the publish answered
at once (accepted, acknowledged). Every wait is bounded; none is a timed assertion (a
held outcome is looked for during a bounded wait, then the parent is continued).

A worker that is alive but does not answer (SIGSTOPped: the parent does not restart it) is
down the same way once its internal links time out (``worker_link_idle_timeout``).
"""

from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pika
import pytest
from pika.exceptions import NackError

from amqp10.broker.workers.ownership import Ownership
from amqp10.message import Message
from amqp10.types import Accepted, Released, Source, symbol
from tests.broker.test_workers import WAIT, Parent

from .conftest import running
from .test_amqp091_processes import _connect, worker_of
from .test_copies_and_resumes_processes import on_worker
from .test_processes import owned_by
from .test_topics import drain

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

HELD_FOR = 2.0
"""How long a test looks for an outcome that must wait for the down worker (seconds)."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@contextmanager
def worker_1_down(broker: Parent) -> Iterator[None]:
    """Worker 1 SIGKILLed and kept down (the parent SIGSTOPped) until the block ends, once
    worker 0 saw its link go; then the parent restarts it and worker 0 links to it again."""
    mark = len(broker.lines)
    os.kill(broker.proc.pid, signal.SIGSTOP)
    try:
        os.kill(broker.worker_pids()[1], signal.SIGKILL)
        broker.wait_for(r"worker=0 .*internal link to worker 1 went", mark)
        yield
    finally:
        os.kill(broker.proc.pid, signal.SIGCONT)
    restarted = r"worker 1 started \(pid"
    broker.wait_for(restarted, mark)
    # (worker 0 may reach the killed one's socket as it closes: an "up" before the restart)
    after = next(i for i in range(mark, len(broker.lines)) if re.search(restarted, broker.lines[i]))
    broker.wait_for(r"worker=0 .*internal link to worker 1 is up", after)


def _durable(topic: str) -> Source:
    return Source(address=f"topic://{topic}", durable=2, expiry_policy=symbol("never"))


async def _subscription(broker: Parent, worker: int, cid: str, topic: str) -> list[Any]:
    """What durable subscription ``sub`` of ``cid`` to ``topic`` holds (read on its owner)."""
    async with on_worker(broker, worker, cid) as conn:
        r = await conn.open_receiver(None, name="sub", source=_durable(topic), credit=10)
        got = await drain(r)
        await r.detach()
        return got


async def test_a_topic_publish_waits_for_the_subscriptions_of_a_down_worker(broker: Parent) -> None:
    ownership = Ownership(2)
    topic = next(
        t
        for t in (f"heldnews{i}" for i in range(200))
        if ownership.owner("/", f"{t}::down-a#sub") == 0 and ownership.owner("/", f"{t}::down-b#sub") == 1
    )
    for w, cid in ((0, "down-a"), (1, "down-b")):  # a durable subscription kept by each worker
        async with on_worker(broker, w, cid) as conn:
            await (await conn.open_receiver(None, name="sub", source=_durable(topic), credit=0)).detach()
    async with on_worker(broker, 0, "down-publisher") as conn:
        sender = await conn.open_sender(f"topic://{topic}")
        assert isinstance(await sender.send(Message(body="before", durable=True), timeout=WAIT), Accepted)
        outcomes: list[Any] = []

        async def send() -> None:
            outcomes.append(await sender.send(Message(body="held", durable=True), timeout=WAIT * 2))

        async with anyio.create_task_group() as tg:
            with worker_1_down(broker):
                tg.start_soon(send)
                with anyio.move_on_after(HELD_FOR):
                    while not outcomes:
                        await anyio.sleep(0.05)
                assert outcomes == []  # no outcome while a subscription's worker is down
        assert len(outcomes) == 1 and isinstance(outcomes[0], Accepted)
    assert await _subscription(broker, 0, "down-a", topic) == ["before", "held"]
    assert await _subscription(broker, 1, "down-b", topic) == ["before", "held"]


def _fanout(ch: Any, exchange: str) -> list[str]:
    """Fanout ``exchange`` bound to a durable queue of each worker: their names, by worker.
    Worker 1's is bound first, so it is routed to before worker 0's (a copy refused at once
    by a down worker then came before any queue had taken the message, which was then acked)."""
    ch.exchange_declare(exchange, "fanout", durable=True)
    queues = [owned_by(w, f"{exchange}-q") for w in (0, 1)]
    for q in reversed(queues):
        ch.queue_declare(q, durable=True)
        ch.queue_bind(q, exchange)
    return queues


def _confirmed_before(publisher: pika.BlockingConnection, exchange: str) -> tuple[Any, list[str]]:
    """A confirming channel of ``publisher``, fanout ``exchange`` (:func:`_fanout`) and a
    persistent ``before`` published to it and confirmed: the channel, the queues by worker."""
    ch = publisher.channel()
    queues = _fanout(ch, exchange)
    ch.confirm_delivery()
    ch.basic_publish(exchange, "", b"before", pika.BasicProperties(delivery_mode=2))
    return ch, queues


def _publisher_on_0(broker: Parent) -> pika.BlockingConnection:
    conn = _connect(broker)
    while worker_of(conn) != 0:  # (bounded: the kernel spreads connections; WAIT bounds each)
        conn.close()
        conn = _connect(broker)
    return conn


def _bodies(broker: Parent, queue: str) -> list[bytes]:
    """Every message of ``queue`` (taken with basic.get, acknowledged)."""
    conn = _connect(broker)
    try:
        ch = conn.channel()
        got = []
        for _ in range(100):
            method, _, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                break
            got.append(body)
        return got
    finally:
        conn.close()


def test_a_confirm_waits_for_the_fanout_queue_of_a_restarted_worker(broker: Parent) -> None:
    publisher = _publisher_on_0(broker)
    try:
        ch, queues = _confirmed_before(publisher, "heldfan")
        failed: list[BaseException] = []

        def publish() -> None:
            try:
                ch.basic_publish("heldfan", "", b"held", pika.BasicProperties(delivery_mode=2))
            except BaseException as exc:  # (told to the test's thread)
                failed.append(exc)

        thread = threading.Thread(target=publish, daemon=True)
        with worker_1_down(broker):
            thread.start()
            thread.join(HELD_FOR)
            assert thread.is_alive()  # no confirm while a queue's worker is down
        thread.join(WAIT * 2)
        assert not thread.is_alive() and failed == []  # confirmed once the restarted worker took it
    finally:
        publisher.close()
    for q in queues:  # the restarted worker's durable queue has it (from its store, then the held copy)
        assert _bodies(broker, q) == [b"before", b"held"]


@contextmanager
def worker_1_stopped(broker: Parent) -> Iterator[None]:
    """Worker 1 SIGSTOPped (alive, its sockets open: only its silence tells; the parent does
    not restart it) until the block ends, once worker 0's link to it timed out; then it runs
    again, the same process, and worker 0 links to it again."""
    pid = broker.worker_pids()[1]
    mark = len(broker.lines)
    os.kill(pid, signal.SIGSTOP)
    try:
        broker.wait_for(r"worker=0 .*internal link to worker 1 went \(.*idle-time-out", mark)
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
    went = next(i for i in range(mark, len(broker.lines)) if "internal link to worker 1 went" in broker.lines[i])
    broker.wait_for(r"worker=0 .*internal link to worker 1 is up", went)
    assert broker.worker_pids()[1] == pid  # never restarted


@pytest.mark.parametrize(
    ("down", "config_text"),
    [
        (worker_1_down, "worker_down_hold = 0.5\n"),
        (worker_1_stopped, "worker_link_idle_timeout = 2.0\nworker_down_hold = 1.0\n"),
    ],
    ids=["killed", "stopped"],
)
async def test_a_worker_down_past_the_bound_refuses_the_publish(
    tmp_path: Path, down: Callable[[Parent], AbstractContextManager[None]], config_text: str
) -> None:
    config = tmp_path / "broker.toml"
    config.write_text(config_text)
    for parent in running(Parent(tmp_path / "data", args=("--no-http", "--config", str(config)))):
        queue = owned_by(1, "boundq")
        publisher = _publisher_on_0(parent)
        try:
            ch, queues = _confirmed_before(publisher, "boundfan")
            async with on_worker(parent, 0, "bound-publisher") as conn:
                sender = await conn.open_sender(queue)
                assert isinstance(await sender.send(Message(body="before", durable=True), timeout=WAIT), Accepted)
                with down(parent):
                    outcome = await sender.send(Message(body="held", durable=True), timeout=WAIT)
                    assert isinstance(outcome, Released)  # free to send it again; never accepted
                    with pytest.raises(NackError):
                        ch.basic_publish("boundfan", "", b"held", pika.BasicProperties(delivery_mode=2))
                assert isinstance(await sender.send(Message(body="after", durable=True), timeout=WAIT), Accepted)
            ch.basic_publish("boundfan", "", b"after", pika.BasicProperties(delivery_mode=2))  # confirmed
        finally:
            publisher.close()
        async with on_worker(parent, 0, "bound-reader") as conn:
            r = await conn.open_receiver(queue, credit=10)
            assert await drain(r) == ["before", "after"]  # the refused one never reached the owner
        assert _bodies(parent, queues[1]) == [b"before", b"after"]  # nor the fanout's queue on worker 1
