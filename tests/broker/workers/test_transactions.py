"""Transactions over queues of both workers commit or roll back as one (0-9-1 ``tx``, pika).

``amqp10 broker --workers 2`` on 127.0.0.1; the transactional channel is on worker 0 and
its work reaches a queue worker 0 owns and one worker 1 owns (two-phase over the internal
link: ``amqp10.broker.workers.transactions``). Every wait is bounded; none is timed.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.broker.test_workers import Parent

from .test_amqp091_processes import one_on_each
from .test_processes import owned_by

pytestmark = pytest.mark.slow


def _count(ch: BlockingChannel, name: str) -> int:
    return int(ch.queue_declare(name, passive=True).method.message_count)


def _counts(conns: dict[int, pika.BlockingConnection], names: list[str]) -> set[tuple[int, ...]]:
    """Each queue's ready count as each worker answers it (one tuple when they agree)."""
    seen = set()
    for w in (0, 1):
        ch = conns[w].channel()
        seen.add(tuple(_count(ch, n) for n in names))
        ch.close()
    return seen


def test_publishes_to_queues_of_both_workers_commit_and_roll_back_as_one(broker: Parent) -> None:
    with one_on_each(broker) as conns:
        names = [owned_by(0, "txpub"), owned_by(1, "txpub")]
        setup = conns[0].channel()
        for n in names:
            setup.queue_declare(n, durable=True)
        setup.exchange_declare("txfan", "fanout")
        for n in names:
            setup.queue_bind(n, "txfan")
        tx = conns[0].channel()
        tx.tx_select()
        for n in names:
            for i in range(3):
                tx.basic_publish("", n, f"{n}-{i}".encode(), pika.BasicProperties(delivery_mode=2))
        tx.basic_publish("txfan", "", b"fanned")  # one message, a copy on each worker
        assert _counts(conns, names) == {(0, 0)}  # nothing visible before the commit
        tx.tx_commit()
        assert _counts(conns, names) == {(4, 4)}  # all of it, on both owners, once answered
        for n in names:
            tx.basic_publish("", n, b"rolled back")
        tx.basic_publish("txfan", "", b"rolled back")
        tx.tx_rollback()
        tx.tx_commit()  # (nothing left to commit)
        assert _counts(conns, names) == {(4, 4)}
        for n in names:
            got = [tx.basic_get(n, auto_ack=True)[2] for _ in range(4)]
            assert got == [f"{n}-{i}".encode() for i in range(3)] + [b"fanned"]
        tx.tx_commit()


def _held(ch: BlockingChannel, names: list[str], n: int) -> list[int]:
    """``n`` messages of each queue taken by ``basic.get`` (not acknowledged): their tags."""
    tags = []
    for name in names:
        for _ in range(n):
            method, _, _ = ch.basic_get(name)
            assert method is not None
            tags.append(method.delivery_tag)
    return tags


def test_acks_on_queues_of_both_workers_commit_and_roll_back_as_one(broker: Parent) -> None:
    with one_on_each(broker) as conns:
        names = [owned_by(0, "txack"), owned_by(1, "txack")]
        setup = conns[1].channel()
        for n in names:
            setup.queue_declare(n)
            for i in range(5):
                setup.basic_publish("", n, str(i).encode())
        tx = conns[0].channel()
        tx.tx_select()
        tags = _held(tx, names, 2)
        for tag in tags:
            tx.basic_ack(tag)
        tx.tx_rollback()  # the acks are undone: the messages are still this channel's, unacked
        tx.close()  # so they go back, and are delivered again
        assert _counts(conns, names) == {(5, 5)}

        tx = conns[0].channel()
        tx.tx_select()
        tags = _held(tx, names, 2)
        for tag in tags:
            tx.basic_ack(tag)
        out = owned_by(0, "txmoved")
        setup.queue_declare(out)
        tx.basic_publish("", out, b"moved")  # a move: taken from both workers, published on one
        tx.tx_commit()
        tx.close()  # nothing unacked is left to go back
        assert _counts(conns, names) == {(3, 3)}
        assert _counts(conns, [out]) == {(1,)}
        assert [setup.basic_get(n, auto_ack=True)[2] for n in names] == [b"2", b"2"]


def _stored(conn: pika.BlockingConnection, worker: int) -> None:
    """Once this returns, what worker ``worker`` (``conn``'s) gave its store before is
    durable: a persistent publish to a durable queue it owns is confirmed only once its
    store batch is, and its store commits batches in order. (A delivery's in-flight mark,
    which brings the message back redelivered after a crash, is written in a batch after
    the delivery is sent: a crash before that batch brings it back not redelivered.)"""
    ch = conn.channel()
    ch.confirm_delivery()
    name = owned_by(worker, "stored")
    ch.queue_declare(name, durable=True)
    ch.basic_publish("", name, b"", pika.BasicProperties(delivery_mode=2))  # (returns once confirmed)
    ch.close()


def test_a_coordinator_killed_before_its_decision_leaves_every_part_rolled_back(tmp_path: Path) -> None:
    """Presumed abort: worker 1 stopped, worker 0 asks it to prepare and is SIGKILLed before
    any answer; worker 1 goes on, prepares (stored), and once worker 0 is back it asks it,
    which has no decision: worker 1's part rolls back (its publish never seen, its ack
    undone); worker 0's part was never applied."""
    broker = Parent(tmp_path, args=("--no-http", "--log-level", "debug"))
    try:
        broker.wait_for(r"worker=1 logger=amqp10.broker msg=.listening on")
        names = [owned_by(0, "txcrash"), owned_by(1, "txcrash")]
        with one_on_each(broker) as conns:
            setup = conns[1].channel()
            for n in names:
                setup.queue_declare(n, durable=True)
                setup.basic_publish("", n, b"kept", pika.BasicProperties(delivery_mode=2))
            tx = conns[0].channel()
            tx.tx_select()
            tags = _held(tx, names, 1)
            for tag in tags:
                tx.basic_ack(tag)
            for n in names:
                tx.basic_publish("", n, b"never", pika.BasicProperties(delivery_mode=2))
            _stored(conns[0], 0)  # (worker 0's delivery of its message is marked in its store)
            pids = broker.worker_pids()
            mark = len(broker.lines)
            os.kill(pids[1], signal.SIGSTOP)
            try:
                tx._impl.tx_commit(lambda *a: None)  # (sent; its answer never comes)
                conns[0].process_data_events(time_limit=0)
                broker.wait_for(r"worker=0 .*its parts asked to prepare on workers \[1\]", mark)
                os.kill(pids[0], signal.SIGKILL)
            finally:
                os.kill(pids[1], signal.SIGCONT)
            broker.wait_for(r"worker 0 \(pid \d+\) ended .*killed by SIGKILL", mark)
            broker.wait_for(r"worker=1 .*prepared transaction \w+ of worker 0: rolled back", mark)
        with one_on_each(broker) as conns:
            assert _counts(conns, names) == {(1, 1)}  # the ack undone, the publish never made
            ch = conns[1].channel()
            for n in names:
                method, _, body = ch.basic_get(n, auto_ack=True)
                assert body == b"kept" and method.redelivered, (n, method)
    finally:
        broker.stop()


def test_an_owner_killed_after_the_decision_commits_its_part_once_on_restart(tmp_path: Path) -> None:
    """Worker 1 prepares and answers, worker 0 stores its decision and applies its own part,
    and worker 1 is SIGKILLed before it reads the commit: restarted, it recovers its
    prepared part and commits it (the coordinator's word, asked again and told again),
    once; the client's tx.commit is answered then."""
    broker = Parent(tmp_path, args=("--no-http", "--log-level", "debug"))
    try:
        broker.wait_for(r"worker=1 logger=amqp10.broker msg=.listening on")
        names = [owned_by(0, "txdecided"), owned_by(1, "txdecided")]
        with one_on_each(broker) as conns:
            setup = conns[1].channel()
            for n in names:
                setup.queue_declare(n, durable=True)
                for body in (b"acked", b"kept"):
                    setup.basic_publish("", n, body, pika.BasicProperties(delivery_mode=2))
            tx = conns[0].channel()
            tx.tx_select()
            tags = _held(tx, names, 1)
            for tag in tags:
                tx.basic_ack(tag)
            for n in names:
                tx.basic_publish("", n, b"committed", pika.BasicProperties(delivery_mode=2))
            pids = broker.worker_pids()
            mark = len(broker.lines)
            answered: list[object] = []
            os.kill(pids[1], signal.SIGSTOP)
            stopped = [pids[1]]
            try:
                tx._impl.tx_commit(answered.append)
                conns[0].process_data_events(time_limit=0)
                broker.wait_for(r"worker=0 .*its parts asked to prepare on workers \[1\]", mark)
                os.kill(pids[0], signal.SIGSTOP)  # (the owner's answer waits for it)
                stopped.append(pids[0])
                os.kill(pids[1], signal.SIGCONT)
                stopped.remove(pids[1])
                broker.wait_for(r"worker=1 .*transaction \w+ of worker 0: prepared here", mark)
                os.kill(pids[1], signal.SIGSTOP)  # (the commit it is told waits for it)
                stopped.append(pids[1])
                os.kill(pids[0], signal.SIGCONT)
                stopped.remove(pids[0])
                broker.wait_for(r"worker=0 .*decided commit, stored; its owners told", mark)
                os.kill(pids[1], signal.SIGKILL)
                stopped.remove(pids[1])
            finally:
                for pid in stopped:
                    os.kill(pid, signal.SIGCONT)
            broker.wait_for(r"worker 1 \(pid \d+\) ended .*killed by SIGKILL", mark)
            broker.wait_for(r"worker=1 .*prepared transaction \w+ of worker 0: committed", mark)
            for _ in range(300):  # (bounded: the commit-ok comes once worker 1 committed)
                if answered:
                    break
                conns[0].process_data_events(time_limit=0.1)
            assert answered, "tx.commit was not answered"
        with one_on_each(broker) as conns:
            assert _counts(conns, names) == {(2, 2)}  # each: its ack applied, its publish made, once
            ch = conns[1].channel()
            for n in names:
                assert [ch.basic_get(n, auto_ack=True)[2] for _ in range(2)] == [b"kept", b"committed"]
    finally:
        broker.stop()
