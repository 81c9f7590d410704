"""What a client sees the same on either worker of ``--workers 2``, first built after the rest.

A consumer cancelled on a worker that does not own its queue is dropped by the owner
before the cancel is answered (0-9-1 ``basic.cancel-ok``, 0-10 ``message.cancel``'s completion).

``amqp10 broker --workers 2`` on 127.0.0.1, a client on each worker. While the owner is
stopped (SIGSTOP) the cancel is not answered: the answer is the owner's; once the owner
runs again it comes, and at once the owner's counts no longer show the consumer, and
what is published next stays on the queue (none of it goes to the cancelled consumer).
The one bounded wait for "not answered while stopped" can only make a broken broker pass
on a slow machine, never a correct one fail.
"""

from __future__ import annotations

import datetime
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import anyio
import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from amqp10.client import Connection
from amqp10.message import Message
from amqp10.types import Accepted
from tests.broker.test_workers import WAIT, Parent

from . import test_amqp010_processes as p010
from . import test_amqp091_processes as p091
from . import test_processes as p1
from . import test_topics as topics
from .test_processes import owned_by

pytestmark = pytest.mark.slow

STOPPED_FOR = 1.0
"""How long the owner stays stopped while the cancel waits (seconds)."""


@contextmanager
def owner_stopped(broker: Parent, owner: int) -> Iterator[None]:
    """Worker ``owner`` is stopped (SIGSTOP) inside the block, running again after it."""
    pid = broker.worker_pids()[owner]
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def answered_only_by_the_owner(
    broker: Parent, owner: int, cancel: Callable[[], None], what: str = "the cancel"
) -> None:
    """``cancel()`` (a client's blocking cancel, on the other worker; or ``what`` else)
    is not answered while the owner is stopped, and is once it runs again."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            cancel()
        except BaseException as exc:  # (reported below)
            failed.append(exc)

    with owner_stopped(broker, owner):
        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(STOPPED_FOR)
        answered_early = not t.is_alive()
    t.join(WAIT)
    assert not failed, failed
    assert not t.is_alive(), f"{what} was never answered"
    assert not answered_early, f"{what} was answered while worker {owner} was stopped"


def test_basic_cancel_ok_comes_after_the_owner_dropped_the_consumer(broker: Parent) -> None:
    with p091.one_on_each(broker) as conns:
        for owner in (0, 1):
            name = owned_by(owner, "q91cancel")
            at_owner = conns[owner].channel()
            at_owner.queue_declare(name)
            for held in (False, True):  # its link closes at once / once what it holds is settled
                sub = conns[1 - owner].channel()
                sub.basic_qos(prefetch_count=1)
                got: list[bytes] = []
                tag = sub.basic_consume(name, lambda _c, _m, _p, body, got=got: got.append(body))
                if held:  # a message it holds unacknowledged: the owner hears of the cancel by STOP
                    at_owner.basic_publish("", name, b"held")
                    deadline = time.monotonic() + WAIT
                    while not got:
                        assert time.monotonic() < deadline, "the consumer got nothing"
                        conns[1 - owner].process_data_events(time_limit=0.05)
                assert at_owner.queue_declare(name, passive=True).method.consumer_count == 1
                answered_only_by_the_owner(
                    broker, owner, lambda sub=sub, tag=tag: sub.basic_cancel(tag)
                )
                for ch in (at_owner, sub):  # right after cancel-ok, on both workers: no consumer
                    assert ch.queue_declare(name, passive=True).method.consumer_count == 0
                for i in range(5):  # nothing of this goes to the cancelled consumer
                    at_owner.basic_publish("", name, str(i).encode())
                assert at_owner.queue_declare(name, passive=True).method.message_count == 5
                at_owner.queue_purge(name)
                sub.close()  # (the held message goes back, and is purged next)
                at_owner.queue_purge(name)


def test_message_cancel_completes_after_the_owner_dropped_the_subscription(broker: Parent) -> None:
    with p010.one_on_each(broker) as peers:
        for owner in (0, 1):
            name = owned_by(owner, "q010cancel")
            p, at_owner = peers[1 - owner], peers[owner]
            p.call("queue.declare", queue=name)
            p010.subscribe(p, name, "c", 10)
            assert p010.counts(at_owner, name) == (0, 1)
            answered_only_by_the_owner(
                broker, owner, lambda p=p: p.call("message.cancel", destination="c")
            )
            for peer in (at_owner, p):  # right after its completion, on both workers
                assert p010.counts(peer, name) == (0, 0)
            for i in range(5):
                p010.publish(at_owner, name, str(i).encode())
            assert p010.counts(p, name) == (5, 0)
            p.call("queue.delete", queue=name)


def test_x_stream_offset_is_read_by_the_streams_owner(broker: Parent) -> None:
    """A 0-9-1 consumer's ``x-stream-offset`` on a stream the other worker owns starts where
    it says (first, a number, last, next, a timestamp), as on the owner; one the stream
    cannot read is refused (406) by the owner's answer."""
    with p091.one_on_each(broker) as conns:
        for owner in (0, 1):
            name = owned_by(owner, "s91offset")
            at_owner = conns[owner].channel()
            at_owner.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
            at_owner.confirm_delivery()
            for i in range(10):
                at_owner.basic_publish(
                    "", name, str(i).encode(), pika.BasicProperties(delivery_mode=2)
                )
            for conn in (conns[1 - owner], conns[owner]):  # the same from either worker

                def read(
                    offset: object, n: int, conn: pika.BlockingConnection = conn, name: str = name
                ) -> list[bytes]:
                    ch = conn.channel()
                    ch.basic_qos(prefetch_count=100)
                    got: list[bytes] = []
                    for method, _, body in ch.consume(
                        name, arguments={"x-stream-offset": offset}, inactivity_timeout=WAIT
                    ):
                        assert method is not None, f"{len(got)} of {n} came"
                        got.append(body)
                        ch.basic_ack(method.delivery_tag)
                        if len(got) == n:
                            break
                    ch.close()
                    return got

                assert read("first", 10) == [str(i).encode() for i in range(10)]
                assert read(7, 3) == [b"7", b"8", b"9"]
                assert read("last", 1) == [b"9"]
                assert read(
                    datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1), 2
                ) == [b"0", b"1"]
                ch = conn.channel()
                with pytest.raises(ChannelClosedByBroker) as e:
                    ch.basic_consume(
                        name, lambda *_: None, arguments={"x-stream-offset": "nowhere"}
                    )
                assert e.value.reply_code == 406
            # declared and published on the other worker and consumed at once from a number
            # among them: the consumer's link reaches the owner after the publishes before it
            fresh = owned_by(owner, "s91fresh")
            pub = conns[1 - owner].channel()
            pub.queue_declare(fresh, durable=True, arguments={"x-queue-type": "stream"})
            for i in range(5):
                pub.basic_publish("", fresh, str(i).encode())
            pub.basic_qos(prefetch_count=10)
            got = []
            for method, _, body in pub.consume(
                fresh, arguments={"x-stream-offset": 2}, inactivity_timeout=WAIT
            ):
                assert method is not None, got
                got.append(body)
                if len(got) == 3:
                    break
            assert got == [b"2", b"3", b"4"]
            pub.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _management(conn: Connection, operation: str, kind: str, name: str) -> int:
    request = {"operation": operation, "type": kind, "name": name}
    reply = await conn.request("$management", Message(application_properties=request), timeout=WAIT)
    return int((reply.application_properties or {})["statusCode"])


@pytest.mark.anyio
async def test_a_topic_deleted_on_one_worker_is_deleted_on_every_worker(broker: Parent) -> None:
    async with p1.one_on_each(broker) as conns:
        for deleter in (0, 1):
            name = f"gone{deleter}"
            subs = {w: await topics.subscribe(conns[w], f"topic://{name}") for w in (0, 1)}
            sender = await conns[0].open_sender(f"topic://{name}")
            await topics.until_every_one_hears(
                sender, [subs[0], subs[1]]
            )  # (a copy on each worker)
            await sender.close()
            assert await _management(conns[deleter], "DELETE", "topic", name) in (200, 204)
            other = conns[1 - deleter]
            for _ in range(300):  # bounded: the metadata reaches the other worker
                if await _management(other, "READ", "topic", name) == 404:
                    break
                await anyio.sleep(0.1)
            assert await _management(other, "READ", "topic", name) == 404


@pytest.mark.anyio
async def test_a_plain_name_attached_before_the_metadata_says_it_is_a_topic(broker: Parent) -> None:
    """Worker ``a`` makes topic T while the parent (the metadata's sequencer) is stopped, so
    worker ``b`` does not know T is a topic when its clients attach to the plain name: their
    links reach the name's owner ``a``, and are the topic's publisher and subscriber there."""
    async with p1.one_on_each(broker) as conns:
        for a in (0, 1):
            b = 1 - a
            name = owned_by(a, "plaintopic")
            os.kill(broker.proc.pid, signal.SIGSTOP)
            try:
                on_a = await topics.subscribe(conns[a], f"topic://{name}")
                on_b = await topics.subscribe(
                    conns[b], name
                )  # plain: a queue of a's, for all b knows
                plain_sender = await conns[b].open_sender(name)
            finally:
                os.kill(broker.proc.pid, signal.SIGCONT)
            broker.wait_for(rf"worker={b} logger=amqp10.broker msg=.created topic '{name}'")
            copy_on_b = await topics.subscribe(conns[b], name)  # b's own copy of the topic now
            await topics.until_every_one_hears(plain_sender, [on_a, on_b, copy_on_b])
            sender_a = await conns[a].open_sender(f"topic://{name}")
            for i in range(5):
                assert isinstance(await plain_sender.send(Message(body=i)), Accepted)
                assert isinstance(await sender_a.send(Message(body=10 + i)), Accepted)
            for r in (on_a, on_b, copy_on_b):  # every subscriber, each message once
                assert sorted(await topics.drain(r)) == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]
            for link in (on_a, on_b, copy_on_b, plain_sender, sender_a):
                await link.close()


def both_declare(
    broker: Parent, a: int, name: str, declare: Callable[[int], int]
) -> dict[int, int]:
    """Worker ``a`` makes exclusive queue ``name`` (hashed to the other worker, ``b``) while
    the parent, the metadata's sequencer, is stopped, so ``b`` does not know it is placed
    on ``a`` and makes one too for its own client: ``declare(w)`` on each (a blocking
    declaration by a client of worker ``w``: 200, or the error code it got)."""
    b = 1 - a
    answers: dict[int, int] = {}

    def run(w: int) -> None:
        answers[w] = declare(w)

    threads = {w: threading.Thread(target=run, args=(w,), daemon=True) for w in (a, b)}
    mark = len(broker.lines)
    made = r"worker={} logger=amqp10.broker msg=.declared queue '{}'"
    os.kill(broker.proc.pid, signal.SIGSTOP)
    try:
        threads[a].start()  # made on a (b has no such queue); its placement waits for the parent
        broker.wait_for(made.format(a, name), mark)
        threads[b].start()  # made on b too: its table does not say the name is placed on a
        broker.wait_for(made.format(b, name), mark)
    finally:
        os.kill(broker.proc.pid, signal.SIGCONT)
    for t in threads.values():
        t.join(WAIT)
    return answers


def test_one_exclusive_name_declared_on_both_workers_at_once_is_one_queue(broker: Parent) -> None:
    """The metadata's order decides: one ``queue.declare`` is answered declare-ok, the
    other 405, and every worker routes the name to the one queue that stands."""
    with p091.one_on_each(broker) as conns:
        for a in (0, 1):
            name = owned_by(1 - a, "xrace")

            def declare(w: int, name: str = name) -> int:
                try:
                    conns[w].channel().queue_declare(name, exclusive=True)
                except ChannelClosedByBroker as exc:
                    return int(exc.reply_code)
                return 200

            answers = both_declare(broker, a, name, declare)
            assert sorted(answers.values()) == [200, 405], answers
            (won,) = (w for w, code in answers.items() if code == 200)
            winner = conns[won].channel()
            for w in (0, 1):  # a publish on either worker reaches the one queue
                conns[w].channel().basic_publish("", name, f"from {w}".encode())
            got = []
            for method, _, body in winner.consume(name, inactivity_timeout=WAIT):
                assert method is not None, got
                got.append(body)
                if len(got) == 2:
                    break
            assert sorted(got) == [b"from 0", b"from 1"]
            winner.close()


def test_one_exclusive_name_declared_by_0_10_sessions_on_both_workers_at_once(
    broker: Parent,
) -> None:
    """The same with 0-10 sessions: one declaration completes, the other is refused
    resource-locked (405, which ends that session), and the one queue that stands gets
    what is routed to it."""
    for a in (0, 1):
        name = owned_by(1 - a, "x010race")
        with p010.one_on_each(broker) as peers:

            def declare(w: int, name: str = name) -> int:
                peer = peers[w]
                cid = peer.command("queue.declare", queue=name, exclusive=True)
                peer.command("execution.sync")
                peer.flush()
                while True:
                    for _, item in peer.got:
                        if item.name == "execution.exception" and item["command_id"] == cid:
                            return int(item["error_code"])
                        if item.name == "session.completed" and any(
                            lo <= cid <= hi for lo, hi in item.get("commands", ())
                        ):
                            return 200
                    peer.feed(peer.sock.recv(65536))

            answers = both_declare(broker, a, name, declare)
            assert sorted(answers.values()) == [200, 405], answers
            (won,) = (w for w, code in answers.items() if code == 200)
            peers[won].got.clear()
            p010.publish(peers[won], name, b"routed")
            assert p010.counts(peers[won], name) == (1, 0)
