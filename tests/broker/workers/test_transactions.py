"""Transactions over queues of both workers commit or roll back as one (0-9-1 ``tx``, pika).

``amqp10 broker --workers 2`` on 127.0.0.1; the transactional channel is on worker 0 and
its work reaches a queue worker 0 owns and one worker 1 owns (two-phase over the internal
link: ``amqp10.broker.workers.transactions``). Every wait is bounded; none is timed.
"""

from __future__ import annotations

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
